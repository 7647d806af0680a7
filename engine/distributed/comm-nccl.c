/* The NCCL backend (CUDA builds with NCCL): setup through our store, collectives through
 * NCCL on a stream of our own, every wait bounded (see cohort_comm_new_nccl in comm.h).
 *
 * The NCCL communicator is non-blocking (ncclConfig_t.blocking = 0): ncclCommInitRankConfig
 * and every collective return at once (ncclSuccess or ncclInProgress). Setup and finalize poll
 * ncclCommGetAsyncError until done. A collective waits for NCCL to finish enqueuing it (rarely
 * not at once), records an event created with cudaEventBlockingSync after it and waits in
 * cudaEventSynchronize: the communication thread sleeps in the driver until the stream gets
 * there, with no polling interval added to any bucket. The deadline and NCCL's asynchronous
 * errors are the watchdog's (comm.c, watchdog.h): its thread calls nccl_check every 50 ms and,
 * on an error or when the ranks waited for show no progress for the timeout, nccl_abort, whose
 * ncclCommAbort stops the kernels, so the event completes and the wait returns. An aborted
 * communicator also makes peers that wait on this rank fail instead of hanging. */
#include "engine/distributed/comm-backend.h"
#include "engine/distributed/cuda-query.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sched.h>
#include <string.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the NCCL backend needs NCCL 2.14 or newer (non-blocking communicators, ncclAvg)"
#endif

typedef struct {
  ncclComm_t comm;     /* NULL once aborted or destroyed */
  cudaStream_t stream; /* where every collective runs */
  cudaEvent_t ready;   /* recorded on the legacy default stream before each collective */
  cudaEvent_t done;    /* blocking-sync: recorded after each collective and waited on */
  int *scratch;        /* one int of device memory, for barrier */
  int device;
  double timeout_s;
  GMutex lock;        /* guards comm and enqueuing against nccl_abort from another thread */
  gboolean enqueuing; /* a collective is inside an NCCL call on `comm` (outside the lock) */
  gint aborted;       /* atomic */
} NcclImpl;

/* ---- waiting ---- */

/* Polls until NCCL's state for `comm` has left ncclInProgress (setup, finalize: not a
 * collective's path). Bounded by `deadline` (monotonic µs). */
static gboolean wait_done(ncclComm_t comm, gint64 deadline, const char *what, GError **error)
{
  for (guint spins = 0;; spins++) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess)
      state = r;
    if (state == ncclSuccess)
      return TRUE;
    if (state != ncclInProgress) {
      const char *last = ncclGetLastError(comm);
      g_set_error(error, COHORT_DIST_ERROR,
                  state == ncclRemoteError ? COHORT_DIST_ERROR_PEER : COHORT_DIST_ERROR_FAILED,
                  "%s: NCCL error: %s%s%s", what, ncclGetErrorString(state),
                  last && last[0] ? ": " : "", last ? last : "");
      return FALSE;
    }
    if (g_get_monotonic_time() >= deadline) {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
                  "%s did not finish in time; the NCCL communicator was aborted", what);
      return FALSE;
    }
    if (spins < 200)
      sched_yield();
    else
      g_usleep(spins < 2000 ? 20 : 200);
  }
}

/* NCCL's asynchronous state of the communicator, under the lock (abort may free it): FALSE
 * with the error when it failed; *pending when it is still enqueuing. */
static gboolean async_state(NcclImpl *n, const char *what, gboolean *pending, GError **error)
{
  g_mutex_lock(&n->lock);
  if (n->comm == NULL || g_atomic_int_get(&n->aborted)) {
    g_mutex_unlock(&n->lock);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ABORTED,
                "%s: the communicator was aborted", what);
    return FALSE;
  }
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
  if (r != ncclSuccess)
    state = r;
  const char *last =
      state != ncclSuccess && state != ncclInProgress ? ncclGetLastError(n->comm) : NULL;
  if (last != NULL)
    g_set_error(error, COHORT_DIST_ERROR,
                state == ncclRemoteError ? COHORT_DIST_ERROR_PEER : COHORT_DIST_ERROR_FAILED,
                "%s: NCCL error: %s%s%s", what, ncclGetErrorString(state), last[0] ? ": " : "",
                last);
  g_mutex_unlock(&n->lock);
  if (pending != NULL)
    *pending = state == ncclInProgress;
  return last == NULL;
}

