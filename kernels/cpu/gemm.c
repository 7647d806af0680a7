/* GEMM through OpenBLAS, and the bias ops that go with a linear layer. */
#include "cpu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

void cohort_cpu_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
  CohortGemmMode mode = cohort_cpu_get_gemm_mode();
  if ((mode == COHORT_GEMM_BF16 || mode == COHORT_GEMM_FP16) && M > 0 && N > 0 && K > 0) {
    /* The stored matrices: op(A) is [M, K], so A is [K, M] when transposed. */
    int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    const float *ra = cohort_cpu_round_operand(0, A, a_rows, a_cols, lda);
    const float *rb = cohort_cpu_round_operand(1, B, b_rows, b_cols, ldb);
    if (!ra || !rb) {
      /* The table's ops cannot fail; running out of memory mid-step is not recoverable. */
      fprintf(stderr, "cohort: out of memory for the operands of a %dx%dx%d GEMM\n", M, N, K);
      abort();
    }
    A = ra;
    lda = a_cols;
    B = rb;
    ldb = b_cols;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
