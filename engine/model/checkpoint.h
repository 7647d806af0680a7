/* Checkpoints of any model (engine/model/model.h): a folder <workspace>/checkpoints/step-%08d/
 * holding
 *   model.safetensors  parameters and buffers under the model's names, EMA weights under
 *                      "ema.<name>" when present, the optimizer's state under its prefixes
 *                      (AdamW: "optim.m.<name>" and "optim.v.<name>");
 *   state.json         version, run_id, step, epoch, batch_in_epoch, global_batch,
 *                      tokens_seen, sample_rng (a uint64 as a string), fp16 loss-scale state,
 *                      the config as a JSON object, the sha256 of model.safetensors, and for
 *                      a distillation the teacher's folder and the sha256 of its weights
 *                      (teacher_path, teacher_sha256; engine/progress/checkpoint-state.c).
 * A distillation teacher is never part of a checkpoint: only its path and digest are.
 * With finetune lora or frozen (st->frozen_sha256 set, engine/model/checkpoint-base.h) the
 * base is not part of it either: model.safetensors holds the train table alone (adapters and
 * `trainable` tensors), the buffers, the EMA and optimizer state of the train table, and
 * state.json (version 2) the base's reference: base_path and base_sha256 (the init_from file;
 * absent for a base made from the seed), adapter_path (adapter_from, for the record) and
 * frozen_sha256. Loading one needs its base rebuilt in the model first
 * (cohort_checkpoint_rebuild_base).
 * A checkpoint is written into step-%08d.tmp/, its files synced, the folder renamed and the
 * parent synced, so a kill at any moment leaves either the complete checkpoint or none.
 * Replacing an existing step (a resumed run reaching it again) exchanges the two folders in
 * one atomic rename, and pruning renames a folder to a .tmp name before deleting it, so there
 * is never a moment without the complete checkpoints a resume may need, and never a
 * half-deleted folder under a checkpoint's name (checkpoint.c says how in detail).
 * Only complete folders (no suffix, both files present) count as checkpoints. */
#pragma once

#include <glib.h>
#include "engine/config/config.h"
#include "engine/model/model.h"
#include "engine/model/optim.h"
#include "engine/progress/workspace.h"

G_BEGIN_DECLS

/* Saves a checkpoint for st->step under `workspace` (the folders are created). `opt` may be
 * NULL (no optimizer state saved); its state must cover all the model's parameters (not a
 * ZeRO shard: gather it first, engine/train/trainer-zero.h).
 * `ema_or_NULL` is HOST memory laid out like the parameters. The model's parameters, buffers
 * and the optimizer state may live in any backend's memory (they are downloaded). After the
 * rename, complete checkpoints of the same run (st->run_id) beyond its newest `keep_last` are
 * removed (0 = keep all) — never another run's. A checkpoint of the same step is replaced. *out_dir
 * (may be NULL) gets the folder; g_free it. */
gboolean cohort_checkpoint_save(const char *workspace, const CohortConfig *cfg,
                                const CohortModel *model, CohortOptimizer *opt,
                                const float *ema_or_NULL, const CohortTrainState *st, int keep_last,
                                char **out_dir, GError **error);

/* Puts right what a crash during a save or a prune left in `workspace`'s checkpoints/: a
 * step-N.tmp (or step-N.old.tmp) that is complete while step-N is missing becomes step-N (a
 * replacement interrupted between its renames), then every other step-*.tmp folder and every
 * step-N that cannot be loaded and holds nothing but a checkpoint's files is removed. Run
 * before choosing a checkpoint to resume (and at each save). Appends one line per change to
 * `notes` (may be NULL); returns how many folders were removed. */
guint cohort_checkpoint_recover(const char *workspace, GPtrArray *notes);

/* Writes a checkpoint's model.safetensors at `path` (in the temporary folder) when the tensors
 * are spread over ranks (ZeRO stages 2 and 3): the file cohort_checkpoint_save would write
 * (engine/model/group-file.h makes it). */
typedef gboolean (*CohortCheckpointWriteFunc)(const char *path, gpointer data, GError **error);

/* cohort_checkpoint_save with model.safetensors made by `write` (has_ema and has_opt: what it
 * holds, for state.json); the folder, its atomic rename and the pruning are the same. */
gboolean cohort_checkpoint_save_with(const char *workspace, const CohortConfig *cfg,
                                     CohortCheckpointWriteFunc write, gpointer data,
                                     gboolean has_ema, gboolean has_opt, const CohortTrainState *st,
                                     int keep_last, char **out_dir, GError **error);

/* Loads the checkpoint folder `dir`: checks the sha256 of model.safetensors against
 * state.json, every tensor's shape against the model and, for a checkpoint of what learns,
 * that the model's frozen weights (its rebuilt base) have the sha256 state.json records, whose
 * values then fill what the file lacks (parameters and EMA); then fills the parameters and
 * buffers, the optimizer state (when `opt` is given; the checkpoint must have it),
 * `ema_or_NULL` (from "ema.*"; a copy of the parameters when the checkpoint has no EMA), *st
 * and *saved_cfg (may be NULL; cohort_config_free it). `ema_or_NULL` is HOST memory; the rest
 * goes to its backend's memory (uploaded when that is not the host). Nothing is changed on
 * error; errors are one line naming the file. */
gboolean cohort_checkpoint_load(const char *dir, CohortModel *model, CohortOptimizer *opt,
                                float *ema_or_NULL, CohortTrainState *st, CohortConfig **saved_cfg,
                                GError **error);

/* What cohort_checkpoint_load checks before it reads (state.json, the sha256 of
 * model.safetensors, every tensor's shape, the optimizer's state present when `opt` is given,
 * whose state prefixes are all it uses: it may be a shard), reading no tensor: for a resume
 * where each rank then reads its own part of the file (ZeRO stages 2 and 3). */
gboolean cohort_checkpoint_verify(const char *dir, const CohortModel *model, CohortOptimizer *opt,
                                  gboolean want_ema, CohortTrainState *st, CohortConfig **saved_cfg,
                                  GError **error);

G_END_DECLS
