#include "trainer.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "checkpoint.h"
#include "device.h"
#include "kernels/backend.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "generate.h"
#include "gpt-io.h"
#include "gpt.h"
#include "optim.h"
#include "trainer-dist.h"

/* Everything one run holds; lives for the length of cohort_train. */
typedef struct {
  const CohortConfig *cfg;
  const CohortTrainOptions *opts;
  CohortProgress *progress;
  CohortDataset *train;
  CohortDataset *val;
  CohortGpt *gpt;
  CohortAdamW *opt;
  CohortComputeDevice dev;
  const CohortBackend *be; /* dev.be: where parameters, gradients, moments and EMA live */
  float *ema;              /* backend memory; NULL when ema_decay == 0 */
  float *backup;           /* scratch for swapping EMA weights in for eval/samples */
  float *ema_host;         /* host copy of the EMA for checkpoints on a GPU; NULL on the CPU */
  CohortTrainDist *dist;
  int B, T, accum;
  int *inputs, *targets; /* [B, T] */
  guint64 *indices;      /* this rank's sample order for the current epoch */
  guint64 n_indices;
  gint64 indices_epoch;
  CohortSamplerSpec spec;
  gint64 steps_per_epoch;
  gint64 total_steps;
  double base_lr;
  CohortTrainState st;
  double last_val_loss;
  gboolean have_val_loss;
} Run;

int cohort_train_threads(const CohortConfig *cfg, int local_world_size)
{
  if (cfg->threads > 0)
    return cfg->threads;
  const char *omp = g_getenv("OMP_NUM_THREADS");
  if (omp && atoi(omp) > 0)
    return atoi(omp);
  int n = (int)g_get_num_processors() / MAX(local_world_size, 1);
  return MAX(n, 1);
}

static gboolean ensure_epoch_indices(Run *r, gint64 epoch)
{
  if (r->indices && r->indices_epoch == epoch)
    return TRUE;
  g_free(r->indices);
  r->indices = cohort_sampler_indices(&r->spec, (guint64)epoch, &r->n_indices);
  r->indices_epoch = epoch;
  return TRUE;
}

/* Fills inputs/targets with micro-batch `micro` (0-based within the epoch). */
static void load_micro_batch(Run *r, gint64 epoch, gint64 micro)
{
  ensure_epoch_indices(r, epoch);
  for (int b = 0; b < r->B; b++) {
    guint64 idx = r->indices[(guint64)micro * (guint64)r->B + (guint64)b];
    cohort_dataset_window(r->train, idx, r->inputs + (size_t)b * r->T,
                          r->targets + (size_t)b * r->T);
  }
}

static void swap_in_ema(Run *r, gboolean in)
{
  if (!r->ema)
    return;
  size_t bytes = cohort_gpt_num_params(r->gpt) * sizeof(float);
  float *params = cohort_gpt_params(r->gpt);
  if (in) {
    r->be->copy(r->backup, params, bytes);
    r->be->copy(params, r->ema, bytes);
  } else {
    r->be->copy(params, r->backup, bytes);
  }
}

/* The EMA weights in host memory (checkpoints and export): the buffer itself on the CPU. */
static const float *ema_on_host(Run *r)
{
  if (!r->ema || !r->ema_host)
    return r->ema;
  r->be->download(r->ema_host, r->ema, cohort_gpt_num_params(r->gpt) * sizeof(float));
  return r->ema_host;
}

/* Mean validation loss over eval_steps × B × world windows, each rank taking every
 * world-th window, so N ranks evaluate exactly what one rank with N× the batch would. */
