/* What a workspace holds of its checkpoints, read without tensors: the folders
 * <workspace>/checkpoints/step-%08d/ (engine/model/checkpoint.h writes and loads them), their
 * state.json, and the run they belong to. The window lists and resumes runs through this alone,
 * so it links no model, kernel or BLAS library. */
#pragma once

#include <stdio.h>
#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

/* The two files of a complete checkpoint folder. */
#define COHORT_CHECKPOINT_MODEL_FILE "model.safetensors"
#define COHORT_CHECKPOINT_STATE_FILE "state.json"

/* The newest state.json version this build reads: 1, a checkpoint holding the whole model;
 * 2, one of finetune lora or frozen holding only what learns plus a reference to its base
 * (base_sha256, frozen_sha256 below; docs/finetuning.md). A save writes the lowest version
 * that describes it, so full checkpoints stay readable by older builds. */
#define COHORT_CHECKPOINT_VERSION 2

#define COHORT_CHECKPOINT_ERROR (cohort_checkpoint_error_quark())
GQuark cohort_checkpoint_error_quark(void);
typedef enum {
  COHORT_CHECKPOINT_ERROR_IO,       /* cannot create, write, read or rename */
  COHORT_CHECKPOINT_ERROR_CORRUPT,  /* state.json malformed, sha256 mismatch, truncated */
  COHORT_CHECKPOINT_ERROR_MISMATCH, /* a valid checkpoint of another model or optimizer */
} CohortCheckpointError;

/* How the checkpoint code (here, checkpoint-state.c, engine/model/checkpoint.c) reports a file:
 * COHORT_CHECKPOINT_ERROR_CORRUPT with "`path`: <message>", and COHORT_CHECKPOINT_ERROR_IO
 * with "`path`: cannot `what`: <strerror(err)>". Both return FALSE. */
gboolean cohort_checkpoint_corrupt(GError **error, const char *path, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
gboolean cohort_checkpoint_io_error(GError **error, const char *path, const char *what, int err);

/* Length of a run id: 32 lowercase hex digits (128 random bits) and the terminator. */
#define COHORT_RUN_ID_LEN 33

/* Where training stands; what resuming needs besides the tensors. */
typedef struct {
  gint64 step;           /* optimizer steps done */
  gint64 epoch;          /* current epoch of the sampler */
  gint64 batch_in_epoch; /* micro-batches of the epoch already consumed */
  gint64 tokens_seen;    /* tokens (or examples, for image models) consumed so far */
  guint64 sample_rng;    /* state of the sampling (text generation) RNG */
  /* fp16's dynamic loss scaling (1, 0, 0 in other precisions). A checkpoint without these
   * (written before they existed) loads them as 0, 0, 0: the trainer then starts the scale
   * afresh from loss_scale_init. */
  double loss_scale;       /* the scale the next step multiplies the loss by */
  gint64 scale_good_steps; /* steps in a row without overflow since the scale last changed */
  gint64 skipped_steps;    /* steps whose update was skipped (overflow); AdamW's count skips them */
  /* The run this checkpoint belongs to ("" in checkpoints written before runs had ids). */
  char run_id[COHORT_RUN_ID_LEN];
  /* The global batch (examples per optimizer step) and the examples of the current epoch
   * consumed across all ranks (a prefix of the epoch's permutation), so a resume with another
   * batch size or world size can map the position; 0 in checkpoints written before. The
   * state.json member keeps its older name, "epoch_samples". */
  gint64 global_batch;
  gint64 epoch_samples;
  /* The sha256 of the distillation teacher's weights ("" without a teacher, and in checkpoints
   * written before distillation): a resume refuses another teacher. */
  char teacher_sha256[65];
  /* finetune lora or frozen (docs/finetuning.md): the checkpoint holds only what learns, and
   * its base is rebuilt on resume. base_sha256 is the sha256 of the file init_from read (""
   * for a base made from the seed); frozen_sha256 the sha256 of the frozen part of the
   * parameter vector as the run started (float32 bytes), "" in a checkpoint of the whole
   * model. */
  char base_sha256[65];
  char frozen_sha256[65];
} CohortTrainState;

/* A new run id: 128 bits from the system's random source, as 32 hex digits. */
void cohort_run_id_new(char out[COHORT_RUN_ID_LEN]);

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

/* Complete checkpoint folders under `ckdir` (a workspace's checkpoints/ folder), by increasing
 * step, as paths (g_ptr_array_unref the result). */
GPtrArray *cohort_checkpoint_list(const char *ckdir);

/* The run id checkpoint folder `dir` records ("" when none or unreadable). */
void cohort_checkpoint_run_id(const char *dir, char out[COHORT_RUN_ID_LEN]);

/* The text of the state.json file `path` (a regular file of at most 16 MiB); *len gets its
 * length. g_free the result. */
char *cohort_checkpoint_read_state_text(const char *path, gsize *len, GError **error);

G_END_DECLS
