/* The ZeRO sharder's per-unit collectives on device memory (see shard-device.h). */
#include "engine/distributed/shard-device.h"

#include <string.h>

#include "kernels/math-inline.h"

struct CohortShardDevice {
  CohortComm *comm;
  const CohortShardPlan *plan;
  const CohortBackend *be;
  int device;
  gboolean staged; /* a host communicator: through page-locked host memory */
  size_t most_own; /* the largest piece of this rank */
  void *stream;    /* conversions and staging copies */
  void **ready;    /* per unit: after the producers of its gradients (reduce) */
  void **placed;   /* per unit: after its commit and this rank's piece (gather) */
  void *converted; /* after a bf16 conversion */
  void *added;     /* after the last addition into the shard (default stream) */
  gboolean adding; /* `added` recorded and not waited for */
  float *sum;      /* device: a piece, for accumulation */
  guint16 *half;   /* device: a unit in bf16 (nccl) */
  guint16 *hmine;  /* device: a piece in bf16 (nccl) */
  float *host;     /* staged: a unit */
  float *host_sum; /* staged: a piece */
};

gboolean cohort_shard_reduce_host(CohortComm *comm, float *send, size_t count, float *sum,
                                  const gsize *counts, gboolean bf16, GError **error)
{
  int rank = cohort_comm_rank(comm), world = cohort_comm_world_size(comm);
  size_t mine = counts[rank];
  if (!bf16)
    return cohort_comm_reduce_scatter_f32(comm, send, sum, counts, COHORT_REDUCE_AVG, 0, error);
  /* As the DDP reducer: round to bfloat16, sum in bfloat16, divide the sum in fp32. */
  guint16 *half = g_new(guint16, MAX(count, 1));
  guint16 *hmine = g_new(guint16, MAX(mine, 1));
  for (size_t k = 0; k < count; k++)
    half[k] = cohort_f32_to_bf16(send[k]);
  gboolean ok =
      cohort_comm_reduce_scatter_bf16(comm, half, hmine, counts, COHORT_REDUCE_SUM, 0, error);
  for (size_t k = 0; ok && k < mine; k++)
    sum[k] = cohort_bf16_to_f32(hmine[k]) / (float)world;
  g_free(half);
  g_free(hmine);
  return ok;
}

static gboolean device_failed(const CohortShardDevice *d, const char *what, GError **error)
{
  const char *why = d->be->last_error ? d->be->last_error() : NULL;
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "ZeRO on %s device %d: %s: %s",
              d->be->name, d->device, what, why ? why : "failed");
  return FALSE;
}

CohortShardDevice *cohort_shard_device_new(CohortComm *comm, const CohortShardPlan *plan,
                                           const CohortBackend *be, int device, GError **error)
{
  g_return_val_if_fail(be->event_new && be->stream_new && be->commit, NULL);
  CohortShardDevice *d = g_new0(CohortShardDevice, 1);
  d->comm = comm;
  d->plan = plan;
  d->be = be;
  d->device = device;
  d->staged = strcmp(cohort_comm_backend_name(comm), "nccl") != 0;
  for (guint u = 0; u < plan->n_units; u++)
    d->most_own = MAX(d->most_own, plan->units[u].own_count);
  size_t unit = MAX(plan->largest_unit, 1), own = MAX(d->most_own, 1);
  d->ready = g_new0(void *, MAX(plan->n_units, 1));
  d->placed = g_new0(void *, MAX(plan->n_units, 1));
  gboolean ok = (d->stream = be->stream_new()) && (d->converted = be->event_new()) &&
                (d->added = be->event_new()) && (d->sum = be->alloc(own * sizeof(float)));
  for (guint u = 0; ok && u < plan->n_units; u++)
    ok = (d->ready[u] = be->event_new()) && (d->placed[u] = be->event_new());
  if (ok && d->staged)
    ok = (d->host = be->host_alloc(unit * sizeof(float))) &&
         (d->host_sum = be->host_alloc(own * sizeof(float)));
  else if (ok)
    ok = (d->half = be->alloc(unit * sizeof(guint16))) &&
         (d->hmine = be->alloc(own * sizeof(guint16)));
  if (!ok) {
    device_failed(d, "out of memory for the sharder's buffers", error);
    cohort_shard_device_free(d);
    return NULL;
  }
  return d;
}

void cohort_shard_device_free(CohortShardDevice *d)
{
  if (!d)
    return;
  const CohortBackend *be = d->be;
  for (guint u = 0; u < d->plan->n_units; u++) {
    be->event_free(d->ready[u]);
    be->event_free(d->placed[u]);
  }
  be->event_free(d->converted);
  be->event_free(d->added);
  be->stream_free(d->stream);
  be->free(d->sum);
  be->free(d->half);
  be->free(d->hmine);
  be->host_free(d->host);
  be->host_free(d->host_sum);
  g_free(d->ready);
  g_free(d->placed);
  g_free(d);
}

gboolean cohort_shard_device_reduce_ready(CohortShardDevice *d, float *grads, guint u)
{
  const CohortShardUnit *unit = &d->plan->units[u];
  return d->be->commit(grads + unit->offset, unit->count * sizeof(float)) == 0 &&
         d->be->event_record(d->ready[u]) == 0;
}