static gboolean evaluate(Run *r, double *val_loss, gint64 *val_tokens, GError **error)
{
  int world = r->opts->world_size, rank = r->opts->rank;
  gsize nwin = cohort_dataset_num_windows(r->val);
  gint64 total = (gint64)r->cfg->eval_steps * r->B * world;
  double sums[2] = {0, 0}; /* loss × tokens, tokens */
  swap_in_ema(r, TRUE);
  for (int s = 0; s < r->cfg->eval_steps; s++) {
    for (int b = 0; b < r->B; b++) {
      gint64 g = ((gint64)s * r->B + b) * world + rank;
      cohort_dataset_window(r->val, (gsize)(g % (gint64)nwin), r->inputs + (size_t)b * r->T,
                            r->targets + (size_t)b * r->T);
    }
    float loss = cohort_gpt_forward(r->gpt, r->inputs, r->targets, r->B, r->T);
    sums[0] += (double)loss * r->B * r->T;
    sums[1] += (double)r->B * r->T;
  }
  swap_in_ema(r, FALSE);
  if (!cohort_train_dist_sum(r->dist, sums, 2, error))
    return FALSE;
  *val_loss = sums[0] / sums[1];
  *val_tokens = total * r->T;
  return TRUE;
}

static void sample_text(Run *r)
{
  const CohortConfig *cfg = r->cfg;
  int n_prompt = 0;
  g_autofree int *prompt = NULL;
  if (cfg->data_format == COHORT_DATA_TEXT)
    prompt = cohort_text_encode(cfg->sample_prompt, &n_prompt);
  swap_in_ema(r, TRUE);
  int n_out = 0;
  g_autofree int *seq = cohort_generate(r->gpt, prompt, n_prompt, cfg->sample_tokens, 40, 1.0,
                                        &r->st.sample_rng, &n_out);
  swap_in_ema(r, FALSE);
  JsonObject *f = json_object_new();
  json_object_set_int_member(f, "step", r->st.step);
  json_object_set_string_member(f, "prompt", cfg->sample_prompt);
  if (cfg->data_format == COHORT_DATA_TEXT) {
    g_autofree char *text = cohort_bytes_to_utf8(seq, n_out);
    json_object_set_string_member(f, "text", text);
    cohort_progress_log(r->progress, "info", "sample at step %" G_GINT64_FORMAT ": %s", r->st.step,
                        text);
  } else {
    /* Token shards carry no tokenizer: the sample is the token ids. */
    JsonArray *ids = json_array_new();
    for (int i = 0; i < n_out; i++)
      json_array_add_int_element(ids, seq[i]);
    json_object_set_array_member(f, "tokens", ids);
  }
  cohort_progress_emit(r->progress, "sample", f);
}

static gboolean save_checkpoint(Run *r, GError **error)
{
  g_autofree char *dir = NULL;
  if (r->opts->rank == 0) {
    if (!cohort_checkpoint_save(r->cfg->workspace_dir, r->cfg, r->gpt, r->opt, ema_on_host(r),
                                &r->st, r->cfg->keep_last, &dir, error))
      return FALSE;
    JsonObject *f = json_object_new();
    json_object_set_int_member(f, "step", r->st.step);
    json_object_set_string_member(f, "path", dir);
    cohort_progress_emit(r->progress, "checkpoint", f);
  }
  /* Nobody moves on before the checkpoint is complete. */
  return cohort_train_dist_barrier(r->dist, "checkpoint", error);
}

static gboolean run_eval(Run *r, GError **error)
{
  double vl;
  gint64 vt;
  if (!r->val)
    return TRUE;
  if (!evaluate(r, &vl, &vt, error))
    return FALSE;
  r->last_val_loss = vl;
  r->have_val_loss = TRUE;
  JsonObject *f = json_object_new();
  json_object_set_int_member(f, "step", r->st.step);
  json_object_set_double_member(f, "val_loss", vl);
  json_object_set_int_member(f, "val_tokens", vt);
  json_object_set_boolean_member(f, "ema", r->ema != NULL);
  cohort_progress_emit(r->progress, "eval", f);
  cohort_progress_log(r->progress, "info", "step %" G_GINT64_FORMAT ": val loss %.4f%s", r->st.step,
                      vl, r->ema ? " (EMA weights)" : "");
  return TRUE;
}

