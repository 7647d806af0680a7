/* Reduced precision on the CPU: the GEMM mode, the operand rounding of the bf16/fp16 modes (to
 * fp32 values for the emulation, which multiplies them in fp32 as tensor cores do; to bf16 bits
 * for the bf16 hardware path, kernels/cpu/gemm-paths.h), and the bfloat16 conversions of the
 * bf16 gradient all-reduce. */
#include "cpu.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm-paths.h"
#include "kernels/math-inline.h"

#include <stdlib.h>

static CohortGemmMode gemm_mode = COHORT_GEMM_FP32;

void cohort_cpu_set_gemm_mode(CohortGemmMode mode)
{
  gemm_mode = mode;
}

CohortGemmMode cohort_cpu_get_gemm_mode(void)
{
  return gemm_mode;
}

/* Two operand buffers per thread that calls gemm (the trainer's main thread), grown on demand
 * and kept: a step makes the same GEMMs every time, so after the first step nothing is
 * allocated. */
static _Thread_local void *operand_buf[2];
static _Thread_local size_t operand_cap[2];

static void *operand_space(int which, size_t bytes)
{
  if (operand_cap[which] < bytes) {
    free(operand_buf[which]);
    operand_buf[which] = malloc(bytes ? bytes : 1);
    operand_cap[which] = operand_buf[which] ? bytes : 0;
  }
  return operand_buf[which];
}

COHORT_VEC static void round_row_bf16(float *restrict dst, const float *restrict src, int cols)
{
  for (int c = 0; c < cols; c++)
    dst[c] = cohort_round_bf16(src[c]);
}

COHORT_VEC static void round_row_fp16(float *restrict dst, const float *restrict src, int cols)
{
  for (int c = 0; c < cols; c++)
    dst[c] = cohort_round_fp16(src[c]);
}

COHORT_VEC static void pack_row_bf16(uint16_t *restrict dst, const float *restrict src, int cols)
{
  for (int c = 0; c < cols; c++)
    dst[c] = cohort_f32_to_bf16(src[c]);
}

const float *cohort_cpu_round_operand(int which, CohortGemmMode mode, const float *src, int rows,
                                      int cols, int ld)
{
  float *dst = operand_space(which, (size_t)rows * cols * sizeof(float));
  if (!dst)
    return NULL;
  int fp16 = mode == COHORT_GEMM_FP16;
  /* One thread: the rounding is a small part of a GEMM's time, and waking the OpenMP team
   * between OpenBLAS's own thread pool's GEMMs cost more than it saved (2 threads, tiny-gpt:
   * 4300 tokens/s in parallel, against 4500 on one thread and 6300 in fp32). */
  for (int r = 0; r < rows; r++) {
    if (fp16)
      round_row_fp16(dst + (size_t)r * cols, src + (size_t)r * ld, cols);
    else
      round_row_bf16(dst + (size_t)r * cols, src + (size_t)r * ld, cols);
  }
  return dst;
}

const uint16_t *cohort_cpu_pack_bf16(int which, const float *src, int rows, int cols, int ld)
{
  uint16_t *dst = operand_space(which, (size_t)rows * cols * sizeof(uint16_t));
  if (!dst)
    return NULL;
    /* In parallel, unlike the rounding above: oneDNN, which multiplies these, runs on the same
     * OpenMP threads, so the team is awake anyway. */
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= COHORT_CPU_PAR_MIN)
  for (int r = 0; r < rows; r++)
    pack_row_bf16(dst + (size_t)r * cols, src + (size_t)r * ld, cols);
  return dst;
}

COHORT_VEC static void to_bf16_range(uint16_t *restrict dst, const float *restrict src, size_t n)
{
  for (size_t i = 0; i < n; i++)
    dst[i] = cohort_f32_to_bf16(src[i]);
}

COHORT_VEC static void from_bf16_range(float *restrict dst, const uint16_t *restrict src, size_t n,
                                       float s)
{
  for (size_t i = 0; i < n; i++)
    dst[i] = s * cohort_bf16_to_f32(src[i]);
}

/* Chunks of a fixed size, so the work splits over threads without depending on their count
 * (the results do not depend on it anyway: each element is independent). */
#define CHUNK 65536

void cohort_cpu_to_bf16(uint16_t *dst, const float *src, size_t n)
{
  size_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (size_t k = 0; k < chunks; k++) {
    size_t i = k * CHUNK;
    to_bf16_range(dst + i, src + i, n - i < CHUNK ? n - i : CHUNK);
  }
}

void cohort_cpu_from_bf16(float *dst, const uint16_t *src, size_t n, float s)
{
  size_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (size_t k = 0; k < chunks; k++) {
    size_t i = k * CHUNK;
    from_bf16_range(dst + i, src + i, n - i < CHUNK ? n - i : CHUNK, s);
  }
}
