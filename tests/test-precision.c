/* Reduced precision in the kernels: the bf16 and fp16 rounding of kernels/math-inline.h
 * against independent references, the CPU backend's emulated GEMM modes against fp32 GEMMs of
 * rounded operands, and the bf16 conversions of the gradient all-reduce. (bf16 on bf16
 * hardware computes other sums: tests/test-gemm-paths.c.) */
#include <float.h>
#include <glib.h>
#include <math.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm-paths.h"
#include "kernels/math-inline.h"

static guint32 bits(float x)
{
  guint32 u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float from_bits(guint32 u)
{
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Nearest bf16 by comparing distances in double: the value cut to 16 bits and the next one up
 * in magnitude (whose "value" past the largest bf16 is 2^128, where rounding goes to inf). */
static float ref_round_bf16(float x)
{
  if (isnan(x))
    return x;
  guint32 lo = bits(x) & 0xffff0000u;
  guint32 hi = lo + 0x10000u;
  double vlo = from_bits(lo);
  double vhi = isinf(from_bits(hi)) ? copysign(ldexp(1.0, 128), x) : (double)from_bits(hi);
  if (isinf(x))
    return x;
  double dlo = fabs((double)x - vlo), dhi = fabs(vhi - (double)x);
  if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1u) == 0))
    return from_bits(lo);
  return from_bits(hi);
}

static gboolean same(float a, float b)
{
  return (isnan(a) && isnan(b)) || bits(a) == bits(b);
}

static const float specials[] = {
    0.0f,           -0.0f,        1.0f,          -1.0f,          FLT_MAX,    -FLT_MAX,
    FLT_MIN,        1e-45f,       -1e-45f,       3.0e-39f,       65504.0f,   65519.99f,
    65520.0f,       -65520.0f,    65536.0f,      6.1035156e-05f, 6.0e-05f,   5.9604645e-08f,
    2.9802322e-08f, 2.98024e-08f, 8.940697e-08f, 1.0009766f,     1.0019531f, 1.00390625f,
    3.3895314e38f,  1e-9f,        12345.678f,
};

static void test_round_bf16(void)
{
  for (guint i = 0; i < G_N_ELEMENTS(specials); i++)
    g_assert_true(same(cohort_round_bf16(specials[i]), ref_round_bf16(specials[i])));
  g_assert_true(isinf(cohort_round_bf16(INFINITY)));
  g_assert_true(isnan(cohort_round_bf16(NAN)));
  /* Past the largest bf16 (0x7f7f) by half an ulp or more, the value rounds to inf. */
  g_assert_true(isinf(cohort_round_bf16(FLT_MAX)));
  g_assert_cmpuint(cohort_f32_to_bf16(1.00390625f), ==, 0x3f80); /* tie, to even (down) */
  g_assert_cmpuint(cohort_f32_to_bf16(1.01171875f), ==, 0x3f82); /* tie, to even (up) */
  /* NaN payloads that would carry into inf stay NaN. */
  g_assert_true(isnan(cohort_bf16_to_f32(cohort_f32_to_bf16(from_bits(0x7fffffffu)))));
  g_assert_true(isnan(cohort_bf16_to_f32(cohort_f32_to_bf16(from_bits(0x7f80ffffu)))));

  GRand *rng = g_rand_new_with_seed(7);
  for (int i = 0; i < 2000000; i++) {
    float x = from_bits(g_rand_int(rng));
    float got = cohort_round_bf16(x), want = ref_round_bf16(x);
    if (!same(got, want))
      g_error("bf16(%a) = %a, want %a", x, got, want);
  }
  g_rand_free(rng);
}

static void test_round_fp16(void)
{
#ifdef __FLT16_MAX__
  /* The compiler's _Float16 conversion (IEEE, to nearest even) is the reference. */
  for (guint i = 0; i < G_N_ELEMENTS(specials); i++) {
    float want = (float)(_Float16)specials[i];
    g_assert_true(same(cohort_round_fp16(specials[i]), want));
  }
  g_assert_cmpfloat(cohort_round_fp16(65519.99f), ==, 65504.0f);
  g_assert_true(isinf(cohort_round_fp16(65520.0f)));
  g_assert_cmpfloat(cohort_round_fp16(2.9802322e-08f), ==, 0.0f); /* 2^-25: tie, to 0 */
  g_assert_cmpfloat(cohort_round_fp16(1e-9f), ==, 0.0f);
  g_assert_true(isnan(cohort_round_fp16(NAN)));
  GRand *rng = g_rand_new_with_seed(11);
  for (int i = 0; i < 2000000; i++) {
    /* Half of them in fp16's range, where the interesting cases are. */
    float x = i % 2 ? from_bits(g_rand_int(rng))
                    : (float)ldexp(g_rand_double_range(rng, -2, 2), g_rand_int_range(rng, -30, 18));
    float got = cohort_round_fp16(x), want = (float)(_Float16)x;
    if (!same(got, want))
      g_error("fp16(%a) = %a, want %a", x, got, want);
  }
  g_rand_free(rng);
#else
  g_test_skip("this compiler has no _Float16 to compare with");
#endif
}

