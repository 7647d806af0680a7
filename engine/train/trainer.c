/* The training loop: optimizer steps over micro-batches, gradient reduction, clipping, the
 * optimizer, EMA, and the points where evaluation, samples and checkpoints happen. Set-up is
 * in trainer-setup.c, outputs in trainer-output.c, events in trainer-events.c. */
#include "engine/train/trainer-run.h"
#include "engine/train/latents.h"

#include <math.h>

#include "engine/model/lora.h"
#include "engine/train/memory-plan.h"
#include "engine/train/hang-report.h"
#include "engine/train/probe.h"
#include "engine/train/rank-health.h"
#include "engine/train/test-hooks.h"
#include "kernels/backend.h"

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

/* The outcome of one optimizer step. */
typedef struct {
  double loss;                          /* mean over the global batch */
  double parts[COHORT_DISTILL_N_PARTS]; /* distillation's teacher and task terms, likewise */
  double norm;                          /* gradient norm before clipping */
  double lr;
  double scale; /* the fp16 loss scale this step used (1 otherwise) */
  gboolean skipped;
} StepResult;

/* fp16: a run of clean steps doubles the loss scale (PyTorch's GradScaler). */
static gboolean update_scale(CohortRankRun *r)
{
  const CohortConfig *cfg = r->cfg;
  if (cfg->precision == COHORT_PRECISION_FP16 &&
      ++r->st.scale_good_steps >= cfg->loss_scale_growth_interval) {
    r->st.loss_scale *= 2.0;
    r->st.scale_good_steps = 0;
  }
  return TRUE;
}

/* fp16: the loss (so every gradient) was multiplied by the scale, which lifts small gradients
 * out of fp16's underflow; an inf or NaN gradient (an overflow) skips the update and halves
 * the scale, a run of clean steps doubles it (PyTorch's GradScaler). Every rank holds the same
 * reduced gradients, so every rank takes the same decision. */
static gboolean update(CohortRankRun *r, StepResult *res, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  CohortModel *m = r->model;
  gboolean fp16 = cfg->precision == COHORT_PRECISION_FP16;
  if (fp16 && !isfinite(res->norm)) {
    res->skipped = TRUE;
    r->st.skipped_steps++;
    r->st.loss_scale *= 0.5;
    r->st.scale_good_steps = 0;
    return TRUE;
  }
  /* The optimizer counts the updates it made, as torch.optim's state "step" does. */
  int t = (int)(r->st.step - r->st.skipped_steps) + 1;
  if (r->shard) {
    /* ZeRO stages 2 and 3: this rank's pieces, its EMA pieces, and at stage 2 the gather. */
    gint64 t0 = g_get_monotonic_time();
    if (!cohort_shard_step(r->shard, r->opt, cfg, res->lr, t, error))
      return FALSE;
    cohort_train_dist_add_comm_time(r->dist, g_get_monotonic_time() - t0);
    return update_scale(r);
  }
  cohort_optimizer_step(r->opt, m->params, m->grads, m->train, m->n_train, cfg, res->lr, t);
  /* ZeRO stage 1: this rank updated its shard only; the others' come from them. */
  if (r->zero) {
    gint64 t0 = g_get_monotonic_time();
    cohort_comm_set_label("ZeRO parameter gather");
    if (!cohort_zero_gather_params(r->zero, m->params, error))
      return FALSE;
    cohort_train_dist_add_comm_time(r->dist, g_get_monotonic_time() - t0);
  }
  if (r->ema)
    cohort_ema_update_on(r->be, r->ema, m->params, m->n_params, cfg->ema_decay);
  return update_scale(r);
}

double cohort_rank_run_forward(CohortRankRun *r, double parts[COHORT_DISTILL_N_PARTS])
{
  cohort_lora_set_train_batch(r->model, r->step_batch, (guint64)r->cfg->seed);
  if (r->distill)
    return cohort_distill_forward(r->distill, r->step_batch, parts);
  return r->model->ops->forward(r->model, r->step_batch, COHORT_FORWARD_TRAIN);
}