/* Waits for the collective just enqueued: for NCCL to finish enqueuing it (a short poll, only
 * when the call said ncclInProgress), then in cudaEventSynchronize on the blocking-sync event
 * recorded after it. */
static gboolean wait_collective(NcclImpl *n, ncclResult_t enqueued, const char *what,
                                GError **error)
{
  gboolean pending = enqueued == ncclInProgress;
  for (guint spins = 0; pending; spins++) {
    if (!async_state(n, what, &pending, error))
      return FALSE;
    if (pending && spins < 200)
      sched_yield();
    else if (pending)
      g_usleep(50);
  }
  cudaError_t e = cudaEventRecord(n->done, n->stream);
  if (e == cudaSuccess)
    e = cudaEventSynchronize(n->done);
  /* A failed call also stays in this thread's CUDA error slot, where the next kernel launch's
   * check would take it for its own. */
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  if (g_atomic_int_get(&n->aborted)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ABORTED,
                "%s: the communicator was aborted", what);
    return FALSE;
  }
  if (e != cudaSuccess) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "%s: CUDA error: %s", what,
                cudaGetErrorString(e));
    return FALSE;
  }
  /* NCCL may have failed without leaving the stream unfinished. */
  return async_state(n, what, NULL, error);
}

/* Aborts the NCCL communicator once. Only while no NCCL call is running on it. */
static void abort_comm_locked(NcclImpl *n)
{
  if (n->comm != NULL) {
    ncclCommAbort(n->comm);
    n->comm = NULL;
  }
}

static gboolean cuda_ok(cudaError_t e, const char *what, GError **error)
{
  if (e == cudaSuccess)
    return TRUE;
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "%s: %s", what,
              cudaGetErrorString(e));
  return FALSE;
}

/* ---- collectives ---- */

/* The NCCL call is made: an abort that came meanwhile is carried out now. */
static void end_enqueue(NcclImpl *n)
{
  g_mutex_lock(&n->lock);
  n->enqueuing = FALSE;
  if (g_atomic_int_get(&n->aborted))
    abort_comm_locked(n);
  g_mutex_unlock(&n->lock);
}

/* Takes the communicator for one collective: makes the device current for this thread and
 * orders our stream after `after` when given, else after the work queued so far on the legacy
 * default stream. */
static ncclComm_t begin_after(NcclImpl *n, cudaEvent_t after, GError **error)
{
  g_mutex_lock(&n->lock);
  ncclComm_t comm = n->comm;
  if (comm == NULL || g_atomic_int_get(&n->aborted)) {
    g_mutex_unlock(&n->lock);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ABORTED,
                "the NCCL communicator was aborted");
    return NULL;
  }
  n->enqueuing = TRUE;
  g_mutex_unlock(&n->lock);
  if (!cuda_ok(cudaSetDevice(n->device), "cudaSetDevice", error) ||
      (after == NULL &&
       !cuda_ok(cudaEventRecord(n->ready, cudaStreamLegacy), "cudaEventRecord", error)) ||
      !cuda_ok(cudaStreamWaitEvent(n->stream, after != NULL ? after : n->ready, 0),
               "cudaStreamWaitEvent", error)) {
    (void)cudaGetLastError();
    end_enqueue(n);
    return NULL;
  }
  return comm;
}

static ncclComm_t begin(NcclImpl *n, GError **error)
{
  return begin_after(n, NULL, error);
}

