/* Everything before the first step: data, model, optimizer, EMA, and either a checkpoint or
 * fresh (or imported) weights that rank 0 broadcasts. */
#include "engine/trainer-run.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "engine/fileio.h"
#include "engine/launch-plan.h"

#include "engine/model-io.h"
#include "kernels/backend.h"

/* Data preparation (the content scan) is recorded in an index under the workspace: with
 * distributed_data_loading every rank keeps its own (cache/rank-N); without it rank 0
 * prepares first and the others wait, then reuse rank 0's index. */
static gboolean open_data(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  g_autofree char *cache_dir = NULL;
  if (cfg->distributed_data_loading) {
    g_autofree char *rank_dir = g_strdup_printf("rank-%d", o->rank);
    cache_dir = g_build_filename(cfg->workspace_dir, "cache", rank_dir, NULL);
  } else {
    cache_dir = g_build_filename(cfg->workspace_dir, "cache", NULL);
  }
  gboolean rank0_first = !cfg->distributed_data_loading && o->world_size > 1;
  if (rank0_first && o->rank != 0 && !cohort_train_dist_barrier(r->dist, "data", error))
    return FALSE;
  r->train = cohort_samples_open(cfg, cfg->train_data, cache_dir, error);
  if (!r->train)
    return FALSE;
  if (cfg->val_data && *cfg->val_data) {
    r->val = cohort_samples_open(cfg, cfg->val_data, cache_dir, error);
    if (!r->val)
      return FALSE;
  }
  if (rank0_first && o->rank == 0 && !cohort_train_dist_barrier(r->dist, "data", error))
    return FALSE;
  return TRUE;
}

/* The sampler and the length of the run. */
static gboolean plan_steps(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  r->spec = (CohortSamplerSpec){
      .n = cohort_samples_count(r->train),
      .world_size = o->world_size,
      .rank = o->rank,
      .shuffle = cfg->shuffle,
      .seed = cfg->seed,
      .drop_last = cfg->drop_last,
  };
  guint64 per_rank = cohort_sampler_num_samples(&r->spec);
  gint64 micro_per_epoch = (gint64)(per_rank / (guint64)r->B);
  r->steps_per_epoch = micro_per_epoch / r->accum;
  if (r->steps_per_epoch < 1) {
    g_autofree char *train_path = cohort_resolve_path(cfg->train_data);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: %" G_GUINT64_FORMAT " training samples give %" G_GUINT64_FORMAT
                " per rank, fewer than one step needs (batch_size %d × "
                "gradient_accumulation_steps %d); use more data or a smaller batch",
                train_path, (guint64)r->spec.n, per_rank, r->B, r->accum);
    return FALSE;
  }
  r->total_steps = cfg->max_steps > 0 ? cfg->max_steps : (gint64)cfg->epochs * r->steps_per_epoch;
  r->base_lr = cohort_launch_scaled_lr(cfg, o->world_size);
  /* A warm-up longer than the run would never reach the learning rate: shorten it to the run,
   * as other trainers do, so shortening a run needs no thought about warm-up. */
  r->warmup_steps = cfg->warmup_steps;
  if (cfg->warmup_steps > r->total_steps) {
    r->warmup_steps = (int)r->total_steps;
    cohort_progress_log(r->progress, "info",
                        "warmup_steps %d is longer than the run's %" G_GINT64_FORMAT
                        " steps: warming up over all %" G_GINT64_FORMAT " instead",
                        cfg->warmup_steps, r->total_steps, r->total_steps);
  }
  return TRUE;
}

/* What the model's shape takes from the data: the number of classes of image data. The
 * validation set must have the same classes, by name and order. */
