/* What a run produces besides its steps: evaluations, samples, checkpoints, the export. */
#include "engine/train/trainer-run.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <glib/gstdio.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"

#include "data/images.h"
#include "engine/model/frozen-store.h"
#include "engine/model/lora-io.h"
#include "engine/model/model-io.h"
#include "engine/train/rank-health.h"
#include "kernels/backend.h"

/* EMA weights in place of the parameters for evaluation and samples, and back. With a ZeRO
 * shard a collective; it can then fail. */
static gboolean swap_in_ema(CohortRankRun *r, gboolean in, GError **error)
{
  if (r->shard)
    return cohort_shard_swap_ema(r->shard, in, error);
  if (!r->ema)
    return TRUE;
  size_t bytes = r->model->n_params * sizeof(float);
  float *params = r->model->params;
  if (in) {
    r->be->copy(r->backup, params, bytes);
    r->be->copy(params, r->ema, bytes);
  } else {
    r->be->copy(params, r->backup, bytes);
  }
  return TRUE;
}

static gboolean has_ema(const CohortRankRun *r)
{
  return r->ema || (r->shard && cohort_shard_ema(r->shard));
}

/* The EMA weights in host memory (checkpoints and export): the buffer itself on the CPU. */
static const float *ema_on_host(CohortRankRun *r)
{
  if (!r->ema || !r->ema_host)
    return r->ema;
  r->be->download(r->ema_host, r->ema, r->model->n_params * sizeof(float));
  return r->ema_host;
}

/* Metric sums over eval_steps × B × world validation examples, each rank taking every
 * world-th one, summed across ranks: N ranks evaluate exactly what one rank with N× the
 * batch would, and every value is a ratio of global sums. */
static gboolean evaluate(CohortRankRun *r, double *values, gint64 *examples, GError **error)
{
  int world = r->opts->world_size, rank = r->opts->rank;
  CohortModel *m = r->model;
  guint64 n_val = cohort_data_source_count(r->val);
  g_autofree double *sums = g_new0(double, m->n_sums);
  /* Every rank evaluates with rank 0's running statistics, as a DDP module's forward would
   * broadcast them first. */
  if (!cohort_train_dist_broadcast_buffers(r->dist, m, error) || !swap_in_ema(r, TRUE, error))
    return FALSE;
  r->batch->B = r->B;
  r->batch->epoch = -1;
  /* A data error stops this rank only after every rank has made the same collectives (ZeRO-3's
   * gathers, the EMA swap): the batches are evaluated all the same, the error reported after. */
  GError *load_error = NULL;
  for (int s = 0; s < r->cfg->eval_steps; s++) {
    for (int b = 0; b < r->B && !load_error; b++) {
      gint64 g = ((gint64)s * r->B + b) * world + rank;
      cohort_data_source_load(r->val, r->batch, b, (guint64)(g % (gint64)n_val), &load_error);
    }
    m->ops->eval_batch(m, r->batch, sums);
    cohort_phase_tick();
  }
  gboolean released = !r->shard || cohort_shard_release(r->shard, load_error ? NULL : &load_error);
  if (!swap_in_ema(r, FALSE, load_error ? NULL : &load_error) || !released || load_error) {
    g_propagate_error(error, load_error);
    return FALSE;
  }
  if (!cohort_train_dist_sum(r->dist, sums, (int)m->n_sums, error))
    return FALSE;
  cohort_model_metric_values(m, sums, values);
  *examples = (gint64)r->cfg->eval_steps * r->B * world;
  return TRUE;
}

gboolean cohort_rank_run_eval(CohortRankRun *r, GError **error)
{
  gint64 examples;
  if (!r->val)
    return TRUE;
  cohort_phase_enter(COHORT_RANK_PHASE_EVALUATION);
  if (!evaluate(r, r->metrics, &examples, error))
    return FALSE;
  r->have_metrics = TRUE;
  const CohortModel *m = r->model;
  JsonObject *f = json_object_new();
  json_object_set_int_member(f, COHORT_FIELD_STEP, r->st.step);
  g_autoptr(GString) text = g_string_new(NULL);
  for (guint i = 0; i < m->n_metrics; i++) {
    if (isfinite(r->metrics[i]))
      json_object_set_double_member(f, m->metrics[i].name, r->metrics[i]);
    g_string_append_printf(text, "%s%s %.4f", i ? ", " : "", m->metrics[i].name, r->metrics[i]);
  }
  json_object_set_int_member(f, COHORT_FIELD_VAL_SAMPLES, examples);
  if (r->tokens_per_example > 0)
    json_object_set_int_member(f, COHORT_FIELD_VAL_TOKENS, examples * r->tokens_per_example);
  json_object_set_boolean_member(f, COHORT_FIELD_EMA, has_ema(r));
  cohort_progress_emit(r->progress, COHORT_EVENT_EVAL, f);
  cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "step %" G_GINT64_FORMAT ": %s%s", r->st.step,
                      text->str, has_ema(r) ? " (EMA weights)" : "");
  return TRUE;
}

