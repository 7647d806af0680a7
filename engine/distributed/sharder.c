/* ZeRO stages 2 and 3 at run time (see sharder.h). */
#include "engine/distributed/sharder.h"

#include <string.h>

#include "engine/distributed/shard-device.h"
#include "kernels/backend.h"

typedef enum { ITEM_REDUCE, ITEM_GATHER, ITEM_JOB, ITEM_QUIT } ItemKind;

/* Reduce-scatters queued and not done before backward waits for the oldest: a unit's
 * gradients hold memory until theirs is done, so this bounds them when the network is slower
 * than backward (the memory plan counts as many). */
#define MAX_PENDING_REDUCES COHORT_ZERO_PENDING_REDUCES

typedef struct {
  ItemKind kind;
  guint unit;
  CohortReducerJob job;
  gpointer data;
  gboolean done; /* under the lock */
  gboolean ok;
  GError *error;
} Item;

typedef struct {
  size_t ready;      /* gradient floats reported final in this pass */
  gboolean launched; /* its reduce-scatter is queued in this pass */
  gboolean gathered; /* stage 3: its gather is queued (or done) and it is not let go yet */
  int users;         /* begins without their end */
  Item reduce, gather;
} Unit;

struct CohortSharder {
  CohortComm *comm;
  const CohortShardPlan *plan;
  int stage;
  const CohortBackend *be;
  CohortShardDevice *dev; /* a device's memory (shard-device.h); NULL: host memory */
  GError *hook_error;     /* the first failure in a hook (a commit), reported by finish */
  float *params, *grads, *grad_shard;
  const float *source; /* stage 3: this rank's pieces to gather from */
  gboolean bf16;
  gboolean accumulate;
  Unit *units;
  guint next_launch; /* units go out from the last (highest index) down */
  GQueue pending;    /* of Item*: the reduce-scatters queued, oldest first */
  gsize *counts;     /* scratch: one count per rank */

  GThread *thread;
  GAsyncQueue *queue;
  GMutex lock;
  GCond done_cond;
  guint queued, completed; /* items of the queue, under the lock */
  GError *error;           /* the first failure since it was last reported */
  gint64 busy_us, gather_wait_us, reduce_wait_us;
  size_t gathered_bytes, gathered_peak;
  guint64 order; /* a digest of every collective queued, in order (cohort_sharder_order) */
  /* COHORT_TEST_SLOW_RANK "rank:µs": that rank sleeps before each collective it queues and
   * each it runs, so tests can make one rank slow. */
  gint64 slow_us;
};

static void keep_error(CohortSharder *s, GError *e)
{
  g_mutex_lock(&s->lock);
  if (!s->error)
    s->error = e;
  else
    g_error_free(e);
  g_mutex_unlock(&s->lock);
}

/* The reduce-scatter of unit u into the gradient shard, then its gradients cleared (their
 * memory given back, the range reading zeros for the next micro-step). */
static gboolean reduce_unit(CohortSharder *s, guint u, GError **error)
{
  if (s->dev)
    return cohort_shard_device_reduce(s->dev, s->grads, s->grad_shard, u, s->accumulate, s->bf16,
                                      error);
  const CohortShardUnit *unit = &s->plan->units[u];
  float *send = s->grads + unit->offset, *dst = s->grad_shard + unit->local;
  size_t mine = unit->own_count;
  cohort_shard_plan_counts(s->plan, u, 1, s->counts);
  float *sum = s->accumulate ? g_new(float, MAX(mine, 1)) : dst;
  gboolean ok =
      cohort_shard_reduce_host(s->comm, send, unit->count, sum, s->counts, s->bf16, error);
  if (ok && sum != dst) {
    for (size_t k = 0; k < mine; k++)
      dst[k] += sum[k];
  }
  if (sum != dst)
    g_free(sum);
  s->be->decommit(send, unit->count * sizeof(float));
  return ok;
}

