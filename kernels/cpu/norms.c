/* Normalisations: LayerNorm (GPT, DiT) and BatchNorm2d split into the steps that
 * SyncBatchNorm combines across ranks. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <math.h>

#define LANES 8

COHORT_VEC static void ln_row(float *restrict out, float *restrict mean, float *restrict rstd,
                              const float *restrict x, const float *restrict w,
                              const float *restrict b, int C, float eps)
{
  float m = cohort_row_sum(x, C) / C;
  float acc[COHORT_LANES] = {0};
  int i = 0;
  for (; i + COHORT_LANES <= C; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++) {
      float d = x[i + l] - m;
      acc[l] += d * d;
    }
  float var = cohort_sum_lanes(acc);
  for (; i < C; i++)
    var += (x[i] - m) * (x[i] - m);
  float rs = 1.0f / sqrtf(var / C + eps);
  if (w && b)
    for (int c = 0; c < C; c++)
      out[c] = cohort_ln_norm(x[c], m, rs) * w[c] + b[c];
  else
    for (int c = 0; c < C; c++)
      out[c] = cohort_ln_norm(x[c], m, rs) * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
  *mean = m;
  *rstd = rs;
}

void cohort_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C, float eps)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    ln_row(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, w, b, C, eps);
}

/* dxhat = dout * w; dinp += rs * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
COHORT_VEC static void ln_back_row(float *restrict dinp, const float *restrict dout,
                                   const float *restrict x, const float *restrict w, float m,
                                   float rs, int C)
{
  float a1[COHORT_LANES] = {0}, a2[COHORT_LANES] = {0};
  int i = 0;
  for (; i + COHORT_LANES <= C; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++) {
      float dxh = dout[i + l] * (w ? w[i + l] : 1.0f);
      a1[l] += dxh;
      a2[l] += dxh * cohort_ln_norm(x[i + l], m, rs);
    }
  float s1 = cohort_sum_lanes(a1), s2 = cohort_sum_lanes(a2);
  for (; i < C; i++) {
    float dxh = dout[i] * (w ? w[i] : 1.0f);
    s1 += dxh;
    s2 += dxh * cohort_ln_norm(x[i], m, rs);
  }
  s1 /= C;
  s2 /= C;
  for (int c = 0; c < C; c++) {
    float xh = cohort_ln_norm(x[c], m, rs);
    dinp[c] += rs * (dout[c] * (w ? w[c] : 1.0f) - s1 - xh * s2);
  }
}

/* Column sums for dw (dout * xhat) and db (dout) over a stripe of at most 64 columns, rows
 * in order; either output may be NULL. */
COHORT_VEC static void ln_param_stripe(float *restrict dw, float *restrict db,
                                       const float *restrict dout, const float *restrict inp,
                                       const float *restrict mean, const float *restrict rstd,
                                       int N, int C, int c0, int width)
{
  float aw[64], ab[64];
  for (int j = 0; j < width; j++)
    aw[j] = ab[j] = 0.0f;
  for (int n = 0; n < N; n++) {
    const float *g = dout + (size_t)n * C + c0;
    const float *x = inp + (size_t)n * C + c0;
    float m = mean[n], rs = rstd[n];
    for (int j = 0; j < width; j++) {
      aw[j] += g[j] * cohort_ln_norm(x[j], m, rs);
      ab[j] += g[j];
    }
  }
  for (int j = 0; j < width; j++) {
    if (dw)
      dw[c0 + j] += aw[j];
    if (db)
      db[c0 + j] += ab[j];
  }
}

void cohort_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C)
{
  int stripes = dw || db ? (C + 63) / 64 : 0;
  int par = (size_t)N * C >= COHORT_CPU_PAR_MIN;
#pragma omp parallel if (par)
  {
#pragma omp for schedule(static) nowait
    for (int s = 0; s < stripes; s++) {
      int c0 = s * 64;
      int width = C - c0 < 64 ? C - c0 : 64;
      ln_param_stripe(dw, db, dout, inp, mean, rstd, N, C, c0, width);
    }
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++)
      ln_back_row(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, mean[n],
                  rstd[n], C);
  }
}

/* sum of x[0..n) in double, LANES partial sums added in order */
COHORT_VEC static double row_sum_d(const float *restrict x, int n)
{
  double acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += x[i + l];
  double s = 0.0;
  for (int l = 0; l < LANES; l++)
    s += acc[l];
  for (; i < n; i++)
    s += x[i];
  return s;
}

/* sum of (x - m)^2 in double */
COHORT_VEC static double row_m2_d(const float *restrict x, double m, int n)
{
  double acc[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      double d = x[i + l] - m;
      acc[l] += d * d;
    }
  double s = 0.0;
  for (int l = 0; l < LANES; l++)
    s += acc[l];
  for (; i < n; i++)
    s += (x[i] - m) * (x[i] - m);
  return s;
}

/* Work below this many values per call stays on one thread. */
static int parallel(int B, int C, int HW)
{
  return (size_t)B * C * HW >= COHORT_CPU_PAR_MIN;
}

