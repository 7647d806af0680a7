/* The collectives front end: checks, serialization, sequence numbers, the watchdog and the
 * heartbeat record, and error messages around a backend (comm-backend.h). */
#include "engine/distributed/comm-backend.h"
#include "engine/distributed/heartbeat.h"
#include "kernels/math-inline.h"

#include <string.h>

struct _CohortComm {
  const CohortCommBackend *backend;
  gpointer impl;
  int rank;
  int world_size;
  CohortStore *store; /* borrowed, may be NULL */
  double timeout_s;
  GMutex lock;         /* serializes collectives */
  guint64 seq;         /* collectives issued so far */
  GError *broken;      /* the first failure; later calls repeat it */
  gint aborted;        /* atomic */
  CohortWatchdog *wd;  /* the deadline of blocking backends; NULL for "local" */
  CohortHeartbeat *hb; /* where this rank is, for the others */
};

/* With a watchdog the backend's own timeout only backs it up: a collective may wait as long
 * as the ranks it waits for show progress (watchdog.h). */
#define BACKSTOP_MS ((gint64)7 * 24 * 3600 * 1000)

/* The label of this thread's collectives (cohort_comm_set_label). */
static __thread char thread_label[48];

void cohort_comm_set_label(const char *label)
{
  g_strlcpy(thread_label, label ? label : "", sizeof thread_label);
}

static void watchdog_fire(gpointer user)
{
  CohortComm *c = user;
  c->backend->abort(c->impl);
}

/* Every collective waits for rank 0 too: once its store has not answered for the timeout
 * (the heartbeat's request ran past its bound), none will end, so end this one now rather
 * than a full timeout after it began. */
static gboolean watchdog_check(gpointer user, GError **error)
{
  CohortComm *c = user;
  if (c->backend->check != NULL && !c->backend->check(c->impl, error))
    return FALSE;
  g_autoptr(GError) why = NULL;
  if (c->store != NULL && c->rank != 0 && cohort_store_is_broken(c->store, &why) &&
      g_error_matches(why, COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_PEER,
                "ended by the watchdog: rank 0 has not answered for %g s", c->timeout_s);
    return FALSE;
  }
  return TRUE;
}

CohortComm *cohort_comm_new_from_backend(const CohortCommBackend *backend, gpointer impl, int rank,
                                         int world_size, CohortStore *store, double timeout_s)
{
  CohortComm *c = g_new0(CohortComm, 1);
  c->backend = backend;
  c->impl = impl;
  c->rank = rank;
  c->world_size = world_size;
  c->store = store;
  c->timeout_s = timeout_s > 0 ? timeout_s : 1800.0;
  g_mutex_init(&c->lock);
  /* A backend that can be interrupted (abort) gets the watchdog; "local" never waits. */
  if (backend->abort != NULL) {
    /* NCCL's errors need a quick look; rank 0's silence is a matter of seconds. */
    CohortWatchdogHooks hooks = {.fire = watchdog_fire,
                                 .check = watchdog_check,
                                 .user = c,
                                 .check_interval_s = backend->check ? 0.05 : 0.5};
    c->wd = cohort_watchdog_new(&hooks);
  }
  c->hb = cohort_heartbeat_new(store, rank, world_size, c->wd, c->timeout_s);
  return c;
}

void cohort_comm_set_hang_report(CohortComm *comm, double report_s, CohortHangFunc func,
                                 gpointer user)
{
  cohort_heartbeat_set_report(comm->hb, report_s, func, user);
}

int cohort_comm_rank(const CohortComm *comm)
{
  return comm->rank;
}

int cohort_comm_world_size(const CohortComm *comm)
{
  return comm->world_size;
}

const char *cohort_comm_backend_name(const CohortComm *comm)
{
  return comm->backend->name;
}

double cohort_comm_timeout(const CohortComm *comm)
{
  return comm->timeout_s;
}

gboolean cohort_comm_backend_available(const char *name)
{
  if (g_strcmp0(name, "local") == 0)
    return TRUE;
#ifdef COHORT_HAVE_GLOO
  if (g_strcmp0(name, "gloo") == 0)
    return TRUE;
#endif
#ifdef COHORT_HAVE_NCCL
  if (g_strcmp0(name, "nccl") == 0)
    return TRUE;
#endif
  return FALSE;
}

