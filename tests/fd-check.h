/* Finite-difference checks of the CPU kernels (header-only, tests only): random inputs, the
 * scalar J = sum(out * R) for a fixed random R summed in double, and the comparison of an
 * analytic gradient with central differences of J.
 *
 * The kernels are float; J is summed in double. With step h = 1e-2 the float rounding noise
 * in (J+ - J-) / 2h is ~1e-5 and the O(h^2) truncation error stays below ~1e-4 for smooth ops
 * (the largest seen is 1e-4, attention with T = 37), so a gradient passes when
 * |fd - analytic| <= 2e-4 + 2e-3 * |analytic|. */
#pragma once

#include <glib.h>
#include <math.h>

#define FD_H    1e-2f
#define FD_ATOL 2e-4
#define FD_RTOL 2e-3

/* A fixed linear congruential sequence: the same inputs on every run and machine. */
static guint32 rng_state = 12345;

static inline float frand(void)
{
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((rng_state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* n values uniform in [-scale, scale) (g_free them). */
static inline float *randv(size_t n, float scale)
{
  float *v = g_new(float, n ? n : 1);
  for (size_t i = 0; i < n; i++)
    v[i] = frand() * scale;
  return v;
}

static inline double dotd(const float *a, const float *r, size_t n)
{
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * r[i];
  return s;
}

/* Fails when |got - want| > rtol * max(1, |want|) for some element. */
static inline void assert_close_vec(const float *got, const double *want, size_t n, double rtol,
                                    const char *what)
{
  for (size_t i = 0; i < n; i++) {
    double tol = rtol * fmax(1.0, fabs(want[i]));
    if (fabs(got[i] - want[i]) > tol)
      g_error("%s: element %zu is %.8g, reference %.8g", what, i, got[i], want[i]);
  }
}

/* The objective evaluated by a test: J(x) with x perturbed in place. */
typedef double (*Objective)(gpointer ctx);

/* Compares analytic dJ/dx (grad) with central differences over every element of x. */
static inline void check_grad(float *x, const float *grad, size_t n, Objective f, gpointer ctx,
                              const char *what)
{
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    float keep = x[i];
    x[i] = keep + FD_H;
    double jp = f(ctx);
    x[i] = keep - FD_H;
    double jm = f(ctx);
    x[i] = keep;
    double fd = (jp - jm) / (2.0 * (double)FD_H);
    double err = fabs(fd - grad[i]);
    if (err > FD_ATOL + FD_RTOL * fabs(grad[i]))
      g_error("%s: d/dx[%zu] analytic %.6g, finite difference %.6g", what, i, grad[i], fd);
    worst = fmax(worst, err);
  }
  g_test_message("%s: %zu gradients, largest |fd - analytic| %.2e", what, n, worst);
}