gboolean cohort_rank_run_sample(CohortRankRun *r, GError **error)
{
  if (!r->model->ops->sample)
    return TRUE; /* a family without samples (a classifier) */
  cohort_phase_enter(COHORT_RANK_PHASE_SAMPLE);
  JsonObject *f = json_object_new();
  json_object_set_int_member(f, COHORT_FIELD_STEP, r->st.step);
  CohortSampleRequest req = {
      .cfg = r->model_cfg,
      .step = r->st.step,
      .workspace = r->cfg->workspace_dir,
      .rng = &r->st.sample_rng,
      .class_names = cohort_data_source_class_names(r->train),
      .compute_only = r->opts->rank != 0,
      .tokenizer = r->tokenizer,
  };
  if (!swap_in_ema(r, TRUE, error)) {
    json_object_unref(f);
    return FALSE;
  }
  gboolean ok = r->model->ops->sample(r->model, &req, f, error);
  /* ZeRO-3's gathers and the swap back are collectives: made whatever the sample gave. */
  gboolean released = !r->shard || cohort_shard_release(r->shard, ok ? error : NULL);
  gboolean back = swap_in_ema(r, FALSE, ok && released ? error : NULL);
  if (!ok || !released || !back || r->opts->rank != 0) {
    json_object_unref(f);
    return ok && released && back;
  }
  if (r->answering_request)
    json_object_set_boolean_member(f, COHORT_FIELD_REQUESTED, TRUE);
  if (json_object_has_member(f, COHORT_FIELD_TEXT))
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "sample at step %" G_GINT64_FORMAT ": %s",
                        r->st.step, json_object_get_string_member(f, COHORT_FIELD_TEXT));
  else if (json_object_has_member(f, COHORT_FIELD_IMAGE))
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "sample at step %" G_GINT64_FORMAT ": %s",
                        r->st.step, json_object_get_string_member(f, COHORT_FIELD_IMAGE));
  cohort_progress_emit(r->progress, COHORT_EVENT_SAMPLE, f);
  return TRUE;
}

/* With ZeRO stage 1, the whole optimizer state on rank 0 (host memory), gathered from the
 * shards, so the checkpoint is the one stage 0 writes; *full NULL on the other ranks. */
static gboolean gather_optimizer(CohortRankRun *r, CohortOptimizer **full, GError **error)
{
  *full = NULL;
  if (!r->zero)
    return TRUE;
  if (r->opts->rank == 0)
    *full = cohort_optimizer_new_for(r->cfg, cohort_backend_cpu(), r->model->n_trainable);
  /* Everyone learns whether rank 0 could hold it before anyone waits in the gather. */
  double failed = r->opts->rank == 0 && !*full;
  if (!cohort_train_dist_sum(r->dist, &failed, 1, error))
    return FALSE;
  if (failed > 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "checkpoint at step %" G_GINT64_FORMAT ": rank 0 is out of host memory for the "
                "optimizer state of %zu parameters, which it gathers whole to save (zero_stage 1)",
                r->st.step, r->model->n_trainable);
    return FALSE;
  }
  return cohort_zero_gather_state(r->zero, r->opt, *full, error);
}

