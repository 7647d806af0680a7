/* Where a run starts, agreed by every rank: rank 0 prepares the workspace and chooses a
 * checkpoint to resume (or a fresh start, or a refusal to mix runs); it loads the checkpoint and
 * the others receive its state by broadcast, so a resume gives the same numbers as not stopping. */
#include "engine/train/trainer-run.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/launch/launch-plan.h"

#include "engine/model/checkpoint-base.h"
#include "engine/model/lora-io.h"
#include "engine/model/model-io.h"
#include "engine/train/run-outputs.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"

/* A checkpoint continues only with the teacher it was trained with (or without one). */
static gboolean same_teacher(CohortRankRun *r, const char *ckpt, GError **error)
{
  const char *now = r->teacher ? r->teacher->sha256 : "";
  const char *then = r->st.teacher_sha256;
  if (strcmp(now, then) == 0)
    return TRUE;
  if (!*now)
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: the checkpoint was distilled from a teacher (sha256 %s) but teacher_from is "
                "\"\"; resume needs the teacher the run started with",
                ckpt, then);
  else if (!*then)
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: the checkpoint was trained without a teacher but teacher_from is %s; resume "
                "needs the run's own objective (to distil from it, start a new run with "
                "init_from)",
                ckpt, r->teacher->dir);
  else
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "teacher_from %s: %s has sha256 %s but checkpoint %s was trained with a teacher "
                "of sha256 %s; resume needs the teacher the run started with",
                r->teacher->dir, r->teacher->weights, now, ckpt, then);
  return FALSE;
}

/* The config keys a checkpoint must share with the run resuming it. */
static gboolean same_shape(const CohortConfig *saved, const CohortConfig *cfg, const char *ckpt,
                           GError **error)
{
  static const char *const shape_keys[] = {"model",  "n_layer", "n_head",
                                           "n_embd", "seq_len", "vocab_size"};
  for (guint i = 0; i < G_N_ELEMENTS(shape_keys); i++) {
    g_autofree char *a = cohort_config_get(saved, shape_keys[i]);
    g_autofree char *b = cohort_config_get(cfg, shape_keys[i]);
    if (g_strcmp0(a, b) != 0) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: checkpoint has %s = %s but the config has %s; resume needs the same "
                  "model shape",
                  ckpt, shape_keys[i], a, b);
      return FALSE;
    }
  }
  /* finetune lora: the adapters' keys too. Another rank or other targets would not match
   * the checkpoint's tensors; another lora_alpha would, and scale every adapter's update
   * silently by another factor. */
  static const char *const lora_keys[] = {"lora_rank", "lora_alpha", "lora_rslora", "lora_targets"};
  for (guint i = 0; saved->finetune == COHORT_FINETUNE_LORA &&
                    cfg->finetune == COHORT_FINETUNE_LORA && i < G_N_ELEMENTS(lora_keys);
       i++) {
    g_autofree char *a = cohort_config_get(saved, lora_keys[i]);
    g_autofree char *b = cohort_config_get(cfg, lora_keys[i]);
    if (g_strcmp0(a, b) != 0)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "%s: checkpoint has %s = %s but the config has %s; resume needs the "
                         "adapters the checkpoint was trained with (allowed: %s = %s)",
                         ckpt, lora_keys[i], a, b, lora_keys[i], a);
  }
  return TRUE;
}

gboolean cohort_rank_run_check_saved(CohortRankRun *r, const CohortConfig *saved, const char *ckpt,
                                     GError **error)
{
  return same_shape(saved, r->cfg, ckpt, error) && same_teacher(r, ckpt, error);
}

/* What a run starts from; rank 0 decides, everyone follows. */
typedef enum { START_FRESH, START_RESUME, START_REFUSED } StartKind;

/* What a finished or stopped run left in its workspace (not the shared events file, the
 * per-run TensorBoard folders or the data cache): --overwrite moves these aside. */
