#include "engine/distributed/watchdog.h"

struct CohortWatchdog {
  CohortWatchdogHooks hooks;
  GThread *thread;
  GMutex lock;
  GCond cond;
  gboolean quit;
  gboolean watching;
  gboolean firing; /* `fire` is running (outside the lock) */
  CohortWatchdogVerdict verdict;
  GError *error;
  gint64 begin_us, progress_us, timeout_us;
};

static gint64 deadline_of(const CohortWatchdog *wd)
{
  return MAX(wd->begin_us, wd->progress_us) + wd->timeout_us;
}

/* Fires for the watched call: the verdict is set under the lock, `fire` runs without it. */
static void fire_locked(CohortWatchdog *wd, CohortWatchdogVerdict why, GError *error)
{
  wd->verdict = why;
  wd->error = error;
  wd->firing = TRUE;
  g_mutex_unlock(&wd->lock);
  wd->hooks.fire(wd->hooks.user);
  g_mutex_lock(&wd->lock);
  wd->firing = FALSE;
  g_cond_broadcast(&wd->cond);
}

static gpointer watch_thread(gpointer data)
{
  CohortWatchdog *wd = data;
  gint64 check_us = (gint64)((wd->hooks.check_interval_s > 0 ? wd->hooks.check_interval_s : 0.05) *
                             G_USEC_PER_SEC);
  g_mutex_lock(&wd->lock);
  while (!wd->quit) {
    if (!wd->watching || wd->verdict != COHORT_WATCHDOG_OK) {
      g_cond_wait(&wd->cond, &wd->lock);
      continue;
    }
    gint64 now = g_get_monotonic_time();
    gint64 deadline = deadline_of(wd);
    if (now >= deadline) {
      fire_locked(wd, COHORT_WATCHDOG_TIMEOUT, NULL);
      continue;
    }
    if (wd->hooks.check != NULL) {
      GError *e = NULL;
      g_mutex_unlock(&wd->lock);
      gboolean ok = wd->hooks.check(wd->hooks.user, &e);
      g_mutex_lock(&wd->lock);
      if (!ok && wd->watching && wd->verdict == COHORT_WATCHDOG_OK) {
        fire_locked(wd, COHORT_WATCHDOG_FAILED, e);
        continue;
      }
      g_clear_error(&e);
      deadline = MIN(deadline, g_get_monotonic_time() + check_us);
    }
    /* Woken early by end, progress or a new call: the loop looks again. */
    g_cond_wait_until(&wd->cond, &wd->lock, deadline);
  }
  g_mutex_unlock(&wd->lock);
  return NULL;
}

CohortWatchdog *cohort_watchdog_new(const CohortWatchdogHooks *hooks)
{
  CohortWatchdog *wd = g_new0(CohortWatchdog, 1);
  wd->hooks = *hooks;
  g_mutex_init(&wd->lock);
  g_cond_init(&wd->cond);
  wd->thread = g_thread_new("cohort-watchdog", watch_thread, wd);
  return wd;
}

void cohort_watchdog_free(CohortWatchdog *wd)
{
  if (wd == NULL)
    return;
  g_mutex_lock(&wd->lock);
  wd->quit = TRUE;
  g_cond_broadcast(&wd->cond);
  g_mutex_unlock(&wd->lock);
  g_thread_join(wd->thread);
  g_clear_error(&wd->error);
  g_mutex_clear(&wd->lock);
  g_cond_clear(&wd->cond);
  g_free(wd);
}

void cohort_watchdog_begin(CohortWatchdog *wd, double timeout_s)
{
  g_mutex_lock(&wd->lock);
  wd->watching = TRUE;
  wd->verdict = COHORT_WATCHDOG_OK;
  g_clear_error(&wd->error);
  wd->begin_us = wd->progress_us = g_get_monotonic_time();
  wd->timeout_us = MAX((gint64)(timeout_s * G_USEC_PER_SEC), 1000);
  g_cond_broadcast(&wd->cond);
  g_mutex_unlock(&wd->lock);
}

void cohort_watchdog_progress(CohortWatchdog *wd)
{
  g_mutex_lock(&wd->lock);
  if (wd->watching) {
    wd->progress_us = g_get_monotonic_time();
    g_cond_broadcast(&wd->cond);
  }
  g_mutex_unlock(&wd->lock);
}

CohortWatchdogVerdict cohort_watchdog_end(CohortWatchdog *wd, double *waited_s, GError **error)
{
  g_mutex_lock(&wd->lock);
  while (wd->firing)
    g_cond_wait(&wd->cond, &wd->lock);
  CohortWatchdogVerdict v = wd->verdict;
  if (waited_s != NULL)
    *waited_s = (double)(g_get_monotonic_time() - wd->begin_us) / G_USEC_PER_SEC;
  if (wd->error != NULL)
    g_propagate_error(error, g_steal_pointer(&wd->error));
  wd->watching = FALSE;
  wd->verdict = COHORT_WATCHDOG_OK;
  g_cond_broadcast(&wd->cond);
  g_mutex_unlock(&wd->lock);
  return v;
}

double cohort_watchdog_waited(CohortWatchdog *wd, double *since_progress_s)
{
  g_mutex_lock(&wd->lock);
  gint64 now = g_get_monotonic_time();
  double w = wd->watching ? (double)(now - wd->begin_us) / G_USEC_PER_SEC : 0;
  if (since_progress_s != NULL)
    *since_progress_s = wd->watching ? (double)(now - wd->progress_us) / G_USEC_PER_SEC : 0;
  g_mutex_unlock(&wd->lock);
  return w;
}
