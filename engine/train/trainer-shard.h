/* ZeRO stages 2 and 3 in the trainer (zero_stage 2 or 3 with more than one rank).
 *
 * Stage 2: every rank keeps the whole parameters but only its shard of the gradients (reduce-
 * scattered unit by unit while backward runs, engine/distributed/sharder.h), of the optimizer
 * state and of the EMA weights; it updates its pieces of the parameters and one all-gather per
 * unit brings everyone's. Stage 3: the parameters are sharded too; each layer's are gathered
 * when the model announces it (the layer hook) and let go after.
 *
 * The layout is engine/distributed/shard-plan.h's. A rank's shard buffers (parameters at stage
 * 3, reduced gradients, EMA weights) are backend memory (the host's, or a GPU's) of
 * shard_floats floats each, laid out as the optimizer's state is (cohort_shard_ranges).
 *
 * With finetune lora or frozen only what learns is sharded: the units cover the train table,
 * [0, n_trainable) (adapters and `trainable` tensors, each with the `layer` of what it adapts
 * so stage 3 gathers it with its layer); the frozen base after it is whole on every rank, at
 * stage 3 committed once in the reserved range and never let go. Checkpoints and exports of
 * such a run gather what learns whole (small) and write the files stage 0 writes
 * (trainer-shard-learn.c).
 *
 * Every call that communicates is a collective: every rank makes it, in the same order. */
#pragma once

#include "engine/distributed/sharder.h"
#include "engine/model/model.h"
#include "engine/model/optim.h"

G_BEGIN_DECLS

typedef struct CohortShard CohortShard;

/* The shard of `m` (made inside cohort_model_set_creating_sharded(stage)) over comm's ranks;
 * `ema` when the run keeps EMA weights; `device` the CUDA device of a GPU rank (-1 on the
 * CPU). The communicator and the model are borrowed. FALSE (NULL) with an error when memory
 * runs out. */
CohortShard *cohort_shard_new(CohortComm *comm, CohortModel *m, int stage, gboolean ema, int device,
                              GError **error);
void cohort_shard_free(CohortShard *sh);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortShard, cohort_shard_free)

int cohort_shard_stage(const CohortShard *sh);
const CohortShardPlan *cohort_shard_plan(const CohortShard *sh);
CohortSharder *cohort_shard_sharder(const CohortShard *sh);
/* This rank's pieces as optimizer ranges (g_free them), for cohort_optimizer_new_sharded. */
CohortParamRange *cohort_shard_ranges(const CohortShard *sh, guint *n_ranges);
/* The shard buffers: stage 3's parameters (NULL at stage 2), the reduced gradients, the EMA
 * weights (NULL without EMA). */
float *cohort_shard_params(const CohortShard *sh);
float *cohort_shard_grads(const CohortShard *sh);
float *cohort_shard_ema(const CohortShard *sh);
/* Bytes of the shard buffers (parameters, gradients, EMA and the EMA swap's backup). */
size_t cohort_shard_bytes(const CohortShard *sh);

/* ---- start ---- */

/* The family's initial weights from `seed` on every rank, without a broadcast (they are a
 * function of the seed): stage 3 one layer at a time (the family's init_tensor), never the
 * whole model; stage 2, and any stage with a frozen part (whose base is whole on every rank),
 * as stage 0 (cohort_model_init). Buffers too. FALSE with an error when the whole model's
 * memory cannot be committed. */
gboolean cohort_shard_init_weights(CohortShard *sh, guint64 seed, GError **error);
/* After the whole parameters were written into the model (an import, student layers from a
 * teacher, rank 0's broadcast): stage 3 keeps this rank's pieces and gives the memory of what
 * learns back (the frozen base, [n_trainable, n_params), stays whole); stage 2 has nothing to
 * do. */
void cohort_shard_take_params(CohortShard *sh);
/* The EMA weights start as the parameters. */
void cohort_shard_ema_from_params(CohortShard *sh);
/* Stage 3: FALSE with an error naming `source` and the tensor when this rank's pieces hold a
 * NaN or an infinity (cohort_model_check_finite for a shard). Local. */
gboolean cohort_shard_check_finite(const CohortShard *sh, const char *source, GError **error);

/* ---- a step ---- */

/* After the backward passes of a step: multiplies the reduced gradients by `unscale` (fp16's
 * 1/scale, else 1), measures their global norm (this rank's sum of squares, summed over the
 * ranks in float64) and clips to max_norm as cohort_clip_grad_norm_on does. A collective. */
gboolean cohort_shard_clip(CohortShard *sh, float unscale, double max_norm, double *norm,
                           GError **error);
/* The optimizer step on this rank's pieces (`opt` from cohort_shard_ranges), the EMA update of
 * its pieces (ema_decay > 0 with EMA), and at stage 2 the gather of everyone's pieces. A
 * collective at stage 2. */
gboolean cohort_shard_step(CohortShard *sh, CohortOptimizer *opt, const CohortConfig *cfg,
                           double lr, int t, GError **error);

/* ---- evaluation and samples ---- */

/* Puts the EMA weights in place of the parameters (in TRUE) or back (FALSE), for evaluation
 * and samples: stage 3 gathers from the EMA shard instead; stage 2 swaps this rank's pieces
 * and gathers. A collective. */
gboolean cohort_shard_swap_ema(CohortShard *sh, gboolean in, GError **error);
/* After forward-only work: stage 3 lets go of every gathered layer. */
gboolean cohort_shard_release(CohortShard *sh, GError **error);

/* ---- what learns, whole (finetune lora or frozen: trainer-shard-learn.c) ---- */

/* Every rank's pieces of `shard` (shard layout, backend memory) into `full` (the flat vector
 * of what learns, n_trainable floats of backend memory), this rank's own copied in first: one
 * all-gather per unit. A collective; the queue must be idle (between steps). */
gboolean cohort_shard_gather_whole(CohortShard *sh, const float *shard, float *full,
                                   GError **error);
/* The same into `host` (host memory): on a device, one unit at a time through device memory. */
gboolean cohort_shard_gather_to_host(CohortShard *sh, const float *shard, float *host,
                                     GError **error);
/* This rank's pieces of `host` (n_trainable floats of host memory) into `shard` (shard
 * layout, backend memory). Local. */
void cohort_shard_take_whole(const CohortShard *sh, const float *host, float *shard);
/* Stage 3: what learns, [0, n_trainable) of the model's parameters, gathered whole in place
 * (its memory taken) for code that reads the whole model (a save, an export), and let go
 * after; nothing at stage 2, whose parameters are whole. The gather is a collective. */
gboolean cohort_shard_gather_learning(CohortShard *sh, GError **error);
void cohort_shard_let_go_learning(CohortShard *sh);

G_END_DECLS
