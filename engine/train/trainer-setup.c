/* Everything before the first step: data, model, optimizer, EMA, and either a checkpoint or
 * fresh (or imported) weights that rank 0 broadcasts. */
#include "engine/train/trainer-run.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/launch/launch-plan.h"
#include "engine/train/text-tokens.h"
#include "data/token-cache.h"

#include "engine/model/finetune.h"
#include "engine/model/frozen-store.h"
#include "engine/model/model-io.h"
#include "engine/train/latents.h"
#include "engine/train/text-embeds.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"

/* Text through a tokenizer is read as the token shards its cache folder holds (added to
 * `folders`). */
static CohortDataSource *open_source(CohortRankRun *r, const char *path, const char *key,
                                     const char *cache_dir, GPtrArray *folders, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (cfg->data_format == COHORT_DATA_CHAT) {
    g_autofree char *file = cohort_rank_run_chat_data(r, path, key, cache_dir, error);
    CohortDataSource *s = file ? cohort_data_source_open_chat(cfg, file, error) : NULL;
    if (file && !s)
      g_prefix_error(error, "%s %s (tokenized): ", key, path);
    return s;
  }
  if (cfg->data_format != COHORT_DATA_TEXT || !r->tokenizer)
    return cohort_data_source_open(cfg, path, cache_dir, error);
  g_autofree char *tokens = cohort_rank_run_text_tokens(r, path, key, cache_dir, error);
  if (!tokens)
    return NULL;
  g_ptr_array_add(folders, g_strdup(tokens));
  CohortDataSource *s = cohort_data_source_open_tokens(cfg, tokens, cache_dir, error);
  if (!s)
    g_prefix_error(error, "%s %s (tokenized): ", key, path);
  return s;
}

static gboolean prune_token_caches(CohortRankRun *r, const char *cache_dir, GPtrArray *folders,
                                   GError **error)
{
  g_autoptr(GPtrArray) removed = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(folders, NULL);
  gboolean ok =
      cohort_token_cache_prune(cache_dir, (const char *const *)folders->pdata, removed, error);
  g_ptr_array_set_size(folders, folders->len - 1);
  for (guint i = 0; i < removed->len; i++)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "removed %s, the tokens of an earlier version of the data",
                        (const char *)removed->pdata[i]);
  return ok;
}

/* vae_from: the images as latents (engine/train/latents.h does its own waiting), then with
 * text_encoder their captions' embeddings, as open_data does for pixels: rank 0 first when the
 * ranks share one cache folder. */
static gboolean open_latents(CohortRankRun *r, const char *cache_dir, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  r->train = cohort_rank_run_open_latents(r, "train", cfg->train_data, cache_dir, error);
  if (!r->train)
    return FALSE;
  if (cfg->val_data && *cfg->val_data) {
    r->val = cohort_rank_run_open_latents(r, "val", cfg->val_data, cache_dir, error);
    if (!r->val)
      return FALSE;
  }
  if (!cohort_data_source_has_captions(r->train))
    return TRUE;
  gboolean rank0_first = !cfg->distributed_data_loading && o->world_size > 1;
  if (rank0_first && o->rank != 0 && !cohort_train_dist_wait_for_data(r->dist, error))
    return FALSE;
  if (!cohort_rank_run_encode_captions(r, cache_dir, error))
    return FALSE;
  return !rank0_first || o->rank != 0 || cohort_train_dist_wait_for_data(r->dist, error);
}

/* Data preparation (the content scan, tokenizing text) is recorded under the workspace: with
 * distributed_data_loading every rank keeps its own (cache/rank-N); without it rank 0
 * prepares first and the others wait, then reuse rank 0's. */
