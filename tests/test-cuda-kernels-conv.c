/* The CUDA backend's convolutional-network ops against the CPU backend's on random inputs, with
 * the tolerance stated at each check (|cuda - cpu| <= atol + rtol * |cpu|). Without a CUDA
 * device every case is skipped with the runtime's reason. The CPU ops themselves are checked
 * against finite differences and PyTorch in tests/test-layers-conv.c. */
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"

#include <glib.h>
#include <math.h>
#include <string.h>

static const CohortBackend *cpu, *gpu;
static int n_devices;

static gboolean need_gpu(void)
{
  if (n_devices > 0)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none visible");
  g_test_skip(msg);
  return FALSE;
}

static void assert_no_cuda_error(const char *op)
{
  const char *e = cohort_cuda_last_error();
  if (e)
    g_test_message("%s: %s", op, e);
  g_assert_null(e);
}

static float *rand_floats(GRand *r, size_t n, double lo, double hi)
{
  float *x = g_new(float, n ? n : 1);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)g_rand_double_range(r, lo, hi);
  return x;
}

/* A pair of buffers holding the same values: one on each backend. */
typedef struct {
  float *c, *g;
  size_t n;
} Pair;

static Pair pair_from(const float *host, size_t n)
{
  Pair p = {cpu->alloc(n * 4 + 4), gpu->alloc(n * 4 + 4), n};
  assert_no_cuda_error("alloc");
  g_assert_nonnull(p.c);
  g_assert_nonnull(p.g);
  cpu->upload(p.c, host, n * 4);
  gpu->upload(p.g, host, n * 4);
  return p;
}

static Pair pair_rand(GRand *r, size_t n, double lo, double hi)
{
  g_autofree float *h = rand_floats(r, n, lo, hi);
  return pair_from(h, n);
}

static void pair_free(Pair *p)
{
  cpu->free(p->c);
  gpu->free(p->g);
}

