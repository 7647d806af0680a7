/* ZeRO stage 1 (zero_stage 1): the optimizer state sharded across ranks.
 *
 * The gradients are all-reduced as in plain DDP (the reducer's buckets, overlapping
 * backward), so every rank holds the whole averaged gradient and computes the same global
 * norm for clipping. Each rank then updates only its shard of the flat parameter vector with
 * its shard of the state, and the shards are all-gathered in place into every rank's
 * parameters. The update of each element is the one stage 0 makes, so stage 1 trains to the
 * same bits as stage 0.
 *
 * The plan: with n parameters and N ranks, s = floor(n / N); rank r owns [r·s, (r+1)·s); the
 * last n - N·s floats (fewer than N) are every rank's: each updates them from the same
 * gradient and the same state, so they agree without being gathered, and the gather is one
 * in-place all-gather of s floats per rank.
 *
 * Checkpoints stay what stage 0 writes: the shards' state is gathered to rank 0 at a save and
 * scattered from rank 0 at a resume, so a checkpoint resumes on any number of ranks at either
 * stage. Rank 0 holds a full host copy of the state while it saves or loads. */
#pragma once

#include "engine/train/device.h"
#include "engine/distributed/comm.h"
#include "engine/model/optim.h"

G_BEGIN_DECLS

typedef struct CohortZero CohortZero;

/* The plan for `n` parameters over comm's ranks (world size > 1), for parameters and state in
 * the memory of `dev`: host memory, or a GPU's (reached directly with "nccl", through host
 * memory with "gloo"). The communicator is borrowed. */
CohortZero *cohort_zero_new(CohortComm *comm, const CohortComputeDevice *dev, size_t n);
void cohort_zero_free(CohortZero *z);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortZero, cohort_zero_free)

/* This rank's ranges of the parameter vector (its shard, then the shared tail when there is
 * one) into out[0..1]; returns how many. For cohort_optimizer_new_sharded. */
guint cohort_zero_ranges(const CohortZero *z, CohortParamRange out[2]);

/* After the sharded update: every rank's shard into every rank's `params` (n floats in the
 * device's memory). A collective: every rank calls it, after its update. */
gboolean cohort_zero_gather_params(CohortZero *z, float *params, GError **error);

/* For a save: the state of every rank's `shard` into `full` on rank 0 (a host-memory
 * optimizer of the same kind covering all n parameters; NULL on the other ranks). A
 * collective. */
gboolean cohort_zero_gather_state(CohortZero *z, CohortOptimizer *shard, CohortOptimizer *full,
                                  GError **error);

/* For a resume: rank 0's `full` state (host memory, all n parameters; NULL on the other
 * ranks) into every rank's `shard`. A collective. */
gboolean cohort_zero_scatter_state(CohortZero *z, CohortOptimizer *full, CohortOptimizer *shard,
                                   GError **error);

G_END_DECLS