#ifndef COHORT_HAVE_NCCL
CohortComm *cohort_comm_new_nccl(CohortStore *store, const CohortDistEnv *env, int device,
                                 double timeout_s, GError **error)
{
  (void)store, (void)env, (void)device, (void)timeout_s;
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
              "this build of Cohort has no NCCL backend (built without CUDA or NCCL); use the "
              "gloo backend, or rebuild with the CUDA toolkit and NCCL installed");
  return NULL;
}
#endif

typedef enum {
  OP_ALL_REDUCE,
  OP_BROADCAST,
  OP_ALL_GATHER,
  OP_BARRIER,
  OP_REDUCE_SCATTER,
  OP_ALL_GATHER_V,
} CollectiveKind;

static const char *kind_name[] = {"all_reduce", "broadcast",      "all_gather",
                                  "barrier",    "reduce_scatter", "all_gather_v"};

static const char *dtype_name(CohortDtype dtype)
{
  switch (dtype) {
  case COHORT_DTYPE_F32:
    return "float32";
  case COHORT_DTYPE_F64:
    return "float64";
  case COHORT_DTYPE_BF16:
    return "bfloat16";
  }
  return "?";
}

typedef struct {
  CollectiveKind kind;
  void *buf;
  const void *send;
  gsize count; /* elements for all_reduce, bytes otherwise */
  CohortDtype dtype;
  CohortReduceOp op;
  int root;
  gpointer event;      /* all_reduce_after: a cudaEvent_t, or NULL */
  void *recv;          /* reduce_scatter's output */
  const gsize *counts; /* reduce_scatter (values) and all_gather_v (bytes): one per rank */
} Collective;

/* AVG for backends that only sum: `count` values of `dtype` in host memory divided by the
 * world size. */
static void divide(CohortComm *c, void *buf, gsize count, CohortDtype dtype)
{
  if (c->world_size == 1)
    return;
  if (dtype == COHORT_DTYPE_F32) {
    float *f = buf;
    /* Divide rather than multiply by 1/N, which is exact only for powers of two. */
    for (gsize i = 0; i < count; i++)
      f[i] = f[i] / (float)c->world_size;
  } else if (dtype == COHORT_DTYPE_BF16) {
    guint16 *h = buf;
    for (gsize i = 0; i < count; i++)
      h[i] = cohort_f32_to_bf16(cohort_bf16_to_f32(h[i]) / (float)c->world_size);
  } else {
    double *d = buf;
    for (gsize i = 0; i < count; i++)
      d[i] = d[i] / (double)c->world_size;
  }
}

static gsize total_of(const CohortComm *c, const gsize *counts)
{
  gsize total = 0;
  for (int r = 0; r < c->world_size; r++)
    total += counts[r];
  return total;
}

