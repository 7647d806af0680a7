/* The forecast's arithmetic (engine/launch/forecast.h): fixed inputs, numbers worked out by hand
 * in the comments. */
#include "engine/launch/forecast.h"

#define CLOSE(a, b) g_assert_cmpfloat_with_epsilon((a), (b), 1e-9 + 1e-9 * fabs((double)(b)))

#include <math.h>

static void test_fit(void)
{
  /* Exactly on the line 1 ms + 10 ns per byte. */
  double bytes[] = {0, 1e6, 2e6}, secs[] = {1e-3, 1.1e-2, 2.1e-2};
  CohortAlphaBeta ab;
  g_assert_true(cohort_alpha_beta_fit(bytes, secs, 3, &ab));
  CLOSE(ab.alpha_s, 1e-3);
  CLOSE(ab.beta_s, 1e-8);
  /* A line that noise tilts below zero per call: held at zero, the slope refit through 0. */
  double b2[] = {1e6, 2e6}, s2[] = {0.5e-2, 1.6e-2};
  g_assert_true(cohort_alpha_beta_fit(b2, s2, 2, &ab));
  CLOSE(ab.alpha_s, 0);
  CLOSE(ab.beta_s, (1e6 * 0.5e-2 + 2e6 * 1.6e-2) / (1e12 + 4e12));
  /* Falling with size: no cost per byte, the mean per call. */
  double s3[] = {2e-3, 1e-3};
  g_assert_true(cohort_alpha_beta_fit(b2, s3, 2, &ab));
  CLOSE(ab.beta_s, 0);
  CLOSE(ab.alpha_s, 1.5e-3);
  double same[] = {5, 5};
  g_assert_false(cohort_alpha_beta_fit(same, s3, 2, &ab));
  g_assert_false(cohort_alpha_beta_fit(bytes, secs, 1, &ab));
}

static void test_scaling(void)
{
  CohortAlphaBeta m = {.alpha_s = 1e-3, .beta_s = 1e-8};
  /* All-reduce measured on 2 ranks: a hop 0.5 ms, a byte 10 ns. On 4: 6 hops, 1.5 bytes/byte. */
  CohortAlphaBeta a4 = cohort_alpha_beta_at(m, COHORT_COLLECTIVE_ALL_REDUCE, 2, 4);
  CLOSE(a4.alpha_s, 3e-3);
  CLOSE(a4.beta_s, 1.5e-8);
  /* On 8 measured on 4: hops 6 → 14, share 1.5 → 1.75. */
  CohortAlphaBeta a8 = cohort_alpha_beta_at(a4, COHORT_COLLECTIVE_ALL_REDUCE, 4, 8);
  CLOSE(a8.alpha_s, 7e-3);
  CLOSE(a8.beta_s, 1.75e-8);
  /* All-gather on 2 → 4: hops 1 → 3, share 1/2 → 3/4. */
  CohortAlphaBeta g4 = cohort_alpha_beta_at(m, COHORT_COLLECTIVE_ALL_GATHER, 2, 4);
  CLOSE(g4.alpha_s, 3e-3);
  CLOSE(g4.beta_s, 1.5e-8);
  /* Broadcast 2 → 8: 1 → 3 hops, the whole message each time. */
  CohortAlphaBeta b8 = cohort_alpha_beta_at(m, COHORT_COLLECTIVE_BROADCAST, 2, 8);
  CLOSE(b8.alpha_s, 3e-3);
  CLOSE(b8.beta_s, 1e-8);
  g_assert_cmpfloat(cohort_collective_seconds(m, COHORT_COLLECTIVE_ALL_REDUCE, 2, 1, 1e6), ==, 0);
  CLOSE(cohort_collective_seconds(m, COHORT_COLLECTIVE_ALL_REDUCE, 2, 2, 1e6), 1.1e-2);
}

/* Two buckets: 1 MB final half-way through backward, 3 MB at its end; all-reduce 1 ms + 10 ns
 * per byte on 2 ranks; forward 0.01 + 0.01·b s, backward 0.02 + 0.02·b s; optimizer 0.05 s,
 * data 0.01 s; two 8-byte all-reduces per step. */
static const double bucket_bytes[] = {1e6, 3e6}, bucket_ready[] = {0.5, 1.0};

static CohortForecastInput input(void)
{
  return (CohortForecastInput){
      .world_size = 2,
      .accum = 1,
      .tokens_per_example = 128,
      .fwd0_s = 0.01,
      .fwd1_s = 0.01,
      .bwd0_s = 0.02,
      .bwd1_s = 0.02,
      .optimizer_s = 0.05,
      .data_s = 0.01,
      .n_buckets = 2,
      .bucket_bytes = bucket_bytes,
      .bucket_ready = bucket_ready,
      .all_reduce = {.alpha_s = 1e-3, .beta_s = 1e-8},
      .n_small = 2,
      .small_bytes = 8,
  };
}

