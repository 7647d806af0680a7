/* The bf16 gradient all-reduce in the DDP reducer (reduce_precision: bf16), suite dist,
 * loopback only (the bfloat16 collectives themselves are tested in test-comm.c).
 *  - The DDP reducer, 2 ranks training a tiny GPT: after one backward with small buckets the
 *    gradients are exactly bf16(bf16(a) + bf16(b)) / 2 of the two ranks' own gradients, a
 *    no_sync pass leaves them alone, and after some AdamW steps both ranks hold the same
 *    weights bit for bit, close to one process with the double batch and not equal to the
 *    fp32 reduction's.
 *  - cohort-train --nproc 2 with reduce_precision=bf16: close to one rank with the double
 *    batch, and not the weights of the fp32 reduction (the key took effect).
 *  - CUDA builds: the stream conversions against the CPU's bits, and 2 ranks sharing a GPU
 *    through Gloo with the bf16 reducer (staged through pinned memory); skipped without a GPU.
 * Expected values come from a rounding written here (nearest of the two neighbouring
 * bfloat16 values, measured in double), not from the engine's own conversion. */
#include "cohort-build-config.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/reducer.h"
#include "engine/models/gpt.h"
#include "engine/model/optim.h"
#include "bf16-ref.h"
#include "rank-harness.h"
#include "test-util.h"

#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#include "cuda-share.h"
#endif

static void run_gloo_ranks_bf16(int world, RankFunc fn)
{
  run_gloo_ranks(world, "test-reducer", fn, 100);
}

static gboolean have_gloo(void)
{
  if (cohort_comm_backend_available("gloo"))
    return TRUE;
  g_test_skip("built without Gloo");
  return FALSE;
}

/* ---- the DDP reducer on made-up gradients ---- */

enum { SYN_N = 100003 };

/* Tensors of uneven sizes over SYN_N floats, so buckets end at odd places. */
static CohortTensorInfo *syn_tensors(guint *n_tensors)
{
  static const size_t sizes[] = {7, 1000, 33333, 12345, 1, 20000, 4096, 9000, 8000, 12221};
  CohortTensorInfo *t = g_new0(CohortTensorInfo, G_N_ELEMENTS(sizes));
  size_t off = 0;
  for (guint i = 0; i < G_N_ELEMENTS(sizes); i++) {
    t[i].name = "t";
    t[i].ndim = 1;
    t[i].shape[0] = (int)sizes[i];
    t[i].offset = off;
    t[i].numel = sizes[i];
    off += sizes[i];
  }
  g_assert_cmpuint(off, ==, SYN_N);
  *n_tensors = G_N_ELEMENTS(sizes);
  return t;
}

/* What backward does: reports each tensor final, the last one first. */
static void syn_backward(CohortReducer *r, const CohortTensorInfo *t, guint nt)
{
  for (guint i = nt; i-- > 0;)
    cohort_reducer_grad_ready(t[i].offset, t[i].numel, r);
}

/* Whether `got` is the bf16 reduction of every rank's value(), divided by the world size: for
 * 2 ranks exactly bf16(bf16(a) + bf16(b)) / 2, for 3 one of the three orders of the sums. */
static gboolean syn_check(int rank, int world, const float *got)
{
  for (gsize i = 0; i < SYN_N; i++) {
    float x[3] = {0};
    for (int r = 0; r < world; r++)
      x[r] = ref_round(value(r, i));
    float w[3];
    int n_w = world == 2 ? 1 : 3;
    for (int k = 0; k < n_w; k++) {
      float s = world == 2 ? x[0] + x[1] : ref_round(x[k] + x[(k + 1) % 3]) + x[(k + 2) % 3];
      w[k] = ref_round(s) / (float)world;
    }
    gboolean ok = FALSE;
    for (int k = 0; k < n_w; k++)
      ok = ok || memcmp(&got[i], &w[k], sizeof(float)) == 0;
    if (!ok) {
      fprintf(stderr, "rank %d of %d: [%zu] got %.9g, want %.9g\n", rank, world, i, (double)got[i],
              (double)w[0]);
      return FALSE;
    }
  }
  return TRUE;
}

