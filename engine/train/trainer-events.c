/* The events a run emits about itself (docs/progress-protocol.md): `start` with the resolved
 * plan, and after every step a `step` event and the live status line. */
#include "engine/train/trainer-run.h"

#include "engine/model/lora.h"

#include <math.h>

#include "engine/base/json-read.h"
#include "engine/base/json-write.h"
#include "kernels/backend.h"
#include "cohort-build-config.h"
#include "kernels/cpu/gemm-paths.h"

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

static JsonObject *start_fields(CohortRankRun *r, const char *resumed_from, int threads)
{
  const CohortConfig *cfg = r->cfg;
  int world = r->opts->world_size;
  gint64 global_batch = cohort_rank_run_global_batch(r);
  JsonObject *f = json_object_new();
  g_autofree char *run_name = g_path_get_basename(cfg->workspace_dir);
  json_object_set_string_member(f, COHORT_FIELD_RUN, run_name);
  json_object_set_string_member(f, COHORT_FIELD_RUN_ID, r->st.run_id);
  json_object_set_string_member(f, COHORT_FIELD_WORKSPACE, cfg->workspace_dir);
  json_object_set_string_member(f, COHORT_FIELD_MODEL, cfg->model);
  json_object_set_int_member(f, COHORT_FIELD_PARAMS, (gint64)r->model->n_params);
  json_object_set_int_member(f, COHORT_FIELD_TRAINABLE, (gint64)r->model->n_trainable);
  json_object_set_string_member(f, COHORT_FIELD_DEVICE, r->be->name);
  if (r->dev.cuda_device >= 0)
    json_object_set_int_member(f, COHORT_FIELD_CUDA_DEVICE, r->dev.cuda_device);
  cohort_device_add_versions(f);
  json_object_set_int_member(f, COHORT_FIELD_THREADS, threads);
  json_object_set_int_member(f, COHORT_FIELD_NUM_WORKERS, cfg->num_workers);
  json_object_set_boolean_member(f, COHORT_FIELD_PIN_MEMORY, r->pinned);
  g_autofree char *precision = cohort_config_get(cfg, "precision");
  json_object_set_string_member(f, COHORT_FIELD_PRECISION, precision);
  json_object_set_string_member(f, COHORT_FIELD_GEMM, gemm_mode_name(r->be->get_gemm_mode()));
  if (cfg->precision == COHORT_PRECISION_FP16)
    json_object_set_double_member(f, COHORT_FIELD_LOSS_SCALE, r->st.loss_scale);
  json_object_set_int_member(f, COHORT_FIELD_WORLD_SIZE, world);
  json_object_set_int_member(f, COHORT_FIELD_BATCH_SIZE, cfg->batch_size);
  json_object_set_int_member(f, COHORT_FIELD_GRADIENT_ACCUMULATION_STEPS,
                             cfg->gradient_accumulation_steps);
  json_object_set_int_member(f, COHORT_FIELD_GLOBAL_BATCH, global_batch);
  JsonArray *shares = json_array_new();
  for (int q = 0; q < world; q++)
    json_array_add_int_element(shares, r->shares[q]);
  json_object_set_array_member(f, COHORT_FIELD_RANK_BATCH_SIZES, shares);
  if (r->tokens_per_example > 0)
    json_object_set_int_member(f, COHORT_FIELD_TOKENS_PER_STEP,
                               global_batch * r->tokens_per_example);
  json_object_set_double_member(f, COHORT_FIELD_LEARNING_RATE, cfg->learning_rate);
  json_object_set_double_member(f, COHORT_FIELD_SCALED_LEARNING_RATE, r->base_lr);
  g_autofree char *scaling = cohort_config_get(cfg, "lr_scaling");
  json_object_set_string_member(f, COHORT_FIELD_LR_SCALING, scaling);
  json_object_set_int_member(f, COHORT_FIELD_TOTAL_STEPS, r->total_steps);
  json_object_set_int_member(f, COHORT_FIELD_STEPS_PER_EPOCH, r->steps_per_epoch);
  json_object_set_int_member(f, COHORT_FIELD_START_STEP, r->st.step);
  if (resumed_from)
    json_object_set_string_member(f, COHORT_FIELD_RESUMED_FROM, resumed_from);
  if (r->teacher) {
    JsonObject *t = json_object_new();
    json_object_set_string_member(t, COHORT_FIELD_PATH, r->teacher->dir);
    json_object_set_string_member(t, COHORT_FIELD_WEIGHTS, r->teacher->weights);
    json_object_set_string_member(t, COHORT_FIELD_SHA256, r->teacher->sha256);
    json_object_set_int_member(t, COHORT_FIELD_PARAMS, (gint64)r->teacher->model->n_params);
    json_object_set_int_member(t, COHORT_FIELD_BYTES, (gint64)cohort_teacher_bytes(r->teacher));
    json_object_set_boolean_member(t, COHORT_FIELD_EMA, r->teacher->ema);
    json_object_set_object_member(f, COHORT_FIELD_TEACHER, t);
  }
  JsonArray *metrics = json_array_new();
  for (guint i = 0; i < r->model->n_metrics; i++)
    json_array_add_string_element(metrics, r->model->metrics[i].name);
  json_object_set_array_member(f, COHORT_FIELD_METRICS, metrics);
  g_autofree char *cfg_json = cohort_config_to_json(cfg, FALSE);
  g_autoptr(JsonNode) cfg_node = cohort_json_parse_strict(cfg_json, -1, "config", 0, NULL);
  if (cfg_node)
    json_object_set_member(f, COHORT_FIELD_CONFIG, g_steal_pointer(&cfg_node));
  return f;
}

