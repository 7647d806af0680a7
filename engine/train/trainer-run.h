/* What one run of cohort_train holds, shared by the trainer's files (not installed): set-up
 * (trainer-setup.c), the loop (trainer.c), evaluation, samples, checkpoints and the export
 * (trainer-output.c), and the events (trainer-events.c). */
#pragma once

#include "data/sampler.h"
#include "engine/base/phase.h"
#include "engine/config/rank-batches.h"
#include "engine/model/batch.h"
#include "engine/model/checkpoint.h"
#include "engine/model/distill.h"
#include "engine/model/model.h"
#include "engine/model/optim.h"
#include "engine/train/prefetch.h"
#include "engine/model/data-source.h"
#include "engine/train/teacher.h"
#include "engine/train/trainer-dist.h"
#include "engine/train/trainer-shard.h"
#include "engine/train/trainer-zero.h"
#include "engine/train/trainer.h"

G_BEGIN_DECLS

typedef struct {
  const CohortConfig *cfg;
  CohortConfig *model_cfg; /* cfg with what the data decides filled in (num_classes) */
  const CohortTrainOptions *opts;
  CohortProgress *progress;
  CohortDataSource *train;
  CohortDataSource *val;      /* NULL = no validation */
  CohortTokenizer *tokenizer; /* text through a BPE tokenizer; NULL for byte-level text */
  CohortModel *model;
  CohortTeacher *teacher; /* teacher_from, frozen; NULL without distillation */
  CohortDistill *distill; /* the student's loss against the teacher; NULL without */
  CohortOptimizer *opt;   /* with ZeRO stages 1 to 3, this rank's shard of the state */
  CohortZero *zero;       /* zero_stage 1 with more than one rank; NULL otherwise */
  CohortShard *shard;     /* zero_stage 2 or 3 with more than one rank; NULL otherwise */
  CohortComputeDevice dev;
  const CohortBackend *be; /* dev.be: where parameters, gradients, moments and EMA live */
  float *ema;              /* backend memory; NULL when ema_decay == 0 or with a shard (whose
                              EMA weights are sharded too) */
  float *backup;           /* scratch for swapping EMA weights in for eval/samples */
  float *ema_host;         /* host copy of the EMA for checkpoints on a GPU; NULL on the CPU */
  CohortTrainDist *dist;
  int B, accum; /* B: the most examples a micro-batch of this rank may hold (the model's and the
                   batches' size); accum: gradient_accumulation_steps */
  /* rank_batch_sizes (engine/config/rank-batches.h, trainer-balance.c): every rank's examples per
   * micro-batch now (world entries), this rank's, its first position in each global
   * micro-batch and their sum; `weight` (share × world / global_micro) is what this rank's
   * gradients and losses count for, so the ranks' average weighs every example alike. */
  CohortSplitKind split;
  int *shares;
  int share, share_offset, global_micro;
  float weight;
  struct CohortRankBalance *balance; /* each rank's device; auto's speeds and caps */
  int tokens_per_example;            /* seq_len for token data, 0 for images */
  CohortBatch *batch;       /* evaluation, and training micro-batches when num_workers is 0 */
  CohortBatch *step_batch;  /* the training micro-batch loaded last */
  CohortPrefetch *prefetch; /* num_workers > 0: loader threads */
  GMutex indices_lock;      /* the loader threads share the epochs' example orders */
  GArray *epoch_indices[2]; /* of guint64: this rank's example order of two recent epochs */
  gint64 epoch_of[2];
  gboolean pinned; /* the prefetched batches are in page-locked memory */
  CohortSamplerSpec spec;
  gint64 steps_per_epoch;
  gint64 total_steps;
  int warmup_steps; /* warmup_steps, at most total_steps */
  double base_lr;
  CohortTrainState st;
  double *metrics; /* the last evaluation's values, model->n_metrics */
  gboolean have_metrics;
  double final_loss; /* the last step's loss (NaN before the first) */
  /* Control requests agreed on and not answered yet (CohortControlRequest bits), and whether
   * the sample or checkpoint being made answers one (its event then says "requested"). */
  guint pending_requests;
  gboolean answering_request;
} CohortRankRun;

/* trainer.c: the rank's device, threads and GEMM mode (*threads gets the thread count). */
gboolean cohort_rank_run_prepare_device(CohortRankRun *r, int *threads, GError **error);