static const char *const run_outputs[] = {
    "checkpoints",
    "model.safetensors",
    "model-ema.safetensors",
    "config.json",
    "cohort-config.json",
    "classes.json",
    "samples",
    NULL,
};

/* --overwrite: the previous run's outputs go to <workspace>/previous/<its run id>/, never
 * deleted. */
static gboolean move_aside(const char *ws, GError **error)
{
  char id[COHORT_RUN_ID_LEN];
  cohort_checkpoint_count(ws, id);
  g_autoptr(GDateTime) now = g_date_time_new_now_local();
  g_autofree char *name = id[0] ? g_strdup(id) : g_date_time_format(now, "%Y%m%d-%H%M%S");
  g_autofree char *dest = g_build_filename(ws, "previous", name, NULL);
  if (g_mkdir_with_parents(dest, 0755) != 0) {
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: cannot create: %s", dest,
                g_strerror(errno));
    return FALSE;
  }
  for (guint i = 0; run_outputs[i]; i++) {
    g_autofree char *from = g_build_filename(ws, run_outputs[i], NULL);
    g_autofree char *to = g_build_filename(dest, run_outputs[i], NULL);
    if (g_file_test(from, G_FILE_TEST_EXISTS) && g_rename(from, to) != 0) {
      g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                  "%s: cannot move it to %s: %s", from, to, g_strerror(errno));
      return FALSE;
    }
  }
  return TRUE;
}

/* A new run beside an old one's checkpoints would mix the two (and --resume auto would later
 * pick the other run): never start one silently. */
static gboolean refuse_mixing(const CohortConfig *cfg, const char *latest, GError **error)
{
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "%s already holds checkpoints of an earlier run (latest: %s); continue it "
                     "with --resume auto, start a new run with another workspace_dir, or pass "
                     "--overwrite to move the earlier run to %s/previous/",
                     cfg->workspace_dir, latest, cfg->workspace_dir);
}

/* Rank 0: a checkpoint to resume, a fresh start, or a refusal to mix runs. */
static StartKind choose_start(CohortRankRun *r, char **ckpt, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const char *resume = r->opts->resume;
  if (resume && g_str_equal(resume, "auto")) {
    *ckpt = cohort_checkpoint_find_latest(cfg->workspace_dir);
    if (!*ckpt)
      cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "no checkpoint in %s: starting a new run",
                          cfg->workspace_dir);
    return *ckpt ? START_RESUME : START_FRESH;
  }
  if (resume) {
    *ckpt = g_strdup(resume);
    return START_RESUME;
  }
  g_autofree char *latest = cohort_checkpoint_find_latest(cfg->workspace_dir);
  if (!latest)
    return START_FRESH;
  if (r->opts->overwrite) {
    if (!move_aside(cfg->workspace_dir, error))
      return START_REFUSED;
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "--overwrite: the previous run in %s moved to %s/previous/",
                        cfg->workspace_dir, cfg->workspace_dir);
    return START_FRESH;
  }
  refuse_mixing(cfg, latest, error);
  return START_REFUSED;
}

gboolean cohort_rank_run_check_start(CohortRankRun *r, GError **error)
{
  GError *local = NULL;
  gboolean ok = TRUE;
  if (r->opts->rank == 0) {
    ok = cohort_run_check_outputs(r->cfg, &local);
    g_autofree char *latest = ok && !r->opts->resume && !r->opts->overwrite
                                  ? cohort_checkpoint_find_latest(r->cfg->workspace_dir)
                                  : NULL;
    if (latest)
      ok = refuse_mixing(r->cfg, latest, &local);
  }
  return cohort_rank_run_all_ok(r, ok, local, "start", error);
}

/* Rank 0 reads the checkpoint; the others get everything from it by broadcast, so resuming
 * needs the checkpoint on rank 0's machine only. */
