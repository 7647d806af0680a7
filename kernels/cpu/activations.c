/* Activations: GELU (tanh form), SiLU and ReLU, forward and backward, element-wise. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <string.h>

#define CHUNK  4096
#define STRIPE 64

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

static long n_chunks(size_t n)
{
  return (long)((n + CHUNK - 1) / CHUNK);
}

static size_t chunk_len(size_t n, size_t i0)
{
  return n - i0 < CHUNK ? n - i0 : CHUNK;
}

COHORT_VEC static void silu_chunk(float *restrict out, const float *restrict inp, size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = cohort_silu(inp[i]);
}

void cohort_cpu_silu_forward(float *out, const float *inp, size_t n)
{
  long chunks = n_chunks(n);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    silu_chunk(out + i0, inp + i0, chunk_len(n, i0));
  }
}

/* dinp may alias dout, so no restrict on those two. */
COHORT_VEC static void silu_back_chunk(float *dinp, const float *restrict inp, const float *dout,
                                       size_t n)
{
  for (size_t i = 0; i < n; i++)
    dinp[i] = dout[i] * cohort_silu_grad(inp[i]);
}

void cohort_cpu_silu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
  long chunks = n_chunks(n);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    silu_back_chunk(dinp + i0, inp + i0, dout + i0, chunk_len(n, i0));
  }
}