static int reducer_synthetic(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  guint nt = 0;
  g_autofree CohortTensorInfo *t = syn_tensors(&nt);
  g_autofree float *g = g_new(float, SYN_N), *mine = g_new(float, SYN_N);
  for (gsize i = 0; i < SYN_N; i++)
    mine[i] = g[i] = value(rank, i);
  CohortReducer *r = cohort_reducer_new(c, g, SYN_N, t, nt, 0.05, 0.02);
  CHECK(cohort_reducer_num_buckets(r) >= 5);
  CHECK(cohort_reducer_set_precision(r, COHORT_REDUCE_BF16, &error));
  /* no_sync: nothing moves */
  cohort_reducer_prepare(r, FALSE);
  syn_backward(r, t, nt);
  CHECK(cohort_reducer_finish(r, NULL, &error));
  CHECK(memcmp(g, mine, SYN_N * sizeof(float)) == 0);
  cohort_reducer_prepare(r, TRUE);
  syn_backward(r, t, nt);
  CHECK(cohort_reducer_finish(r, NULL, &error));
  CHECK(syn_check(rank, world, g));
  cohort_reducer_free(r);
  CHECK(cohort_comm_barrier(c, 20, &error));
  return 0;
}

static void test_reducer_synthetic_2(void)
{
  if (have_gloo())
    run_gloo_ranks_bf16(2, reducer_synthetic);
}

static void test_reducer_synthetic_3(void)
{
  if (have_gloo())
    run_gloo_ranks_bf16(3, reducer_synthetic);
}

/* ---- the DDP reducer with a tiny GPT ---- */

/* How far K AdamW steps with bf16-reduced gradients may end from the fp32 result, on average
 * over the weights. bfloat16 keeps 8 significant bits: rounding each rank's gradient and then
 * the sum changes an averaged gradient by at most about 2 * 2^-8 of |a| + |b|. AdamW's step
 * lr * m / sqrt(v) scales with the relative change of the gradient, so a weight whose
 * gradients do not cancel across ranks ends within about 2^-7 * lr * K. Weights whose
 * gradients nearly cancel have no relative bound (their sign can flip, up to 2 lr a step),
 * so the largest difference is reported, not bounded; they are few, and the mean over all
 * weights is held to 2^-7 * lr * K. A real fault (a bucket left unreduced, a rank's
 * gradients dropped) moves a whole bucket's weights by O(lr) a step and fails this. */
#define BF16_MEAN_TOL(lr, k) (0x1p-7 * (lr) * (k))

static const CohortGptShape tiny = {
    .n_layer = 2, .n_head = 2, .n_embd = 32, .seq_len = 16, .vocab_size = 64};
enum { B = 2, T = 16, STEPS = 6 };
#define LR 1e-3

/* Sequences first .. first + rows - 1 of a fixed stream of token rows. At step k both ranks
 * together take rows 2Bk .. 2Bk + 2B - 1 (rank r the B from 2Bk + rB), one process all 2B. */
static void batch_rows(int first, int rows, int *inp, int *tgt)
{
  for (int b = 0; b < rows; b++)
    for (int t = 0; t < T; t++) {
      guint64 h = mix((guint64)(first + b) * 1000 + (guint64)t);
      inp[b * T + t] = (int)(h % 64);
      tgt[b * T + t] = (int)((h >> 20) % 64);
    }
}

/* K AdamW steps of `gpt` on rows [first, first + rows), the gradients through `r` when set. */
static gboolean train_steps(CohortGpt *gpt, CohortReducer *r, int first, int rows, GError **error)
{
  size_t n = cohort_gpt_num_params(gpt);
  guint nt = 0;
  const CohortTensorInfo *tensors = cohort_gpt_tensors(gpt, &nt);
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(n);
  gsize cells = (gsize)rows * T;
  g_autofree int *inp = g_new(int, cells), *tgt = g_new(int, cells);
  for (int step = 1; step <= STEPS; step++) {
    batch_rows(first + step * 2 * B, rows, inp, tgt);
    cohort_gpt_zero_grad(gpt);
    if (r)
      cohort_reducer_prepare(r, TRUE);
    cohort_gpt_forward(gpt, inp, tgt, rows, T);
    cohort_gpt_backward(gpt, 1.0f);
    if (r && !cohort_reducer_finish(r, NULL, error))
      return FALSE;
    cohort_adamw_step(opt, cohort_gpt_params(gpt), cohort_gpt_grads(gpt), tensors, nt, LR, 0.9,
                      0.95, 1e-8, 0.1, step);
  }
  return TRUE;
}