/* What learns in finetune lora or frozen, and what frozen means for the buffers. */
static void log_finetune(CohortRankRun *r)
{
  const CohortConfig *cfg = r->cfg;
  const CohortModel *m = r->model;
  double pct = 100.0 * (double)m->n_trainable / (double)m->n_params;
  g_autofree char *what =
      m->lora ? g_strdup_printf("%u LoRA adapters of rank %d, scaled by %g%s", m->lora->n,
                                m->lora->rank, (double)m->lora->scale,
                                cfg->trainable && *cfg->trainable ? ", and the trainable ones" : "")
              : g_strdup_printf("the parameters `trainable` names (%s); the others are "
                                "frozen: no gradients and no optimizer state",
                                cfg->trainable && *cfg->trainable ? cfg->trainable : "none");
  /* BatchNorm's running statistics are buffers, not parameters: frozen or not, they follow
   * the batches as PyTorch's train mode does, unless freeze_bn_stats says otherwise. */
  gboolean bn = cohort_config_key_applies(cohort_config_find_key("freeze_bn_stats"), cfg->model);
  const char *buffers = !bn ? ""
                        : cfg->freeze_bn_stats
                            ? "; BatchNorm runs in eval mode (freeze_bn_stats): its running "
                              "statistics normalise and are not updated"
                            : "; BatchNorm's running statistics still follow the batches (as in "
                              "PyTorch's train mode; freeze_bn_stats keeps them fixed)";
  cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                      "finetune %s: %zu of the %zu parameters learn (%.2f%%: %s)%s; only their "
                      "gradients are all-reduced",
                      cfg->finetune == COHORT_FINETUNE_LORA ? "lora" : "frozen", m->n_trainable,
                      m->n_params, pct, what, buffers);
}

