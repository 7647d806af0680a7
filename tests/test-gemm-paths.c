/* Every path of the CPU backend's gemm (kernels/cpu/gemm-paths.h) against a plain triple loop
 * in double and against OpenBLAS: every transpose pair, row strides wider than the rows, odd
 * sizes, M, N or K = 1, alpha and beta variants, beta = 0 over NaN garbage, alpha = 0 and K = 0.
 * fp32 paths: within 1e-5 of the magnitude of the terms. The bf16 hardware path: operands
 * rounded bit for bit by the tested rule, sums within the bound derived in gemm-paths.h,
 * subnormal operands read as zero; and the start-up choice, its log line and the OpenBLAS build
 * loaded. */
#include "cohort-build-config.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm-paths.h"
#include "kernels/math-inline.h"

#include <cblas.h>
#include <float.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <glib.h>
#include <math.h>
#include <string.h>

#define PAD_VALUE -12345.0f /* in C's columns past N: no path may touch them */

typedef struct Case {
  int M, N, K, pad;
  float alpha, beta;
  gboolean nan_c; /* C starts as NaN (only with beta = 0) */
} Case;

static const Case cases[] = {
    {37, 29, 45, 3, 1.0f, 0.0f, FALSE},   {37, 29, 45, 3, 0.5f, 0.25f, FALSE},
    {37, 29, 45, 17, -1.5f, 1.0f, FALSE}, {37, 29, 45, 3, 1.0f, 0.0f, TRUE},
    {1, 29, 45, 2, 1.0f, 1.0f, FALSE},    {37, 1, 45, 2, 2.0f, 0.0f, TRUE},
    {37, 29, 1, 5, 1.0f, -1.0f, FALSE},   {1, 1, 1, 1, 0.75f, 0.5f, FALSE},
    {1, 1, 300, 0, 1.0f, 0.0f, TRUE},     {130, 67, 301, 1, 1.0f, 1.0f, FALSE},
    {64, 96, 128, 0, 1.0f, 0.0f, FALSE},  {33, 250, 7, 4, 1.0f, 0.0f, FALSE},
    {37, 29, 45, 3, 0.0f, 0.5f, FALSE},   {37, 29, 45, 3, 0.0f, 0.0f, TRUE},
    {37, 29, 0, 3, 1.0f, 0.5f, FALSE},    {37, 29, 0, 3, 1.0f, 0.0f, TRUE},
};

typedef struct Operands {
  int ta, tb, lda, ldb, ldc, a_rows, b_rows;
  float *A, *B, *C0;
} Operands;

static float *random_matrix(GRand *rng, int n)
{
  float *m = g_new(float, n > 0 ? n : 1);
  for (int i = 0; i < n; i++)
    m[i] = (float)g_rand_double_range(rng, -2, 2);
  return m;
}

static Operands make_operands(GRand *rng, const Case *c, int ta, int tb)
{
  Operands o = {.ta = ta, .tb = tb};
  int a_cols = ta ? c->M : c->K, b_cols = tb ? c->K : c->N;
  o.a_rows = ta ? c->K : c->M;
  o.b_rows = tb ? c->N : c->K;
  o.lda = MAX(a_cols, 1) + c->pad;
  o.ldb = MAX(b_cols, 1) + c->pad;
  o.ldc = c->N + c->pad;
  o.A = random_matrix(rng, o.a_rows * o.lda);
  o.B = random_matrix(rng, o.b_rows * o.ldb);
  o.C0 = random_matrix(rng, c->M * o.ldc);
  for (int m = 0; m < c->M; m++)
    for (int n = 0; n < o.ldc; n++)
      if (n >= c->N)
        o.C0[m * o.ldc + n] = PAD_VALUE;
      else if (c->nan_c)
        o.C0[m * o.ldc + n] = NAN;
  return o;
}

static void free_operands(Operands *o)
{
  g_free(o->A);
  g_free(o->B);
  g_free(o->C0);
}