static void test_gemm_modes_on(void);

static float *random_matrix(GRand *rng, int n)
{
  float *m = g_new(float, n);
  for (int i = 0; i < n; i++)
    m[i] = (float)g_rand_double_range(rng, -2, 2);
  return m;
}

/* rows x cols with stride ld, each value rounded as `mode` does. */
static float *rounded_copy(const float *m, int rows, int ld, CohortGemmMode mode)
{
  float *r = g_new(float, (size_t)rows *ld);
  for (int i = 0; i < rows * ld; i++)
    r[i] = mode == COHORT_GEMM_FP16 ? cohort_round_fp16(m[i]) : cohort_round_bf16(m[i]);
  return r;
}

/* In emulated bf16/fp16 mode the CPU GEMM equals the fp32 GEMM of the rounded operands bit for
 * bit, for every transpose and with row strides wider than the rows; and it is not the fp32
 * result. Run on each fp32 library of the build. */
static void test_gemm_modes(void)
{
  CohortCpuGemmPath libs[] = {COHORT_CPU_GEMM_OPENBLAS, COHORT_CPU_GEMM_ONEDNN};
  CohortCpuGemmPath start = cohort_cpu_gemm_fp32_path();
  int start_hw = cohort_cpu_gemm_bf16_hardware();
  for (guint li = 0; li < G_N_ELEMENTS(libs); li++) {
    if (!cohort_cpu_gemm_select(libs[li], 0))
      continue;
    test_gemm_modes_on();
  }
  g_assert_true(cohort_cpu_gemm_select(start, start_hw));
}

static void test_gemm_modes_on(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  g_assert_cmpint(be->get_gemm_mode(), ==, COHORT_GEMM_FP32);
  GRand *rng = g_rand_new_with_seed(3);
  const int M = 37, N = 29, K = 45, pad = 3;
  CohortGemmMode modes[] = {COHORT_GEMM_BF16, COHORT_GEMM_FP16};
  for (guint mi = 0; mi < G_N_ELEMENTS(modes); mi++) {
    for (int ta = 0; ta < 2; ta++) {
      for (int tb = 0; tb < 2; tb++) {
        int a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + pad;
        int b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + pad;
        int ldc = N + pad;
        g_autofree float *A = random_matrix(rng, a_rows * lda);
        g_autofree float *B = random_matrix(rng, b_rows * ldb);
        g_autofree float *C0 = random_matrix(rng, M * ldc);
        g_autofree float *C = g_memdup2(C0, sizeof(float) * M * ldc);
        g_autofree float *want = g_memdup2(C0, sizeof(float) * M * ldc);
        g_autofree float *plain = g_memdup2(C0, sizeof(float) * M * ldc);
        g_autofree float *Ar = rounded_copy(A, a_rows, lda, modes[mi]);
        g_autofree float *Br = rounded_copy(B, b_rows, ldb, modes[mi]);

        be->set_gemm_mode(modes[mi]);
        g_assert_cmpint(be->get_gemm_mode(), ==, modes[mi]);
        be->gemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, C, ldc);
        be->set_gemm_mode(COHORT_GEMM_FP32);
        be->gemm(ta, tb, M, N, K, 0.5f, Ar, lda, Br, ldb, 0.25f, want, ldc);
        be->gemm(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 0.25f, plain, ldc);
        g_assert_cmpmem(C, sizeof(float) * M * ldc, want, sizeof(float) * M * ldc);
        double diff = 0;
        for (int i = 0; i < M * ldc; i++)
          diff = MAX(diff, fabs(C[i] - plain[i]));
        g_assert_cmpfloat(diff, >, 0);
        /* The rounding error is of the operands' precision (2^-8 for bf16, 2^-11 for fp16). */
        g_assert_cmpfloat(diff, <, modes[mi] == COHORT_GEMM_BF16 ? 0.5 : 0.05);
      }
    }
  }
  g_rand_free(rng);
}

/* fp16's range: an operand past 65504 becomes inf, one below 2^-25 becomes 0. TF32 on the
 * CPU is fp32. */