void cohort_rank_run_emit_start(CohortRankRun *r, const char *resumed_from, int threads)
{
  const CohortConfig *cfg = r->cfg;
  int world = r->opts->world_size;
  cohort_progress_emit(r->progress, COHORT_EVENT_START, start_fields(r, resumed_from, threads));

  g_autofree char *run_name = g_path_get_basename(cfg->workspace_dir);
  g_autofree char *precision = cohort_config_get(cfg, "precision");
  g_autofree char *scaling = cohort_config_get(cfg, "lr_scaling");
  double params_m = (double)r->model->n_params / 1e6;
  g_autofree char *where =
      r->dev.cuda_device >= 0
          ? cohort_device_describe(&r->dev)
          : g_strdup_printf("cpu (%d thread%s per rank)", threads, threads == 1 ? "" : "s");
  g_autofree char *per_example = r->tokens_per_example > 0
                                     ? g_strdup_printf(" × %d tokens", r->tokens_per_example)
                                     : g_strdup(" samples");
  cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                      "training %s (%s): %.2fM parameters on %s in %s (%s matrix products), "
                      "%d rank%s, global batch %" G_GINT64_FORMAT "%s, lr %.3g (scaling %s), "
                      "%" G_GINT64_FORMAT " steps (%" G_GINT64_FORMAT " per epoch)",
                      run_name, cfg->model, params_m, where, precision,
                      gemm_mode_name(r->be->get_gemm_mode()), world, world == 1 ? "" : "s",
                      cohort_rank_run_global_batch(r), per_example, r->base_lr, scaling,
                      r->total_steps, r->steps_per_epoch);
  if (r->model->n_trainable < r->model->n_params)
    log_finetune(r);
  if (r->be->describe_gemm)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "%s matrix products: %s",
                        gemm_mode_name(r->be->get_gemm_mode()),
                        r->be->describe_gemm(r->be->get_gemm_mode()));
}

/* cpu_matmul "measure" times the libraries during the first steps on a new CPU (each product
 * shape three times on each); by the eighth step, or the last, the choices are known. */
static void log_measured_matmul(CohortRankRun *r, CohortThroughput *tp, gint64 done_here)
{
#if COHORT_HAVE_ONEDNN
  if (tp->matmul_logged || r->cfg->cpu_matmul != COHORT_CPU_MATMUL_MEASURE ||
      r->dev.cuda_device >= 0 || (done_here < 8 && r->st.step < r->total_steps))
    return;
  tp->matmul_logged = TRUE;
  int used = 0, on_onednn = 0, timing = 0, timed = 0;
  cohort_cpu_gemm_measure_counts(&used, &on_onednn, &timing, &timed);
  const char *file = cohort_cpu_gemm_measure_file();
  cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                      "fp32 matrix products measured per shape: %d shapes, %d on oneDNN, %d on "
                      "OpenBLAS, %d still being timed; %d timed in this run, the others read "
                      "from %s",
                      used, on_onednn, used - on_onednn - timing, timing, timed,
                      file[0] ? file : "(no file: memory only)");
#else
  (void)r, (void)tp, (void)done_here;
#endif
}

void cohort_throughput_init(CohortThroughput *tp, const CohortRankRun *r)
{
  *tp = (CohortThroughput){
      .t_start = g_get_monotonic_time(),
      .start_step = r->st.step,
      .print_every = MAX(1, (int)(r->total_steps / 100)),
  };
}

