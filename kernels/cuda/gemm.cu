/* GEMM through cuBLAS, and the bias ops that go with a linear layer. */
#include "cuda.cuh"

/* ---- the weights' 16-bit copy (cohort_cuda_weights_begin) ---- */

static struct {
  int active;          /* inside a scope */
  const float *params; /* the scope's weights, n floats */
  size_t n;
  int device;
  void *copy; /* cap 16-bit values on `device`, kept for the process */
  size_t cap;
  CohortGemmMode mode; /* what `copy` holds: BF16, FP16, or FP32 for nothing yet */
  size_t uses;
} weights; /* zeroed: mode COHORT_GEMM_FP32, nothing rounded yet */

int cohort_cuda_weights_begin(const float *params, size_t n)
{
  weights.active = 0;
  weights.mode = COHORT_GEMM_FP32; /* the weights changed since the last scope */
  int d = cohort_cuda_get_device();
  if (params == NULL || n == 0 || d < 0)
    return -1;
  if (weights.copy == NULL || weights.cap < n || weights.device != d) {
    if (weights.copy && cudaFree(weights.copy) != cudaSuccess)
      (void)cudaGetLastError();
    weights.copy = NULL;
    weights.cap = 0;
    if (cudaMalloc(&weights.copy, n * sizeof(uint16_t)) != cudaSuccess) {
      /* optional: the GEMMs round their operands per call, as outside a scope */
      (void)cudaGetLastError();
      weights.copy = NULL;
      return -1;
    }
    weights.cap = n;
    weights.device = d;
  }
  weights.params = params;
  weights.n = n;
  weights.active = 1;
  return 0;
}

void cohort_cuda_weights_end(void)
{
  weights.active = 0;
}

size_t cohort_cuda_weights_uses(void)
{
  return weights.uses;
}

/* The 16-bit copy of the rows x cols operand at X (row stride ld) when it lies inside the
 * scope's weights, with the same offsets and stride; NULL otherwise. The first use in a scope
 * (or in another mode) rounds all the weights, once. */
static const uint16_t *weights_operand(const float *X, int rows, int cols, int ld, int fp16)
{
  if (!weights.active || weights.device != cohort_cuda_get_device() || X < weights.params)
    return NULL;
  size_t off = (size_t)(X - weights.params), extent = (size_t)(rows - 1) * ld + cols;
  if (off >= weights.n || extent > weights.n - off)
    return NULL;
  CohortGemmMode want = fp16 ? COHORT_GEMM_FP16 : COHORT_GEMM_BF16;
  if (weights.mode != want) {
    if (!cohort_cuda_round_copy(weights.copy, weights.params, weights.n, fp16))
      return NULL;
    weights.mode = want;
  }
  weights.uses++;
  return (const uint16_t *)weights.copy + off;
}

/* ---- bf16/fp16 products ---- */

static size_t pack_limit = (size_t)256 << 20;

void cohort_cuda_set_pack_limit(size_t bytes)
{
  pack_limit = bytes ? bytes : (size_t)256 << 20;
}

/* How many of `total` rows (or columns) of `row_bytes` each fit half the packing limit; all
 * of them when they fit, else a multiple of 64 where possible. */
static int chunk_of(int total, size_t row_bytes)
{
  size_t half = pack_limit / 2;
  if (row_bytes == 0 || (size_t)total * row_bytes <= half)
    return total;
  size_t k = half / row_bytes;
  if (k >= 64)
    k = k / 64 * 64;
  return k < 1 ? 1 : (int)k;
}

static size_t round256(size_t bytes)
{
  return (bytes + 255) / 256 * 256;
}

/* Row strides of packed operands and staged results: multiples of 8 values, so that every row
 * starts on 16 bytes. cuBLAS picks its kernels by the alignment of the leading dimensions: with
 * GPT-2's 50257-word vocabulary the logits' gradient as an operand, and the logits as a result,
 * took its slowest ones (sm75, "align1"): 23 of the 364 ms of a 124M bf16 step on the first
 * H200 run. */
