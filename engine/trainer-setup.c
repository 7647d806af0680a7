/* Everything before the first step: data, model, optimizer, EMA, and either a checkpoint or
 * fresh (or imported) weights that rank 0 broadcasts. */
#include "engine/trainer-run.h"

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
  r->base_lr = cohort_config_scaled_lr(cfg, o->world_size);
  return TRUE;
}

static gboolean alloc_model(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  r->model = cohort_model_new(r->be, cfg, r->B, error);
  if (!r->model)
    return FALSE;
  size_t n = r->model->n_params;
  r->opt = cohort_adamw_new_on(r->be, n);
  if (!r->opt) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "AdamW: out of %s memory for the moments of %zu parameters", r->be->name, n);
    return FALSE;
  }
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

static gboolean resume_from(CohortRun *r, const char *ckpt, gboolean *keep_scale, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  size_t n = r->model->n_params;
  g_autoptr(CohortConfig) saved = NULL;
  float *ema_load = r->ema_host ? r->ema_host : r->ema;
  if (!cohort_checkpoint_load(ckpt, r->model, r->opt, ema_load, &r->st, &saved, error))
    return FALSE;
  if (r->ema_host)
    r->be->upload(r->ema, r->ema_host, n * sizeof(float));
  if (!same_shape(saved, cfg, ckpt, error))
    return FALSE;
  *keep_scale = saved->precision == COHORT_PRECISION_FP16 && r->st.loss_scale > 0;
  if (r->ema && !saved->ema_decay)
    r->be->copy(r->ema, r->model->params, n * sizeof(float));
  /* A checkpoint from before runs had ids continues as a run of its own from here. */
  if (!r->st.run_id[0])
    cohort_run_id_new(r->st.run_id);
  return TRUE;
}

static gboolean start_fresh(CohortRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (cfg->init_from && *cfg->init_from) {
    g_autofree char *init_path = cohort_resolve_path(cfg->init_from);
    if (!cohort_model_import(r->model, init_path, error))
      return FALSE;
  } else {
    r->model->ops->init_weights(r->model, (guint64)cfg->seed);
  }
  /* Every rank starts from rank 0's weights (and buffers), as DDP's constructor does. */
  if (!cohort_train_dist_broadcast_params(r->dist, r->model->params, r->model->n_params, error))
    return FALSE;
  if (r->model->n_buffer_floats > 0 &&
      !cohort_train_dist_broadcast_params(r->dist, r->model->buffer_data, r->model->n_buffer_floats,
                                          error))
    return FALSE;
  if (r->ema)
    r->be->copy(r->ema, r->model->params, r->model->n_params * sizeof(float));
  /* Rank 0's id names the run; the others learn it from the checkpoints they never write. */
  cohort_run_id_new(r->st.run_id);
  return TRUE;
}

gboolean cohort_run_setup(CohortRun *r, char **resumed_from, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  r->B = cfg->batch_size;
  r->accum = cfg->gradient_accumulation_steps;
  if (!cohort_model_check_config(cfg, o->config_source, error) || !open_data(r, error) ||
      !plan_steps(r, error) || !alloc_model(r, error))
    return FALSE;
  r->st = (CohortTrainState){.sample_rng = (guint64)cfg->seed ^ 0x5eed5a3b1e5ULL};
  gboolean keep_scale = FALSE;

  g_autofree char *ckpt = NULL;
  if (o->resume && g_str_equal(o->resume, "auto"))
    ckpt = cohort_checkpoint_find_latest(cfg->workspace_dir);
  else if (o->resume)
    ckpt = g_strdup(o->resume);
  if (ckpt) {
    if (!resume_from(r, ckpt, &keep_scale, error))
      return FALSE;
    *resumed_from = g_steal_pointer(&ckpt);
  } else if (!start_fresh(r, error)) {
    return FALSE;
  }
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
  g_clear_pointer(&r->train, cohort_samples_free);
  g_clear_pointer(&r->val, cohort_samples_free);
  g_clear_pointer(&r->model, cohort_model_free);
  g_clear_pointer(&r->opt, cohort_optimizer_free);
  g_clear_pointer(&r->dist, cohort_train_dist_free);
  g_clear_pointer(&r->batch, cohort_batch_free);
  if (r->be) {
    r->be->free(r->ema);
    r->be->free(r->backup);
  }
  g_free(r->ema_host);
  g_free(r->indices);
  g_free(r->metrics);
}

gint64 cohort_run_global_batch(const CohortRun *r)
{
  return cohort_config_global_batch(r->cfg, r->opts->world_size);
}

void cohort_run_load_micro_batch(CohortRun *r, gint64 epoch, gint64 micro)
{
  if (!r->indices || r->indices_epoch != epoch) {
    g_free(r->indices);
    r->indices = cohort_sampler_indices(&r->spec, (guint64)epoch, &r->n_indices);
    r->indices_epoch = epoch;
  }
  r->batch->B = r->B;
  r->batch->epoch = epoch;
  for (int b = 0; b < r->B; b++) {
    guint64 idx = r->indices[(guint64)micro * (guint64)r->B + (guint64)b];
    cohort_samples_load(r->train, r->batch, b, idx);
  }
}
