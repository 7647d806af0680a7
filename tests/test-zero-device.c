/* ZeRO stages 2 and 3, frozen_dtype bf16 and LoRA with ZeRO on a device (issue 37 item 2),
 * each against the same run on the CPU: the CUDA-vs-CPU harness of test-cuda-models.c.
 *
 * COHORT_TEST_DEVICE picks the device under test:
 *  - "cuda" (suite cuda): the CUDA backend; every case skips without a GPU;
 *  - "cpu" (suite dist): the harness with the CPU on both sides, the side under test in the
 *    strict mode of reserved ranges (COHORT_STRICT_RESERVE, kernels/cpu/reserve.c), where any
 *    access to memory that is not committed faults as it would on a GPU. So the engine's
 *    commits are checked on machines without a GPU, and the two sides must agree bit for bit
 *    (the same arithmetic).
 *
 * In process, one rank driving the sharder itself (the trainer shards only with two ranks or
 * more): over the "local" communicator (on a GPU: through host memory, as with Gloo) and, on a
 * GPU with NCCL, over a one-rank NCCL communicator on the device buffers. GPT, DiT and ResNet
 * at stages 2 and 3 with two micro-steps per step, the bf16 reduce-scatter, GPT with LoRA at
 * stages 2 and 3, and frozen_dtype bf16 (stage 0): 4 AdamW steps with clipping; per-step
 * losses and the final weights against the CPU's same run.
 *
 * Through cohort-train: 2 ranks sharing the device over Gloo at stage 3 (evaluation, samples,
 * EMA, checkpoints) against 2 CPU ranks; a stage-3 checkpoint of the device resumed on the CPU
 * at stage 0 on one rank, and a CPU checkpoint resumed on the device at stage 3, each against
 * the run that did not stop; LoRA at stage 2 and frozen_dtype bf16 against the CPU; with two
 * GPUs, stage 3 over NCCL.
 *
 * Tolerances. CUDA against the CPU: losses within 2e-3 × max(1, loss) and weights within 5e-3
 * (fp32, test-cuda-models.c's: other summation orders, drifting slowly), five times that in
 * bf16 (frozen_dtype bf16, the bf16 reduce-scatter). The CPU against itself: 0. A resume on
 * another number of ranks or another stage: within rounding (1e-4 relative, floor 1e-2), on
 * top of the device's tolerance. Every case says what it compared and the worst difference. */
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "cohort-build-config.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/env.h"
#include "engine/distributed/store.h"
#include "engine/model/batch.h"
#include "engine/model/frozen-store.h"
#include "engine/model/model.h"
#include "engine/model/optim.h"
#include "engine/models/registry.h"
#include "engine/train/trainer-shard.h"
#include "kernels/backend.h"
#include "test-util.h"
#include "train-run.h"

#if COHORT_HAVE_CUDA
#include "cuda-share.h"
#include "kernels/cuda/cuda-backend.h"
#endif

#define LOSS_TOL   2e-3
#define PARAM_TOL  5e-3
#define BF16_WIDER 5.0
enum { STEPS = 4, ACCUM = 2, B = 4 };

/* ---- the device under test ---- */

typedef struct {
  const CohortBackend *be;
  int device;      /* CUDA device, or -1 */
  gboolean strict; /* the CPU in strict mode */
  const char *name;
} Dut;

static gboolean on_cuda(void)
{
  return g_strcmp0(g_getenv("COHORT_TEST_DEVICE"), "cuda") == 0;
}

/* FALSE (the case skipped) when the device is a GPU and none is usable. */
static gboolean dut_get(Dut *d)
{
  if (!on_cuda()) {
    *d = (Dut){cohort_backend_cpu(), -1, TRUE, "cpu (strict reserved ranges)"};
    return TRUE;
  }
#if COHORT_HAVE_CUDA
  if (cohort_cuda_device_count() > 0 && cohort_cuda_set_device(0) == 0) {
    *d = (Dut){cohort_backend_cuda(), 0, FALSE, "cuda"};
    return TRUE;
  }
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none usable");
  g_test_skip(msg);
#else
  g_test_skip("this build has no CUDA path");
#endif
  return FALSE;
}

static const Dut cpu_ref = {NULL, -1, FALSE, "cpu"};

static void check_device(const Dut *d, const char *what, int step)
{
  const char *e = d->be->last_error ? d->be->last_error() : NULL;
  if (e)
    g_error("%s on %s, step %d: the backend recorded: %s", what, d->name, step, e);
}

/* ---- in process: one rank and the sharder ---- */

