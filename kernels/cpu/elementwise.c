/* Element-wise arithmetic: residual sums, axpby, scaling, and adaLN-Zero's modulation and
 * gated residual (per-example vectors broadcast over tokens). */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <string.h>

#define CHUNK  4096
#define STRIPE 64

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

COHORT_VEC static void modulate_row(float *out, const float *x, const float *restrict shift,
                                    const float *restrict scale, int C)
{
  for (int c = 0; c < C; c++)
    out[c] = x[c] * (1.0f + scale[c]) + shift[c];
}

void cohort_cpu_modulate_forward(float *out, const float *x, const float *shift, const float *scale,
                                 int B, int T, int C, int ld)
{
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int bt = 0; bt < B * T; bt++) {
    size_t v = (size_t)(bt / T) * ld;
    modulate_row(out + (size_t)bt * C, x + (size_t)bt * C, shift + v, scale + v, C);
  }
}

/* One sample's stripe of `width` channels (row stride C) over its T tokens. */
COHORT_VEC static void modulate_back_stripe(float *restrict dx, float *restrict dshift,
                                            float *restrict dscale, const float *restrict dout,
                                            const float *restrict x, const float *restrict scale,
                                            int T, int C, int width)
{
  float as[STRIPE], ac[STRIPE];
  for (int j = 0; j < width; j++)
    as[j] = ac[j] = 0.0f;
  for (int t = 0; t < T; t++) {
    const float *g = dout + (size_t)t * C, *xr = x + (size_t)t * C;
    float *d = dx + (size_t)t * C;
    for (int j = 0; j < width; j++) {
      d[j] += g[j] * (1.0f + scale[j]);
      as[j] += g[j];
      ac[j] += g[j] * xr[j];
    }
  }
  for (int j = 0; j < width; j++) {
    dshift[j] += as[j];
    dscale[j] += ac[j];
  }
}

void cohort_cpu_modulate_backward(float *dx, float *dshift, float *dscale, const float *dout,
                                  const float *x, const float *scale, int B, int T, int C, int ld)
{
  int stripes = (C + STRIPE - 1) / STRIPE;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int task = 0; task < B * stripes; task++) {
    int b = task / stripes, c0 = (task % stripes) * STRIPE;
    int width = C - c0 < STRIPE ? C - c0 : STRIPE;
    size_t off = (size_t)b * T * C + c0, v = (size_t)b * ld + c0;
    modulate_back_stripe(dx + off, dshift + v, dscale + v, dout + off, x + off, scale + v, T, C,
                         width);
  }
}

/* out may alias x: no restrict on those two. */
COHORT_VEC static void gated_row(float *out, const float *x, const float *restrict gate,
                                 const float *restrict y, int C)
{
  for (int c = 0; c < C; c++)
    out[c] = x[c] + gate[c] * y[c];
}

void cohort_cpu_gated_residual_forward(float *out, const float *x, const float *gate,
                                       const float *y, int B, int T, int C, int ld)
{
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int bt = 0; bt < B * T; bt++)
    gated_row(out + (size_t)bt * C, x + (size_t)bt * C, gate + (size_t)(bt / T) * ld,
              y + (size_t)bt * C, C);
}

COHORT_VEC static void gated_back_stripe(float *restrict dx, float *restrict dy,
                                         float *restrict dgate, const float *restrict dout,
                                         const float *restrict gate, const float *restrict y, int T,
                                         int C, int width)
{
  float ag[STRIPE];
  for (int j = 0; j < width; j++)
    ag[j] = 0.0f;
  for (int t = 0; t < T; t++) {
    size_t r = (size_t)t * C;
    for (int j = 0; j < width; j++) {
      float g = dout[r + j];
      ag[j] += g * y[r + j];
      dy[r + j] = gate[j] * g;
    }
    if (dx)
      for (int j = 0; j < width; j++)
        dx[r + j] += dout[r + j];
  }
  for (int j = 0; j < width; j++)
    dgate[j] += ag[j];
}

void cohort_cpu_gated_residual_backward(float *dx, float *dy, float *dgate, const float *dout,
                                        const float *gate, const float *y, int B, int T, int C,
                                        int ld)
{
  int stripes = (C + STRIPE - 1) / STRIPE;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int task = 0; task < B * stripes; task++) {
    int b = task / stripes, c0 = (task % stripes) * STRIPE;
    int width = C - c0 < STRIPE ? C - c0 : STRIPE;
    size_t off = (size_t)b * T * C + c0, v = (size_t)b * ld + c0;
    gated_back_stripe(dx ? dx + off : NULL, dy + off, dgate + v, dout + off, gate + v, y + off, T,
                      C, width);
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

COHORT_VEC static void scale_chunk(float *restrict x, size_t n, float s)
{
  for (size_t i = 0; i < n; i++)
    x[i] *= s;
}

void cohort_cpu_dropout(float *out, const float *inp, const uint64_t *keys, int rows,
                        int rows_per_key, int cols, uint64_t salt, float p)
{
  if (rows <= 0 || cols <= 0 || rows_per_key <= 0)
    return;
  uint64_t threshold = cohort_dropout_threshold(p);
  float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= COHORT_CPU_PAR_MIN)
  for (int r = 0; r < rows; r++) {
    uint64_t key = keys[r / rows_per_key];
    uint32_t within = (uint32_t)(r % rows_per_key);
    const float *x = inp + (size_t)r * cols;
    float *y = out + (size_t)r * cols;
    for (int c = 0; c < cols; c++)
      y[c] =
          cohort_dropout_keep(key, within, (uint32_t)c, salt, threshold) ? x[c] * keep_scale : 0.0f;
  }
}

void cohort_cpu_scale(float *values, size_t n, float s)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    scale_chunk(values + i0, n - i0 < CHUNK ? n - i0 : CHUNK, s);
  }
}
