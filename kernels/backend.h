/* The compute backend table. The model (engine/gpt.c) and the optimizer call every op through
 * one CohortBackend, so the CPU backend (kernels/cpu) and a CUDA backend provide the same
 * table and the model is written once.
 *
 * Conventions for every op:
 *  - pointers to tensors are backend memory (from `alloc`); host memory moves in and out only
 *    through `upload` / `download`;
 *  - tensors are row-major, contiguous; N is the number of rows (B*T positions);
 *  - "accumulates" means the op ADDS into its output (gradients accumulate over micro-batches
 *    and over the several uses of a tensor); every other output is overwritten;
 *  - results depend only on the inputs and the thread count (no atomics, fixed reduction
 *    order), so runs with the same seed and thread count are bit-identical. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How `gemm` computes. The mode is a setting of the backend (for the whole process, every
 * device), changed only between steps. In every mode the accumulation and C are fp32. */
typedef enum CohortGemmMode {
  COHORT_GEMM_FP32, /* fp32 products (the default) */
  COHORT_GEMM_TF32, /* fp32 operands on TF32 tensor cores where the backend has them (CUDA);
                       the CPU computes fp32 */
  COHORT_GEMM_BF16, /* A and B rounded to bfloat16 (to nearest, ties to even) before the
                       product: tensor cores on a GPU; the CPU rounds, then multiplies in fp32,
                       which gives the same products (bf16 x bf16 is exact in fp32) */
  COHORT_GEMM_FP16, /* the same with IEEE binary16: magnitudes past 65504 become inf, tiny ones
                       subnormal or 0 (why fp16 training needs loss scaling) */
} CohortGemmMode;

typedef struct CohortBackend {
  const char *name; /* "cpu", "cuda" */

  /* Threads for the backend's own loops and its BLAS; n <= 0 keeps the current setting. */
  void (*set_threads)(int n);
  int (*get_threads)(void);

  /* Memory. `alloc` returns `bytes` of zeroed, 64-byte aligned memory, or NULL. */
  void *(*alloc)(size_t bytes);
  void (*free)(void *p);
  void (*zero)(void *p, size_t bytes);
  void (*copy)(void *dst, const void *src, size_t bytes);      /* backend to backend */
  void (*upload)(void *dst, const void *host, size_t bytes);   /* host to backend */
  void (*download)(void *host, const void *src, size_t bytes); /* backend to host */

  /* C = alpha * op(A) @ op(B) + beta * C with op(X) = X or X^T; op(A) is [M, K], op(B)
   * [K, N], C [M, N]; lda/ldb/ldc are the row strides of the stored matrices. */
  void (*gemm)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
  /* Sets the mode of every later `gemm` (see CohortGemmMode). */
  void (*set_gemm_mode)(CohortGemmMode mode);
  CohortGemmMode (*get_gemm_mode)(void);
  /* What computes products in `mode` now, in words for the log (e.g. "oneDNN 2.6.3 matmul
   * (AVX-512 BF16): bf16 operands, fp32 accumulation in hardware"); NULL where the backend
   * does not say. The string is static. */
  const char *(*describe_gemm)(CohortGemmMode mode);
  /* out[n, :] += bias for each of the N rows of width `cols`. */
  void (*add_bias)(float *out, const float *bias, int N, int cols);
  /* dbias += column sums of dout [N, cols] (accumulates). */
  void (*bias_backward)(float *dbias, const float *dout, int N, int cols);

  /* out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. */
  void (*embedding_forward)(float *out, const int *tokens, const float *wte, const float *wpe,
                            int B, int T, int C);
  /* dwte[tokens[b, t], :] += dout[b, t, :]; dwpe[t, :] += sum over b (accumulate). */
  void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                             int T, int C);

  /* out = (inp - mean) * rstd * w + b per row; mean and rstd [N] are kept for backward. */
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, int N, int C);
  /* Accumulates dinp, dw and db. */
  void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                             const float *w, const float *mean, const float *rstd, int N, int C);

  /* Causal multi-head attention. qkv [B, T, 3C] holds q, k, v (heads of C/NH inside each);
   * out [B, T, C]; lse [B, NH, T] keeps each softmax row's log-sum-exp for backward. */
  void (*attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
  /* Writes dqkv [B, T, 3C] (overwrites) from dout, the forward's qkv, out and lse. */
  void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int T, int C, int NH);

  /* out = gelu_tanh(inp) over n values. */
  void (*gelu_forward)(float *out, const float *inp, size_t n);
  /* dinp = dout * gelu_tanh'(inp); dinp may be dout (in place). */
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

  /* out = a + b over n values. */
  void (*residual_forward)(float *out, const float *a, const float *b, size_t n);

  /* Per row of logits [N, V]: lse[n] = log sum exp, losses[n] = lse[n] - logits[n, target]. */
  void (*crossentropy_forward)(float *losses, float *lse, const float *logits, const int *targets,
                               int N, int V);
  /* dlogits = (softmax(logits) - onehot(target)) * dloss (overwrites). */
  void (*crossentropy_backward)(float *dlogits, const float *logits, const float *lse,
                                const int *targets, int N, int V, float dloss);

  /* PyTorch AdamW over n values: p -= lr*wd*p (when wd != 0), then the Adam update with
   * bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. */
  void (*adamw_update)(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float wd, float bc1, float bc2);
  /* Sum of squares of n values in double, in an order fixed by n alone. */
  double (*sum_squares)(const float *values, size_t n);
  /* values *= s */
  void (*scale)(float *values, size_t n, float s);
  /* ema = decay * ema + (1 - decay) * params */
  void (*ema_update)(float *ema, const float *params, size_t n, float decay);

  /* dst = the bfloat16 bits of src (to nearest, ties to even; NaN stays NaN), n values. */
  void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
  /* dst = s * src, bfloat16 bits to fp32 (the product rounded once, in fp32). */
  void (*from_bf16)(float *dst, const uint16_t *src, size_t n, float s);
} CohortBackend;

/* The CPU backend: C with OpenMP, GEMMs through OpenBLAS or oneDNN. Always available. */
const CohortBackend *cohort_backend_cpu(void);

#ifdef __cplusplus
}
#endif
