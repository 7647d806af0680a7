/* Optimizer updates: AdamW, SGD with momentum, the EMA of the weights, and the sum of squares
 * behind gradient clipping. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#define CHUNK 8192

COHORT_VEC static void adamw_chunk(float *restrict p, const float *restrict g, float *restrict m,
                                   float *restrict v, size_t n, float lr, float b1, float b2,
                                   float eps, float wd, float bc1, float bc2)
{
  for (size_t i = 0; i < n; i++)
    cohort_adamw_elem(&p[i], g[i], &m[i], &v[i], lr, b1, b2, eps, wd, bc1, bc2);
}

void cohort_cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float wd, float bc1,
                             float bc2)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    adamw_chunk(params + i0, grads + i0, m + i0, v + i0, n - i0 < CHUNK ? n - i0 : CHUNK, lr, beta1,
                beta2, eps, wd, bc1, bc2);
  }
}

COHORT_VEC static double sumsq_chunk(const float *restrict x, size_t n)
{
  double acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++)
      acc[l] += (double)x[i + l] * x[i + l];
  double s = 0.0;
  for (int l = 0; l < 8; l++)
    s += acc[l];
  for (; i < n; i++)
    s += (double)x[i] * x[i];
  return s;
}

/* Chunks of a fixed size, partial sums added in chunk order: the result depends on n only,
 * not on the thread count. */
double cohort_cpu_sum_squares(const float *values, size_t n)
{
  enum { PARTS = 64 };
  double part[PARTS] = {0};
  size_t per = (n + PARTS - 1) / PARTS;
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (int k = 0; k < PARTS; k++) {
    size_t i0 = (size_t)k * per;
    if (i0 < n)
      part[k] = sumsq_chunk(values + i0, n - i0 < per ? n - i0 : per);
  }
  double s = 0.0;
  for (int k = 0; k < PARTS; k++)
    s += part[k];
  return s;
}

COHORT_VEC static void ema_chunk(float *restrict e, const float *restrict p, size_t n, float d)
{
  for (size_t i = 0; i < n; i++)
    e[i] = d * e[i] + (1.0f - d) * p[i];
}

void cohort_cpu_ema_update(float *ema, const float *params, size_t n, float decay)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    ema_chunk(ema + i0, params + i0, n - i0 < CHUNK ? n - i0 : CHUNK, decay);
  }
}

COHORT_VEC static void sgd_chunk(float *restrict p, const float *restrict g, float *restrict buf,
                                 size_t n, float lr, float mom, float damp, float wd, int nesterov,
                                 int first)
{
  for (size_t i = 0; i < n; i++)
    cohort_sgd_elem(&p[i], g[i], &buf[i], lr, mom, damp, wd, nesterov, first);
}

/* Without momentum there is no buffer. */
COHORT_VEC static void sgd_plain_chunk(float *restrict p, const float *restrict g, size_t n,
                                       float lr, float wd)
{
  for (size_t i = 0; i < n; i++)
    cohort_sgd_elem(&p[i], g[i], NULL, lr, 0.0f, 0.0f, wd, 0, 0);
}

void cohort_cpu_sgd_update(float *params, const float *grads, float *momentum_buf, size_t n,
                           float lr, float momentum, float dampening, float weight_decay,
                           int nesterov, int first_step)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
    if (momentum != 0.0f)
      sgd_chunk(params + i0, grads + i0, momentum_buf + i0, len, lr, momentum, dampening,
                weight_decay, nesterov, first_step);
    else
      sgd_plain_chunk(params + i0, grads + i0, len, lr, weight_decay);
  }
}
