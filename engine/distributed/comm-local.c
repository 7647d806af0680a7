/* The communicator of one process: every collective is a copy or nothing. */
#include "engine/distributed/comm-backend.h"

#include <string.h>

static gboolean local_all_reduce(gpointer impl, void *buf, gsize count, CohortDtype dtype,
                                 CohortReduceOp op, gint64 timeout_ms, GError **error)
{
  (void)impl, (void)buf, (void)count, (void)dtype, (void)op, (void)timeout_ms, (void)error;
  return TRUE;
}

static gboolean local_broadcast(gpointer impl, void *buf, gsize nbytes, int root, gint64 timeout_ms,
                                GError **error)
{
  (void)impl, (void)buf, (void)nbytes, (void)root, (void)timeout_ms, (void)error;
  return TRUE;
}

static gboolean local_all_gather(gpointer impl, const void *send, gsize nbytes, void *recv,
                                 gint64 timeout_ms, GError **error)
{
  (void)impl, (void)timeout_ms, (void)error;
  if (nbytes > 0 && send != recv) /* in place: rank 0's bytes are already at offset 0 */
    memcpy(recv, send, nbytes);
  return TRUE;
}

static gboolean local_reduce_scatter(gpointer impl, void *send, void *recv, const gsize *counts,
                                     CohortDtype dtype, CohortReduceOp op, gint64 timeout_ms,
                                     GError **error)
{
  (void)impl, (void)op, (void)timeout_ms, (void)error;
  gsize size = dtype == COHORT_DTYPE_F64 ? 8 : dtype == COHORT_DTYPE_BF16 ? 2 : 4;
  if (counts[0] > 0 && send != recv)
    memcpy(recv, send, counts[0] * size);
  return TRUE;
}

static gboolean local_all_gather_v(gpointer impl, void *buf, const gsize *nbytes, gint64 timeout_ms,
                                   GError **error)
{
  (void)impl, (void)buf, (void)nbytes, (void)timeout_ms, (void)error;
  return TRUE; /* the one rank's bytes are already in place */
}

static gboolean local_barrier(gpointer impl, gint64 timeout_ms, GError **error)
{
  (void)impl, (void)timeout_ms, (void)error;
  return TRUE;
}

static void local_free(gpointer impl)
{
  (void)impl;
}

static const CohortCommBackend local_backend = {
    .name = "local",
    .all_reduce = local_all_reduce,
    .broadcast = local_broadcast,
    .all_gather = local_all_gather,
    .barrier = local_barrier,
    .reduce_scatter = local_reduce_scatter,
    .all_gather_v = local_all_gather_v,
    .abort = NULL,
    .free = local_free,
};

CohortComm *cohort_comm_new_local(void)
{
  return cohort_comm_new_from_backend(&local_backend, NULL, 0, 1, NULL, 0);
}
