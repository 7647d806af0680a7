/* Internal to the CUDA backend: the ops that device.cu puts in the table, error recording,
 * launch sizes, scratch memory and the warp/block reductions the kernels share. */
#pragma once

#include "kernels/cuda/cuda-backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>

#define COHORT_WARP      32
#define COHORT_FULL_MASK 0xffffffffu

/* Records `e` as the backend's error (the first one wins) unless it is cudaSuccess; `what`
 * names the op. Returns true when e is cudaSuccess. */
bool cohort_cuda_ok(cudaError_t e, const char *what);
bool cohort_cuda_blas_ok(cublasStatus_t s, const char *what);
/* Records a failure that is not a CUDA status (bad arguments to an op). */
void cohort_cuda_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Checks that the kernel just launched was accepted. */
static inline bool cohort_cuda_launched(const char *what)
{
  return cohort_cuda_ok(cudaGetLastError(), what);
}

/* The cuBLAS handle of the current device, created on first use; NULL on failure. */
cublasHandle_t cohort_cuda_blas(void);
/* `bytes` of device memory for one op's temporaries, owned by the backend and reused by the
 * next op (ops run in order on one stream, so this is safe); NULL on failure. */
void *cohort_cuda_scratch(size_t bytes);
/* Reserved address ranges (reserve.cu: CUDA's virtual memory management). */
void *cohort_cuda_reserve(size_t bytes);
int cohort_cuda_commit(void *p, size_t bytes);
void cohort_cuda_decommit(void *p, size_t bytes);
void cohort_cuda_unreserve(void *p, size_t bytes);
/* Blocks for a grid-stride loop over n elements with `threads` per block. */
static inline unsigned cohort_cuda_blocks(size_t n, int threads)
{
  size_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 65536 ? (b ? b : 1) : 65536);
}

/* for (size_t i ...) over n elements, spread over the whole grid. */
#define COHORT_GRID_STRIDE(i, n)                                                                   \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)gridDim.x * blockDim.x)

/* Sum over the warp in a fixed butterfly order: every lane gets the same, repeatable value. */
template <typename V> __device__ static inline V cohort_warp_sum(V v)
{
  for (int o = COHORT_WARP / 2; o > 0; o /= 2)
    v += __shfl_xor_sync(COHORT_FULL_MASK, v, o);
  return v;
}

__device__ static inline float cohort_warp_max(float v)
{
  for (int o = COHORT_WARP / 2; o > 0; o /= 2)
    v = fmaxf(v, __shfl_xor_sync(COHORT_FULL_MASK, v, o));
  return v;
}

/* Tree sum over a block of power-of-two size through shared memory `sh` (blockDim.x values);
 * the result is in sh[0] for every thread. Fixed order, so repeatable. */
template <typename V> __device__ static inline V cohort_block_sum(V v, V *sh)
{
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  V r = sh[0];
  __syncthreads();
  return r;
}

/* Column sums of [N, cols] matrices in two passes with no atomics: rows are cut into chunks
 * whose number depends on N alone, each chunk's sums land in scratch, then the chunks are
 * added in order. The column-sum ops (bias and LayerNorm parameter gradients) use it. */
#define COHORT_COLSUM_TX 32
#define COHORT_COLSUM_TY 8
static inline int cohort_colsum_chunks(int N)
{
  int c = (N + 63) / 64;
  return c < 1 ? 1 : (c > 256 ? 256 : c);
}

void cohort_cuda_set_gemm_mode(CohortGemmMode mode);
CohortGemmMode cohort_cuda_get_gemm_mode(void);
/* Rounds a rows x cols matrix of row stride ld into `dst` (row stride dld >= cols; the columns
 * past cols are not written), as bf16 (fp16 when fp16 is nonzero); returns dst, or NULL when
 * the launch failed (recorded). */
void *cohort_cuda_pack_operand(void *dst, const float *src, int rows, int cols, int ld, int dld,
                               int fp16);
/* dst = n values of src rounded as the GEMM rounds operands; false when the launch failed. */
bool cohort_cuda_round_copy(void *dst, const float *src, size_t n, int fp16);
void cohort_cuda_to_bf16(uint16_t *dst, const float *src, size_t n);
void cohort_cuda_from_bf16(float *dst, const uint16_t *src, size_t n, float s);
void cohort_cuda_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc);
void cohort_cuda_add_bias(float *out, const float *bias, int N, int cols);
void cohort_cuda_bias_backward(float *dbias, const float *dout, int N, int cols);
void cohort_cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                   int NH, int causal);
void cohort_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse, int B, int T, int C, int NH,
                                    int causal);
void cohort_cuda_attention_gqa_forward(float *out, float *lse, const float *q, const float *k,
                                       const float *v, int B, int T, int NH, int NKV, int hd,
                                       int causal);
void cohort_cuda_attention_gqa_backward(float *dq, float *dk, float *dv, const float *dout,
                                        const float *q, const float *k, const float *v,
                                        const float *out, const float *lse, int B, int T, int NH,
                                        int NKV, int hd, int causal);