/* trainer.c: one training micro-step on r->step_batch, as the trainer and the probe run it.
 * The forward (through distillation when the run distils) with LoRA dropout on for the
 * batch's examples; returns its loss, and distillation's parts into `parts`. */
double cohort_rank_run_forward(CohortRankRun *r, double parts[COHORT_DISTILL_N_PARTS]);
/* Its backward, adding d(loss · scale)/d(params) into the gradients; ends the dropout. */
void cohort_rank_run_backward(CohortRankRun *r, float scale);

/* trainer-resume.c: what rank 0 refuses before anything is prepared (the data tokenized, the
 * model built), agreed by every rank: an export that would replace one of the run's inputs,
 * and a new run in a workspace holding another run's checkpoints (without --resume or
 * --overwrite). */
gboolean cohort_rank_run_check_start(CohortRankRun *r, GError **error);
/* trainer-setup.c: data, model, optimizer, EMA, then a checkpoint or fresh weights. */
gboolean cohort_rank_run_setup(CohortRankRun *r, char **resumed_from, GError **error);
/* trainer-setup.c, for the probe (cohort-train --probe): the same data, model, optimizer and
 * teacher, with fresh weights (the seed's, on every rank), and no workspace preparation,
 * checkpoint or resume. */
gboolean cohort_rank_run_setup_probe(CohortRankRun *r, GError **error);
void cohort_rank_run_free(CohortRankRun *r);
/* Every rank's verdict on something each rank did on its own: TRUE when all succeeded. A rank
 * that failed reports its own `mine` (taken); the others say that a peer failed at `what`. */
gboolean cohort_rank_run_all_ok(CohortRankRun *r, gboolean ok, GError *mine, const char *what,
                                GError **error);
/* trainer-resume.c, for set-up: rank 0 checks that it can write the workspace and removes the
 * temporaries of a save that was killed. */
gboolean cohort_rank_run_prepare_workspace(CohortRankRun *r, GError **error);
/* trainer-resume.c, for set-up: every rank agrees with rank 0 on a checkpoint to resume (then
 * takes its weights, optimizer state and position; *resumed_from gets its folder) or on a
 * fresh start; *keep_scale is TRUE when an fp16 loss scale came from the checkpoint. */
gboolean cohort_rank_run_resume_or_start(CohortRankRun *r, char **resumed_from,
                                         gboolean *keep_scale, GError **error);
/* Starts the loader threads when num_workers > 0 (after set-up, once the device is known:
 * batches are page-locked on GPU ranks with pin_memory). */
gboolean cohort_rank_run_start_loading(CohortRankRun *r, GError **error);
/* Points r->step_batch at micro-batch `micro` (0-based within the epoch) of `epoch`: loaded
 * ahead by the loader threads when num_workers > 0, else now into r->batch; *waited_us gets
 * the time the caller waited for it. FALSE when a data file changed under the run (see
 * cohort_data_source_load). */
gboolean cohort_rank_run_load_micro_batch(CohortRankRun *r, gint64 epoch, gint64 micro,
                                          gint64 *waited_us, GError **error);
/* This rank's sampler (r->spec) for the split in r->shares; the example orders made for the
 * previous one are dropped (the loader threads must be stopped). */
void cohort_rank_run_set_spec(CohortRankRun *r);
void cohort_rank_run_forget_orders(CohortRankRun *r);
/* The loss_norm (engine/model/batch.h) of the step whose first micro-batch is `micro` of
 * `epoch`: the counted targets of its micro-batches on all ranks (a collective: every rank
 * calls it) over accum × world_size. */
gboolean cohort_rank_run_step_norm(CohortRankRun *r, gint64 epoch, gint64 micro, double *norm,
                                   GError **error);
/* Examples one optimizer step consumes across all ranks. */
gint64 cohort_rank_run_global_batch(const CohortRankRun *r);

/* trainer-resume.c: whether a checkpoint's saved config and teacher let this run resume it
 * (the model shape, the teacher's digest). */
gboolean cohort_rank_run_check_saved(CohortRankRun *r, const CohortConfig *saved, const char *ckpt,
                                     GError **error);

/* trainer-shard-io.c, ZeRO stages 2 and 3 (r->shard), collectives: a checkpoint written by
 * every rank (*dir: the folder, on rank 0); a resume where every rank reads its own pieces of
 * `ckpt` after rank 0 checked it (*keep_scale as in cohort_rank_run_resume_or_start); the
 * export of model.safetensors (and the EMA weights' file when ema_path is given). */
