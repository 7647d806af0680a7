/* Helpers of the CUDA-against-CPU tests (header-only, tests only): the two backends, the
 * device count (set by main), skipping without a device, inputs on either backend, and the
 * comparison |cuda - cpu| <= atol + rtol * |cpu| over a downloaded result. */
#pragma once

#include "kernels/backend.h"
#include "kernels/cuda/backend.h"

#include <glib.h>
#include <math.h>

static const CohortBackend *cpu, *gpu;
static int n_devices;

static inline gboolean need_gpu(void)
{
  if (n_devices > 0)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none visible");
  g_test_skip(msg);
  return FALSE;
}

static inline void assert_no_cuda_error(const char *op)
{
  const char *e = cohort_cuda_last_error();
  if (e)
    g_test_message("%s: %s", op, e);
  g_assert_null(e);
}

static inline float *rand_floats(GRand *r, size_t n, double lo, double hi)
{
  float *x = g_new(float, n ? n : 1);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)g_rand_double_range(r, lo, hi);
  return x;
}

static inline int *rand_ints(GRand *r, size_t n, int hi)
{
  int *x = g_new(int, n ? n : 1);
  for (size_t i = 0; i < n; i++)
    x[i] = g_rand_int_range(r, 0, hi);
  return x;
}

static inline void *on_cpu(const void *host, size_t bytes)
{
  void *p = cpu->alloc(bytes);
  g_assert_nonnull(p);
  cpu->upload(p, host, bytes);
  return p;
}

static inline void *on_gpu(const void *host, size_t bytes)
{
  void *p = gpu->alloc(bytes);
  assert_no_cuda_error("alloc");
  g_assert_nonnull(p);
  gpu->upload(p, host, bytes);
  return p;
}

/* Downloads n floats from `dev` and compares them with the CPU result `want`. */
static inline void expect_close(const char *what, const float *want, const void *dev, size_t n,
                                double atol, double rtol)
{
  assert_no_cuda_error(what);
  float *got = g_new(float, n ? n : 1);
  gpu->download(got, dev, n * sizeof(float));
  assert_no_cuda_error(what);
  size_t worst = 0;
  double worst_excess = -INFINITY;
  for (size_t i = 0; i < n; i++) {
    double err = fabs((double)got[i] - want[i]);
    double excess =
        isnan(got[i]) != isnan(want[i]) ? INFINITY : err - (atol + rtol * fabs(want[i]));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (n && worst_excess > 0)
    g_test_message("%s: element %zu of %zu: cuda %.9g, cpu %.9g (allowed %g + %g * |cpu|)", what,
                   worst, n, got[worst], want[worst], atol, rtol);
  g_assert_true(n == 0 || worst_excess <= 0);
  g_free(got);
}
