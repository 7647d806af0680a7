/* Reduced precision on the GPU: the operands of bf16/fp16 GEMMs, and the bfloat16 conversions
 * of the bf16 gradient all-reduce. Rounding goes through kernels/math-inline.h, the functions
 * the CPU backend uses, so both backends give the same bits. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* A rows x cols matrix with row stride ld into a rows x cols one of 16-bit values with row
 * stride dld. Rows along the grid's y, columns along x: no division per element (the first
 * H200 run's one-dimensional version, a 64-bit division and remainder per value, moved about
 * 0.5 TB/s and took 21 of 139 ms of a GPT-2 124M bf16 step). */
__global__ static void pack_bf16_kernel(uint16_t *dst, const float *src, int rows, int cols, int ld,
                                        int dld)
{
  for (int r = blockIdx.y; r < rows; r += gridDim.y)
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
      dst[(size_t)r * dld + c] = cohort_f32_to_bf16(src[(size_t)r * ld + c]);
}

__global__ static void pack_fp16_kernel(__half *dst, const float *src, int rows, int cols, int ld,
                                        int dld)
{
  /* cohort_round_fp16 picks the value (the CPU's rounding); the conversion is then exact. */
  for (int r = blockIdx.y; r < rows; r += gridDim.y)
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
      dst[(size_t)r * dld + c] = __float2half_rn(cohort_round_fp16(src[(size_t)r * ld + c]));
}

void *cohort_cuda_pack_operand(void *dst, const float *src, int rows, int cols, int ld, int dld,
                               int fp16)
{
  if (rows <= 0 || cols <= 0)
    return dst;
  unsigned gx = (unsigned)((cols + 255) / 256), gy = (unsigned)(rows < 65535 ? rows : 65535);
  dim3 grid(gx < 64 ? gx : 64, gy);
  if (fp16)
    pack_fp16_kernel<<<grid, 256>>>((__half *)dst, src, rows, cols, ld, dld);
  else
    pack_bf16_kernel<<<grid, 256>>>((uint16_t *)dst, src, rows, cols, ld, dld);
  return cohort_cuda_launched("gemm (operand rounding)") ? dst : NULL;
}

__global__ static void to_fp16_kernel(__half *dst, const float *src, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  dst[i] = __float2half_rn(cohort_round_fp16(src[i]));
}

__global__ static void to_bf16_kernel(uint16_t *dst, const float *src, size_t n);

bool cohort_cuda_round_copy(void *dst, const float *src, size_t n, int fp16)
{
  if (n == 0)
    return true;
  if (fp16)
    to_fp16_kernel<<<cohort_cuda_blocks(n, 256), 256>>>((__half *)dst, src, n);
  else
    to_bf16_kernel<<<cohort_cuda_blocks(n, 256), 256>>>((uint16_t *)dst, src, n);
  return cohort_cuda_launched("gemm (weights' 16-bit copy)");
}

__global__ static void to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  dst[i] = cohort_f32_to_bf16(src[i]);
}

__global__ static void from_bf16_kernel(float *dst, const uint16_t *src, size_t n, float s)
{
  COHORT_GRID_STRIDE(i, n)
  dst[i] = s * cohort_bf16_to_f32(src[i]);
}

void cohort_cuda_to_bf16(uint16_t *dst, const float *src, size_t n)
{
  if (n == 0)
    return;
  to_bf16_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dst, src, n);
  cohort_cuda_launched("to_bf16");
}

void cohort_cuda_from_bf16(float *dst, const uint16_t *src, size_t n, float s)
{
  if (n == 0)
    return;
  from_bf16_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dst, src, n, s);
  cohort_cuda_launched("from_bf16");
}

/* The DDP reducer's bf16 all-reduce runs these on a stream of its own, so its conversions wait
 * for one bucket's gradients (an event) instead of for everything queued on the legacy default
 * stream, and the rest of backward keeps running. */

__global__ static void from_bf16_div_kernel(float *dst, const uint16_t *src, size_t n, float d)
{
  COHORT_GRID_STRIDE(i, n)
  dst[i] = cohort_bf16_to_f32(src[i]) / d;
}

int cohort_cuda_to_bf16_on(void *stream, void *after_event, uint16_t *dst, const float *src,
                           size_t n, void *done_event)
{
  cudaStream_t s = (cudaStream_t)stream;
  if (after_event &&
      !cohort_cuda_ok(cudaStreamWaitEvent(s, (cudaEvent_t)after_event, 0), "cudaStreamWaitEvent"))
    return -1;
  if (n > 0) {
    to_bf16_kernel<<<cohort_cuda_blocks(n, 256), 256, 0, s>>>(dst, src, n);
    if (!cohort_cuda_launched("to_bf16 (bucket)"))
      return -1;
  }
  if (done_event && !cohort_cuda_ok(cudaEventRecord((cudaEvent_t)done_event, s), "cudaEventRecord"))
    return -1;
  return 0;
}

int cohort_cuda_from_bf16_div_on(void *stream, float *dst, const uint16_t *src, size_t n,
                                 float divisor)
{
  cudaStream_t s = (cudaStream_t)stream;
  if (n > 0) {
    from_bf16_div_kernel<<<cohort_cuda_blocks(n, 256), 256, 0, s>>>(dst, src, n, divisor);
    if (!cohort_cuda_launched("from_bf16 (bucket)"))
      return -1;
  }
  return cohort_cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize") ? 0 : -1;
}
