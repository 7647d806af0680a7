/* The CPU backend's GEMM: the GEMM modes on top of the fp32 library and the bf16 hardware path
 * (kernels/cpu/gemm-paths.h), and the bias ops that go with a linear layer. */
#include "cohort-build-config.h"
#include "cpu.h"
#include "kernels/cpu/gemm-paths.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static CohortCpuGemmPath fp32_path = COHORT_CPU_GEMM_OPENBLAS;
static int bf16_hardware;
static pthread_once_t choice_once = PTHREAD_ONCE_INIT;

/* With cpu_blas=auto, the fp32 library by what the CPU reports, from measurements of the model's
 * products (bench/bench-gemm, docs/benchmarks.md "CPU matrix products"): on AVX-512 cores
 * (Zen 4, Zen 5) oneDNN's sgemm ran them faster than OpenBLAS; on AVX2 cores without AVX-512
 * (Zen 3) OpenBLAS did (the tiny-gpt step's products at 78.6 GFLOP/s against oneDNN's 67.2). */
static int onednn_suits_this_cpu(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f");
#else
  return 1;
#endif
}

CohortCpuGemmPath cohort_cpu_gemm_default_fp32_path(void)
{
#if COHORT_HAVE_ONEDNN
  if (strcmp(COHORT_CPU_BLAS, "onednn") == 0 && cohort_onednn_ready() &&
      (!COHORT_CPU_BLAS_AUTO || onednn_suits_this_cpu()))
    return COHORT_CPU_GEMM_ONEDNN;
#endif
  return COHORT_CPU_GEMM_OPENBLAS;
}

/* The build's choice (meson option cpu_blas), made once, at the first GEMM or query. */
static void choose_default(void)
{
  fp32_path = cohort_cpu_gemm_default_fp32_path();
#if COHORT_HAVE_ONEDNN
  bf16_hardware = cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16);
#endif
}

int cohort_cpu_gemm_force(const char *library)
{
  pthread_once(&choice_once, choose_default);
  if (strcmp(library, "openblas") == 0) {
    fp32_path = COHORT_CPU_GEMM_OPENBLAS;
    return 1;
  }
  if (strcmp(library, "onednn") == 0 && cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN)) {
    fp32_path = COHORT_CPU_GEMM_ONEDNN;
    return 1;
  }
  if (strcmp(library, "measure") == 0 && cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_MEASURE)) {
    fp32_path = COHORT_CPU_GEMM_MEASURE;
    return 1;
  }
  return 0;
}

int cohort_cpu_gemm_path_available(CohortCpuGemmPath path)
{
  switch (path) {
  case COHORT_CPU_GEMM_OPENBLAS:
    return 1;
#if COHORT_HAVE_ONEDNN
  case COHORT_CPU_GEMM_ONEDNN:
  case COHORT_CPU_GEMM_MEASURE:
    return cohort_onednn_ready();
  case COHORT_CPU_GEMM_ONEDNN_BF16:
    return cohort_onednn_ready() && cohort_onednn_has_bf16_hardware();
#endif
  default:
    return 0;
  }
}

int cohort_cpu_gemm_select(CohortCpuGemmPath fp32, int bf16_hw)
{
  pthread_once(&choice_once, choose_default);
  if (fp32 == COHORT_CPU_GEMM_ONEDNN_BF16 || !cohort_cpu_gemm_path_available(fp32))
    return 0;
  if (bf16_hw && !cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16))
    return 0;
  fp32_path = fp32;
  bf16_hardware = bf16_hw != 0;
  return 1;
}

CohortCpuGemmPath cohort_cpu_gemm_fp32_path(void)
{
  pthread_once(&choice_once, choose_default);
  return fp32_path;
}

int cohort_cpu_gemm_bf16_hardware(void)
{
  pthread_once(&choice_once, choose_default);
  return bf16_hardware;
}