static gboolean export_model(Run *r, char **model_path, GError **error)
{
  g_autofree char *path = g_build_filename(r->cfg->workspace_dir, "model.safetensors", NULL);
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  g_autofree char *step = g_strdup_printf("%" G_GINT64_FORMAT, r->st.step);
  g_hash_table_insert(meta, "format", "pt");
  g_hash_table_insert(meta, "cohort_step", step);
  if (!cohort_gpt_save_hf(r->gpt, NULL, path, meta, error))
    return FALSE;
  if (r->ema) {
    g_autofree char *ema_path =
        g_build_filename(r->cfg->workspace_dir, "model-ema.safetensors", NULL);
    if (!cohort_gpt_save_hf(r->gpt, ema_on_host(r), ema_path, meta, error))
      return FALSE;
  }
  *model_path = g_steal_pointer(&path);
  return TRUE;
}

static const char *gemm_mode_name(CohortGemmMode m)
{
  switch (m) {
  case COHORT_GEMM_TF32:
    return "tf32";
  case COHORT_GEMM_BF16:
    return "bf16";
  case COHORT_GEMM_FP16:
    return "fp16";
  case COHORT_GEMM_FP32:
  default:
    return "fp32";
  }
}

/* The GEMM mode a config asks for. TF32 is only a permission: the CPU computes fp32. */
static CohortGemmMode gemm_mode_for(const CohortConfig *cfg, const CohortBackend *be)
{
  switch (cfg->precision) {
  case COHORT_PRECISION_BF16:
    return COHORT_GEMM_BF16;
  case COHORT_PRECISION_FP16:
    return COHORT_GEMM_FP16;
  case COHORT_PRECISION_FP32:
  default:
    return cfg->allow_tf32 && be != cohort_backend_cpu() ? COHORT_GEMM_TF32 : COHORT_GEMM_FP32;
  }
}

static void emit_start(Run *r, const char *resumed_from, int threads)
{
  const CohortConfig *cfg = r->cfg;
  int world = r->opts->world_size;
  JsonObject *f = json_object_new();
  g_autofree char *run_name = g_path_get_basename(cfg->workspace_dir);
  json_object_set_string_member(f, "run", run_name);
  json_object_set_string_member(f, "workspace", cfg->workspace_dir);
  json_object_set_string_member(f, "model", cfg->model);
  json_object_set_int_member(f, "params", (gint64)cohort_gpt_num_params(r->gpt));
  json_object_set_string_member(f, "device", r->be->name);
  if (r->dev.cuda_device >= 0)
    json_object_set_int_member(f, "cuda_device", r->dev.cuda_device);
  json_object_set_int_member(f, "threads", threads);
  g_autofree char *precision = cohort_config_get(cfg, "precision");
  json_object_set_string_member(f, "precision", precision);
  json_object_set_string_member(f, "gemm", gemm_mode_name(r->be->get_gemm_mode()));
  if (cfg->precision == COHORT_PRECISION_FP16)
    json_object_set_double_member(f, "loss_scale", r->st.loss_scale);
  json_object_set_int_member(f, "world_size", world);
  json_object_set_int_member(f, "batch_size", cfg->batch_size);
  json_object_set_int_member(f, "gradient_accumulation_steps", cfg->gradient_accumulation_steps);
  json_object_set_int_member(f, "global_batch", cohort_config_global_batch(cfg, world));
  json_object_set_int_member(f, "tokens_per_step",
                             (gint64)cohort_config_global_batch(cfg, world) * cfg->seq_len);
  json_object_set_double_member(f, "learning_rate", cfg->learning_rate);
  json_object_set_double_member(f, "scaled_learning_rate", r->base_lr);
  g_autofree char *scaling = cohort_config_get(cfg, "lr_scaling");
  json_object_set_string_member(f, "lr_scaling", scaling);
  json_object_set_int_member(f, "total_steps", r->total_steps);
  json_object_set_int_member(f, "steps_per_epoch", r->steps_per_epoch);
  json_object_set_int_member(f, "start_step", r->st.step);
  if (resumed_from)
    json_object_set_string_member(f, "resumed_from", resumed_from);
  else
    json_object_set_null_member(f, "resumed_from");
  g_autofree char *cfg_json = cohort_config_to_json(cfg, FALSE);
  g_autoptr(JsonNode) cfg_node = json_from_string(cfg_json, NULL);
  if (cfg_node)
    json_object_set_member(f, "config", g_steal_pointer(&cfg_node));
  cohort_progress_emit(r->progress, "start", f);

  double params_m = (double)cohort_gpt_num_params(r->gpt) / 1e6;
  g_autofree char *where =
      r->dev.cuda_device >= 0
          ? cohort_device_describe(&r->dev)
          : g_strdup_printf("cpu (%d thread%s per rank)", threads, threads == 1 ? "" : "s");
  cohort_progress_log(r->progress, "info",
                      "training %s: %.2fM parameters on %s in %s (%s matrix products), "
                      "%d rank%s, global batch %d × %d tokens, lr %.3g (scaling %s), "
                      "%" G_GINT64_FORMAT " steps (%" G_GINT64_FORMAT " per epoch)",
                      run_name, params_m, where, precision, gemm_mode_name(r->be->get_gemm_mode()),
                      world, world == 1 ? "" : "s", cohort_config_global_batch(cfg, world),
                      cfg->seq_len, r->base_lr, scaling, r->total_steps, r->steps_per_epoch);
  if (r->be->describe_gemm)
    cohort_progress_log(r->progress, "info", "%s matrix products: %s",
                        gemm_mode_name(r->be->get_gemm_mode()),
                        r->be->describe_gemm(r->be->get_gemm_mode()));
}

