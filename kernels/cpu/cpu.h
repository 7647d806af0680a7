/* The CPU backend's ops, one file per kind of op (activations.c, norms.c, …); cpu-backend.c puts
 * them in the table. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Hot inner loops get AVX2/AVX-512 clones chosen at load time, so the build stays portable
 * while this machine's vector units are used. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define COHORT_VEC __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define COHORT_VEC
#endif

/* Rows of work below this many elements run on one thread: spawning costs more. */
#define COHORT_CPU_PAR_MIN 16384

void cohort_cpu_set_threads(int n);
int cohort_cpu_get_threads(void);
/* Reserved ranges (reserve.c; COHORT_STRICT_RESERVE makes them fault where not committed). */
void *cohort_cpu_reserve(size_t bytes);
int cohort_cpu_commit(void *p, size_t bytes);
void cohort_cpu_decommit(void *p, size_t bytes);
void cohort_cpu_unreserve(void *p, size_t bytes);
/* Strict mode: the bytes of the range holding `p` that have memory now and at most so far;
 * -1 when `p` is in no strict range. */
int cohort_cpu_reserve_usage(const void *p, size_t *now, size_t *peak);
void cohort_cpu_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc);
void cohort_cpu_set_gemm_mode(CohortGemmMode mode);
CohortGemmMode cohort_cpu_get_gemm_mode(void);
/* A rows x cols matrix with row stride ld, rounded to the precision of `mode` (bf16 or fp16)
 * into a packed per-thread buffer (`which` 0 or 1: one per operand, shared with
 * cohort_cpu_pack_bf16). NULL when out of memory. */
const float *cohort_cpu_round_operand(int which, CohortGemmMode mode, const float *src, int rows,
                                      int cols, int ld);
void cohort_cpu_to_bf16(uint16_t *dst, const float *src, size_t n);
void cohort_cpu_from_bf16(float *dst, const uint16_t *src, size_t n, float s);
void cohort_cpu_add_bias(float *out, const float *bias, int N, int cols);
void cohort_cpu_bias_backward(float *dbias, const float *dout, int N, int cols);
void cohort_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH, int causal);
void cohort_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C, int NH,
                                   int causal);
void cohort_cpu_attention_gqa_forward(float *out, float *lse, const float *q, const float *k,
                                      const float *v, int B, int T, int NH, int NKV, int hd,
                                      int causal);
void cohort_cpu_attention_gqa_backward(float *dq, float *dk, float *dv, const float *dout,
                                       const float *q, const float *k, const float *v,
                                       const float *out, const float *lse, int B, int T, int NH,
                                       int NKV, int hd, int causal);
void cohort_cpu_cross_attention_forward(float *out, float *lse, const float *q, const float *k,
                                        const float *v, const int *klen, int B, int Tq, int Tk,
                                        int NH, int hd);
void cohort_cpu_cross_attention_backward(float *dq, float *dk, float *dv, const float *dout,
                                         const float *q, const float *k, const float *v,
                                         const float *out, const float *lse, const int *klen, int B,
                                         int Tq, int Tk, int NH, int hd);
void cohort_cpu_attention_gqa_cached(float *out, const float *q, const float *k, const float *v,
                                     int Tq, int Tk, int NH, int NKV, int hd);

/* activations.c */
void cohort_cpu_gelu_forward(float *out, const float *inp, size_t n);
void cohort_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void cohort_cpu_silu_forward(float *out, const float *inp, size_t n);
void cohort_cpu_silu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void cohort_cpu_relu_forward(float *out, const float *inp, size_t n);
void cohort_cpu_relu_backward(float *dinp, const float *x, const float *dout, size_t n);
void cohort_cpu_softmax_forward(float *out, const float *inp, int N, int V, float scale);
void cohort_cpu_softmax_backward(float *dinp, const float *out, const float *dout, int N, int V,
                                 float scale);
void cohort_cpu_swiglu_forward(float *out, const float *gate, const float *up, size_t n);
void cohort_cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                                const float *up, size_t n);

/* elementwise.c */
void cohort_cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void cohort_cpu_scale(float *values, size_t n, float s);
void cohort_cpu_dropout(float *out, const float *inp, const uint64_t *keys, int rows,
                        int rows_per_key, int cols, uint64_t salt, float p);
void cohort_cpu_modulate_forward(float *out, const float *x, const float *shift, const float *scale,
                                 int B, int T, int C, int ld);
void cohort_cpu_modulate_backward(float *dx, float *dshift, float *dscale, const float *dout,
                                  const float *x, const float *scale, int B, int T, int C, int ld);
void cohort_cpu_gated_residual_forward(float *out, const float *x, const float *gate,
                                       const float *y, int B, int T, int C, int ld);
void cohort_cpu_gated_residual_backward(float *dx, float *dy, float *dgate, const float *dout,
                                        const float *gate, const float *y, int B, int T, int C,
                                        int ld);
void cohort_cpu_axpby(float *out, float a, const float *x, float b, const float *y, size_t n);

/* norms.c */
void cohort_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C, float eps);
void cohort_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C);
void cohort_cpu_bn_stats(const float *x, int B, int C, int HW, float *mean, float *m2);
void cohort_cpu_bn_combine_stats(float *mean, float *m2, const float *ranks, int R, int C);
void cohort_cpu_bn_rstd(float *rstd, const float *var, double scale, float eps, int C);
void cohort_cpu_bn_forward(float *y, const float *x, const float *mean, const float *rstd,
                           const float *weight, const float *bias, int B, int C, int HW);
void cohort_cpu_bn_running_update(float *running_mean, float *running_var, const float *mean,
                                  const float *m2, double count, float momentum, int C);
