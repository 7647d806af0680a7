/* The CPU backend's channels-last (NHWC) ops and its oneDNN convolutions:
 *  - conv2d_nhwc forward and backward (data written or added, weights added) on both paths,
 *    oneDNN against the im2col reference on the same NHWC tensors, and conv2d (NCHW) on oneDNN
 *    against im2col, on the shapes of the ResNets (7×7 stride 2, 3×3 stride 1 and 2, 1×1
 *    stride 1 and 2, odd channel counts and sides), within 1e-5 of the magnitude of the terms;
 *  - gradients against central finite differences (conv2d is linear: exact up to rounding);
 *  - the GEMM mode: bf16 mode equals the fp32 convolution of the rounded operands, bit for bit;
 *  - max-pooling against a loop in double and PyTorch's tie and NaN rules, its gradient
 *    against finite differences; global average pooling against the NCHW op;
 *  - BatchNorm over rows of channels (HW = 1, the NHWC fast path) against the NCHW op on the
 *    transposed tensor;
 *  - 1 and 2 threads agree. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/conv-paths.h"
#include "kernels/math-inline.h"

static const CohortBackend *be;
static guint32 rng = 99;

static float frand(void)
{
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *randv(size_t n)
{
  float *v = g_new(float, n ? n : 1);
  for (size_t i = 0; i < n; i++)
    v[i] = frand();
  return v;
}

/* NCHW [B, C, HW] from NHWC [B, HW, C] and back. */
static void to_nchw(float *dst, const float *src, int B, int C, int HW)
{
  for (int b = 0; b < B; b++)
    for (int p = 0; p < HW; p++)
      for (int c = 0; c < C; c++)
        dst[((size_t)b * C + c) * HW + p] = src[((size_t)b * HW + p) * C + c];
}

static void to_nhwc(float *dst, const float *src, int B, int C, int HW)
{
  for (int b = 0; b < B; b++)
    for (int p = 0; p < HW; p++)
      for (int c = 0; c < C; c++)
        dst[((size_t)b * HW + p) * C + c] = src[((size_t)b * C + c) * HW + p];
}

/* |a - b| <= tol * (scale + |b|) elementwise; returns the largest |a - b| / (scale + |b|). */
static double close_to(const float *a, const float *b, size_t n, double tol, double scale,
                       const char *what)
{
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]) / (scale + fabs(b[i]));
    if (e > tol)
      g_error("%s: element %zu is %.8g, reference %.8g", what, i, a[i], b[i]);
    worst = fmax(worst, e);
  }
  return worst;
}

typedef struct {
  int B, C, H, W, O, K, S, P;
} Shape;

static const Shape shapes[] = {
    {2, 3, 17, 15, 8, 7, 2, 3},  /* the ImageNet stem, odd sides */
    {2, 16, 9, 9, 16, 3, 1, 1},  /* a BasicBlock's 3×3 */
    {2, 16, 9, 8, 32, 3, 2, 1},  /* its stride-2 first 3×3 */
    {2, 32, 6, 6, 16, 1, 1, 0},  /* a Bottleneck's 1×1 reduction */
    {2, 16, 6, 6, 64, 1, 1, 0},  /* its 1×1 expansion, and layer1's downsample */
    {2, 24, 7, 7, 48, 1, 2, 0},  /* the stride-2 downsample */
    {1, 5, 5, 6, 3, 3, 1, 1},    /* odd channel counts */
    {3, 4, 4, 4, 4, 5, 1, 2},    /* a kernel wider than the input */
    {16, 32, 8, 8, 32, 3, 1, 1}, /* 3×3 stride 1 at batch 16: oneDNN's Winograd on AVX-512 */
};

static size_t n_in(const Shape *s)
{
  return (size_t)s->B * s->C * s->H * s->W;
}

static int out_side(int n, const Shape *s)
{
  return (n + 2 * s->P - s->K) / s->S + 1;
}

static size_t n_out(const Shape *s)
{
  return (size_t)s->B * s->O * out_side(s->H, s) * out_side(s->W, s);
}

static size_t n_w(const Shape *s)
{
  return (size_t)s->O * s->C * s->K * s->K;
}

typedef struct {
  float *y, *dx_set, *dx_add, *dw;
} Results;

