/* ZeRO stages 2 and 3 at run time (see sharder.h). */
#include "engine/distributed/sharder.h"

#include <string.h>

#include "kernels/backend.h"
#include "kernels/math-inline.h"

/* The kinds of the sharder's items on its communication thread. */
enum { ITEM_REDUCE, ITEM_GATHER };

/* Reduce-scatters queued and not done before backward waits for the oldest: a unit's
 * gradients hold memory until theirs is done, so this bounds them when the network is slower
 * than backward. */
#define MAX_PENDING_REDUCES 2

typedef struct {
  size_t ready;      /* gradient floats reported final in this pass */
  gboolean launched; /* its reduce-scatter is queued in this pass */
  gboolean gathered; /* stage 3: its gather is queued (or done) and it is not let go yet */
  int users;         /* begins without their end */
  CohortCommItem reduce, gather;
} Unit;

struct CohortSharder {
  CohortComm *comm;
  const CohortShardPlan *plan;
  int stage;
  const CohortBackend *be;
  float *params, *grads, *grad_shard;
  const float *source; /* stage 3: this rank's pieces to gather from */
  gboolean bf16;
  gboolean accumulate;
  Unit *units;
  guint next_launch; /* units go out from the last (highest index) down */
  GQueue pending;    /* of CohortCommItem*: the reduce-scatters queued, oldest first */
  gsize *counts;     /* scratch: one count per rank (the communication thread's) */

  CohortCommThread *thread; /* every collective, in the order queued (comm-thread.h) */
  gint64 gather_wait_us, reduce_wait_us;
  size_t gathered_bytes, gathered_peak;
};

/* The reduce-scatter of unit u into the gradient shard, then its gradients cleared (their
 * memory given back, the range reading zeros for the next micro-step). */
static gboolean reduce_unit(CohortSharder *s, guint u, GError **error)
{
  const CohortShardUnit *unit = &s->plan->units[u];
  const CohortShardPlan *p = s->plan;
  float *send = s->grads + unit->offset, *dst = s->grad_shard + unit->local;
  size_t mine = unit->own_count;
  cohort_shard_plan_counts(p, u, 1, s->counts);
  gboolean ok;
  float *sum = s->accumulate || s->bf16 ? g_new(float, MAX(mine, 1)) : dst;
  if (s->bf16) {
    /* As the DDP reducer: round to bfloat16, sum in bfloat16, divide the sum in fp32. */
    guint16 *half = g_new(guint16, MAX(unit->count, 1));
    guint16 *hmine = g_new(guint16, MAX(mine, 1));
    for (size_t k = 0; k < unit->count; k++)
      half[k] = cohort_f32_to_bf16(send[k]);
    ok = cohort_comm_reduce_scatter_bf16(s->comm, half, hmine, s->counts, COHORT_REDUCE_SUM, 0,
                                         error);
    float world = (float)p->world;
    for (size_t k = 0; ok && k < mine; k++)
      sum[k] = cohort_bf16_to_f32(hmine[k]) / world;
    g_free(half);
    g_free(hmine);
  } else {
    ok = cohort_comm_reduce_scatter_f32(s->comm, send, sum, s->counts, COHORT_REDUCE_AVG, 0, error);
  }
  if (ok && sum != dst) {
    if (s->accumulate)
      for (size_t k = 0; k < mine; k++)
        dst[k] += sum[k];
    else
      memcpy(dst, sum, mine * sizeof(float));
  }
  if (sum != dst)
    g_free(sum);
  s->be->decommit(send, unit->count * sizeof(float));
  return ok;
}

/* Stage 3: this rank's piece of unit u from the source into place, then everyone's. */
static gboolean gather_unit(CohortSharder *s, guint u, GError **error)
{
  const CohortShardUnit *unit = &s->plan->units[u];
  size_t off, count;
  cohort_shard_plan_piece(s->plan, u, s->plan->rank, &off, &count);
  if (count > 0)
    memcpy(s->params + off, s->source + unit->local, count * sizeof(float));
  cohort_shard_plan_counts(s->plan, u, sizeof(float), s->counts);
  return cohort_comm_all_gather_v(s->comm, s->params + unit->offset, s->counts, 0, error);
}

/* The communication thread's work for a unit. */
static gboolean perform(gpointer owner, const CohortCommItem *item, GError **error)
{
  CohortSharder *s = owner;
  return item->kind == ITEM_REDUCE ? reduce_unit(s, item->index, error)
                                   : gather_unit(s, item->index, error);
}

