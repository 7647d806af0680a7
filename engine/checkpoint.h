/* Checkpoints: a folder <workspace>/checkpoints/step-%08d/ holding
 *   model.safetensors  parameters under Hugging Face GPT-2 names, EMA weights under
 *                      "ema.<name>" when present, AdamW moments under "optim.m.<name>" and
 *                      "optim.v.<name>";
 *   state.json         version, step, epoch, batch_in_epoch, tokens_seen, sample_rng (a
 *                      uint64 as a string), the config as a JSON object, and the sha256 of
 *                      model.safetensors.
 * A checkpoint is written into step-%08d.tmp/, its files synced, the folder renamed and the
 * parent synced, so a kill at any moment leaves either the complete checkpoint or none.
 * Only complete folders (no suffix, both files present) count as checkpoints. */
#pragma once

#include <glib.h>
#include "engine/config.h"
#include "engine/gpt.h"
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

/* Where training stands; what resuming needs besides the tensors. */
typedef struct {
  gint64 step;           /* optimizer steps done */
  gint64 epoch;          /* current epoch of the sampler */
  gint64 batch_in_epoch; /* batches of the epoch already consumed */
  gint64 tokens_seen;
  guint64 sample_rng; /* state of the sampling (text generation) RNG */
  /* fp16's dynamic loss scaling (1, 0, 0 in other precisions). A checkpoint without these
   * (written before they existed) loads them as 0, 0, 0: the trainer then starts the scale
   * afresh from loss_scale_init. */
  double loss_scale;       /* the scale the next step multiplies the loss by */
  gint64 scale_good_steps; /* steps in a row without overflow since the scale last changed */
  gint64 skipped_steps;    /* steps whose update was skipped (overflow); AdamW's count skips them */
} CohortTrainState;

/* Saves a checkpoint for st->step under `workspace` (the folders are created). `opt` may be
 * NULL (no moments saved); its moments must have cohort_gpt_num_params entries. `ema_or_NULL`
 * is HOST memory laid out like the parameters. The model's parameters and the moments may
 * live in any backend's memory (they are downloaded). After the rename, complete checkpoints beyond
 * the newest `keep_last` are removed (0 = keep all), and stale .tmp folders too. A checkpoint of
 * the same step is replaced. *out_dir (may be NULL) gets the folder; g_free it. */
gboolean cohort_checkpoint_save(const char *workspace, const CohortConfig *cfg,
                                const CohortGpt *gpt, CohortAdamW *opt, const float *ema_or_NULL,
                                const CohortTrainState *st, int keep_last, char **out_dir,
                                GError **error);

/* The folder of the complete checkpoint with the highest step under `workspace`, or NULL
 * when there is none. g_free the result. */
char *cohort_checkpoint_find_latest(const char *workspace);

/* Loads the checkpoint folder `dir`: checks the sha256 of model.safetensors against
 * state.json and every tensor's shape against the model, then fills the parameters, the
 * moments (when `opt` is given; the checkpoint must have them), `ema_or_NULL` (from "ema.*";
 * a copy of the parameters when the checkpoint has no EMA), *st and *saved_cfg (may be
 * NULL; cohort_config_free it). `ema_or_NULL` is HOST memory; parameters and moments go to
 * their backend's memory (uploaded when that is not the host). Nothing is changed on error;
 * errors are one line naming the file. */
gboolean cohort_checkpoint_load(const char *dir, CohortGpt *gpt, CohortAdamW *opt,
                                float *ema_or_NULL, CohortTrainState *st, CohortConfig **saved_cfg,
                                GError **error);

G_END_DECLS