typedef struct {
  const char *name;
  const char *const *sets;
  int stage;        /* 0: no sharder (frozen_dtype bf16) */
  const char *comm; /* "local" or "nccl" */
  gboolean bf16;    /* a case in bf16 (wider bounds on a GPU) */
} Case;

static CohortConfig *case_config(const Case *c)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, c->sets, "test", &error));
  g_assert_no_error(error);
  return cfg;
}

/* A batch of random images with labels, or random tokens (test-cuda-models.c's). */
static void fill(CohortBatch *b, const CohortConfig *cfg, guint32 seed)
{
  for (int i = 0; i < b->B; i++) {
    b->example_ids[i] = seed * 131u + (guint)i;
    if (b->images) {
      size_t D = (size_t)b->C * b->H * b->W;
      for (size_t k = 0; k < D; k++) {
        seed = seed * 1664525u + 1013904223u;
        b->images[i * D + k] = (float)((seed >> 8) * (1.0 / 8388608.0)) - 1.0f;
      }
      b->labels[i] = (int)(seed % (guint)MAX(cfg->num_classes, 1));
    } else {
      for (int t = 0; t < b->T; t++) {
        seed = seed * 1664525u + 1013904223u;
        b->inputs[i * b->T + t] = (int)((seed >> 8) % (guint)cfg->vocab_size);
        b->targets[i * b->T + t] = (b->inputs[i * b->T + t] * 7 + 3) % cfg->vocab_size;
      }
    }
  }
  b->epoch = 0;
}

#define OK(call)                                                                                   \
  do {                                                                                             \
    g_autoptr(GError) error_ = NULL;                                                               \
    GError **error = &error_;                                                                      \
    gboolean ok_ = (call);                                                                         \
    if (!ok_ || error_)                                                                            \
      g_error("%s on %s: %s failed: %s", c->name, d->name, #call,                                  \
              error_ ? error_->message : "no message");                                            \
  } while (0)

/* The communicator of one rank: "local", or NCCL on device 0 (with its store). */
static CohortComm *one_rank_comm(const char *kind, CohortStore **store)
{
  g_autoptr(GError) error = NULL;
  *store = NULL;
  if (strcmp(kind, "local") == 0)
    return cohort_comm_new_local();
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  *store = cohort_store_open(env, "zero-device", 10, &error);
  g_assert_no_error(error);
  CohortComm *comm = cohort_comm_new_nccl(*store, env, 0, 60, &error);
  g_assert_no_error(error);
  return comm;
}

/* Trains case `c` on `d` (be NULL: the CPU), STEPS steps of ACCUM micro-steps: losses[STEPS]
 * and the final weights (host copy, n_params; a frozen_dtype bf16 base's stored tensors as 0). */
