/* The probe's measurements on every rank (probe.h); the forecast and the output are in
 * probe-report.c. */
#include "engine/train/probe-private.h"

#include <math.h>
#include <string.h>

#include "engine/base/error.h"

#include "engine/distributed/reducer.h"
#include "engine/launch/launch-plan.h"
#include "kernels/backend.h"

/* Timed repetitions: at least MIN_REPS after a warm-up, more while they take less than
 * REPS_BUDGET_S, at most MAX_REPS. */
#define MIN_REPS      5
#define MAX_REPS      20
#define REPS_BUDGET_S 3.0

static int compare_doubles(gconstpointer a, gconstpointer b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, (int (*)(const void *, const void *))compare_doubles);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Waits for the device's queued work (a download waits for it), so wall time measures it. */
static void device_sync(CohortRankRun *r)
{
  if (r->be != cohort_backend_cpu()) {
    float x;
    r->be->download(&x, r->model->grads, sizeof x);
  }
}

/* ---- compute ---- */

typedef struct {
  GArray *plan;       /* CohortBucketRange, in launch order */
  size_t *ready;      /* floats reported final per bucket, this pass */
  gint64 *ready_us;   /* when each bucket became final */
  gint64 backward_us; /* when backward began */
} ReadyLog;

static void on_grad_ready(size_t offset, size_t count, gpointer data)
{
  ReadyLog *log = data;
  size_t end = offset + count;
  gint64 now = g_get_monotonic_time();
  for (guint i = 0; i < log->plan->len; i++) {
    const CohortBucketRange *b = &g_array_index(log->plan, CohortBucketRange, i);
    size_t lo = MAX(offset, b->offset), hi = MIN(end, b->offset + b->count);
    if (lo < hi && (log->ready[i] += hi - lo) >= b->count && log->ready_us[i] == 0)
      log->ready_us[i] = now;
  }
}

/* SyncBatchNorm's collectives while compute is timed: no communication (the ranks compute
 * apart), counted, with what every rank would get if all held this rank's values. */
typedef struct {
  int world;
  int gathers, reduces;
  double bytes;
} SyncCount;

static gboolean count_gather(gpointer data, const float *send, size_t count, float *recv)
{
  SyncCount *s = data;
  for (int r = 0; r < s->world; r++)
    memcpy(recv + (size_t)r * count, send, count * sizeof(float));
  s->gathers++;
  s->bytes += (double)count * sizeof(float);
  return TRUE;
}

static gboolean count_reduce(gpointer data, float *buf, size_t count)
{
  SyncCount *s = data;
  for (size_t i = 0; i < count; i++)
    buf[i] *= (float)s->world;
  s->reduces++;
  s->bytes += (double)count * sizeof(float);
  return TRUE;
}

/* The trainer's micro-step on the loaded micro-batch (engine/train/trainer-run.h). */
static void forward(CohortRankRun *r)
{
  double parts[COHORT_DISTILL_N_PARTS];
  cohort_rank_run_forward(r, parts);
}

static void backward(CohortRankRun *r)
{
  cohort_rank_run_backward(r, 1.0f / (float)r->accum);
}

/* One forward and backward of `batch` examples: their seconds, the data wait, and each
 * bucket's point in backward. */
static gboolean pass(CohortRankRun *r, ReadyLog *log, int batch, gint64 micro, double *fwd,
                     double *bwd, double *data, double *ready, GError **error)
{
  gint64 waited = 0;
  if (!cohort_rank_run_load_micro_batch(r, 0, micro % MAX(r->steps_per_epoch * r->accum, 1),
                                        &waited, error))
    return FALSE;
  *data = (double)waited / G_USEC_PER_SEC;
  int full = r->step_batch->B;
  r->step_batch->B = batch;
  cohort_model_zero_grad(r->model);
  memset(log->ready, 0, log->plan->len * sizeof *log->ready);
  memset(log->ready_us, 0, log->plan->len * sizeof *log->ready_us);
  device_sync(r);
  gint64 t0 = g_get_monotonic_time();
  forward(r);
  device_sync(r);
  gint64 t1 = g_get_monotonic_time();
  log->backward_us = t1;
  backward(r);
  device_sync(r);
  gint64 t2 = g_get_monotonic_time();
  r->step_batch->B = full;
  *fwd = (double)(t1 - t0) / G_USEC_PER_SEC;
  *bwd = (double)(t2 - t1) / G_USEC_PER_SEC;
  /* On a GPU the hook sees backward being queued, not run: the share of the queueing time is
   * the best this side of the device can tell. */
  for (guint i = 0; i < log->plan->len; i++) {
    gint64 at = log->ready_us[i] ? log->ready_us[i] : t2;
    ready[i] = t2 > t1 ? CLAMP((double)(at - t1) / (double)(t2 - t1), 0, 1) : 1;
  }
  return cohort_device_check(&r->dev, error);
}

