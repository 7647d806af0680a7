/* Self-attention as batched matrix products (cuBLAS) around row kernels: the path the training
 * shapes take (attention.cu's fused kernels keep cross-attention, the key/value cache and
 * sequences whose [T, T] matrices do not fit the limit).
 *
 * Why: the fused kernels run on CUDA cores with one warp per row and read every key tile once
 * per 8 rows; on the first H200 run they took 78% of a GPT-2 124M bf16 step (284 of 364 ms:
 * forward 6.3 ms, backward 17.4 ms a layer at batch 16 x 1024). Here each product is one
 * strided-batched cuBLAS call over a group of heads of one example, so the time is that of
 * cuBLAS's tiled products (the causal half computed and masked: twice the needed work, still
 * far faster), and the [T, T] matrices live only in scratch, a chunk of heads at a time.
 *
 * Numbers: products in fp32 (fp32 mode: no TF32, as every fp32 GEMM of the backend; tf32 mode:
 * TF32), and in bf16/fp16 mode on TF32 tensor cores: operands keep 10 mantissa bits there, more
 * than the mode's 7 (bf16) promise, and the row softmax is fp32 in every mode. The exp and the
 * sums are those of the fused kernels (same max, the same lse), in another order. Grouped-query
 * heads: a key/value head's gradients add its query heads' in head order (beta 1 after the
 * first), as the op table's contract says. */
#include "attention.cuh"

#include <math.h>

#define ROWS_PER_BLOCK 8 /* warps per block in the row kernels */

static size_t attention_limit = (size_t)256 << 20;

void cohort_cuda_set_attention_limit(size_t bytes)
{
  attention_limit = bytes ? bytes : (size_t)256 << 20;
}

int cohort_attn_gemm_heads(const AttnShape &s, int mats, bool has_lse)
{
  if (s.klen || s.off || !has_lse || s.Tq != s.Tk)
    return 0;
  size_t per_head = (size_t)mats * s.Tq * s.Tk * sizeof(float);
  size_t fit = per_head ? attention_limit / per_head : 0;
  if (fit == 0)
    return 0;
  return fit < (size_t)s.NKV ? (int)fit : s.NKV;
}

/* Compute type of the products in the current GEMM mode (see the top of the file). */
static cublasComputeType_t compute_type(void)
{
  return cohort_cuda_get_gemm_mode() == COHORT_GEMM_FP32 ? CUBLAS_COMPUTE_32F
                                                         : CUBLAS_COMPUTE_32F_FAST_TF32;
}

/* Row-major C = alpha op(A) op(B) + beta C, `batch` times with strides sA, sB, sC (floats):
 * computed column-major as C^T = op(B)^T op(A)^T, operands swapped, flags kept (as gemm.cu). */
static bool bgemm(cublasHandle_t h, int ta, int tb, int M, int N, int K, float alpha,
                  const float *A, size_t lda, long long sA, const float *B, size_t ldb,
                  long long sB, float beta, float *C, size_t ldc, long long sC, int batch)
{
  return cohort_cuda_blas_ok(
      cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 N, M, K, &alpha, B, CUDA_R_32F, (int)ldb, sB, A, CUDA_R_32F,
                                 (int)lda, sA, &beta, C, CUDA_R_32F, (int)ldc, sC, batch,
                                 compute_type(), CUBLAS_GEMM_DEFAULT),
      "attention (cublasGemmStridedBatchedEx)");
}

/* Where the chunk's rows keep their lse and D: row r = jj * Tq + i of a chunk whose first head
 * is h0 (heads h0, h0 + G, ...) of example b reads index (b NH + h0 + jj G) Tq + i. */
typedef struct {
  int Tq, Tk, G, causal;
  size_t rows;
} Chunk;

__device__ static inline size_t row_index(size_t r, const Chunk &c)
{
  return (r / c.Tq) * (size_t)c.G * c.Tq + r % c.Tq;
}

/* Softmax of each row of S in place (scores already scaled), keys past i masked when causal;
 * lse of the row as the fused kernel keeps it (max + log of the sum). One warp per row. */
__global__ static void softmax_rows_kernel(float *S, float *lse, Chunk c)
{
  int lane = threadIdx.x % COHORT_WARP;
  size_t r = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (r >= c.rows)
    return;
  int i = (int)(r % c.Tq), kend = c.causal ? i + 1 : c.Tk;
  float *row = S + r * c.Tk;
  float m = -INFINITY;
  for (int j = lane; j < kend; j += COHORT_WARP)
    m = fmaxf(m, row[j]);
  m = cohort_warp_max(m);
  float l = 0.0f;
  for (int j = lane; j < kend; j += COHORT_WARP)
    l += expf(row[j] - m);
  l = cohort_warp_sum(l);
  float inv = 1.0f / l;
  for (int j = lane; j < c.Tk; j += COHORT_WARP)
    row[j] = j < kend ? expf(row[j] - m) * inv : 0.0f;
  if (lane == 0)
    lse[row_index(r, c)] = m + logf(l);
}

/* The probabilities again from the scaled scores and the forward's lse (masked keys 0). */
__global__ static void probs_kernel(float *S, const float *lse, Chunk c)
{
  size_t n = c.rows * c.Tk;
  COHORT_GRID_STRIDE(e, n)
  {
    size_t r = e / c.Tk;
    int j = (int)(e % c.Tk), i = (int)(r % c.Tq);
    S[e] = !c.causal || j <= i ? expf(S[e] - lse[row_index(r, c)]) : 0.0f;
  }
}

