/* The CPU kernels of convolutional networks: conv2d, BatchNorm2d (train and eval), ReLU,
 * global average pooling, top-1 accuracy and SGD.
 *
 * Gradients against central finite differences of J = sum(out * R) for a fixed random R,
 * through the float ops with J summed in double:
 *  - conv2d and average pooling are linear in each argument, so the differences have no
 *    truncation error: with step h = 0.5 only float rounding is left, |dJ| ~ 1e-6 on the few
 *    outputs an element touches, i.e. ~1e-6 in the quotient; tolerance 2e-5 + 1e-5 |grad|.
 *  - BatchNorm and ReLU are not: h = 1e-2 as tests/test-layers.c (truncation O(h^2) ~ 1e-4),
 *    tolerance 2e-4 + 2e-3 |grad|; ReLU inputs keep |x| >= 0.05 so no step crosses the kink.
 * Forwards against loops in double written here (1e-5 relative). Then the statistics that
 * SyncBatchNorm combines across ranks, SGD against sequences worked out by hand, and every op
 * against float64 PyTorch (tests/torch_conv_ref.py) where /usr/bin/python3 has torch. */
#include "torch-ref.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm-paths.h"
#include "kernels/math-inline.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const CohortBackend *be;
static guint32 rng_state = 12345;

