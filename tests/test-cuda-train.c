/* Training on a GPU (suite cuda): the model and optimizer on the CUDA backend against the
 * CPU backend, 2 Gloo ranks sharing one GPU against 1 rank with the double batch, the DDP
 * reducer over NCCL with one rank, checkpoints moving between GPU and CPU, and ZeRO stage 1
 * on 2 Gloo ranks sharing one GPU against stage 0, bit for bit. Every case skips without a
 * CUDA device.
 *
 * Tolerances (fp32, no TF32): per-step loss |gpu - cpu| <= 2e-3 * max(1, cpu) over 50 AdamW
 * steps; final parameters max |gpu - cpu| <= 5e-3. GEMMs (cuBLAS vs OpenBLAS) and reductions
 * add in different orders, so results agree to rounding, then drift slowly with training.
 * bf16 / fp16 GEMM modes: both backends round the same operands the same way, but a one-ulp
 * fp32 difference can move a value across a rounding boundary, so the tolerances are of the
 * format's precision: loss 2e-2 (bf16) or 5e-3 (fp16) * max(1, cpu), parameters 5e-2 / 2e-2. */
#include "engine/model/checkpoint.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/reducer.h"
#include "engine/models/gpt.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"
#include "cuda-share.h"
#include "test-util.h"

#include <math.h>
#include <string.h>

#define LOSS_TOL  2e-3
#define PARAM_TOL 5e-3

static gboolean need_gpu(void)
{
  if (cohort_cuda_device_count() > 0 && cohort_cuda_set_device(0) == 0)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none usable");
  g_test_skip(msg);
  return FALSE;
}

static const CohortGptShape shape = {2, 2, 32, 32, 64}; /* a tiny-gpt-like model */
enum { B = 4, T = 32, STEPS = 50 };

static void batch(guint64 *st, int *inp, int *tgt, int n)
{
  for (int i = 0; i < n; i++) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    inp[i] = (int)((*st >> 33) % (guint64)shape.vocab_size);
    tgt[i] = (inp[i] * 7 + 3) % shape.vocab_size; /* learnable */
  }
}

