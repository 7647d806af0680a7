/* The CPU backend's activations as this machine runs them (the AVX2 or AVX-512 clone the CPU
 * picks, vectorised, or the portable one) against libm in double over a dense grid: GELU (tanh
 * form) and SiLU, forward and backward, and SwiGLU. Their exp and tanh are cohort_expf's
 * polynomial (kernels/math-inline.h), not libm's, so this is the proof of its error bound in
 * the form the kernels use it. The bounds: |got - ref| <= RTOL |ref| + ATOL scale(x) + TINY,
 * where the ATOL term is the rounding of 1 +- tanh near +-1, which the float32 formulas (and
 * PyTorch's, the same ones) cannot avoid: for GELU scale(x) = |x| (0.5 x (1 + t) with t near
 * -1), for its derivative 1 + |x| du/dx (0.5 x (1 - t^2) du/dx), and TINY covers results
 * below float's normal range. */
#include <glib.h>
#include <math.h>

#include "kernels/backend.h"

#define GELU_S 0.79788456080286535588 /* sqrt(2 / pi) */
#define GELU_C 0.044715

static double ref_gelu(double x)
{
  return 0.5 * x * (1.0 + tanh(GELU_S * (x + GELU_C * x * x * x)));
}

static double ref_gelu_grad(double x)
{
  double t = tanh(GELU_S * (x + GELU_C * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_S * (1.0 + 3.0 * GELU_C * x * x);
}

static double ref_silu(double x)
{
  return x / (1.0 + exp(-x));
}

static double ref_silu_grad(double x)
{
  double s = 1.0 / (1.0 + exp(-x));
  return s * (1.0 + x * (1.0 - s));
}

/* The grid: every 2^-12 in [lo, hi), an odd count so that the vector loops' tails run too. */
static float *grid(double lo, double hi, size_t *n)
{
  *n = (size_t)((hi - lo) * 4096.0) | 1;
  float *x = g_new(float, *n);
  for (size_t i = 0; i < *n; i++)
    x[i] = (float)(lo + (double)i / 4096.0);
  return x;
}

static double abs_x(double x)
{
  return fabs(x);
}

static double gelu_grad_scale(double x)
{
  return 1.0 + fabs(x) * GELU_S * (1.0 + 3.0 * GELU_C * x * x);
}

/* The largest |got - ref| / (RTOL |ref| + ATOL scale(x) + TINY) over the grid: <= 1 passes. */
static double worst_ratio(const float *x, const float *got, double (*ref)(double), size_t n,
                          double rtol, double atol, double (*scale)(double), double *at)
{
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double r = ref(x[i]);
    double q = fabs((double)got[i] - r) / (rtol * fabs(r) + atol * scale(x[i]) + 1e-37);
    g_assert_true(isfinite(got[i]));
    if (q > worst) {
      worst = q;
      *at = x[i];
    }
  }
  return worst;
}

static void check(const char *what, const float *x, const float *got, double (*ref)(double),
                  size_t n, double rtol, double atol, double (*scale)(double))
{
  double at = 0.0;
  double w = worst_ratio(x, got, ref, n, rtol, atol, scale, &at);
  g_test_message("%s: worst error %.3f of the bound (rtol %g, atol %g), at x = %.6g", what, w, rtol,
                 atol, at);
  g_assert_cmpfloat(w, <=, 1.0);
}

static void test_gelu(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  size_t n;
  g_autofree float *x = grid(-20.0, 20.0, &n);
  g_autofree float *y = g_new(float, n);
  g_autofree float *ones = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    ones[i] = 1.0f;
  be->gelu_forward(y, x, n);
  check("gelu", x, y, ref_gelu, n, 1e-6, 1.5e-7, abs_x);
  be->gelu_backward(y, x, ones, n);
  check("gelu'", x, y, ref_gelu_grad, n, 1e-6, 1e-7, gelu_grad_scale);
  /* in place (dinp = dout), as the models call it */
  be->gelu_backward(ones, x, ones, n);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(ones[i], ==, y[i]);
}

static void test_silu(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  size_t n;
  /* down to -87: SiLU is x e^x there, so this is the relative error of the exp itself */
  g_autofree float *x = grid(-87.0, 30.0, &n);
  g_autofree float *y = g_new(float, n);
  g_autofree float *ones = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    ones[i] = 1.0f;
  be->silu_forward(y, x, n);
  check("silu", x, y, ref_silu, n, 1e-6, 0.0, abs_x);
  be->silu_backward(y, x, ones, n);
  check("silu'", x, y, ref_silu_grad, n, 1e-6, 1e-7, abs_x);
  /* SwiGLU with up = 1 is SiLU; its backward's dup is silu(gate) */
  g_autofree float *s = g_new(float, n);
  g_autofree float *dg = g_new(float, n);
  g_autofree float *du = g_new(float, n);
  be->swiglu_forward(s, x, ones, n);
  check("swiglu", x, s, ref_silu, n, 1e-6, 0.0, abs_x);
  be->swiglu_backward(dg, du, ones, x, ones, n);
  check("swiglu dgate", x, dg, ref_silu_grad, n, 1e-6, 1e-7, abs_x);
  check("swiglu dup", x, du, ref_silu, n, 1e-6, 0.0, abs_x);
}

/* Past the grid: saturation and non-finite inputs keep the documented limits in the
 * vectorised loops too (the scalar functions are checked in test-precision). */
static void test_limits(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  float x[11] = {-INFINITY, -1e30f, -200.0f, -90.0f,   -0.0f, 0.0f,
                 90.0f,     200.0f, 1e30f,   INFINITY, NAN};
  float y[11], s[11];
  be->gelu_forward(y, x, 11);
  be->silu_forward(s, x, 11);
  for (int i = 1; i < 9; i++) {
    g_assert_true(isfinite(y[i]) && isfinite(s[i]));
    g_assert_cmpfloat(fabsf(y[i] - (x[i] > 0 ? x[i] : 0.0f)), <=, 1e-30f + 1e-7f * fabsf(x[i]));
    g_assert_cmpfloat(fabsf(s[i] - (x[i] > 0 ? x[i] : 0.0f)), <=, 1e-30f + 1e-7f * fabsf(x[i]));
  }
  g_assert_true(isinf(y[9]) && y[9] > 0 && isinf(s[9]) && s[9] > 0);
  g_assert_true(isnan(y[10]) && isnan(s[10]));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/activation-accuracy/gelu", test_gelu);
  g_test_add_func("/activation-accuracy/silu-swiglu", test_silu);
  g_test_add_func("/activation-accuracy/limits", test_limits);
  return g_test_run();
}
