/* The VAE of latent diffusion: Hugging Face diffusers' AutoencoderKL, forward through the backend
 * table, loaded from (and saved to) a diffusers folder: config.json and
 * diffusion_pytorch_model.safetensors with diffusers' tensor names.
 *
 * Architecture (diffusers' Encoder, Decoder and DiagonalGaussianDistribution):
 *   encoder: conv_in (3x3) → per entry of block_out_channels a DownEncoderBlock2D of
 *            layers_per_block ResnetBlock2D and, but for the last, a Downsample2D (zero padding
 *            of one column right and one row bottom, then a 3x3 stride-2 convolution) → the
 *            mid-block (ResnetBlock2D, single-head self-attention with its own GroupNorm when
 *            mid_block_add_attention, ResnetBlock2D) → GroupNorm, SiLU, conv_out (3x3) to
 *            2 · latent_channels → quant_conv (1x1, when use_quant_conv);
 *   posterior: the first latent_channels channels are the mean, the rest the log-variance
 *            (clamped to [-30, 20]);
 *   decoder: post_quant_conv (1x1, when use_post_quant_conv) → conv_in → the mid-block → per
 *            entry of the reversed channels an UpDecoderBlock2D of layers_per_block + 1
 *            ResnetBlock2D and, but for the last, an Upsample2D (nearest ×2, then a 3x3
 *            convolution) → GroupNorm, SiLU, conv_out to out_channels.
 *   ResnetBlock2D: GroupNorm, SiLU, 3x3 conv, GroupNorm, SiLU, 3x3 conv, plus the input (through
 *            a 1x1 conv_shortcut when the channels change). Every GroupNorm has norm_num_groups
 *            groups and eps 1e-6; attention scales by 1/sqrt(channels).
 * Latents for diffusion are (mean − shift_factor) · scaling_factor, and decoding undoes that
 * (SD 1.x/2.x: scaling 0.18215, no shift; SD3 and FLUX: 16 channels with a shift).
 *
 * The VAE is frozen where latent diffusion uses it; `cohort-vae train` (and tests) also train
 * one, with a reconstruction and KL loss (vae-train.c). */
#pragma once

#include <glib.h>

#include "kernels/backend.h"

G_BEGIN_DECLS

#define COHORT_VAE_ERROR (cohort_vae_error_quark())
GQuark cohort_vae_error_quark(void);

/* The most entries block_out_channels may have (SD's VAE has 4). */
#define COHORT_VAE_MAX_BLOCKS 8

/* What config.json says (the keys of diffusers' AutoencoderKL). */
typedef struct {
  int in_channels, out_channels; /* image channels: 3 (RGB) or 1 */
  int n_blocks;
  int block_out_channels[COHORT_VAE_MAX_BLOCKS];
  int layers_per_block;
  int latent_channels;
  int norm_num_groups;
  double scaling_factor;
  double shift_factor; /* 0 when config.json has null or nothing */
  gboolean use_quant_conv, use_post_quant_conv, mid_block_add_attention;
  int sample_size; /* the image size it was trained at (informative) */
} CohortVaeConfig;

/* Reads a diffusers AutoencoderKL config.json. Refused, with one line naming the file, the key,
 * the value and what is allowed: another _class_name, block types other than
 * DownEncoderBlock2D / UpDecoderBlock2D, an act_fn other than "silu", channels not divisible by
 * norm_num_groups, sizes out of range, a missing required key. Keys it does not use (
 * force_upcast, latents_mean, …) are ignored, as diffusers ignores unknown ones. */
gboolean cohort_vae_config_read(const char *path, CohortVaeConfig *cfg, GError **error);
/* Checks a config built in code by the same rules; `source` names it in messages. */
gboolean cohort_vae_config_check(const CohortVaeConfig *cfg, const char *source, GError **error);
/* config.json text for `cfg`, as diffusers writes it (its keys, "_class_name": "AutoencoderKL"). */
char *cohort_vae_config_to_json(const CohortVaeConfig *cfg);
/* How many times the encoder halves the image: 2^(n_blocks − 1). */
int cohort_vae_downsample_factor(const CohortVaeConfig *cfg);

typedef struct CohortVae CohortVae;

/* What a VAE is built to do. */
typedef enum {
  COHORT_VAE_ENCODE = 1 << 0,
  COHORT_VAE_DECODE = 1 << 1,
  COHORT_VAE_TRAIN = 1 << 2, /* both halves, every activation kept, gradients */
} CohortVaeUse;

/* Finds the VAE of a diffusers folder: `dir` itself when it has config.json, else dir/vae (a
 * whole pipeline folder). Returns the folder (g_free it) or NULL with an error naming both. */
char *cohort_vae_find_folder(const char *dir, GError **error);

/* Loads a diffusers AutoencoderKL folder (see cohort_vae_find_folder) for images of
 * image_size × image_size (a multiple of the downsampling factor) in batches of up to max_batch.
 * The weights file is diffusion_pytorch_model.safetensors (or .fp16.safetensors; F32, F16 and
 * BF16 convert); loading is strict: every tensor the config implies must be there with its
 * shape, and nothing else. The mid-block attention may use diffusers' older names (query, key,
 * value, proj_attn) instead of to_q, to_k, to_v, to_out.0. Weights holding a NaN or an
 * infinity are refused. Errors name the file and tensor. */
CohortVae *cohort_vae_load(const CohortBackend *be, const char *dir, CohortVaeUse use,
                           int max_batch, int image_size, GError **error);