void cohort_cpu_bn_backward_reduce(const float *dy, const float *x, const float *mean,
                                   const float *rstd, int B, int C, int HW, float *sum_dy,
                                   float *sum_dy_xhat);
void cohort_cpu_bn_backward_dx(float *dx, int accumulate, const float *dy, const float *x,
                               const float *mean, const float *rstd, const float *weight,
                               const float *sum_dy, const float *sum_dy_xhat, double count, int B,
                               int C, int HW);
void cohort_cpu_bn_backward_params(float *dweight, float *dbias, const float *sum_dy,
                                   const float *sum_dy_xhat, int C);
void cohort_cpu_group_norm_forward(float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int B, int C, int HW, int G,
                                   float eps);
void cohort_cpu_group_norm_backward(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean,
                                    const float *rstd, int B, int C, int HW, int G);
void cohort_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                                int C, float eps);
void cohort_cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N, int C);

/* losses.c */
void cohort_cpu_crossentropy_forward(float *losses, float *lse, const float *logits,
                                     const int *targets, int N, int V);
void cohort_cpu_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                      const int *targets, int N, int V, float dloss);
void cohort_cpu_kl_div_forward(float *losses, float *lse, const float *student,
                               const float *teacher, int N, int V, float tau);
void cohort_cpu_kl_div_backward(float *dstudent, const float *student, const float *teacher,
                                const float *lse, int N, int V, float tau, float scale);
void cohort_cpu_mse_forward(float *losses, const float *pred, const float *target, int B, int D);
void cohort_cpu_mse_backward(float *dpred, const float *pred, const float *target, int B, int D,
                             float scale);
int cohort_cpu_accuracy_count(const float *logits, const int *labels, int N, int V);

/* embeddings.c */
void cohort_cpu_embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                                  int B, int T, int C);
void cohort_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                                   int B, int T, int C);
void cohort_cpu_timestep_embedding(float *out, const float *t, int B, int dim, float max_period);
void cohort_cpu_rows_gather(float *out, const float *table, const int *rows, int B, int C);
void cohort_cpu_rows_scatter_add(float *dtable, const float *dout, const int *rows, int B, int C);
void cohort_cpu_patchify(float *out, const float *img, int B, int C, int H, int W, int p);
void cohort_cpu_patchify_backward(float *dimg, const float *dtokens, int B, int C, int H, int W,
                                  int p);
void cohort_cpu_unpatchify(float *img, const float *tokens, int B, int C, int H, int W, int p);
void cohort_cpu_unpatchify_backward(float *dtokens, const float *dimg, int B, int C, int H, int W,
                                    int p);
void cohort_cpu_rope_forward(float *out, const float *inp, const float *cos, const float *sin,
                             int B, int T, int H, int hd, int pos0);
void cohort_cpu_rope_backward(float *dinp, const float *dout, const float *cos, const float *sin,
                              int B, int T, int H, int hd, int pos0);

/* optimizers.c */
void cohort_cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float bc1,
                             float bc2);
double cohort_cpu_sum_squares(const float *values, size_t n);
void cohort_cpu_ema_update(float *ema, const float *params, size_t n, float decay);
void cohort_cpu_sgd_update(float *params, const float *grads, float *momentum_buf, size_t n,
                           float lr, float momentum, float dampening, float weight_decay,
                           int nesterov, int first_step);

/* convolution.c */
void cohort_cpu_conv2d_forward(float *out, const float *inp, const float *weight, int B, int C_in,
                               int H, int W, int C_out, int K, int stride, int pad);
void cohort_cpu_conv2d_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, int B, int C_in, int H, int W, int C_out,
                                int K, int stride, int pad);
void cohort_cpu_avgpool_global_forward(float *out, const float *inp, int B, int C, int HW);
void cohort_cpu_avgpool_global_backward(float *dinp, const float *dout, int B, int C, int HW);
void cohort_cpu_conv2d_nhwc_forward(float *out, const float *inp, const float *weight, int B,
                                    int C_in, int H, int W, int C_out, int K, int stride, int pad);
void cohort_cpu_conv2d_nhwc_backward(float *dinp, int accumulate, float *dweight, const float *dout,
                                     const float *inp, const float *weight, int B, int C_in, int H,
                                     int W, int C_out, int K, int stride, int pad);
void cohort_cpu_maxpool2d_nhwc_forward(float *out, const float *inp, int B, int C, int H, int W,
                                       int K, int stride, int pad);
void cohort_cpu_maxpool2d_nhwc_backward(float *dinp, const float *dout, const float *inp, int B,
                                        int C, int H, int W, int K, int stride, int pad);
void cohort_cpu_avgpool_global_nhwc_forward(float *out, const float *inp, int B, int C, int HW);
void cohort_cpu_avgpool_global_nhwc_backward(float *dinp, const float *dout, int B, int C, int HW);

/* convolution-bias.c */
void cohort_cpu_channel_bias_forward(float *out, const float *bias, int B, int C, int HW);
void cohort_cpu_channel_bias_backward(float *dbias, const float *dout, int B, int C, int HW);

/* resampling.c */
void cohort_cpu_upsample_nearest_forward(float *out, const float *inp, int B, int C, int H, int W,
                                         int f);
void cohort_cpu_upsample_nearest_backward(float *dinp, const float *dout, int B, int C, int H,
                                          int W, int f);
void cohort_cpu_pad2d_forward(float *out, const float *inp, int B, int C, int H, int W, int top,
                              int bottom, int left, int right);
void cohort_cpu_pad2d_backward(float *dinp, const float *dout, int B, int C, int H, int W, int top,
                               int bottom, int left, int right);