void cohort_cpu_bn_stats(const float *x, int B, int C, int HW, float *mean, float *m2)
{
  size_t n = (size_t)B * HW;
#pragma omp parallel for schedule(static) if (parallel(B, C, HW))
  for (int c = 0; c < C; c++) {
    if (n == 0) {
      mean[c] = m2[c] = 0.0f;
      continue;
    }
    /* Two passes: the mean first, then squared deviations from it, which keeps M2 accurate
     * when the mean is large against the spread. */
    double s = 0.0;
    for (int b = 0; b < B; b++)
      s += row_sum_d(x + ((size_t)b * C + c) * HW, HW);
    double m = s / (double)n, q = 0.0;
    for (int b = 0; b < B; b++)
      q += row_m2_d(x + ((size_t)b * C + c) * HW, m, HW);
    mean[c] = (float)m;
    m2[c] = (float)q;
  }
}

void cohort_cpu_bn_combine_stats(float *mean, float *m2, const float *ranks, int R, int C)
{
  size_t stride = 2 * (size_t)C + 1;
  for (int c = 0; c < C; c++) {
    double n = 0.0, m = 0.0, q = 0.0;
    for (int r = 0; r < R; r++) {
      const float *row = ranks + r * stride;
      double nr = row[2 * (size_t)C];
      if (nr <= 0.0)
        continue;
      double delta = row[c] - m, tot = n + nr;
      m += delta * (nr / tot);
      q += row[C + c] + delta * delta * (n * nr / tot);
      n = tot;
    }
    mean[c] = (float)m;
    m2[c] = (float)q;
  }
}

void cohort_cpu_bn_rstd(float *rstd, const float *var, double scale, float eps, int C)
{
  for (int c = 0; c < C; c++)
    rstd[c] = (float)(1.0 / sqrt((double)var[c] * scale + (double)eps));
}

COHORT_VEC static void bn_row(float *y, const float *x, float m, float k, float b, int n)
{
  for (int i = 0; i < n; i++)
    y[i] = (x[i] - m) * k + b;
}

void cohort_cpu_bn_forward(float *y, const float *x, const float *mean, const float *rstd,
                           const float *weight, const float *bias, int B, int C, int HW)
{
#pragma omp parallel for schedule(static) if (parallel(B, C, HW))
  for (int i = 0; i < B * C; i++) {
    int c = i % C;
    bn_row(y + (size_t)i * HW, x + (size_t)i * HW, mean[c], rstd[c] * weight[c], bias[c], HW);
  }
}

void cohort_cpu_bn_running_update(float *running_mean, float *running_var, const float *mean,
                                  const float *m2, double count, float momentum, int C)
{
  double mom = momentum, div = count > 1.0 ? count - 1.0 : 1.0;
  for (int c = 0; c < C; c++) {
    running_mean[c] = (float)((1.0 - mom) * running_mean[c] + mom * mean[c]);
    running_var[c] = (float)((1.0 - mom) * running_var[c] + mom * (m2[c] / div));
  }
}

/* Adds sum of dy and of dy * xhat over one row to *s1 and *s2. */
COHORT_VEC static void reduce_row(double *s1, double *s2, const float *restrict dy,
                                  const float *restrict x, float m, float rs, int n)
{
  double a1[LANES] = {0}, a2[LANES] = {0};
  int i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      float g = dy[i + l];
      a1[l] += g;
      a2[l] += g * ((x[i + l] - m) * rs);
    }
  double t1 = 0.0, t2 = 0.0;
  for (int l = 0; l < LANES; l++) {
    t1 += a1[l];
    t2 += a2[l];
  }
  for (; i < n; i++) {
    t1 += dy[i];
    t2 += dy[i] * ((x[i] - m) * rs);
  }
  *s1 += t1;
  *s2 += t2;
}

void cohort_cpu_bn_backward_reduce(const float *dy, const float *x, const float *mean,
                                   const float *rstd, int B, int C, int HW, float *sum_dy,
                                   float *sum_dy_xhat)
{
#pragma omp parallel for schedule(static) if (parallel(B, C, HW))
  for (int c = 0; c < C; c++) {
    double s1 = 0.0, s2 = 0.0;
    for (int b = 0; b < B; b++) {
      size_t off = ((size_t)b * C + c) * HW;
      reduce_row(&s1, &s2, dy + off, x + off, mean[c], rstd[c], HW);
    }
    sum_dy[c] = (float)s1;
    sum_dy_xhat[c] = (float)s2;
  }
}

COHORT_VEC static void dx_row(float *restrict dx, const float *restrict dy, const float *restrict x,
                              float m, float rs, float k, float a, float bq, int n)
{
  for (int i = 0; i < n; i++)
    dx[i] += k * (dy[i] - a - (x[i] - m) * rs * bq);
}

void cohort_cpu_bn_backward_dx(float *dx, const float *dy, const float *x, const float *mean,
                               const float *rstd, const float *weight, const float *sum_dy,
                               const float *sum_dy_xhat, double count, int B, int C, int HW)
{
#pragma omp parallel for schedule(static) if (parallel(B, C, HW))
  for (int i = 0; i < B * C; i++) {
    int c = i % C;
    size_t off = (size_t)i * HW;
    dx_row(dx + off, dy + off, x + off, mean[c], rstd[c], weight[c] * rstd[c],
           (float)(sum_dy[c] / count), (float)(sum_dy_xhat[c] / count), HW);
  }
}

void cohort_cpu_bn_backward_params(float *dweight, float *dbias, const float *sum_dy,
                                   const float *sum_dy_xhat, int C)
{
  for (int c = 0; dweight && c < C; c++)
    dweight[c] += sum_dy_xhat[c];
  for (int c = 0; dbias && c < C; c++)
    dbias[c] += sum_dy[c];
}