/* Each pass's forward and backward, the ranks' maximum: in training every step waits for the
 * slowest rank, so the step's compute is the maximum of each step, not of the ranks' medians. */
static gboolean slowest_per_pass(CohortRankRun *r, double *f, double *b, int n, GError **error)
{
  int world = r->opts->world_size;
  g_autofree double *mine = g_new(double, 2 * (gsize)n);
  g_autofree double *all = g_new(double, 2 * (gsize)n * world);
  memcpy(mine, f, (gsize)n * sizeof(double));
  memcpy(mine + n, b, (gsize)n * sizeof(double));
  if (!cohort_train_dist_all_gather(r->dist, mine, 2 * (gsize)n * sizeof(double), all,
                                    "probe passes", error))
    return FALSE;
  for (int q = 0; q < world; q++)
    for (int k = 0; k < n; k++) {
      f[k] = MAX(f[k], all[(gsize)q * 2 * n + k]);
      b[k] = MAX(b[k], all[(gsize)q * 2 * n + n + k]);
    }
  return TRUE;
}

/* How many timed passes fit the budget, the same number on every rank: from the ranks' mean
 * warm-up pass of `warm_s`. 0 with `error` when the ranks could not agree. */
static int reps_for(CohortRankRun *r, double warm_s, GError **error)
{
  double each[1] = {warm_s};
  if (!cohort_train_dist_sum(r->dist, each, 1, error))
    return 0;
  each[0] = MAX(each[0] / r->opts->world_size, 1e-6);
  return CLAMP((int)(REPS_BUDGET_S / each[0]), MIN_REPS, MAX_REPS);
}

/* Medians of repeated passes at `batch`, the ranks in step as in training (a barrier before
 * each pass, the slowest rank's time of each). `ready` (n_buckets) gets this rank's medians of
 * the buckets' points. */
static gboolean time_passes(CohortRankRun *r, ReadyLog *log, int batch, double *fwd, double *bwd,
                            double *data, double *ready, GError **error)
{
  guint nb = log->plan->len;
  double f[MAX_REPS], b[MAX_REPS], d[MAX_REPS];
  g_autofree double *rd = g_new0(double, (gsize)MAX_REPS *MAX(nb, 1));
  double wf, wb, dummy;
  g_autofree double *warm = g_new0(double, MAX(nb, 1));
  if (!pass(r, log, batch, 0, &wf, &wb, &dummy, warm, error))
    return FALSE;
  int n = reps_for(r, wf + wb, error);
  if (n == 0)
    return FALSE;
  for (int k = 0; k < n; k++)
    if (!cohort_train_dist_barrier(r->dist, "probe pass", error) ||
        !pass(r, log, batch, k + 1, &f[k], &b[k], &d[k], rd + (gsize)k * nb, error))
      return FALSE;
  if (!slowest_per_pass(r, f, b, n, error))
    return FALSE;
  *fwd = median(f, n);
  *bwd = median(b, n);
  *data = median(d, n);
  for (guint i = 0; i < nb; i++) {
    double col[MAX_REPS];
    for (int k = 0; k < n; k++)
      col[k] = rd[(gsize)k * nb + i];
    ready[i] = median(col, n);
  }
  return TRUE;
}

