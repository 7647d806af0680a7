/* The PixArt-α block's tensors (diffusers' BasicTransformerBlock with norm_type
 * "ada_norm_single"): their names, order and shapes, from the shape alone, so the dit family's
 * description (engine/families/dit.c) and the block's runtime (engine/models/pixart-block.h)
 * agree. */
#pragma once

#include <stddef.h>

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
