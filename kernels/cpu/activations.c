/* Element-wise ops: tanh-GELU and the residual add. */
#include "cpu.h"
#include "kernels/math-inline.h"

#define CHUNK 4096

COHORT_VEC static void gelu_chunk(float *restrict out, const float *restrict inp, size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = cohort_gelu(inp[i]);
}

void cohort_cpu_gelu_forward(float *out, const float *inp, size_t n)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    gelu_chunk(out + i0, inp + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
  }
}

/* dinp may alias dout, so no restrict on those two. */
COHORT_VEC static void gelu_back_chunk(float *dinp, const float *restrict inp, const float *dout,
                                       size_t n)
{
  for (size_t i = 0; i < n; i++)
    dinp[i] = dout[i] * cohort_gelu_grad(inp[i]);
}

void cohort_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    gelu_back_chunk(dinp + i0, inp + i0, dout + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
  }
}

COHORT_VEC static void add_chunk(float *out, const float *a, const float *b, size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = a[i] + b[i];
}

void cohort_cpu_residual_forward(float *out, const float *a, const float *b, size_t n)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    add_chunk(out + i0, a + i0, b + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
  }
}