/* Waits for the collective that `enqueued` started; on any failure aborts the NCCL
 * communicator (it is broken from now on anyway, and peers waiting on us then fail). The
 * deadline is the watchdog's (`timeout_ms` is only its far backstop). */
static gboolean finish(NcclImpl *n, ncclComm_t comm, ncclResult_t enqueued, const char *what,
                       gint64 timeout_ms, GError **error)
{
  (void)timeout_ms;
  gboolean ok;
  if (enqueued != ncclSuccess && enqueued != ncclInProgress) {
    const char *last = ncclGetLastError(comm);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "%s: NCCL error: %s%s%s", what,
                ncclGetErrorString(enqueued), last && last[0] ? ": " : "", last ? last : "");
    ok = FALSE;
    end_enqueue(n);
  } else {
    end_enqueue(n);
    ok = wait_collective(n, enqueued, what, error);
  }
  if (!ok) {
    g_mutex_lock(&n->lock);
    abort_comm_locked(n);
    g_mutex_unlock(&n->lock);
  }
  return ok;
}

static gboolean nccl_all_reduce_after(gpointer impl, void *buf, gsize count, CohortDtype dtype,
                                      CohortReduceOp op, gpointer event, gint64 timeout_ms,
                                      GError **error)
{
  NcclImpl *n = impl;
  if (count == 0)
    return TRUE;
  ncclComm_t comm = begin_after(n, (cudaEvent_t)event, error);
  if (comm == NULL)
    return FALSE;
  ncclDataType_t type = dtype == COHORT_DTYPE_F32   ? ncclFloat32
                        : dtype == COHORT_DTYPE_F64 ? ncclFloat64
                                                    : ncclBfloat16;
  ncclResult_t r = ncclAllReduce(buf, buf, count, type, op == COHORT_REDUCE_AVG ? ncclAvg : ncclSum,
                                 comm, n->stream);
  return finish(n, comm, r, "ncclAllReduce", timeout_ms, error);
}

static gboolean nccl_all_reduce(gpointer impl, void *buf, gsize count, CohortDtype dtype,
                                CohortReduceOp op, gint64 timeout_ms, GError **error)
{
  return nccl_all_reduce_after(impl, buf, count, dtype, op, NULL, timeout_ms, error);
}

static gboolean nccl_broadcast(gpointer impl, void *buf, gsize nbytes, int root, gint64 timeout_ms,
                               GError **error)
{
  NcclImpl *n = impl;
  if (nbytes == 0)
    return TRUE;
  ncclComm_t comm = begin(n, error);
  if (comm == NULL)
    return FALSE;
  ncclResult_t r = ncclBroadcast(buf, buf, nbytes, ncclUint8, root, comm, n->stream);
  return finish(n, comm, r, "ncclBroadcast", timeout_ms, error);
}

static gboolean nccl_all_gather(gpointer impl, const void *send, gsize nbytes, void *recv,
                                gint64 timeout_ms, GError **error)
{
  NcclImpl *n = impl;
  if (nbytes == 0)
    return TRUE;
  ncclComm_t comm = begin(n, error);
  if (comm == NULL)
    return FALSE;
  ncclResult_t r = ncclAllGather(send, recv, nbytes, ncclUint8, comm, n->stream);
  return finish(n, comm, r, "ncclAllGather", timeout_ms, error);
}

static ncclDataType_t nccl_type(CohortDtype dtype)
{
  return dtype == COHORT_DTYPE_F32   ? ncclFloat32
         : dtype == COHORT_DTYPE_F64 ? ncclFloat64
                                     : ncclBfloat16;
}

static gboolean counts_equal(const gsize *counts, int world)
{
  for (int r = 1; r < world; r++)
    if (counts[r] != counts[0])
      return FALSE;
  return TRUE;
}

/* Equal counts: ncclReduceScatter. Uneven ones: each rank's piece reduced to it (ncclReduce
 * with that rank as root), all in one group, as NCCL's documentation suggests for collectives
 * it has no "v" form of. */