void cohort_rank_run_backward(CohortRankRun *r, float scale)
{
  if (r->distill)
    cohort_distill_backward(r->distill, scale);
  else
    r->model->ops->backward(r->model, scale);
  cohort_lora_set_train_batch(r->model, NULL, 0);
}

/* The step's micro-batches, forward and backward, with the gradient reduction: the loss (a
 * sum of the micro-batches' means) into *loss_sum, distillation's parts into parts_sums. */
static gboolean micro_batches(CohortRankRun *r, float scale, double *loss_sum, double *parts_sums,
                              GError **error)
{
  CohortModel *m = r->model;
  double returned = 0; /* what the forwards returned: NAN for each one that logged */
  /* The micro-batches' losses stay on the device until the step has queued all its work:
   * no forward waits for the device to report its loss (distillation's parts still do). */
  if (!r->distill)
    cohort_model_begin_losses(m);
  /* Data whose targets are partly ignored (chat): every counted target of the step weighs
   * the same, on every rank (engine/model/batch.h's loss_norm). */
  double norm = 0;
  if (cohort_data_source_ignores_targets(r->train) &&
      !cohort_rank_run_step_norm(r, r->st.epoch, r->st.batch_in_epoch, &norm, error))
    return FALSE;
  for (int i = 0; i < r->accum; i++) {
    gint64 micro = r->st.batch_in_epoch + i;
    gint64 waited_us = 0;
    cohort_phase_enter(COHORT_RANK_PHASE_DATA);
    if (!cohort_rank_run_load_micro_batch(r, r->st.epoch, micro, &waited_us, error))
      return FALSE;
    cohort_train_dist_add_data_time(r->dist, waited_us);
    r->step_batch->loss_norm = norm;
    /* Communication only on the last micro-step (DDP's no_sync on the others). */
    cohort_train_dist_begin_backward(r->dist, i == r->accum - 1);
    cohort_phase_enter(COHORT_RANK_PHASE_FORWARD);
    cohort_test_hooks_sleep(r->opts->rank, r->st.step + 1, "forward");
    cohort_test_hooks_slow(r->opts->rank, r->step_batch->B);
    double parts[COHORT_DISTILL_N_PARTS];
    double loss = cohort_rank_run_forward(r, parts);
    if (r->distill) {
      *loss_sum += loss;
      for (int k = 0; k < COHORT_DISTILL_N_PARTS; k++)
        parts_sums[k] += parts[k] / r->accum;
    } else {
      returned += loss;
    }
    cohort_phase_enter(COHORT_RANK_PHASE_BACKWARD);
    /* This rank's mean, weighted by its share of the global micro-batch: the ranks' average
     * (the reducer's) is then the mean over every example (rank_batch_sizes). */
    cohort_rank_run_backward(r, scale * r->weight / (float)r->accum);
    if (!cohort_train_dist_end_backward(r->dist, error))
      return FALSE;
  }
  if (r->distill)
    return TRUE;
  /* the same sum of float means, in the same order, as adding each forward's return */
  guint logged = 0;
  if (!cohort_model_take_losses(m, loss_sum, &logged)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "out of %s memory for the step's losses", r->be->name);
    return FALSE;
  }
  /* a family whose forward returns its loss without the log */
  if (logged == 0)
    *loss_sum = returned;
  else if (logged != (guint)r->accum) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "model %s: %u of %d forwards logged their loss (a family reports every "
                "training loss through cohort_model_mean_loss, or none)",
                m->klass->name, logged, r->accum);
    return FALSE;
  }
  return TRUE;
}

