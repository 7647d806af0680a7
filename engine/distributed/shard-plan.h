/* The shard layout of ZeRO stages 2 and 3: which floats of the flat parameter vector (and of
 * the gradients, the optimizer state and the EMA weights laid out like it) each rank keeps.
 *
 * The vector is cut into *units*: each unit is a maximal run of consecutive trainable tensors
 * of the table that share a `layer` value (a GPT block, the embeddings, a ResNet block, a DiT
 * block), so a unit is exactly what one "layer needed" hook of stage 3 brings in, and one
 * reduce-scatter while backward runs sends. Each unit is then split evenly among the ranks:
 * rank r keeps the floats [r·p, (r+1)·p) of it, where p is ceil(count / world) rounded up to
 * a multiple of 64 floats (256 bytes), so every piece but the last starts 256-byte aligned
 * relative to its unit; the last rank's piece is what is left (shorter, possibly empty).
 * Every rank therefore sends and receives the same bytes for every unit, and one all-gather
 * and one reduce-scatter per unit move it, with no padding in the vector itself.
 *
 * A rank's *shard* is its pieces of every unit, back to back in unit order: the optimizer
 * state, the reduced gradients, the EMA weights and (stage 3) the parameters it owns are
 * buffers of shard_floats floats in that order.
 *
 * Only trainable tensors are sharded: tensors left out (`trainable` FALSE) belong to no unit,
 * get no gradient, optimizer state or shard, and stay whole on every rank. With finetune lora
 * or frozen the trainer passes the model's train table, what learns alone in [0, n_trainable)
 * (engine/model/finetune.h): the frozen base after it is in no unit. */
#pragma once

#include <glib.h>

#include "engine/base/tensor.h"

G_BEGIN_DECLS

/* Floats each piece of a unit is a multiple of (but the last rank's). */
#define COHORT_SHARD_ALIGN 64

/* What ZeRO keeps in flight, which the memory plan counts (engine/train/memory-plan.c) and the
 * sharder does (sharder.c): stage 3 gathers this many units ahead of the one a layer uses (in
 * the direction of travel), and at most this many reduce-scatters wait at once before
 * backward waits for the oldest. */
#define COHORT_ZERO_PREFETCH_UNITS  1
#define COHORT_ZERO_PENDING_REDUCES 2

typedef struct {
  size_t offset, count; /* the unit's floats in the flat vector */
  int layer;            /* the `layer` its tensors share */
  guint first_tensor, n_tensors;
  size_t piece;     /* floats of every rank's piece but the last's */
  size_t local;     /* where this rank's piece sits in its shard */
  size_t own_count; /* floats of this rank's piece (0 when the unit is too small) */
} CohortShardUnit;

typedef struct {
  int world, rank;
  guint n_units;
  CohortShardUnit *units;  /* in table order */
  size_t n_floats;         /* of the whole vector */
  size_t shard_floats;     /* this rank's shard */
  size_t max_shard_floats; /* the largest shard of any rank (rank 0's) */
  size_t largest_unit;     /* floats of the largest unit */
} CohortShardPlan;

/* The plan for `tensors` (covering n_floats floats in increasing offsets) over `world` ranks,
 * as rank `rank` sees it. `trainable` (n entries) says which tensors are sharded; NULL: all.
 * FALSE with an error when the table is not in increasing offsets. */
CohortShardPlan *cohort_shard_plan_new(const CohortTensorInfo *tensors, guint n, size_t n_floats,
                                       const gboolean *trainable, int world, int rank,
                                       GError **error);
void cohort_shard_plan_free(CohortShardPlan *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortShardPlan, cohort_shard_plan_free)

/* Rank r's piece of unit u: its first float in the flat vector and its length. */
void cohort_shard_plan_piece(const CohortShardPlan *p, guint u, int r, size_t *offset,
                             size_t *count);
/* Every rank's piece length of unit u, in floats (counts[world]), or in bytes of `elt` each. */
void cohort_shard_plan_counts(const CohortShardPlan *p, guint u, gsize elt, gsize *counts);
/* The shard floats of rank r (any rank, not only this one). */
size_t cohort_shard_plan_rank_floats(const CohortShardPlan *p, int r);
/* The unit holding flat float `offset`, or -1 (a frozen tensor or out of range). */
int cohort_shard_plan_unit_at(const CohortShardPlan *p, size_t offset);

G_END_DECLS
