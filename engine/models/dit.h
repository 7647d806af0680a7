/* The "dit" family: a class-conditional diffusion transformer (DiT, adaLN-Zero) trained with
 * rectified flow, as Wan and SD3 train it.
 *
 * Architecture and tensor names follow the public DiT reference (facebookresearch/DiT,
 * models.py) with learn_sigma=False, so its PyTorch module loads Cohort's file with
 * strict=True: x_embedder.proj (a Conv2d of kernel and stride patch_size, i.e. patchify and a
 * linear map), a fixed 2-D sine-cosine pos_embed (a buffer), t_embedder.mlp (sinusoidal
 * features of 1000·t → Linear → SiLU → Linear), y_embedder.embedding_table (num_classes rows
 * and one "no label" row for classifier-free guidance), n_layer blocks (LayerNorm without
 * affine, adaLN modulation shift/scale/gate from SiLU(c), non-causal attention, tanh-GELU MLP
 * of 4× width), and final_layer (LayerNorm, modulation, Linear to patch_size² × channels
 * values per token, then un-patchify). Linear weights are PyTorch's [out, in].
 *
 * The objective (engine/models/dit-flow.c): x_t = (1 − t)·x₀ + t·ε, target v = ε − x₀, mean
 * squared error; t and ε of an example are functions of (seed, epoch, example index). */
#pragma once

#include "engine/families/dit.h" /* CohortDitShape */
#include "engine/model/model.h"

G_BEGIN_DECLS

/* The "dit" family for the model registry. */
extern const CohortModelClass cohort_dit_class;

/* The model's shape. With vae_from, image_size and channels are the latents' (the pixels'
 * size divided by the VAE's factor, its latent_channels). */
const CohortDitShape *cohort_dit_shape(const CohortModel *m);

/* The side and channels of what the DiT of `cfg` sees: image_size and image_channels, or with
 * vae_from the latents of its VAE (whose config.json is read); FALSE with an error naming the
 * key when the VAE folder is unreadable or does not fit image_size / image_channels. */
gboolean cohort_dit_latent_geometry(const CohortConfig *cfg, const char *source, int *size,
                                    int *channels, GError **error);

/* The text layout's images: `n` samples, sample i of the caption embedded in emb[which[i]]
 * (len[which[i]] rows of text_dim floats, host memory; M the longest, at least 1), from noise of
 * `seed`, with classifier-free guidance cfg_scale against the empty caption, into host `out`
 * [n, C, H, W] in [-1, 1]. The family's sample op (sample_prompts: a row of 8 per caption, else
 * sample_count images of sample_prompt; the event's "rows" are the captions) calls it. */
void cohort_dit_text_generate(CohortModel *m, const float *const *emb, const int *len, int M,
                              const int *which, int n, guint64 seed, int steps, double cfg_scale,
                              float *out);

/* Images of `n` samples from cohort_dit_generate: decoded through the VAE (loaded on first use,
 * kept with the model) for a latent DiT, a copy in pixel space. *pixels gets [n, *C, *S, *S]
 * in [-1, 1] (not clamped; g_free it). */
gboolean cohort_dit_to_pixels(CohortModel *m, const float *samples, int n, float **pixels, int *C,
                              int *S, GError **error);

/* The velocity the model predicts for a batch, without a loss: x_t [B, C, H, W] and t [B]
 * (in [0, 1]) in HOST memory, labels [B] (num_classes = no label); writes v [B, C, H, W] to
 * host `v`. B <= max_batch. Used by sampling and by tests. */
void cohort_dit_velocity(CohortModel *m, const float *x_t, const float *t, const int *labels, int B,
                         float *v);

/* The objective on a batch given explicitly (host memory: x_t, t in [0, 1], labels, target
 * v = ε − x₀): the mean over the batch of per-example mean squared errors, keeping what
 * backward (ops->backward) needs. The trainer's forward draws these per sample and calls it;
 * tests call it to compare with a reference. */
float cohort_dit_forward_given(CohortModel *m, const float *x_t, const float *t, const int *labels,
                               const float *target, int B);

/* The text layout's objective on a batch given explicitly (host memory, as for
 * cohort_dit_forward_given), with text [B, M, text_dim] the encoder's hidden states (rows past
 * klen[b] are not read) instead of labels. Tests call it to compare with a reference. */
float cohort_dit_text_forward_given(CohortModel *m, const float *x_t, const float *t,
                                    const float *text, const int *klen, int M, const float *target,
                                    int B);

/* Distillation (engine/models/dit-distill.c) on a batch given explicitly, in host memory as
 * for cohort_dit_forward_given: the teacher's velocity at (x_t, t, labels), guided by the
 * settings' cfg_scale, and the student's loss against it and against `target`, keeping what
 * the distiller's backward needs. `d` comes from cohort_distill_new with a dit student.
 * Returns the mixed loss; parts as engine/model/distill.h says. The trainer's distill forward draws
 * these per sample and calls it; tests call it to compare with a reference. */
float cohort_dit_distill_forward_given(CohortDistill *d, const float *x_t, const float *t,
                                       const int *labels, const float *target, int B,
                                       double *parts);

/* Sampling (engine/models/dit-sample.c): Euler integration of the learned ODE from t = 1 to 0
 * in cfg->sample_steps steps with classifier-free guidance cfg->cfg_scale, into a PNG grid
 * with one row per class shown and a fixed noise seed (grids of successive steps compare).
 * This is the family's CohortModelOps.sample; the event gets "image" (the PNG's path),
 * "rows" (the class of each row) and "steps". */
gboolean cohort_dit_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                           GError **error);

/* Draws `n` images of classes `labels` (num_classes = unconditional) from noise of `seed`,
 * into host `out` [n, C, H, W] in [-1, 1]. */
void cohort_dit_generate(CohortModel *m, const int *labels, int n, guint64 seed, int steps,
                         double cfg_scale, float *out);

G_END_DECLS
