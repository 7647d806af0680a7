/* ZeRO stage 1: the shard plan, the in-place parameter gather after each step, and the state
 * gathered to rank 0 for a save and scattered from it at a resume (see trainer-zero.h). */
#include "engine/train/trainer-zero.h"

#include <string.h>

#include "kernels/backend.h"

struct CohortZero {
  CohortComm *comm;
  const CohortBackend *be; /* where parameters and state live */
  gboolean nccl;           /* the communicator reaches the device's memory */
  gboolean staged;         /* device memory, host communicator: through host memory */
  int rank, world;
  size_t n, shard, tail; /* shard = floor(n / world); tail = n - world · shard */
  float *host;           /* staged: world · shard floats, the parameters on their way */
};

CohortZero *cohort_zero_new(CohortComm *comm, const CohortComputeDevice *dev, size_t n)
{
  CohortZero *z = g_new0(CohortZero, 1);
  z->comm = comm;
  z->be = dev->be;
  z->nccl = strcmp(cohort_comm_backend_name(comm), "nccl") == 0;
  z->staged = dev->cuda_device >= 0 && !z->nccl;
  z->rank = cohort_comm_rank(comm);
  z->world = cohort_comm_world_size(comm);
  z->n = n;
  z->shard = n / (size_t)z->world;
  z->tail = n - z->shard * (size_t)z->world;
  return z;
}

void cohort_zero_free(CohortZero *z)
{
  if (!z)
    return;
  g_free(z->host);
  g_free(z);
}

guint cohort_zero_ranges(const CohortZero *z, CohortParamRange out[2])
{
  guint k = 0;
  if (z->shard > 0)
    out[k++] = (CohortParamRange){(size_t)z->rank * z->shard, z->shard};
  if (z->tail > 0)
    out[k++] = (CohortParamRange){(size_t)z->world * z->shard, z->tail};
  return k;
}

gboolean cohort_zero_gather_params(CohortZero *z, float *params, GError **error)
{
  size_t bytes = z->shard * sizeof(float);
  if (!z->staged)
    return cohort_comm_all_gather_inplace(z->comm, params, bytes, 0, error);
  /* A GPU rank on "gloo": its shard down, every shard gathered on the host, all back up. */
  size_t own = (size_t)z->rank * z->shard;
  if (!z->host)
    z->host = g_try_new(float, MAX(z->shard * (size_t)z->world, 1));
  if (!z->host) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "ZeRO stage 1: out of host memory for the %zu parameters gathered through it "
                "(a GPU rank on gloo; nccl gathers on the device)",
                z->n);
    return FALSE;
  }
  z->be->download(z->host + own, params + own, bytes);
  if (!cohort_comm_all_gather_inplace(z->comm, z->host, bytes, 0, error))
    return FALSE;
  z->be->upload(params, z->host, bytes * (size_t)z->world);
  return TRUE;
}

/* The saves and resumes move state one shard at a time through a buffer the communicator
 * reaches ("comm memory": the device's for "nccl", the host's otherwise), broadcast from the
 * rank that has it: only a shard's worth of scratch on every rank. */
static float *comm_alloc(const CohortZero *z, size_t count)
{
  size_t bytes = MAX(count, 1) * sizeof(float);
  return z->nccl ? z->be->alloc(bytes) : g_try_malloc(bytes);
}

static void comm_free(const CohortZero *z, float *p)
{
  if (z->nccl)
    z->be->free(p);
  else
    g_free(p);
}

/* Between the state's memory and comm memory. */
static void state_to_comm(const CohortZero *z, float *dst, const float *src, size_t count)
{
  if (z->staged)
    z->be->download(dst, src, count * sizeof(float));
  else
    z->be->copy(dst, src, count * sizeof(float));
}

static void comm_to_state(const CohortZero *z, float *dst, const float *src, size_t count)
{
  if (z->staged)
    z->be->upload(dst, src, count * sizeof(float));
  else
    z->be->copy(dst, src, count * sizeof(float));
}