static CohortGpt *tiny_gpt_model(int max_batch)
{
  g_autoptr(GError) error = NULL;
  CohortGpt *gpt = cohort_gpt_new(&tiny, max_batch, &error);
  g_assert_no_error(error);
  cohort_gpt_init_weights(gpt, 1234);
  return gpt;
}

static double max_abs_diff_f(const float *a, const float *b, size_t n)
{
  double worst = 0;
  for (size_t i = 0; i < n; i++)
    worst = MAX(worst, fabs((double)a[i] - (double)b[i]));
  return worst;
}

static int reducer_gpt(CohortComm *c, int rank, int world)
{
  (void)world; /* always 2 */
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortGpt) gpt = tiny_gpt_model(B);
  size_t n = cohort_gpt_num_params(gpt);
  guint nt = 0;
  const CohortTensorInfo *tensors = cohort_gpt_tensors(gpt, &nt);
  /* Buckets of about 4000 floats: several per step, each through the same bf16 scratch. */
  CohortReducer *r = cohort_reducer_new(c, cohort_gpt_grads(gpt), n, tensors, nt, 0.015, 0.008);
  CHECK(cohort_reducer_num_buckets(r) > 4);
  CHECK(cohort_reducer_set_precision(r, COHORT_REDUCE_BF16, &error));
  cohort_gpt_set_grad_ready_func(gpt, cohort_reducer_grad_ready, r);
  int inp[B * T], tgt[B * T];
  batch_rows(rank * B, B, inp, tgt);

  /* This rank's own gradients, without the hook, then through a no_sync pass. */
  g_autofree float *own = g_new(float, n);
  cohort_gpt_set_grad_ready_func(gpt, NULL, NULL);
  cohort_gpt_zero_grad(gpt);
  cohort_gpt_forward(gpt, inp, tgt, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  memcpy(own, cohort_gpt_grads(gpt), n * sizeof(float));
  cohort_gpt_set_grad_ready_func(gpt, cohort_reducer_grad_ready, r);
  cohort_gpt_zero_grad(gpt);
  cohort_reducer_prepare(r, FALSE);
  cohort_gpt_forward(gpt, inp, tgt, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  CHECK(cohort_reducer_finish(r, NULL, &error));
  CHECK(memcmp(own, cohort_gpt_grads(gpt), n * sizeof(float)) == 0);

  /* A synced pass: bf16(bf16(a) + bf16(b)) / 2, bit for bit. */
  g_autofree float *both = g_new(float, 2 * n);
  CHECK(cohort_comm_all_gather(c, own, n * sizeof(float), both, 20, &error));
  cohort_gpt_zero_grad(gpt);
  cohort_reducer_prepare(r, TRUE);
  cohort_gpt_forward(gpt, inp, tgt, B, T);
  cohort_gpt_backward(gpt, 1.0f);
  CHECK(cohort_reducer_finish(r, NULL, &error));
  const float *g = cohort_gpt_grads(gpt);
  size_t unlike_fp32 = 0;
  for (size_t i = 0; i < n; i++) {
    float want = bf16_value(ref_bf16(ref_round(both[i]) + ref_round(both[n + i]))) / 2.0f;
    if (memcmp(&g[i], &want, sizeof want) != 0)
      fprintf(stderr, "rank %d: grad %zu = %.9g, want %.9g (%.9g, %.9g)\n", rank, i, (double)g[i],
              (double)want, (double)both[i], (double)both[n + i]);
    CHECK(memcmp(&g[i], &want, sizeof want) == 0);
    unlike_fp32 += g[i] != (both[i] + both[n + i]) / 2.0f;
  }
  CHECK(unlike_fp32 > n / 2);

  /* Training: both ranks stay bit-identical; rank 0 compares with the fp32 reduction and one
   * process with the double batch. */
  cohort_gpt_init_weights(gpt, 1234);
  CHECK(train_steps(gpt, r, rank * B, B, &error));
  g_autofree float *all = g_new(float, 2 * n);
  CHECK(cohort_comm_all_gather(c, cohort_gpt_params(gpt), n * sizeof(float), all, 20, &error));
  CHECK(memcmp(all, all + n, n * sizeof(float)) == 0);

  CHECK(cohort_reducer_set_precision(r, COHORT_REDUCE_FP32, &error));
  g_autoptr(CohortGpt) gpt32 = tiny_gpt_model(B);
  cohort_reducer_free(r);
  r = cohort_reducer_new(c, cohort_gpt_grads(gpt32), n, tensors, nt, 0.015, 0.008);
  cohort_gpt_set_grad_ready_func(gpt32, cohort_reducer_grad_ready, r);
  CHECK(train_steps(gpt32, r, rank * B, B, &error));
  cohort_reducer_free(r);
  if (rank == 0) {
    g_autoptr(CohortGpt) one = tiny_gpt_model(2 * B);
    CHECK(train_steps(one, NULL, 0, 2 * B, &error));
    const float *w1 = cohort_gpt_params(one);
    double d16 = max_abs_diff_f(cohort_gpt_params(gpt), w1, n);
    double d32 = max_abs_diff_f(cohort_gpt_params(gpt32), w1, n);
    g_autoptr(CohortGpt) init = tiny_gpt_model(B);
    double moved = max_abs_diff_f(w1, cohort_gpt_params(init), n);
    double sum16 = 0, sum32 = 0;
    for (size_t i = 0; i < n; i++) {
      sum16 += fabs((double)cohort_gpt_params(gpt)[i] - w1[i]);
      sum32 += fabs((double)cohort_gpt_params(gpt32)[i] - w1[i]);
    }
    fprintf(stderr,
            "after %d steps: max |w_bf16 - w_1| = %.3g (mean %.3g), max |w_fp32 - w_1| = %.3g "
            "(mean %.3g), weights moved up to %.3g\n",
            STEPS, d16, sum16 / n, d32, sum32 / n, moved);
    CHECK(moved > 0.5 * LR * STEPS); /* it trained */
    CHECK(sum16 / n <= BF16_MEAN_TOL(LR, STEPS));
    CHECK(sum16 > 10 * sum32);
    CHECK(memcmp(cohort_gpt_params(gpt), cohort_gpt_params(gpt32), n * sizeof(float)) != 0);
  }
  CHECK(cohort_comm_barrier(c, 20, &error));
  return 0;
}

static void test_reducer_gpt(void)
{
  if (have_gloo())
    run_gloo_ranks_bf16(2, reducer_gpt);
}

/* ---- cohort-train ---- */

/* cohort-train (spawn mode when nproc > 1) on the sample text with `extra` settings; returns
 * the final weights. */
static GArray *train_weights(int nproc, const char *const *extra)
{
  static const char *const base[] = {
      "n_layer=2",    "n_head=2",     "n_embd=32",           "seq_len=32",         "warmup_steps=1",
      "eval_every=0", "eval_steps=2", "sample_every=0",      "save_every=0",       "threads=1",
      "timeout_s=20", "max_steps=6",  "learning_rate=0.001", "bucket_cap_mb=0.05", NULL};
  g_autofree char *ws = tu_mkdtemp("reduce-bf16");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  const char *exe = g_getenv("COHORT_TRAIN");
  g_assert_nonnull(exe);
  g_ptr_array_add(argv, g_strdup(exe));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup_printf("--nproc=%d", nproc));
  for (guint i = 0; base[i]; i++) {
    g_ptr_array_add(argv, g_strdup("--set"));
    g_ptr_array_add(argv, g_strdup(base[i]));
  }
  for (guint i = 0; extra[i]; i++) {
    g_ptr_array_add(argv, g_strdup("--set"));
    g_ptr_array_add(argv, g_strdup(extra[i]));
  }
  g_ptr_array_add(argv, g_strdup("--set"));
  g_ptr_array_add(argv, g_strdup_printf("workspace_dir=%s", ws));
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  g_autofree char *err = NULL;
  int status = 0;
  g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err,
               &status, &error);
  g_assert_no_error(error);
  if (!g_spawn_check_wait_status(status, NULL))
    g_test_message("cohort-train failed: %s", err);
  g_assert_true(g_spawn_check_wait_status(status, NULL));
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  GArray *w = tu_read_weights(path);
  tu_rm_rf(ws);
  return w;
}