static void test_forecast(void)
{
  CohortForecastInput in = input();
  CohortForecast f;
  /* Batch 10 on 2 ranks: backward 0.22 s. Bucket 1 (11 ms) is final at 0.11 s and done at
   * 0.121 s; bucket 2 (31 ms) is final at 0.22 s, so all 31 ms of it are exposed. Small
   * all-reduces 2 × (1 ms + 80 ns). One process: 0.33 + 0.05 + 0.01 = 0.39 s. */
  cohort_forecast_at(&in, 2, 10, &f);
  CLOSE(f.compute_s, 0.33);
  CLOSE(f.bucket_comm_s, 0.042);
  CLOSE(f.exposed_s, 0.031);
  CLOSE(f.hidden, 1 - 0.031 / 0.042);
  CLOSE(f.other_comm_s, 0.00200016);
  CLOSE(f.single_step_s, 0.39);
  CLOSE(f.step_s, 0.42300016);
  CLOSE(f.efficiency, 0.39 / 0.42300016);
  CLOSE(f.examples_per_s, 20 / 0.42300016);
  CLOSE(f.tokens_per_s, 128 * 20 / 0.42300016);
  /* On 4 ranks (same links): all-reduce 3 ms + 15 ns per byte: 18 ms and 48 ms, the second
   * exposed; small ones 2 × (3 ms + 120 ns). */
  cohort_forecast_at(&in, 4, 10, &f);
  CLOSE(f.bucket_comm_s, 0.066);
  CLOSE(f.exposed_s, 0.048);
  CLOSE(f.step_s, 0.39 + 0.048 + 0.00600024);
  CLOSE(f.examples_per_s, 40 / (0.39 + 0.048 + 0.00600024));
  /* One rank: nothing to communicate, efficiency 1. */
  cohort_forecast_at(&in, 1, 10, &f);
  CLOSE(f.step_s, 0.39);
  CLOSE(f.efficiency, 1);
  /* Accumulation: 2 passes, the buckets only after the second; data twice. */
  in.accum = 2;
  cohort_forecast_at(&in, 2, 10, &f);
  CLOSE(f.compute_s, 0.66);
  CLOSE(f.single_step_s, 0.66 + 0.05 + 0.02);
  CLOSE(f.step_s, 0.73 + 0.031 + 0.00200016);
}

static void test_overlap(void)
{
  /* One bucket final at the start of backward and small enough to finish inside it: fully
   * hidden. */
  static const double bytes[] = {1e6}, ready[] = {0.0};
  CohortForecastInput in = input();
  in.n_buckets = 1;
  in.bucket_bytes = bytes;
  in.bucket_ready = ready;
  CohortForecast f;
  cohort_forecast_at(&in, 2, 10, &f);
  CLOSE(f.exposed_s, 0);
  CLOSE(f.hidden, 1);
  /* SyncBatchNorm, buffers and ZeRO's gather add to the step, scaled as their shapes: 2 ranks,
   * all-gather and broadcast with the all-reduce's α, β as measured. */
  in.all_gather = in.broadcast = (CohortAlphaBeta){.alpha_s = 1e-3, .beta_s = 1e-8};
  in.n_syncbn_gather = 3;
  in.syncbn_gather_bytes = 100; /* each rank's: 200 bytes gathered */
  in.n_syncbn_reduce = 3;
  in.syncbn_reduce_bytes = 400;
  in.buffer_bytes = 1000;
  in.zero_gather_bytes = 1e6;
  cohort_forecast_at(&in, 2, 10, &f);
  double want = 2 * (1e-3 + 8e-8) + 3 * (1e-3 + 200e-8) + 3 * (1e-3 + 400e-8) + (1e-3 + 1000e-8) +
                (1e-3 + 1e-2);
  CLOSE(f.other_comm_s, want);
}