/* Forward, backward writing dinp, backward adding to a copy of `base`, on the current path. */
static Results run_nhwc(const Shape *s, const float *x, const float *w, const float *dy,
                        const float *base)
{
  Results r = {g_new(float, n_out(s)), g_new(float, n_in(s)), g_memdup2(base, n_in(s) * 4),
               g_new0(float, n_w(s))};
  for (size_t i = 0; i < n_in(s); i++)
    r.dx_set[i] = NAN; /* written, never read */
  be->conv2d_nhwc_forward(r.y, x, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
  be->conv2d_nhwc_backward(r.dx_set, 0, r.dw, dy, x, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S,
                           s->P);
  float *dw2 = g_new0(float, n_w(s));
  be->conv2d_nhwc_backward(r.dx_add, 1, dw2, dy, x, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S,
                           s->P);
  close_to(dw2, r.dw, n_w(s), 1e-6, 1e-6, "dweight of the adding backward");
  g_free(dw2);
  return r;
}

static void results_free(Results *r)
{
  g_free(r->y), g_free(r->dx_set), g_free(r->dx_add), g_free(r->dw);
}

/* oneDNN against im2col on NHWC, and the NCHW op against the same im2col numbers. */
static void test_conv_paths(void)
{
  if (!cohort_cpu_conv_path_available(COHORT_CPU_CONV_ONEDNN)) {
    g_test_skip("this build has no oneDNN: im2col is the only path");
    return;
  }
  for (guint k = 0; k < G_N_ELEMENTS(shapes); k++) {
    const Shape *s = &shapes[k];
    g_autofree char *what = g_strdup_printf("B%d C%d %dx%d O%d K%d S%d P%d", s->B, s->C, s->H, s->W,
                                            s->O, s->K, s->S, s->P);
    g_autofree float *x = randv(n_in(s)), *w = randv(n_w(s)), *dy = randv(n_out(s));
    g_autofree float *base = randv(n_in(s));
    g_assert_true(cohort_cpu_conv_select(COHORT_CPU_CONV_IM2COL));
    Results ref = run_nhwc(s, x, w, dy, base);
    g_assert_true(cohort_cpu_conv_select(COHORT_CPU_CONV_ONEDNN));
    Results got = run_nhwc(s, x, w, dy, base);
    double terms = s->C * s->K * s->K; /* products per output: their magnitude bounds error */
    g_autofree char *w1 = g_strconcat(what, " forward", NULL);
    g_autofree char *w2 = g_strconcat(what, " dinp", NULL);
    g_autofree char *w3 = g_strconcat(what, " dinp added", NULL);
    g_autofree char *w4 = g_strconcat(what, " dweight", NULL);
    double e = close_to(got.y, ref.y, n_out(s), 1e-5, sqrt(terms), w1);
    e = fmax(e, close_to(got.dx_set, ref.dx_set, n_in(s), 1e-5, sqrt(terms), w2));
    e = fmax(e, close_to(got.dx_add, ref.dx_add, n_in(s), 1e-5, sqrt(terms), w3));
    e = fmax(e, close_to(got.dw, ref.dw, n_w(s), 1e-5, sqrt((double)n_out(s) / s->O), w4));
    CohortConvDims d;
    cohort_conv_dims(&d, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
    g_test_message("%s: oneDNN's %s / %s / %s, worst %.1e of the tolerance's unit", what,
                   cohort_onednn_conv2d_impl(0, 1, &d), cohort_onednn_conv2d_impl(1, 1, &d),
                   cohort_onednn_conv2d_impl(2, 1, &d), e);
    for (size_t i = 0; i < n_in(s); i++) /* adding = writing + what was there */
      g_assert_cmpfloat(fabsf(got.dx_add[i] - base[i] - got.dx_set[i]), <=,
                        1e-5f * (1 + fabsf(base[i])));

    /* NCHW through oneDNN's reorders: the same numbers in the other layout */
    int HWi = s->H * s->W, HWo = out_side(s->H, s) * out_side(s->W, s);
    g_autofree float *xc = g_new(float, n_in(s)), *dyc = g_new(float, n_out(s));
    g_autofree float *yc = g_new(float, n_out(s)), *y_back = g_new(float, n_out(s));
    g_autofree float *dxc = g_new0(float, n_in(s)), *dx_back = g_new(float, n_in(s));
    g_autofree float *dwc = g_new0(float, n_w(s));
    to_nchw(xc, x, s->B, s->C, HWi);
    to_nchw(dyc, dy, s->B, s->O, HWo);
    be->conv2d_forward(yc, xc, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
    be->conv2d_backward(dxc, dwc, dyc, xc, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
    to_nhwc(y_back, yc, s->B, s->O, HWo);
    to_nhwc(dx_back, dxc, s->B, s->C, HWi);
    close_to(y_back, ref.y, n_out(s), 1e-5, sqrt(terms), w1);
    close_to(dx_back, ref.dx_set, n_in(s), 1e-5, sqrt(terms), w2);
    close_to(dwc, ref.dw, n_w(s), 1e-5, sqrt((double)n_out(s) / s->O), w4);
    results_free(&ref);
    results_free(&got);
  }
}

typedef struct {
  const Shape *s;
  float *x, *w, *r;
} ConvObj;

static double conv_obj(const ConvObj *c)
{
  const Shape *s = c->s;
  g_autofree float *y = g_new(float, n_out(s));
  be->conv2d_nhwc_forward(y, c->x, c->w, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
  double j = 0;
  for (size_t i = 0; i < n_out(s); i++)
    j += (double)y[i] * c->r[i];
  return j;
}

/* J = sum(conv(x, w) * R): dJ/dx and dJ/dw against central differences, on both paths. */
static void test_conv_finite_differences(void)
{
  const Shape s = {2, 3, 7, 6, 4, 3, 2, 1};
  ConvObj c = {&s, randv(n_in(&s)), randv(n_w(&s)), randv(n_out(&s))};
  CohortCpuConvPath start = cohort_cpu_conv_path();
  for (int path = 0; path <= 1; path++) {
    if (!cohort_cpu_conv_select(path ? COHORT_CPU_CONV_ONEDNN : COHORT_CPU_CONV_IM2COL))
      continue;
    g_autofree float *dx = g_new(float, n_in(&s)), *dw = g_new0(float, n_w(&s));
    be->conv2d_nhwc_backward(dx, 0, dw, c.r, c.x, c.w, s.B, s.C, s.H, s.W, s.O, s.K, s.S, s.P);
    float *vars[2] = {c.x, c.w}, *grads[2] = {dx, dw};
    size_t ns[2] = {n_in(&s), n_w(&s)};
    for (int v = 0; v < 2; v++)
      for (size_t i = 0; i < ns[v]; i++) {
        float keep = vars[v][i];
        vars[v][i] = keep + 0.5f;
        double up = conv_obj(&c);
        vars[v][i] = keep - 0.5f;
        double down = conv_obj(&c);
        vars[v][i] = keep;
        double fd = (up - down) / 1.0;
        if (fabs(fd - grads[v][i]) > 2e-5 + 1e-5 * fabs(grads[v][i]))
          g_error("path %d, %s[%zu]: finite difference %.7g, backward %.7g", path, v ? "dw" : "dx",
                  i, fd, grads[v][i]);
      }
  }
  cohort_cpu_conv_select(start);
  g_free(c.x), g_free(c.w), g_free(c.r);
}

/* bf16 mode: the fp32 convolution of the rounded operands, to the bit, on the current path. */
static void test_conv_gemm_mode(void)
{
  const Shape *s = &shapes[1];
  g_autofree float *x = randv(n_in(s)), *w = randv(n_w(s)), *y16 = g_new(float, n_out(s));
  g_autofree float *y32 = g_new(float, n_out(s));
  be->set_gemm_mode(COHORT_GEMM_BF16);
  be->conv2d_nhwc_forward(y16, x, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  for (size_t i = 0; i < n_in(s); i++)
    x[i] = cohort_round_bf16(x[i]);
  for (size_t i = 0; i < n_w(s); i++)
    w[i] = cohort_round_bf16(w[i]);
  be->conv2d_nhwc_forward(y32, x, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
  g_assert_cmpmem(y16, n_out(s) * 4, y32, n_out(s) * 4);
}

/* ---- max-pooling ---- */

/* The reference: PyTorch's rule in double-free loops (max needs no arithmetic). */
static void maxpool_ref(float *out, int *at, const float *x, int B, int C, int H, int W, int K,
                        int S, int P)
{
  int Ho = (H + 2 * P - K) / S + 1, Wo = (W + 2 * P - K) / S + 1;
  for (int b = 0; b < B; b++)
    for (int oh = 0; oh < Ho; oh++)
      for (int ow = 0; ow < Wo; ow++)
        for (int c = 0; c < C; c++) {
          float m = -INFINITY;
          int where = -1;
          for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
              int h = oh * S - P + kh, w = ow * S - P + kw;
              if (h < 0 || h >= H || w < 0 || w >= W)
                continue;
              float v = x[(((size_t)b * H + h) * W + w) * C + c];
              if (where < 0)
                where = h * W + w;
              if (v > m || isnan(v)) {
                m = v;
                where = h * W + w;
              }
            }
          size_t o = (((size_t)b * Ho + oh) * Wo + ow) * C + c;
          out[o] = m;
          at[o] = where;
        }
}

static void test_maxpool(void)
{
  enum { B = 2, C = 5, H = 9, W = 8, K = 3, S = 2, P = 1, Ho = 5, Wo = 4 };
  size_t nx = (size_t)B * H * W * C, ny = (size_t)B * Ho * Wo * C;
  g_autofree float *x = randv(nx), *y = g_new(float, ny), *yr = g_new(float, ny);
  g_autofree int *at = g_new(int, ny);
  /* ties (after ReLU, zeros everywhere) and NaNs, where the rules show */
  for (size_t i = 0; i < nx; i += 7)
    x[i] = 0.0f;
  for (size_t i = 3; i < nx; i += 11)
    x[i] = 0.0f;
  x[40] = NAN;
  x[41] = NAN;
  be->maxpool2d_nhwc_forward(y, x, B, C, H, W, K, S, P);
  maxpool_ref(yr, at, x, B, C, H, W, K, S, P);
  for (size_t i = 0; i < ny; i++)
    g_assert_true(y[i] == yr[i] || (isnan(y[i]) && isnan(yr[i])));
  /* backward: each output's gradient lands on its reference maximum */
  g_autofree float *dy = randv(ny), *dx = g_new0(float, nx);
  g_autofree double *want = g_new0(double, nx);
  for (size_t o = 0; o < ny; o++) {
    size_t b = o / ((size_t)Ho * Wo * C), c = o % C;
    want[(b * H * W + (size_t)at[o]) * C + c] += dy[o];
  }
  be->maxpool2d_nhwc_backward(dx, dy, x, B, C, H, W, K, S, P);
  for (size_t i = 0; i < nx; i++)
    g_assert_cmpfloat(fabs(dx[i] - want[i]), <=, 1e-6 * (1 + fabs(want[i])));
  /* accumulates */
  be->maxpool2d_nhwc_backward(dx, dy, x, B, C, H, W, K, S, P);
  for (size_t i = 0; i < nx; i++)
    g_assert_cmpfloat(fabs(dx[i] - 2 * want[i]), <=, 2e-6 * (1 + fabs(want[i])));

  /* finite differences on distinct values (no ties, no NaN): piecewise linear, exact */
  for (size_t i = 0; i < nx; i++)
    x[i] = (float)((i * 7919) % nx) / (float)nx;
  memset(dx, 0, nx * 4);
  be->maxpool2d_nhwc_backward(dx, dy, x, B, C, H, W, K, S, P);
  for (size_t i = 0; i < nx; i++) {
    float keep = x[i];
    double j[2];
    for (int sgn = 0; sgn < 2; sgn++) {
      x[i] = keep + (sgn ? -1e-4f : 1e-4f);
      be->maxpool2d_nhwc_forward(y, x, B, C, H, W, K, S, P);
      j[sgn] = 0;
      for (size_t o = 0; o < ny; o++)
        j[sgn] += (double)y[o] * dy[o];
    }
    x[i] = keep;
    double fd = (j[0] - j[1]) / (2e-4);
    g_assert_cmpfloat(fabs(fd - dx[i]), <=, 2e-3 * (1 + fabs(dx[i])));
  }
}

static void test_avgpool(void)
{
  enum { B = 3, C = 7, HW = 9 };
  g_autofree float *x = randv(B * HW * C), *xc = g_new(float, B *HW *C);
  g_autofree float *y = g_new(float, B *C), *yc = g_new(float, B *C);
  to_nchw(xc, x, B, C, HW);
  be->avgpool_global_nhwc_forward(y, x, B, C, HW);
  be->avgpool_global_forward(yc, xc, B, C, HW);
  close_to(y, yc, B * C, 1e-6, 1, "avgpool_global_nhwc_forward");
  g_autofree float *dy = randv(B * C), *dx = randv(B * HW * C), *dxc = g_new(float, B *HW *C);
  g_autofree float *back = g_new(float, B *HW *C);
  to_nchw(dxc, dx, B, C, HW);
  be->avgpool_global_nhwc_backward(dx, dy, B, C, HW); /* adds */
  be->avgpool_global_backward(dxc, dy, B, C, HW);
  to_nhwc(back, dxc, B, C, HW);
  close_to(dx, back, B * HW * C, 1e-6, 1, "avgpool_global_nhwc_backward");
}

/* BatchNorm on NHWC rows (HW = 1) against the NCHW op on the transposed tensor. */
static void test_batchnorm_rows(void)
{
  enum { B = 3, C = 19, HW = 301 }; /* rows not a multiple of the 256-row blocks */
  size_t n = (size_t)B * HW * C;
  g_autofree float *x = randv(n), *dy = randv(n), *xc = g_new(float, n), *dyc = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    x[i] = 3.0f + 2.0f * x[i]; /* a mean far from 0 */
  to_nchw(xc, x, B, C, HW);
  to_nchw(dyc, dy, B, C, HW);
  g_autofree float *w = randv(C), *bias = randv(C);
  float st[2][8 * C];
  g_autofree float *y = g_new(float, n), *yc = g_new(float, n), *back = g_new(float, n);
  g_autofree float *dx = g_new(float, n), *dxc = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    dx[i] = dxc[i] = NAN; /* bn_backward_dx writes them over */
  for (int k = 0; k < 2; k++) {
    float *s = st[k];
    const float *xx = k ? xc : x, *gg = k ? dyc : dy;
    int rows = k ? B : B * HW, hw = k ? HW : 1;
    be->bn_stats(xx, rows, C, hw, s, s + C);
    be->bn_rstd(s + 2 * C, s + C, 1.0 / (B * HW), 1e-5f, C);
    be->bn_forward(k ? yc : y, xx, s, s + 2 * C, w, bias, rows, C, hw);
    be->bn_backward_reduce(gg, xx, s, s + 2 * C, rows, C, hw, s + 3 * C, s + 4 * C);
    be->bn_backward_dx(k ? dxc : dx, 0, gg, xx, s, s + 2 * C, w, s + 3 * C, s + 4 * C, B * HW, rows,
                       C, hw);
  }
  close_to(st[0], st[1], 5 * C, 1e-5, 1e-3, "BatchNorm statistics and sums");
  to_nhwc(back, yc, B, C, HW);
  close_to(y, back, n, 1e-5, 1, "bn_forward");
  to_nhwc(back, dxc, B, C, HW);
  close_to(dx, back, n, 1e-4, 1e-3, "bn_backward_dx");
}

/* 1 and 2 threads: the NHWC BatchNorm bit for bit (fixed blocks), oneDNN within rounding. */
static void test_threads(void)
{
  const Shape *s = &shapes[1];
  g_autofree float *x = randv(n_in(s)), *w = randv(n_w(s)), *dy = randv(n_out(s));
  float *y[2], *dw[2], st[2][2 * 16];
  for (int t = 0; t < 2; t++) {
    be->set_threads(t + 1);
    y[t] = g_new(float, n_out(s));
    dw[t] = g_new0(float, n_w(s));
    be->conv2d_nhwc_forward(y[t], x, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S, s->P);
    be->conv2d_nhwc_backward(NULL, 0, dw[t], dy, x, w, s->B, s->C, s->H, s->W, s->O, s->K, s->S,
                             s->P);
    be->bn_stats(y[t], (int)(n_out(s) / 16), 16, 1, st[t], st[t] + 16);
  }
  be->set_threads(1);
  close_to(y[1], y[0], n_out(s), 1e-5, 1, "forward, 2 threads");
  close_to(dw[1], dw[0], n_w(s), 1e-5, 1, "dweight, 2 threads");
  g_assert_cmpmem(st[0], sizeof st[0], st[1], sizeof st[1]);
  for (int t = 0; t < 2; t++)
    g_free(y[t]), g_free(dw[t]);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/layers-nhwc/conv-onednn-against-im2col", test_conv_paths);
  g_test_add_func("/layers-nhwc/conv-finite-differences", test_conv_finite_differences);
  g_test_add_func("/layers-nhwc/conv-gemm-mode", test_conv_gemm_mode);
  g_test_add_func("/layers-nhwc/maxpool", test_maxpool);
  g_test_add_func("/layers-nhwc/avgpool", test_avgpool);
  g_test_add_func("/layers-nhwc/batchnorm-rows", test_batchnorm_rows);
  g_test_add_func("/layers-nhwc/threads", test_threads);
  return g_test_run();
}