static gboolean nccl_reduce_scatter_after(gpointer impl, void *send, void *recv,
                                          const gsize *counts, CohortDtype dtype, CohortReduceOp op,
                                          gpointer event, gint64 timeout_ms, GError **error)
{
  NcclImpl *n = impl;
  int world = 0, rank = 0;
  gsize total = 0, elt = dtype == COHORT_DTYPE_F64 ? 8 : dtype == COHORT_DTYPE_BF16 ? 2 : 4;
  ncclComm_t comm = begin_after(n, (cudaEvent_t)event, error);
  if (comm == NULL)
    return FALSE;
  ncclCommCount(comm, &world);
  ncclCommUserRank(comm, &rank);
  for (int r = 0; r < world; r++)
    total += counts[r];
  ncclRedOp_t red = op == COHORT_REDUCE_AVG ? ncclAvg : ncclSum;
  ncclResult_t res = ncclSuccess;
  if (total == 0) {
    res = ncclSuccess;
  } else if (counts_equal(counts, world)) {
    res = ncclReduceScatter(send, recv, counts[0], nccl_type(dtype), red, comm, n->stream);
  } else {
    res = ncclGroupStart();
    gsize off = 0;
    for (int r = 0; r < world && (res == ncclSuccess || res == ncclInProgress); r++) {
      if (counts[r] > 0)
        res = ncclReduce((const char *)send + off * elt, r == rank ? recv : NULL, counts[r],
                         nccl_type(dtype), red, r, comm, n->stream);
      off += counts[r];
    }
    ncclResult_t end = ncclGroupEnd();
    if (res == ncclSuccess || res == ncclInProgress)
      res = end;
  }
  return finish(n, comm, res, "ncclReduceScatter", timeout_ms, error);
}

static gboolean nccl_reduce_scatter(gpointer impl, void *send, void *recv, const gsize *counts,
                                    CohortDtype dtype, CohortReduceOp op, gint64 timeout_ms,
                                    GError **error)
{
  return nccl_reduce_scatter_after(impl, send, recv, counts, dtype, op, NULL, timeout_ms, error);
}

/* Equal counts: ncclAllGather in place. Uneven ones: each rank broadcasts its piece (in
 * place, ncclBroadcast with that rank as root), all in one group. */
static gboolean nccl_all_gather_v_after(gpointer impl, void *buf, const gsize *nbytes,
                                        gpointer event, gint64 timeout_ms, GError **error)
{
  NcclImpl *n = impl;
  int world = 0, rank = 0;
  ncclComm_t comm = begin_after(n, (cudaEvent_t)event, error);
  if (comm == NULL)
    return FALSE;
  ncclCommCount(comm, &world);
  ncclCommUserRank(comm, &rank);
  char *b = buf;
  ncclResult_t res = ncclSuccess;
  if (counts_equal(nbytes, world)) {
    if (nbytes[0] > 0)
      res = ncclAllGather(b + (gsize)rank * nbytes[0], b, nbytes[0], ncclUint8, comm, n->stream);
  } else {
    res = ncclGroupStart();
    gsize off = 0;
    for (int r = 0; r < world && (res == ncclSuccess || res == ncclInProgress); r++) {
      if (nbytes[r] > 0)
        res = ncclBroadcast(b + off, b + off, nbytes[r], ncclUint8, r, comm, n->stream);
      off += nbytes[r];
    }
    ncclResult_t end = ncclGroupEnd();
    if (res == ncclSuccess || res == ncclInProgress)
      res = end;
  }
  return finish(n, comm, res, "ncclAllGather", timeout_ms, error);
}

static gboolean nccl_all_gather_v(gpointer impl, void *buf, const gsize *nbytes, gint64 timeout_ms,
                                  GError **error)
{
  return nccl_all_gather_v_after(impl, buf, nbytes, NULL, timeout_ms, error);
}

