/* The communication thread shared by the reducer and the sharder (see comm-thread.h). */
#include "engine/distributed/comm-thread.h"

#include <string.h>

#include "engine/distributed/env.h"

struct CohortCommThread {
  CohortCommThreadHooks hooks;
  GThread *thread;
  GAsyncQueue *queue; /* of CohortCommItem*; &quit ends the thread */
  CohortCommItem quit;
  GMutex lock; /* everything below but `order` */
  GCond done_cond;
  guint queued, completed; /* items pushed and done */
  GError *error;           /* the first failure of an owner's item since it was taken */
  gint64 busy_us;
  guint64 order; /* the owner's thread's alone */
  gint64 slow_us;
};

/* FNV-1a over (kind, index): equal on every rank exactly when the orders are equal. */
static void note_order(CohortCommThread *t, int kind, guint index)
{
  guint64 word = ((guint64)(guint32)kind << 32) | (kind == COHORT_COMM_ITEM_JOB ? 0 : index);
  for (int b = 0; b < 8; b++)
    t->order = (t->order ^ ((word >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
}

/* One item on the thread: a job always runs; an owner's item only while nothing has failed. */
static void perform(CohortCommThread *t, CohortCommItem *it)
{
  g_mutex_lock(&t->lock);
  gboolean failed = t->error != NULL;
  g_mutex_unlock(&t->lock);
  if (t->slow_us > 0)
    g_usleep((gulong)t->slow_us);
  GError *error = NULL;
  gboolean job = it->kind == COHORT_COMM_ITEM_JOB;
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = TRUE;
  if (job)
    ok = it->job(it->data, &error);
  else if (!failed)
    ok = t->hooks.perform(t->hooks.owner, it, &error);
  gint64 took = g_get_monotonic_time() - t0;
  g_mutex_lock(&t->lock);
  if (!job) {
    t->busy_us += took;
    if (error != NULL && t->error == NULL)
      t->error = g_steal_pointer(&error);
    g_clear_error(&error);
  }
  it->ok = ok;
  it->error = error;
  it->done = TRUE;
  t->completed++;
  g_cond_broadcast(&t->done_cond);
  g_mutex_unlock(&t->lock);
}

static gpointer thread_main(gpointer data)
{
  CohortCommThread *t = data;
  if (t->hooks.start != NULL)
    t->hooks.start(t->hooks.owner);
  for (;;) {
    CohortCommItem *it = g_async_queue_pop(t->queue);
    if (it == &t->quit)
      return NULL;
    perform(t, it);
  }
}

CohortCommThread *cohort_comm_thread_new(const char *name, const CohortCommThreadHooks *hooks)
{
  CohortCommThread *t = g_new0(CohortCommThread, 1);
  t->hooks = *hooks;
  t->order = 0xcbf29ce484222325ULL;
  const char *slow = g_getenv("COHORT_TEST_SLOW_RANK");
  if (slow && g_ascii_strtoll(slow, NULL, 10) == hooks->rank && strchr(slow, ':'))
    t->slow_us = g_ascii_strtoll(strchr(slow, ':') + 1, NULL, 10);
  g_mutex_init(&t->lock);
  g_cond_init(&t->done_cond);
  t->queue = g_async_queue_new();
  t->thread = g_thread_new(name, thread_main, t);
  return t;
}

void cohort_comm_thread_free(CohortCommThread *t)
{
  if (t == NULL)
    return;
  g_async_queue_push(t->queue, &t->quit);
  g_thread_join(t->thread);
  g_async_queue_unref(t->queue);
  g_clear_error(&t->error);
  g_mutex_clear(&t->lock);
  g_cond_clear(&t->done_cond);
  g_free(t);
}

void cohort_comm_item_init(CohortCommItem *item, int kind, guint index)
{
  *item = (CohortCommItem){.kind = kind, .index = index};
}

void cohort_comm_thread_push(CohortCommThread *t, CohortCommItem *item)
{
  note_order(t, item->kind, item->index);
  if (t->slow_us > 0)
    g_usleep((gulong)t->slow_us);
  g_mutex_lock(&t->lock);
  item->done = FALSE;
  t->queued++;
  g_mutex_unlock(&t->lock);
  g_async_queue_push(t->queue, item);
}

void cohort_comm_thread_wait(CohortCommThread *t, CohortCommItem *item)
{
  g_mutex_lock(&t->lock);
  while (!item->done)
    g_cond_wait(&t->done_cond, &t->lock);
  g_mutex_unlock(&t->lock);
}

void cohort_comm_thread_drain(CohortCommThread *t)
{
  g_mutex_lock(&t->lock);
  while (t->completed < t->queued)
    g_cond_wait(&t->done_cond, &t->lock);
  g_mutex_unlock(&t->lock);
}

gboolean cohort_comm_thread_run(CohortCommThread *t, CohortCommJob job, gpointer data,
                                GError **error)
{
  g_mutex_lock(&t->lock);
  gboolean idle = t->completed == t->queued;
  g_mutex_unlock(&t->lock);
  if (idle) {
    note_order(t, COHORT_COMM_ITEM_JOB, 0);
    return job(data, error);
  }
  CohortCommItem it = {.kind = COHORT_COMM_ITEM_JOB, .job = job, .data = data};
  cohort_comm_thread_push(t, &it);
  cohort_comm_thread_wait(t, &it);
  if (!it.ok)
    g_propagate_error(error, it.error != NULL
                                 ? it.error
                                 : g_error_new_literal(COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                                                       "a collective job failed"));
  else
    g_clear_error(&it.error);
  return it.ok;
}

gboolean cohort_comm_thread_take_error(CohortCommThread *t, GError **error)
{
  g_mutex_lock(&t->lock);
  GError *e = g_steal_pointer(&t->error);
  g_mutex_unlock(&t->lock);
  if (e == NULL)
    return TRUE;
  g_propagate_error(error, e);
  return FALSE;
}

gint64 cohort_comm_thread_take_busy_us(CohortCommThread *t)
{
  g_mutex_lock(&t->lock);
  gint64 us = t->busy_us;
  t->busy_us = 0;
  g_mutex_unlock(&t->lock);
  return us;
}

guint64 cohort_comm_thread_order(const CohortCommThread *t)
{
  return t->order;
}