static gboolean open_data(Run *r, const char *cache_dir, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  g_autofree char *train_path = cohort_resolve_path(cfg->train_data);
  r->train = cohort_dataset_open_prepared(train_path, cfg->data_format, cfg->vocab_size,
                                          cfg->seq_len, cache_dir, NULL, error);
  if (!r->train)
    return FALSE;
  if (cfg->val_data && *cfg->val_data) {
    g_autofree char *val_path = cohort_resolve_path(cfg->val_data);
    r->val = cohort_dataset_open_prepared(val_path, cfg->data_format, cfg->vocab_size, cfg->seq_len,
                                          cache_dir, NULL, error);
    if (!r->val)
      return FALSE;
  }
  return TRUE;
}

/* Opens data, builds the model, restores a checkpoint: everything before the first step. */
static gboolean setup(Run *r, char **resumed_from, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *o = r->opts;
  /* Data preparation (the content scan) is recorded in an index under the workspace: with
   * distributed_data_loading every rank keeps its own (cache/rank-N); without it rank 0
   * prepares first and the others wait, then reuse rank 0's index. */
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
  if (!open_data(r, cache_dir, error))
    return FALSE;
  if (rank0_first && o->rank == 0 && !cohort_train_dist_barrier(r->dist, "data", error))
    return FALSE;
  g_autofree char *train_path = cohort_resolve_path(cfg->train_data);

  r->B = cfg->batch_size;
  r->T = cfg->seq_len;
  r->accum = cfg->gradient_accumulation_steps;
  r->spec = (CohortSamplerSpec){
      .n = cohort_dataset_num_windows(r->train),
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
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: %" G_GUINT64_FORMAT " training windows of %d tokens give %" G_GUINT64_FORMAT
                " per rank, fewer than one step needs (batch_size %d × "
                "gradient_accumulation_steps %d); use more data or a smaller batch",
                train_path, (guint64)r->spec.n, r->T, per_rank, r->B, r->accum);
    return FALSE;
  }
  r->total_steps = cfg->max_steps > 0 ? cfg->max_steps : (gint64)cfg->epochs * r->steps_per_epoch;
  r->base_lr = cohort_config_scaled_lr(cfg, o->world_size);

  CohortGptShape shape = {cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->vocab_size};
  r->gpt = cohort_gpt_new_on(r->be, &shape, r->B, error);
  if (!r->gpt)
    return FALSE;
  size_t n = cohort_gpt_num_params(r->gpt);
  r->opt = cohort_adamw_new_on(r->be, n);
  if (!r->opt) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "AdamW: out of %s memory for the moments of %zu parameters", r->be->name, n);
    return FALSE;
  }
  r->inputs = g_new(int, (size_t)r->B * r->T);
  r->targets = g_new(int, (size_t)r->B * r->T);
  if (cfg->ema_decay > 0) {
    r->ema = r->be->alloc(n * sizeof(float));
    r->backup = r->be->alloc(n * sizeof(float));
    if (!r->ema || !r->backup) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "EMA: out of %s memory for %zu parameters", r->be->name, n);
      return FALSE;
    }
    if (!cohort_gpt_on_host(r->gpt))
      r->ema_host = g_new(float, n);
  }
  r->st = (CohortTrainState){.sample_rng = (guint64)cfg->seed ^ 0x5eed5a3b1e5ULL};
  gboolean keep_scale = FALSE;

  g_autofree char *ckpt = NULL;
  if (o->resume && g_str_equal(o->resume, "auto"))
    ckpt = cohort_checkpoint_find_latest(cfg->workspace_dir);
  else if (o->resume)
    ckpt = g_strdup(o->resume);

  if (ckpt) {
    g_autoptr(CohortConfig) saved = NULL;
    float *ema_load = r->ema_host ? r->ema_host : r->ema;
    if (!cohort_checkpoint_load(ckpt, r->gpt, r->opt, ema_load, &r->st, &saved, error))
      return FALSE;
    if (r->ema_host)
      r->be->upload(r->ema, r->ema_host, n * sizeof(float));
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
    keep_scale = saved->precision == COHORT_PRECISION_FP16 && r->st.loss_scale > 0;
    if (r->ema && !saved->ema_decay)
      r->be->copy(r->ema, cohort_gpt_params(r->gpt), n * sizeof(float));
    *resumed_from = g_steal_pointer(&ckpt);
  } else {
    if (cfg->init_from && *cfg->init_from) {
      g_autofree char *init_path = cohort_resolve_path(cfg->init_from);
      if (!cohort_gpt_load_hf(r->gpt, init_path, error))
        return FALSE;
    } else {
      cohort_gpt_init_weights(r->gpt, (guint64)cfg->seed);
    }
    /* Every rank starts from rank 0's weights, as DDP's constructor does. */
    if (!cohort_train_dist_broadcast_params(r->dist, cohort_gpt_params(r->gpt), n, error))
      return FALSE;
    if (r->ema)
      r->be->copy(r->ema, cohort_gpt_params(r->gpt), n * sizeof(float));
  }
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