static float at(const float *X, int ld, int trans, int r, int c)
{
  return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* The reference in double, and per element the magnitude |alpha| sum |a b| + |beta C0| that
 * the error bounds scale with. `round` rounds each operand first (bf16) or not (NULL); `flush`
 * drops products that have a bf16-subnormal operand, as vdpbf16ps reads them as zero. */
static void reference(const Case *c, const Operands *o, float (*round)(float), gboolean flush,
                      double *ref, double *mag)
{
  for (int m = 0; m < c->M; m++) {
    for (int n = 0; n < c->N; n++) {
      double s = 0, a_s = 0;
      for (int k = 0; k < c->K; k++) {
        float a = at(o->A, o->lda, o->ta, m, k), b = at(o->B, o->ldb, o->tb, k, n);
        if (round) {
          a = round(a);
          b = round(b);
        }
        if (flush && (fabsf(a) < FLT_MIN || fabsf(b) < FLT_MIN))
          continue;
        s += (double)a * b;
        a_s += fabs((double)a * b);
      }
      double c0 = c->beta == 0.0f ? 0.0 : (double)c->beta * o->C0[m * o->ldc + n];
      if (c->alpha == 0.0f)
        s = a_s = 0;
      ref[m * c->N + n] = c->alpha * s + c0;
      mag[m * c->N + n] = fabs(c->alpha) * a_s + fabs(c0);
    }
  }
}

static float *run_path(CohortCpuGemmPath path, const Case *c, const Operands *o)
{
  float *C = g_memdup2(o->C0, sizeof(float) * MAX(c->M * o->ldc, 1));
  cohort_cpu_gemm_run(path, o->ta, o->tb, c->M, c->N, c->K, c->alpha, o->A, o->lda, o->B, o->ldb,
                      c->beta, C, o->ldc);
  return C;
}

/* gamma(n) = n u / (1 - n u): the relative error bound of an n-term fp32 sum in any order. */
static double gamma_n(int n)
{
  double u = ldexp(1.0, -24);
  return n * u / (1 - n * u);
}

/* Checks C against ref within rel * mag + abs per element, and the padding untouched. Returns
 * the largest |C - ref| / mag seen. */
static double check_close(const char *what, const Case *c, const Operands *o, const float *C,
                          const double *ref, const double *mag, double rel, double abs_tol)
{
  double worst = 0;
  for (int m = 0; m < c->M; m++) {
    for (int n = 0; n < o->ldc; n++) {
      float got = C[m * o->ldc + n];
      if (n >= c->N) {
        if (got != PAD_VALUE)
          g_error("%s: %dx%dx%d ta=%d tb=%d wrote C[%d][%d] past N", what, c->M, c->N, c->K, o->ta,
                  o->tb, m, n);
        continue;
      }
      double want = ref[m * c->N + n], scale = mag[m * c->N + n];
      double err = fabs(got - want);
      if (!(err <= rel * scale + abs_tol))
        g_error("%s: %dx%dx%d ta=%d tb=%d alpha=%g beta=%g: C[%d][%d] = %.9g, want %.9g "
                "(error %.3g, allowed %.3g)",
                what, c->M, c->N, c->K, o->ta, o->tb, c->alpha, c->beta, m, n, got, want, err,
                rel * scale + abs_tol);
      if (scale > 0)
        worst = MAX(worst, err / scale);
    }
  }
  return worst;
}

static void test_fp32_path(gconstpointer data)
{
  CohortCpuGemmPath path = GPOINTER_TO_INT(data);
  if (!cohort_cpu_gemm_path_available(path)) {
    g_test_skip("this path is not in this build or not on this CPU");
    return;
  }
  GRand *rng = g_rand_new_with_seed(17);
  double worst = 0;
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const Case *c = &cases[i];
    for (int ta = 0; ta < 2; ta++) {
      for (int tb = 0; tb < 2; tb++) {
        Operands o = make_operands(rng, c, ta, tb);
        g_autofree double *ref = g_new(double, MAX(c->M * c->N, 1));
        g_autofree double *mag = g_new(double, MAX(c->M * c->N, 1));
        reference(c, &o, NULL, FALSE, ref, mag);
        g_autofree float *C = run_path(path, c, &o);
        worst = MAX(worst, check_close("fp32 vs double", c, &o, C, ref, mag, 1e-5, 0));
        /* And against OpenBLAS, the library it stands in for, by the same measure. */
        g_autofree float *blas = run_path(COHORT_CPU_GEMM_OPENBLAS, c, &o);
        g_autofree double *blas_d = g_new(double, MAX(c->M * c->N, 1));
        for (int m = 0; m < c->M; m++)
          for (int n = 0; n < c->N; n++)
            blas_d[m * c->N + n] = blas[m * o.ldc + n];
        check_close("fp32 vs OpenBLAS", c, &o, C, blas_d, mag, 1e-5, 0);
        free_operands(&o);
      }
    }
  }
  g_test_message("largest error / magnitude: %.3g", worst);
  g_rand_free(rng);
}

static float round_bf16(float x)
{
  return cohort_round_bf16(x);
}

