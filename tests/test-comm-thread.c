/* The communication thread the DDP reducer and the ZeRO sharder share (issue 34 item 3), with a
 * stand-in for the collectives: items run in the order queued, on the thread; a job runs at once
 * on the caller when nothing is in flight and after everything queued otherwise; the order
 * digest depends on the order of what was queued (jobs included, wherever they ran) and on
 * nothing else; after an item fails the owner's later items are skipped, jobs still run, and the
 * first failure is reported once. */
#include "engine/distributed/comm-thread.h"
#include "engine/distributed/env.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  GMutex lock;
  GCond cond;
  GString *log;         /* "kind:index " for each item performed, "job " for each job */
  gboolean hold;        /* items wait while set */
  int fail_index;       /* this item index fails; -1 = none */
  GThread *caller;      /* the test's thread */
  gboolean job_on_comm; /* the last job ran on another thread than the test's */
} Owner;

static void owner_init(Owner *o)
{
  memset(o, 0, sizeof *o);
  g_mutex_init(&o->lock);
  g_cond_init(&o->cond);
  o->log = g_string_new(NULL);
  o->fail_index = -1;
  o->caller = g_thread_self();
}

static void owner_clear(Owner *o)
{
  g_string_free(o->log, TRUE);
  g_mutex_clear(&o->lock);
  g_cond_clear(&o->cond);
}

static gboolean perform(gpointer owner, const CohortCommItem *item, GError **error)
{
  Owner *o = owner;
  g_mutex_lock(&o->lock);
  while (o->hold)
    g_cond_wait(&o->cond, &o->lock);
  g_string_append_printf(o->log, "%d:%u ", item->kind, item->index);
  g_mutex_unlock(&o->lock);
  if ((int)item->index == o->fail_index) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER, "item %u failed", item->index);
    return FALSE;
  }
  return TRUE;
}

static gboolean job(gpointer data, GError **error)
{
  Owner *o = data;
  (void)error;
  g_mutex_lock(&o->lock);
  g_string_append(o->log, "job ");
  o->job_on_comm = g_thread_self() != o->caller;
  g_mutex_unlock(&o->lock);
  return TRUE;
}

static void hold(Owner *o, gboolean on)
{
  g_mutex_lock(&o->lock);
  o->hold = on;
  g_cond_broadcast(&o->cond);
  g_mutex_unlock(&o->lock);
}

static CohortCommThread *thread_for(Owner *o)
{
  CohortCommThreadHooks hooks = {.perform = perform, .owner = o, .rank = 0};
  return cohort_comm_thread_new("test-comm", &hooks);
}

/* Lets the held items go after a moment, from another thread (the test's waits in run). */
static gpointer release_later(gpointer data)
{
  g_usleep(100000);
  hold(data, FALSE);
  return NULL;
}

/* Items run in order on the thread; a job waits behind them, or runs at once when idle. */
static void test_order_and_jobs(void)
{
  Owner o;
  owner_init(&o);
  CohortCommThread *t = thread_for(&o);
  CohortCommItem items[3];
  for (guint i = 0; i < 3; i++)
    cohort_comm_item_init(&items[i], 1, i);

  g_assert_true(cohort_comm_thread_run(t, job, &o, NULL)); /* idle: here */
  g_assert_false(o.job_on_comm);
  hold(&o, TRUE);
  for (guint i = 0; i < 3; i++)
    cohort_comm_thread_push(t, &items[i]);
  GThread *th = g_thread_new("release", release_later, &o);
  g_assert_true(cohort_comm_thread_run(t, job, &o, NULL)); /* in flight: behind them */
  g_assert_true(o.job_on_comm);
  g_thread_join(th);
  g_assert_cmpstr(o.log->str, ==, "job 1:0 1:1 1:2 job ");
  for (guint i = 0; i < 3; i++)
    g_assert_true(items[i].done && items[i].ok);
  /* the items may be queued again, as a reducer's are every pass */
  cohort_comm_thread_push(t, &items[2]);
  cohort_comm_thread_wait(t, &items[2]);
  cohort_comm_thread_drain(t);
  g_assert_cmpstr(o.log->str, ==, "job 1:0 1:1 1:2 job 1:2 ");
  g_assert_true(cohort_comm_thread_take_error(t, NULL));
  cohort_comm_thread_free(t);
  owner_clear(&o);
}

/* The digest of a run: `order` is a list of items ("k:i") and jobs ("job"); with `busy` the
 * jobs find items in flight (queued behind them), else they run at once. */
