/* The CUDA backend's channels-last ops and its cuDNN convolutions against the CPU backend's
 * (which tests/test-layers-nhwc.c checks against finite differences, im2col and PyTorch's
 * rules), on the ResNets' shapes: conv2d_nhwc forward and backward (input gradient written,
 * added, or not wanted) and conv2d on NCHW, both on cuDNN where the build has it; max-pooling
 * (ties and NaN included) and global average pooling in NHWC; BatchNorm over rows of channels
 * (HW = 1). |cuda - cpu| <= atol + rtol |cpu| as stated at each check. Without a CUDA device
 * every case is skipped with the runtime's reason, and the ops record an error instead of
 * crashing. Kept apart from tests/test-cuda-kernels*.c so that it folds into a table-driven
 * harness as it is. */
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

typedef struct {
  float *c, *g;
  size_t n;
} Pair;

static Pair pair_from(const float *host, size_t n)
{
  Pair p = {cpu->alloc(n * 4 + 4), gpu->alloc(n * 4 + 4), n};
  g_assert_null(cohort_cuda_last_error());
  cpu->upload(p.c, host, n * 4);
  gpu->upload(p.g, host, n * 4);
  return p;
}

static Pair pair_rand(GRand *r, size_t n)
{
  g_autofree float *h = g_new(float, n ? n : 1);
  for (size_t i = 0; i < n; i++)
    h[i] = (float)g_rand_double_range(r, -1, 1);
  return pair_from(h, n);
}

static void pair_free(Pair *p)
{
  cpu->free(p->c);
  gpu->free(p->g);
}

static void expect_close(const char *what, const Pair *p, double atol, double rtol)
{
  const char *e = cohort_cuda_last_error();
  if (e)
    g_error("%s: %s", what, e);
  g_autofree float *got = g_new(float, p->n ? p->n : 1);
  gpu->download(got, p->g, p->n * sizeof(float));
  for (size_t i = 0; i < p->n; i++) {
    double want = p->c[i];
    gboolean both_nan = isnan(got[i]) && isnan(p->c[i]);
    if (!both_nan && !(fabs((double)got[i] - want) <= atol + rtol * fabs(want)))
      g_error("%s: element %zu of %zu: cuda %.9g, cpu %.9g (allowed %g + %g |cpu|)", what, i, p->n,
              got[i], p->c[i], atol, rtol);
  }
}

static void conv_case(int B, int C, int H, int W, int O, int K, int S, int P, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  int Ho = (H + 2 * P - K) / S + 1, Wo = (W + 2 * P - K) / S + 1;
  size_t nx = (size_t)B * C * H * W, nw = (size_t)O * C * K * K, ny = (size_t)B * O * Ho * Wo;
  Pair x = pair_rand(r, nx), w = pair_rand(r, nw), dy = pair_rand(r, ny), y = pair_rand(r, ny);
  Pair dx = pair_rand(r, nx), dw = pair_rand(r, nw);
  g_autofree char *shape = g_strdup_printf("B%d C%d %dx%d O%d K%d S%d P%d", B, C, H, W, O, K, S, P);
  /* terms of magnitude <= 1: fp32 sums in another order differ by about sqrt(terms) ulps */
  double tol = 2e-6 * C * K * K;
  for (int layout = 0; layout < 2; layout++) {
    const char *l = layout ? "nhwc" : "nchw";
    g_autofree char *fw = g_strdup_printf("conv2d_%s_forward %s", l, shape);
    g_autofree char *bx = g_strdup_printf("conv2d_%s_backward dinp %s", l, shape);
    g_autofree char *bw = g_strdup_printf("conv2d_%s_backward dweight (accumulates) %s", l, shape);
    if (layout) {
      cpu->conv2d_nhwc_forward(y.c, x.c, w.c, B, C, H, W, O, K, S, P);
      gpu->conv2d_nhwc_forward(y.g, x.g, w.g, B, C, H, W, O, K, S, P);
      for (int acc = 0; acc < 2; acc++) {
        cpu->conv2d_nhwc_backward(dx.c, acc, dw.c, dy.c, x.c, w.c, B, C, H, W, O, K, S, P);
        gpu->conv2d_nhwc_backward(dx.g, acc, dw.g, dy.g, x.g, w.g, B, C, H, W, O, K, S, P);
        expect_close(bx, &dx, tol, 1e-5);
      }
      cpu->conv2d_nhwc_backward(NULL, 0, dw.c, dy.c, x.c, w.c, B, C, H, W, O, K, S, P);
      gpu->conv2d_nhwc_backward(NULL, 0, dw.g, dy.g, x.g, w.g, B, C, H, W, O, K, S, P);
    } else {
      cpu->conv2d_forward(y.c, x.c, w.c, B, C, H, W, O, K, S, P);
      gpu->conv2d_forward(y.g, x.g, w.g, B, C, H, W, O, K, S, P);
      cpu->conv2d_backward(dx.c, dw.c, dy.c, x.c, w.c, B, C, H, W, O, K, S, P);
      gpu->conv2d_backward(dx.g, dw.g, dy.g, x.g, w.g, B, C, H, W, O, K, S, P);
      expect_close(bx, &dx, tol, 1e-5);
    }
    expect_close(fw, &y, tol, 1e-5);
    expect_close(bw, &dw, 2e-6 * B * Ho * Wo * 4, 1e-5);
  }
  Pair *all[] = {&x, &w, &dy, &y, &dx, &dw};
  for (guint i = 0; i < G_N_ELEMENTS(all); i++)
    pair_free(all[i]);
}