static void weight_diffs(GArray *a, GArray *b, double *max, double *mean)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0, sum = 0;
  for (guint i = 0; i < a->len; i++) {
    double d = fabs((double)g_array_index(a, float, i) - g_array_index(b, float, i));
    worst = MAX(worst, d);
    sum += d;
  }
  *max = worst;
  *mean = sum / a->len;
}

static void test_trainer(void)
{
  if (!have_gloo())
    return;
  g_autoptr(GArray) w16 =
      train_weights(2, (const char *[]){"batch_size=4", "reduce_precision=bf16", NULL});
  g_autoptr(GArray) w32 =
      train_weights(2, (const char *[]){"batch_size=4", "reduce_precision=fp32", NULL});
  g_autoptr(GArray) w1 = train_weights(1, (const char *[]){"batch_size=8", NULL});
  double max16, mean16, max32, mean32;
  weight_diffs(w16, w1, &max16, &mean16);
  weight_diffs(w32, w1, &max32, &mean32);
  g_test_message("2 ranks bf16 vs 1 rank: max %.3g mean %.3g; fp32: max %.3g mean %.3g", max16,
                 mean16, max32, mean32);
  g_assert_cmpfloat(mean16, <=, BF16_MEAN_TOL(0.001, 6));
  /* The setting took effect: bf16 is not the fp32 reduction, and far less exact. */
  g_assert_cmpint(memcmp(w16->data, w32->data, w16->len * sizeof(float)), !=, 0);
  g_assert_cmpfloat(mean16, >, 10 * mean32);
}