static gboolean open_data(CohortRankRun *r, GError **error)
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
  if (cfg->vae_from && *cfg->vae_from)
    return open_latents(r, cache_dir, error);
  gboolean rank0_first = !cfg->distributed_data_loading && o->world_size > 1;
  if (rank0_first && o->rank != 0 && !cohort_train_dist_wait_for_data(r->dist, error))
    return FALSE;
  g_autoptr(GPtrArray) folders = g_ptr_array_new_with_free_func(g_free);
  r->train = open_source(r, cfg->train_data, "train_data", cache_dir, folders, error);
  if (!r->train)
    return FALSE;
  if (cfg->val_data && *cfg->val_data) {
    r->val = open_source(r, cfg->val_data, "val_data", cache_dir, folders, error);
    if (!r->val)
      return FALSE;
  }
  /* text_encoder: the captions' embeddings, before rank 0 lets the others read its cache */
  if (cohort_data_source_has_captions(r->train) &&
      !cohort_rank_run_encode_captions(r, cache_dir, error))
    return FALSE;
  /* Token caches of earlier data (another version of the files, another tokenizer) go, by the
   * rank that writes this folder. */
  if (folders->len > 0 && (cfg->distributed_data_loading || o->rank == 0) &&
      !prune_token_caches(r, cache_dir, folders, error))
    return FALSE;
  if (rank0_first && o->rank == 0 && !cohort_train_dist_wait_for_data(r->dist, error))
    return FALSE;
  return TRUE;
}

/* This rank's sampler: PyTorch's strided split when every rank takes batch_size, else its share
 * of each global micro-batch (data/sampler.h). */
void cohort_rank_run_set_spec(CohortRankRun *r)
{
  const CohortConfig *cfg = r->cfg;
  gboolean shares = r->split != COHORT_SPLIT_EVEN;
  r->spec = (CohortSamplerSpec){
      .n = r->train ? cohort_data_source_count(r->train) : 0,
      .world_size = r->opts->world_size,
      .rank = r->opts->rank,
      .shuffle = cfg->shuffle,
      .seed = cfg->seed,
      .drop_last = cfg->drop_last,
      .global_batch = shares ? (guint64)r->global_micro : 0,
      .share_offset = shares ? (guint64)r->share_offset : 0,
      .share = shares ? (guint64)r->share : 0,
  };
}

/* The sampler and the length of the run. */
static gboolean plan_steps(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  cohort_rank_run_set_spec(r);
  /* Micro-batches per epoch: the same on every rank whatever the split (whole global
   * micro-batches of the padded order). */
  guint64 per_rank = cohort_sampler_num_samples(&r->spec);
  gint64 micro_per_epoch = r->split != COHORT_SPLIT_EVEN
                               ? (gint64)cohort_sampler_global_batches(&r->spec)
                               : (gint64)(per_rank / (guint64)r->share);
  r->steps_per_epoch = micro_per_epoch / r->accum;
  if (r->steps_per_epoch < 1) {
    g_autofree char *train_path = cohort_resolve_path(cfg->train_data);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: %" G_GUINT64_FORMAT " training samples give %" G_GUINT64_FORMAT
                " per rank, fewer than one step needs (%d examples per micro-batch on this rank "
                "× gradient_accumulation_steps %d); use more data or a smaller batch",
                train_path, (guint64)r->spec.n, per_rank, r->share, r->accum);
    return FALSE;
  }
  r->total_steps = cfg->max_steps > 0 ? cfg->max_steps : (gint64)cfg->epochs * r->steps_per_epoch;
  r->base_lr = cohort_launch_scaled_lr(cfg, o->world_size);
  /* A warm-up longer than the run would never reach the learning rate: shorten it to the run,
   * as other trainers do, so shortening a run needs no thought about warm-up. */
  r->warmup_steps = cfg->warmup_steps;
  if (cfg->warmup_steps > r->total_steps) {
    r->warmup_steps = (int)r->total_steps;
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "warmup_steps %d is longer than the run's %" G_GINT64_FORMAT
                        " steps: warming up over all %" G_GINT64_FORMAT " instead",
                        cfg->warmup_steps, r->total_steps, r->total_steps);
  }
  return TRUE;
}

