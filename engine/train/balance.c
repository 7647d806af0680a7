/* The split that equalises the ranks' step times (balance.h). */
#include "engine/train/balance.h"

#include <math.h>

/* A slope below this (seconds per example) is taken as this: a share must cost something, or
 * the solver could give one rank everything. */
#define MIN_PER_EXAMPLE_S 1e-9

CohortRankSpeed cohort_rank_speed_fit(int small, double t_small, int large, double t_large)
{
  CohortRankSpeed s = {0, t_large / MAX(large, 1)};
  if (small >= 1 && large > small && t_small > 0 && t_large > t_small) {
    s.per_example_s = (t_large - t_small) / (large - small);
    s.fixed_s = t_large - s.per_example_s * large;
    if (s.fixed_s < 0) {
      s.fixed_s = 0;
      s.per_example_s = t_large / large;
    }
  }
  s.per_example_s = MAX(s.per_example_s, MIN_PER_EXAMPLE_S);
  return s;
}

static double rank_time(const CohortRankSpeed *s, gint64 b)
{
  return s->fixed_s + s->per_example_s * (double)b;
}

double cohort_balance_time(const CohortRankSpeed *speed, const int *shares, int n)
{
  double worst = 0;
  for (int r = 0; r < n; r++)
    worst = MAX(worst, rank_time(&speed[r], shares[r]));
  return worst;
}

/* The shares each rank can finish within time t (at least 1, at most its cap). */
static gint64 fill_to(const CohortRankSpeed *speed, const int *caps, int n, double t, int *shares)
{
  gint64 sum = 0;
  for (int r = 0; r < n; r++) {
    double b = floor((t - speed[r].fixed_s) / speed[r].per_example_s);
    int v = (int)CLAMP(b, 1.0, (double)caps[r]);
    if (shares)
      shares[r] = v;
    sum += v;
  }
  return sum;
}

gboolean cohort_balance_solve(const CohortRankSpeed *speed, const int *caps, int n, gint64 total,
                              int *shares, double *time_s)
{
  gint64 room = 0;
  double hi = 0;
  for (int r = 0; r < n; r++) {
    if (caps[r] < 1)
      return FALSE;
    room += caps[r];
    hi = MAX(hi, rank_time(&speed[r], caps[r]));
  }
  if (n < 1 || total < n || total > room)
    return FALSE;
  /* The longest time at which the ranks together take at most `total`: below every threshold
   * where a rank would take one more. */
  double lo = 0;
  for (int it = 0; it < 200 && hi - lo > 1e-15 * MAX(hi, 1e-30); it++) {
    double mid = lo + (hi - lo) / 2;
    if (fill_to(speed, caps, n, mid, NULL) <= total)
      lo = mid;
    else
      hi = mid;
  }
  gint64 sum = fill_to(speed, caps, n, lo, shares);
  /* The rest, one example at a time, to the rank that would finish it soonest: fewer than a
   * rank each (the thresholds between lo and hi). */
  for (; sum < total; sum++) {
    int best = -1;
    for (int r = 0; r < n; r++)
      if (shares[r] < caps[r] && (best < 0 || rank_time(&speed[r], shares[r] + 1) <
                                                  rank_time(&speed[best], shares[best] + 1)))
        best = r;
    if (best < 0)
      return FALSE;
    shares[best]++;
  }
  if (time_s)
    *time_s = cohort_balance_time(speed, shares, n);
  return TRUE;
}

gboolean cohort_balance_better(const CohortRankSpeed *speed, const int *caps, int n,
                               const int *current, const int *next)
{
  gboolean same = TRUE, fits = TRUE;
  gint64 a = 0, b = 0;
  for (int r = 0; r < n; r++) {
    same = same && current[r] == next[r];
    fits = fits && current[r] >= 1 && current[r] <= caps[r];
    a += current[r];
    b += next[r];
  }
  if (same)
    return FALSE;
  if (!fits || a != b)
    return TRUE;
  return cohort_balance_time(speed, next, n) <
         (1 - COHORT_BALANCE_MIN_GAIN) * cohort_balance_time(speed, current, n);
}

void cohort_balance_correct(CohortRankSpeed *speed, const int *shares, const double *measured_s,
                            int n)
{
  for (int r = 0; r < n; r++) {
    double model = rank_time(&speed[r], shares[r]);
    if (!(measured_s[r] > 0) || !(model > 0) || !isfinite(measured_s[r]))
      continue;
    double k = measured_s[r] / model;
    speed[r].fixed_s *= k;
    speed[r].per_example_s = MAX(speed[r].per_example_s * k, MIN_PER_EXAMPLE_S);
  }
}