static gboolean nccl_barrier(gpointer impl, gint64 timeout_ms, GError **error)
{
  NcclImpl *n = impl;
  ncclComm_t comm = begin(n, error);
  if (comm == NULL)
    return FALSE;
  /* The scratch int stays 0: a sum of zeros. */
  ncclResult_t r = ncclAllReduce(n->scratch, n->scratch, 1, ncclInt32, ncclSum, comm, n->stream);
  return finish(n, comm, r, "barrier (ncclAllReduce of one int)", timeout_ms, error);
}

static void nccl_abort(gpointer impl)
{
  NcclImpl *n = impl;
  g_atomic_int_set(&n->aborted, 1);
  g_mutex_lock(&n->lock);
  /* A collective inside an NCCL call aborts the communicator itself when the call returns
   * (end_enqueue); one waiting for its event is woken by this abort: ncclCommAbort stops
   * the communicator's kernels, and the stream reaches the event. */
  if (!n->enqueuing)
    abort_comm_locked(n);
  g_mutex_unlock(&n->lock);
}

/* The watchdog's look, every 50 ms while a collective waits: NCCL's asynchronous error (a
 * peer's failure, a network error) ends the wait. */
static gboolean nccl_check(gpointer impl, GError **error)
{
  NcclImpl *n = impl;
  if (g_atomic_int_get(&n->aborted))
    return TRUE; /* the waiting collective reports it */
  return async_state(n, "NCCL", NULL, error);
}

static void nccl_free(gpointer impl)
{
  NcclImpl *n = impl;
  if (n == NULL)
    return;
  /* Either call may fail (no driver; the bad index that failed the setup): each failure
   * also stays in this thread's CUDA error slot, where a later launch check would take it
   * for its own, so it is cleared. */
  int old = -1;
  gboolean restore = cudaGetDevice(&old) == cudaSuccess;
  if (!restore || cudaSetDevice(n->device) != cudaSuccess)
    (void)cudaGetLastError();
  if (n->comm != NULL) {
    /* Finalize flushes NCCL's work; bounded, and a communicator that does not finalize in
     * time (a peer gone) is aborted instead of destroyed. */
    double t = MIN(n->timeout_s, 30.0);
    ncclResult_t r = ncclCommFinalize(n->comm);
    if ((r == ncclSuccess || r == ncclInProgress) &&
        wait_done(n->comm, g_get_monotonic_time() + (gint64)(t * G_USEC_PER_SEC),
                  "ncclCommFinalize", NULL))
      ncclCommDestroy(n->comm);
    else
      ncclCommAbort(n->comm);
    n->comm = NULL;
  }
  if (n->scratch != NULL)
    cudaFree(n->scratch);
  if (n->ready != NULL)
    cudaEventDestroy(n->ready);
  if (n->done != NULL)
    cudaEventDestroy(n->done);
  if (n->stream != NULL)
    cudaStreamDestroy(n->stream);
  if (restore && old >= 0 && cudaSetDevice(old) != cudaSuccess)
    (void)cudaGetLastError();
  g_mutex_clear(&n->lock);
  g_free(n);
}

static const CohortCommBackend nccl_backend = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .all_gather = nccl_all_gather,
    .barrier = nccl_barrier,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather_v = nccl_all_gather_v,
    .abort = nccl_abort,
    .free = nccl_free,
    .reduces_avg = TRUE,
    .all_reduce_after = nccl_all_reduce_after,
    .reduce_scatter_after = nccl_reduce_scatter_after,
    .all_gather_v_after = nccl_all_gather_v_after,
    .check = nccl_check,
};

/* ---- setup ---- */

static double seconds_left(gint64 deadline)
{
  return MAX((double)(deadline - g_get_monotonic_time()) / G_USEC_PER_SEC, 0.001);
}

/* Makes `device` current, finds its PCI bus id and name, and creates the stream, event and
 * scratch int. Returns NULL, or why this rank cannot use the device. */
