/* Where a hang is (issue 28 item 4, issue 22 items 8 and 9).
 *  - The watchdog, with a fake blocking call that returns only when fired (the shape of the
 *    NCCL backend's blocking-sync event wait): a call that ends in time is left alone, one that
 *    waits is ended at its timeout, progress moves the deadline, a failed check ends it at once.
 *  - Heartbeat records: format and parse round trip, malformed ones refused.
 *  - Gloo on 2 forked ranks: an abort from another thread ends a blocked all-reduce at once (it
 *    used to wait out its timeout); a rank in a long phase that ticks keeps the other's barrier
 *    waiting past its timeout; one that does not tick makes it fail at the timeout, with its phase
 *    and its last collective named; ranks stopped inside another collective (a mismatch) are
 *    named with the collective each waits in; rank 0's hang function names the missing rank, its
 *    phase and the collective, then reports the wait resolved.
 *  - End to end: 2 ranks of cohort-train, rank 1 sleeping 6 s inside the forward of step 2
 *    (COHORT_TEST_HOOKS): rank 0's `hang` event names rank 1 and `forward` within the threshold
 *    + 5 s, a log line says the same, and the run completes. */
#include "engine/base/phase.h"
#include "engine/distributed/heartbeat.h"
#include "engine/distributed/watchdog.h"
#include "rank-harness.h"
#include "train-run.h"

#include <json-glib/json-glib.h>
#include <string.h>

/* ---- the watchdog, with a fake blocking call ---- */

typedef struct {
  GMutex lock;
  GCond cond;
  gboolean fired;
  int fires;
  gint64 fail_after_us; /* check fails from then on; 0 = never */
} Fake;

static void fake_fire(gpointer user)
{
  Fake *f = user;
  g_mutex_lock(&f->lock);
  f->fired = TRUE;
  f->fires++;
  g_cond_broadcast(&f->cond);
  g_mutex_unlock(&f->lock);
}

static gboolean fake_check(gpointer user, GError **error)
{
  Fake *f = user;
  if (f->fail_after_us > 0 && g_get_monotonic_time() >= f->fail_after_us) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER, "the fake peer failed");
    return FALSE;
  }
  return TRUE;
}

/* Blocks like cudaEventSynchronize on a stream that never finishes: until fired, or `max_s`. */
static void fake_wait(Fake *f, double max_s)
{
  gint64 end = g_get_monotonic_time() + (gint64)(max_s * G_USEC_PER_SEC);
  g_mutex_lock(&f->lock);
  while (!f->fired && g_cond_wait_until(&f->cond, &f->lock, end)) {
  }
  f->fired = FALSE;
  g_mutex_unlock(&f->lock);
}

static CohortWatchdog *fake_watchdog(Fake *f)
{
  memset(f, 0, sizeof *f);
  g_mutex_init(&f->lock);
  g_cond_init(&f->cond);
  CohortWatchdogHooks hooks = {.fire = fake_fire, .check = fake_check, .user = f};
  return cohort_watchdog_new(&hooks);
}

static void test_watchdog_in_time(void)
{
  Fake f;
  CohortWatchdog *wd = fake_watchdog(&f);
  for (int i = 0; i < 20; i++) {
    cohort_watchdog_begin(wd, 0.5);
    g_usleep(1000);
    double waited = 0;
    g_assert_cmpint(cohort_watchdog_end(wd, &waited, NULL), ==, COHORT_WATCHDOG_OK);
    g_assert_cmpfloat(waited, <, 0.5);
  }
  g_usleep(700 * 1000); /* nothing watched: nothing fires */
  g_assert_cmpint(f.fires, ==, 0);
  cohort_watchdog_free(wd);
}

static void test_watchdog_timeout(void)
{
  Fake f;
  CohortWatchdog *wd = fake_watchdog(&f);
  cohort_watchdog_begin(wd, 0.3);
  fake_wait(&f, 10);
  double waited = 0;
  g_assert_cmpint(cohort_watchdog_end(wd, &waited, NULL), ==, COHORT_WATCHDOG_TIMEOUT);
  g_assert_cmpint(f.fires, ==, 1);
  g_assert_cmpfloat(waited, >=, 0.29);
  g_assert_cmpfloat(waited, <, 5); /* loaded machine: generous */
  cohort_watchdog_free(wd);
}