static float frand(void)
{
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((rng_state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *randv(size_t n, float scale, float offset)
{
  float *v = g_new(float, n ? n : 1);
  for (size_t i = 0; i < n; i++)
    v[i] = frand() * scale + offset;
  return v;
}

static double dotd(const float *a, const float *r, size_t n)
{
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * r[i];
  return s;
}

static void assert_close_vec(const float *got, const double *want, size_t n, double rtol,
                             const char *what)
{
  for (size_t i = 0; i < n; i++)
    if (fabs(got[i] - want[i]) > rtol * fmax(1.0, fabs(want[i])))
      g_error("%s: element %zu is %.8g, reference %.8g", what, i, got[i], want[i]);
}

typedef double (*Objective)(gpointer ctx);

/* Analytic dJ/dx (grad) against central differences with step h over every element of x. */
static void check_grad(float *x, const float *grad, size_t n, Objective f, gpointer ctx, float h,
                       double atol, double rtol, const char *what)
{
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    float keep = x[i];
    x[i] = keep + h;
    double jp = f(ctx);
    x[i] = keep - h;
    double jm = f(ctx);
    x[i] = keep;
    double fd = (jp - jm) / (2.0 * (double)h);
    double err = fabs(fd - grad[i]);
    if (err > atol + rtol * fabs(grad[i]))
      g_error("%s: d/dx[%zu] analytic %.8g, finite difference %.8g", what, i, grad[i], fd);
    worst = fmax(worst, err);
  }
  g_test_message("%s: %zu gradients, largest |fd - analytic| %.2e", what, n, worst);
}

/* ---- conv2d ---- */
typedef struct {
  int B, C, H, W, O, K, S, P, Ho, Wo;
  float *x, *w, *y, *r;
} Conv;

static Conv conv_make(int B, int C, int H, int W, int O, int K, int S, int P)
{
  return (Conv){.B = B,
                .C = C,
                .H = H,
                .W = W,
                .O = O,
                .K = K,
                .S = S,
                .P = P,
                .Ho = (H + 2 * P - K) / S + 1,
                .Wo = (W + 2 * P - K) / S + 1};
}

static size_t conv_nx(const Conv *c)
{
  return (size_t)c->B * c->C * c->H * c->W;
}

static size_t conv_nw(const Conv *c)
{
  return (size_t)c->O * c->C * c->K * c->K;
}

static size_t conv_ny(const Conv *c)
{
  return (size_t)c->B * c->O * c->Ho * c->Wo;
}

static double conv_obj(gpointer p)
{
  Conv *c = p;
  be->conv2d_forward(c->y, c->x, c->w, c->B, c->C, c->H, c->W, c->O, c->K, c->S, c->P);
  return dotd(c->y, c->r, conv_ny(c));
}

static double *conv_reference(const Conv *c)
{
  double *ref = g_new0(double, conv_ny(c));
  for (int b = 0; b < c->B; b++)
    for (int o = 0; o < c->O; o++)
      for (int oh = 0; oh < c->Ho; oh++)
        for (int ow = 0; ow < c->Wo; ow++) {
          double s = 0.0;
          for (int i = 0; i < c->C; i++)
            for (int kh = 0; kh < c->K; kh++)
              for (int kw = 0; kw < c->K; kw++) {
                int ih = oh * c->S - c->P + kh, iw = ow * c->S - c->P + kw;
                if (ih >= 0 && ih < c->H && iw >= 0 && iw < c->W)
                  s += (double)c->x[((b * c->C + i) * c->H + ih) * c->W + iw] *
                       c->w[((o * c->C + i) * c->K + kh) * c->K + kw];
              }
          ref[((b * c->O + o) * c->Ho + oh) * c->Wo + ow] = s;
        }
  return ref;
}

static void conv_case(int B, int C, int H, int W, int O, int K, int S, int P)
{
  Conv c = conv_make(B, C, H, W, O, K, S, P);
  g_autofree char *shape =
      g_strdup_printf("conv B%d C%d %dx%d O%d K%d S%d P%d", B, C, H, W, O, K, S, P);
  c.x = randv(conv_nx(&c), 1.0f, 0.0f);
  c.w = randv(conv_nw(&c), 1.0f, 0.0f);
  c.r = randv(conv_ny(&c), 1.0f, 0.0f);
  c.y = randv(conv_ny(&c), 100.0f, 0.0f); /* garbage: the forward overwrites */
  conv_obj(&c);
  g_autofree double *ref = conv_reference(&c);
  g_autofree char *fwd = g_strdup_printf("%s forward", shape);
  assert_close_vec(c.y, ref, conv_ny(&c), 1e-5, fwd);

  float *dx = g_new0(float, conv_nx(&c)), *dw = g_new0(float, conv_nw(&c));
  be->conv2d_backward(dx, dw, c.r, c.x, c.w, B, C, H, W, O, K, S, P);
  g_autofree char *wx = g_strdup_printf("%s dinp", shape);
  g_autofree char *ww = g_strdup_printf("%s dweight", shape);
  check_grad(c.x, dx, conv_nx(&c), conv_obj, &c, 0.5f, 2e-5, 1e-5, wx);
  check_grad(c.w, dw, conv_nw(&c), conv_obj, &c, 0.5f, 2e-5, 1e-5, ww);

  /* both accumulate; without dinp (the first layer) dweight is the same */
  float *dx2 = g_memdup2(dx, conv_nx(&c) * 4), *dw2 = g_memdup2(dw, conv_nw(&c) * 4);
  be->conv2d_backward(dx2, dw2, c.r, c.x, c.w, B, C, H, W, O, K, S, P);
  for (size_t i = 0; i < conv_nx(&c); i++)
    g_assert_cmpfloat(fabsf(dx2[i] - 2.0f * dx[i]), <=, 1e-6f * (1.0f + fabsf(dx[i])));
  for (size_t i = 0; i < conv_nw(&c); i++)
    g_assert_cmpfloat(fabsf(dw2[i] - 2.0f * dw[i]), <=, 1e-6f * (1.0f + fabsf(dw[i])));
  memset(dw2, 0, conv_nw(&c) * 4);
  be->conv2d_backward(NULL, dw2, c.r, c.x, c.w, B, C, H, W, O, K, S, P);
  g_assert_cmpmem(dw2, conv_nw(&c) * 4, dw, conv_nw(&c) * 4);
  g_free(c.x), g_free(c.w), g_free(c.r), g_free(c.y), g_free(dx), g_free(dw), g_free(dx2);
  g_free(dw2);
}

static void test_conv(void)
{
  conv_case(2, 3, 5, 6, 4, 3, 1, 1); /* ResNet's 3x3 same conv, odd and unequal sides */
  conv_case(2, 2, 7, 5, 3, 3, 2, 1); /* the downsampling 3x3 stride 2, odd sizes */
  conv_case(1, 3, 6, 6, 2, 3, 2, 1); /* stride 2 on an even size */
  conv_case(1, 2, 6, 5, 3, 3, 2, 0); /* stride 2 without padding */
  conv_case(2, 2, 4, 5, 2, 3, 1, 0); /* valid 3x3 */
  conv_case(1, 3, 6, 6, 2, 1, 1, 0); /* 1x1 */
  conv_case(2, 2, 5, 7, 3, 1, 2, 0); /* 1x1 stride 2: the option-B shortcut */
  conv_case(1, 2, 2, 3, 2, 5, 1, 2); /* a kernel wider than the input */
  conv_case(1, 1, 3, 3, 1, 3, 3, 1); /* stride equal to the kernel */
}

/* The GEMM mode reaches the convolution's products: in bf16 mode the result equals the fp32
 * convolution of bf16-rounded input and weight, to the bit where bf16 is emulated (im2col only
 * copies, and the CPU multiplies the rounded operands in fp32), and within fp32 summation's
 * bound on the bf16 hardware path (kernels/cpu/gemm-paths.h), where the build and CPU have it. */
static void conv_gemm_mode_on(int hardware);

static void test_conv_gemm_mode(void)
{
  CohortCpuGemmPath lib = cohort_cpu_gemm_fp32_path();
  int start_hw = cohort_cpu_gemm_bf16_hardware();
  for (int hw = 0; hw <= 1; hw++) {
    if (!cohort_cpu_gemm_select(lib, hw)) {
      g_test_message("bf16 hardware path not available here: only the emulation is checked");
      continue;
    }
    conv_gemm_mode_on(hw);
  }
  g_assert_true(cohort_cpu_gemm_select(lib, start_hw));
}

static void conv_gemm_mode_on(int hardware)
{
  Conv c = conv_make(2, 3, 6, 5, 4, 3, 1, 1);
  float *x = randv(conv_nx(&c), 1.0f, 0.0f), *w = randv(conv_nw(&c), 1.0f, 0.0f);
  float *y16 = g_new(float, conv_ny(&c)), *y32 = g_new(float, conv_ny(&c));
  be->set_gemm_mode(COHORT_GEMM_BF16);
  be->conv2d_forward(y16, x, w, c.B, c.C, c.H, c.W, c.O, c.K, c.S, c.P);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  /* The plain fp32 result, to show bf16 mode changed something. */
  float *y_plain = g_new(float, conv_ny(&c));
  be->conv2d_forward(y_plain, x, w, c.B, c.C, c.H, c.W, c.O, c.K, c.S, c.P);
  for (size_t i = 0; i < conv_nx(&c); i++)
    x[i] = cohort_round_bf16(x[i]);
  for (size_t i = 0; i < conv_nw(&c); i++)
    w[i] = cohort_round_bf16(w[i]);
  be->conv2d_forward(y32, x, w, c.B, c.C, c.H, c.W, c.O, c.K, c.S, c.P);
  if (!hardware) {
    g_assert_cmpmem(y16, conv_ny(&c) * 4, y32, conv_ny(&c) * 4);
  } else {
    /* K = C·k·k terms of magnitude <= 1 each: fp32 sums in any order stay within K·2^-23·K. */
    int K = c.C * c.K * c.K;
    double bound = (double)K * K * 0x1p-23;
    for (size_t i = 0; i < conv_ny(&c); i++)
      g_assert_cmpfloat(fabs((double)y16[i] - y32[i]), <=, bound);
  }
  double changed = 0;
  for (size_t i = 0; i < conv_ny(&c); i++)
    changed = fmax(changed, fabs((double)y16[i] - y_plain[i]));
  g_assert_cmpfloat(changed, >, 0);
  g_free(x), g_free(w), g_free(y16), g_free(y32), g_free(y_plain);
}

/* ---- BatchNorm2d, train mode composed from the split ops ---- */
#define BN_EPS 1e-5f

typedef struct {
  int B, C, HW;
  float *x, *w, *b, *y, *r, *mean, *m2, *rstd;
} Bn;

static double bn_obj(gpointer p)
{
  Bn *c = p;
  be->bn_stats(c->x, c->B, c->C, c->HW, c->mean, c->m2);
  be->bn_rstd(c->rstd, c->m2, 1.0 / ((double)c->B * c->HW), BN_EPS, c->C);
  be->bn_forward(c->y, c->x, c->mean, c->rstd, c->w, c->b, c->B, c->C, c->HW);
  return dotd(c->y, c->r, (size_t)c->B * c->C * c->HW);
}

static void test_batchnorm_train(void)
{
  Bn c = {.B = 3, .C = 4, .HW = 13}; /* 13: the 8-lane loop and its tail */
  size_t n = (size_t)c.B * c.C * c.HW;
  double cnt = (double)c.B * c.HW;
  c.x = randv(n, 2.0f, 0.5f);
  c.w = randv(c.C, 1.0f, 0.0f);
  c.b = randv(c.C, 1.0f, 0.0f);
  c.r = randv(n, 1.0f, 0.0f);
  c.y = g_new(float, n);
  c.mean = g_new(float, c.C), c.m2 = g_new(float, c.C), c.rstd = g_new(float, c.C);
  bn_obj(&c);
  g_autofree double *ref = g_new(double, n);
  for (int ch = 0; ch < c.C; ch++) {
    double m = 0, q = 0;
    for (int b = 0; b < c.B; b++)
      for (int i = 0; i < c.HW; i++)
        m += c.x[(b * c.C + ch) * c.HW + i];
    m /= cnt;
    for (int b = 0; b < c.B; b++)
      for (int i = 0; i < c.HW; i++)
        q += pow(c.x[(b * c.C + ch) * c.HW + i] - m, 2);
    g_assert_cmpfloat(fabs(c.mean[ch] - m), <=, 1e-6 * fmax(1.0, fabs(m)));
    g_assert_cmpfloat(fabs(c.m2[ch] - q), <=, 1e-6 * q);
    double rs = 1.0 / sqrt(q / cnt + BN_EPS);
    g_assert_cmpfloat(fabs(c.rstd[ch] - rs), <=, 1e-6 * rs);
    for (int b = 0; b < c.B; b++)
      for (int i = 0; i < c.HW; i++) {
        int k = (b * c.C + ch) * c.HW + i;
        ref[k] = (c.x[k] - m) * rs * c.w[ch] + c.b[ch];
      }
  }
  assert_close_vec(c.y, ref, n, 1e-5, "batchnorm train forward");

  /* backward as a SyncBatchNorm of one rank: reduce, dx with the global count, params */
  float *s1 = g_new(float, c.C), *s2 = g_new(float, c.C);
  float *dx = g_new(float, n), *dw = g_new0(float, c.C), *db = g_new0(float, c.C);
  for (size_t i = 0; i < n; i++)
    dx[i] = NAN; /* written over: what dx held must not show */
  be->bn_backward_reduce(c.r, c.x, c.mean, c.rstd, c.B, c.C, c.HW, s1, s2);
  be->bn_backward_dx(dx, 0, c.r, c.x, c.mean, c.rstd, c.w, s1, s2, cnt, c.B, c.C, c.HW);
  be->bn_backward_params(dw, db, s1, s2, c.C);
  check_grad(c.x, dx, n, bn_obj, &c, 1e-2f, 2e-4, 2e-3, "batchnorm dx");
  check_grad(c.w, dw, c.C, bn_obj, &c, 1e-2f, 2e-4, 2e-3, "batchnorm dweight");
  check_grad(c.b, db, c.C, bn_obj, &c, 1e-2f, 2e-4, 2e-3, "batchnorm dbias");
  /* dx and the parameter gradients accumulate */
  float *dx2 = g_memdup2(dx, n * 4);
  bn_obj(&c);
  be->bn_backward_dx(dx2, 1, c.r, c.x, c.mean, c.rstd, c.w, s1, s2, cnt, c.B, c.C, c.HW);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(fabsf(dx2[i] - 2.0f * dx[i]), <=, 1e-6f * (1.0f + fabsf(dx[i])));
  be->bn_backward_params(dw, db, s1, s2, c.C);
  for (int ch = 0; ch < c.C; ch++) {
    g_assert_cmpfloat(dw[ch], ==, 2.0f * s2[ch]);
    g_assert_cmpfloat(db[ch], ==, 2.0f * s1[ch]);
  }

  /* running statistics, PyTorch's: momentum 0.1, unbiased variance */
  float rm[4] = {0.1f, -0.2f, 0.3f, 0.0f}, rv[4] = {1.0f, 0.5f, 2.0f, 1.5f};
  float rm0[4], rv0[4];
  memcpy(rm0, rm, sizeof rm), memcpy(rv0, rv, sizeof rv);
  be->bn_running_update(rm, rv, c.mean, c.m2, cnt, 0.1f, c.C);
  for (int ch = 0; ch < c.C; ch++) {
    g_assert_cmpfloat(fabs(rm[ch] - (0.9 * rm0[ch] + 0.1 * c.mean[ch])), <=, 1e-7);
    g_assert_cmpfloat(fabs(rv[ch] - (0.9 * rv0[ch] + 0.1 * c.m2[ch] / (cnt - 1))), <=, 1e-6);
  }
  g_free(c.x), g_free(c.w), g_free(c.b), g_free(c.r), g_free(c.y), g_free(c.mean);
  g_free(c.m2), g_free(c.rstd), g_free(s1), g_free(s2), g_free(dx), g_free(dw), g_free(db);
  g_free(dx2);
}

/* Eval mode: the running statistics normalise, rstd = 1 / sqrt(running_var + eps). */
static void test_batchnorm_eval(void)
{
  enum { B = 2, C = 3, HW = 7 };
  float *x = randv(B * C * HW, 2.0f, 0.3f), *w = randv(C, 1.0f, 0.0f), *b = randv(C, 1.0f, 0.0f);
  float rm[C] = {0.2f, -0.4f, 1.0f}, rv[C] = {0.5f, 2.0f, 1e-3f}, rstd[C];
  float *y = g_new(float, B *C *HW);
  be->bn_rstd(rstd, rv, 1.0, BN_EPS, C);
  be->bn_forward(y, x, rm, rstd, w, b, B, C, HW);
  double ref[B * C * HW];
  for (int i = 0; i < B * C * HW; i++) {
    int ch = i / HW % C;
    ref[i] = (x[i] - rm[ch]) / sqrt(rv[ch] + (double)BN_EPS) * w[ch] + b[ch];
  }
  assert_close_vec(y, ref, B * C * HW, 1e-5, "batchnorm eval forward");
  /* in place: y may be x */
  be->bn_forward(x, x, rm, rstd, w, b, B, C, HW);
  g_assert_cmpmem(x, sizeof(float) * B * C * HW, y, sizeof(float) * B * C * HW);
  g_free(x), g_free(w), g_free(b), g_free(y);
}

/* What SyncBatchNorm relies on: per-part (count, mean, M2) from bn_stats, combined with
 * Chan's formula, give the whole batch's statistics, and the backward's sums over the parts
 * add up to the whole batch's. Checked for a split into 2 and into 3 parts of unequal sizes,
 * combined both here in double and by bn_combine_stats. */
static void split_case(const int *parts, int n_parts)
{
  enum { B = 6, C = 3, HW = 7 };
  size_t n = (size_t)B * C * HW;
  float *x = randv(n, 2.0f, 5.0f), *dy = randv(n, 1.0f, 0.2f);
  float mean[C], m2[C], rstd[C], s1[C], s2[C];
  be->bn_stats(x, B, C, HW, mean, m2);
  be->bn_rstd(rstd, m2, 1.0 / (B * HW), BN_EPS, C);
  be->bn_backward_reduce(dy, x, mean, rstd, B, C, HW, s1, s2);

  float packed[3 * (2 * C + 1)];
  double cn[C] = {0}, cm[C] = {0}, cq[C] = {0}, t1[C] = {0}, t2[C] = {0}, a1[C] = {0}, a2[C] = {0};
  int b0 = 0;
  for (int k = 0; k < n_parts; k++) {
    int nb = parts[k];
    const float *xs = x + (size_t)b0 * C * HW, *dys = dy + (size_t)b0 * C * HW;
    float *row = packed + k * (2 * C + 1), ps1[C], ps2[C];
    be->bn_stats(xs, nb, C, HW, row, row + C);
    row[2 * C] = (float)(nb * HW);
    be->bn_backward_reduce(dys, xs, mean, rstd, nb, C, HW, ps1, ps2);
    for (int c = 0; c < C; c++) {
      double na = cn[c], nr = (double)nb * HW, delta = row[c] - cm[c];
      cm[c] += delta * nr / (na + nr);
      cq[c] += row[C + c] + delta * delta * na * nr / (na + nr);
      cn[c] = na + nr;
      t1[c] += ps1[c], t2[c] += ps2[c];
      a1[c] += fabs(ps1[c]), a2[c] += fabs(ps2[c]);
    }
    b0 += nb;
  }
  g_assert_cmpint(b0, ==, B);
  float om[C], oq[C];
  be->bn_combine_stats(om, oq, packed, n_parts, C);
  for (int c = 0; c < C; c++) {
    g_assert_cmpfloat(cn[c], ==, (double)B * HW);
    g_assert_cmpfloat(fabs(cm[c] - mean[c]), <=, 1e-6 * fabs(mean[c]));
    g_assert_cmpfloat(fabs(cq[c] - m2[c]), <=, 1e-6 * m2[c]);
    g_assert_cmpfloat(fabs(om[c] - mean[c]), <=, 1e-6 * fabs(mean[c]));
    g_assert_cmpfloat(fabs(oq[c] - m2[c]), <=, 1e-6 * m2[c]);
    /* sums of terms of both signs: relative to the sum of the parts' magnitudes */
    g_assert_cmpfloat(fabs(t1[c] - s1[c]), <=, 1e-6 * a1[c]);
    g_assert_cmpfloat(fabs(t2[c] - s2[c]), <=, 1e-6 * a2[c]);
  }
  g_free(x), g_free(dy);
}

static void test_batchnorm_split(void)
{
  const int two[] = {2, 4}, three[] = {1, 2, 3};
  split_case(two, 2);
  split_case(three, 3);
  /* a rank with no values is skipped by the combination */
  float packed[2 * 3] = {5.0f, 7.0f, 3.0f, 123.0f, 456.0f, 0.0f}, m, q;
  be->bn_combine_stats(&m, &q, packed, 2, 1);
  g_assert_cmpfloat(m, ==, 5.0f);
  g_assert_cmpfloat(q, ==, 7.0f);
}

/* ---- ReLU ---- */
typedef struct {
  size_t n;
  float *x, *y, *r;
} Relu;

static double relu_obj(gpointer p)
{
  Relu *c = p;
  be->relu_forward(c->y, c->x, c->n);
  return dotd(c->y, c->r, c->n);
}

static void test_relu(void)
{
  Relu c = {.n = 5003}; /* past one chunk, and a tail */
  c.x = randv(c.n, 1.0f, 0.0f);
  for (size_t i = 0; i < c.n; i++)
    c.x[i] = c.x[i] < 0 ? c.x[i] - 0.05f : c.x[i] + 0.05f;
  c.r = randv(c.n, 1.0f, 0.0f);
  c.y = g_new(float, c.n);
  relu_obj(&c);
  for (size_t i = 0; i < c.n; i++)
    g_assert_cmpfloat(c.y[i], ==, c.x[i] > 0 ? c.x[i] : 0.0f);
  float *dx = g_new(float, c.n), *dx_out = g_new(float, c.n);
  be->relu_backward(dx, c.x, c.r, c.n);
  be->relu_backward(dx_out, c.y, c.r, c.n); /* from the output: the same */
  g_assert_cmpmem(dx, c.n * 4, dx_out, c.n * 4);
  check_grad(c.x, dx, 300, relu_obj, &c, 1e-2f, 2e-4, 2e-3, "relu dx");
  float *inplace = g_memdup2(c.r, c.n * 4);
  be->relu_backward(inplace, c.x, inplace, c.n);
  g_assert_cmpmem(inplace, c.n * 4, dx, c.n * 4);
  float special[3] = {NAN, -0.0f, -INFINITY}, out[3];
  be->relu_forward(out, special, 3);
  g_assert_true(isnan(out[0]));
  g_assert_cmpfloat(out[1], ==, 0.0f);
  g_assert_cmpfloat(out[2], ==, 0.0f);
  g_free(c.x), g_free(c.r), g_free(c.y), g_free(dx), g_free(dx_out), g_free(inplace);
}

/* ---- global average pooling ---- */
typedef struct {
  int B, C, HW;
  float *x, *y, *r;
} Pool;

static double pool_obj(gpointer p)
{
  Pool *c = p;
  be->avgpool_global_forward(c->y, c->x, c->B, c->C, c->HW);
  return dotd(c->y, c->r, (size_t)c->B * c->C);
}

static void test_avgpool(void)
{
  Pool c = {.B = 3, .C = 4, .HW = 37};
  size_t n = (size_t)c.B * c.C * c.HW;
  c.x = randv(n, 1.0f, 0.5f);
  c.r = randv(c.B * c.C, 1.0f, 0.0f);
  c.y = g_new(float, c.B *c.C);
  pool_obj(&c);
  double ref[3 * 4];
  for (int i = 0; i < c.B * c.C; i++) {
    ref[i] = 0;
    for (int k = 0; k < c.HW; k++)
      ref[i] += c.x[i * c.HW + k] / (double)c.HW;
  }
  assert_close_vec(c.y, ref, c.B * c.C, 1e-6, "avgpool forward");
  float *dx = g_new0(float, n);
  be->avgpool_global_backward(dx, c.r, c.B, c.C, c.HW);
  check_grad(c.x, dx, n, pool_obj, &c, 0.5f, 2e-5, 1e-5, "avgpool dx");
  be->avgpool_global_backward(dx, c.r, c.B, c.C, c.HW); /* accumulates */
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(fabsf(dx[i] - 2.0f * c.r[i / c.HW] / c.HW), <=, 1e-7f);
  g_free(c.x), g_free(c.r), g_free(c.y), g_free(dx);
}

/* ---- top-1 accuracy ---- */
static void test_accuracy(void)
{
  enum { N = 6, V = 4 };
  const float logits[N * V] = {
      0.1f,  0.9f,  0.3f,  0.2f,  /* argmax 1 */
      2.0f,  2.0f,  1.0f,  0.0f,  /* a tie: the first maximum, 0 */
      -1.0f, -3.0f, -0.5f, -0.5f, /* tie at the end: 2 */
      NAN,   1.0f,  2.0f,  3.0f,  /* NaN counts as the maximum (torch.argmax): 0 */
      0.0f,  0.0f,  0.0f,  1.0f,  /* 3 */
      5.0f,  1.0f,  1.0f,  1.0f,  /* 0 */
  };
  const int labels[N] = {1, 1, 2, 0, 2, 0}; /* right, wrong, right, right, wrong, right */
  g_assert_cmpint(be->accuracy_count(logits, labels, N, V), ==, 4);
  g_assert_cmpint(be->accuracy_count(logits, labels, 0, V), ==, 0);
  const int none[N] = {3, 3, 3, 3, 2, 1};
  g_assert_cmpint(be->accuracy_count(logits, none, N, V), ==, 0);
}

/* ---- SGD: three steps on one parameter, worked out by hand (p0 = 1, grads 0.5, -0.25, 1,
 * lr 0.1), for each variant; the same on a long vector to cover the chunked loop ---- */
typedef struct {
  float momentum, dampening, wd;
  int nesterov;
  double want[3];
} SgdCase;

static const SgdCase sgd_cases[] = {
    /* step 1: d = 0.5 + 0.1 = 0.6, buf = 0.6, p = 0.94; step 2: d = -0.25 + 0.094 = -0.156,
     * buf = 0.54 - 0.156 = 0.384, p = 0.9016; step 3: d = 1.09016, buf = 1.43576 */
    {0.9f, 0.0f, 0.1f, 0, {0.94, 0.9016, 0.758024}},
    /* nesterov: step 1 d = 0.6 + 0.9 * 0.6 = 1.14; step 2 buf = 0.3786, d = -0.1614 + 0.34074;
     * step 3 buf = 1.4275466, d = 1.0868066 + 1.28479194 */
    {0.9f, 0.0f, 0.1f, 1, {0.886, 0.868066, 0.630906146}},
    /* dampening 0.5 (not applied on the first step): buf 0.5, 0.325, 0.7925 */
    {0.9f, 0.5f, 0.0f, 0, {0.95, 0.9175, 0.83825}},
    /* no momentum: plain steps on g + 0.1 p */
    {0.0f, 0.0f, 0.1f, 0, {0.94, 0.9556, 0.846044}},
};

static void test_sgd(void)
{
  const float grads[3] = {0.5f, -0.25f, 1.0f};
  enum { N = 20000 };
  float *p = g_new(float, N), *g = g_new(float, N), *buf = g_new(float, N);
  for (size_t k = 0; k < G_N_ELEMENTS(sgd_cases); k++) {
    const SgdCase *s = &sgd_cases[k];
    for (int i = 0; i < N; i++)
      p[i] = 1.0f, buf[i] = 12345.0f; /* garbage: the first step overwrites the buffer */
    for (int step = 0; step < 3; step++) {
      for (int i = 0; i < N; i++)
        g[i] = grads[step];
      be->sgd_update(p, g, s->momentum != 0.0f ? buf : NULL, N, 0.1f, s->momentum, s->dampening,
                     s->wd, s->nesterov, step == 0);
      for (int i = 0; i < N; i += 997)
        if (fabs(p[i] - s->want[step]) > 1e-6)
          g_error("sgd case %zu step %d element %d: %.9g, by hand %.9g", k, step + 1, i, p[i],
                  s->want[step]);
    }
    g_assert_cmpmem(p, sizeof(float) * N / 2, p + N / 2, sizeof(float) * N / 2);
  }
  g_free(p), g_free(g), g_free(buf);
}

/* The loops split over threads only above a size the cases above stay under: a ResNet-sized
 * layer on 1 and on 2 threads. Our loops give each output element to one thread with its terms
 * in a fixed order: BatchNorm is bit-identical, the convolution up to OpenBLAS's products. */
static void test_threads(void)
{
  enum { B = 3, C = 16, H = 32, K = 3, HW = H * H, NS = 5 * C + B * C * HW };
  size_t nx = (size_t)B * C * HW, nw = (size_t)C * C * K * K;
  float *x = randv(nx, 1.0f, 0.5f), *w = randv(nw, 1.0f, 0.0f), *dy = randv(nx, 1.0f, 0.0f);
  float *out[2], *dx[2], *dw[2], *st[2]; /* st: mean, m2, rstd, sum_dy, sum_dy_xhat, dx */
  for (int t = 0; t < 2; t++) {
    be->set_threads(t + 1);
    out[t] = g_new(float, nx), dx[t] = g_new0(float, nx), dw[t] = g_new0(float, nw);
    float *s = st[t] = g_new0(float, NS);
    be->conv2d_forward(out[t], x, w, B, C, H, H, C, K, 1, 1);
    be->conv2d_backward(dx[t], dw[t], dy, x, w, B, C, H, H, C, K, 1, 1);
    be->bn_stats(x, B, C, HW, s, s + C);
    be->bn_rstd(s + 2 * C, s + C, 1.0 / (B * HW), BN_EPS, C);
    be->bn_backward_reduce(dy, x, s, s + 2 * C, B, C, HW, s + 3 * C, s + 4 * C);
    be->bn_backward_dx(s + 5 * C, 1, dy, x, s, s + 2 * C, w, s + 3 * C, s + 4 * C, B * HW, B, C,
                       HW);
  }
  be->set_threads(1);
  for (size_t i = 0; i < nx; i++) {
    g_assert_cmpfloat(fabsf(out[1][i] - out[0][i]), <=, 1e-5f * (1.0f + fabsf(out[0][i])));
    g_assert_cmpfloat(fabsf(dx[1][i] - dx[0][i]), <=, 1e-5f * (1.0f + fabsf(dx[0][i])));
  }
  for (size_t i = 0; i < nw; i++)
    g_assert_cmpfloat(fabsf(dw[1][i] - dw[0][i]), <=, 1e-5f * (1.0f + fabsf(dw[0][i])));
  g_assert_cmpmem(st[0], NS * 4, st[1], NS * 4);
  for (int t = 0; t < 2; t++)
    g_free(out[t]), g_free(dx[t]), g_free(dw[t]), g_free(st[t]);
  g_free(x), g_free(w), g_free(dy);
}

/* ---- against float64 PyTorch ---- */

/* One output of ours, matched in order with a line of the reference's output. */
typedef struct {
  char *what;
  float *values;
  size_t n;
} Expect;

typedef struct {
  GByteArray *file;
  GPtrArray *expect;
} RefRun;

static void ref_case(RefRun *run, const char *name, const int *ints, int n_ints,
                     const float *const *arrays, const size_t *lens, int n_arrays)
{
  gint32 len = (gint32)strlen(name);
  g_byte_array_append(run->file, (guint8 *)&len, 4);
  g_byte_array_append(run->file, (const guint8 *)name, len);
  g_byte_array_append(run->file, (guint8 *)&n_ints, 4);
  g_byte_array_append(run->file, (const guint8 *)ints, 4 * n_ints);
  g_byte_array_append(run->file, (guint8 *)&n_arrays, 4);
  for (int i = 0; i < n_arrays; i++) {
    gint64 m = (gint64)lens[i];
    g_byte_array_append(run->file, (guint8 *)&m, 8);
    g_byte_array_append(run->file, (const guint8 *)arrays[i], 4 * lens[i]);
  }
}

/* Takes ownership of `values`. */
static void ref_expect(RefRun *run, const char *what, float *values, size_t n)
{
  Expect *e = g_new(Expect, 1);
  *e = (Expect){g_strdup(what), values, n};
  g_ptr_array_add(run->expect, e);
}

static void expect_free(gpointer p)
{
  Expect *e = p;
  g_free(e->what), g_free(e->values), g_free(e);
}

static void torch_conv(RefRun *run, int B, int C, int H, int W, int O, int K, int S, int P)
{
  Conv c = conv_make(B, C, H, W, O, K, S, P);
  float *x = randv(conv_nx(&c), 1.0f, 0.0f), *w = randv(conv_nw(&c), 0.5f, 0.0f);
  float *dy = randv(conv_ny(&c), 1.0f, 0.0f), *y = g_new(float, conv_ny(&c));
  float *dx = g_new0(float, conv_nx(&c)), *dw = g_new0(float, conv_nw(&c));
  be->conv2d_forward(y, x, w, B, C, H, W, O, K, S, P);
  be->conv2d_backward(dx, dw, dy, x, w, B, C, H, W, O, K, S, P);
  int ints[] = {B, C, H, W, O, K, S, P};
  const float *arrays[] = {x, w, dy};
  size_t lens[] = {conv_nx(&c), conv_nw(&c), conv_ny(&c)};
  ref_case(run, "conv2d", ints, 8, arrays, lens, 3);
  g_autofree char *shape =
      g_strdup_printf("conv B%d C%d %dx%d O%d K%d S%d P%d", B, C, H, W, O, K, S, P);
  g_autofree char *w1 = g_strdup_printf("%s out", shape);
  g_autofree char *w2 = g_strdup_printf("%s dinp", shape);
  g_autofree char *w3 = g_strdup_printf("%s dweight", shape);
  ref_expect(run, w1, y, conv_ny(&c));
  ref_expect(run, w2, dx, conv_nx(&c));
  ref_expect(run, w3, dw, conv_nw(&c));
  g_free(x), g_free(w), g_free(dy);
}

static void torch_batchnorm(RefRun *run)
{
  enum { B = 4, C = 3, H = 5, W = 3, HW = H * W, N = B * C * HW };
  float *x = randv(N, 3.0f, 1.5f), *w = randv(C, 1.0f, 0.5f), *b = randv(C, 1.0f, 0.0f);
  float *dy = randv(N, 1.0f, 0.0f), rm[C] = {0.5f, -1.0f, 0.0f}, rv[C] = {2.0f, 0.5f, 1.0f};
  float hyper[2] = {0.1f, BN_EPS}, mean[C], m2[C], rstd[C], s1[C], s2[C];
  int ints[] = {B, C, H, W};
  const float *arrays[] = {x, w, b, rm, rv, dy, hyper};
  size_t lens[] = {N, C, C, C, C, N, 2};
  ref_case(run, "bn_train", ints, 4, arrays, lens, 7);
  const float *eval_arrays[] = {x, w, b, rm, rv, hyper + 1};
  size_t eval_lens[] = {N, C, C, C, C, 1};
  ref_case(run, "bn_eval", ints, 4, eval_arrays, eval_lens, 6);

  /* eval first: it uses the running statistics before the train step updates them */
  float *ye = g_new(float, N), *y = g_new(float, N), *dx = g_new0(float, N);
  float *dw = g_new0(float, C), *db = g_new0(float, C);
  be->bn_rstd(rstd, rv, 1.0, BN_EPS, C);
  be->bn_forward(ye, x, rm, rstd, w, b, B, C, HW);
  be->bn_stats(x, B, C, HW, mean, m2);
  be->bn_rstd(rstd, m2, 1.0 / (B * HW), BN_EPS, C);
  be->bn_forward(y, x, mean, rstd, w, b, B, C, HW);
  be->bn_running_update(rm, rv, mean, m2, B * HW, 0.1f, C);
  be->bn_backward_reduce(dy, x, mean, rstd, B, C, HW, s1, s2);
  be->bn_backward_dx(dx, 1, dy, x, mean, rstd, w, s1, s2, B * HW, B, C, HW);
  be->bn_backward_params(dw, db, s1, s2, C);
  ref_expect(run, "batchnorm train y", y, N);
  ref_expect(run, "batchnorm train running_mean", g_memdup2(rm, sizeof rm), C);
  ref_expect(run, "batchnorm train running_var", g_memdup2(rv, sizeof rv), C);
  ref_expect(run, "batchnorm train dx", dx, N);
  ref_expect(run, "batchnorm train dweight", dw, C);
  ref_expect(run, "batchnorm train dbias", db, C);
  ref_expect(run, "batchnorm eval y", ye, N);
  g_free(x), g_free(w), g_free(b), g_free(dy);
}

static void torch_pool_xent(RefRun *run)
{
  enum { B = 2, C = 3, H = 4, W = 5, NV = 7, V = 10 };
  float *x = randv(B * C * H * W, 1.0f, 0.2f), *dy = randv(B * C, 1.0f, 0.0f);
  float *y = g_new(float, B *C), *dx = g_new0(float, B *C *H *W);
  be->avgpool_global_forward(y, x, B, C, H * W);
  be->avgpool_global_backward(dx, dy, B, C, H * W);
  int pints[] = {B, C, H, W};
  const float *parrays[] = {x, dy};
  size_t plens[] = {B * C * H * W, B * C};
  ref_case(run, "avgpool", pints, 4, parrays, plens, 2);
  ref_expect(run, "avgpool y", y, B * C);
  ref_expect(run, "avgpool dx", dx, B * C * H * W);

  /* the classifier's loss over N rows of V classes: the existing cross-entropy ops */
  float *logits = randv(NV * V, 3.0f, 0.0f), labels_f[NV], losses[NV], lse[NV];
  int labels[NV];
  for (int i = 0; i < NV; i++) {
    labels[i] = (int)((frand() + 1.0f) * 0.5f * V) % V;
    labels_f[i] = (float)labels[i];
  }
  labels[0] = 0, labels_f[0] = 0.0f;
  for (int v = 0; v < V; v++)
    logits[v] = v == 0 ? 5.0f : logits[v]; /* at least one row right */
  float *dlogits = g_new(float, NV *V), *loss = g_new(float, 1), *hits = g_new(float, 1);
  be->crossentropy_forward(losses, lse, logits, labels, NV, V);
  be->crossentropy_backward(dlogits, logits, lse, labels, NV, V, 1.0f / NV);
  double sum = 0.0;
  for (int i = 0; i < NV; i++)
    sum += losses[i];
  loss[0] = (float)(sum / NV);
  hits[0] = (float)be->accuracy_count(logits, labels, NV, V);
  int xints[] = {NV, V};
  const float *xarrays[] = {logits, labels_f};
  size_t xlens[] = {NV * V, NV};
  ref_case(run, "xent", xints, 2, xarrays, xlens, 2);
  ref_expect(run, "cross-entropy mean loss", loss, 1);
  ref_expect(run, "cross-entropy dlogits", dlogits, NV * V);
  ref_expect(run, "accuracy count", hits, 1);
  g_free(x), g_free(dy), g_free(logits);
}

static void torch_sgd(RefRun *run, int nesterov, float dampening)
{
  enum { N = 50, STEPS = 4 };
  float hyper[4] = {0.05f, 0.9f, dampening, 5e-4f};
  float *p0 = randv(N, 1.0f, 0.0f), *g = randv(N * STEPS, 1.0f, 0.0f);
  float *p = g_memdup2(p0, N * 4), *buf = g_new(float, N);
  for (int k = 0; k < STEPS; k++)
    be->sgd_update(p, g + k * N, buf, N, hyper[0], hyper[1], hyper[2], hyper[3], nesterov, k == 0);
  int ints[] = {N, STEPS, nesterov};
  const float *arrays[] = {p0, g, hyper};
  size_t lens[] = {N, N * STEPS, 4};
  ref_case(run, "sgd", ints, 3, arrays, lens, 3);
  ref_expect(run, nesterov ? "sgd nesterov params" : "sgd params", p, N);
  ref_expect(run, nesterov ? "sgd nesterov buffer" : "sgd buffer", buf, N);
  g_free(p0), g_free(g);
}

/* Per output, |ours - torch| <= 1e-5 * (largest |torch| of that output): float32 against
 * float64, where the sums of a few hundred terms leave ~1e-6 of the largest value. */
static void test_against_torch(void)
{
  if (!g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) ||
      system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  RefRun run = {g_byte_array_new(), g_ptr_array_new_with_free_func(expect_free)};
  torch_conv(&run, 2, 3, 7, 6, 4, 3, 1, 1);
  torch_conv(&run, 2, 4, 7, 7, 3, 3, 2, 1);
  torch_conv(&run, 2, 4, 6, 6, 8, 1, 2, 0);
  torch_batchnorm(&run);
  torch_pool_xent(&run);
  torch_sgd(&run, 0, 0.1f);
  torch_sgd(&run, 1, 0.0f);

  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-conv-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *path = g_build_filename(dir, "cases.bin", NULL);
  g_file_set_contents(path, (char *)run.file->data, run.file->len, &error);
  g_assert_no_error(error);
  g_autofree char *out = torch_ref_run("torch_conv_ref.py", (const char *[]){path, NULL});
  g_unlink(path);
  g_rmdir(dir);

  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, run.expect->len);
  for (guint k = 0; k < run.expect->len; k++) {
    Expect *e = g_ptr_array_index(run.expect, k);
    g_auto(GStrv) vals = g_strsplit(lines[k], " ", -1);
    if (g_strv_length(vals) != e->n)
      g_error("%s: PyTorch gave %u values, ours %zu", e->what, g_strv_length(vals), e->n);
    double mx = 0.0, worst = 0.0;
    for (size_t i = 0; i < e->n; i++)
      mx = fmax(mx, fabs(g_ascii_strtod(vals[i], NULL)));
    for (size_t i = 0; i < e->n; i++) {
      double ref = g_ascii_strtod(vals[i], NULL), d = fabs(e->values[i] - ref);
      if (d > 1e-5 * mx)
        g_error("%s[%zu]: ours %.9g, PyTorch %.9g (largest |value| %.3g)", e->what, i, e->values[i],
                ref, mx);
      worst = fmax(worst, mx > 0 ? d / mx : 0.0);
    }
    g_test_message("%s: %zu values, largest error %.1e of the largest value", e->what, e->n, worst);
  }
  g_byte_array_unref(run.file);
  g_ptr_array_unref(run.expect);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  be = cohort_backend_cpu();
  g_test_add_func("/layers-conv/conv2d", test_conv);
  g_test_add_func("/layers-conv/conv2d-gemm-mode", test_conv_gemm_mode);
  g_test_add_func("/layers-conv/batchnorm-train", test_batchnorm_train);
  g_test_add_func("/layers-conv/batchnorm-eval", test_batchnorm_eval);
  g_test_add_func("/layers-conv/batchnorm-split", test_batchnorm_split);
  g_test_add_func("/layers-conv/relu", test_relu);
  g_test_add_func("/layers-conv/avgpool", test_avgpool);
  g_test_add_func("/layers-conv/accuracy", test_accuracy);
  g_test_add_func("/layers-conv/sgd", test_sgd);
  g_test_add_func("/layers-conv/threads", test_threads);
  g_test_add_func("/layers-conv/against-torch", test_against_torch);
  return g_test_run();
}
