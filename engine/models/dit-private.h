/* The DiT family's model struct, shared by its files (dit.c: set-up from the family's
 * description, engine/families/dit.h; dit-forward.c: forward and backward; dit-flow.c: the
 * flow-matching objective; dit-sample.c: sampling). */
#pragma once

#include "engine/families/dit.h"
#include "engine/models/dit.h"
#include "engine/models/pixart-block.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

/* LayerNorm epsilon of every DiT norm (the reference's 1e-6). */
#define DIT_LN_EPS 1e-6f

typedef struct {
  CohortModel base;
  CohortDitShape shape;
  int T;       /* tokens per image */
  int k_patch; /* values per patch: channels · patch² */

  /* vae_from: the VAE's folder (resolved) and the image size it decodes to; NULL in pixel
   * space. The VAE itself is loaded (for decoding only) when a sample first needs it. */
  char *vae_dir;
  int pixel_size;
  struct CohortVae *vae;

  /* the objective's choices, from the config */
  int timestep_logit_normal;
  double timestep_shift;
  double cfg_dropout;
  guint64 seed;

  /* activations (backend memory), for max_batch images, laid out by the description */
  void *act_mem;
  CohortDitActs acts;
  float *xL; /* the residual stream after the last block (an alias, not an allocation) */

  /* host scratch for the objective */
  float *host_img, *host_target, *host_t, *host_losses;
  int *host_labels;

  /* the text layout (text_encoder): its activations, each block's (PixArt block acts inside
   * tacts.blocks), and host scratch for a batch's text tokens packed to its longest caption */
  gboolean text;
  CohortPixartShape pshape;
  CohortDitTextActs tacts;
  CohortPixartActs *pacts;
  float *host_text;
  int *host_klen;
  int last_M;
  struct CohortTextEncoder *encoder; /* samples' prompts: opened on first use */

  int last_B;
  gboolean have_targets;
  /* A frozen model (a distillation teacher): no backward scratch, and every block writes the
   * same activation buffers (a block reads its input before it overwrites them). */
  gboolean forward_only;
  /* activation_checkpointing (COHORT_ACTS_CHECKPOINT): the blocks share one set of buffers,
   * which holds block acts_block's activations (-1: none); backward recomputes each block
   * into it from the block's input before going through it. */
  gboolean checkpoint;
  int acts_block;
} Dit;

static inline Dit *dit_of(const CohortModel *m)
{
  return (Dit *)m;
}

/* Table indices of block `l`'s tensor `p`, and of final-layer tensor `p` (head tensors: `p`). */
static inline guint dit_bi(const Dit *d, int l, int p)
{
  (void)d;
  return DT_HEAD_COUNT + (guint)l * DB_COUNT + (guint)p;
}
static inline guint dit_fi(const Dit *d, int p)
{
  return DT_HEAD_COUNT + (guint)d->shape.n_layer * DB_COUNT + (guint)p;
}

/* Parameter pointer (in `base`, the params or grads buffer) of block `l`, tensor `p`. */
static inline float *dit_bp(const Dit *d, float *base, int l, int p)
{
  return base + d->base.tensors[DT_HEAD_COUNT + l * DB_COUNT + p].offset;
}
/* …of head tensor `p` (x_embedder, t_embedder, y_embedder). */
static inline float *dit_hp(const Dit *d, float *base, int p)
{
  return base + d->base.tensors[p].offset;
}
/* …of final-layer tensor `p`. */
static inline float *dit_fp(const Dit *d, float *base, int p)
{
  return base + d->base.tensors[DT_HEAD_COUNT + d->shape.n_layer * DB_COUNT + p].offset;
}

/* dit-forward.c: y [N, out] = x [N, in] @ W^T + b with table tensor `w` (PyTorch's [out, in]
 * layout) and its bias w + 1, plus its LoRA adapter if any. */
void cohort_dit_linear(Dit *d, float *y, const float *x, guint w, int N, int in, int out);
/* dx = dy @ W (beta 0 overwrites, 1 adds; dx NULL skips it), dW += dy^T @ x, db += colsum
 * (each skipped when frozen), and the adapter's gradients and share of dx. */
void cohort_dit_linear_back(Dit *d, float *dx, float beta, const float *dy, const float *x, guint w,
                            int N, int in, int out);

/* dit.c: N(0, std²) values from `seed` (Box-Muller). */
void cohort_dit_fill_normal(float *dst, size_t n, double std, guint64 seed);

/* dit-text.c: the text layout (shape.text_dim > 0, docs/t2i-design.md). Its initialisation
 * (PixArt's), and the network on the batch already in d->tacts (backend memory) with M text
 * tokens per example, into d->tacts.pred; backward from d->tacts.dimg. */
void cohort_dit_text_init_tensor(Dit *d, guint64 seed, guint i, float *dst);
void cohort_dit_text_net_forward(Dit *d, int B, int M);
void cohort_dit_text_net_backward(Dit *d, int B, int M);
/* Uploads a batch (x_t, t in [0, 1], text [B, M, D] and klen [B] in host memory) and runs the
 * text network into d->tacts.pred. */
void cohort_dit_text_run(Dit *d, const float *x_t, const float *t, const float *text,
                         const int *klen, int B, int M);

/* dit-sample.c: the text layout's sample op (prompts, guidance; see dit.h). */
gboolean cohort_dit_text_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                                GError **error);

/* dit.c: the fixed 2-D sine-cosine position table into the model's buffer. */
void cohort_dit_fill_pos_embed(Dit *d);
/* dit-import.c: init_from (the family's import_weights). */
gboolean cohort_dit_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error);
/* The weights file cohort_dit_import reads for `path`: itself, or a diffusers folder's. */
char *cohort_dit_import_file(const char *path);

/* dit-forward.c: the network on the batch already in d->img, d->t, d->labels (backend
 * memory); writes d->pred. */
void cohort_dit_net_forward(Dit *d, int B);
/* Backward from d->dimg (d pred), accumulating into the gradients. */
void cohort_dit_net_backward(Dit *d, int B);

/* dit-flow.c: builds x_t, the target v = ε − x₀, t and the labels (after label dropout) of
 * the batch in the host scratch (host_img, host_target, host_t, host_labels). */
void cohort_dit_prepare(Dit *d, const CohortBatch *b);
/* Uploads a batch (x_t, t in [0, 1], labels in host memory; the embedding sees 1000·t) and
 * runs the network into d->pred. */
void cohort_dit_run(Dit *d, const float *x_t, const float *t, const int *labels, int B);

/* dit-distill.c: the family's distiller (engine/model/distill.h) and its teacher rules. */
CohortDistill *cohort_dit_distill_new(CohortModel *student, CohortModel *teacher,
                                      const CohortDistillSettings *settings, GError **error);
gboolean cohort_dit_check_teacher(const CohortConfig *student, const CohortConfig *teacher,
                                  const char *teacher_dir, GError **error);

/* dit-flow.c: the flow-matching objective on a CohortBatch: draws t and ε per sample, builds
 * x_t and the target on the host, uploads, runs the network, returns the mean MSE. */
float cohort_dit_forward_batch(CohortModel *m, const CohortBatch *batch, CohortForwardMode mode);
void cohort_dit_backward(CohortModel *m, float grad_scale);
void cohort_dit_eval_batch(CohortModel *m, const CohortBatch *batch, double *sums);

G_END_DECLS