static float *train_case(const Case *c, const Dut *d_in, double *losses, size_t *n_out)
{
  Dut dd = *d_in;
  if (!dd.be)
    dd.be = cohort_backend_cpu();
  const Dut *d = &dd;
  const CohortBackend *be = d->be;
  g_autoptr(CohortConfig) cfg = case_config(c);
  be->set_gemm_mode(c->bf16 && cfg->precision == COHORT_PRECISION_BF16 ? COHORT_GEMM_BF16
                                                                       : COHORT_GEMM_FP32);
  if (d->strict)
    g_setenv("COHORT_STRICT_RESERVE", "1", TRUE);
  g_autoptr(GError) made = NULL;
  cohort_model_set_creating_sharded(c->stage >= 2 ? c->stage : 0);
  CohortModel *m = cohort_model_new(be, cfg, B, &made);
  cohort_model_set_creating_sharded(0);
  g_unsetenv("COHORT_STRICT_RESERVE");
  if (!m)
    g_error("%s on %s: the model: %s", c->name, d->name, made->message);
  CohortStore *store = NULL;
  CohortComm *comm = c->stage >= 2 ? one_rank_comm(c->comm, &store) : NULL;
  CohortShard *sh = NULL;
  CohortOptimizer *opt = NULL;
  CohortSharder *sharder = NULL;
  if (comm) {
    OK((sh = cohort_shard_new(comm, m, c->stage, FALSE, d->device, error)) != NULL);
    OK(cohort_shard_init_weights(sh, 7, error));
    guint nr = 0;
    g_autofree CohortParamRange *ranges = cohort_shard_ranges(sh, &nr);
    opt = cohort_optimizer_new_sharded(cfg, be, m->n_trainable, ranges, nr);
    sharder = cohort_shard_sharder(sh);
    cohort_sharder_set_precision(sharder, cfg->reduce_precision);
    cohort_model_set_grad_ready_func(m, cohort_sharder_grad_ready, sharder);
    cohort_model_set_layer_hook(m, cohort_sharder_layer_hook, sharder);
  } else {
    cohort_model_init(m, 7);
    if (m->params_range)
      OK(cohort_frozen_store_take(m, error));
    opt = cohort_optimizer_new_for(cfg, be, m->n_trainable);
  }
  g_autoptr(CohortBatch) b =
      cfg->data_format == COHORT_DATA_IMAGES
          ? cohort_batch_new(B, 0, cfg->image_channels, cfg->image_size, cfg->image_size)
          : cohort_batch_new(B, cfg->seq_len, 0, 0, 0);
  for (int s = 0; s < STEPS; s++) {
    losses[s] = 0;
    cohort_model_zero_grad(m); /* nothing for reserved gradients */
    for (int k = 0; k < ACCUM; k++) {
      fill(b, cfg, (guint32)(s * ACCUM + k + 1));
      if (sharder)
        cohort_sharder_prepare(sharder, k > 0);
      losses[s] += m->ops->forward(m, b, COHORT_FORWARD_TRAIN) / ACCUM;
      m->ops->backward(m, 1.0f / ACCUM);
      if (sharder)
        OK(cohort_sharder_finish(sharder, NULL, error));
    }
    if (sh) {
      double norm = 0;
      OK(cohort_shard_clip(sh, 1.0f, 1.0, &norm, error));
      OK(cohort_shard_step(sh, opt, cfg, 2e-3, s + 1, error));
    } else {
      cohort_clip_grad_norm_on(be, m->grads, m->n_trainable, 1.0);
      cohort_optimizer_step(opt, m->params, m->grads, m->train, m->n_train, cfg, 2e-3, s + 1);
    }
    check_device(d, c->name, s + 1);
  }
  if (sh)
    OK(cohort_shard_gather_learning(sh, error));
  float *host = g_new(float, MAX(m->n_params, 1));
  cohort_model_download_params(m, host);
  if (sh)
    cohort_shard_let_go_learning(sh);
  check_device(d, c->name, STEPS);
  *n_out = m->n_params;
  be->set_gemm_mode(COHORT_GEMM_FP32);
  cohort_optimizer_free(opt);
  cohort_shard_free(sh);
  cohort_model_free(m);
  cohort_comm_free(comm);
  if (store)
    cohort_store_free(store);
  return host;
}

/* Per-step losses and weights of the device against the CPU, by the file's rules. */
static void compare(const char *what, const Dut *d, gboolean bf16, const double *ld,
                    const double *lc, int n_steps, const float *pd, const float *pc, size_t n)
{
  double wider = bf16 ? BF16_WIDER : 1.0, worst_loss = 0, worst_w = 0;
  size_t at = 0;
  for (int s = 0; s < n_steps; s++)
    worst_loss = fmax(worst_loss, fabs(ld[s] - lc[s]) / fmax(1.0, fabs(lc[s])));
  for (size_t k = 0; k < n; k++) {
    double diff = fabs((double)pd[k] - pc[k]);
    if (diff > worst_w || isnan(diff)) {
      worst_w = isnan(diff) ? INFINITY : diff;
      at = k;
    }
  }
  g_test_message("%s, %s against cpu: losses %.6f → %.6f (cpu), worst loss difference %.3e "
                 "(relative), worst weight difference %.3e (weight %zu of %zu)",
                 what, d->name, lc[0], lc[n_steps - 1], worst_loss, worst_w, at, n);
  gboolean exact = d->strict;
  /* a failed comparison leaves the device usable: with -k the next cases still run */
  if (exact ? (worst_loss != 0 || worst_w != 0)
            : (worst_loss > wider * LOSS_TOL || worst_w > wider * PARAM_TOL))
    g_test_fail_printf("%s, %s against cpu: worst loss difference %.3e (allowed %.1e), worst "
                       "weight difference %.3e at weight %zu (%.9g against %.9g; allowed %.1e)",
                       what, d->name, worst_loss, exact ? 0.0 : wider * LOSS_TOL, worst_w, at,
                       (double)pd[at], (double)pc[at], exact ? 0.0 : wider * PARAM_TOL);
}

