/* Normalisations: LayerNorm (GPT, DiT), RMSNorm (Llama, Qwen), BatchNorm2d split into the steps
 * that SyncBatchNorm combines across ranks, and GroupNorm (the VAE). */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

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

COHORT_VEC static void rms_row(float *restrict out, float *restrict rstd, const float *restrict x,
                               const float *restrict w, int C, float eps)
{
  float rs = 1.0f / sqrtf(cohort_row_dot(x, x, C) / C + eps);
  for (int c = 0; c < C; c++)
    out[c] = (x[c] * rs) * (w ? w[c] : 1.0f);
  *rstd = rs;
}

void cohort_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                                int C, float eps)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    rms_row(out + (size_t)n * C, rstd + n, inp + (size_t)n * C, w, C, eps);
}

/* With g = dout * w and xhat = x * rs: dinp += rs * (g - xhat * mean(g * xhat)). */
COHORT_VEC static void rms_back_row(float *restrict dinp, const float *restrict dout,
                                    const float *restrict x, const float *restrict w, float rs,
                                    int C)
{
  float acc[COHORT_LANES] = {0};
  int i = 0;
  for (; i + COHORT_LANES <= C; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++)
      acc[l] += dout[i + l] * (w ? w[i + l] : 1.0f) * (x[i + l] * rs);
  float s = cohort_sum_lanes(acc);
  for (; i < C; i++)
    s += dout[i] * (w ? w[i] : 1.0f) * (x[i] * rs);
  s /= C;
  for (int c = 0; c < C; c++)
    dinp[c] += rs * (dout[c] * (w ? w[c] : 1.0f) - (x[c] * rs) * s);
}

/* dw's column sums of dout * xhat over a stripe of at most 64 columns, rows in order. */
COHORT_VEC static void rms_param_stripe(float *restrict dw, const float *restrict dout,
                                        const float *restrict inp, const float *restrict rstd,
                                        int N, int C, int c0, int width)
{
  float aw[64];
  for (int j = 0; j < width; j++)
    aw[j] = 0.0f;
  for (int n = 0; n < N; n++) {
    const float *g = dout + (size_t)n * C + c0, *x = inp + (size_t)n * C + c0;
    float rs = rstd[n];
    for (int j = 0; j < width; j++)
      aw[j] += g[j] * (x[j] * rs);
  }
  for (int j = 0; j < width; j++)
    dw[c0 + j] += aw[j];
}