/* The hardware path: within the bound of gemm-paths.h of the exact sum of the rounded
 * operands, and farther than that from the unrounded product somewhere (so the operands were
 * rounded). */
static void test_bf16_hardware(void)
{
  if (!cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16)) {
    g_test_skip("no bf16 hardware path here (oneDNN missing, or no avx512_bf16)");
    return;
  }
  GRand *rng = g_rand_new_with_seed(23);
  double worst = 0;
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    const Case *c = &cases[i];
    for (int ta = 0; ta < 2; ta++) {
      for (int tb = 0; tb < 2; tb++) {
        Operands o = make_operands(rng, c, ta, tb);
        size_t n = MAX(c->M * c->N, 1);
        g_autofree double *ref = g_new(double, n);
        g_autofree double *mag = g_new(double, n);
        g_autofree double *plain = g_new(double, n);
        g_autofree double *plain_mag = g_new(double, n);
        reference(c, &o, round_bf16, TRUE, ref, mag);
        reference(c, &o, NULL, FALSE, plain, plain_mag);
        g_autofree float *C = run_path(COHORT_CPU_GEMM_ONEDNN_BF16, c, &o);
        double abs_tol = fabs(c->alpha) * (c->K + 1) * ldexp(1.0, -126);
        worst = MAX(worst,
                    check_close("bf16 hardware", c, &o, C, ref, mag, gamma_n(c->K + 2), abs_tol));
        if (c->K >= 8 && c->alpha != 0.0f) {
          double far = 0;
          for (int m = 0; m < c->M; m++)
            for (int k = 0; k < c->N; k++)
              far =
                  MAX(far, fabs(C[m * o.ldc + k] - plain[m * c->N + k]) / plain_mag[m * c->N + k]);
          g_assert_cmpfloat(far, >, gamma_n(c->K + 2));
        }
        free_operands(&o);
      }
    }
  }
  g_test_message("largest error / magnitude: %.3g (bound gamma(K+2), %.3g at K = 301)", worst,
                 gamma_n(303));
  g_rand_free(rng);
}

/* The packed operands are the tested rounding rule bit for bit, NaN, inf, subnormals and
 * ties included, with the row stride dropped. */
static void test_pack_bits(void)
{
  const int rows = 7, cols = 300, ld = 311;
  GRand *rng = g_rand_new_with_seed(29);
  g_autofree float *src = g_new(float, rows *ld);
  for (int i = 0; i < rows * ld; i++) {
    guint32 u = g_rand_int(rng);
    if (i % 5 == 0)
      u = (u & 0xffff0000u) | 0x8000u; /* a tie */
    memcpy(&src[i], &u, sizeof u);
  }
  src[0] = NAN;
  src[1] = INFINITY;
  src[2] = 1e-40f;
  src[3] = FLT_MAX;
  const uint16_t *h = cohort_cpu_pack_bf16(0, src, rows, cols, ld);
  g_assert_nonnull(h);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      g_assert_cmpuint(h[r * cols + c], ==, cohort_f32_to_bf16(src[r * ld + c]));
  g_rand_free(rng);
}

/* vdpbf16ps reads a subnormal operand as zero (Intel's SDM; on this path products with one
 * do not count, which the bound's reference follows): a difference from the emulation. */
static void test_bf16_hardware_subnormal(void)
{
  if (!cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16)) {
    g_test_skip("no bf16 hardware path here");
    return;
  }
  float c;
  /* A bf16-subnormal operand (2^-130) times 2^100 is 2^-30 exactly, yet the hardware reads
   * the operand as zero. */
  float tiny[1] = {ldexpf(1.0f, -130)}, big[1] = {ldexpf(1.0f, 100)};
  c = 5.0f;
  cohort_cpu_gemm_run(COHORT_CPU_GEMM_ONEDNN_BF16, 0, 0, 1, 1, 1, 1.0f, tiny, 1, big, 1, 0.0f, &c,
                      1);
  g_assert_cmpfloat(c, ==, 0.0f);
  /* The emulation multiplies it in fp32: 2^-30. */
  CohortCpuGemmPath fp32 = cohort_cpu_gemm_fp32_path();
  g_assert_true(cohort_cpu_gemm_select(COHORT_CPU_GEMM_OPENBLAS, 0));
  const CohortBackend *be = cohort_backend_cpu();
  be->set_gemm_mode(COHORT_GEMM_BF16);
  be->gemm(0, 0, 1, 1, 1, 1.0f, tiny, 1, big, 1, 0.0f, &c, 1);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  g_assert_true(cohort_cpu_gemm_select(fp32, 1));
  g_assert_cmpfloat(c, ==, ldexpf(1.0f, -30));
}