static gboolean resolve_from_data(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  r->model_cfg = cohort_config_copy(cfg);
  if (cfg->data_format != COHORT_DATA_IMAGES)
    return TRUE;
  int classes = cohort_samples_num_classes(r->train);
  g_autofree char *train_path = cohort_resolve_path(cfg->train_data);
  if (cfg->num_classes == 0) {
    r->model_cfg->num_classes = classes;
  } else if (classes > cfg->num_classes) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s has %d class folders but key \"num_classes\" is %d; allowed: 0 (take the "
                "data's) or at least %d",
                train_path, classes, cfg->num_classes, classes);
    return FALSE;
  }
  if (r->val) {
    const char *const *a = cohort_samples_class_names(r->train);
    const char *const *b = cohort_samples_class_names(r->val);
    if (!g_strv_equal(a, b)) {
      g_autofree char *val_path = cohort_resolve_path(cfg->val_data);
      g_autofree char *ta = g_strjoinv(", ", (char **)a), *tb = g_strjoinv(", ", (char **)b);
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s has the classes [%s] but %s has [%s]; validation data needs the same "
                  "class folders as the training data",
                  val_path, tb, train_path, ta);
      return FALSE;
    }
  }
  guint skipped = cohort_samples_num_skipped(r->train);
  if (skipped > 0)
    cohort_progress_log(r->progress, "warning",
                        "skip_bad_images: %u unreadable image%s in %s left out", skipped,
                        skipped == 1 ? "" : "s", train_path);
  return TRUE;
}

/* The whole optimizer state, or with ZeRO stage 1 over several ranks this rank's shard. */
static CohortOptimizer *new_optimizer(CohortRun *r, size_t n)
{
  const CohortConfig *cfg = r->cfg;
  if (cfg->zero_stage == 0)
    return cohort_optimizer_new_for(cfg, r->be, n);
  if (r->opts->world_size < 2 || !r->opts->comm) {
    cohort_progress_log(r->progress, "info",
                        "zero_stage 1 with one process: there is nothing to shard the optimizer "
                        "state across, so it trains as stage 0");
    return cohort_optimizer_new_for(cfg, r->be, n);
  }
  r->zero = cohort_zero_new(r->opts->comm, &r->dev, n);
  CohortParamRange ranges[2];
  guint n_ranges = cohort_zero_ranges(r->zero, ranges);
  CohortOptimizer *opt = cohort_optimizer_new_sharded(cfg, r->be, n, ranges, n_ranges);
  if (opt && cohort_optimizer_n_states(opt) > 0)
    cohort_progress_log(r->progress, "info",
                        "ZeRO stage 1: each of the %d ranks keeps the optimizer state of %zu of "
                        "the %zu parameters (%.1f MiB instead of %.1f MiB)",
                        r->opts->world_size, cohort_optimizer_state_len(opt), n,
                        cohort_optimizer_state_bytes(opt) / 1048576.0,
                        cohort_optimizer_n_states(opt) * n * sizeof(float) / 1048576.0);
  return opt;
}

static gboolean alloc_model(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (!resolve_from_data(r, error))
    return FALSE;
  r->model = cohort_model_new(r->be, r->model_cfg, r->B, error);
  if (!r->model)
    return FALSE;
  size_t n = r->model->n_params;
  r->opt = new_optimizer(r, n);
  if (!r->opt) {
    g_autofree char *name = cohort_config_get(cfg, "optimizer");
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: out of %s memory for the state of %zu parameters", name, r->be->name, n);
    return FALSE;
  }
  cohort_train_dist_set_optim_bytes(r->dist, cohort_optimizer_state_bytes(r->opt));
  r->batch = cohort_samples_batch_new(r->train, r->B);
  r->tokens_per_sample = r->batch->T;
  r->metrics = g_new0(double, MAX(r->model->n_metrics, 1));
  if (cfg->ema_decay > 0) {
    r->ema = r->be->alloc(n * sizeof(float));
    r->backup = r->be->alloc(n * sizeof(float));
    if (!r->ema || !r->backup) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "EMA: out of %s memory for %zu parameters", r->be->name, n);
      return FALSE;
    }
    if (!cohort_model_on_host(r->model))
      r->ema_host = g_new(float, n);
  }
  return TRUE;
}

