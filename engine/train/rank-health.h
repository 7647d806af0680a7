/* Rank health (issue 28 item 3): the ranks compare a checksum of every parameter tensor (and,
 * with sync_batchnorm, every buffer) so that weights that drifted apart — a DDP bug, bad
 * memory, a non-deterministic kernel — stop the run with the ranks and the first tensor named,
 * instead of training on silently. Data parallelism keeps the weights of every rank identical
 * bit for bit: every rank applies the same averaged gradients with the same arithmetic. */
#pragma once

#include "engine/train/trainer-run.h"

G_BEGIN_DECLS

/* The checksum of `n` bytes (a 64-bit hash of the bits). */
guint64 cohort_health_hash(const void *data, gsize n);

/* Each rank's checksums of its tensors (`per_rank`: world × n_tensors, rank r's row at
 * r × n_tensors), judged: the reference is the value most ranks hold, rank 0's when no value
 * has a strict majority. Returns the index of the first tensor where some rank differs, or -1;
 * `diverging` (world entries) gets which ranks differ anywhere, *reference the reference rank. */
int cohort_health_judge(const guint64 *per_rank, int world, int n_tensors, gboolean *diverging,
                        int *reference);

/* Compares the ranks now (every rank calls it at the same step): a `health` event on rank 0
 * (`requested` from the control channel's "check"); FALSE with an error naming the diverging
 * ranks and the first differing tensor when they differ. Nothing with one process. */
gboolean cohort_rank_health_check(CohortRankRun *r, gboolean requested, GError **error);

G_END_DECLS