/* One optimizer step: accum micro-batches, gradient reduction, clipping, the update. */
static gboolean train_step(CohortRankRun *r, StepResult *res, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  CohortModel *m = r->model;
  double loss_sum = 0;
  gboolean fp16 = cfg->precision == COHORT_PRECISION_FP16;
  float scale = fp16 ? (float)r->st.loss_scale : 1.0f;
  *res = (StepResult){.scale = scale};

  /* The loss, then the distillation parts: each a mean over micro-batches, summed over ranks. */
  double sums[1 + COHORT_DISTILL_N_PARTS] = {0};
  cohort_model_zero_grad(m);
  cohort_train_dist_start_step(r->dist);
  /* DDP's broadcast_buffers: before the step's first forward only, since DDP skips it after a
   * no_sync forward (the other micro-steps). */
  if (!cohort_train_dist_broadcast_buffers(r->dist, m, error))
    return FALSE;
  /* The weights stay as they are until the optimizer below: a GPU reads their 16-bit copy.
   * (A ZeRO stage that gathers parameters inside forward would change them: stage < 3; with
   * frozen_dtype bf16 the stored base comes and goes layer by layer: what learns alone.) */
  if (cfg->zero_stage < 3)
    cohort_device_step_begin(&r->dev, m->params, m->params_range ? m->n_trainable : m->n_params);
  gboolean ok = micro_batches(r, scale, &loss_sum, sums + 1, error);
  cohort_device_step_end(&r->dev);
  if (!ok)
    return FALSE;
  cohort_phase_enter(COHORT_RANK_PHASE_OPTIMIZER);
  sums[0] = loss_sum / r->accum;
  /* Weighted like the gradients: the mean over the global batch (1 with an even split). */
  for (guint k = 0; r->weight != 1.0f && k < G_N_ELEMENTS(sums); k++)
    sums[k] *= r->weight;
  if (!cohort_train_dist_sum(r->dist, sums, r->distill ? G_N_ELEMENTS(sums) : 1, error))
    return FALSE;
  res->loss = sums[0] / r->opts->world_size;
  for (int k = 0; k < COHORT_DISTILL_N_PARTS; k++)
    res->parts[k] = sums[1 + k] / r->opts->world_size;

  if (r->shard) {
    /* ZeRO stages 2 and 3: the reduced gradients are this rank's shard; the norm is global. */
    if (!cohort_shard_clip(r->shard, fp16 ? 1.0f / scale : 1.0f, cfg->grad_clip, &res->norm, error))
      return FALSE;
  } else {
    if (fp16)
      r->be->scale(m->grads, m->n_trainable, 1.0f / scale);
    res->norm = cohort_clip_grad_norm_on(r->be, m->grads, m->n_trainable, cfg->grad_clip);
  }
  /* A device fault first: its NaNs would otherwise read as divergence (or, in fp16, as an
   * overflow that skips the step and halves the scale). */
  if (!cohort_device_check(&r->dev, error))
    return FALSE;
  res->lr = cohort_lr_for(cfg, r->base_lr, r->warmup_steps, (int)r->st.step, (int)r->total_steps);
  /* fp16 skips such steps (update); in fp32 and bf16 they mean the run diverged. Every rank
   * holds the same reduced values, so every rank stops here. */
  if (!fp16 && (!isfinite(res->loss) || !isfinite(res->norm))) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "step %" G_GINT64_FORMAT ": the %s is %g: training diverged and this step was "
                "not applied; the last good checkpoint stays in %s/checkpoints (resume it with "
                "--resume auto after lowering learning_rate or setting grad_clip)",
                r->st.step + 1, isfinite(res->loss) ? "gradient norm" : "loss",
                isfinite(res->loss) ? res->norm : res->loss, cfg->workspace_dir);
    return FALSE;
  }
  if (!update(r, res, error) || !cohort_device_check(&r->dev, error))
    return FALSE;

  r->st.step++;
  cohort_phase_set_step(r->st.step);
  cohort_test_hooks_perturb(r->opts->rank, r->st.step, m, r->be);
  r->st.batch_in_epoch += r->accum;
  r->st.tokens_seen += cohort_rank_run_global_batch(r) * MAX(r->tokens_per_example, 1);
  r->st.epoch_samples += cohort_rank_run_global_batch(r);
  if (r->st.batch_in_epoch / r->accum >= r->steps_per_epoch) {
    r->st.epoch++;
    r->st.batch_in_epoch = 0;
    r->st.epoch_samples = 0;
  }
  return TRUE;
}