/* What skip_bad_images left out of `data`: each file with its reason, the first
 * MAX_SKIPS_NAMED of them, then how many more (a thousand broken files are not a thousand
 * lines). */
#define MAX_SKIPS_NAMED 20
static void report_skipped(CohortRankRun *r, const CohortDataSource *data, const char *path)
{
  guint skipped = cohort_data_source_num_skipped(data);
  for (guint i = 0; i < skipped && i < MAX_SKIPS_NAMED; i++)
    cohort_progress_log(r->progress, COHORT_LEVEL_WARNING, "skip_bad_images: left out %s",
                        cohort_data_source_skipped_reason(data, i));
  if (skipped > MAX_SKIPS_NAMED)
    cohort_progress_log(r->progress, COHORT_LEVEL_WARNING,
                        "skip_bad_images: and %u more unreadable images in %s left out (%u in all)",
                        skipped - MAX_SKIPS_NAMED, path, skipped);
}

/* What the model's shape takes from the data: the number of classes of image data. The
 * validation set must have the same classes, by name and order. */
static gboolean resolve_from_data(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  r->model_cfg = cohort_config_copy(cfg);
  /* The config names the tokenizer the run used (an init_from folder's, say), so checkpoints
   * and the export say which. */
  g_autofree char *tokenizer = r->tokenizer ? cohort_config_tokenizer_path(cfg) : NULL;
  if (tokenizer) {
    g_free(r->model_cfg->tokenizer);
    r->model_cfg->tokenizer = g_steal_pointer(&tokenizer);
  }
  if (cfg->data_format != COHORT_DATA_IMAGES)
    return TRUE;
  int classes = cohort_data_source_num_classes(r->train);
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
    const char *const *a = cohort_data_source_class_names(r->train);
    const char *const *b = cohort_data_source_class_names(r->val);
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
  report_skipped(r, r->train, train_path);
  if (r->val) {
    g_autofree char *val_path = cohort_resolve_path(cfg->val_data);
    report_skipped(r, r->val, val_path);
  }
  return TRUE;
}

/* The ZeRO stage this rank runs: the config's, or 0 with one process (nothing to shard). */
static int run_stage(const CohortRankRun *r)
{
  return r->opts->world_size < 2 || !r->opts->comm ? 0 : r->cfg->zero_stage;
}

/* The whole optimizer state, or with ZeRO stages 1 to 3 over several ranks this rank's
 * shard. */
static CohortOptimizer *new_optimizer(CohortRankRun *r, size_t n)
{
  const CohortConfig *cfg = r->cfg;
  if (cfg->zero_stage == 0)
    return cohort_optimizer_new_for(cfg, r->be, n);
  if (run_stage(r) == 0) {
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "zero_stage %d with one process: there is nothing to shard across, so "
                        "it trains as stage 0",
                        cfg->zero_stage);
    return cohort_optimizer_new_for(cfg, r->be, n);
  }
  if (r->shard) {
    guint n_ranges = 0;
    g_autofree CohortParamRange *ranges = cohort_shard_ranges(r->shard, &n_ranges);
    const CohortShardPlan *p = cohort_shard_plan(r->shard);
    size_t frozen = r->model->n_params - n;
    g_autofree char *base =
        frozen
            ? g_strdup_printf("; the frozen base, %zu parameters, is whole on every rank", frozen)
            : g_strdup("");
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "ZeRO stage %d: each of the %d ranks keeps %zu of the %zu %s' "
                        "gradients, optimizer state%s%s (%u layers, each split among the ranks)%s",
                        cohort_shard_stage(r->shard), p->world, p->shard_floats, n,
                        frozen ? "parameters that learn" : "parameters",
                        cfg->ema_decay > 0 ? ", EMA weights" : "",
                        cohort_shard_stage(r->shard) == 3 ? " and the parameters themselves" : "",
                        p->n_units, base);
    return cohort_optimizer_new_sharded(cfg, r->be, n, ranges, n_ranges);
  }
  r->zero = cohort_zero_new(r->opts->comm, &r->dev, n);
  CohortParamRange ranges[2];
  guint n_ranges = cohort_zero_ranges(r->zero, ranges);
  CohortOptimizer *opt = cohort_optimizer_new_sharded(cfg, r->be, n, ranges, n_ranges);
  if (opt && cohort_optimizer_n_states(opt) > 0)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "ZeRO stage 1: each of the %d ranks keeps the optimizer state of %zu of "
                        "the %zu parameters (%.1f MiB instead of %.1f MiB)",
                        r->opts->world_size, cohort_optimizer_state_len(opt), n,
                        cohort_optimizer_state_bytes(opt) / 1048576.0,
                        cohort_optimizer_n_states(opt) * n * sizeof(float) / 1048576.0);
  return opt;
}

