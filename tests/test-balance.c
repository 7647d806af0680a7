/* rank_batch_sizes auto's arithmetic (engine/train/balance.h, suite unit): the split that
 * equalises the ranks' times, within each rank's cap; the hysteresis that keeps a split
 * against noise; the line fitted to two measured batch sizes; a correction from measured step
 * times. And the config's side (engine/config/rank-batches.h): what a list means, what is
 * refused. */
#include <math.h>
#include <string.h>

#include "engine/config/rank-batches.h"
#include "engine/train/balance.h"

static void solve(const CohortRankSpeed *speed, const int *caps, int n, gint64 total, int *out)
{
  double t = 0;
  g_assert_true(cohort_balance_solve(speed, caps, n, total, out, &t));
  gint64 sum = 0;
  for (int r = 0; r < n; r++) {
    g_assert_cmpint(out[r], >=, 1);
    g_assert_cmpint(out[r], <=, caps[r]);
    sum += out[r];
  }
  g_assert_cmpint(sum, ==, total);
  g_assert_cmpfloat(fabs(t - cohort_balance_time(speed, out, n)), <, 1e-12);
}

/* No split of the same total is faster (every single move of an example, checked). */
static void assert_optimal(const CohortRankSpeed *speed, const int *caps, int n, int *shares)
{
  double best = cohort_balance_time(speed, shares, n);
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      if (a == b || shares[a] <= 1 || shares[b] >= caps[b])
        continue;
      shares[a]--;
      shares[b]++;
      g_assert_cmpfloat(cohort_balance_time(speed, shares, n), >=, best - 1e-12);
      shares[a]++;
      shares[b]--;
    }
}

static void test_solve(void)
{
  int caps[4] = {15, 15, 15, 15}, out[4];
  /* equal ranks: the even split */
  CohortRankSpeed same[2] = {{0.01, 0.001}, {0.01, 0.001}};
  solve(same, caps, 2, 16, out);
  g_assert_cmpint(out[0], ==, 8);
  g_assert_cmpint(out[1], ==, 8);
  /* rank 1 at half speed: 11 and 5 (11 vs 10 units; 10 and 6 would take 12) */
  CohortRankSpeed half[2] = {{0, 1}, {0, 2}};
  solve(half, caps, 2, 16, out);
  g_assert_cmpint(out[0], ==, 11);
  g_assert_cmpint(out[1], ==, 5);
  /* a fixed part: rank 1's 4 units per micro-batch push examples to rank 0 */
  CohortRankSpeed fixed[2] = {{0, 1}, {4, 1}};
  solve(fixed, caps, 2, 16, out);
  g_assert_cmpint(out[0], ==, 10);
  g_assert_cmpint(out[1], ==, 6);
  /* a cap: rank 0's memory holds 6 */
  int small[2] = {6, 15};
  solve(half, small, 2, 16, out);
  g_assert_cmpint(out[0], ==, 6);
  g_assert_cmpint(out[1], ==, 10);
  /* four ranks of different speeds, and each result optimal */
  CohortRankSpeed four[4] = {{0.1, 1}, {0, 3}, {0.5, 2}, {0, 1.5}};
  for (gint64 total = 4; total <= 60; total++) {
    solve(four, caps, 4, total, out);
    assert_optimal(four, caps, 4, out);
  }
  /* the caps cannot hold the total, or fewer examples than ranks */
  g_assert_false(cohort_balance_solve(half, small, 2, 22, out, NULL));
  g_assert_false(cohort_balance_solve(half, caps, 2, 1, out, NULL));
  /* a large job: 64 ranks, a global micro-batch of 65536, quickly */
  g_autofree CohortRankSpeed *many = g_new(CohortRankSpeed, 64);
  g_autofree int *mcaps = g_new(int, 64), *mout = g_new(int, 64);
  for (int r = 0; r < 64; r++) {
    many[r] = (CohortRankSpeed){0.001 * (r % 3), 1e-4 * (1 + r % 5)};
    mcaps[r] = 65536;
  }
  solve(many, mcaps, 64, 65536, mout);
  assert_optimal(many, mcaps, 64, mout);
}

static void test_hysteresis(void)
{
  int caps[2] = {15, 15};
  CohortRankSpeed speed[2] = {{0, 1}, {0, 1.04}};
  int even[2] = {8, 8}, moved[2] = {9, 7};
  /* 8.32 → 9: not shorter */
  g_assert_false(cohort_balance_better(speed, caps, 2, even, moved));
  /* rank 1 at half speed: 16 → 11, far more than 5 % */
  CohortRankSpeed half[2] = {{0, 1}, {0, 2}};
  int best[2] = {11, 5};
  g_assert_true(cohort_balance_better(half, caps, 2, even, best));
  /* under 3 % better: kept */
  CohortRankSpeed close[2] = {{0, 0.865}, {0, 1}};
  int a[2] = {8, 8}, b[2] = {9, 7};
  g_assert_cmpfloat(cohort_balance_time(close, b, 2), <, cohort_balance_time(close, a, 2));
  g_assert_false(cohort_balance_better(close, caps, 2, a, b));
  /* the same split is never "better"; a split over a cap always is */
  g_assert_false(cohort_balance_better(half, caps, 2, best, best));
  int tight[2] = {12, 15};
  g_assert_true(cohort_balance_better(half, tight, 2, (int[]){14, 2}, best));
}