/* Downloads the CUDA side of `p` and compares it with the CPU side. */
static void expect_close(const char *what, const Pair *p, double atol, double rtol)
{
  assert_no_cuda_error(what);
  float *got = g_new(float, p->n ? p->n : 1);
  gpu->download(got, p->g, p->n * sizeof(float));
  assert_no_cuda_error(what);
  size_t worst = 0;
  double worst_excess = -INFINITY;
  for (size_t i = 0; i < p->n; i++) {
    double want = p->c[i], err = fabs((double)got[i] - want);
    double excess = isnan(got[i]) != isnan(p->c[i]) ? INFINITY : err - (atol + rtol * fabs(want));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (p->n && worst_excess > 0)
    g_test_message("%s: element %zu of %zu: cuda %.9g, cpu %.9g (allowed %g + %g * |cpu|)", what,
                   worst, p->n, got[worst], p->c[worst], atol, rtol);
  g_assert_true(p->n == 0 || worst_excess <= 0);
  g_free(got);
}

/* Forward and backward of one shape; the backward accumulates into random gradients, and runs
 * once more without dinp (the first layer), which must give the same dweight. */
static void conv_case(int B, int C, int H, int W, int O, int K, int S, int P, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  int Ho = (H + 2 * P - K) / S + 1, Wo = (W + 2 * P - K) / S + 1;
  size_t nx = (size_t)B * C * H * W, nw = (size_t)O * C * K * K, ny = (size_t)B * O * Ho * Wo;
  Pair x = pair_rand(r, nx, -1, 1), w = pair_rand(r, nw, -1, 1), dy = pair_rand(r, ny, -1, 1);
  Pair y = pair_rand(r, ny, 1e3, 1e4); /* garbage: the forward overwrites */
  Pair dx = pair_rand(r, nx, -1, 1), dw = pair_rand(r, nw, -1, 1);
  g_autofree float *dw0 = g_memdup2(dw.c, nw * 4);
  g_autofree char *shape = g_strdup_printf("B%d C%d %dx%d O%d K%d S%d P%d", B, C, H, W, O, K, S, P);
  g_autofree char *w1 = g_strdup_printf("conv2d_forward %s", shape);
  g_autofree char *w2 = g_strdup_printf("conv2d_backward dinp %s", shape);
  g_autofree char *w3 = g_strdup_printf("conv2d_backward dweight %s", shape);
  g_autofree char *w4 = g_strdup_printf("conv2d_backward dweight, no dinp, %s", shape);
  cpu->conv2d_forward(y.c, x.c, w.c, B, C, H, W, O, K, S, P);
  gpu->conv2d_forward(y.g, x.g, w.g, B, C, H, W, O, K, S, P);
  /* sums of up to C*K*K products of values in [-1, 1], in another order */
  expect_close(w1, &y, 1e-4, 1e-5);
  cpu->conv2d_backward(dx.c, dw.c, dy.c, x.c, w.c, B, C, H, W, O, K, S, P);
  gpu->conv2d_backward(dx.g, dw.g, dy.g, x.g, w.g, B, C, H, W, O, K, S, P);
  expect_close(w2, &dx, 1e-4, 1e-5);
  /* dweight sums B*Ho*Wo products (131072 in the largest case): float rounding grows with
   * the number of terms, ~1e-8 of it per term on both sides, so 1e-7 per term */
  double dw_atol = fmax(1e-4, 1e-7 * B * Ho * Wo);
  expect_close(w3, &dw, dw_atol, 1e-5);
  cpu->upload(dw.c, dw0, nw * 4);
  gpu->upload(dw.g, dw0, nw * 4);
  cpu->conv2d_backward(NULL, dw.c, dy.c, x.c, w.c, B, C, H, W, O, K, S, P);
  gpu->conv2d_backward(NULL, dw.g, dy.g, x.g, w.g, B, C, H, W, O, K, S, P);
  expect_close(w4, &dw, dw_atol, 1e-5);
  pair_free(&x), pair_free(&w), pair_free(&dy), pair_free(&y), pair_free(&dx), pair_free(&dw);
}

static void test_conv(void)
{
  if (!need_gpu())
    return;
  conv_case(3, 3, 32, 32, 16, 3, 1, 1, 1);  /* the ResNet stem */
  conv_case(4, 16, 16, 16, 32, 3, 2, 1, 2); /* a downsampling conv */
  conv_case(2, 4, 7, 5, 3, 3, 2, 1, 3);     /* odd, unequal sides */
  conv_case(2, 8, 9, 9, 6, 1, 2, 0, 4);     /* the 1x1 stride-2 shortcut */
  conv_case(1, 2, 2, 3, 2, 5, 1, 2, 5);     /* a kernel wider than the input */
  conv_case(1, 5, 6, 6, 4, 3, 1, 0, 6);     /* one image: no regrouping */
  /* 576 * 16384 floats of columns per image: groups of 7 images, the last one alone */
  conv_case(8, 64, 128, 128, 8, 3, 1, 1, 7);
}

/* The GEMM mode reaches the convolution: bf16 on both sides rounds the same operands. */
static void test_conv_bf16(void)
{
  if (!need_gpu())
    return;
  enum { B = 4, C = 16, H = 16, O = 16, K = 3 };
  g_autoptr(GRand) r = g_rand_new_with_seed(8);
  size_t nx = (size_t)B * C * H * H, nw = (size_t)O * C * K * K, ny = (size_t)B * O * H * H;
  Pair x = pair_rand(r, nx, -1, 1), w = pair_rand(r, nw, -1, 1), y = pair_rand(r, ny, 0, 1);
  cpu->set_gemm_mode(COHORT_GEMM_BF16);
  gpu->set_gemm_mode(COHORT_GEMM_BF16);
  cpu->conv2d_forward(y.c, x.c, w.c, B, C, H, H, O, K, 1, 1);
  gpu->conv2d_forward(y.g, x.g, w.g, B, C, H, H, O, K, 1, 1);
  cpu->set_gemm_mode(COHORT_GEMM_FP32);
  gpu->set_gemm_mode(COHORT_GEMM_FP32);
  /* exact products of the rounded operands, added in another order */
  expect_close("conv2d_forward bf16", &y, 1e-4, 1e-5);
  pair_free(&x), pair_free(&w), pair_free(&y);
}

/* Every BatchNorm op on one shape, each side from the CPU's statistics where it takes them, so
 * each op is compared on its own. */
static void batchnorm_case(int B, int C, int HW, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  size_t n = (size_t)B * C * HW;
  g_autofree char *shape = g_strdup_printf("B%d C%d HW%d", B, C, HW);
  Pair x = pair_rand(r, n, -1, 4), dy = pair_rand(r, n, -1, 1), y = pair_rand(r, n, 0, 1);
  Pair w = pair_rand(r, C, 0.5, 1.5), b = pair_rand(r, C, -0.5, 0.5);
  Pair mean = pair_rand(r, C, 0, 1), m2 = pair_rand(r, C, 0, 1), rstd = pair_rand(r, C, 0, 1);
  Pair rm = pair_rand(r, C, -1, 1), rv = pair_rand(r, C, 0.5, 2);
  Pair s1 = pair_rand(r, C, 0, 1), s2 = pair_rand(r, C, 0, 1), dx = pair_rand(r, n, -1, 1);
  Pair dw = pair_rand(r, C, -1, 1), db = pair_rand(r, C, -1, 1);
  double count = (double)B * HW;

  cpu->bn_stats(x.c, B, C, HW, mean.c, m2.c);
  gpu->bn_stats(x.g, B, C, HW, mean.g, m2.g);
  /* both reduce in double and round once: a few float ulps at most */
  g_autofree char *w1 = g_strdup_printf("bn_stats mean %s", shape);
  g_autofree char *w2 = g_strdup_printf("bn_stats m2 %s", shape);
  expect_close(w1, &mean, 1e-6, 1e-6);
  expect_close(w2, &m2, 0, 1e-6);
  gpu->upload(mean.g, mean.c, C * 4), gpu->upload(m2.g, m2.c, C * 4);

  cpu->bn_rstd(rstd.c, m2.c, 1.0 / count, 1e-5f, C);
  gpu->bn_rstd(rstd.g, m2.g, 1.0 / count, 1e-5f, C);
  expect_close("bn_rstd", &rstd, 0, 1e-6);
  gpu->upload(rstd.g, rstd.c, C * 4);

  cpu->bn_forward(y.c, x.c, mean.c, rstd.c, w.c, b.c, B, C, HW);
  gpu->bn_forward(y.g, x.g, mean.g, rstd.g, w.g, b.g, B, C, HW);
  expect_close("bn_forward", &y, 1e-6, 1e-6);
  cpu->bn_running_update(rm.c, rv.c, mean.c, m2.c, count, 0.1f, C);
  gpu->bn_running_update(rm.g, rv.g, mean.g, m2.g, count, 0.1f, C);
  expect_close("bn_running_update mean", &rm, 1e-7, 1e-6);
  expect_close("bn_running_update var", &rv, 1e-7, 1e-6);

  cpu->bn_backward_reduce(dy.c, x.c, mean.c, rstd.c, B, C, HW, s1.c, s2.c);
  gpu->bn_backward_reduce(dy.g, x.g, mean.g, rstd.g, B, C, HW, s1.g, s2.g);
  /* sums of terms of both signs, in double on both sides */
  g_autofree char *w3 = g_strdup_printf("bn_backward_reduce sum_dy %s", shape);
  g_autofree char *w4 = g_strdup_printf("bn_backward_reduce sum_dy_xhat %s", shape);
  expect_close(w3, &s1, 1e-5, 1e-6);
  expect_close(w4, &s2, 1e-5, 1e-6);
  gpu->upload(s1.g, s1.c, C * 4), gpu->upload(s2.g, s2.c, C * 4);
  cpu->bn_backward_dx(dx.c, dy.c, x.c, mean.c, rstd.c, w.c, s1.c, s2.c, count, B, C, HW);
  gpu->bn_backward_dx(dx.g, dy.g, x.g, mean.g, rstd.g, w.g, s1.g, s2.g, count, B, C, HW);
  expect_close("bn_backward_dx (accumulates)", &dx, 1e-6, 1e-5);
  cpu->bn_backward_params(dw.c, db.c, s1.c, s2.c, C);
  gpu->bn_backward_params(dw.g, db.g, s1.g, s2.g, C);
  expect_close("bn_backward_params dweight", &dw, 0, 0); /* one add each: exact */
  expect_close("bn_backward_params dbias", &db, 0, 0);
  Pair *all[] = {&x, &dy, &y, &w, &b, &mean, &m2, &rstd, &rm, &rv, &s1, &s2, &dx, &dw, &db};
  for (size_t i = 0; i < G_N_ELEMENTS(all); i++)
    pair_free(all[i]);
}

static void test_batchnorm(void)
{
  if (!need_gpu())
    return;
  batchnorm_case(5, 7, 33, 11);    /* one chunk per channel */
  batchnorm_case(16, 3, 1024, 12); /* eight chunks */
  batchnorm_case(128, 2, 64, 13);  /* chunks that split rows */
  batchnorm_case(3, 4, 1, 14);     /* 1x1 maps */
}

/* Chan's combination over ranks, rank rows [mean C, m2 C, count]. */
static void test_batchnorm_combine(void)
{
  if (!need_gpu())
    return;
  enum { R = 3, C = 5 };
  g_autoptr(GRand) r = g_rand_new_with_seed(15);
  float rows[R * (2 * C + 1)];
  for (int k = 0; k < R; k++) {
    float *row = rows + k * (2 * C + 1);
    for (int c = 0; c < C; c++) {
      row[c] = (float)g_rand_double_range(r, -2, 5);
      row[C + c] = (float)g_rand_double_range(r, 1, 100);
    }
    row[2 * C] = (float)(k == 1 ? 0 : 96 * (k + 1)); /* an empty rank in the middle */
  }
  Pair in = pair_from(rows, G_N_ELEMENTS(rows));
  Pair mean = pair_from(rows, C), m2 = pair_from(rows, C);
  cpu->bn_combine_stats(mean.c, m2.c, in.c, R, C);
  gpu->bn_combine_stats(mean.g, m2.g, in.g, R, C);
  expect_close("bn_combine_stats mean", &mean, 1e-7, 1e-7);
  expect_close("bn_combine_stats m2", &m2, 0, 1e-7);
  pair_free(&in), pair_free(&mean), pair_free(&m2);
}

static void test_relu_pool(void)
{
  if (!need_gpu())
    return;
  enum { N = 10007, B = 7, C = 9, HW = 49 };
  g_autoptr(GRand) r = g_rand_new_with_seed(21);
  Pair x = pair_rand(r, N, -1, 1), g = pair_rand(r, N, -1, 1), y = pair_rand(r, N, 0, 1);
  cpu->relu_forward(y.c, x.c, N);
  gpu->relu_forward(y.g, x.g, N);
  expect_close("relu_forward", &y, 0, 0);
  cpu->relu_backward(y.c, x.c, g.c, N);
  gpu->relu_backward(y.g, x.g, g.g, N);
  expect_close("relu_backward", &y, 0, 0);
  cpu->relu_backward(g.c, x.c, g.c, N); /* in place */
  gpu->relu_backward(g.g, x.g, g.g, N);
  expect_close("relu_backward in place", &g, 0, 0);

  size_t n = (size_t)B * C * HW;
  Pair px = pair_rand(r, n, -1, 2), pooled = pair_rand(r, B * C, 0, 1);
  Pair pd = pair_rand(r, B * C, -1, 1), pdx = pair_rand(r, n, -1, 1);
  cpu->avgpool_global_forward(pooled.c, px.c, B, C, HW);
  gpu->avgpool_global_forward(pooled.g, px.g, B, C, HW);
  expect_close("avgpool_global_forward", &pooled, 1e-6, 1e-6);
  cpu->avgpool_global_backward(pdx.c, pd.c, B, C, HW);
  gpu->avgpool_global_backward(pdx.g, pd.g, B, C, HW);
  expect_close("avgpool_global_backward (accumulates)", &pdx, 0, 0);
  pair_free(&x), pair_free(&g), pair_free(&y), pair_free(&px), pair_free(&pooled);
  pair_free(&pd), pair_free(&pdx);
}

static void accuracy_case(int N, int V, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  g_autofree float *logits = rand_floats(r, (size_t)N * V, -3, 3);
  g_autofree int *labels = g_new(int, N);
  for (int n = 0; n < N; n++) {
    float *row = logits + (size_t)n * V;
    int k = g_rand_int_range(r, 0, V);
    if (n % 5 == 1) /* ties: the first maximum wins */
      row[k] = row[V - 1 - k] = 10.0f;
    if (n % 7 == 2) /* a NaN counts as the maximum */
      row[k] = NAN;
    labels[n] = n % 3 ? k : g_rand_int_range(r, 0, V);
  }
  Pair l = pair_from(logits, (size_t)N * V);
  int *cl = cpu->alloc(sizeof(int) * N), *gl = gpu->alloc(sizeof(int) * N);
  cpu->upload(cl, labels, sizeof(int) * N);
  gpu->upload(gl, labels, sizeof(int) * N);
  int want = cpu->accuracy_count(l.c, cl, N, V), got = gpu->accuracy_count(l.g, gl, N, V);
  assert_no_cuda_error("accuracy_count");
  g_test_message("accuracy_count N=%d V=%d: cuda %d, cpu %d", N, V, got, want);
  g_assert_cmpint(got, ==, want);
  g_assert_cmpint(want, >, 0);
  pair_free(&l), cpu->free(cl), gpu->free(gl);
}

static void test_accuracy(void)
{
  if (!need_gpu())
    return;
  accuracy_case(300, 10, 31);  /* CIFAR-10: fewer classes than a warp */
  accuracy_case(70, 1000, 32); /* many classes per lane */
  accuracy_case(5, 1, 33);     /* one class */
}

static void test_sgd(void)
{
  if (!need_gpu())
    return;
  enum { N = 10007 };
  const struct {
    float momentum, dampening, wd;
    int nesterov;
  } cases[] = {{0.9f, 0.0f, 5e-4f, 0},
               {0.9f, 0.0f, 5e-4f, 1},
               {0.8f, 0.3f, 0.0f, 0},
               {0.0f, 0.0f, 1e-2f, 0}};
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    g_autoptr(GRand) r = g_rand_new_with_seed(41 + k);
    Pair p = pair_rand(r, N, -1, 1), buf = pair_rand(r, N, 1e3, 1e4);
    for (int step = 0; step < 3; step++) {
      Pair g = pair_rand(r, N, -1, 1);
      int mom = cases[k].momentum != 0.0f;
      cpu->sgd_update(p.c, g.c, mom ? buf.c : NULL, N, 0.1f, cases[k].momentum, cases[k].dampening,
                      cases[k].wd, cases[k].nesterov, step == 0);
      gpu->sgd_update(p.g, g.g, mom ? buf.g : NULL, N, 0.1f, cases[k].momentum, cases[k].dampening,
                      cases[k].wd, cases[k].nesterov, step == 0);
      pair_free(&g);
    }
    /* the same formula per element; contraction into FMAs may differ */
    expect_close("sgd_update params", &p, 1e-6, 1e-6);
    if (cases[k].momentum != 0.0f)
      expect_close("sgd_update momentum buffer", &buf, 1e-6, 1e-6);
    pair_free(&p), pair_free(&buf);
  }
}