/* One optimizer step the way the trainer does it. */
static float step(CohortGpt *gpt, CohortAdamW *opt, const int *inp, const int *tgt, int t)
{
  const CohortBackend *be = cohort_gpt_backend(gpt);
  size_t n = cohort_gpt_num_params(gpt);
  guint nt = 0;
  const CohortTensorInfo *tensors = cohort_gpt_tensors(gpt, &nt);
  cohort_gpt_zero_grad(gpt);
  float loss = cohort_gpt_forward(gpt, inp, tgt, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  cohort_clip_grad_norm_on(be, cohort_gpt_grads(gpt), n, 1.0);
  cohort_adamw_step(opt, cohort_gpt_params(gpt), cohort_gpt_grads(gpt), tensors, nt, 2e-3, 0.9,
                    0.95, 1e-8, 0.1, t);
  return loss;
}

static float max_abs_diff(const float *a, const float *b, size_t n)
{
  float m = 0;
  for (size_t i = 0; i < n; i++)
    m = MAX(m, fabsf(a[i] - b[i]));
  return m;
}

static void test_gpu_matches_cpu(gconstpointer data)
{
  if (!need_gpu())
    return;
  CohortGemmMode mode = (CohortGemmMode)GPOINTER_TO_INT(data);
  double loss_tol = mode == COHORT_GEMM_BF16 ? 2e-2 : mode == COHORT_GEMM_FP16 ? 5e-3 : LOSS_TOL;
  double param_tol = mode == COHORT_GEMM_BF16 ? 5e-2 : mode == COHORT_GEMM_FP16 ? 2e-2 : PARAM_TOL;
  cohort_backend_cpu()->set_gemm_mode(mode);
  cohort_backend_cuda()->set_gemm_mode(mode);
  GError *error = NULL;
  g_autoptr(CohortGpt) cpu = cohort_gpt_new(&shape, B, &error);
  g_autoptr(CohortGpt) gpu = cohort_gpt_new_on(cohort_backend_cuda(), &shape, B, &error);
  g_assert_no_error(error);
  cohort_gpt_init_weights(cpu, 7);
  cohort_gpt_init_weights(gpu, 7);
  size_t n = cohort_gpt_num_params(cpu);
  g_autoptr(CohortAdamW) ocpu = cohort_adamw_new(n);
  g_autoptr(CohortAdamW) ogpu = cohort_adamw_new_on(cohort_backend_cuda(), n);
  g_assert_nonnull(ogpu);
  int inp[B * T], tgt[B * T];
  guint64 st = 1;
  float first = 0, last = 0;
  for (int s = 1; s <= STEPS; s++) {
    batch(&st, inp, tgt, B * T);
    float lc = step(cpu, ocpu, inp, tgt, s);
    float lg = step(gpu, ogpu, inp, tgt, s);
    g_assert_null(cohort_cuda_last_error());
    if (fabsf(lg - lc) > loss_tol * MAX(1.0f, lc))
      g_test_message("step %d: loss gpu %.6f cpu %.6f", s, lg, lc);
    g_assert_cmpfloat(fabsf(lg - lc), <=, loss_tol * MAX(1.0f, lc));
    if (s == 1)
      first = lc;
    last = lc;
  }
  g_assert_cmpfloat(last, <, first); /* it learned */
  g_autofree float *pg = g_new(float, n);
  cohort_gpt_download_params(gpu, pg);
  g_assert_cmpfloat(max_abs_diff(pg, cohort_gpt_params(cpu), n), <=, param_tol);
  cohort_backend_cpu()->set_gemm_mode(COHORT_GEMM_FP32);
  cohort_backend_cuda()->set_gemm_mode(COHORT_GEMM_FP32);
}

/* Checkpoint written from the GPU resumes on the CPU bit for bit, and back. */
static void test_checkpoint_gpu_cpu(void)
{
  if (!need_gpu())
    return;
  GError *error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(CohortGpt) gpu = cohort_gpt_new_on(cohort_backend_cuda(), &shape, B, &error);
  g_autoptr(CohortGpt) cpu = cohort_gpt_new(&shape, B, &error);
  g_assert_no_error(error);
  size_t n = cohort_gpt_num_params(gpu);
  g_autoptr(CohortAdamW) ogpu = cohort_adamw_new_on(cohort_backend_cuda(), n);
  g_autoptr(CohortAdamW) ocpu = cohort_adamw_new(n);
  cohort_gpt_init_weights(gpu, 3);
  int inp[B * T], tgt[B * T];
  guint64 rng = 5;
  for (int s = 1; s <= 5; s++) {
    batch(&rng, inp, tgt, B * T);
    step(gpu, ogpu, inp, tgt, s);
  }
  g_autofree float *ema = g_new(float, n);
  cohort_gpt_download_params(gpu, ema);
  CohortTrainState st = {.step = 5};
  g_autofree char *ws = tu_mkdtemp("cuda-ckpt");
  g_autofree char *dir = NULL;
  g_assert_true(cohort_checkpoint_save(ws, cfg, gpu, ogpu, ema, &st, 0, &dir, &error));
  g_assert_no_error(error);
  g_autofree float *ema2 = g_new(float, n);
  CohortTrainState st2;
  g_assert_true(cohort_checkpoint_load(dir, cpu, ocpu, ema2, &st2, NULL, &error));
  g_assert_no_error(error);
  g_assert_cmpint(st2.step, ==, 5);
  g_assert_cmpmem(cohort_gpt_params(cpu), n * 4, ema, n * 4);
  g_assert_cmpmem(ema2, n * 4, ema, n * 4);
  g_autofree float *m = g_new(float, n), *v = g_new(float, n);
  cohort_adamw_download(ogpu, m, v);
  g_assert_cmpmem(cohort_adamw_m(ocpu), n * 4, m, n * 4);
  g_assert_cmpmem(cohort_adamw_v(ocpu), n * 4, v, n * 4);

  /* The next step on both sides agrees within the tolerance. */
  batch(&rng, inp, tgt, B * T);
  float lg = step(gpu, ogpu, inp, tgt, 6), lc = step(cpu, ocpu, inp, tgt, 6);
  g_assert_cmpfloat(fabsf(lg - lc), <=, LOSS_TOL * MAX(1.0f, lc));

  /* And back: the CPU's checkpoint loads on the GPU exactly. */
  st.step = 6;
  g_autofree char *dir2 = NULL;
  g_assert_true(cohort_checkpoint_save(ws, cfg, cpu, ocpu, NULL, &st, 0, &dir2, &error));
  g_assert_true(cohort_checkpoint_load(dir2, gpu, ogpu, NULL, NULL, NULL, &error));
  g_assert_no_error(error);
  g_autofree float *pg = g_new(float, n);
  cohort_gpt_download_params(gpu, pg);
  g_assert_cmpmem(pg, n * 4, cohort_gpt_params(cpu), n * 4);
  cohort_adamw_download(ogpu, m, v);
  g_assert_cmpmem(m, n * 4, cohort_adamw_m(ocpu), n * 4);
}

/* The DDP reducer over NCCL with one rank: buckets reduced in place on the device after
 * each bucket's event; the average over one rank leaves the gradients as they were. */
static void test_nccl_one_rank(void)
{
  if (!need_gpu())
    return;
  if (!cohort_comm_backend_available("nccl")) {
    g_test_skip("this build has no NCCL backend");
    return;
  }
  GError *error = NULL;
  int port = 29000 + g_random_int_range(0, 2000);
  CohortDistEnv env = {.rank = 0,
                       .local_rank = 0,
                       .world_size = 1,
                       .local_world_size = 1,
                       .master_addr = (char *)"127.0.0.1",
                       .master_port = port,
                       .run_id = (char *)"test-cuda-train",
                       .source = "torchrun"};
  g_autoptr(CohortStore) store = cohort_store_open(&env, "t", 30, &error);
  g_assert_no_error(error);
  g_autoptr(CohortComm) comm = cohort_comm_new_nccl(store, &env, 0, 60, &error);
  g_assert_no_error(error);
  g_autoptr(CohortGpt) gpu = cohort_gpt_new_on(cohort_backend_cuda(), &shape, B, &error);
  g_autoptr(CohortGpt) ref = cohort_gpt_new_on(cohort_backend_cuda(), &shape, B, &error);
  cohort_gpt_init_weights(gpu, 9);
  cohort_gpt_init_weights(ref, 9);
  size_t n = cohort_gpt_num_params(gpu);
  guint nt = 0;
  const CohortTensorInfo *tensors = cohort_gpt_tensors(gpu, &nt);
  /* Small buckets, so several are in flight during backward. */
  CohortReducer *r =
      cohort_reducer_new_cuda(comm, cohort_gpt_grads(gpu), n, tensors, nt, 0.004, 0.002, 0, FALSE);
  g_assert_cmpuint(cohort_reducer_num_buckets(r), >, 2);
  cohort_gpt_set_grad_ready_func(gpu, cohort_reducer_grad_ready, r);
  int inp[B * T], tgt[B * T];
  guint64 rng = 11;
  batch(&rng, inp, tgt, B * T);
  for (int k = 0; k < 2; k++) {
    cohort_gpt_zero_grad(gpu);
    cohort_gpt_zero_grad(ref);
    cohort_reducer_prepare(r, TRUE);
    cohort_gpt_forward(gpu, inp, tgt, B, T);
    cohort_gpt_backward(gpu, 1.0f);
    gint64 wait = 0;
    g_assert_true(cohort_reducer_finish(r, &wait, &error));
    g_assert_no_error(error);
    cohort_gpt_forward(ref, inp, tgt, B, T);
    cohort_gpt_backward(ref, 1.0f);
    g_autofree float *a = g_new(float, n), *b = g_new(float, n);
    cohort_gpt_download_grads(gpu, a);
    cohort_gpt_download_grads(ref, b);
    /* ncclAvg over one rank may scale by 1/1 in another order: equal to the last bit or
     * within 1e-6 relative. */
    for (size_t i = 0; i < n; i++)
      g_assert_cmpfloat(fabsf(a[i] - b[i]), <=, 1e-6f * MAX(1.0f, fabsf(b[i])));
  }
  g_assert_null(cohort_cuda_last_error());
  cohort_reducer_free(r);
}

/* Runs cohort-train with `extra`; returns the exported weights. */
static GArray *train(const char *ws, const char *const *extra)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)g_getenv("COHORT_TRAIN"));
  static const char *const sets[] = {"n_layer=2",       "n_head=2",
                                     "n_embd=32",       "seq_len=32",
                                     "max_steps=20",    "warmup_steps=2",
                                     "eval_every=0",    "sample_every=0",
                                     "save_every=0",    "threads=1",
                                     "device=cuda",     "shuffle=false",
                                     "lr_scaling=none", NULL};
  g_autofree char *wsset = g_strdup_printf("workspace_dir=%s", ws);
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(argv, "--set");
    g_ptr_array_add(argv, (gpointer)sets[i]);
  }
  g_ptr_array_add(argv, "--set");
  g_ptr_array_add(argv, wsset);
  for (guint i = 0; extra[i]; i++)
    g_ptr_array_add(argv, (gpointer)extra[i]);
  g_ptr_array_add(argv, NULL);
  GError *error = NULL;
  g_autofree char *err = NULL;
  int status = 0;
  g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err,
               &status, &error);
  g_assert_no_error(error);
  g_test_message("cohort-train stderr: %s", err);
  g_assert_true(g_spawn_check_wait_status(status, NULL));
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  return tu_read_weights(model);
}