/* The optimizer step (clipping, the update, EMA) on the gradients of the last pass. */
static double time_optimizer(CohortRankRun *r)
{
  CohortModel *m = r->model;
  const CohortConfig *cfg = r->cfg;
  double t[MIN_REPS];
  for (int k = 0; k < MIN_REPS; k++) {
    device_sync(r);
    gint64 t0 = g_get_monotonic_time();
    /* Only the learning part has gradients (finetune: lora or frozen). */
    cohort_clip_grad_norm_on(r->be, m->grads, m->n_trainable, cfg->grad_clip);
    cohort_optimizer_step(r->opt, m->params, m->grads, m->train, m->n_train, cfg,
                          cfg->learning_rate, k + 1);
    if (r->ema)
      cohort_ema_update_on(r->be, r->ema, m->params, m->n_params, cfg->ema_decay);
    device_sync(r);
    t[k] = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  }
  return median(t, MIN_REPS);
}

gboolean cohort_probe_measure_compute(CohortRankRun *r, GArray *plan, ProbeCompute *out,
                                      GError **error)
{
  CohortModel *m = r->model;
  guint nb = plan->len;
  ReadyLog log = {
      .plan = plan, .ready = g_new0(size_t, MAX(nb, 1)), .ready_us = g_new0(gint64, MAX(nb, 1))};
  cohort_model_set_grad_ready_func(m, on_grad_ready, &log);
  /* The model keeps the comm it is given: both live as long as the process. */
  static SyncCount sync;
  static CohortModelComm counting;
  sync = (SyncCount){.world = r->opts->world_size};
  counting = (CohortModelComm){.world_size = r->opts->world_size,
                               .all_gather = count_gather,
                               .all_reduce_sum = count_reduce,
                               .data = &sync};
  gboolean counted = r->cfg->sync_batchnorm && r->opts->world_size > 1 && m->ops->set_comm &&
                     cohort_model_set_comm(m, &counting, NULL);
  out->ready = g_new0(double, MAX(nb, 1));
  g_autofree double *half_ready = g_new0(double, MAX(nb, 1));
  double dummy;
  /* One pass counts SyncBatchNorm's collectives; the timed ones follow. */
  gboolean ok = pass(r, &log, r->B, 0, &dummy, &dummy, &dummy, out->ready, error);
  if (ok && counted) {
    out->syncbn_gathers = sync.gathers;
    out->syncbn_reduces = sync.reduces;
    out->syncbn_bytes =
        sync.gathers + sync.reduces > 0 ? sync.bytes / (sync.gathers + sync.reduces) : 0;
  }
  ok = ok && time_passes(r, &log, r->B, &out->fwd_s, &out->bwd_s, &out->data_s, out->ready, error);
  out->half_batch = r->B / 2;
  double half_data = 0;
  if (ok && out->half_batch >= 1)
    ok = time_passes(r, &log, out->half_batch, &out->fwd_half_s, &out->bwd_half_s, &half_data,
                     half_ready, error);
  if (ok)
    out->optimizer_s = time_optimizer(r);
  cohort_model_set_grad_ready_func(m, NULL, NULL);
  g_free(log.ready);
  g_free(log.ready_us);
  return ok;
}

/* ---- passes as training runs them ---- */

/* One forward and backward of the configured batch with the run's reducer attached: the buckets
 * are all-reduced on its communication thread while backward runs, and the pass ends when the
 * last is done. Its seconds. */
static gboolean synced_pass(CohortRankRun *r, gint64 micro, double *seconds, GError **error)
{
  gint64 waited = 0;
  if (!cohort_rank_run_load_micro_batch(r, 0, micro % MAX(r->steps_per_epoch * r->accum, 1),
                                        &waited, error))
    return FALSE;
  cohort_model_zero_grad(r->model);
  device_sync(r);
  gint64 t0 = g_get_monotonic_time();
  /* As training's micro-step: SyncBatchNorm's forward collectives count from here. */
  cohort_train_dist_begin_backward(r->dist, TRUE);
  forward(r);
  backward(r);
  if (!cohort_train_dist_end_backward(r->dist, error))
    return FALSE;
  device_sync(r);
  *seconds = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  return cohort_device_check(&r->dev, error);
}

