/* ReLU. */
#include "cpu.h"

#define CHUNK 4096

/* x < 0 ? 0 : x lets a NaN through, as torch.relu does. */
COHORT_VEC static void relu_chunk(float *restrict out, const float *restrict inp, size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = inp[i] < 0.0f ? 0.0f : inp[i];
}

void cohort_cpu_relu_forward(float *out, const float *inp, size_t n)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    relu_chunk(out + i0, inp + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
  }
}

/* dinp may alias dout, so no restrict on those two. */
COHORT_VEC static void relu_back_chunk(float *dinp, const float *restrict x, const float *dout,
                                       size_t n)
{
  for (size_t i = 0; i < n; i++)
    dinp[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}

void cohort_cpu_relu_backward(float *dinp, const float *x, const float *dout, size_t n)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    relu_back_chunk(dinp + i0, x + i0, dout + i0, n - i0 < CHUNK ? n - i0 : CHUNK);
  }
}