static gboolean alloc_model(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (!resolve_from_data(r, error))
    return FALSE;
  /* ZeRO stages 2 and 3: the gradients (and at stage 3 the parameters) are reserved address
   * ranges that hold only the layers in flight. */
  int stage = run_stage(r) >= 2 ? run_stage(r) : 0;
  if (stage >= 2 && !r->be->reserve) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"zero_stage\": %d keeps gradients (and at stage 3 parameters) in "
                "address space that holds memory one layer at a time, which the %s backend "
                "cannot reserve; allowed on %s ranks: zero_stage 0 or 1",
                r->opts->config_source ? r->opts->config_source : "config", stage, r->be->name,
                r->be->name);
    return FALSE;
  }
  cohort_model_set_creating_sharded(stage);
  r->model = cohort_model_new(r->be, r->model_cfg, r->B, error);
  cohort_model_set_creating_sharded(0);
  if (!r->model)
    return FALSE;
  if (stage >= 2 && !(r->shard = cohort_shard_new(r->opts->comm, r->model, stage,
                                                  cfg->ema_decay > 0, r->dev.cuda_device, error)))
    return FALSE;
  size_t n = r->model->n_params;
  /* Only what learns has optimizer state (engine/model/finetune.h). */
  r->opt = new_optimizer(r, r->model->n_trainable);
  if (!r->opt) {
    g_autofree char *name = cohort_config_get(cfg, "optimizer");
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: out of %s memory for the state of %zu parameters", name, r->be->name, n);
    return FALSE;
  }
  cohort_train_dist_set_optim_bytes(r->dist, cohort_optimizer_state_bytes(r->opt));
  r->batch = cohort_data_source_batch_new(r->train, r->B);
  r->tokens_per_example = r->batch->T;
  r->metrics = g_new0(double, MAX(r->model->n_metrics, 1));
  if (cfg->ema_decay > 0 && !r->shard) {
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

gboolean cohort_rank_run_all_ok(CohortRankRun *r, gboolean ok, GError *mine, const char *what,
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
static gboolean setup_teacher(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  if (!cfg->teacher_from || !*cfg->teacher_from)
    return TRUE;
  GError *local = NULL;
  r->teacher = cohort_teacher_load(r->be, r->model_cfg, cohort_data_source_class_names(r->train),
                                   r->B, &local);
  if (!cohort_rank_run_all_ok(r, r->teacher != NULL, local, "load the teacher", error))
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
  if (!cohort_rank_run_all_ok(r, same, local, "find rank 0's teacher", error))
    return FALSE;
  CohortDistillSettings settings;
  cohort_distill_settings_from_config(cfg, &settings);
  r->distill = cohort_distill_new(r->model, r->teacher->model, &settings, error);
  if (!r->distill)
    return FALSE;
  cohort_train_dist_set_teacher_bytes(r->dist, cohort_teacher_bytes(r->teacher));
  cohort_progress_log(
      r->progress, COHORT_LEVEL_INFO,
      "teacher_from %s: %s%s, %.2fM parameters, %.1f MiB on each rank, sha256 %.12s…",
      r->teacher->dir, r->teacher->weights, r->teacher->ema ? " (EMA weights)" : "",
      r->teacher->model->n_params / 1e6, cohort_teacher_bytes(r->teacher) / 1048576.0,
      r->teacher->sha256);
  return TRUE;
}

/* frozen_dtype bf16: once the whole base is in place (started or resumed), its frozen matrices
 * go into bf16 (engine/model/frozen-store.h). A run resumed from a whole-model checkpoint
 * would save whole ones, reading the base outside its layers: refused. */
static gboolean store_frozen(CohortRankRun *r, gboolean resumed, GError **error)
{
  CohortModel *m = r->model;
  if (!m->params_range)
    return TRUE;
  if (resumed && !r->st.frozen_sha256[0])
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"frozen_dtype\": \"bf16\" cannot continue a whole-model "
                       "checkpoint (it would save whole ones); allowed: fp32 for this run");
  if (!cohort_frozen_store_take(m, error))
    return FALSE;
  size_t floats = cohort_frozen_store_floats(m);
  cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                      "frozen_dtype bf16: %zu frozen values in %.2f MiB of bf16 (%.2f MiB of "
                      "fp32 given back; widened one layer at a time)",
                      floats, (double)floats * 2 / (1 << 20), (double)floats * 4 / (1 << 20));
  return TRUE;
}