static void test_gemm_fp16_range_and_tf32(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  float a[2] = {70000.0f, 1.0f}, b[2] = {1.0f, 1.0f}, c = 0;
  be->set_gemm_mode(COHORT_GEMM_FP16);
  be->gemm(0, 0, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, &c, 1);
  g_assert_true(isinf(c));
  float tiny[2] = {1e-9f, 1e-9f};
  be->gemm(0, 0, 1, 1, 2, 1.0f, tiny, 2, b, 1, 0.0f, &c, 1);
  g_assert_cmpfloat(c, ==, 0.0f);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  be->gemm(0, 0, 1, 1, 2, 1.0f, tiny, 2, b, 1, 0.0f, &c, 1);
  g_assert_cmpfloat(c, ==, 2e-9f);

  GRand *rng = g_rand_new_with_seed(5);
  g_autofree float *A = random_matrix(rng, 64 * 64);
  g_autofree float *B = random_matrix(rng, 64 * 64);
  g_autofree float *C1 = g_new0(float, 64 * 64);
  g_autofree float *C2 = g_new0(float, 64 * 64);
  be->gemm(0, 1, 64, 64, 64, 1.0f, A, 64, B, 64, 0.0f, C1, 64);
  be->set_gemm_mode(COHORT_GEMM_TF32);
  be->gemm(0, 1, 64, 64, 64, 1.0f, A, 64, B, 64, 0.0f, C2, 64);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  g_assert_cmpmem(C1, sizeof(float) * 64 * 64, C2, sizeof(float) * 64 * 64);
  g_rand_free(rng);
}

static void test_bf16_conversions(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  const size_t n = 1000003; /* several chunks and a ragged end */
  GRand *rng = g_rand_new_with_seed(9);
  g_autofree float *src = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    src[i] = (float)ldexp(g_rand_double_range(rng, -1, 1), g_rand_int_range(rng, -40, 40));
  g_autofree guint16 *h = g_new(guint16, n);
  g_autofree float *back = g_new(float, n);
  be->to_bf16(h, src, n);
  be->from_bf16(back, h, n, 0.5f);
  for (size_t i = 0; i < n; i++) {
    g_assert_cmpuint(h[i], ==, cohort_f32_to_bf16(src[i]));
    g_assert_cmpfloat(back[i], ==, 0.5f * ref_round_bf16(src[i]));
  }
  g_rand_free(rng);
}

/* The vectorisable exp, tanh and GELU on non-finite input: NaN stays NaN, infinities give the
 * documented limits, and no undefined behaviour on the way (under UBSan, a NaN once reached
 * a left shift of a negative number). Finite inputs keep their accuracy against libm. */
static void test_math_non_finite(void)
{
  /* volatile: computed at run time, so the sanitizer sees the arithmetic. */
  volatile float nan_in = NAN, inf_in = INFINITY;
  g_assert_true(isnan(cohort_expf(nan_in)));
  g_assert_true(isnan(cohort_expf(-nan_in)));
  g_assert_true(isnan(cohort_tanh(nan_in)));
  g_assert_true(isnan(cohort_gelu(nan_in)));
  g_assert_true(isnan(cohort_gelu_grad(nan_in)));
  /* Clamped: e^88 for +inf, the smallest normal-ish e^-87.3 for -inf. */
  float big = cohort_expf(inf_in), tiny = cohort_expf(-inf_in);
  g_assert_true(isfinite(big) && big > 1e38f);
  g_assert_true(tiny >= 0.0f && tiny < 1e-37f);
  g_assert_cmpfloat(cohort_tanh(inf_in), ==, 1.0f);
  g_assert_cmpfloat(cohort_tanh(-inf_in), ==, -1.0f);
  g_assert_true(isinf(cohort_gelu(inf_in)));
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.173f)
    worst = fmax(worst, fabs((double)cohort_expf(x) - exp((double)x)) / exp((double)x));
  g_test_message("cohort_expf: largest relative error %.3g on [-87, 88]", worst);
  g_assert_cmpfloat(worst, <, 4e-7);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/precision/round-bf16", test_round_bf16);
  g_test_add_func("/precision/math-non-finite", test_math_non_finite);
  g_test_add_func("/precision/round-fp16", test_round_fp16);
  g_test_add_func("/precision/gemm-modes", test_gemm_modes);
  g_test_add_func("/precision/gemm-fp16-range-and-tf32", test_gemm_fp16_range_and_tf32);
  g_test_add_func("/precision/bf16-conversions", test_bf16_conversions);
  return g_test_run();
}