gboolean cohort_rank_run_save_checkpoint(CohortRankRun *r, GError **error)
{
  g_autofree char *dir = NULL;
  g_autoptr(CohortOptimizer) full = NULL;
  /* Drifted weights are not saved: the ranks compare them first. */
  if (!cohort_rank_health_check(r, FALSE, error))
    return FALSE;
  cohort_phase_enter(COHORT_RANK_PHASE_CHECKPOINT);
  if (cohort_rank_run_shard_learns(r)) {
    /* ZeRO stages 2 and 3 with a frozen part: what learns gathered, stage 0's checkpoint. */
    if (!cohort_rank_run_save_learning(r, &dir, error))
      return FALSE;
  } else if (r->shard) {
    /* ZeRO stages 2 and 3: every rank writes its pieces into the one file. */
    if (!cohort_rank_run_save_sharded(r, &dir, error))
      return FALSE;
  } else if (!gather_optimizer(r, &full, error)) {
    return FALSE;
  } else if (r->opts->rank == 0 &&
             /* The config as the model was built (num_classes from the data), so the
              * checkpoint alone rebuilds it (cohort-train --sample). */
             !cohort_checkpoint_save(r->cfg->workspace_dir, r->model_cfg, r->model,
                                     full ? full : r->opt, ema_on_host(r), &r->st,
                                     r->cfg->keep_last, &dir, error)) {
    return FALSE;
  }
  if (r->opts->rank == 0) {
    JsonObject *f = json_object_new();
    json_object_set_int_member(f, COHORT_FIELD_STEP, r->st.step);
    json_object_set_string_member(f, COHORT_FIELD_PATH, dir);
    if (r->answering_request)
      json_object_set_boolean_member(f, COHORT_FIELD_REQUESTED, TRUE);
    cohort_progress_emit(r->progress, COHORT_EVENT_CHECKPOINT, f);
  }
  /* Nobody moves on before the checkpoint is complete. */
  return cohort_train_dist_barrier(r->dist, "checkpoint", error);
}

/* The files an export writes only sometimes: one left by an earlier export that this one does
 * not write would sit beside the new weights as if it belonged to them (an EMA export of step
 * 20 beside a model of step 30, which a teacher would then take). */
static void remove_stale_exports(CohortRankRun *r)
{
  const char *ws = r->cfg->workspace_dir;
  struct {
    const char *name;
    gboolean written;
  } optional[] = {
      {"model-ema.safetensors", r->ema != NULL},
      {"classes.json", cohort_data_source_class_names(r->train) != NULL},
      {"config.json", r->model->klass->export_extra != NULL},
  };
  for (guint i = 0; i < G_N_ELEMENTS(optional); i++) {
    g_autofree char *path = g_build_filename(ws, optional[i].name, NULL);
    if (!optional[i].written && g_unlink(path) == 0)
      cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "removed %s of an earlier export", path);
  }
  cohort_fsync_dir(ws);
}

/* finetune lora: the adapter as a PEFT folder (adapter/) whose base is the workspace's own
 * model.safetensors (the base weights, with any `trainable` ones as trained), and with
 * merge_adapter the model with the adapter folded in (merged/, a folder of the same files). */
static gboolean export_adapter(CohortRankRun *r, GHashTable *meta, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  CohortModel *m = r->model;
  g_autofree float *tmp = NULL;
  const float *params = cohort_model_params_host(m, &tmp);
  g_autofree char *dir = g_build_filename(cfg->workspace_dir, "adapter", NULL);
  g_autofree char *base = g_canonicalize_filename(cfg->workspace_dir, NULL);
  if (!cohort_lora_export(m, params, dir, base, error))
    return FALSE;
  if (!cfg->merge_adapter)
    return TRUE;
  g_autofree char *merged_dir = g_build_filename(cfg->workspace_dir, "merged", NULL);
  g_autofree char *merged_path = g_build_filename(merged_dir, "model.safetensors", NULL);
  g_autofree float *merged = g_new(float, MAX(m->n_params, 1));
  memcpy(merged, params, m->n_params * sizeof(float));
  /* frozen_dtype bf16: the base as the run saw it, rounded */
  cohort_frozen_store_widen_into(m, merged);
  cohort_lora_merge(m, merged, merged);
  if (g_mkdir_with_parents(merged_dir, 0755) != 0)
    return cohort_fail(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                       "%s: cannot create the merged model's folder: %s", merged_dir,
                       g_strerror(errno));
  return cohort_model_save(m, merged, merged_path, meta, error) &&
         (!m->klass->export_extra || m->klass->export_extra(m, cfg, merged_dir, error)) &&
         (!r->tokenizer || cohort_tokenizer_export(r->tokenizer, merged_dir, error));
}

/* After model.safetensors, on rank 0: the EMA weights (`ema`, whole, when the run keeps them),
 * the adapter folder, the config, the classes, the family's files and the tokenizer. */