static void run_case(gconstpointer data)
{
  const Case *c = data;
  Dut d;
  if (!dut_get(&d))
    return;
  if (strcmp(c->comm, "nccl") == 0 && (d.device < 0 || !cohort_comm_backend_available("nccl"))) {
    g_test_skip(d.device < 0 ? "NCCL needs a GPU" : "this build has no NCCL backend");
    return;
  }
  double ld[STEPS], lc[STEPS];
  size_t nd = 0, nc = 0;
  g_autofree float *pd = train_case(c, &d, ld, &nd);
  Case on_cpu = *c;
  on_cpu.comm = "local"; /* the CPU's reference goes through the host path */
  g_autofree float *pc = train_case(&on_cpu, &cpu_ref, lc, &nc);
  g_assert_cmpuint(nd, ==, nc);
  compare(c->name, &d, c->bf16, ld, lc, STEPS, pd, pc, nd);
}

#define GPT_SETS "model=gpt", "n_layer=2", "n_head=2", "n_embd=32", "seq_len=16", "weight_decay=0.1"

static const char *const gpt_sets[] = {GPT_SETS, NULL};
static const char *const gpt_bf16_reduce_sets[] = {GPT_SETS, "reduce_precision=bf16", NULL};
static const char *const gpt_lora_sets[] = {GPT_SETS, "finetune=lora", "lora_rank=4",
                                            "lora_alpha=8", NULL};
static const char *const gpt_frozen_bf16_sets[] = {
    GPT_SETS,         "finetune=lora",     "lora_rank=4", "lora_alpha=8",
    "precision=bf16", "frozen_dtype=bf16", NULL};
static const char *const dit_sets[] = {
    "model=dit",     "data_format=images", "n_layer=2",    "n_head=2",
    "n_embd=32",     "image_size=8",       "patch_size=2", "image_channels=1",
    "num_classes=3", "cfg_dropout=0.3",    NULL,
};
static const char *const resnet_sets[] = {
    "model=resnet", "data_format=images", "n_layer=8",     "resnet_width=4",
    "image_size=8", "image_channels=1",   "num_classes=3", NULL,
};

static const Case cases[] = {
    {"gpt-stage2", gpt_sets, 2, "local", FALSE},
    {"gpt-stage3", gpt_sets, 3, "local", FALSE},
    {"gpt-stage3-nccl", gpt_sets, 3, "nccl", FALSE},
    {"gpt-stage2-nccl", gpt_sets, 2, "nccl", FALSE},
    {"gpt-stage3-bf16-reduce", gpt_bf16_reduce_sets, 3, "local", TRUE},
    {"gpt-stage3-bf16-reduce-nccl", gpt_bf16_reduce_sets, 3, "nccl", TRUE},
    {"dit-stage3", dit_sets, 3, "local", FALSE},
    {"resnet-stage3", resnet_sets, 3, "local", FALSE},
    {"gpt-lora-stage2", gpt_lora_sets, 2, "local", FALSE},
    {"gpt-lora-stage3", gpt_lora_sets, 3, "local", FALSE},
    {"gpt-lora-stage3-nccl", gpt_lora_sets, 3, "nccl", FALSE},
    {"gpt-frozen-bf16", gpt_frozen_bf16_sets, 0, "local", TRUE},
};

/* ---- through cohort-train ---- */

#define RUN_SETS                                                                                   \
  "n_layer=2", "n_head=2", "n_embd=32", "seq_len=32", "threads=1", "timeout_s=120",                \
      "warmup_steps=1", "shuffle=false", "lr_scaling=none", "learning_rate=3e-3", "grad_clip=0.5", \
      "weight_decay=0.1", "keep_last=0", "sample_every=0", "eval_every=0"

/* cohort-train into `ws` with RUN_SETS, `device`, then `extra` (NULL-ended); the per-step
 * losses (and the run's stderr in the log). Strict reserved ranges on the CPU side under test. */
static GArray *run_train_on(const char *ws, const char *device, gboolean strict,
                            const char *const *extra)
{
  static const char *const sets[] = {RUN_SETS, NULL};
  g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(a, g_strdup("--set"));
    g_ptr_array_add(a, g_strdup(sets[i]));
  }
  g_ptr_array_add(a, g_strdup("--set"));
  g_ptr_array_add(a, g_strdup_printf("workspace_dir=%s", ws));
  g_ptr_array_add(a, g_strdup("--set"));
  g_ptr_array_add(a, g_strdup_printf("device=%s", device));
  for (guint i = 0; extra[i]; i++)
    g_ptr_array_add(a, g_strdup(extra[i]));
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  if (strict)
    g_setenv("COHORT_STRICT_RESERVE", "1", TRUE);
  RunResult r = run_train(a, events);
  g_unsetenv("COHORT_STRICT_RESERVE");
  if (r.status != 0)
    g_error("cohort-train (device %s%s) exited %d: %s", device, strict ? ", strict" : "", r.status,
            r.err);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  return tu_event_values(ev, "step", "loss");
}

