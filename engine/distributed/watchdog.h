/* The deadline of a blocking call that other ranks can keep alive: a watchdog thread ends a
 * call (through the `fire` hook, which must make it return: close Gloo's connections, abort the
 * NCCL communicator) when it has waited `timeout_s` since it began or since the last progress
 * reported for the ranks it waits for, whichever is later. So a collective that waits for a
 * rank busy alone in a long phase (a checkpoint, latent caching) goes on as long as that rank
 * shows progress, and fails `timeout_s` after the last sign of it.
 *
 * The call itself blocks without polling (Gloo's socket waits, a blocking-sync CUDA event):
 * nothing is added to a collective that finishes in time. An optional `check` hook runs every
 * `check_interval_s` while a call is watched, for errors the call cannot see while it blocks
 * (NCCL's asynchronous errors).
 *
 * One call is watched at a time (the communicator's collectives are serialized). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  /* Called on the watchdog thread, without its lock, once per watched call at most: the call
   * must return soon after. */
  void (*fire)(gpointer user);
  /* May be NULL. FALSE with an error ends the call as failed (then `fire` is called). */
  gboolean (*check)(gpointer user, GError **error);
  gpointer user;
  double check_interval_s; /* for `check`; <= 0: 0.05 s */
} CohortWatchdogHooks;

typedef enum {
  COHORT_WATCHDOG_OK,      /* not fired */
  COHORT_WATCHDOG_TIMEOUT, /* no progress for timeout_s */
  COHORT_WATCHDOG_FAILED,  /* `check` failed */
} CohortWatchdogVerdict;

typedef struct CohortWatchdog CohortWatchdog;

/* Starts the watchdog's thread (idle until a call begins). `hooks` is copied. */
CohortWatchdog *cohort_watchdog_new(const CohortWatchdogHooks *hooks);
/* Stops and joins the thread. Not while a call is watched. NULL is allowed. */
void cohort_watchdog_free(CohortWatchdog *wd);

/* Starts watching a call that may wait `timeout_s` (> 0) without progress. */
void cohort_watchdog_begin(CohortWatchdog *wd, double timeout_s);
/* Progress was seen for the call being watched: its deadline moves to now + timeout_s. Nothing
 * when no call is watched. */
void cohort_watchdog_progress(CohortWatchdog *wd);
/* Ends the watch. Returns whether and why it fired; *waited_s (may be NULL) gets the seconds
 * since begin, and `error` the check's error for COHORT_WATCHDOG_FAILED. When the watchdog is
 * firing at that moment, waits for `fire` to return first, so no fire reaches a later call. */
CohortWatchdogVerdict cohort_watchdog_end(CohortWatchdog *wd, double *waited_s, GError **error);
/* Seconds the watched call has waited so far, and since the last progress; 0 when none. */
double cohort_watchdog_waited(CohortWatchdog *wd, double *since_progress_s);

G_END_DECLS