static gboolean export_rest(CohortRankRun *r, char *path, GHashTable *meta, const float *ema,
                            char **model_path, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (ema) {
    g_autofree char *ema_path = g_build_filename(cfg->workspace_dir, "model-ema.safetensors", NULL);
    if (!cohort_model_save(r->model, ema, ema_path, meta, error))
      return FALSE;
  }
  if (r->model->lora && !export_adapter(r, meta, error))
    return FALSE;
  /* The config it was trained with, beside the weights: what a teacher folder is read by. */
  g_autofree char *cfg_path = g_build_filename(cfg->workspace_dir, "cohort-config.json", NULL);
  if (!cohort_config_save_file(r->model_cfg, cfg_path, error))
    return FALSE;
  /* The class mapping, so a label means the same class when the model is used again. */
  const char *const *classes = cohort_data_source_class_names(r->train);
  g_autofree char *classes_path = g_build_filename(cfg->workspace_dir, "classes.json", NULL);
  if (classes && !cohort_image_classes_write(classes, classes_path, error))
    return FALSE;
  if (r->model->klass->export_extra &&
      !r->model->klass->export_extra(r->model, cfg, cfg->workspace_dir, error))
    return FALSE;
  /* The tokenizer's files beside the weights: with config.json, a Hugging Face folder that
   * from_pretrained loads, model and tokenizer. */
  if (r->tokenizer && !cohort_tokenizer_export(r->tokenizer, cfg->workspace_dir, error))
    return FALSE;
  *model_path = g_strdup(path);
  return TRUE;
}

/* ZeRO stages 2 and 3 with a frozen part: what learns gathered whole on every rank (at stage 3
 * the parameters in place until the files are written), stage 0's export on rank 0. */
static gboolean export_learning(CohortRankRun *r, char *path, GHashTable *meta, char **model_path,
                                GError **error)
{
  CohortLearningWhole whole;
  gboolean ok = cohort_rank_run_gather_learning(r, FALSE, &whole, error);
  if (ok && r->opts->rank == 0)
    ok = cohort_model_save(r->model, NULL, path, meta, error) &&
         export_rest(r, path, meta, whole.ema, model_path, error);
  cohort_shard_let_go_learning(r->shard);
  cohort_learning_whole_clear(&whole);
  return ok;
}

/* Non-finite weights are never exported (a last update that diverged, after the last finite
 * loss): the run fails naming the tensor, and its checkpoints stay. */
static gboolean export_finite(CohortRankRun *r, GError **error)
{
  GError *local = NULL;
  gboolean ok = TRUE;
  g_autofree char *what =
      g_strdup_printf("nothing exported: the weights after step %" G_GINT64_FORMAT, r->st.step);
  const char *bad = NULL;
  if (r->shard && cohort_shard_stage(r->shard) == 3)
    ok = cohort_shard_check_finite(r->shard, what, &local);
  else if (r->opts->rank == 0 && (bad = cohort_model_first_non_finite(r->model)))
    ok = cohort_fail(&local, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "%s: tensor \"%s\" holds a NaN or an infinity; training diverged (a lower "
                     "learning_rate, or grad_clip, may help)",
                     what, bad);
  if (r->shard)
    return cohort_rank_run_all_ok(r, ok, local, "export", error);
  if (!ok)
    g_propagate_error(error, local);
  return ok;
}

gboolean cohort_rank_run_export(CohortRankRun *r, char **model_path, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  cohort_phase_enter(COHORT_RANK_PHASE_EXPORT);
  if (!export_finite(r, error))
    return FALSE;
  g_autofree char *path = g_build_filename(cfg->workspace_dir, "model.safetensors", NULL);
  remove_stale_exports(r);
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  g_autofree char *step = g_strdup_printf("%" G_GINT64_FORMAT, r->st.step);
  g_hash_table_insert(meta, "format", "pt");
  /* One spelling for the step in every file Cohort writes (checkpoints use it too); the run id
   * lets a reader tell the files of one export from leftovers of another. */
  g_hash_table_insert(meta, "cohort.step", step);
  g_hash_table_insert(meta, "cohort.run_id", r->st.run_id);
  g_hash_table_insert(meta, "cohort.model", cfg->model);
  if (cohort_rank_run_shard_learns(r))
    return export_learning(r, path, meta, model_path, error);
  if (r->shard) {
    /* ZeRO stages 2 and 3: every rank writes its pieces into the one file. */
    g_autofree char *ema_path =
        cohort_shard_ema(r->shard)
            ? g_build_filename(cfg->workspace_dir, "model-ema.safetensors", NULL)
            : NULL;
    if (!cohort_rank_run_export_sharded(r, path, ema_path, meta, error))
      return FALSE;
    if (r->opts->rank != 0)
      return TRUE;
  } else if (!cohort_model_save(r->model, NULL, path, meta, error)) {
    return FALSE;
  }
  return export_rest(r, path, meta, r->ema ? ema_on_host(r) : NULL, model_path, error);
}