static char *open_device(NcclImpl *n, int device, char *bus_id, int bus_id_len, char *name,
                         gsize name_len)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return g_strdup_printf("no usable CUDA device: %s", cudaGetErrorString(e));
  if (device < 0 || device >= count) {
    const char *vis = g_getenv("CUDA_VISIBLE_DEVICES");
    return g_strdup_printf("CUDA device %d does not exist: %d visible (CUDA_VISIBLE_DEVICES=%s)",
                           device, count, vis ? vis : "unset");
  }
  struct cudaDeviceProp prop;
  const char *step = "cudaSetDevice";
  if ((e = cudaSetDevice(device)) != cudaSuccess ||
      (step = "cudaDeviceGetPCIBusId", e = cudaDeviceGetPCIBusId(bus_id, bus_id_len, device)) !=
          cudaSuccess ||
      (step = "cudaGetDeviceProperties", e = cudaGetDeviceProperties(&prop, device)) !=
          cudaSuccess ||
      (step = "cudaStreamCreateWithFlags",
       e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (step = "cudaEventCreateWithFlags",
       e = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming)) != cudaSuccess ||
      (step = "cudaEventCreateWithFlags",
       e = cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming | cudaEventBlockingSync)) !=
          cudaSuccess ||
      (step = "cudaMalloc", e = cudaMalloc((void **)&n->scratch, sizeof(int))) != cudaSuccess ||
      (step = "cudaMemset", e = cudaMemset(n->scratch, 0, sizeof(int))) != cudaSuccess)
    return g_strdup_printf("CUDA device %d: %s failed: %s", device, step, cudaGetErrorString(e));
  g_strlcpy(name, prop.name, name_len);
  /* the name goes into a tab-separated record */
  g_strdelimit(name, "\t\n", ' ');
  return NULL;
}

/* Rank 0's verdict on the GPUs that every rank published under `prefix`"gpu/<rank>": NULL
 * when each rank has a GPU of its own, else the message (*code set). */
static char *judge_gpus(CohortStore *store, const char *prefix, int world, gint64 deadline,
                        int *code, GError **error)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func(g_free);
  for (int r = 0; r < world; r++)
    g_ptr_array_add(keys, g_strdup_printf("%sgpu/%d", prefix, r));
  g_ptr_array_add(keys, NULL);
  if (!cohort_store_wait(store, (const char *const *)keys->pdata, seconds_left(deadline), error))
    return NULL;
  g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GPtrArray) devices = g_ptr_array_new_with_free_func(g_free); /* per rank */
  g_autoptr(GString) failures = g_string_new(NULL);                      /* the first 4 */
  int n_failures = 0;
  char *duplicate = NULL;
  for (int r = 0; r < world && duplicate == NULL; r++) {
    g_autoptr(GBytes) b = cohort_store_get(store, keys->pdata[r], seconds_left(deadline), error);
    if (b == NULL)
      return NULL;
    g_autofree char *text = g_strndup(g_bytes_get_data(b, NULL), g_bytes_get_size(b));
    g_auto(GStrv) f = g_strsplit(text, "\t", 5);
    g_ptr_array_add(devices, g_strdup(g_strv_length(f) == 5 ? f[3] : "?"));
    if (g_strv_length(f) != 5 || strcmp(f[0], "ok") != 0) {
      if (n_failures++ < 4) {
        if (g_strv_length(f) == 2 && strcmp(f[0], "error") == 0)
          g_string_append_printf(failures, "%s%s", failures->len ? "; " : "", f[1]);
        else
          g_string_append_printf(failures, "%srank %d published a malformed GPU record",
                                 failures->len ? "; " : "", r);
      }
      continue;
    }
    /* f: "ok", host, PCI bus id, device index, device name */
    char *where = g_strdup_printf("%s\t%s", f[1], f[2]);
    gpointer other = NULL;
    if (g_hash_table_lookup_extended(seen, where, NULL, &other)) {
      int o = GPOINTER_TO_INT(other);
      *code = COHORT_DIST_ERROR_ENV;
      duplicate = g_strdup_printf(
          "ranks %d and %d both use the GPU with PCI bus id %s (%s) on host %s (CUDA device %s "
          "on rank %d, device %s on rank %d): NCCL needs a GPU of its own for each rank; give "
          "each local rank its own device (device_indexes, CUDA_VISIBLE_DEVICES), or use the "
          "gloo backend, which lets ranks share a GPU",
          o, r, f[2], f[4], f[1], (const char *)devices->pdata[o], o, f[3], r);
      g_free(where);
    } else {
      g_hash_table_insert(seen, where, GINT_TO_POINTER(r));
    }
  }
  if (duplicate != NULL)
    return duplicate;
  if (n_failures > 0) {
    *code = COHORT_DIST_ERROR_FAILED;
    if (n_failures > 4)
      g_string_append_printf(failures, "; and %d more ranks", n_failures - 4);
    return g_strdup(failures->str);
  }
  return NULL;
}