static void test_fit_and_correct(void)
{
  /* two points on t = 0.01 + 0.002 b */
  CohortRankSpeed s = cohort_rank_speed_fit(4, 0.018, 8, 0.026);
  g_assert_cmpfloat(fabs(s.fixed_s - 0.01), <, 1e-12);
  g_assert_cmpfloat(fabs(s.per_example_s - 0.002), <, 1e-12);
  /* noise that makes the larger batch faster: through the origin */
  s = cohort_rank_speed_fit(4, 0.03, 8, 0.026);
  g_assert_cmpfloat(s.fixed_s, ==, 0);
  g_assert_cmpfloat(fabs(s.per_example_s - 0.026 / 8), <, 1e-12);
  /* one point */
  s = cohort_rank_speed_fit(0, 0, 1, 0.5);
  g_assert_cmpfloat(fabs(s.per_example_s - 0.5), <, 1e-12);
  /* a measurement rescales the line through it, keeping its shape */
  CohortRankSpeed sp[2] = {{0.01, 0.002}, {0.01, 0.002}};
  int shares[2] = {8, 8};
  double measured[2] = {0.026, 0.052};
  cohort_balance_correct(sp, shares, measured, 2);
  g_assert_cmpfloat(fabs(cohort_balance_time(&sp[0], (int[]){8}, 1) - 0.026), <, 1e-12);
  g_assert_cmpfloat(fabs(cohort_balance_time(&sp[1], (int[]){8}, 1) - 0.052), <, 1e-12);
  g_assert_cmpfloat(fabs(sp[1].fixed_s / sp[1].per_example_s - 5), <, 1e-9);
  /* no measurement: unchanged */
  double none[2] = {0, NAN};
  CohortRankSpeed before = sp[0];
  cohort_balance_correct(sp, shares, none, 2);
  g_assert_cmpfloat(sp[0].per_example_s, ==, before.per_example_s);
}

static CohortConfig *config_with(const char *value)
{
  CohortConfig *cfg = cohort_config_new();
  g_free(cfg->rank_batch_sizes);
  cfg->rank_batch_sizes = g_strdup(value);
  cfg->batch_size = 8;
  return cfg;
}

static void test_config(void)
{
  int shares[3];
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) even = config_with("");
  g_assert_cmpint(cohort_rank_batches_kind(even), ==, COHORT_SPLIT_EVEN);
  g_assert_cmpint(cohort_rank_batches_global(even, 3), ==, 24);
  g_assert_true(cohort_rank_batches_start(even, NULL, 3, shares, NULL));
  g_assert_cmpint(shares[2], ==, 8);
  g_autoptr(CohortConfig) list = config_with(" 5, 2 ,9");
  g_assert_cmpint(cohort_rank_batches_kind(list), ==, COHORT_SPLIT_LIST);
  g_assert_cmpint(cohort_rank_batches_global(list, 3), ==, 16);
  g_assert_true(cohort_rank_batches_start(list, NULL, 3, shares, NULL));
  g_assert_cmpint(shares[0], ==, 5);
  g_assert_cmpint(shares[1], ==, 2);
  g_assert_cmpint(shares[2], ==, 9);
  g_assert_true(cohort_config_validate(list, NULL, NULL));
  g_assert_false(cohort_rank_batches_start(list, "run.json", 2, shares, &error));
  g_assert_nonnull(strstr(error->message, "run.json: key \"rank_batch_sizes\""));
  g_assert_nonnull(strstr(error->message, "gives 3 processes a share but the job has 2"));
  g_clear_error(&error);
  g_autoptr(CohortConfig) autos = config_with("auto");
  g_assert_cmpint(cohort_rank_batches_kind(autos), ==, COHORT_SPLIT_AUTO);
  g_assert_cmpint(cohort_rank_batches_global(autos, 2), ==, 16);
  const char *bad[] = {"12,0", "4,-1", "4,,4", "4,x", "70000,1", "1.5,2"};
  const char *why[] = {"entry 1 (rank 1) is 0",     "entry 1 (rank 1) is -1",
                       "entry 1 (rank 1) is \"\"",  "entry 1 (rank 1) is \"x\"",
                       "entry 0 (rank 0) is 70000", "entry 0 (rank 0) is \"1.5\""};
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    g_autoptr(CohortConfig) c = config_with(bad[i]);
    g_assert_false(cohort_config_validate(c, "run.json", &error));
    g_test_message("%s: %s", bad[i], error->message);
    g_assert_nonnull(strstr(error->message, "run.json: key \"rank_batch_sizes\""));
    g_assert_nonnull(strstr(error->message, why[i]));
    g_clear_error(&error);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/balance/solve", test_solve);
  g_test_add_func("/balance/hysteresis", test_hysteresis);
  g_test_add_func("/balance/fit-and-correct", test_fit_and_correct);
  g_test_add_func("/balance/config", test_config);
  return g_test_run();
}
