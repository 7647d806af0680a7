/* The CPU backend's ops, one file per op family; backend.c puts them in the table. */
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

void cohort_cpu_embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                                  int B, int T, int C);
void cohort_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                                   int B, int T, int C);

void cohort_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C);
void cohort_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C);

void cohort_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH);
void cohort_cpu_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C, int NH);

void cohort_cpu_gelu_forward(float *out, const float *inp, size_t n);
void cohort_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void cohort_cpu_residual_forward(float *out, const float *a, const float *b, size_t n);

void cohort_cpu_crossentropy_forward(float *losses, float *lse, const float *logits,
                                     const int *targets, int N, int V);
void cohort_cpu_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                      const int *targets, int N, int V, float dloss);

void cohort_cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float bc1,
                             float bc2);
double cohort_cpu_sum_squares(const float *values, size_t n);
void cohort_cpu_scale(float *values, size_t n, float s);
void cohort_cpu_ema_update(float *ema, const float *params, size_t n, float decay);