/* Rank 0 makes samples; with ZeRO stages 2 and 3 every rank takes part (the layers of a
 * sharded model are gathered by all, and the EMA swap is a collective), rank 0 writing. */
static gboolean samples_here(const CohortRankRun *r)
{
  return r->opts->rank == 0 || r->shard != NULL;
}

static gboolean due(int every, gint64 step)
{
  return every > 0 && step % every == 0;
}

/* Evaluation, samples and checkpoints the config asks for after this step (the last step's
 * come after the loop). */
static gboolean after_step(CohortRankRun *r, gint64 *last_saved, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  gboolean last = r->st.step == r->total_steps;
  if (!cohort_train_dist_report_ranks(r->dist, r->progress, r->st.step, error) ||
      !cohort_rank_run_balance_step(r, error))
    return FALSE;
  if (due(cfg->eval_every, r->st.step) && !last && !cohort_rank_run_eval(r, error))
    return FALSE;
  if (due(cfg->sample_every, r->st.step) && !last && samples_here(r) &&
      !cohort_rank_run_sample(r, error))
    return FALSE;
  if (due(cfg->save_every, r->st.step) && !last) {
    if (!cohort_rank_run_save_checkpoint(r, error))
      return FALSE;
    *last_saved = r->st.step;
  }
  return TRUE;
}

/* Answers the control requests the ranks agreed on, at this step boundary: a sample (rank 0)
 * and a checkpoint (every rank). A checkpoint needs a step done, so a request at step 0 waits
 * for the first. */
static gboolean answer_requests(CohortRankRun *r, gint64 *last_saved, GError **error)
{
  gboolean ok = TRUE;
  r->answering_request = TRUE;
  if (r->pending_requests & COHORT_CONTROL_SAMPLE) {
    r->pending_requests &= ~(guint)COHORT_CONTROL_SAMPLE;
    ok = !samples_here(r) || cohort_rank_run_sample(r, error);
  }
  if (ok && (r->pending_requests & COHORT_CONTROL_CHECK) && r->st.step > 0) {
    r->pending_requests &= ~(guint)COHORT_CONTROL_CHECK;
    ok = cohort_rank_health_check(r, TRUE, error);
  }
  if (ok && (r->pending_requests & COHORT_CONTROL_SAVE) && r->st.step > 0) {
    r->pending_requests &= ~(guint)COHORT_CONTROL_SAVE;
    ok = cohort_rank_run_save_checkpoint(r, error);
    *last_saved = r->st.step;
  }
  r->answering_request = FALSE;
  return ok;
}

/* The step-boundary vote: a stop (any rank's signal) and the control channel's requests. */
static gboolean vote(CohortRankRun *r, gboolean *stop, GError **error)
{
  guint requests = 0;
  if (r->opts->control != NULL && r->opts->rank == 0)
    requests = cohort_control_poll(r->opts->control, r->progress);
  if (!cohort_train_dist_vote(r->dist, r->opts->stop_flag, &requests, stop, error))
    return FALSE;
  r->pending_requests |= requests;
  return TRUE;
}

/* The steps; *stopped when a stop was requested (all ranks agree on the step). */
static gboolean loop(CohortRankRun *r, gint64 *last_saved, gboolean *stopped, GError **error)
{
  CohortThroughput tp;
  cohort_throughput_init(&tp, r);
  while (r->st.step < r->total_steps) {
    gboolean stop = FALSE;
    cohort_test_hooks_sleep(r->opts->rank, r->st.step + 1, "step");
    if (!vote(r, &stop, error))
      return FALSE;
    if (stop) {
      *stopped = TRUE;
      break;
    }
    if (r->pending_requests && !answer_requests(r, last_saved, error))
      return FALSE;
    gint64 t0 = g_get_monotonic_time();
    StepResult res;
    if (!train_step(r, &res, error))
      return FALSE;
    gint64 t1 = g_get_monotonic_time();
    cohort_train_dist_add_step_time(r->dist, t1 - t0);
    r->final_loss = res.loss;
    cohort_rank_run_emit_step(r, &tp, t1, res.loss, res.norm, res.lr, res.scale, res.skipped,
                              r->distill ? res.parts : NULL);
    if (!after_step(r, last_saved, error))
      return FALSE;
  }
  cohort_progress_finish_line(r->progress);
  return TRUE;
}