static gboolean load_on_rank0(CohortRankRun *r, const char *ckpt, CohortOptimizer *opt,
                              float *ema_whole, gboolean *keep_scale, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  size_t n = r->model->n_params;
  g_autoptr(CohortConfig) saved = NULL;
  float *ema_load = ema_whole ? ema_whole : r->ema_host ? r->ema_host : r->ema;
  if (!opt) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: out of host memory for the optimizer state of %zu parameters, which rank 0 "
                "reads whole before handing each rank its shard (zero_stage %d)",
                ckpt, r->model->n_trainable, r->cfg->zero_stage);
    return FALSE;
  }
  /* The shape first: a checkpoint of what learns rebuilds its base into this model. */
  CohortTrainState peek = {0};
  g_autoptr(CohortConfig) peek_cfg = NULL;
  if (!cohort_checkpoint_read_state(ckpt, &peek, &peek_cfg, error) ||
      !same_shape(peek_cfg, cfg, ckpt, error) ||
      !cohort_checkpoint_rebuild_base(ckpt, r->model, cfg->init_from ? cfg->init_from : "", error))
    return FALSE;
  if (!cohort_checkpoint_load(ckpt, r->model, opt, ema_load, &r->st, &saved, error) ||
      !same_teacher(r, ckpt, error))
    return FALSE;
  if (r->ema_host)
    r->be->upload(r->ema, r->ema_host, n * sizeof(float));
  *keep_scale = saved->precision == COHORT_PRECISION_FP16 && r->st.loss_scale > 0;
  if (r->ema && !saved->ema_decay)
    r->be->copy(r->ema, r->model->params, n * sizeof(float));
  /* A checkpoint from before runs had ids continues as a run of its own from here. */
  if (!r->st.run_id[0])
    cohort_run_id_new(r->st.run_id);
  return TRUE;
}

/* `full`: with ZeRO stage 1 (and stages 2 and 3 with a frozen part), rank 0's copy of the
 * whole state read from the checkpoint (NULL elsewhere); each rank takes its shard of it. */
static gboolean broadcast_state(CohortRankRun *r, CohortOptimizer *full, gboolean *keep_scale,
                                GError **error)
{
  CohortModel *m = r->model;
  struct {
    CohortTrainState st;
    int keep_scale;
  } rec = {r->st, *keep_scale};
  if (!cohort_train_dist_broadcast_host(r->dist, &rec, sizeof rec, error) ||
      !cohort_train_dist_broadcast_params(r->dist, m->params, m->n_params, error) ||
      (m->n_buffer_floats > 0 &&
       !cohort_train_dist_broadcast_params(r->dist, m->buffer_data, m->n_buffer_floats, error)) ||
      (r->ema && !cohort_train_dist_broadcast_params(r->dist, r->ema, m->n_params, error)))
    return FALSE;
  if (r->zero && !cohort_zero_scatter_state(r->zero, full, r->opt, error))
    return FALSE;
  for (guint i = 0; !r->zero && !r->shard && i < cohort_optimizer_n_states(r->opt); i++)
    if (!cohort_train_dist_broadcast_params(r->dist, cohort_optimizer_state(r->opt, i),
                                            m->n_trainable, error))
      return FALSE;
  r->st = rec.st;
  *keep_scale = rec.keep_scale;
  return TRUE;
}

/* The position fields of a checkpoint's state.json, checked against each other and against
 * the data before they are used: the epoch consumed at most all its examples (padded to the
 * world size, which is at most the global batch), in whole steps, and batch_in_epoch is those
 * steps times a possible accumulation. */