static void test_conv(void)
{
  if (!need_gpu())
    return;
  conv_case(2, 3, 33, 31, 16, 7, 2, 3, 1); /* the ImageNet stem */
  conv_case(2, 16, 14, 14, 16, 3, 1, 1, 2);
  conv_case(2, 16, 14, 13, 32, 3, 2, 1, 3);
  conv_case(2, 32, 7, 7, 16, 1, 1, 0, 4); /* a Bottleneck's 1×1 */
  conv_case(2, 24, 9, 9, 48, 1, 2, 0, 5); /* a downsample */
  conv_case(1, 5, 6, 5, 3, 3, 1, 1, 6);   /* odd channel counts */
}

static void test_pooling(void)
{
  if (!need_gpu())
    return;
  enum { B = 2, C = 5, H = 9, W = 8, Ho = 5, Wo = 4, HW = H * W };
  g_autoptr(GRand) r = g_rand_new_with_seed(9);
  g_autofree float *h = g_new(float, B *HW *C);
  for (int i = 0; i < B * HW * C; i++) /* ties of zeros, as after a ReLU, and a NaN */
    h[i] = i % 3 == 0 ? 0.0f : (float)g_rand_double_range(r, -1, 1);
  h[17] = NAN;
  Pair x = pair_from(h, B * HW * C), y = pair_rand(r, B * Ho * Wo * C);
  Pair dy = pair_rand(r, B * Ho * Wo * C), dx = pair_rand(r, B * HW * C);
  cpu->maxpool2d_nhwc_forward(y.c, x.c, B, C, H, W, 3, 2, 1);
  gpu->maxpool2d_nhwc_forward(y.g, x.g, B, C, H, W, 3, 2, 1);
  expect_close("maxpool2d_nhwc_forward", &y, 0, 0);
  cpu->maxpool2d_nhwc_backward(dx.c, dy.c, x.c, B, C, H, W, 3, 2, 1);
  gpu->maxpool2d_nhwc_backward(dx.g, dy.g, x.g, B, C, H, W, 3, 2, 1);
  expect_close("maxpool2d_nhwc_backward (accumulates, the same order)", &dx, 0, 0);
  Pair pooled = pair_rand(r, B * C), dp = pair_rand(r, B * C);
  cpu->avgpool_global_nhwc_forward(pooled.c, dx.c, B, C, HW);
  gpu->avgpool_global_nhwc_forward(pooled.g, dx.g, B, C, HW);
  expect_close("avgpool_global_nhwc_forward", &pooled, 1e-6, 1e-5);
  cpu->avgpool_global_nhwc_backward(dx.c, dp.c, B, C, HW);
  gpu->avgpool_global_nhwc_backward(dx.g, dp.g, B, C, HW);
  expect_close("avgpool_global_nhwc_backward (accumulates)", &dx, 1e-6, 1e-6);
  Pair *all[] = {&x, &y, &dy, &dx, &pooled, &dp};
  for (guint i = 0; i < G_N_ELEMENTS(all); i++)
    pair_free(all[i]);
}