/* Publishes this rank's GPU (or why it has none) and returns rank 0's verdict on all of
 * them: TRUE when the job may go on. */
static gboolean check_gpus(CohortStore *store, const CohortDistEnv *env, const char *prefix,
                           const char *local_failure, const char *bus_id, int device,
                           const char *name, gint64 deadline, GError **error)
{
  g_autofree char *mine =
      local_failure != NULL
          ? g_strdup_printf("error\trank %d: %s", env->rank, local_failure)
          : g_strdup_printf("ok\t%s\t%s\t%d\t%s", g_get_host_name(), bus_id, device, name);
  g_autofree char *key = g_strdup_printf("%sgpu/%d", prefix, env->rank);
  if (!cohort_store_set(store, key, mine, strlen(mine), error))
    return FALSE;
  g_autofree char *verdict_key = g_strdup_printf("%sgpu-check", prefix);
  if (env->rank == 0) {
    int code = COHORT_DIST_ERROR_FAILED;
    g_autoptr(GError) e = NULL;
    g_autofree char *bad = judge_gpus(store, prefix, env->world_size, deadline, &code, &e);
    g_autofree char *verdict =
        e != NULL
            ? g_strdup_printf("%c%s", e->code == COHORT_DIST_ERROR_TIMEOUT ? 'T' : 'F', e->message)
        : bad != NULL ? g_strdup_printf("%c%s", code == COHORT_DIST_ERROR_ENV ? 'E' : 'F', bad)
                      : g_strdup("K");
    if (!cohort_store_set(store, verdict_key, verdict, strlen(verdict), error))
      return FALSE;
  }
  g_autoptr(GBytes) v = cohort_store_get(store, verdict_key, seconds_left(deadline), error);
  if (v == NULL)
    return FALSE;
  gsize len = 0;
  const char *text = g_bytes_get_data(v, &len);
  if (len == 0 || text[0] == 'K')
    return TRUE;
  int code = text[0] == 'E'   ? COHORT_DIST_ERROR_ENV
             : text[0] == 'T' ? COHORT_DIST_ERROR_TIMEOUT
                              : COHORT_DIST_ERROR_FAILED;
  g_set_error(error, COHORT_DIST_ERROR, code, "%.*s", (int)(len - 1), text + 1);
  return FALSE;
}

/* Rank 0 creates the unique id and publishes it; the others wait for it. A rank 0 that
 * cannot create one publishes the reason instead, so the others fail at once. */