gboolean cohort_rank_run_setup(CohortRankRun *r, char **resumed_from, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  r->accum = cfg->gradient_accumulation_steps;
  if (!cohort_model_check_config(cfg, o->config_source, error) ||
      !cohort_finetune_check_config(cfg, o->config_source, error) ||
      !cohort_distill_check_config(cfg, o->config_source, error) ||
      !cohort_rank_run_prepare_workspace(r, error) || !cohort_rank_run_check_start(r, error) ||
      !cohort_rank_run_load_tokenizer(r, error) || !open_data(r, error) || !plan_steps(r, error) ||
      !alloc_model(r, error) || !setup_teacher(r, error))
    return FALSE;
  r->st = (CohortTrainState){.sample_rng = (guint64)cfg->seed ^ 0x5eed5a3b1e5ULL};
  if (r->teacher)
    g_strlcpy(r->st.teacher_sha256, r->teacher->sha256, sizeof r->st.teacher_sha256);
  gboolean keep_scale = FALSE;
  if (!cohort_rank_run_resume_or_start(r, resumed_from, &keep_scale, error) ||
      !store_frozen(r, *resumed_from != NULL, error))
    return FALSE;
  r->st.global_batch = cohort_rank_run_global_batch(r);
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

gboolean cohort_rank_run_setup_probe(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  cohort_rank_run_even_split(r);
  r->accum = cfg->gradient_accumulation_steps;
  if (!cohort_model_check_config(cfg, o->config_source, error) ||
      !cohort_distill_check_config(cfg, o->config_source, error) || !open_data(r, error) ||
      !plan_steps(r, error) || !alloc_model(r, error) || !setup_teacher(r, error))
    return FALSE;
  /* The time of a step does not depend on the weights' values: the seed's do. The probe uses
   * the model whole, reserved ranges (ZeRO stages 2 and 3) too. */
  if (!cohort_model_commit_whole(r->model, error))
    return FALSE;
  cohort_model_init(r->model, (guint64)cfg->seed);
  r->st = (CohortTrainState){.loss_scale = 1.0};
  return TRUE;
}

void cohort_rank_run_free(CohortRankRun *r)
{
  /* The loader threads read the data and the example orders: they stop first. */
  g_clear_pointer(&r->prefetch, cohort_prefetch_free);
  for (int i = 0; i < 2; i++)
    g_clear_pointer(&r->epoch_indices[i], g_array_unref);
  g_clear_pointer(&r->train, cohort_data_source_free);
  g_clear_pointer(&r->val, cohort_data_source_free);
  g_clear_pointer(&r->tokenizer, cohort_tokenizer_free);
  g_clear_pointer(&r->distill, cohort_distill_free);
  g_clear_pointer(&r->teacher, cohort_teacher_free);
  /* The shard's communication thread uses the model's buffers: it stops before they go. */
  g_clear_pointer(&r->shard, cohort_shard_free);
  g_clear_pointer(&r->model, cohort_model_free);
  g_clear_pointer(&r->opt, cohort_optimizer_free);
  g_clear_pointer(&r->zero, cohort_zero_free);
  g_clear_pointer(&r->dist, cohort_train_dist_free);
  g_clear_pointer(&r->batch, cohort_batch_free);
  g_clear_pointer(&r->model_cfg, cohort_config_free);
  cohort_rank_run_balance_free(r);
  if (r->be) {
    r->be->free(r->ema);
    r->be->free(r->backup);
  }
  g_free(r->ema_host);
  g_free(r->metrics);
}

gint64 cohort_rank_run_global_batch(const CohortRankRun *r)
{
  return (gint64)r->global_micro * r->accum;
}

/* This rank's example order of `epoch` (a reference), made once per epoch for every thread. The
 * two most recent are kept: loader threads run at most into the next epoch. */
static GArray *epoch_indices(CohortRankRun *r, gint64 epoch)
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

void cohort_rank_run_forget_orders(CohortRankRun *r)
{
  g_mutex_lock(&r->indices_lock);
  for (int i = 0; i < 2; i++)
    g_clear_pointer(&r->epoch_indices[i], g_array_unref);
  g_mutex_unlock(&r->indices_lock);
}

static gboolean load_into(CohortRankRun *r, CohortBatch *batch, gint64 epoch, gint64 micro,
                          GError **error)
{
  g_autoptr(GArray) idx = epoch_indices(r, epoch);
  batch->B = r->share;
  batch->epoch = epoch;
  for (int b = 0; b < r->share; b++) {
    guint64 i = g_array_index(idx, guint64, (guint64)micro * (guint64)r->share + (guint64)b);
    if (!cohort_data_source_load(r->train, batch, b, i, error))
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_rank_run_step_norm(CohortRankRun *r, gint64 epoch, gint64 micro, double *norm,
                                   GError **error)
{
  g_autoptr(GArray) idx = epoch_indices(r, epoch);
  double counted = 0;
  for (gint64 i = micro * r->share; i < (micro + r->accum) * r->share; i++)
    counted += (double)cohort_data_source_counted(r->train, g_array_index(idx, guint64, i));
  if (!cohort_train_dist_sum(r->dist, &counted, 1, error))
    return FALSE;
  /* The backward and the logged loss weigh this rank by its share (r->weight, 1 with an even
   * split); the norm carries the same weight, so every counted target of the step weighs the
   * same whatever the split. */
  *norm = MAX(counted, 1.0) / ((double)r->accum * r->opts->world_size) * (double)r->weight;
  return TRUE;
}

static gboolean prefetch_load(gpointer data, CohortBatch *batch, gint64 epoch, gint64 micro,
                              GError **error)
{
  return load_into(data, batch, epoch, micro, error);
}

static CohortBatch *prefetch_batch(gpointer data)
{
  CohortRankRun *r = data;
  const CohortBatch *like = r->batch;
  if (r->pinned) {
    CohortBatch *b = cohort_batch_new_with(r->B, like->T, like->C, like->H, like->W,
                                           r->be->host_alloc, r->be->host_free);
    if (b && like->text)
      cohort_batch_add_text(b, like->M, like->text_dim);
    return b;
  }
  return cohort_data_source_batch_new(r->train, r->B);
}

gboolean cohort_rank_run_start_loading(CohortRankRun *r, GError **error)
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

gboolean cohort_rank_run_load_micro_batch(CohortRankRun *r, gint64 epoch, gint64 micro,
                                          gint64 *waited_us, GError **error)
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