typedef struct {
  CohortWatchdog *wd;
  double for_s;
} Ticker;

static gpointer tick_thread(gpointer data)
{
  Ticker *t = data;
  gint64 end = g_get_monotonic_time() + (gint64)(t->for_s * G_USEC_PER_SEC);
  while (g_get_monotonic_time() < end) {
    g_usleep(50 * 1000);
    cohort_watchdog_progress(t->wd);
  }
  return NULL;
}

static void test_watchdog_progress(void)
{
  Fake f;
  CohortWatchdog *wd = fake_watchdog(&f);
  cohort_watchdog_begin(wd, 0.3);
  Ticker t = {wd, 1.2};
  GThread *th = g_thread_new("ticker", tick_thread, &t);
  fake_wait(&f, 20);
  double waited = 0;
  g_assert_cmpint(cohort_watchdog_end(wd, &waited, NULL), ==, COHORT_WATCHDOG_TIMEOUT);
  g_thread_join(th);
  /* Four times the timeout without firing while progress came; then it fired. */
  g_assert_cmpfloat(waited, >=, 1.2);
  g_assert_cmpfloat(waited, <, 10);
  cohort_watchdog_free(wd);
}

static void test_watchdog_check(void)
{
  Fake f;
  CohortWatchdog *wd = fake_watchdog(&f);
  f.fail_after_us = g_get_monotonic_time() + 200 * 1000;
  cohort_watchdog_begin(wd, 60);
  fake_wait(&f, 20);
  g_autoptr(GError) error = NULL;
  double waited = 0;
  g_assert_cmpint(cohort_watchdog_end(wd, &waited, &error), ==, COHORT_WATCHDOG_FAILED);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER);
  g_assert_cmpfloat(waited, <, 10);
  cohort_watchdog_free(wd);
}

/* ---- records ---- */

static void test_record_round_trip(void)
{
  CohortRankRecord r = {.rank = 3,
                        .step = 41,
                        .phase_s = 12.5,
                        .ticks = 7,
                        .changes = 99,
                        .cur_seq = 1234,
                        .cur_wait_s = 61.25,
                        .last_seq = 1233};
  g_strlcpy(r.phase, "checkpoint", sizeof r.phase);
  g_strlcpy(r.cur_kind, "all_reduce", sizeof r.cur_kind);
  g_strlcpy(r.cur_label, "bucket 2 of 7", sizeof r.cur_label);
  g_strlcpy(r.last_kind, "barrier", sizeof r.last_kind);
  g_autofree char *text = cohort_rank_record_format(&r);
  CohortRankRecord back = {.rank = 3};
  g_assert_true(cohort_rank_record_parse(text, strlen(text), &back));
  g_assert_true(back.known);
  g_assert_cmpint(back.step, ==, 41);
  g_assert_cmpstr(back.phase, ==, "checkpoint");
  g_assert_cmpfloat_with_epsilon(back.phase_s, 12.5, 1e-3);
  g_assert_cmpuint(back.ticks, ==, 7);
  g_assert_cmpuint(back.cur_seq, ==, 1234);
  g_assert_cmpstr(back.cur_label, ==, "bucket 2 of 7");
  g_assert_cmpstr(back.last_kind, ==, "barrier");
  g_assert_cmpstr(back.last_label, ==, "");
  g_autofree char *d = cohort_rank_record_describe(&back);
  g_assert_cmpstr(d, ==,
                  "rank 3 last completed barrier #1233, waits in all_reduce #1234 (bucket 2 of 7) "
                  "for 61 s, in checkpoint for 12 s at step 41");
  const char *bad[] = {"",
                       "1\t2",
                       "x\tforward\t0\t0\t0\t-\t0\t-\t0\t-\t0\t-",
                       "1\tforward\t0\t0\t0\t-\t0\t-\t0\t-\t0\t-\textra",
                       "1\tforward-phase-name-too-long\t0\t0\t0\t-\t0\t-\t0\t-\t0\t-",
                       "-1\tforward\t0\t0\t0\t-\t0\t-\t0\t-\t0\t-"};
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    CohortRankRecord x = {0};
    g_assert_false(cohort_rank_record_parse(bad[i], strlen(bad[i]), &x));
  }
}

