/* Row reductions in a fixed lane order: 16 partial sums, then added in order. Vectorises
 * without -ffast-math and gives the same result on every run. */
#pragma once

#include <math.h>

#define COHORT_LANES 16

static inline float cohort_sum_lanes(const float *acc)
{
  float s = 0.0f;
  for (int l = 0; l < COHORT_LANES; l++)
    s += acc[l];
  return s;
}

/* sum of x[0..n) */
static inline float cohort_row_sum(const float *restrict x, int n)
{
  float acc[COHORT_LANES] = {0};
  int i = 0;
  for (; i + COHORT_LANES <= n; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++)
      acc[l] += x[i + l];
  float s = cohort_sum_lanes(acc);
  for (; i < n; i++)
    s += x[i];
  return s;
}

/* sum of x[i] * y[i] */
static inline float cohort_row_dot(const float *restrict x, const float *restrict y, int n)
{
  float acc[COHORT_LANES] = {0};
  int i = 0;
  for (; i + COHORT_LANES <= n; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++)
      acc[l] += x[i + l] * y[i + l];
  float s = cohort_sum_lanes(acc);
  for (; i < n; i++)
    s += x[i] * y[i];
  return s;
}

/* max of x[0..n) (-inf for n = 0), NaNs skipped as `x > m ? x : m` skips them; lanes make it
 * vectorise (the maximum does not depend on the order, only which of +0 and -0 comes back). */
static inline float cohort_row_max(const float *restrict x, int n)
{
  float acc[COHORT_LANES];
  for (int l = 0; l < COHORT_LANES; l++)
    acc[l] = -INFINITY;
  int i = 0;
  for (; i + COHORT_LANES <= n; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++)
      acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  float m = -INFINITY;
  for (int l = 0; l < COHORT_LANES; l++)
    m = acc[l] > m ? acc[l] : m;
  for (; i < n; i++)
    m = x[i] > m ? x[i] : m;
  return m;
}
