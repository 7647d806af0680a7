/* A PixArt-α transformer block (diffusers' BasicTransformerBlock with norm_type
 * "ada_norm_single", as PixArtTransformer2DModel stacks them), forward and backward over the
 * backend table: the unit a text-conditioned DiT will stack (docs/t2i-design.md). Not wired into
 * a family yet: nothing a user sets reaches it.
 *
 * For image tokens x [B, N, C], the timestep's modulation temb [B, 6C] (adaLN-single: one
 * projection of the timestep embedding shared by every block, PixArt's t_block) and text tokens
 * ctx [B, M, D] of which example b has klen[b]:
 *   shift1, scale1, gate1, shift2, scale2, gate2 = (scale_shift_table + temb).chunk(6)
 *   x1 = x + gate1 * attn1(LN(x) * (1 + scale1) + shift1)          self-attention
 *   x2 = x1 + attn2(x1, ctx, key padding klen)                      cross-attention, no norm
 *   out = x2 + gate2 * ff(LN(x2) * (1 + scale2) + shift2)          ff: Linear, GELU-tanh, Linear
 * LayerNorms without affine parameters, eps 1e-6; every attention projection has a bias (PixArt's
 * attention_bias); attn2's keys and values read width D (cross_attention_dim; PixArt projects
 * the caption to C first, D = C). Masked text tokens get no weight; an example without text
 * tokens (klen 0) takes nothing from attn2 (its output there is 0 plus to_out.0's bias; see
 * cross_attention_forward in kernels/backend.h). */
#pragma once

#include <stddef.h>

#include "kernels/backend.h"

typedef struct {
  int hidden;    /* C */
  int n_head;    /* dividing C */
  int cross_dim; /* D, the text tokens' width */
  int ff_inner;  /* the MLP's width (PixArt: 4C) */
} CohortPixartShape;

/* The block's tensors, in the order of its parameter table; names below are diffusers'. */
enum {
  PB_TABLE, /* scale_shift_table [6, C] */
  PB_Q1_W,
  PB_Q1_B,
  PB_K1_W,
  PB_K1_B,
  PB_V1_W,
  PB_V1_B,
  PB_O1_W,
  PB_O1_B,
  PB_Q2_W,
  PB_Q2_B,
  PB_K2_W, /* [C, D] */
  PB_K2_B,
  PB_V2_W, /* [C, D] */
  PB_V2_B,
  PB_O2_W,
  PB_O2_B,
  PB_FF1_W, /* ff.net.0.proj [F, C] */
  PB_FF1_B,
  PB_FF2_W, /* ff.net.2 [C, F] */
  PB_FF2_B,
  PB_COUNT
};

/* Tensor p's name below "transformer_blocks.N." (e.g. "attn2.to_k.weight"). */
const char *cohort_pixart_block_name(int p);
/* Tensor p's shape: returns its rank (1 or 2) and fills dims (PyTorch's [out, in] for
 * weights). */
int cohort_pixart_block_dims(const CohortPixartShape *s, int p, int dims[2]);
/* Tensor p's values. */
size_t cohort_pixart_block_numel(const CohortPixartShape *s, int p);

/* Pointers to the block's tensors (backend memory); for gradients, NULL skips one (frozen). */
typedef struct {
  float *t[PB_COUNT];
} CohortPixartWeights;

/* What forward keeps for backward, and backward's scratch, for up to B examples of N image
 * tokens and M text tokens (backend memory, laid out by cohort_pixart_acts_layout). */
typedef struct {
  float *mod;                                     /* [B, 6C] */
  float *h1, *m1, *q1, *k1, *v1, *att1, *a1, *x1; /* [B, N, C] */
  float *mean1, *rstd1, *lse1, *lse2;             /* [B, N], [B, N], [B, NH, N] twice */
  float *q2, *att2, *a2, *x2, *h2, *m2, *o, *out; /* [B, N, C]; out: the block's output */
  float *k2, *v2;                                 /* [B, M, C] */
  float *mean2, *rstd2;                           /* [B, N] */
  float *f, *g;                                   /* [B, N, F] */
  /* backward */
  float *dmod, *da, *datt, *dq, *dk, *dv, *dm, *dh, *dbig;
} CohortPixartActs;

/* Floats cohort_pixart_acts_layout needs, each tensor rounded up to 16 floats (64 bytes). */
size_t cohort_pixart_acts_floats(const CohortPixartShape *s, int B, int N, int M);
/* Points `a` into `mem` (cohort_pixart_acts_floats floats of backend memory). */
void cohort_pixart_acts_layout(CohortPixartActs *a, float *mem, const CohortPixartShape *s, int B,
                               int N, int M);

/* The block on x [B, N, C] into a->out, keeping what backward needs. temb [B, 6C], ctx
 * [B, M, D], klen int [B] (backend memory; NULL: all M tokens of every example). */
void cohort_pixart_block_forward(const CohortBackend *be, const CohortPixartShape *s,
                                 const CohortPixartWeights *w, CohortPixartActs *a, const float *x,
                                 const float *temb, const float *ctx, const int *klen, int B, int N,
                                 int M);
/* Backward of the last forward with these inputs: dres holds d(out) and is overwritten with
 * d(x); the weight gradients (grads, NULL entries skipped), dtemb [B, 6C] and dctx [B, M, D]
 * accumulate (either NULL: not needed). */
void cohort_pixart_block_backward(const CohortBackend *be, const CohortPixartShape *s,
                                  const CohortPixartWeights *w, const CohortPixartWeights *grads,
                                  CohortPixartActs *a, const float *x, const float *ctx,
                                  const int *klen, int B, int N, int M, float *dres, float *dtemb,
                                  float *dctx);