/* Every rank's verdict on something each rank did on its own: TRUE when all succeeded. A rank
 * that failed reports its own `mine`; the others say that a peer failed at `what`. */
static gboolean all_ranks_ok(CohortRun *r, gboolean ok, GError *mine, const char *what,
                             GError **error)
{
  double failed = ok ? 0 : 1;
  if (!cohort_train_dist_sum(r->dist, &failed, 1, error)) {
    g_clear_error(&mine);
    return FALSE;
  }
  if (failed == 0)
    return TRUE;
  if (mine)
    g_propagate_error(error, mine);
  else
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%.0f other rank%s could not %s (their messages say why)", failed,
                failed == 1 ? "" : "s", what);
  return FALSE;
}

/* teacher_from: every rank loads the teacher itself (it is never sent over the network), all
 * must hold the same weights as rank 0, and the student's loss becomes the distillation's. */
static gboolean setup_teacher(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (!cfg->teacher_from || !*cfg->teacher_from)
    return TRUE;
  GError *local = NULL;
  r->teacher =
      cohort_teacher_load(r->be, r->model_cfg, cohort_samples_class_names(r->train), r->B, &local);
  if (!all_ranks_ok(r, r->teacher != NULL, local, "load the teacher", error))
    return FALSE;
  char sha[65];
  g_strlcpy(sha, r->teacher->sha256, sizeof sha);
  if (!cohort_train_dist_broadcast_host(r->dist, sha, sizeof sha, error))
    return FALSE;
  gboolean same = strcmp(sha, r->teacher->sha256) == 0;
  local = NULL;
  if (!same)
    g_set_error(&local, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "rank %d: teacher_from %s: %s has sha256 %s but rank 0's has %s; every rank needs "
                "the same teacher",
                r->opts->rank, r->teacher->dir, r->teacher->weights, r->teacher->sha256, sha);
  if (!all_ranks_ok(r, same, local, "find rank 0's teacher", error))
    return FALSE;
  CohortDistillSettings settings;
  cohort_distill_settings_from_config(cfg, &settings);
  r->distill = cohort_distill_new(r->model, r->teacher->model, &settings, error);
  if (!r->distill)
    return FALSE;
  cohort_train_dist_set_teacher_bytes(r->dist, cohort_teacher_bytes(r->teacher));
  cohort_progress_log(
      r->progress, "info",
      "teacher_from %s: %s%s, %.2fM parameters, %.1f MiB on each rank, sha256 %.12s…",
      r->teacher->dir, r->teacher->weights, r->teacher->ema ? " (EMA weights)" : "",
      r->teacher->model->n_params / 1e6, cohort_teacher_bytes(r->teacher) / 1048576.0,
      r->teacher->sha256);
  return TRUE;
}

/* A checkpoint continues only with the teacher it was trained with (or without one). */
static gboolean same_teacher(CohortRun *r, const char *ckpt, GError **error)
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
  return TRUE;
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

/* Rank 0: a checkpoint to resume, a fresh start, or a refusal to mix runs. */
static StartKind choose_start(CohortRun *r, char **ckpt, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const char *resume = r->opts->resume;
  if (resume && g_str_equal(resume, "auto")) {
    *ckpt = cohort_checkpoint_find_latest(cfg->workspace_dir);
    if (!*ckpt)
      cohort_progress_log(r->progress, "info", "no checkpoint in %s: starting a new run",
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
    cohort_progress_log(r->progress, "info",
                        "--overwrite: the previous run in %s moved to %s/previous/",
                        cfg->workspace_dir, cfg->workspace_dir);
    return START_FRESH;
  }
  /* A new run beside an old one's checkpoints would mix the two (and --resume auto would
   * later pick the other run): never start one silently. */
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
              "%s already holds checkpoints of an earlier run (latest: %s); continue it with "
              "--resume auto, start a new run with another workspace_dir, or pass --overwrite to "
              "move the earlier run to %s/previous/",
              cfg->workspace_dir, latest, cfg->workspace_dir);
  return START_REFUSED;
}