static gboolean exchange_id(CohortStore *store, const CohortDistEnv *env, gint64 instance,
                            ncclUniqueId *id, gint64 deadline, GError **error)
{
  char key[64];
  g_snprintf(key, sizeof key, "nccl/id/%" G_GINT64_FORMAT, instance);
  if (env->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) {
      g_autofree char *msg =
          g_strdup_printf("rank 0 could not create the NCCL unique id: %s", ncclGetErrorString(r));
      cohort_store_set(store, key, msg, strlen(msg), NULL);
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "%s", msg);
      return FALSE;
    }
    return cohort_store_set(store, key, id, sizeof *id, error);
  }
  g_autoptr(GBytes) b = cohort_store_get(store, key, seconds_left(deadline), error);
  if (b == NULL)
    return FALSE;
  gsize len = 0;
  const void *data = g_bytes_get_data(b, &len);
  if (len != sizeof *id) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "%.*s", (int)MIN(len, 4096),
                (const char *)data);
    return FALSE;
  }
  memcpy(id, data, sizeof *id);
  return TRUE;
}

CohortComm *cohort_comm_new_nccl(CohortStore *store, const CohortDistEnv *env, int device,
                                 double timeout_s, GError **error)
{
  if (store == NULL || env == NULL) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "the NCCL backend needs the rendezvous store and the rank's environment");
    return NULL;
  }
  double t = timeout_s > 0 ? timeout_s : 1800.0;
  gint64 deadline = g_get_monotonic_time() + (gint64)(t * G_USEC_PER_SEC);
  /* Each communicator of a job gets its own keys: ranks create communicators in the same
   * order, so each rank's own count names the same instance everywhere. */
  char key[64];
  g_snprintf(key, sizeof key, "nccl/instance/%d", env->rank);
  gint64 instance = 0;
  if (!cohort_store_add(store, key, 1, &instance, error))
    return NULL;
  g_autofree char *prefix = g_strdup_printf("nccl/%" G_GINT64_FORMAT "/", instance);

  NcclImpl *n = g_new0(NcclImpl, 1);
  g_mutex_init(&n->lock);
  n->device = device;
  n->timeout_s = t;
  char bus_id[64] = "", name[256] = "";
  g_autofree char *local_failure = open_device(n, device, bus_id, sizeof bus_id, name, sizeof name);
  if (local_failure != NULL)
    (void)cudaGetLastError(); /* the failed call's status would outlive it in this thread */
  g_autoptr(GError) inner = NULL;
  if (!check_gpus(store, env, prefix, local_failure, bus_id, device, name, deadline, &inner)) {
    g_set_error(error, COHORT_DIST_ERROR, inner->code, "NCCL setup on rank %d of %d: %s", env->rank,
                env->world_size, inner->message);
    nccl_free(n);
    return NULL;
  }
  ncclUniqueId id;
  if (!exchange_id(store, env, instance, &id, deadline, &inner)) {
    g_set_error(error, COHORT_DIST_ERROR, inner->code, "NCCL setup on rank %d of %d: %s", env->rank,
                env->world_size, inner->message);
    nccl_free(n);
    return NULL;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, env->world_size, id, env->rank, &config);
  gboolean ok = FALSE;
  if (r == ncclSuccess || r == ncclInProgress) {
    ok = comm != NULL && wait_done(comm, deadline, "ncclCommInitRankConfig", &inner);
  } else {
    g_set_error(&inner, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "ncclCommInitRankConfig: %s",
                ncclGetErrorString(r));
  }
  if (!ok) {
    if (comm != NULL)
      ncclCommAbort(comm);
    if (inner == NULL)
      g_set_error(&inner, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                  "ncclCommInitRankConfig gave no communicator");
    g_autofree char *when = inner->code == COHORT_DIST_ERROR_TIMEOUT
                                ? g_strdup_printf(" within %g s; a peer did not join", t)
                                : g_strdup("");
    g_set_error(error, COHORT_DIST_ERROR, inner->code,
                "rank %d could not create its NCCL communicator with %d peers (GPU %s)%s: %s",
                env->rank, env->world_size - 1, bus_id, when, inner->message);
    nccl_free(n);
    return NULL;
  }
  n->comm = comm;
  return cohort_comm_new_from_backend(&nccl_backend, n, env->rank, env->world_size, store, t);
}