void cohort_cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, const float *rstd, int N, int C)
{
  int stripes = dw ? (C + 63) / 64 : 0;
  int par = (size_t)N * C >= COHORT_CPU_PAR_MIN;
#pragma omp parallel if (par)
  {
#pragma omp for schedule(static) nowait
    for (int s = 0; s < stripes; s++) {
      int c0 = s * 64;
      rms_param_stripe(dw, dout, inp, rstd, N, C, c0, C - c0 < 64 ? C - c0 : 64);
    }
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++)
      rms_back_row(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, w, rstd[n], C);
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

/* ---- BatchNorm over rows of C channels (HW == 1): channels-last (NHWC) activations, where a
 * pixel's channels are one contiguous row. The per-channel sums then run across each row with
 * the row loop outside; the rows are cut into blocks of a fixed size whose partial sums (in
 * double) are added in block order, so the result depends on the inputs alone, not on the
 * thread count. ---- */
#define ROW_BLOCK 256

COHORT_VEC static void sum_rows_d(double *restrict acc, const float *restrict x, size_t rows, int C)
{
  for (int c = 0; c < C; c++)
    acc[c] = 0.0;
  for (size_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++)
      acc[c] += x[r * C + c];
}

COHORT_VEC static void m2_rows_d(double *restrict acc, const float *restrict x,
                                 const double *restrict m, size_t rows, int C)
{
  for (int c = 0; c < C; c++)
    acc[c] = 0.0;
  for (size_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) {
      double d = x[r * C + c] - m[c];
      acc[c] += d * d;
    }
}

COHORT_VEC static void reduce_rows_d(double *restrict a1, double *restrict a2,
                                     const float *restrict dy, const float *restrict x,
                                     const float *restrict m, const float *restrict rs, size_t rows,
                                     int C)
{
  for (int c = 0; c < C; c++)
    a1[c] = a2[c] = 0.0;
  for (size_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) {
      float g = dy[r * C + c];
      a1[c] += g;
      a2[c] += g * ((x[r * C + c] - m[c]) * rs[c]);
    }
}

/* Per-block partial sums in `part` [blocks][2C], blocks of ROW_BLOCK rows; `which` 0: sums of x,
 * 1: squared deviations from m, 2: the backward's two sums. Returns the number of blocks. */
static size_t block_sums(double *part, int which, const float *x, const float *dy, const double *m,
                         const float *mf, const float *rs, size_t n, int C)
{
  size_t blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for schedule(static) if (n * C >= COHORT_CPU_PAR_MIN)
  for (size_t k = 0; k < blocks; k++) {
    size_t r0 = k * ROW_BLOCK, rows = n - r0 < ROW_BLOCK ? n - r0 : ROW_BLOCK;
    double *p = part + k * 2 * C;
    if (which == 0)
      sum_rows_d(p, x + r0 * C, rows, C);
    else if (which == 1)
      m2_rows_d(p, x + r0 * C, m, rows, C);
    else
      reduce_rows_d(p, p + C, dy + r0 * C, x + r0 * C, mf, rs, rows, C);
  }
  return blocks;
}

/* out[c] (and out2[c]) = the blocks' partial sums added in block order. */
static void add_blocks(double *out, double *out2, const double *part, size_t blocks, int C)
{
  for (int c = 0; c < C; c++) {
    double s = 0.0, s2 = 0.0;
    for (size_t k = 0; k < blocks; k++) {
      s += part[k * 2 * C + c];
      s2 += part[k * 2 * C + C + c];
    }
    out[c] = s;
    if (out2)
      out2[c] = s2;
  }
}

/* The calling thread's room for the partial sums, grown on demand and kept: a training step
 * asks for the same sizes every time, and a fresh allocation of this size (up to a few MiB)
 * had its pages faulted in on every call. */
typedef struct {
  double *buf;
  size_t cap;
} PartBuf;

static pthread_key_t part_key;
static pthread_once_t part_once = PTHREAD_ONCE_INIT;

static void part_free(void *p)
{
  PartBuf *b = p;
  if (b) {
    free(b->buf);
    free(b);
  }
}

/* The main thread's buffer: thread-exit destructors do not run for it. */
static void part_free_at_exit(void)
{
  PartBuf *b = pthread_getspecific(part_key);
  pthread_setspecific(part_key, NULL);
  part_free(b);
}

static void part_init(void)
{
  if (pthread_key_create(&part_key, part_free) == 0)
    atexit(part_free_at_exit);
}

static double *block_memory(size_t n, int C)
{
  size_t want = ((n + ROW_BLOCK - 1) / ROW_BLOCK) * 2 * (size_t)C + 2 * (size_t)C;
  pthread_once(&part_once, part_init);
  PartBuf *b = pthread_getspecific(part_key);
  if (!b && (b = calloc(1, sizeof *b)) != NULL && pthread_setspecific(part_key, b) != 0) {
    free(b);
    b = NULL;
  }
  if (b && b->cap < want) {
    free(b->buf);
    b->buf = malloc(want * sizeof(double));
    b->cap = b->buf ? want : 0;
  }
  if (!b || !b->buf) {
    fprintf(stderr, "cohort: out of memory for BatchNorm's partial sums (%d channels)\n", C);
    abort();
  }
  return b->buf;
}

static void bn_stats_rows(const float *x, size_t n, int C, float *mean, float *m2)
{
  double *part = block_memory(n, C), *m = part + ((n + ROW_BLOCK - 1) / ROW_BLOCK) * 2 * C;
  double *q = m + C;
  add_blocks(m, NULL, part, block_sums(part, 0, x, NULL, NULL, NULL, NULL, n, C), C);
  for (int c = 0; c < C; c++)
    m[c] /= (double)n;
  add_blocks(q, NULL, part, block_sums(part, 1, x, NULL, m, NULL, NULL, n, C), C);
  for (int c = 0; c < C; c++) {
    mean[c] = (float)m[c];
    m2[c] = (float)q[c];
  }
}

COHORT_VEC static void bn_rows(float *restrict y, const float *restrict x, const float *restrict m,
                               const float *restrict k, const float *restrict b, size_t rows, int C)
{
  for (size_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++)
      y[r * C + c] = (x[r * C + c] - m[c]) * k[c] + b[c];
}

static void bn_forward_rows(float *y, const float *x, const float *mean, const float *rstd,
                            const float *weight, const float *bias, size_t n, int C)
{
  float *k = malloc((size_t)C * sizeof(float));
  if (!k)
    abort();
  for (int c = 0; c < C; c++)
    k[c] = rstd[c] * weight[c];
  size_t blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for schedule(static) if (n * C >= COHORT_CPU_PAR_MIN)
  for (size_t j = 0; j < blocks; j++) {
    size_t r0 = j * ROW_BLOCK, rows = n - r0 < ROW_BLOCK ? n - r0 : ROW_BLOCK;
    bn_rows(y + r0 * C, x + r0 * C, mean, k, bias, rows, C);
  }
  free(k);
}

static void bn_backward_reduce_rows(const float *dy, const float *x, const float *mean,
                                    const float *rstd, size_t n, int C, float *sum_dy,
                                    float *sum_dy_xhat)
{
  double *part = block_memory(n, C), *s1 = part + ((n + ROW_BLOCK - 1) / ROW_BLOCK) * 2 * C;
  double *s2 = s1 + C;
  add_blocks(s1, s2, part, block_sums(part, 2, x, dy, NULL, mean, rstd, n, C), C);
  for (int c = 0; c < C; c++) {
    sum_dy[c] = (float)s1[c];
    sum_dy_xhat[c] = (float)s2[c];
  }
}

/* BatchNorm's dx of one element: k = weight rstd, a = sum_dy / count, bq = sum_dy_xhat / count. */
static inline float bn_dx(float dy, float x, float m, float rs, float k, float a, float bq)
{
  return k * (dy - a - (x - m) * rs * bq);
}

/* Per channel: m, rs, k, a, bq as bn_dx takes them. Two loops rather than one with a test
 * inside: written over, dx is not read (a pass over memory less, and no zeroing before). */
COHORT_VEC static void dx_rows(float *restrict dx, int accumulate, const float *restrict dy,
                               const float *restrict x, const float *restrict pc, size_t rows,
                               int C)
{
  const float *m = pc, *rs = pc + C, *k = pc + 2 * C, *a = pc + 3 * C, *bq = pc + 4 * C;
  if (accumulate) {
    for (size_t r = 0; r < rows; r++)
      for (int c = 0; c < C; c++)
        dx[r * C + c] += bn_dx(dy[r * C + c], x[r * C + c], m[c], rs[c], k[c], a[c], bq[c]);
    return;
  }
  for (size_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++)
      dx[r * C + c] = bn_dx(dy[r * C + c], x[r * C + c], m[c], rs[c], k[c], a[c], bq[c]);
}

static void bn_backward_dx_rows(float *dx, int accumulate, const float *dy, const float *x,
                                const float *mean, const float *rstd, const float *weight,
                                const float *sum_dy, const float *sum_dy_xhat, double count,
                                size_t n, int C)
{
  float *pc = malloc(5 * (size_t)C * sizeof(float));
  if (!pc)
    abort();
  for (int c = 0; c < C; c++) {
    pc[c] = mean[c];
    pc[C + c] = rstd[c];
    pc[2 * C + c] = weight[c] * rstd[c];
    pc[3 * C + c] = (float)(sum_dy[c] / count);
    pc[4 * C + c] = (float)(sum_dy_xhat[c] / count);
  }
  size_t blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for schedule(static) if (n * C >= COHORT_CPU_PAR_MIN)
  for (size_t j = 0; j < blocks; j++) {
    size_t r0 = j * ROW_BLOCK, rows = n - r0 < ROW_BLOCK ? n - r0 : ROW_BLOCK;
    dx_rows(dx + r0 * C, accumulate, dy + r0 * C, x + r0 * C, pc, rows, C);
  }
  free(pc);
}

void cohort_cpu_bn_stats(const float *x, int B, int C, int HW, float *mean, float *m2)
{
  size_t n = (size_t)B * HW;
  if (HW == 1 && n > 0 && C > 0) {
    bn_stats_rows(x, n, C, mean, m2);
    return;
  }
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
  if (HW == 1 && B > 0 && C > 0) {
    bn_forward_rows(y, x, mean, rstd, weight, bias, (size_t)B, C);
    return;
  }
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
  if (HW == 1 && B > 0 && C > 0) {
    bn_backward_reduce_rows(dy, x, mean, rstd, (size_t)B, C, sum_dy, sum_dy_xhat);
    return;
  }
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

COHORT_VEC static void dx_row(float *restrict dx, int accumulate, const float *restrict dy,
                              const float *restrict x, float m, float rs, float k, float a,
                              float bq, int n)
{
  if (accumulate) {
    for (int i = 0; i < n; i++)
      dx[i] += bn_dx(dy[i], x[i], m, rs, k, a, bq);
    return;
  }
  for (int i = 0; i < n; i++)
    dx[i] = bn_dx(dy[i], x[i], m, rs, k, a, bq);
}

void cohort_cpu_bn_backward_dx(float *dx, int accumulate, const float *dy, const float *x,
                               const float *mean, const float *rstd, const float *weight,
                               const float *sum_dy, const float *sum_dy_xhat, double count, int B,
                               int C, int HW)
{
  if (HW == 1 && B > 0 && C > 0) {
    bn_backward_dx_rows(dx, accumulate, dy, x, mean, rstd, weight, sum_dy, sum_dy_xhat, count,
                        (size_t)B, C);
    return;
  }
#pragma omp parallel for schedule(static) if (parallel(B, C, HW))
  for (int i = 0; i < B * C; i++) {
    int c = i % C;
    size_t off = (size_t)i * HW;
    dx_row(dx + off, accumulate, dy + off, x + off, mean[c], rstd[c], weight[c] * rstd[c],
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

/* dx += rs (dy w - a - xhat bq): GroupNorm's input gradient over one channel's run. */
COHORT_VEC static void gn_dx_row(float *restrict dx, const float *restrict dy,
                                 const float *restrict x, float m, float rs, float w, float a,
                                 float bq, int n)
{
  for (int i = 0; i < n; i++)
    dx[i] += rs * (dy[i] * w - a - (x[i] - m) * rs * bq);
}

/* GroupNorm over x [B, C, HW]: the C / G channels of a group are contiguous in NCHW, so one
 * (example, group) is one run of n = C / G * HW values. Statistics in double, two passes. */
void cohort_cpu_group_norm_forward(float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int B, int C, int HW, int G,
                                   float eps)
{
  int cg = C / G;
  size_t n = (size_t)cg * HW;
#pragma omp parallel for schedule(static) if (parallel(B, C, HW))
  for (int i = 0; i < B * G; i++) {
    const float *x = inp + (size_t)i * n;
    double m = 0.0, q = 0.0;
    for (int c = 0; c < cg; c++)
      m += row_sum_d(x + (size_t)c * HW, HW);
    m /= (double)n;
    for (int c = 0; c < cg; c++)
      q += row_m2_d(x + (size_t)c * HW, m, HW);
    float mf = (float)m, rs = (float)(1.0 / sqrt(q / (double)n + (double)eps));
    mean[i] = mf;
    rstd[i] = rs;
    int g = i % G;
    for (int c = 0; c < cg; c++) {
      int ch = g * cg + c;
      float k = rs * (w ? w[ch] : 1.0f), sh = b ? b[ch] : 0.0f;
      bn_row(out + (size_t)i * n + (size_t)c * HW, x + (size_t)c * HW, mf, k, sh, HW);
    }
  }
}

void cohort_cpu_group_norm_backward(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean,
                                    const float *rstd, int B, int C, int HW, int G)
{
  int cg = C / G;
  size_t n = (size_t)cg * HW;
  int par = parallel(B, C, HW);
  /* The affine parameters: per channel, the examples in order. */
  if (dw || db) {
#pragma omp parallel for schedule(static) if (par)
    for (int ch = 0; ch < C; ch++) {
      double s1 = 0.0, s2 = 0.0;
      for (int bb = 0; bb < B; bb++) {
        int i = bb * G + ch / cg;
        size_t off = ((size_t)bb * C + ch) * HW;
        reduce_row(&s1, &s2, dout + off, inp + off, mean[i], rstd[i], HW);
      }
      if (dw)
        dw[ch] += (float)s2;
      if (db)
        db[ch] += (float)s1;
    }
  }
  /* dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dout * w[c]. */
#pragma omp parallel for schedule(static) if (par)
  for (int i = 0; i < B * G; i++) {
    int g = i % G;
    size_t base = (size_t)i * n;
    double a = 0.0, bq = 0.0;
    for (int c = 0; c < cg; c++) {
      double s1 = 0.0, s2 = 0.0;
      reduce_row(&s1, &s2, dout + base + (size_t)c * HW, inp + base + (size_t)c * HW, mean[i],
                 rstd[i], HW);
      float wc = w ? w[g * cg + c] : 1.0f;
      a += s1 * wc;
      bq += s2 * wc;
    }
    float am = (float)(a / (double)n), bm = (float)(bq / (double)n);
    for (int c = 0; c < cg; c++) {
      float wc = w ? w[g * cg + c] : 1.0f;
      size_t off = base + (size_t)c * HW;
      gn_dx_row(dinp + off, dout + off, inp + off, mean[i], rstd[i], wc, am, bm, HW);
    }
  }
}