/* 2 ranks sharing the GPU through Gloo (buckets staged through pinned memory) end where
 * 1 rank with the double batch ends, within the fp32 tolerance. */
static void test_gloo_two_ranks_one_gpu(void)
{
  if (!need_gpu() || !need_shared_gpu(0))
    return;
  g_autofree char *ws1 = tu_mkdtemp("cuda-one-rank");
  g_autofree char *ws2 = tu_mkdtemp("cuda-two-ranks");
  const char *one[] = {"--set", "batch_size=8", NULL};
  const char *two[] = {"--set", "batch_size=4", "--set", "distributed_backend=gloo", "--nproc", "2",
                       NULL};
  g_autoptr(GArray) a = train(ws1, one);
  g_autoptr(GArray) b = train(ws2, two);
  g_assert_cmpuint(a->len, ==, b->len);
  g_assert_cmpfloat(tu_max_rel_diff(a, b, 1e-2), <=, 1e-3);
}

/* ZeRO stage 1 on GPU ranks with Gloo (the staged path: the shard and the state through host
 * memory): 2 ranks sharing the GPU train to stage 0's bits, save the moments stage 0 saves,
 * and resume a stage-1 checkpoint at stage 1 to the bits of the run that did not stop. */
static void test_zero_two_ranks_one_gpu(void)
{
  if (!need_gpu() || !need_shared_gpu(0))
    return;
  g_autofree char *ws0 = tu_mkdtemp("cuda-zero0");
  g_autofree char *ws1 = tu_mkdtemp("cuda-zero1");
  g_autofree char *ws2 = tu_mkdtemp("cuda-zero-resume");
  const char *s0[] = {"--set",   "batch_size=4",
                      "--set",   "distributed_backend=gloo",
                      "--set",   "save_every=10",
                      "--set",   "zero_stage=0",
                      "--set",   "grad_clip=0.5",
                      "--set",   "keep_last=0",
                      "--nproc", "2",
                      NULL};
  const char *s1[] = {"--set",   "batch_size=4",
                      "--set",   "distributed_backend=gloo",
                      "--set",   "save_every=10",
                      "--set",   "zero_stage=1",
                      "--set",   "grad_clip=0.5",
                      "--set",   "keep_last=0",
                      "--nproc", "2",
                      NULL};
  g_autoptr(GArray) a = train(ws0, s0);
  g_autoptr(GArray) b = train(ws1, s1);
  g_assert_cmpmem(b->data, b->len * sizeof(float), a->data, a->len * sizeof(float));
  g_autofree char *c0 = g_build_filename(ws0, "checkpoints", "step-00000010", NULL);
  g_autofree char *c1 = g_build_filename(ws1, "checkpoints", "step-00000010", NULL);
  g_autofree char *f0 = g_build_filename(c0, "model.safetensors", NULL);
  g_autofree char *f1 = g_build_filename(c1, "model.safetensors", NULL);
  g_autoptr(GArray) t0 = tu_read_weights(f0);
  g_autoptr(GArray) t1 = tu_read_weights(f1);
  g_assert_cmpuint(t1->len, ==, 3 * b->len); /* weights, m, v */
  g_assert_cmpmem(t1->data, t1->len * sizeof(float), t0->data, t0->len * sizeof(float));
  const char *again[] = {"--set",    "batch_size=4",
                         "--set",    "distributed_backend=gloo",
                         "--set",    "zero_stage=1",
                         "--set",    "grad_clip=0.5",
                         "--nproc",  "2",
                         "--resume", c1,
                         NULL};
  g_autoptr(GArray) c = train(ws2, again);
  g_assert_cmpmem(c->data, c->len * sizeof(float), b->data, b->len * sizeof(float));
  tu_rm_rf(ws0);
  tu_rm_rf(ws1);
  tu_rm_rf(ws2);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_data_func("/cuda-train/gpu-matches-cpu", GINT_TO_POINTER(COHORT_GEMM_FP32),
                       test_gpu_matches_cpu);
  g_test_add_data_func("/cuda-train/gpu-matches-cpu-bf16", GINT_TO_POINTER(COHORT_GEMM_BF16),
                       test_gpu_matches_cpu);
  g_test_add_data_func("/cuda-train/gpu-matches-cpu-fp16", GINT_TO_POINTER(COHORT_GEMM_FP16),
                       test_gpu_matches_cpu);
  g_test_add_func("/cuda-train/checkpoint-gpu-cpu", test_checkpoint_gpu_cpu);
  g_test_add_func("/cuda-train/nccl-one-rank", test_nccl_one_rank);
  g_test_add_func("/cuda-train/gloo-two-ranks-one-gpu", test_gloo_two_ranks_one_gpu);
  g_test_add_func("/cuda-train/zero-two-ranks-one-gpu", test_zero_two_ranks_one_gpu);
  return g_test_run();
}