/* A VAE of `cfg` with diffusers' initialisation (PyTorch's default for Conv2d and Linear, ones
 * and zeros for GroupNorm) from `seed`: deterministic. */
CohortVae *cohort_vae_new(const CohortBackend *be, const CohortVaeConfig *cfg, CohortVaeUse use,
                          int max_batch, int image_size, guint64 seed, GError **error);
void cohort_vae_free(CohortVae *vae);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortVae, cohort_vae_free)

const CohortVaeConfig *cohort_vae_get_config(const CohortVae *vae);
int cohort_vae_image_size(const CohortVae *vae);
/* Side of the latents: image_size / the downsampling factor. */
int cohort_vae_latent_size(const CohortVae *vae);
int cohort_vae_max_batch(const CohortVae *vae);
/* SHA-256 (hex) of what the VAE computes from: config.json's bytes and the weights file's bytes
 * (for a VAE made by cohort_vae_new, of the config text and the weights as written). The
 * latent cache keys by it. */
const char *cohort_vae_sha256(const CohortVae *vae);
/* The folder it was loaded from (NULL for one made in code). */
const char *cohort_vae_folder(const CohortVae *vae);

/* Writes the VAE as a diffusers folder: config.json and diffusion_pytorch_model.safetensors
 * (diffusers' current names), each through a temporary file renamed into place. Weights
 * holding a NaN or an infinity (a diverged training) are refused naming the tensor, before
 * anything is written. */
gboolean cohort_vae_save(const CohortVae *vae, const char *dir, GError **error);
/* Sets scaling_factor (and shift_factor) of the config, e.g. after measuring the latents. */
void cohort_vae_set_scaling(CohortVae *vae, double scaling_factor, double shift_factor);

/* Encodes B images [B, in_channels, S, S] in [-1, 1] (host memory) to the posterior's moments
 * [B, 2 · latent_channels, s, s] (host): mean then log-variance (before clamping), unscaled. */
void cohort_vae_encode_moments(CohortVae *vae, const float *images, int B, float *moments);
/* Encodes to latents for diffusion: (mean − shift_factor) · scaling_factor, [B, L, s, s]. */
void cohort_vae_encode(CohortVae *vae, const float *images, int B, float *latents);
/* Decodes B latents [B, L, s, s] of diffusion's scale (divided by scaling_factor, plus
 * shift_factor, first) to images [B, out_channels, S, S], not clamped. */
void cohort_vae_decode(CohortVae *vae, const float *latents, int B, float *images);
/* The decoder on raw latents z (no scaling), as diffusers' AutoencoderKL.decode. */
void cohort_vae_decode_raw(CohortVae *vae, const float *z, int B, float *images);

/* Training (COHORT_VAE_TRAIN): one step's loss on B images in [-1, 1] (host) with posterior
 * noise `eps` [B, L, s, s] (host): z = mean + exp(logvar / 2) · eps, decoded, loss =
 * mean((decoded − images)²) + kl_weight · mean over latent values of
 * ½ (mean² + exp(logvar) − 1 − logvar). *rec and *kl (may be NULL) get the two terms. */
float cohort_vae_train_forward(CohortVae *vae, const float *images, const float *eps, int B,
                               float kl_weight, double *rec, double *kl);
/* Adds d(loss)/d(parameters) of the last train_forward into the gradients. */
void cohort_vae_train_backward(CohortVae *vae);
/* The parameter table and buffers (backend memory), for optimizers and tests. */
guint cohort_vae_n_tensors(const CohortVae *vae);
const char *cohort_vae_tensor_name(const CohortVae *vae, guint i);
size_t cohort_vae_n_params(const CohortVae *vae);
float *cohort_vae_params(CohortVae *vae);
float *cohort_vae_grads(CohortVae *vae); /* NULL unless COHORT_VAE_TRAIN */
/* Host copies of the parameters, and back. */
void cohort_vae_download_params(const CohortVae *vae, float *host);
void cohort_vae_upload_params(CohortVae *vae, const float *host);
/* The offset (in floats) and size of parameter tensor `name`, or FALSE when there is none. */
gboolean cohort_vae_find_param(const CohortVae *vae, const char *name, size_t *offset,
                               size_t *numel);

/* What cohort_vae_fit does. */
typedef struct {
  int steps;        /* optimizer steps */
  int batch;        /* images per step, at most the VAE's max_batch */
  double lr;        /* AdamW's peak learning rate (β 0.9, 0.999, no weight decay), after a
                       linear warm-up, then a cosine decay to a tenth */
  int warmup;       /* steps of warm-up */
  double kl_weight; /* of the KL term against the reconstruction's mean squared error */
  guint64 seed;     /* data order and posterior noise */
} CohortVaeFitOptions;

/* Called every few steps with the step (1-based), the loss and its two terms, and images/s. */
typedef void (*CohortVaeFitLog)(int step, double loss, double rec, double kl, double images_per_s,
                                gpointer user_data);

/* Trains a COHORT_VAE_TRAIN VAE on `n` images [n, in_channels, S, S] in [-1, 1] (host): each
 * epoch in a seeded random order, posterior noise a function of (seed, step, example); the
 * same seed and thread count give the same weights. Then sets scaling_factor to one over the
 * standard deviation of the posterior means of (up to 1024 of) the images, as SD's 0.18215 was
 * measured, with no shift. FALSE with an error when the loss stops being finite. */
gboolean cohort_vae_fit(CohortVae *vae, const float *images, gsize n,
                        const CohortVaeFitOptions *options, CohortVaeFitLog log, gpointer user_data,
                        GError **error);

G_END_DECLS