static void test_contention(void)
{
  CohortForecastInput in = input();
  CohortForecast f;
  /* Batch 10, contention 1: backward b = 0.22 + overlap(b). Bucket 1 (11 ms) starts at 0.5b and
   * ends inside backward, bucket 2 starts at b: the overlap is 11 ms, so b = 0.231, the stretch
   * 11 ms, and bucket 2's 31 ms are still exposed. */
  in.contention = 1;
  cohort_forecast_at(&in, 2, 10, &f);
  CLOSE(f.stretch_s, 0.011);
  CLOSE(f.exposed_s, 0.031);
  CLOSE(f.step_s, 0.39 + 0.011 + 0.031 + 0.00200016);
  CLOSE(f.efficiency, 0.39 / (0.39 + 0.011 + 0.031 + 0.00200016));
  /* Half of it: 5.5 ms. One rank overlaps nothing. */
  in.contention = 0.5;
  cohort_forecast_at(&in, 2, 10, &f);
  CLOSE(f.stretch_s, 0.0055);
  cohort_forecast_at(&in, 1, 10, &f);
  CLOSE(f.stretch_s, 0);
  CLOSE(f.step_s, 0.39);
  /* A bucket final at 0.9 of backward that takes 50 ms: with contention 1, b = 0.22 + 0.1b, so
   * b = 0.22 / 0.9 and the bucket runs 50 ms − 0.1b past it. */
  static const double late_bytes[] = {4.9e6}, late_ready[] = {0.9};
  in.n_buckets = 1;
  in.bucket_bytes = late_bytes;
  in.bucket_ready = late_ready;
  in.contention = 1;
  cohort_forecast_at(&in, 2, 10, &f);
  CLOSE(f.stretch_s, 0.22 / 0.9 - 0.22);
  CLOSE(f.exposed_s, 0.05 - 0.1 * 0.22 / 0.9);
}

static void test_fit_contention(void)
{
  CohortForecastInput in = input();
  /* A synced pass at batch 10: forward 0.11 + backward 0.22 + the exposed 31 ms = 0.361 s
   * without contention, plus 11 ms per unit of it. */
  CLOSE(cohort_forecast_synced_pass(&in, 10), 0.361);
  g_assert_cmpfloat(fabs(cohort_forecast_fit_contention(&in, 10, 0.372) - 1), <, 1e-9);
  g_assert_cmpfloat(fabs(cohort_forecast_fit_contention(&in, 10, 0.36375) - 0.25), <, 1e-9);
  in.contention = 0.25;
  CLOSE(cohort_forecast_synced_pass(&in, 10), 0.36375);
  in.contention = 0;
  /* Faster than timed apart (noise): none. Slower than any contention explains: the cap. */
  g_assert_cmpfloat(cohort_forecast_fit_contention(&in, 10, 0.3), ==, 0);
  g_assert_cmpfloat(cohort_forecast_fit_contention(&in, 10, 10), ==,
                    COHORT_FORECAST_MAX_CONTENTION);
  /* SyncBatchNorm's collectives are part of the pass: 3 all-reduces of 400 bytes. */
  in.n_syncbn_reduce = 3;
  in.syncbn_reduce_bytes = 400;
  CLOSE(cohort_forecast_synced_pass(&in, 10), 0.361 + 3 * (1e-3 + 400e-8));
  /* One bucket, final at the end of backward: nothing overlaps, so no pass time tells a
   * contention; none is fitted however slow the pass. */
  static const double last_bytes[] = {1e6}, last_ready[] = {1.0};
  CohortForecastInput one = input();
  one.n_buckets = 1;
  one.bucket_bytes = last_bytes;
  one.bucket_ready = last_ready;
  g_assert_cmpfloat(cohort_forecast_fit_contention(&one, 10, 10), ==, 0);
  /* One rank, or no buckets: nothing to fit. */
  in.world_size = 1;
  g_assert_cmpfloat(cohort_forecast_fit_contention(&in, 10, 1), ==, 0);
}

static void test_min_batch(void)
{
  /* step(b) = 0.03b + 0.09 + 0.031 + 0.00200016 and one process 0.03b + 0.09: 90 % needs
   * b ≥ 6.9, so 7 (6 gives 0.891, 7 gives 0.901). */
  CohortForecastInput in = input();
  g_assert_cmpint(cohort_forecast_min_batch(&in, 2, 0.9, 1000), ==, 7);
  CohortForecast f;
  cohort_forecast_at(&in, 2, 6, &f);
  g_assert_cmpfloat(f.efficiency, <, 0.9);
  cohort_forecast_at(&in, 2, 7, &f);
  g_assert_cmpfloat(f.efficiency, >=, 0.9);
  /* Out of reach below the cap: 0. */
  g_assert_cmpint(cohort_forecast_min_batch(&in, 2, 0.9, 6), ==, 0);
  g_assert_cmpint(cohort_forecast_min_batch(&in, 2, 0.999, 1000), ==, 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/forecast/fit", test_fit);
  g_test_add_func("/forecast/scaling", test_scaling);
  g_test_add_func("/forecast/step", test_forecast);
  g_test_add_func("/forecast/overlap", test_overlap);
  g_test_add_func("/forecast/min-batch", test_min_batch);
  g_test_add_func("/forecast/contention", test_contention);
  g_test_add_func("/forecast/fit-contention", test_fit_contention);
  return g_test_run();
}