/* ---- Gloo ranks ---- */

typedef struct {
  CohortComm *comm;
  double after_s;
} Aborter;

static gpointer abort_thread(gpointer data)
{
  Aborter *a = data;
  g_usleep((gulong)(a->after_s * G_USEC_PER_SEC));
  cohort_comm_abort(a->comm, "test");
  return NULL;
}

/* An abort from another thread ends rank 0's blocked all-reduce at once. */
static int abort_interrupts(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  if (rank == 1) {
    g_usleep(4 * G_USEC_PER_SEC);
    return 0;
  }
  Aborter a = {c, 0.5};
  GThread *th = g_thread_new("aborter", abort_thread, &a);
  float f[4] = {0};
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = cohort_comm_all_reduce_f32(c, f, 4, COHORT_REDUCE_SUM, 30, &error);
  double took = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  g_thread_join(th);
  fprintf(stderr, "rank 0 after %.2f s: %s\n", took, error ? error->message : "ok");
  CHECK(!ok);
  CHECK(g_error_matches(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ABORTED));
  CHECK(took < 10);
  g_usleep(4 * G_USEC_PER_SEC); /* the store outlives rank 1's use of it */
  return 0;
}

/* Rank 1 spends 3.5 s in a long phase, ticking; rank 0's barrier (timeout 1 s) waits for it. */
static int long_phase_ticks(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  /* Every rank the same threshold, as a job's config gives them: heartbeats every 0.05 s. */
  cohort_comm_set_hang_report(c, 0.4, NULL, NULL);
  if (rank == 1) {
    cohort_phase_enter(COHORT_RANK_PHASE_CACHING);
    for (int i = 0; i < 14; i++) {
      g_usleep(250 * 1000);
      cohort_phase_tick();
    }
    cohort_phase_enter(COHORT_RANK_PHASE_FORWARD);
  }
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = cohort_comm_barrier(c, 1.0, &error);
  double took = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  fprintf(stderr, "rank %d after %.2f s: %s\n", rank, took, error ? error->message : "ok");
  CHECK(ok);
  if (rank == 0)
    CHECK(took > 2.5); /* past its 1 s timeout, kept alive by the ticks */
  CHECK(cohort_comm_barrier(c, 10, &error));
  return 0;
}

/* The same phase without ticks: rank 0's barrier fails at its timeout, naming the phase. */
static int long_phase_still(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  cohort_comm_set_hang_report(c, 0.4, NULL, NULL);
  float f[2] = {1, 2};
  CHECK(cohort_comm_all_reduce_f32(c, f, 2, COHORT_REDUCE_SUM, 10, &error));
  if (rank == 1) {
    cohort_phase_enter(COHORT_RANK_PHASE_CHECKPOINT);
    g_usleep(4 * G_USEC_PER_SEC);
    return 0;
  }
  gint64 t0 = g_get_monotonic_time();
  cohort_comm_set_label("the test's barrier");
  gboolean ok = cohort_comm_barrier(c, 1.0, &error);
  double took = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  fprintf(stderr, "rank 0 after %.2f s: %s\n", took, error ? error->message : "ok");
  CHECK(!ok);
  CHECK(g_error_matches(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT));
  CHECK(took >= 0.9 && took < 3.5);
  CHECK(strstr(error->message, "barrier #2") != NULL);
  CHECK(strstr(error->message, "rank 1 did not arrive") != NULL);
  CHECK(strstr(error->message, "rank 1 last completed all_reduce #1") != NULL);
  CHECK(strstr(error->message, "in checkpoint for") != NULL);
  g_usleep(3500 * 1000);
  return 0;
}

/* Rank 2 stops inside the barrier the others wait in: everyone reached it, and rank 0's error
 * says so and where each rank was. */
