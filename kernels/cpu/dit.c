/* The smaller DiT ops: SiLU, timestep features, label-embedding rows, the per-sample MSE and
 * axpby. Element-wise loops go in chunks as in activations.c. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <string.h>

#define CHUNK  4096
#define STRIPE 64

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

void cohort_cpu_timestep_embedding(float *out, const float *t, int B, int dim, float max_period)
{
  for (int b = 0; b < B; b++)
    for (int j = 0; j < dim; j++)
      out[(size_t)b * dim + j] = cohort_timestep_feature(t[b], j, dim / 2, max_period);
}

void cohort_cpu_rows_gather(float *out, const float *table, const int *rows, int B, int C)
{
  for (int b = 0; b < B; b++)
    memcpy(out + (size_t)b * C, table + (size_t)rows[b] * C, sizeof(float) * C);
}

COHORT_VEC static void acc_stripe(float *restrict dst, const float *restrict src, int width)
{
  for (int j = 0; j < width; j++)
    dst[j] += src[j];
}

/* Parallel over stripes of channels, samples in order inside a stripe: two samples with the
 * same row never race, and the order of the sum is fixed. */
void cohort_cpu_rows_scatter_add(float *dtable, const float *dout, const int *rows, int B, int C)
{
  int stripes = (C + STRIPE - 1) / STRIPE;
#pragma omp parallel for schedule(static) if ((size_t)B * C >= COHORT_CPU_PAR_MIN)
  for (int s = 0; s < stripes; s++) {
    int c0 = s * STRIPE;
    int width = C - c0 < STRIPE ? C - c0 : STRIPE;
    for (int b = 0; b < B; b++)
      acc_stripe(dtable + (size_t)rows[b] * C + c0, dout + (size_t)b * C + c0, width);
  }
}

/* sum of (p - q)^2 in the lane order of reduce.h */
COHORT_VEC static float row_sq_diff(const float *restrict p, const float *restrict q, int n)
{
  float acc[COHORT_LANES] = {0};
  int i = 0;
  for (; i + COHORT_LANES <= n; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++) {
      float d = p[i + l] - q[i + l];
      acc[l] += d * d;
    }
  float s = cohort_sum_lanes(acc);
  for (; i < n; i++)
    s += (p[i] - q[i]) * (p[i] - q[i]);
  return s;
}

void cohort_cpu_mse_forward(float *losses, const float *pred, const float *target, int B, int D)
{
#pragma omp parallel for schedule(static) if ((size_t)B * D >= COHORT_CPU_PAR_MIN)
  for (int b = 0; b < B; b++)
    losses[b] = row_sq_diff(pred + (size_t)b * D, target + (size_t)b * D, D) / D;
}

COHORT_VEC static void mse_back_chunk(float *restrict d, const float *restrict p,
                                      const float *restrict q, size_t n, float k)
{
  for (size_t i = 0; i < n; i++)
    d[i] = (p[i] - q[i]) * k;
}

void cohort_cpu_mse_backward(float *dpred, const float *pred, const float *target, int B, int D,
                             float scale)
{
  size_t n = (size_t)B * D;
  float k = 2.0f * scale / (float)D;
  long chunks = n_chunks(n);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    mse_back_chunk(dpred + i0, pred + i0, target + i0, chunk_len(n, i0), k);
  }
}

/* out may alias x or y. */
COHORT_VEC static void axpby_chunk(float *out, float a, const float *x, float b, const float *y,
                                   size_t n)
{
  for (size_t i = 0; i < n; i++)
    out[i] = a * x[i] + b * y[i];
}

void cohort_cpu_axpby(float *out, float a, const float *x, float b, const float *y, size_t n)
{
  long chunks = n_chunks(n);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    axpby_chunk(out + i0, a, x + i0, b, y + i0, chunk_len(n, i0));
  }
}