static gboolean position_valid(const CohortRankRun *r, const char *ckpt, GError **error)
{
  const CohortTrainState *st = &r->st;
  if (st->global_batch == 0)
    return TRUE; /* an early checkpoint: map_position checks what it has */
  gint64 steps = st->epoch_samples / st->global_batch;
  gint64 accum = steps > 0 ? st->batch_in_epoch / steps : 0;
  gboolean ok = st->epoch_samples % st->global_batch == 0 &&
                st->epoch_samples <= (gint64)r->spec.n + st->global_batch &&
                (steps == 0 ? st->batch_in_epoch == 0
                            : st->batch_in_epoch % steps == 0 && accum >= 1 && accum <= 4096 &&
                                  st->global_batch % accum == 0);
  if (!ok)
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s/state.json: \"epoch_samples\" %" G_GINT64_FORMAT
                ", \"batch_in_epoch\" %" G_GINT64_FORMAT " and \"global_batch\" %" G_GINT64_FORMAT
                " do not describe a position in an epoch of %" G_GUINT64_FORMAT
                " samples; the checkpoint is damaged",
                ckpt, st->epoch_samples, st->batch_in_epoch, st->global_batch, (guint64)r->spec.n);
  return ok;
}

/* Where in the epoch a resumed run continues. The examples an epoch has consumed are a prefix
 * of its permutation whatever the world size, so a checkpoint from another batch or world size
 * continues after the same prefix, rounded down to a whole step of the new plan. */
static gboolean map_position(CohortRankRun *r, const char *ckpt, GError **error)
{
  CohortTrainState *st = &r->st;
  gint64 gb = cohort_rank_run_global_batch(r);
  if (!position_valid(r, ckpt, error))
    return FALSE;
  if (st->global_batch == 0) {
    /* Written before checkpoints recorded their batch: only the same layout can continue. */
    if (st->batch_in_epoch % r->accum != 0 || st->batch_in_epoch / r->accum >= r->steps_per_epoch) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s/state.json: the position (micro-batch %" G_GINT64_FORMAT
                  " of epoch %" G_GINT64_FORMAT ") does not fit this run's %" G_GINT64_FORMAT
                  " steps per epoch, and the checkpoint was written before checkpoints recorded "
                  "their batch size; resume it with the batch_size, gradient_accumulation_steps "
                  "and number of processes it was written with",
                  ckpt, st->batch_in_epoch, st->epoch, r->steps_per_epoch);
      return FALSE;
    }
    st->epoch_samples = st->batch_in_epoch / r->accum * gb;
  } else if (st->global_batch != gb) {
    gint64 steps = st->epoch_samples / gb;
    gint64 again = st->epoch_samples - steps * gb;
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "resuming with a global batch of %" G_GINT64_FORMAT
                        " (the checkpoint used %" G_GINT64_FORMAT "): epoch %" G_GINT64_FORMAT
                        " continues after %" G_GINT64_FORMAT " of its samples%s",
                        gb, st->global_batch, st->epoch, steps * gb,
                        again ? ", and the few before that are seen again" : "");
  }
  gint64 steps = st->epoch_samples / gb;
  if (steps >= r->steps_per_epoch) {
    st->epoch++;
    steps = 0;
  }
  st->batch_in_epoch = steps * r->accum;
  st->epoch_samples = steps * gb;
  st->global_batch = gb;
  return TRUE;
}

/* ZeRO stage 3 without init_from or teacher layers: every rank computes the initial weights
 * of its pieces, one layer at a time (they are a function of the seed: no broadcast). */
static gboolean start_fresh_sharded(CohortRankRun *r, GError **error)
{
  cohort_shard_init_weights(r->shard, (guint64)r->cfg->seed);
  if (r->model->n_buffer_floats > 0 &&
      !cohort_train_dist_broadcast_params(r->dist, r->model->buffer_data, r->model->n_buffer_floats,
                                          error))
    return FALSE;
  cohort_shard_ema_from_params(r->shard);
  cohort_run_id_new(r->st.run_id);
  return cohort_train_dist_broadcast_host(r->dist, r->st.run_id, sizeof r->st.run_id, error);
}

