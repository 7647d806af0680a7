/* LayerNorm over the last dimension, with or without the affine parameters (GPT-2 has them,
 * eps 1e-5; DiT's blocks have none, eps 1e-6). A NULL weight reads as ones and a NULL bias as
 * zeros; the branch is the same for every element of a row, so the loops stay vectorised. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

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
