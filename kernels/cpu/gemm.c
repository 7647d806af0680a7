/* GEMM through OpenBLAS, and the bias ops that go with a linear layer. */
#include "cpu.h"

#include <cblas.h>

void cohort_cpu_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
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