static gboolean start_fresh(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  gboolean from_teacher = cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS;
  gboolean imported = cfg->init_from && *cfg->init_from;
  /* With finetune lora or frozen the base is whole on every rank and the run's checkpoints
   * name it (cohort_checkpoint_base_init): the whole start below. */
  if (r->shard && cohort_shard_stage(r->shard) == 3 && !imported && !from_teacher &&
      !cohort_rank_run_shard_learns(r))
    return start_fresh_sharded(r, error);
  /* Otherwise the whole model is written here (at stage 3 into its reserved range, for the
   * start only), and each rank keeps its pieces after the broadcast. The family's
   * initialisation, then init_from's tensors over it: a file may leave some (a classifier for
   * another class count) to the initialisation; LoRA's adapters fresh (PEFT's). */
  cohort_model_init(r->model, (guint64)cfg->seed);
  if (imported) {
    g_autofree char *init_path = cohort_resolve_path(cfg->init_from);
    g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
    if (!cohort_model_import(r->model, init_path, notes, error) ||
        !cohort_model_check_finite(r->model, init_path, error))
      return FALSE;
    for (guint i = 0; i < notes->len; i++)
      cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "init_from %s: %s", init_path,
                          (const char *)notes->pdata[i]);
    /* An import writes the whole parameter vector, adapters' places included: fresh again. */
    cohort_lora_init(r->model, (guint64)cfg->seed);
  }
  if (cfg->adapter_from && *cfg->adapter_from) {
    g_autofree char *adapter_path = cohort_resolve_path(cfg->adapter_from);
    if (!cohort_lora_load(r->model, adapter_path, error))
      return FALSE;
  }
  if (from_teacher &&
      !cohort_distill_copy_teacher_layers(r->model, r->model_cfg->n_layer, r->teacher->model,
                                          r->teacher->cfg->n_layer, error))
    return FALSE;
  /* Every rank starts from rank 0's weights (and buffers), as DDP's constructor does. */
  if (!cohort_train_dist_broadcast_params(r->dist, r->model->params, r->model->n_params, error))
    return FALSE;
  if (r->shard) {
    cohort_shard_take_params(r->shard);
    cohort_shard_ema_from_params(r->shard);
  }
  if (r->model->n_buffer_floats > 0 &&
      !cohort_train_dist_broadcast_params(r->dist, r->model->buffer_data, r->model->n_buffer_floats,
                                          error))
    return FALSE;
  if (r->ema)
    r->be->copy(r->ema, r->model->params, r->model->n_params * sizeof(float));
  /* Rank 0 saves: with finetune lora or frozen its checkpoints name the base instead of
   * holding it (engine/model/checkpoint-base.h). */
  if (r->opts->rank == 0 && !cohort_checkpoint_base_init(r->model, cfg, &r->st, error))
    return FALSE;
  cohort_run_id_new(r->st.run_id);
  return cohort_train_dist_broadcast_host(r->dist, r->st.run_id, sizeof r->st.run_id, error);
}

/* Rank 0's verdict (and, for a resume, the folder) to everyone. */
static gboolean agree_on_start(CohortRankRun *r, StartKind *kind, char **ckpt, GError **error)
{
  struct {
    int kind;
    char path[4096];
  } rec = {*kind, ""};
  if (*ckpt)
    g_strlcpy(rec.path, *ckpt, sizeof rec.path);
  if (!cohort_train_dist_broadcast_host(r->dist, &rec, sizeof rec, error))
    return FALSE;
  *kind = rec.kind;
  if (r->opts->rank != 0) {
    g_free(*ckpt);
    *ckpt = rec.kind == START_RESUME ? g_strdup(rec.path) : NULL;
  }
  return TRUE;
}