/* Between comm memory and rank 0's host copy of the full state. */
static void comm_to_host(const CohortZero *z, float *host, const float *src, size_t count)
{
  if (z->nccl)
    z->be->download(host, src, count * sizeof(float));
  else
    memcpy(host, src, count * sizeof(float));
}

static void host_to_comm(const CohortZero *z, float *dst, const float *host, size_t count)
{
  if (z->nccl)
    z->be->upload(dst, host, count * sizeof(float));
  else
    memcpy(dst, host, count * sizeof(float));
}

/* Checks shared by the gather and the scatter; `full` matters on rank 0 only. */
static gboolean state_pair_ok(const CohortZero *z, CohortOptimizer *shard, CohortOptimizer *full,
                              GError **error)
{
  gboolean ok = cohort_optimizer_state_len(shard) == z->shard + z->tail;
  if (ok && z->rank == 0)
    ok = full != NULL && cohort_optimizer_state_len(full) == z->n &&
         cohort_optimizer_n_states(full) == cohort_optimizer_n_states(shard) &&
         cohort_optimizer_backend(full) == cohort_backend_cpu();
  if (!ok)
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                "ZeRO stage 1: the optimizer state does not match the shard plan (%zu parameters "
                "over %d ranks)",
                z->n, z->world);
  return ok;
}

static gboolean no_scratch(GError **error, size_t count)
{
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
              "ZeRO stage 1: out of memory for a shard of %zu floats of optimizer state", count);
  return FALSE;
}

gboolean cohort_zero_gather_state(CohortZero *z, CohortOptimizer *shard, CohortOptimizer *full,
                                  GError **error)
{
  if (!state_pair_ok(z, shard, full, error))
    return FALSE;
  float *scratch = comm_alloc(z, z->shard);
  if (!scratch)
    return no_scratch(error, z->shard);
  gboolean ok = TRUE;
  size_t bytes = z->shard * sizeof(float);
  for (guint i = 0; ok && i < cohort_optimizer_n_states(shard); i++) {
    const float *mine = cohort_optimizer_state(shard, i);
    float *dst = z->rank == 0 ? cohort_optimizer_state(full, i) : NULL;
    for (int r = 0; ok && r < z->world && z->shard > 0; r++) {
      if (z->rank == r)
        state_to_comm(z, scratch, mine, z->shard);
      ok = cohort_comm_broadcast(z->comm, scratch, bytes, r, 0, error);
      if (ok && dst)
        comm_to_host(z, dst + (size_t)r * z->shard, scratch, z->shard);
    }
    /* The tail is the same on every rank: rank 0's own copy is the one saved. */
    if (ok && dst && z->tail > 0)
      z->be->download(dst + (size_t)z->world * z->shard, mine + z->shard, z->tail * sizeof(float));
  }
  comm_free(z, scratch);
  return ok;
}

gboolean cohort_zero_scatter_state(CohortZero *z, CohortOptimizer *full, CohortOptimizer *shard,
                                   GError **error)
{
  if (!state_pair_ok(z, shard, full, error))
    return FALSE;
  size_t most = MAX(z->shard, z->tail);
  float *scratch = comm_alloc(z, most);
  if (!scratch)
    return no_scratch(error, most);
  gboolean ok = TRUE;
  for (guint i = 0; ok && i < cohort_optimizer_n_states(shard); i++) {
    float *mine = cohort_optimizer_state(shard, i);
    const float *src = z->rank == 0 ? cohort_optimizer_state(full, i) : NULL;
    /* The shards in rank order, then the tail that every rank keeps. */
    for (int r = 0; ok && r <= z->world; r++) {
      size_t count = r < z->world ? z->shard : z->tail;
      if (count == 0)
        continue;
      if (src)
        host_to_comm(z, scratch, src + (size_t)r * z->shard, count);
      ok = cohort_comm_broadcast(z->comm, scratch, count * sizeof(float), 0, 0, error);
      if (ok && (z->rank == r || r == z->world))
        comm_to_state(z, r == z->world ? mine + z->shard : mine, scratch, count);
    }
  }
  comm_free(z, scratch);
  return ok;
}