#if defined(__x86_64__) && defined(__GNUC__)
static float daz(float x)
{
  return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;
}

__attribute__((target("avx512f,avx512bf16"))) static void dpbf16(float *acc, const uint16_t *a,
                                                                 const uint16_t *b)
{
  __m512 c = _mm512_loadu_ps(acc);
  __m512bh x = (__m512bh)_mm512_loadu_si512(a), y = (__m512bh)_mm512_loadu_si512(b);
  _mm512_storeu_ps(acc, _mm512_dpbf16_ps(c, x, y));
}

/* A random bf16 of exponent 2^(lo .. lo + span - 1), or 0 now and then. */
static uint16_t random_bf16(GRand *rng, int lo, int span)
{
  guint32 r = g_rand_int(rng);
  if (r % 61 == 0)
    return 0;
  return (uint16_t)((r & 0x8000u) | ((guint32)(127 + lo + (int)((r >> 8) % span)) << 7) |
                    ((r >> 20) & 0x7fu));
}
#endif

/* The premise of the bf16 bound (gemm-paths.h): vdpbf16ps computes, per lane, acc =
 * fma(a_even, b_even, fma(a_odd, b_odd, acc)), each rounded to nearest even, subnormal inputs
 * read as zero and subnormal results flushed (Intel's SDM). Checked on this CPU bit for bit,
 * on values of ordinary size and on tiny ones around the subnormal range. */
static void test_vdpbf16ps_model(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    g_test_skip("this CPU has no avx512_bf16");
    return;
  }
  GRand *rng = g_rand_new_with_seed(37);
  for (int it = 0; it < 40000; it++) {
    int tiny = it % 2; /* products and sums near 2^-126 */
    float acc[16], got[16];
    uint16_t a[32], b[32];
    for (int i = 0; i < 32; i++) {
      a[i] = tiny ? random_bf16(rng, -130, 8) : random_bf16(rng, -8, 16);
      b[i] = tiny ? random_bf16(rng, -4, 8) : random_bf16(rng, -8, 16);
    }
    for (int i = 0; i < 16; i++) {
      guint32 r = g_rand_int(rng);
      acc[i] = tiny ? ldexpf((float)g_rand_double_range(rng, -1, 1), -124 - (int)(r % 6))
                    : (float)g_rand_double_range(rng, -64, 64);
    }
    memcpy(got, acc, sizeof got);
    dpbf16(got, a, b);
    for (int i = 0; i < 16; i++) {
      float a0 = daz(cohort_bf16_to_f32(a[2 * i])), a1 = daz(cohort_bf16_to_f32(a[2 * i + 1]));
      float b0 = daz(cohort_bf16_to_f32(b[2 * i])), b1 = daz(cohort_bf16_to_f32(b[2 * i + 1]));
      float want = daz(fmaf(a0, b0, daz(fmaf(a1, b1, daz(acc[i])))));
      if (cohort_f32_bits(got[i]) != cohort_f32_bits(want))
        g_error("vdpbf16ps(%a; %a %a, %a %a) = %a, the model says %a", acc[i], a0, a1, b0, b1,
                got[i], want);
    }
  }
  g_rand_free(rng);
#else
  g_test_skip("not an x86-64 build");
#endif
}

/* The start-up choice is the build's (with cpu_blas auto: oneDNN on AVX-512 cores only, as
 * measured), selecting changes what bf16 mode runs, and the log line says which. */
static void test_selection(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  int onednn = cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN);
  int hw = cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16);
  g_assert_cmpint(onednn, ==, COHORT_HAVE_ONEDNN);
  int avx512 = 1;
#if defined(__x86_64__) && defined(__GNUC__)
  avx512 = __builtin_cpu_supports("avx512f");