static void run_free(Run *r)
{
  g_clear_pointer(&r->train, cohort_dataset_free);
  g_clear_pointer(&r->val, cohort_dataset_free);
  g_clear_pointer(&r->gpt, cohort_gpt_free);
  g_clear_pointer(&r->opt, cohort_adamw_free);
  g_clear_pointer(&r->dist, cohort_train_dist_free);
  if (r->be) {
    r->be->free(r->ema);
    r->be->free(r->backup);
  }
  g_free(r->ema_host);
  g_free(r->inputs);
  g_free(r->targets);
  g_free(r->indices);
}

/* One optimizer step: accum micro-batches, gradient reduction, clipping, AdamW, EMA.
 * Returns the mean loss over the global batch. */
static gboolean train_step(Run *r, double *loss_out, double *norm_out, double *lr_out,
                           double *scale_out, gboolean *skipped_out, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  size_t n = cohort_gpt_num_params(r->gpt);
  float *params = cohort_gpt_params(r->gpt);
  float *grads = cohort_gpt_grads(r->gpt);
  double loss_sum = 0;
  /* fp16: the loss (so every gradient) is multiplied by the scale, which lifts small
   * gradients out of fp16's underflow in the matrix products, and divided out again below. */
  gboolean fp16 = cfg->precision == COHORT_PRECISION_FP16;
  float scale = fp16 ? (float)r->st.loss_scale : 1.0f;
  *scale_out = scale;
  *skipped_out = FALSE;

  cohort_gpt_zero_grad(r->gpt);
  for (int m = 0; m < r->accum; m++) {
    gint64 micro = r->st.batch_in_epoch + m;
    gint64 t0 = g_get_monotonic_time();
    load_micro_batch(r, r->st.epoch, micro);
    cohort_train_dist_add_data_time(r->dist, g_get_monotonic_time() - t0);
    /* Communication only on the last micro-step (DDP's no_sync on the others). */
    cohort_train_dist_begin_backward(r->dist, m == r->accum - 1);
    loss_sum += cohort_gpt_forward(r->gpt, r->inputs, r->targets, r->B, r->T);
    cohort_gpt_backward(r->gpt, scale / (float)r->accum);
    if (!cohort_train_dist_end_backward(r->dist, error))
      return FALSE;
  }
  double loss = loss_sum / r->accum;
  if (!cohort_train_dist_sum(r->dist, &loss, 1, error))
    return FALSE;
  *loss_out = loss / r->opts->world_size;

  if (fp16)
    r->be->scale(grads, n, 1.0f / scale);
  *norm_out = cohort_clip_grad_norm_on(r->be, grads, n, cfg->grad_clip);
  double lr = cohort_lr_at(cfg->lr_schedule, r->base_lr, cfg->warmup_steps, cfg->min_lr_ratio,
                           (int)r->st.step, (int)r->total_steps);
  *lr_out = lr;
  /* An inf or NaN gradient (an fp16 overflow) skips the update and halves the scale; a run of
   * clean steps doubles it (PyTorch's GradScaler). Every rank holds the same reduced
   * gradients, so every rank takes the same decision. */
  if (fp16 && !isfinite(*norm_out)) {
    *skipped_out = TRUE;
    r->st.skipped_steps++;
    r->st.loss_scale *= 0.5;
    r->st.scale_good_steps = 0;
  } else {
    guint n_tensors = 0;
    const CohortTensorInfo *tensors = cohort_gpt_tensors(r->gpt, &n_tensors);
    /* AdamW counts the updates it made, as torch.optim's state "step" does. */
    int t = (int)(r->st.step - r->st.skipped_steps) + 1;
    cohort_adamw_step(r->opt, params, grads, tensors, n_tensors, lr, cfg->beta1, cfg->beta2,
                      cfg->eps, cfg->weight_decay, t);
    if (r->ema)
      cohort_ema_update_on(r->be, r->ema, params, n, cfg->ema_decay);
    if (fp16 && ++r->st.scale_good_steps >= cfg->loss_scale_growth_interval) {
      r->st.loss_scale *= 2.0;
      r->st.scale_good_steps = 0;
    }
  }
  if (!cohort_device_check(&r->dev, error))
    return FALSE;

  r->st.step++;
  r->st.batch_in_epoch += r->accum;
  r->st.tokens_seen += (gint64)cohort_config_global_batch(cfg, r->opts->world_size) * r->T;
  if (r->st.batch_in_epoch / r->accum >= r->steps_per_epoch) {
    r->st.epoch++;
    r->st.batch_in_epoch = 0;
  }
  return TRUE;
}