gboolean cohort_rank_run_save_sharded(CohortRankRun *r, char **dir, GError **error);
gboolean cohort_rank_run_resume_sharded(CohortRankRun *r, const char *ckpt, gboolean *keep_scale,
                                        GError **error);
gboolean cohort_rank_run_export_sharded(CohortRankRun *r, const char *path, const char *ema_path,
                                        GHashTable *meta, GError **error);

/* trainer-shard-learn.c, ZeRO stages 2 and 3 with finetune lora or frozen (only what learns
 * is sharded, the frozen base is whole on every rank): whether this run is one; what learns
 * gathered whole on every rank (a collective: at stage 3 the parameters in place, until
 * cohort_shard_let_go_learning; with `states`, on rank 0, the optimizer state as a host
 * optimizer of n_trainable floats; the EMA weights, n_params floats with the frozen base);
 * a checkpoint through it, the one stage 0 writes (*dir on rank 0); and at a resume, after
 * rank 0 loaded the checkpoint into `full` and `ema_whole` (NULL elsewhere) and the
 * parameters were broadcast, every rank's pieces of it. */
typedef struct {
  CohortOptimizer *opt;
  float *ema;
} CohortLearningWhole;
gboolean cohort_rank_run_shard_learns(const CohortRankRun *r);
gboolean cohort_rank_run_gather_learning(CohortRankRun *r, gboolean states, CohortLearningWhole *w,
                                         GError **error);
void cohort_learning_whole_clear(CohortLearningWhole *w);
gboolean cohort_rank_run_save_learning(CohortRankRun *r, char **dir, GError **error);
gboolean cohort_rank_run_scatter_learning(CohortRankRun *r, CohortOptimizer *full,
                                          const float *ema_whole, GError **error);

/* trainer-output.c */
gboolean cohort_rank_run_eval(CohortRankRun *r, GError **error);
gboolean cohort_rank_run_sample(CohortRankRun *r, GError **error);
gboolean cohort_rank_run_save_checkpoint(CohortRankRun *r, GError **error);
gboolean cohort_rank_run_export(CohortRankRun *r, char **model_path, GError **error);

/* trainer-balance.c: before set-up, every rank's device (one backend per job: a CPU rank beside
 * GPU ranks is refused), the split the run starts from, and the most each rank may take
 * (checked against each device's memory plan, the rank named when its share does not fit);
 * the probe's even split; after set-up, auto's choice from the ranks' measured speeds (probe.json's
 * when it measured this config, else a few timed passes); after each step, auto's revision
 * every rebalance_every steps; a new split in place (the sampler's shares, the loader). */
gboolean cohort_rank_run_plan_split(CohortRankRun *r, GError **error);
void cohort_rank_run_even_split(CohortRankRun *r);
gboolean cohort_rank_run_balance_start(CohortRankRun *r, GError **error);
gboolean cohort_rank_run_balance_step(CohortRankRun *r, GError **error);
gboolean cohort_rank_run_set_split(CohortRankRun *r, const int *shares, GError **error);
void cohort_rank_run_balance_free(CohortRankRun *r);
/* The capacity of each rank for auto (world entries, the examples its memory holds at most);
 * NULL unless the split is auto. */
const int *cohort_rank_run_split_caps(const CohortRankRun *r);

/* trainer-events.c */
void cohort_rank_run_emit_start(CohortRankRun *r, const char *resumed_from, int threads);

/* The live view of the loop: tokens/s over a short window of recent steps and the ETA. */
typedef struct {
  gint64 t_start;
  gint64 start_step;
  gint64 window_t[10];
  int print_every;
  gboolean matmul_logged; /* cpu_matmul "measure": its choices said once */
} CohortThroughput;

void cohort_throughput_init(CohortThroughput *tp, const CohortRankRun *r);
/* The step event and the status line after a step that ended at monotonic time t1. `parts`
 * (COHORT_DISTILL_N_PARTS values) are the distillation loss's parts, NULL without a teacher. */
void cohort_rank_run_emit_step(CohortRankRun *r, CohortThroughput *tp, gint64 t1, double loss,
                               double norm, double lr, double scale, gboolean skipped,
                               const double *parts);

G_END_DECLS
