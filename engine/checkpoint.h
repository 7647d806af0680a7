/* Checkpoints of any model (engine/model.h): a folder <workspace>/checkpoints/step-%08d/
 * holding
 *   model.safetensors  parameters and buffers under the model's names, EMA weights under
 *                      "ema.<name>" when present, the optimizer's state under its prefixes
 *                      (AdamW: "optim.m.<name>" and "optim.v.<name>");
 *   state.json         version, run_id, step, epoch, batch_in_epoch, global_batch,
 *                      tokens_seen, sample_rng (a uint64 as a string), fp16 loss-scale state,
 *                      the config as a JSON object, the sha256 of model.safetensors, and for
 *                      a distillation the teacher's folder and the sha256 of its weights
 *                      (teacher_path, teacher_sha256; engine/checkpoint-state.c).
 * A distillation teacher is never part of a checkpoint: only its path and digest are.
 * A checkpoint is written into step-%08d.tmp/, its files synced, the folder renamed and the
 * parent synced, so a kill at any moment leaves either the complete checkpoint or none.
 * Only complete folders (no suffix, both files present) count as checkpoints. */
#pragma once

#include <glib.h>
#include "engine/config.h"
#include "engine/model.h"
#include "engine/optim.h"

G_BEGIN_DECLS

#define COHORT_CHECKPOINT_VERSION 1

#define COHORT_CHECKPOINT_ERROR (cohort_checkpoint_error_quark())
GQuark cohort_checkpoint_error_quark(void);
typedef enum {
  COHORT_CHECKPOINT_ERROR_IO,       /* cannot create, write, read or rename */
  COHORT_CHECKPOINT_ERROR_CORRUPT,  /* state.json malformed, sha256 mismatch, truncated */
  COHORT_CHECKPOINT_ERROR_MISMATCH, /* a valid checkpoint of another model or optimizer */
} CohortCheckpointError;

/* Length of a run id: 32 lowercase hex digits (128 random bits) and the terminator. */
#define COHORT_RUN_ID_LEN 33

/* Where training stands; what resuming needs besides the tensors. */
typedef struct {
  gint64 step;           /* optimizer steps done */
  gint64 epoch;          /* current epoch of the sampler */
  gint64 batch_in_epoch; /* micro-batches of the epoch already consumed */
  gint64 tokens_seen;    /* tokens (or samples, for image models) consumed so far */
  guint64 sample_rng;    /* state of the sampling (text generation) RNG */
  /* fp16's dynamic loss scaling (1, 0, 0 in other precisions). A checkpoint without these
   * (written before they existed) loads them as 0, 0, 0: the trainer then starts the scale
   * afresh from loss_scale_init. */
  double loss_scale;       /* the scale the next step multiplies the loss by */
  gint64 scale_good_steps; /* steps in a row without overflow since the scale last changed */
  gint64 skipped_steps;    /* steps whose update was skipped (overflow); AdamW's count skips them */
  /* The run this checkpoint belongs to ("" in checkpoints written before runs had ids). */
  char run_id[COHORT_RUN_ID_LEN];
  /* The global batch (samples per optimizer step) and the samples of the current epoch
   * consumed across all ranks (a prefix of the epoch's permutation), so a resume with another
   * batch size or world size can map the position; 0 in checkpoints written before. */
  gint64 global_batch;
  gint64 epoch_samples;
  /* The sha256 of the distillation teacher's weights ("" without a teacher, and in checkpoints
   * written before distillation): a resume refuses another teacher. */
  char teacher_sha256[65];
} CohortTrainState;

/* A new run id: 128 bits from the system's random source, as 32 hex digits. */
void cohort_run_id_new(char out[COHORT_RUN_ID_LEN]);

/* Saves a checkpoint for st->step under `workspace` (the folders are created). `opt` may be
 * NULL (no optimizer state saved); its state must cover all the model's parameters (not a
 * ZeRO shard: gather it first, engine/trainer-zero.h).
 * `ema_or_NULL` is HOST memory laid out like the parameters. The model's parameters, buffers
 * and the optimizer state may live in any backend's memory (they are downloaded). After the
 * rename, complete checkpoints of the same run (st->run_id) beyond its newest `keep_last` are
 * removed (0 = keep all) — never another run's — and stale .tmp folders too. A checkpoint of
 * the same step is replaced. *out_dir (may be NULL) gets the folder; g_free it. */
gboolean cohort_checkpoint_save(const char *workspace, const CohortConfig *cfg,
                                const CohortModel *model, CohortOptimizer *opt,
                                const float *ema_or_NULL, const CohortTrainState *st, int keep_last,
                                char **out_dir, GError **error);

/* The folder of the complete checkpoint with the highest step under `workspace`, or NULL
 * when there is none. g_free the result. */
char *cohort_checkpoint_find_latest(const char *workspace);

/* How many complete checkpoints `workspace` holds, and (when `run_id` is not NULL) the run id
 * of the newest one ("" when it has none). */
guint cohort_checkpoint_count(const char *workspace, char run_id[COHORT_RUN_ID_LEN]);

/* Reads and validates only state.json of checkpoint folder `dir` (no tensors): *st and
 * *saved_cfg (may be NULL). Errors name the file and the field. */
gboolean cohort_checkpoint_read_state(const char *dir, CohortTrainState *st,
                                      CohortConfig **saved_cfg, GError **error);

/* Loads the checkpoint folder `dir`: checks the sha256 of model.safetensors against
 * state.json and every tensor's shape against the model, then fills the parameters and
 * buffers, the optimizer state (when `opt` is given; the checkpoint must have it),
 * `ema_or_NULL` (from "ema.*"; a copy of the parameters when the checkpoint has no EMA), *st
 * and *saved_cfg (may be NULL; cohort_config_free it). `ema_or_NULL` is HOST memory; the rest
 * goes to its backend's memory (uploaded when that is not the host). Nothing is changed on
 * error; errors are one line naming the file. */
gboolean cohort_checkpoint_load(const char *dir, CohortModel *model, CohortOptimizer *opt,
                                float *ema_or_NULL, CohortTrainState *st, CohortConfig **saved_cfg,
                                GError **error);

G_END_DECLS