/* Rank 0 reads the checkpoint; the others get everything from it by broadcast, so resuming
 * needs the checkpoint on rank 0's machine only. */
static gboolean load_on_rank0(CohortRun *r, const char *ckpt, CohortOptimizer *opt,
                              gboolean *keep_scale, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  size_t n = r->model->n_params;
  g_autoptr(CohortConfig) saved = NULL;
  float *ema_load = r->ema_host ? r->ema_host : r->ema;
  if (!opt) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: out of host memory for the optimizer state of %zu parameters, which rank 0 "
                "reads whole before handing each rank its shard (zero_stage 1)",
                ckpt, n);
    return FALSE;
  }
  if (!cohort_checkpoint_load(ckpt, r->model, opt, ema_load, &r->st, &saved, error) ||
      !same_shape(saved, cfg, ckpt, error) || !same_teacher(r, ckpt, error))
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

/* `full`: with ZeRO stage 1, rank 0's copy of the whole state read from the checkpoint (NULL
 * elsewhere); each rank takes its shard of it. */
static gboolean broadcast_state(CohortRun *r, CohortOptimizer *full, gboolean *keep_scale,
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
  for (guint i = 0; !r->zero && i < cohort_optimizer_n_states(r->opt); i++)
    if (!cohort_train_dist_broadcast_params(r->dist, cohort_optimizer_state(r->opt, i), m->n_params,
                                            error))
      return FALSE;
  r->st = rec.st;
  *keep_scale = rec.keep_scale;
  return TRUE;
}

/* The position fields of a checkpoint's state.json, checked against each other and against
 * the data before they are used: the epoch consumed at most all its samples (padded to the
 * world size, which is at most the global batch), in whole steps, and batch_in_epoch is those
 * steps times a possible accumulation. */
static gboolean position_valid(const CohortRun *r, const char *ckpt, GError **error)
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

/* Where in the epoch a resumed run continues. The samples an epoch has consumed are a prefix
 * of its permutation whatever the world size, so a checkpoint from another batch or world size
 * continues after the same prefix, rounded down to a whole step of the new plan. */
static gboolean map_position(CohortRun *r, const char *ckpt, GError **error)
{
  CohortTrainState *st = &r->st;
  gint64 gb = cohort_run_global_batch(r);
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
    cohort_progress_log(r->progress, "info",
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

static gboolean start_fresh(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (cfg->init_from && *cfg->init_from) {
    g_autofree char *init_path = cohort_resolve_path(cfg->init_from);
    if (!cohort_model_import(r->model, init_path, error) ||
        !cohort_model_check_finite(r->model, init_path, error))
      return FALSE;
  } else {
    r->model->ops->init_weights(r->model, (guint64)cfg->seed);
  }
  if (cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS &&
      !cohort_distill_copy_teacher_layers(r->model, r->model_cfg->n_layer, r->teacher->model,
                                          r->teacher->cfg->n_layer, error))
    return FALSE;
  /* Every rank starts from rank 0's weights (and buffers), as DDP's constructor does. */
  if (!cohort_train_dist_broadcast_params(r->dist, r->model->params, r->model->n_params, error))
    return FALSE;
  if (r->model->n_buffer_floats > 0 &&
      !cohort_train_dist_broadcast_params(r->dist, r->model->buffer_data, r->model->n_buffer_floats,
                                          error))
    return FALSE;
  if (r->ema)
    r->be->copy(r->ema, r->model->params, r->model->n_params * sizeof(float));
  cohort_run_id_new(r->st.run_id);
  return cohort_train_dist_broadcast_host(r->dist, r->st.run_id, sizeof r->st.run_id, error);
}

/* Rank 0's verdict (and, for a resume, the folder) to everyone. */
static gboolean agree_on_start(CohortRun *r, StartKind *kind, char **ckpt, GError **error)
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

static gboolean resume_or_start(CohortRun *r, char **resumed_from, gboolean *keep_scale,
                                GError **error)
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
  /* Rank 0 loads and reports whether it could; then everyone takes its state. With ZeRO
   * stage 1 rank 0 reads the whole optimizer state into host memory first. */
  g_autoptr(CohortOptimizer) full = NULL;
  if (rank0 && r->zero)
    full = cohort_optimizer_new_for(r->cfg, cohort_backend_cpu(), r->model->n_params);
  int loaded = !rank0 || load_on_rank0(r, ckpt, r->zero ? full : r->opt, keep_scale, &local);
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
  if (!broadcast_state(r, full, keep_scale, error) || !map_position(r, ckpt, error) ||
      !cohort_model_check_finite(r->model, ckpt, error))
    return FALSE;
  *resumed_from = g_steal_pointer(&ckpt);
  return TRUE;
}

/* Rank 0 writes everything the run leaves; find out now, not at the first save, whether it
 * can. Stale temporaries of a save that was killed go too. */
static gboolean prepare_workspace(CohortRun *r, GError **error)
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
    cohort_progress_log(r->progress, "info",
                        "removed %u unfinished file%s of an interrupted save in %s", removed,
                        removed == 1 ? "" : "s", ws);
  return TRUE;
}