/* ---- CUDA (skipped without a GPU) ---- */

#if COHORT_HAVE_CUDA
static gboolean need_gpu(void)
{
  if (cohort_cuda_device_count() > 0)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none usable");
  g_test_skip(msg);
  return FALSE;
}

/* The reducer's stream conversions give the reference's bits, and divide once. */
static void test_cuda_conversions(void)
{
  if (!need_gpu())
    return;
  g_assert_cmpint(cohort_cuda_set_device(0), ==, 0);
  const CohortBackend *be = cohort_backend_cuda();
  enum { N = 70001 };
  g_autofree float *x = g_new(float, N), *back = g_new(float, N);
  g_autofree guint16 *h = g_new(guint16, N);
  for (gsize i = 0; i < N; i++)
    x[i] = i % 4 == 1 ? value(0, i) + value(1, i) : value(0, i); /* ties included */
  float *dx = be->alloc(N * sizeof(float));
  guint16 *dh = be->alloc(N * sizeof(guint16));
  void *stream = cohort_cuda_stream_new(), *done = cohort_cuda_event_new();
  g_assert_nonnull(stream);
  be->upload(dx, x, N * sizeof(float));
  g_assert_cmpint(cohort_cuda_synchronize(), ==, 0);
  g_assert_cmpint(cohort_cuda_to_bf16_on(stream, NULL, dh, dx, N, done), ==, 0);
  g_assert_cmpint(cohort_cuda_stream_copy(stream, done, h, dh, N * sizeof(guint16), 1), ==, 0);
  for (gsize i = 0; i < N; i++)
    g_assert_cmphex(h[i], ==, ref_bf16(x[i]));
  g_assert_cmpint(cohort_cuda_from_bf16_div_on(stream, dx, dh, N, 3.0f), ==, 0);
  be->download(back, dx, N * sizeof(float));
  for (gsize i = 0; i < N; i++) {
    float want = bf16_value(ref_bf16(x[i])) / 3.0f;
    g_assert_cmpmem(&back[i], sizeof(float), &want, sizeof(float));
  }
  g_assert_null(cohort_cuda_last_error());
  cohort_cuda_event_free(done);
  cohort_cuda_stream_free(stream);
  be->free(dx);
  be->free(dh);
}

