#include "engine/train/rank-health.h"

#include <string.h>

#include "engine/base/error.h"
#include "engine/model/frozen-store.h"
#include "kernels/backend.h"

/* Device tensors are checksummed through host memory this much at a time. */
#define CHUNK_BYTES (64u << 20)

static inline guint64 rotl(guint64 x, int k)
{
  return (x << k) | (x >> (64 - k));
}

guint64 cohort_health_hash(const void *data, gsize n)
{
  /* A multiply-rotate hash over 64-bit words, then the tail: every bit of the input moves the
   * result, and it runs at memory speed. Not cryptographic: it catches drift, not an enemy. */
  const guint8 *p = data;
  guint64 h = 0x9e3779b97f4a7c15ull ^ n;
  gsize i = 0;
  for (; i + 8 <= n; i += 8) {
    guint64 w;
    memcpy(&w, p + i, 8);
    h = rotl(h ^ (w * 0xbf58476d1ce4e5b9ull), 31) * 0x94d049bb133111ebull;
  }
  guint64 tail = 0;
  memcpy(&tail, p + i, n - i);
  h = rotl(h ^ (tail * 0xbf58476d1ce4e5b9ull), 31) * 0x94d049bb133111ebull;
  h ^= h >> 29;
  return h;
}

int cohort_health_judge(const guint64 *per_rank, int world, int n_tensors, gboolean *diverging,
                        int *reference)
{
  /* The reference rank: the one whose whole row most ranks share. */
  int best = 0, best_count = 0;
  for (int r = 0; r < world; r++) {
    int same = 0;
    for (int q = 0; q < world; q++)
      same += memcmp(per_rank + (gsize)r * n_tensors, per_rank + (gsize)q * n_tensors,
                     (gsize)n_tensors * sizeof(guint64)) == 0;
    if (same > best_count) {
      best = r;
      best_count = same;
    }
  }
  if (best_count * 2 <= world)
    best = 0; /* no strict majority (two ranks that differ): compare with rank 0 */
  *reference = best;
  int first = -1;
  for (int r = 0; r < world; r++) {
    diverging[r] = FALSE;
    for (int t = 0; t < n_tensors; t++)
      if (per_rank[(gsize)r * n_tensors + t] != per_rank[(gsize)best * n_tensors + t]) {
        diverging[r] = TRUE;
        first = first < 0 || t < first ? t : first;
        break;
      }
  }
  return first;
}

/* The checksum of `floats` values of backend memory. */
static guint64 tensor_hash(const CohortBackend *be, const void *data, gsize bytes, void *scratch)
{
  if (be == cohort_backend_cpu())
    return cohort_health_hash(data, bytes);
  /* A device tensor: one hash over its chunks' hashes. */
  guint64 acc[2] = {bytes / sizeof(float), 0};
  for (gsize off = 0; off < bytes; off += CHUNK_BYTES) {
    gsize n = MIN(CHUNK_BYTES, bytes - off);
    be->download(scratch, (const char *)data + off, n);
    acc[1] = cohort_health_hash(scratch, n);
    acc[0] = cohort_health_hash(acc, sizeof acc);
  }
  return acc[0];
}

static void emit(CohortRankRun *r, const char *status, int n, gboolean buffers, double seconds,
                 gboolean requested, guint64 checksum, int reference, const gboolean *diverging,
                 const char *tensor)
{
  JsonObject *f = json_object_new();
  json_object_set_int_member(f, COHORT_FIELD_STEP, r->st.step);
  json_object_set_string_member(f, COHORT_FIELD_STATUS, status);
  json_object_set_int_member(f, COHORT_FIELD_WORLD_SIZE, r->opts->world_size);
  json_object_set_int_member(f, COHORT_FIELD_TENSORS, n);
  json_object_set_boolean_member(f, COHORT_FIELD_BUFFERS, buffers);
  json_object_set_double_member(f, COHORT_FIELD_CHECK_S, seconds);
  g_autofree char *hex = g_strdup_printf("%016" G_GINT64_MODIFIER "x", checksum);
  json_object_set_string_member(f, COHORT_FIELD_CHECKSUM, hex);
  json_object_set_int_member(f, COHORT_FIELD_REFERENCE, reference);
  if (tensor != NULL) {
    JsonArray *d = json_array_new();
    for (int q = 0; q < r->opts->world_size; q++)
      if (diverging[q])
        json_array_add_int_element(d, q);
    json_object_set_array_member(f, COHORT_FIELD_DIVERGING, d);
    json_object_set_string_member(f, COHORT_FIELD_TENSOR, tensor);
  }
  if (requested)
    json_object_set_boolean_member(f, COHORT_FIELD_REQUESTED, TRUE);
  cohort_progress_emit(r->progress, COHORT_EVENT_HEALTH, f);
}