static int stopped_inside(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  cohort_comm_set_hang_report(c, 0.4, NULL, NULL);
  if (rank == 2) {
    /* Inside a barrier that rank 0 never enters. */
    cohort_phase_enter(COHORT_RANK_PHASE_OPTIMIZER);
    cohort_comm_set_label("rank 2's barrier");
    gboolean ok = cohort_comm_barrier(c, 6, &error);
    (void)ok;
    return 0;
  }
  if (rank == 1) {
    gboolean ok = cohort_comm_barrier(c, 6, &error);
    (void)ok;
    g_usleep(1500 * 1000);
    return 0;
  }
  cohort_phase_enter(COHORT_RANK_PHASE_DATA);
  g_usleep(300 * 1000);
  float f[2] = {1, 2};
  gboolean ok = cohort_comm_all_reduce_f32(c, f, 2, COHORT_REDUCE_SUM, 1.0, &error);
  fprintf(stderr, "rank 0: %s\n", error ? error->message : "ok");
  CHECK(!ok);
  CHECK(strstr(error->message, "all_reduce #1") != NULL);
  CHECK(strstr(error->message, "every rank reached it") != NULL ||
        strstr(error->message, "did not arrive") != NULL);
  /* Rank 2 waits in its barrier; when the machine is slow (the sanitizer build), Gloo can match
   * rank 0's all-reduce with the others' barrier messages, and the barrier counts as completed
   * on ranks 1 and 2. Either way the error names rank 2 and its barrier. */
  CHECK(strstr(error->message, "rank 2 last completed no collective, waits in barrier #1 "
                               "(rank 2's barrier)") != NULL ||
        strstr(error->message, "rank 2 last completed barrier #1 (rank 2's barrier)") != NULL);
  g_usleep(6 * G_USEC_PER_SEC);
  return 0;
}

typedef struct {
  GMutex lock;
  int reports, resolved;
  char first[512];
  double first_waited;
} Reports;

static void on_report(const CohortHangReport *rep, gpointer user)
{
  Reports *r = user;
  g_mutex_lock(&r->lock);
  if (rep->resolved) {
    r->resolved++;
  } else if (r->reports++ == 0 && rep->n_ranks == 2 && rep->n_missing == 1 &&
             !rep->ranks[1].arrived && rep->ranks[0].arrived) {
    g_snprintf(r->first, sizeof r->first, "%s #%" G_GUINT64_FORMAT " (%s): rank 1 in %s", rep->kind,
               rep->seq, rep->label, rep->ranks[1].phase);
    r->first_waited = rep->waited_s;
  }
  g_mutex_unlock(&r->lock);
}

/* Rank 0 reports at 0.5 s that rank 1 (in forward for 2.5 s) has not reached its all-reduce. */
static int hang_reported(CohortComm *c, int rank, int world)
{
  (void)world;
  g_autoptr(GError) error = NULL;
  Reports reps = {0};
  g_mutex_init(&reps.lock);
  cohort_comm_set_hang_report(c, 0.5, rank == 0 ? on_report : NULL, &reps);
  if (rank == 1) {
    cohort_phase_enter(COHORT_RANK_PHASE_FORWARD);
    g_usleep(2500 * 1000);
  }
  float f[3] = {1, 2, 3};
  cohort_comm_set_label("bucket 1 of 1");
  CHECK(cohort_comm_all_reduce_f32(c, f, 3, COHORT_REDUCE_SUM, 30, &error));
  if (rank == 1)
    return cohort_comm_barrier(c, 10, &error) ? 0 : 1;
  g_usleep(1500 * 1000); /* the resolved report comes from the next heartbeat */
  cohort_comm_set_hang_report(c, 0.5, NULL, NULL);
  fprintf(stderr, "reports %d, resolved %d, first after %.2f s: %s\n", reps.reports, reps.resolved,
          reps.first_waited, reps.first);
  CHECK(reps.reports >= 1);
  CHECK(strcmp(reps.first, "all_reduce #1 (bucket 1 of 1): rank 1 in forward") == 0);
  CHECK(reps.first_waited >= 0.5 && reps.first_waited < 2.5);
  CHECK(reps.resolved == 1);
  CHECK(cohort_comm_barrier(c, 10, &error));
  return 0;
}

static void test_gloo_abort(void)
{
  run_gloo_ranks(2, "test-hang", abort_interrupts, 60);
}

static void test_gloo_long_phase(void)
{
  run_gloo_ranks(2, "test-hang", long_phase_ticks, 60);
}

static void test_gloo_still_phase(void)
{
  run_gloo_ranks(2, "test-hang", long_phase_still, 60);
}