static GArray *weights_of(const char *dir, const char *file)
{
  g_autofree char *path = g_build_filename(dir, file, NULL);
  return tu_read_weights(path);
}

/* Two runs' losses and exported weights: the device's bounds (0 for the CPU against itself),
 * plus `rounding` relative to each value (floor 1e-2) for runs that add in another order. */
static void compare_runs(const char *what, const Dut *d, gboolean bf16, double rounding, GArray *ld,
                         GArray *lc, GArray *wd, GArray *wc)
{
  if (ld->len != lc->len || wd->len != wc->len) {
    g_test_fail_printf("%s, %s against cpu: %u and %u steps, %u and %u weights", what, d->name,
                       ld->len, lc->len, wd->len, wc->len);
    return;
  }
  double wider = bf16 ? BF16_WIDER : 1.0;
  double loss_tol = d->strict ? 0 : wider * LOSS_TOL, w_tol = d->strict ? 0 : wider * PARAM_TOL;
  double worst_loss = 0, worst_excess = 0, worst_w = 0;
  guint at = 0;
  for (guint s = 0; s < ld->len; s++) {
    double x = g_array_index(ld, double, s), y = g_array_index(lc, double, s);
    double diff = fabs(x - y);
    worst_loss = fmax(worst_loss, isnan(diff) ? INFINITY : diff / fmax(1.0, fabs(y)));
  }
  for (guint k = 0; k < wd->len; k++) {
    double x = g_array_index(wd, float, k), y = g_array_index(wc, float, k);
    double diff = isnan(x - y) ? INFINITY : fabs(x - y);
    double excess = diff - (w_tol + rounding * fmax(fabs(y), 1e-2));
    if (k == 0 || excess > worst_excess) {
      worst_excess = excess;
      worst_w = diff;
      at = k;
    }
  }
  loss_tol += rounding;
  g_test_message("%s, %s against cpu: %u steps, worst loss difference %.3e (allowed %.1e); "
                 "weights: the one furthest past its bound is %u of %u, off by %.3e (allowed "
                 "%.1e + %.0e relative)",
                 what, d->name, ld->len, worst_loss, loss_tol, at, wd->len, worst_w, w_tol,
                 rounding);
  if (worst_loss > loss_tol || worst_excess > 0)
    g_test_fail_printf("%s, %s against cpu: worst loss difference %.3e (allowed %.1e); weight "
                       "%u is %.9g against %.9g (allowed %.1e + %.0e relative)",
                       what, d->name, worst_loss, loss_tol, at,
                       (double)g_array_index(wd, float, at), (double)g_array_index(wc, float, at),
                       w_tol, rounding);
}

static gboolean need_two_ranks(const Dut *d)
{
#if COHORT_HAVE_CUDA
  if (d->device >= 0)
    return need_shared_gpu(d->device);
#endif
  (void)d;
  return TRUE;
}

/* Stage 3 on 2 ranks sharing the device over Gloo, with evaluation, samples, EMA and
 * checkpoints, against 2 CPU ranks: losses, the export and the step-3 checkpoint. */
static void test_run_stage3(void)
{
  Dut d;
  if (!dut_get(&d) || !need_two_ranks(&d))
    return;
  const char *extra[] = {"--set", "zero_stage=3",   "--set",   "distributed_backend=gloo",
                         "--set", "batch_size=4",   "--set",   "gradient_accumulation_steps=2",
                         "--set", "max_steps=6",    "--set",   "save_every=3",
                         "--set", "eval_every=3",   "--set",   "eval_steps=1",
                         "--set", "sample_every=3", "--set",   "sample_tokens=8",
                         "--set", "ema_decay=0.9",  "--nproc", "2",
                         NULL};
  g_autofree char *wd = tu_mkdtemp("zero-device-run");
  g_autofree char *wc = tu_mkdtemp("zero-device-cpu");
  g_autoptr(GArray) ld = run_train_on(wd, on_cuda() ? "cuda" : "cpu", d.strict, extra);
  g_autoptr(GArray) lc = run_train_on(wc, "cpu", FALSE, extra);
  g_autoptr(GArray) ed = weights_of(wd, "model.safetensors");
  g_autoptr(GArray) ec = weights_of(wc, "model.safetensors");
  compare_runs("cohort-train, stage 3 on 2 ranks, export", &d, FALSE, 0, ld, lc, ed, ec);
  g_autoptr(GArray) md = weights_of(wd, "model-ema.safetensors");
  g_autoptr(GArray) mc = weights_of(wc, "model-ema.safetensors");
  compare_runs("cohort-train, stage 3 on 2 ranks, EMA export", &d, FALSE, 0, ld, lc, md, mc);
  /* the checkpoint: the same tensors (weights, EMA, both moments) in the same layout */
  g_autofree char *cd = g_build_filename(wd, "checkpoints", "step-00000003", NULL);
  g_autofree char *cc = g_build_filename(wc, "checkpoints", "step-00000003", NULL);
  g_autoptr(GArray) kd = weights_of(cd, "model.safetensors");
  g_autoptr(GArray) kc = weights_of(cc, "model.safetensors");
  compare_runs("cohort-train, stage 3 on 2 ranks, step-3 checkpoint", &d, FALSE, 0, ld, lc, kd, kc);
  tu_rm_rf(wd);
  tu_rm_rf(wc);
}