static void describe_fp32(char *out, size_t size)
{
  static const char *const threading[] = {"sequential", "pthreads", "OpenMP"};
  int par = openblas_get_parallel();
  char openblas[80];
  snprintf(openblas, sizeof openblas, "OpenBLAS sgemm (%s kernels, %s)", openblas_get_corename(),
           par >= 0 && par <= 2 ? threading[par] : "?");
#if COHORT_HAVE_ONEDNN
  if (fp32_path == COHORT_CPU_GEMM_ONEDNN) {
    snprintf(out, size, "oneDNN %s sgemm (%s)", cohort_onednn_version(), cohort_onednn_isa_name());
    return;
  }
  if (fp32_path == COHORT_CPU_GEMM_MEASURE) {
    const char *file = cohort_cpu_gemm_measure_file();
    snprintf(out, size,
             "per shape, the faster as measured on this CPU of %s and oneDNN %s sgemm (%s); "
             "measurements in %s",
             openblas, cohort_onednn_version(), cohort_onednn_isa_name(),
             file[0] ? file : "memory only");
    return;
  }
#endif
  snprintf(out, size, "%s", openblas);
}

const char *cohort_cpu_gemm_describe(CohortGemmMode mode)
{
  static char text[4][4608];
  char lib[4400];
  pthread_once(&choice_once, choose_default);
  describe_fp32(lib, sizeof lib);
  char *out = text[mode & 3];
  switch (mode) {
  case COHORT_GEMM_BF16:
#if COHORT_HAVE_ONEDNN
    if (bf16_hardware) {
      snprintf(out, sizeof text[0],
               "oneDNN %s matmul (%s): bf16 operands, fp32 accumulation in hardware",
               cohort_onednn_version(), cohort_onednn_isa_name());
      break;
    }
#endif
    snprintf(out, sizeof text[0], "emulated: operands rounded to bf16, fp32 products on %s", lib);
    break;
  case COHORT_GEMM_FP16:
    snprintf(out, sizeof text[0], "emulated: operands rounded to fp16, fp32 products on %s", lib);
    break;
  case COHORT_GEMM_FP32:
  case COHORT_GEMM_TF32:
  default:
    snprintf(out, sizeof text[0], "%s", lib);
    break;
  }
  return out;
}

#if COHORT_HAVE_ONEDNN
/* A library failing on a problem it was given is a bug or an exhausted machine: say so once,
 * and let OpenBLAS compute the product. */
static void warn_fallback(const char *what)
{
  static int warned;
  if (!warned) {
    warned = 1;
    fprintf(stderr, "cohort: %s failed on a matrix product; using OpenBLAS for it\n", what);
  }
}
#endif