static gboolean run(CohortComm *c, const Collective *op, double timeout_s, GError **error)
{
  double t = timeout_s > 0 ? timeout_s : c->timeout_s;
  gint64 timeout_ms = MAX((gint64)(t * 1000.0), 1);
  g_mutex_lock(&c->lock);
  if (c->broken != NULL) {
    g_set_error(error, c->broken->domain, c->broken->code,
                "%s called on a broken communicator; the first failure: %s", kind_name[op->kind],
                c->broken->message);
    g_mutex_unlock(&c->lock);
    return FALSE;
  }
  if (g_atomic_int_get(&c->aborted)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ABORTED,
                "%s called on an aborted communicator", kind_name[op->kind]);
    g_mutex_unlock(&c->lock);
    return FALSE;
  }
  guint64 seq = ++c->seq;
  /* In memory only: the heartbeat thread publishes it (no store round trip here). */
  cohort_heartbeat_enter(c->hb, kind_name[op->kind], seq, thread_label, t);
  if (c->wd != NULL) {
    cohort_watchdog_begin(c->wd, t);
    timeout_ms = BACKSTOP_MS;
  }
  GError *local = NULL;
  gboolean ok = FALSE;
  switch (op->kind) {
  case OP_ALL_REDUCE:
    if (op->event != NULL && c->backend->all_reduce_after != NULL)
      ok = c->backend->all_reduce_after(c->impl, op->buf, op->count, op->dtype, op->op, op->event,
                                        timeout_ms, &local);
    else
      ok = c->backend->all_reduce(c->impl, op->buf, op->count, op->dtype, op->op, timeout_ms,
                                  &local);
    if (ok && op->op == COHORT_REDUCE_AVG && !c->backend->reduces_avg)
      divide(c, op->buf, op->count, op->dtype);
    break;
  case OP_REDUCE_SCATTER:
    ok = c->backend->reduce_scatter(c->impl, op->buf, op->recv, op->counts, op->dtype,
                                    c->backend->reduces_avg ? op->op : COHORT_REDUCE_SUM,
                                    timeout_ms, &local);
    if (ok && op->op == COHORT_REDUCE_AVG && !c->backend->reduces_avg)
      divide(c, op->recv, op->counts[c->rank], op->dtype);
    break;
  case OP_ALL_GATHER_V:
    ok = c->backend->all_gather_v(c->impl, op->buf, op->counts, timeout_ms, &local);
    break;
  case OP_BROADCAST:
    ok = c->backend->broadcast(c->impl, op->buf, op->count, op->root, timeout_ms, &local);
    break;
  case OP_ALL_GATHER:
    ok = c->backend->all_gather(c->impl, op->send, op->count, op->buf, timeout_ms, &local);
    break;
  case OP_BARRIER:
    ok = c->backend->barrier(c->impl, timeout_ms, &local);
    break;
  }
  double waited = 0;
  GError *why = NULL;
  CohortWatchdogVerdict verdict =
      c->wd != NULL ? cohort_watchdog_end(c->wd, &waited, &why) : COHORT_WATCHDOG_OK;
  cohort_heartbeat_leave(c->hb);
  if (verdict != COHORT_WATCHDOG_OK) {
    /* The watchdog ended the call: its reason, not the interrupted backend's. */
    ok = FALSE;
    g_clear_error(&local);
    local = verdict == COHORT_WATCHDOG_TIMEOUT
                ? g_error_new(COHORT_DIST_ERROR, COHORT_DIST_ERROR_TIMEOUT,
                              "no progress from the ranks it waits for in %g s", t)
                : why;
    why = verdict == COHORT_WATCHDOG_TIMEOUT ? why : NULL;
  }
  g_clear_error(&why);
  if (!ok) {
    int code = g_atomic_int_get(&c->aborted) ? COHORT_DIST_ERROR_ABORTED
               : local != NULL && local->code == COHORT_DIST_ERROR_TIMEOUT
                   ? COHORT_DIST_ERROR_TIMEOUT
                   : COHORT_DIST_ERROR_PEER;
    g_autofree char *missing = cohort_heartbeat_describe_missing(c->hb, seq);
    g_autofree char *what = NULL;
    if (op->kind == OP_ALL_REDUCE)
      what = g_strdup_printf("%s, %" G_GSIZE_FORMAT " elements", dtype_name(op->dtype), op->count);
    else if (op->kind == OP_REDUCE_SCATTER)
      what = g_strdup_printf("%s, %" G_GSIZE_FORMAT " elements", dtype_name(op->dtype),
                             total_of(c, op->counts));
    else if (op->kind == OP_ALL_GATHER_V)
      what = g_strdup_printf("%" G_GSIZE_FORMAT " bytes", total_of(c, op->counts));
    else if (op->kind == OP_BARRIER)
      what = g_strdup("");
    else
      what = g_strdup_printf("%" G_GSIZE_FORMAT " bytes", op->count);
    g_autofree char *tail =
        code == COHORT_DIST_ERROR_TIMEOUT
            ? g_strdup_printf("timed out after %.0f s (%g s without progress)%s", MAX(waited, t), t,
                              missing)
            : g_strdup_printf("failed%s", missing);
    c->broken = g_error_new(
        COHORT_DIST_ERROR, code, "%s #%" G_GUINT64_FORMAT "%s%s%s on rank %d %s (%s backend: %s)",
        kind_name[op->kind], seq, what[0] ? " (" : "", what, what[0] ? ")" : "", c->rank, tail,
        c->backend->name, local ? local->message : "unknown error");
    g_propagate_error(error, g_error_copy(c->broken));
  }
  g_clear_error(&local);
  g_mutex_unlock(&c->lock);
  return ok;
}