static gboolean due(int every, gint64 step)
{
  return every > 0 && step % every == 0;
}

gboolean cohort_train(const CohortConfig *cfg, const CohortTrainOptions *opts, gboolean *stopped,
                      GError **error)
{
  Run run = {.cfg = cfg, .opts = opts, .progress = opts->progress, .indices_epoch = -1};
  Run *r = &run;
  g_autofree char *resumed_from = NULL;
  g_autofree char *model_path = NULL;
  gboolean ok = FALSE, was_stopped = FALSE;
  gint64 last_saved = -1;
  gint64 t_begin = g_get_monotonic_time();
  double loss = NAN;

  if (stopped)
    *stopped = FALSE;
  if (!cohort_config_check_supported(cfg, opts->config_source, error))
    return FALSE;
  int threads = cohort_train_threads(cfg, opts->local_world_size);
  cohort_train_set_threads(threads);
  if (opts->device)
    r->dev = *opts->device;
  else if (!cohort_device_select(cfg, opts->config_source, opts->local_rank, opts->local_world_size,
                                 &r->dev, error))
    return FALSE;
  r->be = r->dev.be;
  r->be->set_gemm_mode(gemm_mode_for(cfg, r->be));
  if (opts->rank == 0 && r->dev.cuda_device >= 0)
    cohort_device_log_local(cfg, opts->local_world_size, r->progress);

  r->dist = cohort_train_dist_new(opts->comm, opts->rank, opts->world_size, cfg);
  cohort_train_dist_set_device(r->dist, &r->dev);
  if (!setup(r, &resumed_from, error))
    goto out;
  cohort_train_dist_attach(r->dist, r->gpt, cfg->bucket_cap_mb);
  last_saved = resumed_from ? r->st.step : -1;
  emit_start(r, resumed_from, threads);
  if (resumed_from)
    cohort_progress_log(r->progress, "info", "resumed from %s at step %" G_GINT64_FORMAT,
                        resumed_from, r->st.step);

  gint64 t_start = g_get_monotonic_time();
  gint64 start_step = r->st.step;
  /* A short window of recent step times for tokens/s and the ETA. */
  enum { WINDOW = 10 };
  gint64 window_t[WINDOW] = {0};
  int print_every = MAX(1, (int)(r->total_steps / 100));
  gint64 tokens_per_step = (gint64)cohort_config_global_batch(cfg, opts->world_size) * r->T;

  while (r->st.step < r->total_steps) {
    gboolean stop = FALSE;
    if (!cohort_train_dist_should_stop(r->dist, opts->stop_flag, &stop, error))
      goto out;
    if (stop) {
      was_stopped = TRUE;
      break;
    }
    gint64 t0 = g_get_monotonic_time();
    double norm, lr, scale;
    gboolean skipped;
    if (!train_step(r, &loss, &norm, &lr, &scale, &skipped, error))
      goto out;
    gint64 t1 = g_get_monotonic_time();
    window_t[r->st.step % WINDOW] = t1;
    cohort_train_dist_add_step_time(r->dist, t1 - t0);

    gint64 done_here = r->st.step - start_step;
    gint64 oldest = done_here >= WINDOW ? window_t[(r->st.step + 1) % WINDOW] : t_start;
    gint64 steps_in_window = done_here >= WINDOW ? WINDOW - 1 : done_here;
    double secs = (double)(t1 - oldest) / 1e6;
    double tok_s = secs > 0 ? (double)(steps_in_window * tokens_per_step) / secs : 0;
    double eta = tok_s > 0 ? (double)((r->total_steps - r->st.step) * tokens_per_step) / tok_s : -1;

    JsonObject *f = json_object_new();
    json_object_set_int_member(f, "step", r->st.step);
    json_object_set_int_member(f, "total_steps", r->total_steps);
    json_object_set_int_member(f, "epoch", r->st.epoch);
    json_object_set_int_member(f, "epoch_step", r->st.batch_in_epoch / r->accum);
    json_object_set_int_member(f, "steps_per_epoch", r->steps_per_epoch);
    /* Not finite after an fp16 overflow (or a diverged run): absent, per the protocol. */
    if (isfinite(loss))
      json_object_set_double_member(f, "loss", loss);
    json_object_set_double_member(f, "lr", lr);
    if (isfinite(norm))
      json_object_set_double_member(f, "grad_norm", norm);
    json_object_set_double_member(f, "tokens_per_s", tok_s);
    json_object_set_double_member(f, "elapsed_s", (double)(t1 - t_start) / 1e6);
    if (eta >= 0 && done_here >= 2)
      json_object_set_double_member(f, "eta_s", eta);
    if (cfg->precision == COHORT_PRECISION_FP16) {
      json_object_set_double_member(f, "loss_scale", scale);
      json_object_set_boolean_member(f, "skipped", skipped);
      json_object_set_int_member(f, "skipped_steps", r->st.skipped_steps);
    }
    cohort_progress_emit(r->progress, "step", f);
    if (skipped)
      cohort_progress_log(r->progress, "warning",
                          "step %" G_GINT64_FORMAT ": gradients overflowed at loss scale %g; "
                          "update skipped, scale now %g",
                          r->st.step, scale, r->st.loss_scale);
    g_autofree char *eta_text = cohort_format_duration(eta);
    cohort_progress_status(
        r->progress, r->st.step % print_every == 0 || r->st.step == r->total_steps,
        "step %" G_GINT64_FORMAT "/%" G_GINT64_FORMAT
        " | loss %.4f | lr %.2e | %.0f tok/s | ETA %s",
        r->st.step, r->total_steps, loss, lr, tok_s, done_here >= 2 ? eta_text : "…");

    if (!cohort_train_dist_report_ranks(r->dist, r->progress, r->st.step, error))
      goto out;
    gboolean last = r->st.step == r->total_steps;
    if (due(cfg->eval_every, r->st.step) && !last && !run_eval(r, error))
      goto out;
    if (due(cfg->sample_every, r->st.step) && !last && opts->rank == 0)
      sample_text(r);
    if (due(cfg->save_every, r->st.step) && !last) {
      if (!save_checkpoint(r, error))
        goto out;
      last_saved = r->st.step;
    }
  }
  cohort_progress_finish_line(r->progress);

  if (!was_stopped) {
    if (!run_eval(r, error))
      goto out;
    if (cfg->sample_every > 0 && opts->rank == 0)
      sample_text(r);
  }
  if (r->st.step != last_saved && r->st.step > 0) {
    if (!save_checkpoint(r, error))
      goto out;
  }
  if (opts->rank == 0 && !was_stopped) {
    if (!export_model(r, &model_path, error))
      goto out;
  }
  ok = TRUE;

out:
  cohort_progress_finish_line(r->progress);
  if (ok) {
    JsonObject *f = json_object_new();
    json_object_set_string_member(f, "status", was_stopped ? "stopped" : "completed");
    json_object_set_int_member(f, "step", r->st.step);
    json_object_set_double_member(f, "elapsed_s", (double)(g_get_monotonic_time() - t_begin) / 1e6);
    if (!isnan(loss))
      json_object_set_double_member(f, "final_loss", loss);
    if (cfg->precision == COHORT_PRECISION_FP16)
      json_object_set_int_member(f, "skipped_steps", r->st.skipped_steps);
    if (r->have_val_loss)
      json_object_set_double_member(f, "val_loss", r->last_val_loss);
    if (model_path)
      json_object_set_string_member(f, "model_path", model_path);
    cohort_progress_emit(r->progress, "done", f);
    if (model_path)
      cohort_progress_log(r->progress, "info", "model saved to %s", model_path);
    else if (was_stopped)
      cohort_progress_log(r->progress, "info",
                          "stopped at step %" G_GINT64_FORMAT "; resume with --resume auto",
                          r->st.step);
  }
  if (stopped)
    *stopped = was_stopped;
  run_free(r);
  /* The mode is the backend's, for the whole process: leave it as found for later users. */
  if (r->be)
    r->be->set_gemm_mode(COHORT_GEMM_FP32);
  return ok;
}