/* The reductions give the same bits when run twice. */
static void test_deterministic(void)
{
  if (!need_gpu())
    return;
  enum { B = 16, C = 16, H = 16, O = 16, K = 3 };
  g_autoptr(GRand) r = g_rand_new_with_seed(51);
  size_t nx = (size_t)B * C * H * H, nw = (size_t)O * C * K * K;
  Pair x = pair_rand(r, nx, -1, 1), w = pair_rand(r, nw, -1, 1), dy = pair_rand(r, nx, -1, 1);
  /* st: mean, m2, rstd, sum_dy, sum_dy_xhat */
  float *dx = gpu->alloc(nx * 4), *dw = gpu->alloc(nw * 4), *st = gpu->alloc(5 * C * 4);
  g_autofree float *first = g_new(float, nx + nw + 5 * C);
  g_autofree float *second = g_new(float, nx + nw + 5 * C);
  for (int run = 0; run < 2; run++) {
    float *h = run ? second : first;
    gpu->zero(dx, nx * 4), gpu->zero(dw, nw * 4);
    gpu->conv2d_backward(dx, dw, dy.g, x.g, w.g, B, C, H, H, O, K, 1, 1);
    gpu->bn_stats(x.g, B, C, H * H, st, st + C);
    gpu->bn_rstd(st + 2 * C, st + C, 1.0 / (B * H * H), 1e-5f, C);
    gpu->bn_backward_reduce(dy.g, x.g, st, st + 2 * C, B, C, H * H, st + 3 * C, st + 4 * C);
    gpu->download(h, dx, nx * 4);
    gpu->download(h + nx, dw, nw * 4);
    gpu->download(h + nx + nw, st, 5 * C * 4);
  }
  assert_no_cuda_error("deterministic");
  g_assert_true(memcmp(first, second, (nx + nw + 5 * C) * 4) == 0);
  pair_free(&x), pair_free(&w), pair_free(&dy);
  gpu->free(dx), gpu->free(dw), gpu->free(st);
}