/* Evaluation, sample, checkpoint and export at the end (a stop saves a checkpoint only). */
static gboolean finish(CohortRankRun *r, gboolean stopped, gint64 last_saved, char **model_path,
                       GError **error)
{
  if (!stopped) {
    if (!cohort_rank_run_eval(r, error))
      return FALSE;
    if (r->cfg->sample_every > 0 && samples_here(r) && !cohort_rank_run_sample(r, error))
      return FALSE;
  }
  if (r->st.step != last_saved && r->st.step > 0 && !cohort_rank_run_save_checkpoint(r, error))
    return FALSE;
  /* With ZeRO stages 2 and 3 every rank writes its pieces of the export. */
  if ((r->opts->rank == 0 || r->shard) && !stopped && !cohort_rank_run_export(r, model_path, error))
    return FALSE;
  return TRUE;
}

static void emit_done(CohortRankRun *r, gboolean stopped, const char *model_path, gint64 t_begin)
{
  JsonObject *f = json_object_new();
  json_object_set_string_member(f, COHORT_FIELD_STATUS,
                                stopped ? COHORT_STATUS_STOPPED : COHORT_STATUS_COMPLETED);
  json_object_set_int_member(f, COHORT_FIELD_STEP, r->st.step);
  json_object_set_double_member(f, COHORT_FIELD_ELAPSED_S,
                                (double)(g_get_monotonic_time() - t_begin) / 1e6);
  if (isfinite(r->final_loss))
    json_object_set_double_member(f, COHORT_FIELD_FINAL_LOSS, r->final_loss);
  if (r->cfg->precision == COHORT_PRECISION_FP16)
    json_object_set_int_member(f, COHORT_FIELD_SKIPPED_STEPS, r->st.skipped_steps);
  for (guint i = 0; r->have_metrics && i < r->model->n_metrics; i++)
    if (isfinite(r->metrics[i]))
      json_object_set_double_member(f, r->model->metrics[i].name, r->metrics[i]);
  if (model_path)
    json_object_set_string_member(f, COHORT_FIELD_MODEL_PATH, model_path);
  if (model_path)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "model saved to %s", model_path);
  else if (stopped)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "stopped at step %" G_GINT64_FORMAT "; resume with --resume auto",
                        r->st.step);
  /* Last: nothing follows `done` in the stream. */
  cohort_progress_emit(r->progress, COHORT_EVENT_DONE, f);
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

gboolean cohort_rank_run_prepare_device(CohortRankRun *r, int *threads, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  const CohortTrainOptions *opts = r->opts;
  /* What the build supports was checked by the launch plan, or is by cohort_device_select
   * below (device "cuda" without the CUDA path). */
  *threads = cohort_train_threads(cfg, opts->local_world_size);
  cohort_train_set_threads(*threads);
  if (!cohort_train_set_cpu_matmul(cfg, opts->config_source, error))
    return FALSE;
  if (opts->device)
    r->dev = *opts->device;
  else if (!cohort_device_select(cfg, opts->config_source, opts->local_rank, opts->local_world_size,
                                 &r->dev, error))
    return FALSE;
  r->be = r->dev.be;
  /* A plan that cannot fit stops here, before anything is allocated (with rank_batch_sizes,
   * cohort_rank_run_plan_split checks each rank's share). */
  if (cohort_rank_batches_kind(cfg) == COHORT_SPLIT_EVEN &&
      !cohort_memory_plan_check_rank(cfg, opts->world_size, opts->local_world_size,
                                     r->dev.cuda_device, error))
    return FALSE;
  r->be->set_gemm_mode(gemm_mode_for(cfg, r->be));
  if (opts->rank == 0 && r->dev.cuda_device >= 0)
    cohort_device_log_local(cfg, opts->local_world_size, r->progress);
  /* `auto` on a machine whose GPUs CUDA cannot use (a driver older than the runtime needs)
   * would otherwise train on the CPU without a word. */
  g_autofree char *fallback =
      opts->rank == 0 && r->dev.cuda_device < 0 && cfg->device == COHORT_DEVICE_AUTO
          ? cohort_device_auto_fallback()
          : NULL;
  if (fallback)
    cohort_progress_log(r->progress, COHORT_LEVEL_WARNING, "%s", fallback);
  return TRUE;
}