#endif
  int want_onednn = g_str_equal(COHORT_CPU_BLAS, "onednn") && (!COHORT_CPU_BLAS_AUTO || avx512);
  g_test_message("cpu_blas %s%s, AVX-512 %s: %s", COHORT_CPU_BLAS,
                 COHORT_CPU_BLAS_AUTO ? " (auto)" : "", avx512 ? "yes" : "no",
                 be->describe_gemm(COHORT_GEMM_FP32));
  g_assert_cmpint(cohort_cpu_gemm_fp32_path(), ==,
                  want_onednn ? COHORT_CPU_GEMM_ONEDNN : COHORT_CPU_GEMM_OPENBLAS);
  /* the key cpu_matmul's names */
  g_assert_true(cohort_cpu_gemm_force("openblas"));
  g_assert_cmpint(cohort_cpu_gemm_fp32_path(), ==, COHORT_CPU_GEMM_OPENBLAS);
  g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_FP32), "OpenBLAS"));
  g_assert_cmpint(cohort_cpu_gemm_force("onednn"), ==, onednn);
  if (onednn) {
    g_assert_cmpint(cohort_cpu_gemm_fp32_path(), ==, COHORT_CPU_GEMM_ONEDNN);
    g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_FP32), "oneDNN"));
  }
  g_assert_false(cohort_cpu_gemm_force("blis"));
  g_assert_cmpint(cohort_cpu_gemm_bf16_hardware(), ==, hw);
  g_assert_true(
      cohort_cpu_gemm_select(want_onednn ? COHORT_CPU_GEMM_ONEDNN : COHORT_CPU_GEMM_OPENBLAS, hw));
  g_assert_cmpint(cohort_cpu_gemm_bf16_hardware(), ==, hw);
  g_assert_nonnull(be->describe_gemm);
  if (hw)
    g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_BF16), "in hardware"));
  else
    g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_BF16), "emulated"));
  g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_FP16), "emulated"));
  g_assert_false(cohort_cpu_gemm_select(COHORT_CPU_GEMM_ONEDNN_BF16, 0));
  /* -Dopenblas=openmp: the OpenMP build is the one loaded (its run path beats the
   * alternatives system's pthreads default), so OpenBLAS shares our OpenMP threads. */
  if (COHORT_OPENBLAS_OPENMP)
    g_assert_cmpint(openblas_get_parallel(), ==, 2);

  /* Emulated bf16 mode: the fp32 product of the rounded operands, bit for bit. */
  g_assert_true(cohort_cpu_gemm_select(COHORT_CPU_GEMM_OPENBLAS, 0));
  g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_BF16), "emulated"));
  g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_FP32), "OpenBLAS"));
  GRand *rng = g_rand_new_with_seed(31);
  const int n = 48;
  g_autofree float *A = random_matrix(rng, n * n);
  g_autofree float *B = random_matrix(rng, n * n);
  g_autofree float *Ar = g_new(float, n *n);
  g_autofree float *Br = g_new(float, n *n);
  for (int i = 0; i < n * n; i++) {
    Ar[i] = cohort_round_bf16(A[i]);
    Br[i] = cohort_round_bf16(B[i]);
  }
  g_autofree float *C = g_new0(float, n *n);
  g_autofree float *want = g_new0(float, n *n);
  be->set_gemm_mode(COHORT_GEMM_BF16);
  be->gemm(0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  be->gemm(0, 1, n, n, n, 1.0f, Ar, n, Br, n, 0.0f, want, n);
  g_assert_cmpmem(C, sizeof(float) * n * n, want, sizeof(float) * n * n);
  if (hw) {
    /* Hardware bf16 mode: the hardware path's result, not the emulation's. */
    g_assert_true(cohort_cpu_gemm_select(COHORT_CPU_GEMM_ONEDNN, 1));
    g_assert_nonnull(strstr(be->describe_gemm(COHORT_GEMM_FP32), "oneDNN"));
    g_autofree float *direct = g_new0(float, n *n);
    cohort_cpu_gemm_run(COHORT_CPU_GEMM_ONEDNN_BF16, 0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, direct,
                        n);
    be->set_gemm_mode(COHORT_GEMM_BF16);
    be->gemm(0, 1, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    be->set_gemm_mode(COHORT_GEMM_FP32);
    g_assert_cmpmem(C, sizeof(float) * n * n, direct, sizeof(float) * n * n);
  }
  g_rand_free(rng);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_data_func("/gemm-paths/openblas", GINT_TO_POINTER(COHORT_CPU_GEMM_OPENBLAS),
                       test_fp32_path);
  g_test_add_data_func("/gemm-paths/onednn", GINT_TO_POINTER(COHORT_CPU_GEMM_ONEDNN),
                       test_fp32_path);
  g_test_add_func("/gemm-paths/bf16-pack-bits", test_pack_bits);
  g_test_add_func("/gemm-paths/bf16-hardware", test_bf16_hardware);
  g_test_add_func("/gemm-paths/bf16-hardware-subnormal", test_bf16_hardware_subnormal);
  g_test_add_func("/gemm-paths/vdpbf16ps-model", test_vdpbf16ps_model);
  g_test_add_func("/gemm-paths/selection", test_selection);
  return g_test_run();
}