/* dS = P (dP - D) in place of dP (0 where P is). */
__global__ static void dscores_kernel(float *dP, const float *P, const float *D, Chunk c)
{
  size_t n = c.rows * c.Tk;
  COHORT_GRID_STRIDE(e, n)
  {
    size_t r = e / c.Tk;
    dP[e] = P[e] * (dP[e] - D[row_index(r, c)]);
  }
}

void cohort_attn_gemm_forward(float *out, float *lse, const float *q, const float *k,
                              const float *v, int B, int jc, float *work, const AttnShape &s)
{
  cublasHandle_t h = cohort_cuda_blas();
  if (!h)
    return;
  long long TT = (long long)s.Tq * s.Tk, qs = (long long)s.G * s.hd, ks = s.hd;
  for (int b = 0; b < B; b++)
    for (int g = 0; g < s.G; g++)
      for (int j0 = 0; j0 < s.NKV; j0 += jc) {
        int n = s.NKV - j0 < jc ? s.NKV - j0 : jc, h0 = j0 * s.G + g;
        const float *qb = q + (size_t)b * s.Tq * s.ldq + (size_t)h0 * s.hd;
        const float *kb = k + (size_t)b * s.Tk * s.ldk + (size_t)j0 * s.hd;
        const float *vb = v + (size_t)b * s.Tk * s.ldv + (size_t)j0 * s.hd;
        float *ob = out + (size_t)b * s.Tq * s.ldo + (size_t)h0 * s.hd;
        Chunk c = {s.Tq, s.Tk, s.G, s.causal, (size_t)n * s.Tq};
        if (!bgemm(h, 0, 1, s.Tq, s.Tk, s.hd, s.scale, qb, s.ldq, qs, kb, s.ldk, ks, 0.0f, work,
                   s.Tk, TT, n))
          return;
        softmax_rows_kernel<<<(unsigned)((c.rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK),
                              ROWS_PER_BLOCK * COHORT_WARP>>>(
            work, lse + ((size_t)b * s.NH + h0) * s.Tq, c);
        if (!cohort_cuda_launched("attention_forward (softmax rows)"))
          return;
        if (!bgemm(h, 0, 0, s.Tq, s.hd, s.Tk, 1.0f, work, s.Tk, TT, vb, s.ldv, ks, 0.0f, ob, s.ldo,
                   qs, n))
          return;
      }
}

void cohort_attn_gemm_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const float *lse, const float *D,
                               int B, int jc, float *work, const AttnShape &s)
{
  cublasHandle_t h = cohort_cuda_blas();
  if (!h)
    return;
  long long TT = (long long)s.Tq * s.Tk, qs = (long long)s.G * s.hd, ks = s.hd;
  float *P = work, *dP = work + (size_t)jc * TT;
  for (int b = 0; b < B; b++)
    for (int g = 0; g < s.G; g++)
      for (int j0 = 0; j0 < s.NKV; j0 += jc) {
        int n = s.NKV - j0 < jc ? s.NKV - j0 : jc, h0 = j0 * s.G + g;
        size_t qo = (size_t)b * s.Tq * s.ldq + (size_t)h0 * s.hd;
        size_t ko = (size_t)b * s.Tk * s.ldk + (size_t)j0 * s.hd;
        size_t vo = (size_t)b * s.Tk * s.ldv + (size_t)j0 * s.hd;
        const float *gb = dout + (size_t)b * s.Tq * s.ldo + (size_t)h0 * s.hd;
        size_t at = ((size_t)b * s.NH + h0) * s.Tq;
        float first = g == 0 ? 0.0f : 1.0f; /* dk, dv: the group's first head writes */
        Chunk c = {s.Tq, s.Tk, s.G, s.causal, (size_t)n * s.Tq};
        unsigned blocks = cohort_cuda_blocks(c.rows * s.Tk, 256);
        if (!bgemm(h, 0, 1, s.Tq, s.Tk, s.hd, s.scale, q + qo, s.ldq, qs, k + ko, s.ldk, ks, 0.0f,
                   P, s.Tk, TT, n))
          return;
        probs_kernel<<<blocks, 256>>>(P, lse + at, c);
        if (!cohort_cuda_launched("attention_backward (probabilities)"))
          return;
        /* dv = P^T dout; dP = dout v^T; dS = P (dP - D); dq = scale dS k; dk = scale dS^T q */
        if (!bgemm(h, 1, 0, s.Tk, s.hd, s.Tq, 1.0f, P, s.Tk, TT, gb, s.ldo, qs, first, dv + vo,
                   s.ldv, ks, n) ||
            !bgemm(h, 0, 1, s.Tq, s.Tk, s.hd, 1.0f, gb, s.ldo, qs, v + vo, s.ldv, ks, 0.0f, dP,
                   s.Tk, TT, n))
          return;
        dscores_kernel<<<blocks, 256>>>(dP, P, D + at, c);
        if (!cohort_cuda_launched("attention_backward (score gradients)"))
          return;
        if (!bgemm(h, 0, 0, s.Tq, s.hd, s.Tk, s.scale, dP, s.Tk, TT, k + ko, s.ldk, ks, 0.0f,
                   dq + qo, s.ldq, qs, n) ||
            !bgemm(h, 1, 0, s.Tk, s.hd, s.Tq, s.scale, dP, s.Tk, TT, q + qo, s.ldq, qs, first,
                   dk + ko, s.ldk, ks, n))
          return;
      }
}