gboolean cohort_run_setup(CohortRun *r, char **resumed_from, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  r->B = cfg->batch_size;
  r->accum = cfg->gradient_accumulation_steps;
  if (!cohort_model_check_config(cfg, o->config_source, error) ||
      !cohort_distill_check_config(cfg, o->config_source, error) || !prepare_workspace(r, error) ||
      !open_data(r, error) || !plan_steps(r, error) || !alloc_model(r, error) ||
      !setup_teacher(r, error))
    return FALSE;
  r->st = (CohortTrainState){.sample_rng = (guint64)cfg->seed ^ 0x5eed5a3b1e5ULL};
  if (r->teacher)
    g_strlcpy(r->st.teacher_sha256, r->teacher->sha256, sizeof r->st.teacher_sha256);
  gboolean keep_scale = FALSE;
  if (!resume_or_start(r, resumed_from, &keep_scale, error))
    return FALSE;
  r->st.global_batch = cohort_run_global_batch(r);
  /* The loss scale carries over from an fp16 checkpoint; otherwise fp16 starts it afresh. */
  if (cfg->precision != COHORT_PRECISION_FP16) {
    r->st.loss_scale = 1.0;
    r->st.scale_good_steps = 0;
  } else if (!keep_scale) {
    r->st.loss_scale = cfg->loss_scale_init;
    r->st.scale_good_steps = 0;
  }
  return TRUE;
}

void cohort_run_free(CohortRun *r)
{
  /* The loader threads read the data and the sample orders: they stop first. */
  g_clear_pointer(&r->prefetch, cohort_prefetch_free);
  for (int i = 0; i < 2; i++)
    g_clear_pointer(&r->epoch_indices[i], g_array_unref);
  g_clear_pointer(&r->train, cohort_samples_free);
  g_clear_pointer(&r->val, cohort_samples_free);
  g_clear_pointer(&r->distill, cohort_distill_free);
  g_clear_pointer(&r->teacher, cohort_teacher_free);
  g_clear_pointer(&r->model, cohort_model_free);
  g_clear_pointer(&r->opt, cohort_optimizer_free);
  g_clear_pointer(&r->zero, cohort_zero_free);
  g_clear_pointer(&r->dist, cohort_train_dist_free);
  g_clear_pointer(&r->batch, cohort_batch_free);
  g_clear_pointer(&r->model_cfg, cohort_config_free);
  if (r->be) {
    r->be->free(r->ema);
    r->be->free(r->backup);
  }
  g_free(r->ema_host);
  g_free(r->metrics);
}