void cohort_rank_run_emit_step(CohortRankRun *r, CohortThroughput *tp, gint64 t1, double loss,
                               double norm, double lr, double scale, gboolean skipped,
                               const double *parts)
{
  enum { WINDOW = G_N_ELEMENTS(tp->window_t) };
  const CohortConfig *cfg = r->cfg;
  tp->window_t[r->st.step % WINDOW] = t1;
  gint64 examples_per_step = cohort_rank_run_global_batch(r);
  gint64 done_here = r->st.step - tp->start_step;
  gint64 oldest = done_here >= WINDOW ? tp->window_t[(r->st.step + 1) % WINDOW] : tp->t_start;
  gint64 steps_in_window = done_here >= WINDOW ? WINDOW - 1 : done_here;
  double secs = (double)(t1 - oldest) / 1e6;
  double smp_s = secs > 0 ? (double)(steps_in_window * examples_per_step) / secs : 0;
  double eta = smp_s > 0 ? (double)((r->total_steps - r->st.step) * examples_per_step) / smp_s : -1;

  JsonObject *f = json_object_new();
  json_object_set_int_member(f, COHORT_FIELD_STEP, r->st.step);
  json_object_set_int_member(f, COHORT_FIELD_TOTAL_STEPS, r->total_steps);
  json_object_set_int_member(f, COHORT_FIELD_EPOCH, r->st.epoch);
  json_object_set_int_member(f, COHORT_FIELD_EPOCH_STEP, r->st.batch_in_epoch / r->accum);
  json_object_set_int_member(f, COHORT_FIELD_STEPS_PER_EPOCH, r->steps_per_epoch);
  /* Not finite after an fp16 overflow (or a diverged run): absent, per the protocol. */
  if (isfinite(loss))
    json_object_set_double_member(f, COHORT_FIELD_LOSS, loss);
  if (parts && isfinite(parts[COHORT_DISTILL_PART_TEACHER]))
    json_object_set_double_member(f, COHORT_FIELD_LOSS_DISTILL, parts[COHORT_DISTILL_PART_TEACHER]);
  if (parts && isfinite(parts[COHORT_DISTILL_PART_TASK]))
    json_object_set_double_member(f, COHORT_FIELD_LOSS_TASK, parts[COHORT_DISTILL_PART_TASK]);
  json_object_set_double_member(f, COHORT_FIELD_LR, lr);
  if (isfinite(norm))
    json_object_set_double_member(f, COHORT_FIELD_GRAD_NORM, norm);
  json_object_set_double_member(f, COHORT_FIELD_SAMPLES_PER_S, smp_s);
  if (r->tokens_per_example > 0)
    json_object_set_double_member(f, COHORT_FIELD_TOKENS_PER_S, smp_s * r->tokens_per_example);
  json_object_set_double_member(f, COHORT_FIELD_ELAPSED_S, (double)(t1 - tp->t_start) / 1e6);
  if (eta >= 0 && done_here >= 2)
    json_object_set_double_member(f, COHORT_FIELD_ETA_S, eta);
  if (cfg->precision == COHORT_PRECISION_FP16) {
    json_object_set_double_member(f, COHORT_FIELD_LOSS_SCALE, scale);
    json_object_set_boolean_member(f, COHORT_FIELD_SKIPPED, skipped);
    json_object_set_int_member(f, COHORT_FIELD_SKIPPED_STEPS, r->st.skipped_steps);
  }
  cohort_progress_emit(r->progress, COHORT_EVENT_STEP, f);
  log_measured_matmul(r, tp, done_here);
  if (skipped)
    cohort_progress_log(r->progress, COHORT_LEVEL_WARNING,
                        "step %" G_GINT64_FORMAT ": gradients overflowed at loss scale %g; "
                        "update skipped, scale now %g",
                        r->st.step, scale, r->st.loss_scale);
  g_autofree char *eta_text = cohort_format_duration(eta);
  double rate = r->tokens_per_example > 0 ? smp_s * r->tokens_per_example : smp_s;
  g_autofree char *split =
      parts ? g_strdup_printf(" (distill %.4f, task %.4f)", parts[COHORT_DISTILL_PART_TEACHER],
                              parts[COHORT_DISTILL_PART_TASK])
            : g_strdup("");
  cohort_progress_status(
      r->progress, r->st.step % tp->print_every == 0 || r->st.step == r->total_steps,
      "step %" G_GINT64_FORMAT "/%" G_GINT64_FORMAT " | loss %.4f%s | lr %.2e | %.0f %s/s | ETA %s",
      r->st.step, r->total_steps, loss, split, lr, rate, r->tokens_per_example > 0 ? "tok" : "img",
      done_here >= 2 ? eta_text : "…");
}
