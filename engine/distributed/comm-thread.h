/* The communication thread that the DDP reducer and the ZeRO sharder share: one thread per
 * owner that issues the owner's collectives in the order the owner queues them, while the
 * owner's thread (backward) computes.
 *
 * Why one thread, and why a queue: ranks must issue collectives in the same order, and a
 * communicator only guarantees that for one calling thread at a time (comm.h). So every
 * collective that may overlap compute, the owner's own (buckets, reduce-scatters, gathers) and
 * the others that come up meanwhile (SyncBatchNorm's, through cohort_comm_thread_run), goes
 * through this one queue. The owner decides what to queue only from what the model tells it
 * (the same on every rank), never from how far the communication has got, so the queue order,
 * hence the collective order, is the same on every rank.
 *
 * The order digest (cohort_comm_thread_order) is the proof of that: a hash of the kind and index
 * of every collective queued, jobs included whether they were queued or ran at once. Ranks
 * compare it (the trainer's ranks report) and stop together when one differs, instead of
 * deadlocking in mismatched collectives or, worse, summing the wrong buffers.
 *
 * Failures: the first failure of an owner's item is kept (cohort_comm_thread_take_error) and the
 * owner's later items are skipped, only counted, since the communicator is broken; jobs still
 * run, so their callers hear why. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A collective to run on the thread that is not the owner's own (SyncBatchNorm's). */
typedef gboolean (*CohortCommJob)(gpointer data, GError **error);

/* One entry of the queue. The owner keeps its items (one per bucket or unit, reused from pass to
 * pass) and may not touch one between cohort_comm_thread_push and its completion. */
typedef struct {
  int kind;    /* the owner's kind (>= 0), or COHORT_COMM_ITEM_JOB */
  guint index; /* the owner's bucket or unit */
  /* the thread's */
  CohortCommJob job;
  gpointer data;
  gboolean done, ok;
  GError *error;
} CohortCommItem;

#define COHORT_COMM_ITEM_JOB (-1)

typedef struct {
  /* Runs one of the owner's items on the thread: the owner's collective for item->kind and
   * item->index. FALSE with an error on failure. */
  gboolean (*perform)(gpointer owner, const CohortCommItem *item, GError **error);
  /* On the thread before its first item, or NULL: a GPU owner makes its device current there. */
  void (*start)(gpointer owner);
  gpointer owner;
  /* This rank, for COHORT_TEST_SLOW_RANK ("rank:microseconds"): that rank sleeps before each
   * item it queues or runs, so tests can show that a slow rank changes neither the order nor a
   * bit. */
  int rank;
} CohortCommThreadHooks;

typedef struct CohortCommThread CohortCommThread;

/* Starts the thread (`name` at most 15 bytes, as the system shows it). `hooks` is copied. */
CohortCommThread *cohort_comm_thread_new(const char *name, const CohortCommThreadHooks *hooks);
/* Waits for what is queued, then stops and joins the thread. NULL is allowed. */
void cohort_comm_thread_free(CohortCommThread *t);

/* Makes `item` one of the owner's (kind >= 0) for later pushes. */
void cohort_comm_item_init(CohortCommItem *item, int kind, guint index);
/* Queues `item`, noting it in the order digest. */
void cohort_comm_thread_push(CohortCommThread *t, CohortCommItem *item);
/* Waits until `item` is done; its own outcome is in item->ok (a failure is also kept for
 * cohort_comm_thread_take_error). */
void cohort_comm_thread_wait(CohortCommThread *t, CohortCommItem *item);
/* Waits until everything queued is done. */
void cohort_comm_thread_drain(CohortCommThread *t);
/* Runs `job` after everything queued so far and waits for it; when nothing is in flight it runs
 * at once on the calling thread, saving two thread switches (only the caller queues work, so
 * the thread stays idle meanwhile). Noted in the order digest either way: which of the two
 * happens depends on how far this rank's communication has got, the collective order does not.
 * Returns the job's result. */
gboolean cohort_comm_thread_run(CohortCommThread *t, CohortCommJob job, gpointer data,
                                GError **error);

/* The first failure of an owner's item since the last call: FALSE with it, else TRUE. */
gboolean cohort_comm_thread_take_error(CohortCommThread *t, GError **error);
/* Microseconds the thread spent on the owner's items since the last call (not on jobs, which
 * their callers time): with what the owner waited, how much communication compute hid. */
gint64 cohort_comm_thread_take_busy_us(CohortCommThread *t);
/* The order digest (FNV-1a over kind and index of every item queued and every job run, in
 * order): equal on two ranks exactly when they queued the same collectives in the same order.
 * The owner's thread only. */
guint64 cohort_comm_thread_order(const CohortCommThread *t);

G_END_DECLS