static int pad8(int n)
{
  return (n + 7) / 8 * 8;
}

/* C = alpha op(A) op(B) + beta C with both operands rounded to bf16 (fp16), tensor-core
 * products, fp32 accumulation and an fp32 C (cublasGemmEx, CUBLAS_COMPUTE_32F). An operand
 * inside the weights' copy is read from it; the others are rounded into scratch (row strides
 * padded to 8 values), in chunks of rows of op(A) and columns of op(B) that keep the rounded
 * values under the packing limit (the tied head's gradient at GPT-2 batch 16 x 1024 would need
 * 1.65 GB at once). A C whose rows do not start on 16 bytes is computed in an aligned staging
 * block of the chunk's size (C copied in first when beta is not 0) and copied back. */
static void gemm_16bit(cublasHandle_t h, int fp16, int trans_a, int trans_b, int M, int N, int K,
                       float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                       float *C, int ldc)
{
  const uint16_t *wa = weights_operand(A, trans_a ? K : M, trans_a ? M : K, lda, fp16);
  const uint16_t *wb = weights_operand(B, trans_b ? N : K, trans_b ? K : N, ldb, fp16);
  int kp = pad8(K);
  int mc = chunk_of(M, wa ? 0 : (size_t)kp * 2), nc = chunk_of(N, wb ? 0 : (size_t)kp * 2);
  bool stage = ldc % 4 != 0 || (uintptr_t)C % 16 != 0;
  if (stage) {
    int ms = chunk_of(M, (size_t)pad8(nc) * 4);
    mc = ms < mc ? ms : mc;
  }
  size_t a_bytes = wa ? 0 : round256(trans_a ? (size_t)K * pad8(mc) * 2 : (size_t)mc * kp * 2);
  size_t b_bytes = wb ? 0 : round256(trans_b ? (size_t)nc * kp * 2 : (size_t)K * pad8(nc) * 2);
  size_t s_bytes = stage ? (size_t)mc * pad8(nc) * 4 : 0;
  size_t total = a_bytes + b_bytes + s_bytes;
  char *buf = total ? (char *)cohort_cuda_scratch(total) : NULL;
  if (total && !buf)
    return;
  float *staged = stage ? (float *)(buf + a_bytes + b_bytes) : NULL;
  cudaDataType_t t = fp16 ? CUDA_R_16F : CUDA_R_16BF;
  const char *what = fp16 ? "cublasGemmEx (fp16)" : "cublasGemmEx (bf16)";
  for (int m0 = 0; m0 < M; m0 += mc) {
    int mm = M - m0 < mc ? M - m0 : mc;
    /* rows m0.. of op(A): rows of A, or its columns when transposed */
    const void *pa = wa ? (const void *)(wa + (trans_a ? (size_t)m0 : (size_t)m0 * lda)) : buf;
    int la = wa ? lda : trans_a ? pad8(mm) : kp;
    if (!wa &&
        !(trans_a ? cohort_cuda_pack_operand(buf, A + m0, K, mm, lda, la, fp16)
                  : cohort_cuda_pack_operand(buf, A + (size_t)m0 * lda, mm, K, lda, la, fp16)))
      return;
    for (int n0 = 0; n0 < N; n0 += nc) {
      int nn = N - n0 < nc ? N - n0 : nc;
      /* columns n0.. of op(B): columns of B, or its rows when transposed */
      const void *pb =
          wb ? (const void *)(wb + (trans_b ? (size_t)n0 * ldb : (size_t)n0)) : buf + a_bytes;
      int lb = wb ? ldb : trans_b ? kp : pad8(nn);
      bool packed = wb || (nc == N && m0 > 0); /* one chunk of B: rounded once */
      if (!packed &&
          !(trans_b ? cohort_cuda_pack_operand(buf + a_bytes, B + (size_t)n0 * ldb, nn, K, ldb, lb,
                                               fp16)
                    : cohort_cuda_pack_operand(buf + a_bytes, B + n0, K, nn, ldb, lb, fp16)))
        return;
      float *dst = C + (size_t)m0 * ldc + n0, *out = stage ? staged : dst;
      int lc = stage ? pad8(nn) : ldc;
      if (stage && beta != 0.0f &&
          !cohort_cuda_ok(cudaMemcpy2DAsync(staged, (size_t)lc * 4, dst, (size_t)ldc * 4,
                                            (size_t)nn * 4, mm, cudaMemcpyDeviceToDevice, 0),
                          "gemm (C into staging)"))
        return;
      /* cuBLAS is column-major: the row-major C = op(A) op(B) is computed as the column-major
       * C^T = op(B)^T op(A)^T, operands swapped, transpose flags kept */
      if (!cohort_cuda_blas_ok(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, nn, mm, K, &alpha,
                                            pb, t, lb, pa, t, la, &beta, out, CUDA_R_32F, lc,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                               what))
        return;
      if (stage &&
          !cohort_cuda_ok(cudaMemcpy2DAsync(dst, (size_t)ldc * 4, staged, (size_t)lc * 4,
                                            (size_t)nn * 4, mm, cudaMemcpyDeviceToDevice, 0),
                          "gemm (staging into C)"))
        return;
    }
  }
}

