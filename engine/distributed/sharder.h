/* ZeRO stages 2 and 3 at run time: the gradients reduce-scattered unit by unit while backward
 * runs, and (stage 3) each unit's parameters gathered before a layer uses them and let go
 * after, with the next one's gather issued ahead (prefetch). The layout is the shard plan's
 * (shard-plan.h); this rank's shard buffers are the caller's.
 *
 * Memory. The model's gradient vector (and at stage 3 its parameter vector) is a reserved
 * address range (kernels/backend.h `reserve`): a unit's gradients take memory while backward
 * writes them and give it back once they are reduce-scattered (decommit: the range reads as
 * zeros again, ready for the next micro-step); at stage 3 a unit's parameters take memory from
 * its gather to its release. So a rank holds its shards plus the units in flight.
 *
 * Order. Every collective (reduce-scatters, gathers, and the jobs of cohort_sharder_run such as
 * SyncBatchNorm's) goes through one communication thread (comm-thread.h, the DDP reducer's
 * too) in the order the main thread queues them. The main thread decides what to queue only from
 * the sequence of hook calls (the model's layer_begin/layer_end and grad-ready reports, the same on
 * every rank) and from what it queued before, never from how far the communication has got: so
 * every rank queues the same collectives in the same order, however slow one of them is.
 *
 * Gradient accumulation. Every micro-step's gradients are reduce-scattered and added into the
 * shard (DeepSpeed's ZeRO-2 and FSDP without no_sync do the same); the full gradient of the
 * whole model never exists on a rank. */
#pragma once

#include "engine/config/config.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/reducer.h"
#include "engine/distributed/shard-plan.h"

G_BEGIN_DECLS

typedef struct CohortSharder CohortSharder;

/* Stage 2 or 3 over `comm` with `plan` (borrowed, like everything else here): `grads` (the
 * model's reserved gradient range, n_floats), `params` (the model's parameters: whole at stage
 * 2, a reserved range at stage 3), `grad_shard` (plan->shard_floats: where the reduced
 * gradients are summed), all in host memory of backend `be` (which must have `reserve`).
 * The communication thread starts here. */
CohortSharder *cohort_sharder_new(CohortComm *comm, const CohortShardPlan *plan, int stage,
                                  const CohortBackend *be, float *params, float *grads,
                                  float *grad_shard);
/* Stops the communication thread (aborting the communicator first if it is stuck). */
void cohort_sharder_free(CohortSharder *s);

/* The reduce-scatter's number format, as cohort_reducer_set_precision: fp32 averages; bf16
 * rounds each unit's gradients to bfloat16, sums them across ranks in bfloat16 (each pairwise
 * sum rounded) and divides the sum by the world size in fp32. */
void cohort_sharder_set_precision(CohortSharder *s, CohortReducePrecision precision);

/* Stage 3: where gathers take this rank's pieces from (shard_floats floats laid out like the
 * shard: the parameters it owns, or the EMA weights for an evaluation with them). Only while
 * nothing is gathered (after cohort_sharder_release). */
void cohort_sharder_set_source(CohortSharder *s, const float *shard);

/* Before each micro-step's backward: `accumulate` FALSE for the first micro-step of an
 * optimizer step (the reduced gradients replace the shard's), TRUE after (they add to it). */
void cohort_sharder_prepare(CohortSharder *s, gboolean accumulate);
/* The model's grad-ready hook (CohortGradReadyFunc with the sharder as user data): a unit
 * whose gradients are all final is reduce-scattered; units go out in reverse table order.
 * With two reduce-scatters already waiting it first waits for the oldest, which bounds the
 * gradient memory when the network is slower than backward. */
void cohort_sharder_grad_ready(size_t offset, size_t count, gpointer sharder);
/* Ends the backward: queues the units backward did not report, waits for every collective,
 * lets go of the gathered parameters nothing uses, and returns the first failure. *wait_us
 * (may be NULL) gets the time spent waiting here and in the grad-ready hook. */
gboolean cohort_sharder_finish(CohortSharder *s, gint64 *wait_us, GError **error);

/* Stage 3: the model's layer hook (CohortLayerHookFunc with the sharder as user data). A
 * begin for FORWARD or BACKWARD gathers the layer's units (or waits for their prefetch) and
 * queues the gather of the unit after them (forward) or before them (backward) in table
 * order; the end lets them go once no begin holds them. A failure is kept and reported by
 * finish or release. */
void cohort_sharder_layer_hook(int layer, CohortLayerUse use, gboolean begin, gpointer sharder);
/* Stage 3, after forward-only work (evaluation, samples): waits for the queue and lets go of
 * every gathered unit. Returns the first failure since the last report. */
gboolean cohort_sharder_release(CohortSharder *s, GError **error);

/* Stage 2, after the optimizer updated this rank's pieces in `params`: one in-place
 * all-gather per unit brings every rank's pieces. A collective; the queue must be idle. */
gboolean cohort_sharder_gather_params(CohortSharder *s, GError **error);

/* Runs `job` on the communication thread after everything queued before (or at once on this
 * thread when nothing is in flight), as cohort_reducer_run. */
gboolean cohort_sharder_run(CohortSharder *s, CohortCommJob job, gpointer data, GError **error);

/* Microseconds the communication thread spent on collectives since the last call, and those
 * the main thread spent waiting for gathers in the layer hook. */
gint64 cohort_sharder_take_busy_us(CohortSharder *s);
gint64 cohort_sharder_take_gather_wait_us(CohortSharder *s);
/* A digest of the kind and unit of every collective queued so far, in order
 * (cohort_comm_thread_order): the same on every rank exactly when they queued the same
 * collectives in the same order (the ranks event carries it). COHORT_TEST_SLOW_RANK makes a
 * rank slow, for tests of this (comm-thread.h). */
guint64 cohort_sharder_order(const CohortSharder *s);
/* The most parameter bytes gathered at once so far (stage 3; 0 at stage 2). */
size_t cohort_sharder_gathered_peak_bytes(const CohortSharder *s);

G_END_DECLS
