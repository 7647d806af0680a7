/* GEMM through cuBLAS, and the bias ops that go with a linear layer. */
#include "cuda.cuh"

/* bf16/fp16 mode: both operands rounded into one scratch buffer, then a tensor-core GEMM
 * with fp32 accumulation and an fp32 C (cublasGemmEx, CUBLAS_COMPUTE_32F). */
static void gemm_16bit(cublasHandle_t h, int fp16, int trans_a, int trans_b, int M, int N, int K,
                       float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                       float *C, int ldc)
{
  int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  size_t a_bytes = ((size_t)a_rows * a_cols * 2 + 255) / 256 * 256;
  size_t b_bytes = (size_t)b_rows * b_cols * 2;
  char *buf = (char *)cohort_cuda_scratch(a_bytes + b_bytes);
  if (!buf)
    return;
  void *pa = cohort_cuda_pack_operand(buf, A, a_rows, a_cols, lda, fp16);
  void *pb = cohort_cuda_pack_operand(buf + a_bytes, B, b_rows, b_cols, ldb, fp16);
  if (!pa || !pb)
    return;
  cudaDataType_t t = fp16 ? CUDA_R_16F : CUDA_R_16BF;
  cohort_cuda_blas_ok(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, pb, t,
                                   b_cols, pa, t, a_cols, &beta, C, CUDA_R_32F, ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      fp16 ? "cublasGemmEx (fp16)" : "cublasGemmEx (bf16)");
}

void cohort_cuda_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
  cublasHandle_t h = cohort_cuda_blas();
  if (!h)
    return;
  CohortGemmMode mode = cohort_cuda_get_gemm_mode();
  if ((mode == COHORT_GEMM_BF16 || mode == COHORT_GEMM_FP16) && M > 0 && N > 0 && K > 0) {
    gemm_16bit(h, mode == COHORT_GEMM_FP16, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta,
               C, ldc);
    return;
  }
  /* cuBLAS is column-major: a row-major matrix is its transpose there. So the row-major
   * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, with the operands
   * swapped and the same transpose flags. */
  cohort_cuda_blas_ok(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A,
                                  lda, &beta, C, ldc),
                      "cublasSgemm");
}

__global__ static void add_bias_kernel(float *out, const float *bias, size_t n, int cols)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] += bias[i % cols];
}

void cohort_cuda_add_bias(float *out, const float *bias, int N, int cols)
{
  size_t n = (size_t)N * cols;
  if (n == 0)
    return;
  add_bias_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, bias, n, cols);
  cohort_cuda_launched("add_bias");
}

/* One chunk of rows, 32 columns: each thread row sums every 8th row in order, then the 8
 * partial sums are added in order. */
__global__ static void colsum_partial_kernel(float *part, const float *x, int N, int cols,
                                             int rows_per)
{
  __shared__ float sh[COHORT_COLSUM_TY][COHORT_COLSUM_TX + 1];
  int c = blockIdx.x * COHORT_COLSUM_TX + threadIdx.x;
  int r0 = blockIdx.y * rows_per;
  int r1 = min(N, r0 + rows_per);
  float acc = 0.0f;
  if (c < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += COHORT_COLSUM_TY)
      acc += x[(size_t)r * cols + c];
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.0f;
    for (int y = 0; y < COHORT_COLSUM_TY; y++)
      s += sh[y][threadIdx.x];
    part[(size_t)blockIdx.y * cols + c] = s;
  }
}

__global__ static void colsum_finish_kernel(float *out, const float *part, int chunks, int cols)
{
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < chunks; k++)
      s += part[(size_t)k * cols + c];
    out[c] += s;
  }
}

void cohort_cuda_bias_backward(float *dbias, const float *dout, int N, int cols)
{
  if (N <= 0 || cols <= 0)
    return;
  int chunks = cohort_colsum_chunks(N);
  int rows_per = (N + chunks - 1) / chunks;
  float *part = (float *)cohort_cuda_scratch(sizeof(float) * chunks * cols);
  if (!part)
    return;
  dim3 grid((cols + COHORT_COLSUM_TX - 1) / COHORT_COLSUM_TX, chunks);
  colsum_partial_kernel<<<grid, dim3(COHORT_COLSUM_TX, COHORT_COLSUM_TY)>>>(part, dout, N, cols,
                                                                            rows_per);
  if (!cohort_cuda_launched("bias_backward (partial sums)"))
    return;
  colsum_finish_kernel<<<cohort_cuda_blocks(cols, 256), 256>>>(dbias, part, chunks, cols);
  cohort_cuda_launched("bias_backward (final sums)");
}