CohortSharder *cohort_sharder_new(CohortComm *comm, const CohortShardPlan *plan, int stage,
                                  const CohortBackend *be, float *params, float *grads,
                                  float *grad_shard)
{
  g_return_val_if_fail(stage == 2 || stage == 3, NULL);
  g_return_val_if_fail(be->decommit != NULL, NULL);
  CohortSharder *s = g_new(CohortSharder, 1);
  *s = (CohortSharder){.comm = comm,
                       .plan = plan,
                       .stage = stage,
                       .be = be,
                       .params = params,
                       .grads = grads,
                       .grad_shard = grad_shard,
                       .units = g_new0(Unit, MAX(plan->n_units, 1)),
                       .counts = g_new0(gsize, plan->world)};
  for (guint u = 0; u < plan->n_units; u++) {
    cohort_comm_item_init(&s->units[u].reduce, ITEM_REDUCE, u);
    cohort_comm_item_init(&s->units[u].gather, ITEM_GATHER, u);
  }
  CohortCommThreadHooks hooks = {.perform = perform, .owner = s, .rank = plan->rank};
  s->thread = cohort_comm_thread_new("cohort-zero-comm", &hooks);
  return s;
}

void cohort_sharder_free(CohortSharder *s)
{
  if (!s)
    return;
  cohort_comm_thread_free(s->thread);
  g_free(s->counts);
  g_free(s->units);
  g_free(s);
}

void cohort_sharder_set_precision(CohortSharder *s, CohortReducePrecision precision)
{
  s->bf16 = precision == COHORT_REDUCE_BF16;
}

void cohort_sharder_set_source(CohortSharder *s, const float *shard)
{
  s->source = shard;
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
    while (g_queue_get_length(&s->pending) >= MAX_PENDING_REDUCES) {
      CohortCommItem *oldest = g_queue_pop_head(&s->pending);
      gint64 t0 = g_get_monotonic_time();
      cohort_comm_thread_wait(s->thread, oldest);
      s->reduce_wait_us += g_get_monotonic_time() - t0;
    }
    cohort_comm_thread_push(s->thread, &unit->reduce);
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

gboolean cohort_sharder_finish(CohortSharder *s, gint64 *wait_us, GError **error)
{
  gint64 t0 = g_get_monotonic_time();
  launch_ready(s, TRUE);
  cohort_comm_thread_drain(s->thread);
  g_queue_clear(&s->pending);
  let_go_unused(s);
  /* with the waits for the oldest reduce-scatter during backward */
  if (wait_us)
    *wait_us = g_get_monotonic_time() - t0 + s->reduce_wait_us;
  s->reduce_wait_us = 0;
  return cohort_comm_thread_take_error(s->thread, error);
}

gboolean cohort_sharder_release(CohortSharder *s, GError **error)
{
  cohort_comm_thread_drain(s->thread);
  let_go_unused(s);
  return cohort_comm_thread_take_error(s->thread, error);
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
  cohort_comm_thread_push(s->thread, &unit->gather);
}

void cohort_sharder_layer_hook(int layer, CohortLayerUse use, gboolean begin, gpointer sharder)
{
  CohortSharder *s = sharder;
  const CohortShardPlan *p = s->plan;
  /* Gradients need nothing here (their memory appears as backward writes them), nor does
   * anything at stage 2, where the parameters are whole. */
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
  /* The next unit in the direction of travel starts coming while this layer computes. */
  int next = use == COHORT_LAYER_FORWARD ? last + 1 : first - 1;
  if (next >= 0 && (guint)next < p->n_units)
    request(s, (guint)next);
  gint64 t0 = g_get_monotonic_time();
  for (int u = first; u <= last; u++)
    if (p->units[u].layer == layer)
      cohort_comm_thread_wait(s->thread, &s->units[u].gather);
  s->gather_wait_us += g_get_monotonic_time() - t0;
}

gboolean cohort_sharder_gather_params(CohortSharder *s, GError **error)
{
  for (guint u = 0; u < s->plan->n_units; u++) {
    cohort_shard_plan_counts(s->plan, u, sizeof(float), s->counts);
    if (!cohort_comm_all_gather_v(s->comm, s->params + s->plan->units[u].offset, s->counts, 0,
                                  error))
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_sharder_run(CohortSharder *s, CohortCommJob job, gpointer data, GError **error)
{
  return cohort_comm_thread_run(s->thread, job, data, error);
}

gint64 cohort_sharder_take_busy_us(CohortSharder *s)
{
  return cohort_comm_thread_take_busy_us(s->thread);
}

gint64 cohort_sharder_take_gather_wait_us(CohortSharder *s)
{
  gint64 us = s->gather_wait_us;
  s->gather_wait_us = 0;
  return us;
}

guint64 cohort_sharder_order(const CohortSharder *s)
{
  return cohort_comm_thread_order(s->thread);
}

size_t cohort_sharder_gathered_peak_bytes(const CohortSharder *s)
{
  return s->gathered_peak;
}
