/* How a collectives backend plugs into CohortComm (for backend implementers only; users of
 * collectives include comm.h).
 *
 * comm.c does the common work around every call: argument checks, the lock that serializes
 * collectives, the sequence number, the watchdog that enforces the timeout (watchdog.h: a
 * backend with `abort` gets `timeout_ms` only as a far backstop, and `abort` must make a call
 * blocked in another thread return), this rank's heartbeat record (heartbeat.h), turning a
 * failure into a message that names the collective and the ranks that did not arrive, and the
 * broken state after a failure. A backend only moves bytes. */
#pragma once

#include "engine/distributed/comm.h"
#include "engine/distributed/dtype.h"

G_BEGIN_DECLS

/* Each function returns FALSE with a short reason (e.g. the library's own message) in
 * *error; comm.c wraps it. `timeout_ms` is always > 0. */
typedef struct {
  const char *name;
  gboolean (*all_reduce)(gpointer impl, void *buf, gsize count, CohortDtype dtype,
                         CohortReduceOp op, gint64 timeout_ms, GError **error);
  gboolean (*broadcast)(gpointer impl, void *buf, gsize nbytes, int root, gint64 timeout_ms,
                        GError **error);
  /* `send` is either separate from `recv` or exactly recv + rank × nbytes (in place, where
   * this rank's bytes are already in their slot). */
  gboolean (*all_gather)(gpointer impl, const void *send, gsize nbytes, void *recv,
                         gint64 timeout_ms, GError **error);
  gboolean (*barrier)(gpointer impl, gint64 timeout_ms, GError **error);
  /* cohort_comm_reduce_scatter_*: `counts` has one entry per rank (values); `send` may be
   * used as scratch. AVG only when reduces_avg (else comm.c asks for SUM and divides). */
  gboolean (*reduce_scatter)(gpointer impl, void *send, void *recv, const gsize *counts,
                             CohortDtype dtype, CohortReduceOp op, gint64 timeout_ms,
                             GError **error);
  /* cohort_comm_all_gather_v: `nbytes` has one entry per rank. */
  gboolean (*all_gather_v)(gpointer impl, void *buf, const gsize *nbytes, gint64 timeout_ms,
                           GError **error);

  /* Makes calls blocked in other threads return; called without the lock. May be NULL. */
  void (*abort)(gpointer impl);
  void (*free)(gpointer impl);
  /* TRUE when all_reduce computes COHORT_REDUCE_AVG itself (buffers comm.c cannot touch,
   * such as device memory); FALSE: the backend sums and comm.c divides on the host. */
  gboolean reduces_avg;
  /* Optional: all_reduce ordered after `event` (a cudaEvent_t) instead of after the work
   * queued so far (cohort_comm_all_reduce_f32_after, cohort_comm_all_reduce_bf16_after). NULL:
   * all_reduce is used. */
  gboolean (*all_reduce_after)(gpointer impl, void *buf, gsize count, CohortDtype dtype,
                               CohortReduceOp op, gpointer event, gint64 timeout_ms,
                               GError **error);
  /* Optional: reduce_scatter and all_gather_v ordered after `event`, as all_reduce_after
   * (cohort_comm_reduce_scatter_*_after, cohort_comm_all_gather_v_after). NULL: the plain
   * forms are used. */
  gboolean (*reduce_scatter_after)(gpointer impl, void *send, void *recv, const gsize *counts,
                                   CohortDtype dtype, CohortReduceOp op, gpointer event,
                                   gint64 timeout_ms, GError **error);
  gboolean (*all_gather_v_after)(gpointer impl, void *buf, const gsize *nbytes, gpointer event,
                                 gint64 timeout_ms, GError **error);
  /* Optional: called by the watchdog thread every 50 ms while a collective blocks, for errors
   * the blocked call cannot see (NCCL's asynchronous errors); FALSE ends the call (abort). */
  gboolean (*check)(gpointer impl, GError **error);
} CohortCommBackend;

/* Wraps a backend instance. `store` may be NULL (then no arrival records, as for "local");
 * it is borrowed. */
CohortComm *cohort_comm_new_from_backend(const CohortCommBackend *backend, gpointer impl, int rank,
                                         int world_size, CohortStore *store, double timeout_s);

G_END_DECLS