/* This rank's average of unit u into `out` (device memory), after the unit's producers. */
static gboolean reduce_into(CohortShardDevice *d, float *send, float *out, guint u, gboolean bf16,
                            GError **error)
{
  const CohortShardPlan *p = d->plan;
  const CohortShardUnit *unit = &p->units[u];
  const CohortBackend *be = d->be;
  size_t mine = unit->own_count;
  gsize *counts = g_newa(gsize, p->world);
  cohort_shard_plan_counts(p, u, 1, counts);
  if (d->staged) {
    if (be->stream_copy(d->stream, d->ready[u], d->host, send, unit->count * sizeof(float), 1))
      return device_failed(d, "a unit's gradients to the host", error);
    if (!cohort_shard_reduce_host(d->comm, d->host, unit->count, d->host_sum, counts, bf16, error))
      return FALSE;
    if (mine > 0 && be->stream_copy(d->stream, NULL, out, d->host_sum, mine * sizeof(float), 0))
      return device_failed(d, "a reduced piece to the device", error);
    return TRUE;
  }
  if (!bf16)
    return cohort_comm_reduce_scatter_f32_after(d->comm, send, out, counts, COHORT_REDUCE_AVG,
                                                d->ready[u], 0, error);
  /* As the DDP reducer over NCCL: bf16 on the side stream, NCCL's bf16 sum, then fp32 / N. */
  if (be->to_bf16_on(d->stream, d->ready[u], d->half, send, unit->count, d->converted))
    return device_failed(d, "a unit's gradients to bfloat16", error);
  if (!cohort_comm_reduce_scatter_bf16_after(d->comm, d->half, d->hmine, counts, COHORT_REDUCE_SUM,
                                             d->converted, 0, error))
    return FALSE;
  if (mine > 0 && be->from_bf16_div_on(d->stream, out, d->hmine, mine, (float)p->world))
    return device_failed(d, "a reduced piece from bfloat16", error);
  return TRUE;
}

gboolean cohort_shard_device_reduce(CohortShardDevice *d, float *grads, float *grad_shard, guint u,
                                    gboolean accumulate, gboolean bf16, GError **error)
{
  const CohortShardUnit *unit = &d->plan->units[u];
  const CohortBackend *be = d->be;
  be->set_device(d->device);
  float *send = grads + unit->offset, *dst = grad_shard + unit->local;
  /* The scratch is read by the last addition, queued behind the model's work: wait for it. */
  if (accumulate && d->adding) {
    if (be->stream_copy(d->stream, d->added, NULL, NULL, 0, 1))
      return device_failed(d, "waiting for the last addition into the shard", error);
    d->adding = FALSE;
  }
  gboolean ok = reduce_into(d, send, accumulate ? d->sum : dst, u, bf16, error);
  if (ok && accumulate && unit->own_count > 0) {
    be->axpby(dst, 1.0f, dst, 1.0f, d->sum, unit->own_count);
    if (be->event_record(d->added))
      ok = device_failed(d, "marking the addition into the shard", error);
    d->adding = ok;
  }
  be->decommit(send, unit->count * sizeof(float));
  return ok;
}

gboolean cohort_shard_device_gather_ready(CohortShardDevice *d, float *params, const float *source,
                                          guint u)
{
  const CohortShardUnit *unit = &d->plan->units[u];
  size_t off, count;
  cohort_shard_plan_piece(d->plan, u, d->plan->rank, &off, &count);
  if (d->be->commit(params + unit->offset, unit->count * sizeof(float)) != 0)
    return FALSE;
  d->be->copy(params + off, source + unit->local, count * sizeof(float));
  return d->be->event_record(d->placed[u]) == 0;
}

/* Every rank's pieces of unit u into `values` (the unit's place), through the host when
 * staged; `after` the event that this rank's piece is in place (NULL: all work so far). */
static gboolean gather_values(CohortShardDevice *d, float *values, guint u, void *after,
                              GError **error)
{
  const CohortShardPlan *p = d->plan;
  const CohortShardUnit *unit = &p->units[u];
  const CohortBackend *be = d->be;
  gsize *bytes = g_newa(gsize, p->world);
  cohort_shard_plan_counts(p, u, sizeof(float), bytes);
  if (!d->staged)
    return cohort_comm_all_gather_v_after(d->comm, values, bytes, after, 0, error);
  size_t off, count;
  cohort_shard_plan_piece(p, u, p->rank, &off, &count);
  size_t at = off - unit->offset;
  if (be->stream_copy(d->stream, after, d->host + at, values + at, count * sizeof(float), 1))
    return device_failed(d, "a piece to the host", error);
  if (!cohort_comm_all_gather_v(d->comm, d->host, bytes, 0, error))
    return FALSE;
  if (be->stream_copy(d->stream, NULL, values, d->host, unit->count * sizeof(float), 0))
    return device_failed(d, "a gathered unit to the device", error);
  return TRUE;
}

gboolean cohort_shard_device_gather(CohortShardDevice *d, float *params, guint u, GError **error)
{
  d->be->set_device(d->device);
  return gather_values(d, params + d->plan->units[u].offset, u, d->placed[u], error);
}

gboolean cohort_shard_device_gather_unit(CohortShardDevice *d, float *unit_values, guint u,
                                         GError **error)
{
  /* after everything queued so far: the copies that put this rank's piece in place */
  if (d->be->event_record(d->placed[u]))
    return device_failed(d, "marking a piece in place", error);
  return gather_values(d, unit_values, u, d->placed[u], error);
}