gint64 cohort_run_global_batch(const CohortRun *r)
{
  return cohort_launch_global_batch(r->cfg, r->opts->world_size);
}

/* This rank's sample order of `epoch` (a reference), made once per epoch for every thread. The
 * two most recent are kept: loader threads run at most into the next epoch. */
static GArray *epoch_indices(CohortRun *r, gint64 epoch)
{
  g_mutex_lock(&r->indices_lock);
  GArray *out = NULL;
  for (int i = 0; i < 2 && !out; i++)
    if (r->epoch_indices[i] && r->epoch_of[i] == epoch)
      out = g_array_ref(r->epoch_indices[i]);
  if (!out) {
    guint64 n = 0;
    guint64 *idx = cohort_sampler_indices(&r->spec, (guint64)epoch, &n);
    out = g_array_new(FALSE, FALSE, sizeof(guint64));
    g_array_append_vals(out, idx, (guint)n);
    g_free(idx);
    /* Replaces the older of the two. */
    int slot = !r->epoch_indices[0]   ? 0
               : !r->epoch_indices[1] ? 1
                                      : r->epoch_of[0] > r->epoch_of[1];
    if (r->epoch_indices[slot])
      g_array_unref(r->epoch_indices[slot]);
    r->epoch_indices[slot] = g_array_ref(out);
    r->epoch_of[slot] = epoch;
  }
  g_mutex_unlock(&r->indices_lock);
  return out;
}

static gboolean load_into(CohortRun *r, CohortBatch *batch, gint64 epoch, gint64 micro,
                          GError **error)
{
  g_autoptr(GArray) idx = epoch_indices(r, epoch);
  batch->B = r->B;
  batch->epoch = epoch;
  for (int b = 0; b < r->B; b++) {
    guint64 i = g_array_index(idx, guint64, (guint64)micro * (guint64)r->B + (guint64)b);
    if (!cohort_samples_load(r->train, batch, b, i, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean prefetch_load(gpointer data, CohortBatch *batch, gint64 epoch, gint64 micro,
                              GError **error)
{
  return load_into(data, batch, epoch, micro, error);
}

static CohortBatch *prefetch_batch(gpointer data)
{
  CohortRun *r = data;
  const CohortBatch *like = r->batch;
  if (r->pinned)
    return cohort_batch_new_with(r->B, like->T, like->C, like->H, like->W, r->be->host_alloc,
                                 r->be->host_free);
  return cohort_samples_batch_new(r->train, r->B);
}

gboolean cohort_run_start_loading(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  r->step_batch = r->batch;
  if (cfg->num_workers == 0)
    return TRUE;
  /* Page-locked batches only where something copies them to a GPU. */
  r->pinned = cfg->pin_memory && r->dev.cuda_device >= 0 && r->be->host_alloc != NULL;
  if (r->pinned) {
    CohortBatch *probe = prefetch_batch(r);
    if (probe == NULL) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "pin_memory: no page-locked host memory for a batch of %d; set pin_memory "
                  "false",
                  r->B);
      return FALSE;
    }
    cohort_batch_free(probe);
  }
  /* Two batches ahead per thread, and the one the step holds. */
  r->prefetch =
      cohort_prefetch_new(cfg->num_workers, 2 * cfg->num_workers + 1, r->steps_per_epoch * r->accum,
                          prefetch_load, prefetch_batch, cohort_batch_free, r);
  return TRUE;
}

gboolean cohort_run_load_micro_batch(CohortRun *r, gint64 epoch, gint64 micro, gint64 *waited_us,
                                     GError **error)
{
  if (r->prefetch) {
    r->step_batch = cohort_prefetch_get(r->prefetch, epoch, micro, waited_us, error);
    return r->step_batch != NULL;
  }
  gint64 t0 = g_get_monotonic_time();
  r->step_batch = r->batch;
  gboolean ok = load_into(r, r->batch, epoch, micro, error);
  *waited_us = g_get_monotonic_time() - t0;
  return ok;
}