static guint64 digest_of(const char *order, gboolean busy)
{
  Owner o;
  owner_init(&o);
  CohortCommThread *t = thread_for(&o);
  g_auto(GStrv) parts = g_strsplit(order, " ", -1);
  guint n = g_strv_length(parts);
  g_autofree CohortCommItem *items = g_new0(CohortCommItem, n);
  for (guint i = 0; i < n; i++) {
    if (g_str_equal(parts[i], "job")) {
      if (busy) {
        hold(&o, TRUE);
        CohortCommItem *filler = &items[i];
        cohort_comm_item_init(filler, 9, 9);
        GThread *th = g_thread_new("release", release_later, &o);
        cohort_comm_thread_push(t, filler);
        g_assert_true(cohort_comm_thread_run(t, job, &o, NULL));
        g_thread_join(th);
      } else {
        cohort_comm_thread_drain(t);
        g_assert_true(cohort_comm_thread_run(t, job, &o, NULL));
      }
      continue;
    }
    cohort_comm_item_init(&items[i], atoi(parts[i]), (guint)atoi(strchr(parts[i], ':') + 1));
    cohort_comm_thread_push(t, &items[i]);
  }
  cohort_comm_thread_drain(t);
  guint64 d = cohort_comm_thread_order(t);
  cohort_comm_thread_free(t);
  owner_clear(&o);
  return d;
}

/* Equal digests exactly for equal orders, wherever the jobs ran. */
static void test_digest(void)
{
  guint64 a = digest_of("0:3 0:2 job 0:1 1:5", FALSE);
  g_assert_cmpuint(a, ==, digest_of("0:3 0:2 job 0:1 1:5", FALSE));
  g_assert_cmpuint(a, !=, digest_of("0:2 0:3 job 0:1 1:5", FALSE)); /* two units swapped */
  g_assert_cmpuint(a, !=, digest_of("0:3 0:2 0:1 job 1:5", FALSE)); /* the job elsewhere */
  g_assert_cmpuint(a, !=, digest_of("0:3 0:2 job 0:1 0:5", FALSE)); /* another kind */
  g_assert_cmpuint(a, !=, digest_of("0:3 0:2 job 0:1", FALSE));     /* one fewer */
  /* A job queued behind a filler item: the filler is in the digest, the job counts the same. */
  g_assert_cmpuint(digest_of("0:3 job", TRUE), ==, digest_of("0:3 9:9 job", FALSE));
}

/* After a failure the owner's items are skipped, jobs still run, and the first failure is told
 * once. */
static void test_failure(void)
{
  Owner o;
  owner_init(&o);
  o.fail_index = 1;
  CohortCommThread *t = thread_for(&o);
  CohortCommItem items[4];
  for (guint i = 0; i < 4; i++)
    cohort_comm_item_init(&items[i], 0, i);
  hold(&o, TRUE);
  for (guint i = 0; i < 3; i++)
    cohort_comm_thread_push(t, &items[i]);
  GThread *th = g_thread_new("release", release_later, &o);
  g_assert_true(cohort_comm_thread_run(t, job, &o, NULL));
  g_thread_join(th);
  cohort_comm_thread_push(t, &items[3]);
  cohort_comm_thread_drain(t);
  g_assert_cmpstr(o.log->str, ==, "0:0 0:1 job ");
  g_assert_true(items[0].ok);
  g_assert_false(items[1].ok);
  g_assert_true(items[2].done && items[3].done);
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_comm_thread_take_error(t, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER);
  g_assert_cmpstr(error->message, ==, "item 1 failed");
  g_assert_true(cohort_comm_thread_take_error(t, NULL)); /* told once */
  /* a new pass after the failure was taken: items run again */
  o.fail_index = -1;
  cohort_comm_thread_push(t, &items[3]);
  cohort_comm_thread_drain(t);
  g_assert_cmpstr(o.log->str, ==, "0:0 0:1 job 0:3 ");
  g_assert_cmpint(cohort_comm_thread_take_busy_us(t), >=, 0);
  g_assert_cmpint(cohort_comm_thread_take_busy_us(t), ==, 0);
  cohort_comm_thread_free(t);
  owner_clear(&o);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/comm-thread/order-and-jobs", test_order_and_jobs);
  g_test_add_func("/comm-thread/digest", test_digest);
  g_test_add_func("/comm-thread/failure", test_failure);
  return g_test_run();
}
