/* rank_batch_sizes: how each global micro-batch is cut among the ranks (docs/launching.md,
 * "Ranks of different speeds").
 *
 *  ""      every rank takes batch_size examples (the global micro-batch is batch_size × world
 *          size), rank r the r-th of every world-th example, as PyTorch's DistributedSampler;
 *  "12,4"  rank r takes the r-th share of each global micro-batch as a contiguous run of
 *          examples; the global micro-batch is the sum (batch_size is then only the batch the
 *          learning rate was set for, which lr_scaling scales from);
 *  "auto"  the global micro-batch is batch_size × world size, cut so that every rank's step
 *          takes as long (engine/train/balance.h), never more for a rank than its device's
 *          memory plan allows, and revised every rebalance_every steps.
 *
 * Whatever the split, the global micro-batches are the same examples, so N ranks train what one
 * process trains on the whole batch: gradients, losses and metrics are weighted by examples. */
#pragma once

#include "engine/config/config.h"

G_BEGIN_DECLS

typedef enum {
  COHORT_SPLIT_EVEN, /* "" */
  COHORT_SPLIT_LIST, /* "12,4" */
  COHORT_SPLIT_AUTO, /* "auto" */
} CohortSplitKind;

/* The largest share one rank may take (batch_size's bound). */
#define COHORT_MAX_RANK_BATCH 65536

CohortSplitKind cohort_rank_batches_kind(const CohortConfig *cfg);

/* The list of a COHORT_SPLIT_LIST config (of int); NULL with an error naming the key, the
 * entry and its rank when an entry is not an integer from 1 to COHORT_MAX_RANK_BATCH (a zero
 * says that every rank needs at least one example). NULL without an error for "" and "auto". */
GArray *cohort_rank_batches_list(const CohortConfig *cfg, const char *source, GError **error);

/* Examples in one global micro-batch on `world` ranks: the list's sum, else batch_size ×
 * world (saturating at G_MAXINT). */
gint64 cohort_rank_batches_global(const CohortConfig *cfg, int world);

/* The split a run starts from, `world` entries into `shares`: the list (an error naming the key
 * when its length is not `world`), or batch_size each ("" and the start of "auto"). */
gboolean cohort_rank_batches_start(const CohortConfig *cfg, const char *source, int world,
                                   int *shares, GError **error);

/* "12,4" (g_free it). */
char *cohort_rank_batches_text(const int *shares, int world);

G_END_DECLS
