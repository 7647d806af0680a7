/* The VAE's internals, shared by its files (vae.c: the parameter table, the two networks as lists
 * of ops, memory; vae-io.c: folders in and out; vae-run.c: running the ops forward and backward;
 * vae-train.c: the training loss). Each half of the network is a VaeGraph: tensors (activations
 * per example: channels, height, width) and ops in execution order that read and write them, so
 * backward is the same list in reverse. */
#pragma once

#include "engine/base/tensor.h"
#include "engine/models/vae.h"

G_BEGIN_DECLS

/* GroupNorm's epsilon everywhere in diffusers' Encoder and Decoder. */
#define VAE_GN_EPS 1e-6f
/* diffusers' DiagonalGaussianDistribution clamps the log-variance to this range. */
#define VAE_LOGVAR_MIN -30.0f
#define VAE_LOGVAR_MAX 20.0f

typedef enum {
  VOP_CONV, /* in → out; w [Cout, Cin, K, K] (or a Linear's [Cout, Cin]), bias b */
  VOP_PAD,  /* in → out, one zero column right and one zero row bottom */
  VOP_GN,   /* in → out; w, b; statistics at `stat` */
  VOP_SILU, /* in → out */
  VOP_ADD,  /* in + in2 → out */
  VOP_UP,   /* in → out, nearest ×2 */
  VOP_SDPA, /* softmax(q^T k / sqrt(C)) applied to v: q = in, k = in2, v = in3 → out */
} VaeOpKind;

typedef struct {
  VaeOpKind kind;
  int in, in2, in3, out; /* tensor ids; -1 when unused */
  int w, b;              /* parameter table indices; -1 when unused */
  int K, stride, pad;    /* VOP_CONV */
  size_t stat;           /* VOP_GN: offset of mean [B, G], then rstd [B, G], in the stats */
  int probs;             /* VOP_SDPA when training: the tensor keeping the probabilities */
} VaeOp;

typedef struct {
  int C, H, W;  /* per example; VOP_SDPA's probabilities are [T, T, 1] */
  int last_use; /* the last op reading it (memory planning) */
  int slot;     /* the buffer it lives in */
  float *data;  /* backend memory for max_batch examples */
  float *grad;  /* training only */
} VaeTensor;

typedef struct {
  GArray *ops;     /* of VaeOp */
  GArray *tensors; /* of VaeTensor */
  int input, output;
  size_t stat_floats; /* per example: GroupNorm statistics of all its norms */
  float *stats;       /* backend memory, max_batch × stat_floats */
  GPtrArray *slots;   /* backend buffers (freed with the graph) */
  gboolean allocated;
} VaeGraph;

struct CohortVae {
  const CohortBackend *be;
  CohortVaeConfig cfg;
  CohortVaeUse use;
  int max_batch, image_size, latent_size;
  GArray *table; /* of CohortTensorInfo (names owned) */
  size_t n_params;
  float *params, *grads;
  VaeGraph enc, dec;
  float *scratch; /* attention's scores and backward temporaries */
  size_t scratch_floats;
  char *sha256;
  char *folder;
  /* training: the last train_forward's host values */
  float *target; /* backend: the images the decoder reconstructs */
  float *losses; /* backend [max_batch] */
  float *h_moments, *h_eps, *h_dmoments;
  int last_B;
  float kl_weight;
};

static inline VaeOp *vae_op(const VaeGraph *g, int i)
{
  return &g_array_index(g->ops, VaeOp, i);
}

static inline VaeTensor *vae_tensor(const VaeGraph *g, int i)
{
  return &g_array_index(g->tensors, VaeTensor, i);
}

static inline const CohortTensorInfo *vae_param(const CohortVae *v, int i)
{
  return &g_array_index(v->table, CohortTensorInfo, i);
}

/* vae.c: builds the table and both graphs for cfg (no memory yet). */
void cohort_vae_build(CohortVae *v);
/* vae.c: allocates parameters (gradients when training) and the activations of the graphs the
 * use needs; FALSE with an error naming the sizes when out of memory. */
gboolean cohort_vae_alloc(CohortVae *v, GError **error);
/* vae.c: a VAE of cfg with its table and memory, parameters zero. */
CohortVae *cohort_vae_create(const CohortBackend *be, const CohortVaeConfig *cfg, CohortVaeUse use,
                             int max_batch, int image_size, GError **error);

/* vae-run.c: the graph forward on B examples, its input already in place. */
void cohort_vae_graph_forward(CohortVae *v, VaeGraph *g, int B);
/* vae-run.c: backward through the graph from the gradient of its output (already in place),
 * accumulating parameter gradients; the input's gradient only when `input_grad`. Zeroes the
 * activation gradients first. */
void cohort_vae_graph_backward(CohortVae *v, VaeGraph *g, int B, gboolean input_grad);

static inline size_t vae_numel(const VaeTensor *t, int B)
{
  return (size_t)B * t->C * t->H * t->W;
}

G_END_DECLS