gboolean cohort_probe_measure_synced(CohortRankRun *r, double bucket_cap_mb, double *pass_s,
                                     GError **error)
{
  /* From here on the model's gradient hook is the reducer's, and SyncBatchNorm's collectives
   * are real: the probe measures nothing apart after this. */
  cohort_train_dist_attach(r->dist, r->model, bucket_cap_mb);
  double warm, t[MAX_REPS], zero[MAX_REPS] = {0};
  if (!synced_pass(r, 0, &warm, error))
    return FALSE;
  int n = reps_for(r, warm, error);
  if (n == 0)
    return FALSE;
  for (int k = 0; k < n; k++)
    if (!cohort_train_dist_barrier(r->dist, "probe synced pass", error) ||
        !synced_pass(r, k + 1, &t[k], error))
      return FALSE;
  if (!slowest_per_pass(r, t, zero, n, error))
    return FALSE;
  *pass_s = median(t, n);
  return TRUE;
}

/* ---- collectives ---- */

/* Measured sizes stop here; the fitted line carries larger ones. */
#define MAX_MEASURED_BYTES ((double)(64u << 20))
/* Each size's repetitions, together, take about this long (between MIN_REPS and MAX_REPS). */
#define SIZE_BUDGET_S 1.0

typedef struct {
  CohortRankRun *r;
  CohortComm *comm;
  gboolean device; /* "nccl": buffers in device memory */
  void *buf;
  double cap; /* bytes */
} ProbeComm;

static gboolean op_all_reduce(ProbeComm *p, double bytes, GError **error)
{
  /* The reducer's calls: bf16 sums, or fp32 averages. */
  if (p->r->cfg->reduce_precision == COHORT_REDUCE_BF16)
    return cohort_comm_all_reduce_bf16(p->comm, p->buf, MAX((gsize)(bytes / 2), 1),
                                       COHORT_REDUCE_SUM, 0, error);
  return cohort_comm_all_reduce_f32(p->comm, p->buf, MAX((gsize)(bytes / 4), 1), COHORT_REDUCE_AVG,
                                    0, error);
}

static gboolean op_all_gather(ProbeComm *p, double bytes, GError **error)
{
  int world = p->r->opts->world_size;
  return cohort_comm_all_gather_inplace(p->comm, p->buf, MAX((gsize)(bytes / world), 1), 0, error);
}

static gboolean op_broadcast(ProbeComm *p, double bytes, GError **error)
{
  return cohort_comm_broadcast(p->comm, p->buf, MAX((gsize)bytes, 1), 0, 0, error);
}

/* The collectives a run uses, each with the sizes to time. A collective that comm.h gains (ZeRO
 * 2/3's reduce-scatter) is one more row here. */
typedef struct {
  const char *name;
  CohortCollectiveShape shape;
  gboolean (*run)(ProbeComm *p, double bytes, GError **error);
} ProbeKind;

static const ProbeKind kinds[] = {
    {"all_reduce", COHORT_COLLECTIVE_ALL_REDUCE, op_all_reduce},
    {"all_gather", COHORT_COLLECTIVE_ALL_GATHER, op_all_gather},
    {"broadcast", COHORT_COLLECTIVE_BROADCAST, op_broadcast},
};