/* A checkpoint moves between the device at stage 3 (2 ranks) and the CPU at stage 0 (1 rank
 * with the same global batch), both ways, each against the run that did not stop. */
static void test_run_resume_across(void)
{
  Dut d;
  if (!dut_get(&d) || !need_two_ranks(&d))
    return;
  const char *dev = on_cuda() ? "cuda" : "cpu";
  const char *sharded[] = {"--set", "zero_stage=3", "--set",   "distributed_backend=gloo",
                           "--set", "batch_size=4", "--set",   "max_steps=6",
                           "--set", "save_every=3", "--nproc", "2",
                           NULL};
  const char *whole[] = {"--set", "zero_stage=0", "--set", "batch_size=8", "--set", "max_steps=6",
                         "--set", "save_every=3", NULL};
  g_autofree char *wa = tu_mkdtemp("zero-device-a");
  g_autofree char *wb = tu_mkdtemp("zero-device-b");
  g_autoptr(GArray) la = run_train_on(wa, dev, d.strict, sharded); /* device, stage 3 */
  g_autoptr(GArray) lb = run_train_on(wb, "cpu", FALSE, whole);    /* cpu, stage 0 */
  g_autofree char *ca = g_build_filename(wa, "checkpoints", "step-00000003", NULL);
  g_autofree char *cb = g_build_filename(wb, "checkpoints", "step-00000003", NULL);
  /* device checkpoint → the CPU at stage 0 */
  g_autofree char *wc = tu_mkdtemp("zero-device-c");
  const char *on_cpu[] = {"--set", "zero_stage=0", "--set",    "batch_size=8",
                          "--set", "max_steps=6",  "--resume", ca,
                          NULL};
  g_autoptr(GArray) lc = run_train_on(wc, "cpu", FALSE, on_cpu);
  g_autoptr(GArray) ea = weights_of(wa, "model.safetensors");
  g_autoptr(GArray) ec = weights_of(wc, "model.safetensors");
  g_autoptr(GArray) la_tail = g_array_new(FALSE, FALSE, sizeof(double));
  g_array_append_vals(la_tail, (double *)la->data + 3, la->len - 3);
  compare_runs("a device stage-3 checkpoint resumed on the CPU at stage 0", &d, FALSE, 1e-4,
               la_tail, lc, ea, ec);
  /* CPU checkpoint → the device at stage 3 */
  g_autofree char *wdd = tu_mkdtemp("zero-device-d");
  const char *on_dev[] = {"--set",    "zero_stage=3",
                          "--set",    "distributed_backend=gloo",
                          "--set",    "batch_size=4",
                          "--set",    "max_steps=6",
                          "--nproc",  "2",
                          "--resume", cb,
                          NULL};
  g_autoptr(GArray) ld = run_train_on(wdd, dev, d.strict, on_dev);
  g_autoptr(GArray) eb = weights_of(wb, "model.safetensors");
  g_autoptr(GArray) ed = weights_of(wdd, "model.safetensors");
  g_autoptr(GArray) lb_tail = g_array_new(FALSE, FALSE, sizeof(double));
  g_array_append_vals(lb_tail, (double *)lb->data + 3, lb->len - 3);
  compare_runs("a CPU stage-0 checkpoint resumed on the device at stage 3", &d, FALSE, 1e-4, ld,
               lb_tail, ed, eb);
  tu_rm_rf(wa);
  tu_rm_rf(wb);
  tu_rm_rf(wc);
  tu_rm_rf(wdd);
}