/* Stage 3: this rank's piece of unit u from the source into place, then everyone's. */
static gboolean gather_unit(CohortSharder *s, guint u, GError **error)
{
  if (s->dev)
    return cohort_shard_device_gather(s->dev, s->params, u, error);
  const CohortShardUnit *unit = &s->plan->units[u];
  size_t off, count;
  cohort_shard_plan_piece(s->plan, u, s->plan->rank, &off, &count);
  /* committed: a no-op on the CPU but in the tests' strict mode (kernels/cpu/reserve.c) */
  if (s->be->commit(s->params + unit->offset, unit->count * sizeof(float)) != 0) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "ZeRO stage 3: out of memory for a layer's parameters");
    return FALSE;
  }
  if (count > 0)
    memcpy(s->params + off, s->source + unit->local, count * sizeof(float));
  cohort_shard_plan_counts(s->plan, u, sizeof(float), s->counts);
  return cohort_comm_all_gather_v(s->comm, s->params + unit->offset, s->counts, 0, error);
}

static gpointer comm_thread(gpointer data)
{
  CohortSharder *s = data;
  for (;;) {
    Item *it = g_async_queue_pop(s->queue);
    if (it->kind == ITEM_QUIT)
      return NULL;
    g_mutex_lock(&s->lock);
    gboolean failed = s->error != NULL;
    g_mutex_unlock(&s->lock);
    GError *error = NULL;
    if (s->slow_us > 0)
      g_usleep((gulong)s->slow_us);
    gint64 t0 = g_get_monotonic_time();
    gboolean ok = TRUE;
    /* After a failure the communicator is broken: later collectives only count (jobs run,
     * and fail at once on the broken communicator, so their callers hear why). */
    if (it->kind == ITEM_JOB)
      ok = it->job(it->data, &error);
    else if (!failed && it->kind == ITEM_REDUCE)
      ok = reduce_unit(s, it->unit, &error);
    else if (!failed && it->kind == ITEM_GATHER)
      ok = gather_unit(s, it->unit, &error);
    gint64 took = g_get_monotonic_time() - t0;
    if (!ok && it->kind != ITEM_JOB && error)
      keep_error(s, g_error_copy(error));
    g_mutex_lock(&s->lock);
    if (it->kind != ITEM_JOB)
      s->busy_us += took;
    it->ok = ok;
    if (it->kind == ITEM_JOB)
      it->error = error;
    else
      g_clear_error(&error);
    it->done = TRUE;
    s->completed++;
    g_cond_broadcast(&s->done_cond);
    g_mutex_unlock(&s->lock);
  }
}

CohortSharder *cohort_sharder_new(CohortComm *comm, const CohortShardPlan *plan, int stage,
                                  const CohortBackend *be, float *params, float *grads,
                                  float *grad_shard)
{
  g_return_val_if_fail(stage == 2 || stage == 3, NULL);
  g_return_val_if_fail(be->decommit != NULL, NULL);
  CohortSharder *s = g_new0(CohortSharder, 1);
  s->comm = comm;
  s->plan = plan;
  s->stage = stage;
  s->be = be;
  s->params = params;
  s->grads = grads;
  s->grad_shard = grad_shard;
  s->units = g_new0(Unit, MAX(plan->n_units, 1));
  for (guint u = 0; u < plan->n_units; u++) {
    s->units[u].reduce = (Item){.kind = ITEM_REDUCE, .unit = u};
    s->units[u].gather = (Item){.kind = ITEM_GATHER, .unit = u};
  }
  s->counts = g_new0(gsize, plan->world);
  s->order = 0xcbf29ce484222325ULL;
  const char *slow = g_getenv("COHORT_TEST_SLOW_RANK");
  if (slow && g_ascii_strtoll(slow, NULL, 10) == plan->rank && strchr(slow, ':'))
    s->slow_us = g_ascii_strtoll(strchr(slow, ':') + 1, NULL, 10);
  g_mutex_init(&s->lock);
  g_cond_init(&s->done_cond);
  s->queue = g_async_queue_new();
  s->thread = g_thread_new("cohort-zero-comm", comm_thread, s);
  return s;
}