static void openblas(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void fp32_product(CohortCpuGemmPath path, int trans_a, int trans_b, int M, int N, int K,
                         float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                         float *C, int ldc)
{
#if COHORT_HAVE_ONEDNN
  if (path == COHORT_CPU_GEMM_MEASURE) {
    cohort_cpu_gemm_measured(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (path == COHORT_CPU_GEMM_ONEDNN) {
    /* dnnl_sgemm, not the matmul primitive: 4-8% faster on this model's products (the GEMM
     * study in docs/benchmarks.md), and nothing to cache. */
    if (cohort_onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
      return;
    warn_fallback("oneDNN");
  }
#else
  (void)path;
#endif
  openblas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void out_of_memory(int M, int N, int K)
{
  /* The table's ops cannot fail; running out of memory mid-step is not recoverable. */
  fprintf(stderr, "cohort: out of memory for the operands of a %dx%dx%d GEMM\n", M, N, K);
  abort();
}

/* C = beta C, as BLAS does when there is nothing to multiply (beta = 0 writes zeros, NaN in C
 * included). */
static void scale_only(int M, int N, float beta, float *C, int ldc)
{
  for (int m = 0; m < M; m++) {
    float *row = C + (size_t)m * ldc;
    for (int n = 0; n < N; n++)
      row[n] = beta == 0.0f ? 0.0f : beta * row[n];
  }
}

/* bf16 on bf16 hardware: 0 when oneDNN failed (the caller emulates). */
static int bf16_product(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#if COHORT_HAVE_ONEDNN
  int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const uint16_t *ha = cohort_cpu_pack_bf16(0, A, a_rows, a_cols, lda);
  const uint16_t *hb = cohort_cpu_pack_bf16(1, B, b_rows, b_cols, ldb);
  if (!ha || !hb)
    out_of_memory(M, N, K);
  if (cohort_onednn_gemm_bf16(trans_a, trans_b, M, N, K, alpha, ha, a_cols, hb, b_cols, beta, C,
                              ldc, NULL))
    return 1;
  warn_fallback("oneDNN (bf16)");
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
  (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
#endif
  return 0;
}

/* Rounds both operands as `mode` does, then multiplies them in fp32 on `lib`. */
static void emulated_product(CohortGemmMode mode, CohortCpuGemmPath lib, int trans_a, int trans_b,
                             int M, int N, int K, float alpha, const float *A, int lda,
                             const float *B, int ldb, float beta, float *C, int ldc)
{
  /* The stored matrices: op(A) is [M, K], so A is [K, M] when transposed. */
  int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const float *ra = cohort_cpu_round_operand(0, mode, A, a_rows, a_cols, lda);
  const float *rb = cohort_cpu_round_operand(1, mode, B, b_rows, b_cols, ldb);
  if (!ra || !rb)
    out_of_memory(M, N, K);
  fp32_product(lib, trans_a, trans_b, M, N, K, alpha, ra, a_cols, rb, b_cols, beta, C, ldc);
}

void cohort_cpu_gemm_run(CohortCpuGemmPath path, int trans_a, int trans_b, int M, int N, int K,
                         float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                         float *C, int ldc)
{
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0 || alpha == 0.0f) {
    scale_only(M, N, beta, C, ldc);
    return;
  }
  if (path != COHORT_CPU_GEMM_ONEDNN_BF16) {
    fp32_product(path, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (!bf16_product(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    emulated_product(COHORT_GEMM_BF16, COHORT_CPU_GEMM_OPENBLAS, trans_a, trans_b, M, N, K, alpha,
                     A, lda, B, ldb, beta, C, ldc);
}

void cohort_cpu_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
  pthread_once(&choice_once, choose_default);
  CohortGemmMode mode = cohort_cpu_get_gemm_mode();
  if (mode == COHORT_GEMM_BF16 && bf16_hardware) {
    cohort_cpu_gemm_run(COHORT_CPU_GEMM_ONEDNN_BF16, trans_a, trans_b, M, N, K, alpha, A, lda, B,
                        ldb, beta, C, ldc);
  } else if ((mode == COHORT_GEMM_BF16 || mode == COHORT_GEMM_FP16) && M > 0 && N > 0 && K > 0 &&
             alpha != 0.0f) {
    emulated_product(mode, fp32_path, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                     ldc);
  } else {
    cohort_cpu_gemm_run(fp32_path, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

COHORT_VEC static void add_row(float *restrict out, const float *restrict bias, int cols)
{
  for (int c = 0; c < cols; c++)
    out[c] += bias[c];
}

void cohort_cpu_add_bias(float *out, const float *bias, int N, int cols)
{
#pragma omp parallel for schedule(static) if ((size_t)N * cols >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    add_row(out + (size_t)n * cols, bias, cols);
}

/* Column sums over a stripe of columns, rows in order: the order of the sum does not
 * depend on the thread count. */
COHORT_VEC static void colsum_stripe(float *restrict dbias, const float *restrict dout, int N,
                                     int cols, int c0, int width)
{
  float acc[64];
  for (int j = 0; j < width; j++)
    acc[j] = 0.0f;
  for (int n = 0; n < N; n++) {
    const float *row = dout + (size_t)n * cols + c0;
    for (int j = 0; j < width; j++)
      acc[j] += row[j];
  }
  for (int j = 0; j < width; j++)
    dbias[c0 + j] += acc[j];
}

void cohort_cpu_bias_backward(float *dbias, const float *dout, int N, int cols)
{
  int stripes = (cols + 63) / 64;
#pragma omp parallel for schedule(static) if ((size_t)N * cols >= COHORT_CPU_PAR_MIN)
  for (int s = 0; s < stripes; s++) {
    int c0 = s * 64;
    int width = cols - c0 < 64 ? cols - c0 : 64;
    colsum_stripe(dbias, dout, N, cols, c0, width);
  }
}