/* LoRA at stage 2 on 2 ranks, and frozen_dtype bf16 on one, against the CPU. */
static void test_run_lora_frozen(void)
{
  Dut d;
  if (!dut_get(&d) || !need_two_ranks(&d))
    return;
  const char *dev = on_cuda() ? "cuda" : "cpu";
  const char *lora[] = {"--set", "finetune=lora", "--set",   "lora_rank=4",
                        "--set", "zero_stage=2",  "--set",   "distributed_backend=gloo",
                        "--set", "batch_size=4",  "--set",   "max_steps=5",
                        "--set", "save_every=0",  "--nproc", "2",
                        NULL};
  const char *frozen[] = {"--set", "finetune=lora",  "--set", "lora_rank=4",
                          "--set", "precision=bf16", "--set", "frozen_dtype=bf16",
                          "--set", "batch_size=4",   "--set", "max_steps=5",
                          "--set", "save_every=0",   NULL};
  const char *const *runs[] = {lora, frozen};
  const char *names[] = {"cohort-train, LoRA at stage 2 on 2 ranks",
                         "cohort-train, frozen_dtype bf16 with LoRA"};
  for (guint k = 0; k < G_N_ELEMENTS(runs); k++) {
    g_autofree char *wd = tu_mkdtemp("zero-device-ft");
    g_autofree char *wc = tu_mkdtemp("zero-device-ft-cpu");
    g_autoptr(GArray) ld = run_train_on(wd, dev, d.strict, runs[k]);
    g_autoptr(GArray) lc = run_train_on(wc, "cpu", FALSE, runs[k]);
    g_autoptr(GArray) ed = weights_of(wd, "model.safetensors");
    g_autoptr(GArray) ec = weights_of(wc, "model.safetensors");
    compare_runs(names[k], &d, k == 1, 0, ld, lc, ed, ec);
    tu_rm_rf(wd);
    tu_rm_rf(wc);
  }
}

/* Stage 3 over NCCL on 2 GPUs against 2 CPU ranks (skips with fewer GPUs). */
static void test_run_stage3_nccl(void)
{
  Dut d;
  if (!dut_get(&d))
    return;
#if COHORT_HAVE_CUDA
  int n = d.device >= 0 ? cohort_cuda_device_count() : 0;
  if (n < 2 || !cohort_comm_backend_available("nccl")) {
    g_autofree char *msg =
        g_strdup_printf("needs 2 GPUs and NCCL (%d GPU%s visible)", n, n == 1 ? "" : "s");
    g_test_skip(msg);
    return;
  }
  const char *nccl[] = {"--set",   "zero_stage=3",
                        "--set",   "distributed_backend=nccl",
                        "--set",   "batch_size=4",
                        "--set",   "max_steps=6",
                        "--nproc", "2",
                        NULL};
  const char *gloo[] = {"--set",   "zero_stage=3",
                        "--set",   "distributed_backend=gloo",
                        "--set",   "batch_size=4",
                        "--set",   "max_steps=6",
                        "--nproc", "2",
                        NULL};
  g_autofree char *wd = tu_mkdtemp("zero-device-nccl");
  g_autofree char *wc = tu_mkdtemp("zero-device-nccl-cpu");
  g_autoptr(GArray) ld = run_train_on(wd, "cuda", FALSE, nccl);
  g_autoptr(GArray) lc = run_train_on(wc, "cpu", FALSE, gloo);
  g_autoptr(GArray) ed = weights_of(wd, "model.safetensors");
  g_autoptr(GArray) ec = weights_of(wc, "model.safetensors");
  compare_runs("cohort-train, stage 3 over NCCL on 2 GPUs", &d, FALSE, 0, ld, lc, ed, ec);
  tu_rm_rf(wd);
  tu_rm_rf(wc);
#else
  g_test_skip("this build has no CUDA path");
#endif
}

/* --explain plans GPU ranks at ZeRO stages 2 and 3, with LoRA, and with a bf16 frozen base,
 * whether or not this machine has a GPU (the plan reads no device); a run that cannot find
 * the GPU fails on the device key, not on the stage. Needs a build with CUDA. */
static JsonObject *explain(const char *const *extra, JsonParser *parser)
{
  g_autoptr(GPtrArray) a = g_ptr_array_new();
  g_ptr_array_add(a, (gpointer)train_program());
  g_ptr_array_add(a, "--explain");
  g_ptr_array_add(a, "--set");
  g_ptr_array_add(a, "device=cuda");
  for (guint i = 0; extra[i]; i++)
    g_ptr_array_add(a, (gpointer)extra[i]);
  g_ptr_array_add(a, NULL);
  g_autofree char *out = NULL, *err = NULL;
  int status = 0;
  g_autoptr(GError) error = NULL;
  g_spawn_sync(NULL, (char **)a->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status,
               &error);
  g_assert_no_error(error);
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("cohort-train --explain with device=cuda and %s %s refused: %s", extra[1],
            extra[3] ? extra[3] : "", err);
  g_assert_true(json_parser_load_from_data(parser, out, -1, &error));
  g_assert_no_error(error);
  return json_node_get_object(json_parser_get_root(parser));
}