gboolean cohort_rank_health_check(CohortRankRun *r, gboolean requested, GError **error)
{
  int world = r->opts->world_size;
  if (world < 2)
    return TRUE;
  /* At zero_stage 3 no rank holds the whole weights (the model's own copy is released between
   * layers), so there is nothing replicated to compare; stage 2 keeps them whole. */
  if (r->shard != NULL && cohort_shard_params(r->shard) != NULL) {
    if (requested && r->opts->rank == 0)
      cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                          "rank health: not compared at zero_stage 3 (each rank holds only its "
                          "shard of the weights)");
    return TRUE;
  }
  CohortRankPhase was = cohort_phase_enter(COHORT_RANK_PHASE_HEALTH);
  gint64 t0 = g_get_monotonic_time();
  CohortModel *m = r->model;
  /* Buffers are the same on every rank only when SyncBatchNorm computes them from the global
   * batch; otherwise each rank updates them from its own (broadcast_buffers copies rank 0's
   * over them before the next step). */
  gboolean buffers = r->cfg->sync_batchnorm && m->n_buffers > 0;
  int n = (int)m->n_tensors + (buffers ? (int)m->n_buffers : 0);
  g_autofree guint64 *mine = g_new0(guint64, MAX(n, 1));
  g_autofree guint64 *all = g_new0(guint64, (gsize)MAX(n, 1) * world);
  gsize largest = 0;
  for (guint i = 0; i < m->n_tensors; i++)
    largest = MAX(largest, m->tensors[i].numel);
  for (guint i = 0; buffers && i < m->n_buffers; i++)
    largest = MAX(largest, m->buffers[i].numel);
  g_autofree void *scratch =
      r->be == cohort_backend_cpu() ? NULL : g_malloc(MIN(largest * sizeof(float), CHUNK_BYTES));
  for (guint i = 0; i < m->n_tensors; i++) {
    /* frozen_dtype bf16: a stored tensor's bits (its fp32 place has no memory) */
    const uint16_t *bits = cohort_frozen_store_bits(m, i);
    mine[i] = bits ? tensor_hash(r->be, bits, m->tensors[i].numel * sizeof(uint16_t), scratch)
                   : tensor_hash(r->be, m->params + m->tensors[i].offset,
                                 m->tensors[i].numel * sizeof(float), scratch);
  }
  for (guint i = 0; buffers && i < m->n_buffers; i++)
    mine[m->n_tensors + i] = tensor_hash(r->be, m->buffer_data + m->buffers[i].offset,
                                         m->buffers[i].numel * sizeof(float), scratch);
  if (!cohort_train_dist_all_gather(r->dist, mine, (gsize)n * sizeof(guint64), all,
                                    "health checksums", error))
    return FALSE;
  g_autofree gboolean *diverging = g_new0(gboolean, world);
  int reference = 0;
  int first = cohort_health_judge(all, world, n, diverging, &reference);
  double seconds = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  guint64 checksum = cohort_health_hash(all + (gsize)reference * n, (gsize)n * sizeof(guint64));
  const char *tensor = first < 0                   ? NULL
                       : first < (int)m->n_tensors ? m->tensors[first].name
                                                   : m->buffers[first - m->n_tensors].name;
  emit(r, first < 0 ? COHORT_STATUS_OK : COHORT_STATUS_DIVERGED, n, buffers, seconds, requested,
       checksum, reference, diverging, tensor);
  cohort_phase_enter(was);
  if (first < 0)
    return TRUE;
  g_autoptr(GString) who = g_string_new(NULL);
  int count = 0;
  for (int q = 0; q < world; q++)
    if (diverging[q])
      g_string_append_printf(who, "%s%d", count++ ? ", " : "", q);
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "step %" G_GINT64_FORMAT ": the ranks' weights have drifted apart: rank%s %s "
                     "differ%s from rank %d, first in %s \"%s\"; data-parallel ranks must hold "
                     "the same weights bit for bit (a DDP bug, bad memory or a non-deterministic "
                     "kernel makes them differ); the run stops before saving them",
                     r->st.step, count > 1 ? "s" : "", who->str, count > 1 ? "" : "s", reference,
                     first < (int)m->n_tensors ? "parameter" : "buffer", tensor);
}