gboolean cohort_rank_run_resume_or_start(CohortRankRun *r, char **resumed_from,
                                         gboolean *keep_scale, GError **error)
{
  StartKind kind = START_FRESH;
  g_autofree char *ckpt = NULL;
  GError *local = NULL;
  gboolean rank0 = r->opts->rank == 0;
  if (rank0)
    kind = choose_start(r, &ckpt, &local);
  if (!agree_on_start(r, &kind, &ckpt, error)) {
    g_clear_error(&local);
    return FALSE;
  }
  if (kind == START_REFUSED) {
    if (local)
      g_propagate_error(error, local);
    else
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "rank 0 refused to start (its message says why)");
    return FALSE;
  }
  if (kind == START_FRESH)
    return start_fresh(r, error);
  /* ZeRO stages 2 and 3: rank 0 checks the checkpoint, every rank reads its own pieces. */
  if (r->shard && !cohort_rank_run_shard_learns(r)) {
    if (!cohort_rank_run_resume_sharded(r, ckpt, keep_scale, error) ||
        !map_position(r, ckpt, error) ||
        !(cohort_shard_stage(r->shard) == 3 ? cohort_shard_check_finite(r->shard, ckpt, error)
                                            : cohort_model_check_finite(r->model, ckpt, error)))
      return FALSE;
    *resumed_from = g_steal_pointer(&ckpt);
    return TRUE;
  }
  /* Rank 0 loads and reports whether it could; then everyone takes its state. With ZeRO
   * stage 1 rank 0 reads the whole optimizer state into host memory first, as with stages 2
   * and 3 of a run with a frozen part (trainer-shard-learn.c), and their EMA weights. */
  g_autoptr(CohortOptimizer) full = NULL;
  gboolean whole = r->zero || r->shard;
  if (rank0 && whole)
    full = cohort_optimizer_new_for(r->cfg, cohort_backend_cpu(), r->model->n_trainable);
  g_autofree float *ema_whole = rank0 && r->shard && cohort_shard_ema(r->shard)
                                    ? g_new(float, MAX(r->model->n_params, 1))
                                    : NULL;
  int loaded =
      !rank0 || load_on_rank0(r, ckpt, whole ? full : r->opt, ema_whole, keep_scale, &local);
  if (!cohort_train_dist_broadcast_host(r->dist, &loaded, sizeof loaded, error)) {
    g_clear_error(&local);
    return FALSE;
  }
  if (!loaded) {
    if (local)
      g_propagate_error(error, local);
    else
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "rank 0 could not load checkpoint %s (its message says why)", ckpt);
    return FALSE;
  }
  /* (checked while the parameters are whole, before stage 3 keeps its pieces) */
  if (!broadcast_state(r, full, keep_scale, error) ||
      !cohort_model_check_finite(r->model, ckpt, error) ||
      (r->shard && !cohort_rank_run_scatter_learning(r, full, ema_whole, error)) ||
      !map_position(r, ckpt, error))
    return FALSE;
  *resumed_from = g_steal_pointer(&ckpt);
  return TRUE;
}

/* Rank 0 writes everything the run leaves; find out now, not at the first save, whether it
 * can. Stale temporaries of a save that was killed go too. */
gboolean cohort_rank_run_prepare_workspace(CohortRankRun *r, GError **error)
{
  const char *ws = r->cfg->workspace_dir;
  if (r->opts->rank != 0)
    return TRUE;
  if (g_mkdir_with_parents(ws, 0755) != 0) {
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                "workspace_dir %s: cannot create it: %s", ws, g_strerror(errno));
    return FALSE;
  }
  g_autofree char *probe = g_build_filename(ws, ".cohort-write-test-XXXXXX", NULL);
  int fd = g_mkstemp(probe);
  if (fd < 0) {
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                "workspace_dir %s is not writable: %s; choose a folder this user can write", ws,
                g_strerror(errno));
    return FALSE;
  }
  close(fd);
  g_unlink(probe);
  guint removed = cohort_remove_stale_temporaries(ws, (const char *const *)run_outputs);
  if (removed > 0)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "removed %u unfinished file%s of an interrupted save in %s", removed,
                        removed == 1 ? "" : "s", ws);
  /* Before a checkpoint is chosen: a replacement or a prune that a crash cut short. */
  g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
  cohort_checkpoint_recover(ws, notes);
  for (guint i = 0; i < notes->len; i++)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "%s", (const char *)notes->pdata[i]);
  return TRUE;
}