/* The median seconds of `kind` at `bytes`, every rank timing the same repetitions. */
static gboolean time_size(ProbeComm *p, const ProbeKind *kind, double bytes, double *seconds,
                          GError **error)
{
  CohortComm *c = p->comm;
  cohort_comm_set_label("probe");
  /* A warm-up, whose time (the ranks' mean) sets how many repetitions fit the budget. */
  gint64 t0 = g_get_monotonic_time();
  if (!cohort_comm_barrier(c, 0, error) || !kind->run(p, bytes, error))
    return FALSE;
  double warm[1] = {(double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC};
  if (!cohort_train_dist_sum(p->r->dist, warm, 1, error))
    return FALSE;
  double each = MAX(warm[0] / p->r->opts->world_size, 1e-6);
  int reps = CLAMP((int)(SIZE_BUDGET_S / each), MIN_REPS, MAX_REPS);
  double t[MAX_REPS];
  for (int k = 0; k < reps; k++) {
    /* The barrier lines the ranks up, so each repetition times the collective, not a late
     * rank. */
    if (!cohort_comm_barrier(c, 0, error))
      return FALSE;
    gint64 a = g_get_monotonic_time();
    if (!kind->run(p, bytes, error))
      return FALSE;
    t[k] = (double)(g_get_monotonic_time() - a) / G_USEC_PER_SEC;
  }
  *seconds = median(t, reps);
  return TRUE;
}

/* Adds `bytes` to `sizes` unless one within 10 % is there. */
static void add_size(double *sizes, int *n, int cap, double bytes)
{
  bytes = MIN(MAX(bytes, 8), MAX_MEASURED_BYTES);
  for (int i = 0; i < *n; i++)
    if (fabs(sizes[i] - bytes) <= 0.1 * MAX(sizes[i], bytes))
      return;
  if (*n < cap)
    sizes[(*n)++] = bytes;
}

int cohort_probe_measure_collectives(CohortRankRun *r, const double *bucket_bytes, guint n_buckets,
                                     double buffer_bytes, double zero_bytes,
                                     ProbeCollective out[PROBE_MAX_COLLECTIVES], GError **error)
{
  int world = r->opts->world_size;
  gboolean gather = (r->cfg->sync_batchnorm && r->model->n_buffers > 0) || r->zero != NULL;
  gboolean bcast = buffer_bytes > 0;
  ProbeComm p = {.r = r,
                 .comm = r->opts->comm,
                 .device = strcmp(cohort_comm_backend_name(r->opts->comm), "nccl") == 0};
  /* Sizes per kind: the run's own, and small ones, which fix the line's latency. */
  double sizes[G_N_ELEMENTS(kinds)][8];
  int n_sizes[G_N_ELEMENTS(kinds)] = {0};
  /* 2 MiB: a point past any link's burst allowance, so the line's slope is the link's. */
  add_size(sizes[0], &n_sizes[0], 8, 32);
  add_size(sizes[0], &n_sizes[0], 8, 64 << 10);
  add_size(sizes[0], &n_sizes[0], 8, 2 << 20);
  for (guint i = 0; i < n_buckets; i++)
    add_size(sizes[0], &n_sizes[0], 8, bucket_bytes[i]);
  if (gather) {
    add_size(sizes[1], &n_sizes[1], 8, 256.0 * world);
    add_size(sizes[1], &n_sizes[1], 8, (double)(64 << 10) * world);
    if (zero_bytes > 0)
      add_size(sizes[1], &n_sizes[1], 8, zero_bytes);
  }
  if (bcast) {
    add_size(sizes[2], &n_sizes[2], 8, 32);
    add_size(sizes[2], &n_sizes[2], 8, 64 << 10);
    add_size(sizes[2], &n_sizes[2], 8, buffer_bytes);
  }
  for (guint k = 0; k < G_N_ELEMENTS(kinds); k++)
    for (int i = 0; i < n_sizes[k]; i++)
      p.cap = MAX(p.cap, sizes[k][i]);
  gsize cap = (gsize)p.cap + 64 * (gsize)world;
  p.buf = p.device ? r->be->alloc(cap) : g_malloc0(cap);
  if (p.buf == NULL) {
    cohort_fail(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "probe: out of %s memory for a buffer of %zu bytes", r->be->name, cap);
    return -1;
  }
  int n = 0;
  gboolean ok = TRUE;
  for (guint k = 0; ok && k < G_N_ELEMENTS(kinds); k++) {
    if (n_sizes[k] == 0)
      continue;
    ProbeCollective *pc = &out[n++];
    *pc = (ProbeCollective){.name = kinds[k].name, .shape = kinds[k].shape};
    for (int i = 0; ok && i < n_sizes[k]; i++) {
      pc->bytes[pc->n] = sizes[k][i];
      ok = time_size(&p, &kinds[k], sizes[k][i], &pc->seconds[pc->n], error);
      pc->n++;
    }
    if (ok && !cohort_alpha_beta_fit(pc->bytes, pc->seconds, pc->n, &pc->fit))
      pc->fit = (CohortAlphaBeta){.alpha_s = pc->seconds[0]};
  }
  if (p.device)
    r->be->free(p.buf);
  else
    g_free(p.buf);
  return ok ? n : -1;
}