static void test_explain(void)
{
  if (!COHORT_HAVE_CUDA) {
    g_test_skip("this build has no CUDA path (device cuda is refused)");
    return;
  }
  g_autofree char *ws = tu_mkdtemp("zero-device-explain");
  g_autofree char *wsset = g_strdup_printf("workspace_dir=%s", ws);
  const char *zero3[] = {"--set", "zero_stage=3", "--nproc", "2", "--set", wsset, NULL};
  const char *zero2_lora[] = {"--set", "zero_stage=2", "--set", "finetune=lora", "--nproc", "2",
                              "--set", wsset,          NULL};
  const char *frozen[] = {"--set", "frozen_dtype=bf16", "--set", "finetune=lora",
                          "--set", "precision=bf16",    "--set", wsset,
                          NULL};
  const char *zero0[] = {"--set", "zero_stage=0", "--nproc", "2", "--set", wsset, NULL};
  g_autoptr(JsonParser) p3 = json_parser_new(), p2 = json_parser_new(), pf = json_parser_new(),
                        p0 = json_parser_new();
  JsonObject *o3 = explain(zero3, p3), *o2 = explain(zero2_lora, p2);
  JsonObject *of = explain(frozen, pf), *o0 = explain(zero0, p0);
  g_assert_cmpstr(json_object_get_string_member(o3, "device"), ==, "cuda");
  JsonObject *m3 = json_object_get_object_member(o3, "memory");
  JsonObject *m2 = json_object_get_object_member(o2, "memory");
  JsonObject *mf = json_object_get_object_member(of, "memory");
  JsonObject *m0 = json_object_get_object_member(o0, "memory");
  g_assert_cmpint(json_object_get_int_member(m3, "zero_stage"), ==, 3);
  g_assert_cmpint(json_object_get_int_member(m2, "zero_stage"), ==, 2);
  gint64 params3 =
      json_object_get_int_member(json_object_get_object_member(m3, "per_rank"), "params_bytes");
  gint64 params0 =
      json_object_get_int_member(json_object_get_object_member(m0, "per_rank"), "params_bytes");
  g_test_message("stage 3 on 2 GPU ranks: %" G_GINT64_FORMAT " parameter bytes per rank, "
                 "stage 0: %" G_GINT64_FORMAT,
                 params3, params0);
  g_assert_cmpint(params3, <, params0); /* the parameters are sharded */
  g_assert_cmpint(json_object_get_int_member(m2, "trainable"), <,
                  json_object_get_int_member(o2, "params"));
  g_assert_cmpint(
      json_object_get_int_member(json_object_get_object_member(mf, "per_rank"), "frozen_bytes"), >,
      0);
  /* the run itself, here without a GPU: refused for the device, not for the stage */
  g_autofree char *old = g_strdup(g_getenv("CUDA_VISIBLE_DEVICES"));
  g_setenv("CUDA_VISIBLE_DEVICES", "", TRUE);
  const char *run[] = {"--set", "device=cuda", "--set", "zero_stage=3", "--set", "max_steps=1",
                       "--set", wsset,         NULL};
  g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; run[i]; i++)
    g_ptr_array_add(a, g_strdup(run[i]));
  RunResult r = run_train(a, NULL);
  if (old)
    g_setenv("CUDA_VISIBLE_DEVICES", old, TRUE);
  else
    g_unsetenv("CUDA_VISIBLE_DEVICES");
  g_test_message("device=cuda zero_stage=3 without a visible GPU: %s", r.err);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "key \"device\""));
  g_assert_null(strstr(r.err, "zero_stage"));
  run_result_clear(&r);
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *path = g_strdup_printf("/zero-device/%s", cases[i].name);
    g_test_add_data_func(path, &cases[i], run_case);
  }
  g_test_add_func("/zero-device/explain", test_explain);
  g_test_add_func("/zero-device/run/stage3-two-ranks", test_run_stage3);
  g_test_add_func("/zero-device/run/resume-across-devices", test_run_resume_across);
  g_test_add_func("/zero-device/run/lora-and-frozen-bf16", test_run_lora_frozen);
  g_test_add_func("/zero-device/run/stage3-nccl-two-gpus", test_run_stage3_nccl);
  return g_test_run();
}
