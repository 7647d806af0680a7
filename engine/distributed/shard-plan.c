/* ZeRO stages 2 and 3's shard layout (see shard-plan.h). */
#include "engine/distributed/shard-plan.h"

#include "engine/distributed/comm.h"

static size_t piece_of(size_t count, int world)
{
  size_t each = (count + (size_t)world - 1) / (size_t)world;
  return (each + COHORT_SHARD_ALIGN - 1) / COHORT_SHARD_ALIGN * COHORT_SHARD_ALIGN;
}

void cohort_shard_plan_piece(const CohortShardPlan *p, guint u, int r, size_t *offset,
                             size_t *count)
{
  const CohortShardUnit *unit = &p->units[u];
  size_t lo = MIN(unit->count, (size_t)r * unit->piece);
  size_t hi = MIN(unit->count, lo + unit->piece);
  *offset = unit->offset + lo;
  *count = hi - lo;
}

void cohort_shard_plan_counts(const CohortShardPlan *p, guint u, gsize elt, gsize *counts)
{
  for (int r = 0; r < p->world; r++) {
    size_t off, count;
    cohort_shard_plan_piece(p, u, r, &off, &count);
    counts[r] = count * elt;
  }
}

size_t cohort_shard_plan_rank_floats(const CohortShardPlan *p, int r)
{
  size_t total = 0;
  for (guint u = 0; u < p->n_units; u++) {
    size_t off, count;
    cohort_shard_plan_piece(p, u, r, &off, &count);
    total += count;
  }
  return total;
}

int cohort_shard_plan_unit_at(const CohortShardPlan *p, size_t offset)
{
  guint lo = 0, hi = p->n_units;
  while (lo < hi) {
    guint mid = (lo + hi) / 2;
    const CohortShardUnit *u = &p->units[mid];
    if (offset < u->offset)
      hi = mid;
    else if (offset >= u->offset + u->count)
      lo = mid + 1;
    else
      return (int)mid;
  }
  return -1;
}

CohortShardPlan *cohort_shard_plan_new(const CohortTensorInfo *tensors, guint n, size_t n_floats,
                                       const gboolean *trainable, int world, int rank,
                                       GError **error)
{
  g_return_val_if_fail(world >= 1 && rank >= 0 && rank < world, NULL);
  GArray *units = g_array_new(FALSE, TRUE, sizeof(CohortShardUnit));
  size_t end = 0;
  for (guint i = 0; i < n; i++) {
    const CohortTensorInfo *t = &tensors[i];
    if (t->offset < end || t->offset + t->numel > n_floats) {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                  "ZeRO shard plan: tensor \"%s\" (floats %zu to %zu) is not after the one before "
                  "it or not inside the %zu floats of the vector",
                  t->name, t->offset, t->offset + t->numel, n_floats);
      g_array_free(units, TRUE);
      return NULL;
    }
    end = t->offset + t->numel;
    if (trainable && !trainable[i])
      continue;
    CohortShardUnit *last =
        units->len ? &g_array_index(units, CohortShardUnit, units->len - 1) : NULL;
    /* A unit grows only over adjacent trainable tensors of its layer. */
    if (last && last->layer == t->layer && last->first_tensor + last->n_tensors == i &&
        last->offset + last->count == t->offset) {
      last->count += t->numel;
      last->n_tensors++;
      continue;
    }
    CohortShardUnit u = {.offset = t->offset,
                         .count = t->numel,
                         .layer = t->layer,
                         .first_tensor = i,
                         .n_tensors = 1};
    g_array_append_val(units, u);
  }
  CohortShardPlan *p = g_new0(CohortShardPlan, 1);
  p->world = world;
  p->rank = rank;
  p->n_floats = n_floats;
  p->n_units = units->len;
  p->units = (CohortShardUnit *)g_array_free(units, FALSE);
  for (guint u = 0; u < p->n_units; u++) {
    CohortShardUnit *unit = &p->units[u];
    unit->piece = piece_of(unit->count, world);
    size_t off;
    cohort_shard_plan_piece(p, u, rank, &off, &unit->own_count);
    unit->local = p->shard_floats;
    p->shard_floats += unit->own_count;
    p->largest_unit = MAX(p->largest_unit, unit->count);
  }
  /* Pieces are filled in rank order: rank 0's shard is never smaller than another's. */
  p->max_shard_floats = cohort_shard_plan_rank_floats(p, 0);
  return p;
}

void cohort_shard_plan_free(CohortShardPlan *p)
{
  if (!p)
    return;
  g_free(p->units);
  g_free(p);
}
