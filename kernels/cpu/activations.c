/* Activations: GELU (tanh form), SiLU, SwiGLU and ReLU, forward and backward, element-wise, and
 * the softmax of rows (attention written as matrix products). */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <math.h>
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

COHORT_VEC static void swiglu_chunk(float *restrict out, const float *restrict gate,
                                    const float *restrict up, size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = cohort_silu(gate[i]) * up[i];
}

void cohort_cpu_swiglu_forward(float *out, const float *gate, const float *up, size_t n)
{
  long chunks = n_chunks(n);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    swiglu_chunk(out + i0, gate + i0, up + i0, chunk_len(n, i0));
  }
}

/* Either output may alias dout, so no restrict on those three. */
COHORT_VEC static void swiglu_back_chunk(float *dgate, float *dup, const float *dout,
                                         const float *restrict gate, const float *restrict up,
                                         size_t n)
{
  for (size_t i = 0; i < n; i++) {
    float g = dout[i], x = gate[i], u = up[i];
    dgate[i] = g * u * cohort_silu_grad(x);
    dup[i] = g * cohort_silu(x);
  }
}

void cohort_cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                                const float *up, size_t n)
{
  long chunks = n_chunks(n);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    swiglu_back_chunk(dgate + i0, dup + i0, dout + i0, gate + i0, up + i0, chunk_len(n, i0));
  }
}

/* Softmax of each row of V values after multiplying by `scale` (attention's 1/sqrt(d)); out
 * may be inp. The row's maximum is subtracted first; the sum is in double. */
void cohort_cpu_softmax_forward(float *out, const float *inp, int N, int V, float scale)
{
#pragma omp parallel for schedule(static) if ((size_t)N * V >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * V;
    float *y = out + (size_t)n * V;
    float m = -INFINITY;
    for (int v = 0; v < V; v++)
      m = fmaxf(m, x[v] * scale);
    double s = 0.0;
    for (int v = 0; v < V; v++) {
      y[v] = expf(x[v] * scale - m);
      s += y[v];
    }
    float r = (float)(1.0 / s);
    for (int v = 0; v < V; v++)
      y[v] *= r;
  }
}

/* dinp = scale * out * (dout - sum_v dout * out) per row; dinp may be dout. */
void cohort_cpu_softmax_backward(float *dinp, const float *out, const float *dout, int N, int V,
                                 float scale)
{
#pragma omp parallel for schedule(static) if ((size_t)N * V >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *y = out + (size_t)n * V, *g = dout + (size_t)n * V;
    float *d = dinp + (size_t)n * V;
    double s = 0.0;
    for (int v = 0; v < V; v++)
      s += (double)g[v] * y[v];
    float sf = (float)s;
    for (int v = 0; v < V; v++)
      d[v] = scale * y[v] * (g[v] - sf);
  }
}
