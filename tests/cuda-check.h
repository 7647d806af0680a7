/* Helpers of the CUDA-against-CPU tests (header-only, tests only): the two backends, the
 * device count (set by main), skipping without a device, inputs on either backend, and the
 * comparison |cuda - cpu| <= atol + rtol * |cpu| over a downloaded result. */
#pragma once

#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"

#include <glib.h>
#include <string.h>
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

/* Attention forward and backward for one shape, `causal` or not, CUDA against the CPU; dqkv of
 * the CUDA run is filled with garbage first, since the op overwrites it. The backward of each
 * side starts from the CPU's out and lse. Non-causal: the causal output must differ (beyond
 * the first position), so the flag reaches the kernels. */
static inline void cuda_check_attention(int B, int T, int C, int NH, guint32 seed, int causal)
{
  GRand *r = g_rand_new_with_seed(seed);
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
  float *qkv = rand_floats(r, nqkv, -1, 1), *dout = rand_floats(r, nout, -1, 1);
  float *junk = rand_floats(r, nqkv, 1e3, 1e4);
  g_rand_free(r);
  float *c_qkv = on_cpu(qkv, nqkv * 4), *g_qkv = on_gpu(qkv, nqkv * 4);
  float *c_dout = on_cpu(dout, nout * 4), *g_dout = on_gpu(dout, nout * 4);
  float *c_out = cpu->alloc(nout * 4), *g_out = gpu->alloc(nout * 4);
  float *c_lse = cpu->alloc(nlse * 4), *g_lse = gpu->alloc(nlse * 4);
  float *c_dqkv = cpu->alloc(nqkv * 4), *g_dqkv = on_gpu(junk, nqkv * 4);
  const char *kind = causal ? "" : " (non-causal)";
  char *w1 = g_strdup_printf("attention_forward%s out B=%d T=%d C=%d NH=%d", kind, B, T, C, NH);
  char *w2 = g_strdup_printf("attention_forward%s lse B=%d T=%d C=%d NH=%d", kind, B, T, C, NH);
  char *w3 = g_strdup_printf("attention_backward%s dqkv B=%d T=%d C=%d NH=%d", kind, B, T, C, NH);
  cpu->attention_forward(c_out, c_lse, c_qkv, B, T, C, NH, causal);
  gpu->attention_forward(g_out, g_lse, g_qkv, B, T, C, NH, causal);
  /* online softmax vs two-pass softmax: same sums in another order */
  expect_close(w1, c_out, g_out, nout, 1e-5, 1e-4);
  expect_close(w2, c_lse, g_lse, nlse, 1e-5, 1e-5);
  gpu->upload(g_out, c_out, nout * 4);
  gpu->upload(g_lse, c_lse, nlse * 4);
  cpu->attention_backward(c_dqkv, c_dout, c_qkv, c_out, c_lse, B, T, C, NH, causal);
  gpu->attention_backward(g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, C, NH, causal);
  expect_close(w3, c_dqkv, g_dqkv, nqkv, 1e-4, 1e-3);
  if (!causal && T > 1) {
    float *masked = g_new(float, nout);
    gpu->attention_forward(g_out, g_lse, g_qkv, B, T, C, NH, 1);
    gpu->download(masked, g_out, nout * 4);
    assert_no_cuda_error("attention_forward (causal)");
    g_assert_true(memcmp(masked, c_out, nout * 4) != 0);
    g_free(masked);
  }
  g_free(w1), g_free(w2), g_free(w3);
  cpu->free(c_qkv), cpu->free(c_dout), cpu->free(c_out), cpu->free(c_lse), cpu->free(c_dqkv);
  gpu->free(g_qkv), gpu->free(g_dout), gpu->free(g_out), gpu->free(g_lse), gpu->free(g_dqkv);
  g_free(qkv), g_free(dout), g_free(junk);
}