/* One rank of 2 sharing GPU 0 through Gloo: device gradients, staged through pinned memory. */
static int reducer_cuda_staged(CohortComm *c, int rank, int world)
{
  g_autoptr(GError) error = NULL;
  CHECK(cohort_cuda_set_device(0) == 0);
  const CohortBackend *be = cohort_backend_cuda();
  guint nt = 0;
  g_autofree CohortTensorInfo *t = syn_tensors(&nt);
  g_autofree float *host = g_new(float, SYN_N), *mine = g_new(float, SYN_N);
  for (gsize i = 0; i < SYN_N; i++)
    mine[i] = value(rank, i);
  float *dev = be->alloc(SYN_N * sizeof(float));
  CHECK(dev != NULL);
  be->upload(dev, mine, SYN_N * sizeof(float));
  CohortReducer *r = cohort_reducer_new_cuda(c, dev, SYN_N, t, nt, 0.05, 0.02, 0, TRUE);
  CHECK(cohort_reducer_set_precision(r, COHORT_REDUCE_BF16, &error));
  cohort_reducer_prepare(r, FALSE);
  syn_backward(r, t, nt);
  CHECK(cohort_reducer_finish(r, NULL, &error));
  be->download(host, dev, SYN_N * sizeof(float));
  CHECK(memcmp(host, mine, SYN_N * sizeof(float)) == 0);
  cohort_reducer_prepare(r, TRUE);
  syn_backward(r, t, nt);
  CHECK(cohort_reducer_finish(r, NULL, &error));
  be->download(host, dev, SYN_N * sizeof(float));
  CHECK(syn_check(rank, world, host));
  CHECK(cohort_cuda_last_error() == NULL);
  cohort_reducer_free(r);
  be->free(dev);
  CHECK(cohort_comm_barrier(c, 20, &error));
  return 0;
}

/* CUDA does not survive fork(): the ranks are forked from a fresh run of this program
 * (g_test_trap_subprocess), before anything touches CUDA. */
static void test_cuda_staged(void)
{
  if (g_test_subprocess()) {
    run_gloo_ranks_bf16(2, reducer_cuda_staged);
    return;
  }
  if (!have_gloo() || !need_gpu() || !need_shared_gpu(0))
    return;
  g_test_trap_subprocess(NULL, 120 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed();
}
#endif

/* bucket_cap_mb 0: buckets sized from the model, about eight of them, within 0.25..25 MiB. */
static void test_auto_buckets(void)
{
  g_assert_cmpfloat(cohort_reducer_auto_bucket_mb(1000), ==, 0.25);
  g_assert_cmpfloat(cohort_reducer_auto_bucket_mb((size_t)2e9), ==, 25.0);
  /* on the tiny-gpt preset's tensors: several buckets */
  const CohortGptShape preset = {4, 4, 256, 128, 256};
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortGpt) gpt = cohort_gpt_new(&preset, 1, &error);
  g_assert_no_error(error);
  size_t params = cohort_gpt_num_params(gpt);
  double mb = cohort_reducer_auto_bucket_mb(params);
  g_assert_cmpfloat(fabs(mb - params * 4.0 / 1048576 / 8), <, 1e-9);
  guint nt;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &nt);
  g_autoptr(CohortComm) c = cohort_comm_new_local();
  size_t n = cohort_gpt_num_params(gpt);
  CohortReducer *r =
      cohort_reducer_new(c, cohort_gpt_grads(gpt), n, t, nt, cohort_reducer_auto_bucket_mb(n), 0.0);
  g_assert_cmpuint(cohort_reducer_num_buckets(r), >=, 4);
  cohort_reducer_free(r);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/reducer/auto-buckets", test_auto_buckets);
  g_test_add_func("/reducer/bf16/2-ranks", test_reducer_synthetic_2);
  g_test_add_func("/reducer/bf16/3-ranks", test_reducer_synthetic_3);
  g_test_add_func("/reducer/bf16/gpt", test_reducer_gpt);
  g_test_add_func("/reducer/bf16/trainer-2-ranks", test_trainer);
#if COHORT_HAVE_CUDA
  /* Last: they start CUDA in this process, and the tests above fork. */
  g_test_add_func("/reducer/bf16/cuda-conversions", test_cuda_conversions);
  g_test_add_func("/reducer/bf16/cuda-gloo-staged-2-ranks", test_cuda_staged);
#endif
  return g_test_run();
}