static gboolean check_comm(CohortComm *c, const char *what, GError **error)
{
  if (c == NULL) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID, "%s: no communicator", what);
    return FALSE;
  }
  return TRUE;
}

/* Every typed all-reduce; `event` NULL orders it after everything queued so far. */
static gboolean all_reduce(CohortComm *comm, void *buf, gsize count, CohortDtype dtype,
                           CohortReduceOp op, gpointer event, double timeout_s, GError **error)
{
  if (!check_comm(comm, "all_reduce", error))
    return FALSE;
  Collective c = {
      .kind = OP_ALL_REDUCE, .buf = buf, .count = count, .dtype = dtype, .op = op, .event = event};
  return run(comm, &c, timeout_s, error);
}

gboolean cohort_comm_all_reduce_f32(CohortComm *comm, float *buf, gsize count, CohortReduceOp op,
                                    double timeout_s, GError **error)
{
  return all_reduce(comm, buf, count, COHORT_DTYPE_F32, op, NULL, timeout_s, error);
}

gboolean cohort_comm_all_reduce_f32_after(CohortComm *comm, float *buf, gsize count,
                                          CohortReduceOp op, gpointer cuda_event, double timeout_s,
                                          GError **error)
{
  return all_reduce(comm, buf, count, COHORT_DTYPE_F32, op, cuda_event, timeout_s, error);
}

gboolean cohort_comm_all_reduce_f64(CohortComm *comm, double *buf, gsize count, CohortReduceOp op,
                                    double timeout_s, GError **error)
{
  return all_reduce(comm, buf, count, COHORT_DTYPE_F64, op, NULL, timeout_s, error);
}

gboolean cohort_comm_all_reduce_bf16(CohortComm *comm, guint16 *buf, gsize count, CohortReduceOp op,
                                     double timeout_s, GError **error)
{
  return all_reduce(comm, buf, count, COHORT_DTYPE_BF16, op, NULL, timeout_s, error);
}

gboolean cohort_comm_all_reduce_bf16_after(CohortComm *comm, guint16 *buf, gsize count,
                                           CohortReduceOp op, gpointer cuda_event, double timeout_s,
                                           GError **error)
{
  return all_reduce(comm, buf, count, COHORT_DTYPE_BF16, op, cuda_event, timeout_s, error);
}

gboolean cohort_comm_broadcast(CohortComm *comm, void *buf, gsize nbytes, int root,
                               double timeout_s, GError **error)
{
  if (!check_comm(comm, "broadcast", error))
    return FALSE;
  if (root < 0 || root >= comm->world_size) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "broadcast root %d is not a rank; expected 0 to %d", root, comm->world_size - 1);
    return FALSE;
  }
  Collective c = {.kind = OP_BROADCAST, .buf = buf, .count = nbytes, .root = root};
  return run(comm, &c, timeout_s, error);
}

gboolean cohort_comm_all_gather(CohortComm *comm, const void *send, gsize nbytes, void *recv,
                                double timeout_s, GError **error)
{
  if (!check_comm(comm, "all_gather", error))
    return FALSE;
  const char *s = send, *r = recv;
  gsize total = nbytes * (gsize)comm->world_size;
  if (nbytes > 0 && (send == NULL || recv == NULL || (s < r + total && r < s + nbytes))) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "all_gather needs a send buffer and a separate receive buffer of %" G_GSIZE_FORMAT
                " bytes",
                total);
    return FALSE;
  }
  Collective c = {.kind = OP_ALL_GATHER, .buf = recv, .send = send, .count = nbytes};
  return run(comm, &c, timeout_s, error);
}