/* gemm_16bit over pieces whose contiguous extents are multiples of 8 (C's and B's columns, A's
 * columns when transposed, the inner dimension where an operand's rows run along it) and the
 * tails of fewer than 8: cuBLAS's aligned kernels need the extents, not only the strides, to be
 * multiples of the vector width (with the strides padded, GPT-2's 50257-wide logits still ran
 * the sm75 align1 kernels on the second H200 run). The tail along the inner dimension adds
 * into C (beta 1). */
static void gemm_16bit_split(cublasHandle_t h, int fp16, int ta, int tb, int M, int N, int K,
                             float alpha, const float *A, int lda, const float *B, int ldb,
                             float beta, float *C, int ldc)
{
  if (N > 8 && N % 8) {
    int n8 = N / 8 * 8;
    gemm_16bit_split(h, fp16, ta, tb, M, n8, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_16bit_split(h, fp16, ta, tb, M, N - n8, K, alpha, A, lda,
                     tb ? B + (size_t)n8 * ldb : B + n8, ldb, beta, C + n8, ldc);
  } else if (ta && M > 8 && M % 8) {
    int m8 = M / 8 * 8;
    gemm_16bit_split(h, fp16, ta, tb, m8, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_16bit_split(h, fp16, ta, tb, M - m8, N, K, alpha, A + m8, lda, B, ldb, beta,
                     C + (size_t)m8 * ldc, ldc);
  } else if ((!ta || tb) && K > 8 && K % 8) {
    int k8 = K / 8 * 8;
    gemm_16bit_split(h, fp16, ta, tb, M, N, k8, alpha, A, lda, B, ldb, beta, C, ldc);
    gemm_16bit_split(h, fp16, ta, tb, M, N, K - k8, alpha, ta ? A + (size_t)k8 * lda : A + k8, lda,
                     tb ? B + k8 : B + (size_t)k8 * ldb, ldb, 1.0f, C, ldc);
  } else {
    gemm_16bit(h, fp16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

void cohort_cuda_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
  cublasHandle_t h = cohort_cuda_blas();
  if (!h)
    return;
  CohortGemmMode mode = cohort_cuda_get_gemm_mode();
  if ((mode == COHORT_GEMM_BF16 || mode == COHORT_GEMM_FP16) && M > 0 && N > 0 && K > 0) {
    gemm_16bit_split(h, mode == COHORT_GEMM_FP16, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb,
                     beta, C, ldc);
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