void cohort_sharder_free(CohortSharder *s)
{
  if (!s)
    return;
  Item quit = {.kind = ITEM_QUIT};
  g_async_queue_push(s->queue, &quit);
  g_thread_join(s->thread);
  g_async_queue_unref(s->queue);
  g_clear_error(&s->error);
  g_mutex_clear(&s->lock);
  g_cond_clear(&s->done_cond);
  cohort_shard_device_free(s->dev);
  g_clear_error(&s->hook_error);
  g_free(s->counts);
  g_free(s->units);
  g_free(s);
}

gboolean cohort_sharder_use_device(CohortSharder *s, int device, GError **error)
{
  g_return_val_if_fail(s->dev == NULL, FALSE);
  s->dev = cohort_shard_device_new(s->comm, s->plan, s->be, device, error);
  return s->dev != NULL;
}

/* Keeps the first failure of a hook (which cannot return one) for finish and release. */
static void hook_failed(CohortSharder *s, const char *what)
{
  const char *why = s->be->last_error ? s->be->last_error() : NULL;
  if (!s->hook_error)
    s->hook_error =
        g_error_new(COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "ZeRO stage %d on %s: %s: %s",
                    s->stage, s->be->name, what, why ? why : "out of memory");
}

/* Main thread, before unit u's reduce-scatter is queued: its gradients committed (one that
 * backward never reached reads zeros), and on a device the point after their producers. */
static void prepare_reduce(CohortSharder *s, guint u)
{
  const CohortShardUnit *unit = &s->plan->units[u];
  gboolean ok = s->dev ? cohort_shard_device_reduce_ready(s->dev, s->grads, u)
                       : s->be->commit(s->grads + unit->offset, unit->count * sizeof(float)) == 0;
  if (!ok)
    hook_failed(s, "a layer's gradients");
}

/* The model's layer hook, before backward writes a layer's gradients: they get memory. */
static void commit_grads(CohortSharder *s, int layer)
{
  for (guint u = 0; u < s->plan->n_units; u++) {
    const CohortShardUnit *unit = &s->plan->units[u];
    if (unit->layer == layer &&
        s->be->commit(s->grads + unit->offset, unit->count * sizeof(float)) != 0)
      hook_failed(s, "a layer's gradients");
  }
}

/* The first failure of a hook, if any, as finish's and release's. */
static gboolean take_hook_error(CohortSharder *s, GError **error)
{
  if (!s->hook_error)
    return TRUE;
  g_propagate_error(error, g_steal_pointer(&s->hook_error));
  return FALSE;
}

void cohort_sharder_set_precision(CohortSharder *s, CohortReducePrecision precision)
{
  s->bf16 = precision == COHORT_REDUCE_BF16;
}

void cohort_sharder_set_source(CohortSharder *s, const float *shard)
{
  s->source = shard;
}

