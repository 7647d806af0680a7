/* The CPU backend table, its memory and its threads. */
#include "kernels/backend.h"
#include "cpu.h"
#include "kernels/cpu/gemm-paths.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

void cohort_cpu_set_threads(int n)
{
  if (n <= 0)
    return;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int cohort_cpu_get_threads(void)
{
  return omp_get_max_threads();
}

static void *cpu_alloc(size_t bytes)
{
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (p)
    memset(p, 0, rounded ? rounded : 64);
  return p;
}

static void cpu_free(void *p)
{
  free(p);
}

static void cpu_zero(void *p, size_t bytes)
{
  memset(p, 0, bytes);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
  if (dst != src)
    memmove(dst, src, bytes);
}

static const CohortBackend cpu_backend = {
    .name = "cpu",
    .set_threads = cohort_cpu_set_threads,
    .get_threads = cohort_cpu_get_threads,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .upload = cpu_copy,
    .download = cpu_copy,
    .gemm = cohort_cpu_gemm,
    .set_gemm_mode = cohort_cpu_set_gemm_mode,
    .get_gemm_mode = cohort_cpu_get_gemm_mode,
    .describe_gemm = cohort_cpu_gemm_describe,
    .add_bias = cohort_cpu_add_bias,
    .bias_backward = cohort_cpu_bias_backward,
    .embedding_forward = cohort_cpu_embedding_forward,
    .embedding_backward = cohort_cpu_embedding_backward,
    .layernorm_forward = cohort_cpu_layernorm_forward,
    .layernorm_backward = cohort_cpu_layernorm_backward,
    .attention_forward = cohort_cpu_attention_forward,
    .attention_backward = cohort_cpu_attention_backward,
    .gelu_forward = cohort_cpu_gelu_forward,
    .gelu_backward = cohort_cpu_gelu_backward,
    .residual_forward = cohort_cpu_residual_forward,
    .crossentropy_forward = cohort_cpu_crossentropy_forward,
    .crossentropy_backward = cohort_cpu_crossentropy_backward,
    .adamw_update = cohort_cpu_adamw_update,
    .sum_squares = cohort_cpu_sum_squares,
    .scale = cohort_cpu_scale,
    .ema_update = cohort_cpu_ema_update,
    .to_bf16 = cohort_cpu_to_bf16,
    .from_bf16 = cohort_cpu_from_bf16,
};

const CohortBackend *cohort_backend_cpu(void)
{
  return &cpu_backend;
}