gboolean cohort_comm_all_gather_inplace(CohortComm *comm, void *buf, gsize nbytes, double timeout_s,
                                        GError **error)
{
  if (!check_comm(comm, "all_gather", error))
    return FALSE;
  if (nbytes > 0 && buf == NULL) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "all_gather in place needs a buffer of %" G_GSIZE_FORMAT " bytes",
                nbytes * (gsize)comm->world_size);
    return FALSE;
  }
  char *b = buf;
  Collective c = {.kind = OP_ALL_GATHER,
                  .buf = buf,
                  .send = b ? b + nbytes * (gsize)comm->rank : NULL,
                  .count = nbytes};
  return run(comm, &c, timeout_s, error);
}

static gboolean reduce_scatter(CohortComm *comm, void *send, void *recv, const gsize *counts,
                               CohortDtype dtype, CohortReduceOp op, double timeout_s,
                               GError **error)
{
  if (!check_comm(comm, "reduce_scatter", error))
    return FALSE;
  if (counts == NULL || (total_of(comm, counts) > 0 && send == NULL) ||
      (counts[comm->rank] > 0 && recv == NULL)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "reduce_scatter needs a count per rank, a send buffer and a receive buffer");
    return FALSE;
  }
  Collective c = {.kind = OP_REDUCE_SCATTER,
                  .buf = send,
                  .recv = recv,
                  .counts = counts,
                  .dtype = dtype,
                  .op = op};
  return run(comm, &c, timeout_s, error);
}

gboolean cohort_comm_reduce_scatter_f32(CohortComm *comm, float *send, float *recv,
                                        const gsize *counts, CohortReduceOp op, double timeout_s,
                                        GError **error)
{
  return reduce_scatter(comm, send, recv, counts, COHORT_DTYPE_F32, op, timeout_s, error);
}

gboolean cohort_comm_reduce_scatter_bf16(CohortComm *comm, guint16 *send, guint16 *recv,
                                         const gsize *counts, CohortReduceOp op, double timeout_s,
                                         GError **error)
{
  return reduce_scatter(comm, send, recv, counts, COHORT_DTYPE_BF16, op, timeout_s, error);
}

gboolean cohort_comm_all_gather_v(CohortComm *comm, void *buf, const gsize *nbytes,
                                  double timeout_s, GError **error)
{
  if (!check_comm(comm, "all_gather_v", error))
    return FALSE;
  if (nbytes == NULL || (total_of(comm, nbytes) > 0 && buf == NULL)) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "all_gather_v needs a byte count per rank and a buffer");
    return FALSE;
  }
  Collective c = {.kind = OP_ALL_GATHER_V, .buf = buf, .counts = nbytes};
  return run(comm, &c, timeout_s, error);
}

gboolean cohort_comm_barrier(CohortComm *comm, double timeout_s, GError **error)
{
  if (!check_comm(comm, "barrier", error))
    return FALSE;
  Collective c = {.kind = OP_BARRIER};
  return run(comm, &c, timeout_s, error);
}

void cohort_comm_abort(CohortComm *comm, const char *reason)
{
  if (comm == NULL || !g_atomic_int_compare_and_exchange(&comm->aborted, 0, 1))
    return;
  if (comm->store != NULL) {
    char key[64];
    g_snprintf(key, sizeof key, "comm/abort/%d", comm->rank);
    const char *r = reason ? reason : "no reason given";
    /* For the peers' messages only: not worth more than a moment when rank 0 is silent. */
    cohort_store_set_within(comm->store, key, r, MIN(strlen(r), 4096), 3.0, NULL);
  }
  if (comm->backend->abort != NULL)
    comm->backend->abort(comm->impl);
}

void cohort_comm_free(CohortComm *comm)
{
  if (comm == NULL)
    return;
  /* The heartbeat first: its thread uses the store, which may go away after this. */
  cohort_heartbeat_free(comm->hb);
  cohort_watchdog_free(comm->wd);
  comm->backend->free(comm->impl);
  g_clear_error(&comm->broken);
  g_mutex_clear(&comm->lock);
  g_free(comm);
}