/* BatchNorm over N rows of C channels (NHWC), as the ResNet calls it. */
static void test_batchnorm_rows(void)
{
  if (!need_gpu())
    return;
  enum { N = 2 * 7 * 7, C = 48 };
  g_autoptr(GRand) r = g_rand_new_with_seed(11);
  Pair x = pair_rand(r, N * C), dy = pair_rand(r, N * C), y = pair_rand(r, N * C);
  Pair dx = pair_rand(r, N * C), w = pair_rand(r, C), b = pair_rand(r, C), st = pair_rand(r, 5 * C);
  const CohortBackend *be[2] = {cpu, gpu};
  for (int k = 0; k < 2; k++) {
    float *s = k ? st.g : st.c;
    const float *xx = k ? x.g : x.c, *gg = k ? dy.g : dy.c, *ww = k ? w.g : w.c;
    be[k]->bn_stats(xx, N, C, 1, s, s + C);
    be[k]->bn_rstd(s + 2 * C, s + C, 1.0 / N, 1e-5f, C);
    be[k]->bn_forward(k ? y.g : y.c, xx, s, s + 2 * C, ww, k ? b.g : b.c, N, C, 1);
    be[k]->bn_backward_reduce(gg, xx, s, s + 2 * C, N, C, 1, s + 3 * C, s + 4 * C);
    be[k]->bn_backward_dx(k ? dx.g : dx.c, 1, gg, xx, s, s + 2 * C, ww, s + 3 * C, s + 4 * C, N, N,
                          C, 1);
  }
  expect_close("BatchNorm statistics and sums (rows)", &st, 1e-5, 1e-5);
  expect_close("bn_forward (rows)", &y, 1e-5, 1e-5);
  expect_close("bn_backward_dx (rows, accumulates)", &dx, 1e-5, 1e-5);
  Pair *all[] = {&x, &dy, &y, &dx, &w, &b, &st};
  for (guint i = 0; i < G_N_ELEMENTS(all); i++)
    pair_free(all[i]);
}

static void test_no_device(void)
{
  if (n_devices > 0) {
    g_test_skip("a CUDA device is present: this case checks the behaviour without one");
    return;
  }
  cohort_cuda_clear_error();
  gpu->conv2d_nhwc_forward(NULL, NULL, NULL, 2, 3, 8, 8, 4, 3, 1, 1);
  g_assert_nonnull(cohort_cuda_last_error());
  cohort_cuda_clear_error();
  gpu->maxpool2d_nhwc_forward(NULL, NULL, 2, 3, 8, 8, 3, 2, 1);
  g_assert_nonnull(cohort_cuda_last_error());
  cohort_cuda_clear_error();
  gpu->conv2d_nhwc_forward(NULL, NULL, NULL, 0, 3, 8, 8, 4, 3, 1, 1); /* empty: nothing */
  gpu->maxpool2d_nhwc_forward(NULL, NULL, 2, 3, 8, 8, 3, 2, 2);       /* 2 pad > kernel */
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
  g_test_add_func("/cuda-cudnn/no-device", test_no_device);
  g_test_add_func("/cuda-cudnn/conv2d", test_conv);
  g_test_add_func("/cuda-cudnn/pooling", test_pooling);
  g_test_add_func("/cuda-cudnn/batchnorm-rows", test_batchnorm_rows);
  return g_test_run();
}
