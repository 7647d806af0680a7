/* rank_batch_sizes auto: the split of a global micro-batch that equalises the ranks' step
 * times (engine/config/rank-batches.h). Pure arithmetic, no I/O: the trainer
 * (trainer-balance.c) measures, the probe forecasts, both choose here.
 *
 * Each rank's time for a micro-batch of b examples is modelled as fixed + per_example × b (two
 * measured batch sizes give the line; forward and backward at batch_size and half of it, as the
 * probe times them). The step waits for the slowest rank, so the best split minimises the
 * largest of these times, with every rank taking at least one example and at most its cap (what
 * its device's memory plan allows), and the shares summing to the global micro-batch. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A split must forecast a step at least this much shorter than the split in use to replace it:
 * measured times move by a few per cent from window to window, and a split that follows the
 * noise would move examples back and forth for nothing. */
#define COHORT_BALANCE_MIN_GAIN 0.05

typedef struct {
  double fixed_s;       /* per micro-batch, whatever its size */
  double per_example_s; /* > 0 */
} CohortRankSpeed;

/* The line through (small, t_small) and (large, t_large) (large > small >= 1), or through the
 * origin and (large, t_large) when small is 0 or the points say nothing (noise made the slope
 * negative). */
CohortRankSpeed cohort_rank_speed_fit(int small, double t_small, int large, double t_large);

/* The forecast time of a micro-batch under `shares`: the slowest rank's. */
double cohort_balance_time(const CohortRankSpeed *speed, const int *shares, int n);

/* The split of `total` examples among n ranks that minimises cohort_balance_time, each share
 * between 1 and caps[r] (ties go to lower ranks, so every rank that computes it gets the same
 * split); its time. FALSE when the caps cannot hold `total` (or total < n). */
gboolean cohort_balance_solve(const CohortRankSpeed *speed, const int *caps, int n, gint64 total,
                              int *shares, double *time_s);

/* Whether `next` should replace `current`: different, and forecast at least
 * COHORT_BALANCE_MIN_GAIN shorter (or `current` breaks a cap, or is not a split of the same
 * total). */
gboolean cohort_balance_better(const CohortRankSpeed *speed, const int *caps, int n,
                               const int *current, const int *next);

/* The speeds after measuring `measured_s` per micro-batch on each rank under `shares`: each
 * line scaled so that it passes through the measurement (its shape, the share of the fixed
 * part, stays what the start measured). A rank with no measurement (<= 0) keeps its line. */
void cohort_balance_correct(CohortRankSpeed *speed, const int *shares, const double *measured_s,
                            int n);

G_END_DECLS