/* Runs without a device: the new ops record the reason instead of crashing, and the accuracy
 * count, the one op with a result on the host, says -1. */
static void test_no_device(void)
{
  if (n_devices > 0) {
    g_test_skip("a CUDA device is present: this case checks the behaviour without one");
    return;
  }
  cohort_cuda_clear_error();
  gpu->conv2d_forward(NULL, NULL, NULL, 2, 3, 8, 8, 4, 3, 1, 1);
  g_assert_nonnull(cohort_cuda_last_error());
  cohort_cuda_clear_error();
  gpu->bn_stats(NULL, 2, 3, 16, NULL, NULL);
  g_assert_nonnull(cohort_cuda_last_error());
  cohort_cuda_clear_error();
  gpu->relu_forward(NULL, NULL, 10);
  g_assert_nonnull(cohort_cuda_last_error());
  cohort_cuda_clear_error();
  g_assert_cmpint(gpu->accuracy_count(NULL, NULL, 4, 10), ==, -1);
  g_assert_nonnull(cohort_cuda_last_error());
  cohort_cuda_clear_error();
  /* empty shapes do nothing, and fail nothing */
  gpu->conv2d_forward(NULL, NULL, NULL, 0, 3, 8, 8, 4, 3, 1, 1);
  gpu->conv2d_forward(NULL, NULL, NULL, 1, 3, 2, 2, 4, 5, 1, 0); /* kernel past the input */
  gpu->sgd_update(NULL, NULL, NULL, 0, 0.1f, 0.9f, 0.0f, 0.0f, 0, 1);
  g_assert_cmpint(gpu->accuracy_count(NULL, NULL, 0, 10), ==, 0);
  g_assert_null(cohort_cuda_last_error());
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cpu = cohort_backend_cpu();
  gpu = cohort_backend_cuda();
  cpu->set_threads(1);
  n_devices = cohort_cuda_device_count();
  if (n_devices > 0 && cohort_cuda_set_device(0) != 0)
    g_error("cannot use CUDA device 0: %s", cohort_cuda_last_error());
  g_test_add_func("/cuda-conv/no-device", test_no_device);
  g_test_add_func("/cuda-conv/conv2d", test_conv);
  g_test_add_func("/cuda-conv/conv2d-bf16", test_conv_bf16);
  g_test_add_func("/cuda-conv/batchnorm", test_batchnorm);
  g_test_add_func("/cuda-conv/batchnorm-combine", test_batchnorm_combine);
  g_test_add_func("/cuda-conv/relu-pool", test_relu_pool);
  g_test_add_func("/cuda-conv/accuracy", test_accuracy);
  g_test_add_func("/cuda-conv/sgd", test_sgd);
  g_test_add_func("/cuda-conv/deterministic", test_deterministic);
  return g_test_run();
}