void cohort_cuda_cross_attention_forward(float *out, float *lse, const float *q, const float *k,
                                         const float *v, const int *klen, int B, int Tq, int Tk,
                                         int NH, int hd);
void cohort_cuda_cross_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                          const float *q, const float *k, const float *v,
                                          const float *out, const float *lse, const int *klen,
                                          int B, int Tq, int Tk, int NH, int hd);
void cohort_cuda_attention_gqa_cached(float *out, const float *q, const float *k, const float *v,
                                      int Tq, int Tk, int NH, int NKV, int hd);

/* activations.cu */
void cohort_cuda_gelu_forward(float *out, const float *inp, size_t n);
void cohort_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void cohort_cuda_silu_forward(float *out, const float *inp, size_t n);
void cohort_cuda_silu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void cohort_cuda_relu_forward(float *out, const float *inp, size_t n);
void cohort_cuda_relu_backward(float *dinp, const float *x, const float *dout, size_t n);
void cohort_cuda_softmax_forward(float *out, const float *inp, int N, int V, float scale);
void cohort_cuda_softmax_backward(float *dinp, const float *out, const float *dout, int N, int V,
                                  float scale);
void cohort_cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void cohort_cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                                 const float *up, size_t n);

/* elementwise.cu */
void cohort_cuda_residual_forward(float *out, const float *a, const float *b, size_t n);
void cohort_cuda_scale(float *values, size_t n, float s);
void cohort_cuda_dropout(float *out, const float *inp, const uint64_t *keys, int rows,
                         int rows_per_key, int cols, uint64_t salt, float p);
void cohort_cuda_modulate_forward(float *out, const float *x, const float *shift,
                                  const float *scale, int B, int T, int C, int ld);
void cohort_cuda_modulate_backward(float *dx, float *dshift, float *dscale, const float *dout,
                                   const float *x, const float *scale, int B, int T, int C, int ld);
void cohort_cuda_gated_residual_forward(float *out, const float *x, const float *gate,
                                        const float *y, int B, int T, int C, int ld);
void cohort_cuda_gated_residual_backward(float *dx, float *dy, float *dgate, const float *dout,
                                         const float *gate, const float *y, int B, int T, int C,
                                         int ld);
void cohort_cuda_axpby(float *out, float a, const float *x, float b, const float *y, size_t n);

/* norms.cu */
void cohort_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int N, int C, float eps);
void cohort_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean,
                                    const float *rstd, int N, int C);
void cohort_cuda_bn_stats(const float *x, int B, int C, int HW, float *mean, float *m2);
void cohort_cuda_bn_combine_stats(float *mean, float *m2, const float *ranks, int R, int C);
void cohort_cuda_bn_rstd(float *rstd, const float *var, double scale, float eps, int C);
void cohort_cuda_bn_forward(float *y, const float *x, const float *mean, const float *rstd,
                            const float *weight, const float *bias, int B, int C, int HW);
void cohort_cuda_bn_running_update(float *running_mean, float *running_var, const float *mean,
                                   const float *m2, double count, float momentum, int C);
void cohort_cuda_bn_backward_reduce(const float *dy, const float *x, const float *mean,
                                    const float *rstd, int B, int C, int HW, float *sum_dy,
                                    float *sum_dy_xhat);
void cohort_cuda_bn_backward_dx(float *dx, int accumulate, const float *dy, const float *x,
                                const float *mean, const float *rstd, const float *weight,
                                const float *sum_dy, const float *sum_dy_xhat, double count, int B,
                                int C, int HW);
void cohort_cuda_bn_backward_params(float *dweight, float *dbias, const float *sum_dy,
                                    const float *sum_dy_xhat, int C);
void cohort_cuda_group_norm_forward(float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int B, int C, int HW, int G,
                                    float eps);
void cohort_cuda_group_norm_backward(float *dinp, float *dw, float *db, const float *dout,
                                     const float *inp, const float *w, const float *mean,
                                     const float *rstd, int B, int C, int HW, int G);
void cohort_cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                                 int C, float eps);
void cohort_cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, int N, int C);

/* losses.cu */
void cohort_cuda_crossentropy_forward(float *losses, float *lse, const float *logits,
                                      const int *targets, int N, int V);
void cohort_cuda_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                       const int *targets, int N, int V, float dloss);
void cohort_cuda_kl_div_forward(float *losses, float *lse, const float *student,
                                const float *teacher, int N, int V, float tau);
void cohort_cuda_kl_div_backward(float *dstudent, const float *student, const float *teacher,
                                 const float *lse, int N, int V, float tau, float scale);
void cohort_cuda_mse_forward(float *losses, const float *pred, const float *target, int B, int D);
void cohort_cuda_mse_backward(float *dpred, const float *pred, const float *target, int B, int D,
                              float scale);
int cohort_cuda_accuracy_count(const float *logits, const int *labels, int N, int V);