static void test_gloo_stopped_inside(void)
{
  run_gloo_ranks(3, "test-hang", stopped_inside, 60);
}

static void test_gloo_report(void)
{
  run_gloo_ranks(2, "test-hang", hang_reported, 60);
}

/* ---- end to end ---- */

static void test_train_report(void)
{
  if (!cohort_comm_backend_available("gloo")) {
    g_test_skip("built without Gloo");
    return;
  }
  g_autofree char *dir = g_dir_make_tmp("cohort-hang-XXXXXX", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events.jsonl", NULL);
  const char *extra[] = {"--nproc", "2",
                         "--set",   "max_steps=3",
                         "--set",   "eval_every=0",
                         "--set",   "sample_every=0",
                         "--set",   "hang_report_s=2",
                         "--set",   "timeout_s=60",
                         NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  g_setenv("COHORT_TEST_HOOKS", "sleep:1:2:forward:6", TRUE);
  RunResult res = run_train(args, events);
  g_unsetenv("COHORT_TEST_HOOKS");
  g_test_message("stderr: %s", res.err);
  g_assert_cmpint(res.status, ==, 0);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(events, &text, NULL, NULL));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  gboolean reported = FALSE, resolved = FALSE, logged = FALSE, done = FALSE;
  for (int i = 0; lines[i]; i++) {
    if (lines[i][0] == '\0')
      continue;
    g_autoptr(JsonNode) node = json_from_string(lines[i], NULL);
    g_assert_nonnull(node);
    JsonObject *o = json_node_get_object(node);
    const char *ev = json_object_get_string_member(o, "event");
    if (g_str_equal(ev, "hang") && !json_object_get_boolean_member(o, "resolved") && !reported) {
      reported = TRUE;
      JsonArray *missing = json_object_get_array_member(o, "missing");
      g_assert_cmpuint(json_array_get_length(missing), ==, 1);
      g_assert_cmpint(json_array_get_int_element(missing, 0), ==, 1);
      JsonObject *r1 = json_array_get_object_element(json_object_get_array_member(o, "ranks"), 1);
      g_assert_cmpstr(json_object_get_string_member(r1, "phase"), ==, "forward");
      g_assert_false(json_object_get_boolean_member(r1, "arrived"));
      g_assert_cmpint(json_object_get_int_member(r1, "step"), ==, 1);
      g_assert_cmpstr(json_object_get_string_member(o, "collective"), ==, "all_reduce");
      double waited = json_object_get_double_member(o, "waited_s");
      g_assert_cmpfloat(waited, >=, 2);
      g_assert_cmpfloat(waited, <=, 2 + 5);
    } else if (g_str_equal(ev, "hang")) {
      resolved = resolved || json_object_get_boolean_member(o, "resolved");
    } else if (g_str_equal(ev, "log") &&
               strstr(json_object_get_string_member(o, "message"),
                      "rank 1 has not reached all_reduce") != NULL &&
               strstr(json_object_get_string_member(o, "message"), "in forward for") != NULL) {
      logged = TRUE;
    } else if (g_str_equal(ev, "done")) {
      done = g_str_equal(json_object_get_string_member(o, "status"), "completed");
    }
  }
  g_assert_true(reported);
  g_assert_true(logged);
  g_assert_true(resolved);
  g_assert_true(done);
  run_result_clear(&res);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/hang/watchdog/in-time", test_watchdog_in_time);
  g_test_add_func("/hang/watchdog/timeout", test_watchdog_timeout);
  g_test_add_func("/hang/watchdog/progress", test_watchdog_progress);
  g_test_add_func("/hang/watchdog/check", test_watchdog_check);
  g_test_add_func("/hang/record/round-trip", test_record_round_trip);
  g_test_add_func("/hang/gloo/abort-interrupts", test_gloo_abort);
  g_test_add_func("/hang/gloo/long-phase-ticks", test_gloo_long_phase);
  g_test_add_func("/hang/gloo/still-phase-fails", test_gloo_still_phase);
  g_test_add_func("/hang/gloo/stopped-inside", test_gloo_stopped_inside);
  g_test_add_func("/hang/gloo/report", test_gloo_report);
  g_test_add_func("/hang/train/report", test_train_report);
  return g_test_run();
}