gboolean cohort_train(const CohortConfig *cfg, const CohortTrainOptions *opts, gboolean *stopped,
                      GError **error)
{
  CohortRankRun run = {.cfg = cfg, .opts = opts, .progress = opts->progress, .final_loss = NAN};
  CohortRankRun *r = &run;
  g_autofree char *resumed_from = NULL;
  g_autofree char *model_path = NULL;
  gboolean ok = FALSE, was_stopped = FALSE;
  gint64 t_begin = g_get_monotonic_time();
  int threads = 1;

  if (stopped)
    *stopped = FALSE;
  cohort_phase_enter(COHORT_RANK_PHASE_STARTUP);
  cohort_hang_report_attach(opts->comm, cfg, opts->rank, opts->progress);
  if (!cohort_rank_run_prepare_device(r, &threads, error))
    return FALSE;
  r->dist = cohort_train_dist_new(opts->comm, opts->rank, opts->world_size, cfg);
  cohort_train_dist_set_device(r->dist, &r->dev);
  /* The run record (rank 0: events.jsonl, TensorBoard) opens once the run id is known. */
  g_mutex_init(&r->indices_lock);
  gboolean set_up =
      cohort_rank_run_plan_split(r, error) && cohort_rank_run_setup(r, &resumed_from, error);
  if (!set_up && error && g_error_matches(*error, COHORT_RANK_RUN_STOPPED, 0)) {
    /* Stopped while caching latents: a stop, not a failure (the cache is kept). */
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO, "%s", (*error)->message);
    g_clear_error(error);
    ok = was_stopped = TRUE;
  } else if (set_up && cohort_rank_run_start_loading(r, error) &&
             cohort_progress_open_record(r->progress, cfg->workspace_dir, r->st.run_id, error) &&
             cohort_rank_run_balance_start(r, error)) {
    if (r->shard)
      cohort_train_dist_attach_sharder(r->dist, r->model, cohort_shard_sharder(r->shard),
                                       cohort_shard_stage(r->shard), cohort_shard_bytes(r->shard));
    cohort_train_dist_attach(r->dist, r->model, cfg->bucket_cap_mb);
    gint64 last_saved = resumed_from ? r->st.step : -1;
    cohort_rank_run_emit_start(r, resumed_from, threads);
    /* The last probe of this workspace goes into the run's record, beside what the run
     * measures, so forecast and reality sit in one file. */
    JsonObject *probe = opts->rank == 0 ? cohort_probe_load_saved(cfg) : NULL;
    if (probe != NULL)
      cohort_progress_emit(r->progress, COHORT_EVENT_PROBE, probe);
    if (resumed_from)
      cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                          "resumed from %s at step %" G_GINT64_FORMAT, resumed_from, r->st.step);
    ok = loop(r, &last_saved, &was_stopped, error) &&
         finish(r, was_stopped, last_saved, &model_path, error);
  }
  cohort_progress_finish_line(r->progress);
  cohort_phase_enter(COHORT_RANK_PHASE_DONE);
  if (ok)
    emit_done(r, was_stopped, model_path, t_begin);
  if (stopped)
    *stopped = was_stopped;
  cohort_rank_run_free(r);
  g_mutex_clear(&r->indices_lock);
  /* The mode is the backend's, for the whole process: leave it as found for later users. */
  if (r->be)
    r->be->set_gemm_mode(COHORT_GEMM_FP32);
  return ok;
}