/* embeddings.cu */
void cohort_cuda_embedding_forward(float *out, const int *tokens, const float *wte,
                                   const float *wpe, int B, int T, int C);
void cohort_cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                                    int B, int T, int C);
void cohort_cuda_timestep_embedding(float *out, const float *t, int B, int dim, float max_period);
void cohort_cuda_rows_gather(float *out, const float *table, const int *rows, int B, int C);
void cohort_cuda_rows_scatter_add(float *dtable, const float *dout, const int *rows, int B, int C);
void cohort_cuda_patchify(float *out, const float *img, int B, int C, int H, int W, int p);
void cohort_cuda_patchify_backward(float *dimg, const float *dtokens, int B, int C, int H, int W,
                                   int p);
void cohort_cuda_unpatchify(float *img, const float *tokens, int B, int C, int H, int W, int p);
void cohort_cuda_unpatchify_backward(float *dtokens, const float *dimg, int B, int C, int H, int W,
                                     int p);
void cohort_cuda_rope_forward(float *out, const float *inp, const float *cos, const float *sin,
                              int B, int T, int H, int hd, int pos0);
void cohort_cuda_rope_backward(float *dinp, const float *dout, const float *cos, const float *sin,
                               int B, int T, int H, int hd, int pos0);

/* optimizers.cu */
void cohort_cuda_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                              float lr, float beta1, float beta2, float eps, float wd, float bc1,
                              float bc2);
double cohort_cuda_sum_squares(const float *values, size_t n);
void cohort_cuda_ema_update(float *ema, const float *params, size_t n, float decay);
void cohort_cuda_sgd_update(float *params, const float *grads, float *momentum_buf, size_t n,
                            float lr, float momentum, float dampening, float weight_decay,
                            int nesterov, int first_step);

/* convolution.cu */
void cohort_cuda_conv2d_forward(float *out, const float *inp, const float *weight, int B, int C_in,
                                int H, int W, int C_out, int K, int stride, int pad);
void cohort_cuda_conv2d_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                 const float *weight, int B, int C_in, int H, int W, int C_out,
                                 int K, int stride, int pad);
void cohort_cuda_avgpool_global_forward(float *out, const float *inp, int B, int C, int HW);
void cohort_cuda_avgpool_global_backward(float *dinp, const float *dout, int B, int C, int HW);
void cohort_cuda_conv2d_nhwc_forward(float *out, const float *inp, const float *weight, int B,
                                     int C_in, int H, int W, int C_out, int K, int stride, int pad);
void cohort_cuda_conv2d_nhwc_backward(float *dinp, int accumulate, float *dweight,
                                      const float *dout, const float *inp, const float *weight,
                                      int B, int C_in, int H, int W, int C_out, int K, int stride,
                                      int pad);
void cohort_cuda_maxpool2d_nhwc_forward(float *out, const float *inp, int B, int C, int H, int W,
                                        int K, int stride, int pad);
void cohort_cuda_maxpool2d_nhwc_backward(float *dinp, const float *dout, const float *inp, int B,
                                         int C, int H, int W, int K, int stride, int pad);
void cohort_cuda_avgpool_global_nhwc_forward(float *out, const float *inp, int B, int C, int HW);
void cohort_cuda_avgpool_global_nhwc_backward(float *dinp, const float *dout, int B, int C, int HW);

/* convolution-cudnn.cu, in builds with cuDNN: the convolutions on cuDNN (nhwc: activations
 * channels-last, else NCHW; weights PyTorch's [O, C, K, K]). Each returns false, having done
 * nothing, when cuDNN has no plan for the shape (the caller then runs im2col + cuBLAS); a failure
 * while running is recorded as the backend's error. The backward adds to dweight and writes
 * dinp (adds to it when `accumulate`; dinp NULL: none). */
bool cohort_cudnn_conv2d_forward(bool nhwc, float *out, const float *inp, const float *weight,
                                 int B, int C_in, int H, int W, int C_out, int K, int stride,
                                 int pad);
bool cohort_cudnn_conv2d_backward(bool nhwc, float *dinp, bool accumulate, float *dweight,
                                  const float *dout, const float *inp, const float *weight, int B,
                                  int C_in, int H, int W, int C_out, int K, int stride, int pad);

/* convolution-bias.cu */
void cohort_cuda_channel_bias_forward(float *out, const float *bias, int B, int C, int HW);
void cohort_cuda_channel_bias_backward(float *dbias, const float *dout, int B, int C, int HW);

/* resampling.cu */
void cohort_cuda_upsample_nearest_forward(float *out, const float *inp, int B, int C, int H, int W,
                                          int f);
void cohort_cuda_upsample_nearest_backward(float *dinp, const float *dout, int B, int C, int H,
                                           int W, int f);
void cohort_cuda_pad2d_forward(float *out, const float *inp, int B, int C, int H, int W, int top,
                               int bottom, int left, int right);
void cohort_cuda_pad2d_backward(float *dinp, const float *dout, int B, int C, int H, int W, int top,
                                int bottom, int left, int right);
