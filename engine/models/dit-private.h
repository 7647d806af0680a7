/* The DiT family's model struct, shared by its files (dit.c: tables and set-up; dit-forward.c:
 * forward and backward; dit-flow.c: the flow-matching objective; dit-sample.c: sampling). */
#pragma once

#include "engine/models/dit.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

/* Frequency features of the timestep embedding, as in the reference. */
#define DIT_FREQ_DIM 256
/* LayerNorm epsilon of every DiT norm (the reference's 1e-6). */
#define DIT_LN_EPS 1e-6f

/* Tensors of one block, in the order of the reference's state dict. */
enum {
  DB_QKV_W,
  DB_QKV_B,
  DB_PROJ_W,
  DB_PROJ_B,
  DB_FC1_W,
  DB_FC1_B,
  DB_FC2_W,
  DB_FC2_B,
  DB_ADA_W,
  DB_ADA_B,
  DB_COUNT
};

/* The tensors before and after the blocks. */
enum { DT_X_W, DT_X_B, DT_T0_W, DT_T0_B, DT_T2_W, DT_T2_B, DT_Y_TABLE, DT_HEAD_COUNT };
enum { DF_LIN_W, DF_LIN_B, DF_ADA_W, DF_ADA_B, DF_COUNT };

/* What one block keeps from forward for backward. [N, width] with N = B·T, mod [B, 6C]. */
typedef struct {
  float *mod;
  float *h1, *mean1, *rstd1, *m1;
  float *qkv, *att, *lse, *a;
  float *x1;
  float *h2, *mean2, *rstd2, *m2;
  float *f, *g, *o;
  float *x_out; /* the residual stream after the block: the next block's input */
} DitBlockActs;

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

  /* activations (backend memory), for max_batch images */
  void *act_mem;
  float *img;       /* x_t [B, C, H, W] */
  float *target;    /* v target [B, C, H, W] */
  float *t;         /* [B], the timestep fed to the embedding (1000·t) */
  int *labels;      /* [B], num_classes = no label */
  float *tokens_in; /* patchified x_t [N, k_patch] */
  float *x0;        /* the embedded tokens [N, C] (the blocks' first input) */
  float *tfreq, *th, *ths, *temb, *c, *sc; /* [B, 256], [B, C] … */
  DitBlockActs *blocks;
  float *xL; /* the residual stream after the last block (an alias, not an allocation) */
  float *fmod, *fh, *fmean, *frstd, *fm, *fout; /* final layer */
  float *pred;                                  /* [B, C, H, W] */
  float *losses;                                /* [B] */
  /* backward scratch */
  float *dres, *dh, *dm, *dbig, *dqkv, *datt, *da, *dmod, *dsc, *dc, *dtmp, *dimg, *dtok;

  /* host scratch for the objective */
  float *host_img, *host_target, *host_t, *host_losses;
  int *host_labels;

  int last_B;
  gboolean have_targets;
  /* A frozen model (a distillation teacher): no backward scratch, and every block writes the
   * same activation buffers (a block reads its input before it overwrites them). */
  gboolean forward_only;
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