/* FNV-1a over (kind, unit): equal on every rank exactly when the orders are equal. */
static void note_order(CohortSharder *s, int kind, guint unit)
{
  guint64 word = ((guint64)kind << 32) | (kind == ITEM_JOB ? 0 : unit);
  for (int b = 0; b < 8; b++)
    s->order = (s->order ^ ((word >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
}

static void push(CohortSharder *s, Item *it)
{
  /* a job is noted by cohort_sharder_run, whether it is queued or runs at once */
  if (it->kind != ITEM_JOB)
    note_order(s, it->kind, it->unit);
  if (s->slow_us > 0)
    g_usleep((gulong)s->slow_us);
  g_mutex_lock(&s->lock);
  it->done = FALSE;
  s->queued++;
  g_mutex_unlock(&s->lock);
  g_async_queue_push(s->queue, it);
}

static void wait_item(CohortSharder *s, Item *it)
{
  g_mutex_lock(&s->lock);
  while (!it->done)
    g_cond_wait(&s->done_cond, &s->lock);
  g_mutex_unlock(&s->lock);
}

static void wait_all(CohortSharder *s)
{
  g_mutex_lock(&s->lock);
  while (s->completed < s->queued)
    g_cond_wait(&s->done_cond, &s->lock);
  g_mutex_unlock(&s->lock);
}

void cohort_sharder_prepare(CohortSharder *s, gboolean accumulate)
{
  g_queue_clear(&s->pending);
  /* The previous pass ended in finish: the thread is idle. */
  s->accumulate = accumulate;
  for (guint u = 0; u < s->plan->n_units; u++) {
    s->units[u].ready = 0;
    s->units[u].launched = FALSE;
  }
  s->next_launch = s->plan->n_units;
}

/* Queues the units whose gradients are complete, from the last down, stopping at the first
 * that is not: the same order on every rank. */
static void launch_ready(CohortSharder *s, gboolean all)
{
  while (s->next_launch > 0) {
    Unit *unit = &s->units[s->next_launch - 1];
    if (!all && unit->ready < s->plan->units[s->next_launch - 1].count)
      return;
    unit->launched = TRUE;
    prepare_reduce(s, s->next_launch - 1);
    while (g_queue_get_length(&s->pending) >= MAX_PENDING_REDUCES) {
      Item *oldest = g_queue_pop_head(&s->pending);
      gint64 t0 = g_get_monotonic_time();
      wait_item(s, oldest);
      s->reduce_wait_us += g_get_monotonic_time() - t0;
    }
    push(s, &unit->reduce);
    g_queue_push_tail(&s->pending, &unit->reduce);
    s->next_launch--;
  }
}

void cohort_sharder_grad_ready(size_t offset, size_t count, gpointer sharder)
{
  CohortSharder *s = sharder;
  const CohortShardPlan *p = s->plan;
  size_t end = offset + count;
  for (guint u = 0; u < p->n_units; u++) {
    const CohortShardUnit *unit = &p->units[u];
    size_t lo = MAX(offset, unit->offset), hi = MIN(end, unit->offset + unit->count);
    if (hi > lo)
      s->units[u].ready += hi - lo;
  }
  launch_ready(s, FALSE);
}

/* Stage 3: lets go of unit u's parameters (its gather is done). */
static void let_go(CohortSharder *s, guint u)
{
  const CohortShardUnit *unit = &s->plan->units[u];
  s->be->decommit(s->params + unit->offset, unit->count * sizeof(float));
  s->units[u].gathered = FALSE;
  s->gathered_bytes -= unit->count * sizeof(float);
}

/* Lets go of every gathered unit no begin holds; the queue must be drained. */
static void let_go_unused(CohortSharder *s)
{
  for (guint u = 0; s->stage == 3 && u < s->plan->n_units; u++)
    if (s->units[u].gathered && s->units[u].users == 0)
      let_go(s, u);
}

static gboolean take_error(CohortSharder *s, GError **error)
{
  g_mutex_lock(&s->lock);
  GError *e = s->error;
  s->error = NULL;
  g_mutex_unlock(&s->lock);
  if (!e)
    return TRUE;
  g_propagate_error(error, e);
  return FALSE;
}

gboolean cohort_sharder_finish(CohortSharder *s, gint64 *wait_us, GError **error)
{
  gint64 t0 = g_get_monotonic_time();
  launch_ready(s, TRUE);
  wait_all(s);
  g_queue_clear(&s->pending);
  let_go_unused(s);
  /* with the waits for the oldest reduce-scatter during backward */
  if (wait_us)
    *wait_us = g_get_monotonic_time() - t0 + s->reduce_wait_us;
  s->reduce_wait_us = 0;
  return take_error(s, error) && take_hook_error(s, error);
}

gboolean cohort_sharder_release(CohortSharder *s, GError **error)
{
  wait_all(s);
  let_go_unused(s);
  return take_error(s, error) && take_hook_error(s, error);
}

/* Queues the gather of unit u unless it is gathered or queued already. */
static void request(CohortSharder *s, guint u)
{
  Unit *unit = &s->units[u];
  if (unit->gathered)
    return;
  unit->gathered = TRUE;
  s->gathered_bytes += s->plan->units[u].count * sizeof(float);
  s->gathered_peak = MAX(s->gathered_peak, s->gathered_bytes);
  if (s->dev && !cohort_shard_device_gather_ready(s->dev, s->params, s->source, u))
    hook_failed(s, "a layer's parameters");
  push(s, &unit->gather);
}

void cohort_sharder_layer_hook(int layer, CohortLayerUse use, gboolean begin, gpointer sharder)
{
  CohortSharder *s = sharder;
  const CohortShardPlan *p = s->plan;
  /* Backward's gradients get memory before it writes them (at both stages); nothing else
   * happens at stage 2, where the parameters are whole. */
  if (begin && use != COHORT_LAYER_FORWARD)
    commit_grads(s, layer);
  if (s->stage != 3 || use == COHORT_LAYER_GRADS)
    return;
  int first = -1, last = -1;
  for (guint u = 0; u < p->n_units; u++) {
    if (p->units[u].layer != layer)
      continue;
    first = first < 0 ? (int)u : first;
    last = (int)u;
    Unit *unit = &s->units[u];
    if (!begin) {
      if (unit->users > 0 && --unit->users == 0)
        let_go(s, u);
      continue;
    }
    request(s, u);
    unit->users++;
  }
  if (!begin || first < 0)
    return;
  /* The next units in the direction of travel start coming while this layer computes (as
   * many as the memory plan counts). */
  for (int k = 1; k <= COHORT_ZERO_PREFETCH_UNITS; k++) {
    int next = use == COHORT_LAYER_FORWARD ? last + k : first - k;
    if (next >= 0 && (guint)next < p->n_units)
      request(s, (guint)next);
  }
  gint64 t0 = g_get_monotonic_time();
  for (int u = first; u <= last; u++)
    if (p->units[u].layer == layer)
      wait_item(s, &s->units[u].gather);
  s->gather_wait_us += g_get_monotonic_time() - t0;
}

gboolean cohort_sharder_gather_unit(CohortSharder *s, float *values, guint u, GError **error)
{
  if (s->dev)
    return cohort_shard_device_gather_unit(s->dev, values, u, error);
  cohort_shard_plan_counts(s->plan, u, sizeof(float), s->counts);
  return cohort_comm_all_gather_v(s->comm, values, s->counts, 0, error);
}

gboolean cohort_sharder_gather_params(CohortSharder *s, GError **error)
{
  for (guint u = 0; u < s->plan->n_units; u++)
    if (!cohort_sharder_gather_unit(s, s->params + s->plan->units[u].offset, u, error))
      return FALSE;
  return TRUE;
}

gboolean cohort_sharder_run(CohortSharder *s, CohortReducerJob job, gpointer data, GError **error)
{
  /* Noted either way: which of the two happens depends on how far this rank's communication
   * has got, the collectives' order does not (at once only when nothing is in flight). */
  note_order(s, ITEM_JOB, 0);
  g_mutex_lock(&s->lock);
  gboolean idle = s->completed == s->queued;
  g_mutex_unlock(&s->lock);
  if (idle)
    return job(data, error);
  Item it = {.kind = ITEM_JOB, .job = job, .data = data};
  push(s, &it);
  wait_item(s, &it);
  if (!it.ok)
    g_propagate_error(error, it.error
                                 ? it.error
                                 : g_error_new_literal(COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                                                       "a collective job failed"));
  else
    g_clear_error(&it.error);
  return it.ok;
}

gint64 cohort_sharder_take_busy_us(CohortSharder *s)
{
  g_mutex_lock(&s->lock);
  gint64 us = s->busy_us;
  s->busy_us = 0;
  g_mutex_unlock(&s->lock);
  return us;
}

gint64 cohort_sharder_take_gather_wait_us(CohortSharder *s)
{
  gint64 us = s->gather_wait_us;
  s->gather_wait_us = 0;
  return us;
}

guint64 cohort_sharder_order(const CohortSharder *s)
{
  return s->order;
}

size_t cohort_sharder_gathered_peak_bytes(const CohortSharder *s)
{
  return s->gathered_peak;
}
