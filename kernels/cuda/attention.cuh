/* Internal to the CUDA backend's attention: the shape both of its paths read (attention.cu's
 * fused kernels, attention-gemm.cu's batched products). */
#pragma once

#include "cuda.cuh"

typedef struct {
  int Tq, Tk, NH, NKV, G, hd; /* query and key rows per example; G = NH / NKV */
  int qtiles, ktiles;         /* blocks per (batch, head) over the queries, over the keys */
  size_t ldq, ldk, ldv, ldo;  /* row strides of q, k, v and of out (and dout) */
  int causal;                 /* query i sees keys 0..i + off; else all it may see */
  const int *klen;            /* keys example b sees (clamped to [0, Tk]); NULL: all Tk */
  /* the queries' offset among the keys: 0, except over a key/value cache (the forward only),
   * where the Tq queries are the last of Tk positions */
  int off;
  float scale;
} AttnShape;

/* Query heads per batched product on the product path for `mats` [Tq, Tk] matrices per head
 * (1 forward, 2 backward): the most of one group-position's NKV heads whose matrices fit the
 * limit (cohort_cuda_set_attention_limit); 0 when the shape is not the product path's (a key
 * length per example, a key/value cache, no lse, or one head's matrices over the limit): then
 * the fused kernels run. */
int cohort_attn_gemm_heads(const AttnShape &s, int mats, bool has_lse);

/* The forward on the product path (heads per product `jc` from cohort_attn_gemm_heads): per
 * example and head group, S = scale q k^T (cuBLAS), a row softmax that writes P and lse, then
 * out = P v. `work` holds jc [Tq, Tk] floats. */
void cohort_attn_gemm_forward(float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int jc, float *work, const AttnShape &s);

/* The backward on the product path: D [B, NH, Tq] are the rows' dout . out; `work` holds
 * 2 jc [Tq, Tk] floats. Overwrites dq, dk and dv. */
void cohort_attn_gemm_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const float *lse, const float *D,
                               int B, int jc, float *work, const AttnShape &s);
