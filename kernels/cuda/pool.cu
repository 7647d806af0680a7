/* Global average pooling: [B, C, HW] to [B, C]; one warp per (b, c) row for the forward. */
#include "cuda.cuh"

#define ROWS_PER_BLOCK 8

__global__ static void pool_kernel(float *out, const float *inp, int rows, int HW)
{
  int lane = threadIdx.x % COHORT_WARP;
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (row >= rows)
    return; /* whole warps leave together */
  const float *x = inp + (size_t)row * HW;
  float s = 0.0f;
  for (int i = lane; i < HW; i += COHORT_WARP)
    s += x[i];
  s = cohort_warp_sum(s);
  if (lane == 0)
    out[row] = s / (float)HW;
}

__global__ static void pool_back_kernel(float *dinp, const float *dout, int HW, size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  dinp[i] += dout[i / HW] / (float)HW;
}

void cohort_cuda_avgpool_global_forward(float *out, const float *inp, int B, int C, int HW)
{
  int rows = B * C;
  if (rows <= 0 || HW <= 0)
    return;
  pool_kernel<<<(rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, ROWS_PER_BLOCK * COHORT_WARP>>>(
      out, inp, rows, HW);
  cohort_cuda_launched("avgpool_global_forward");
}

void cohort_cuda_avgpool_global_backward(float *dinp, const float *dout, int B, int C, int HW)
{
  size_t total = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0) * (HW > 0 ? HW : 0);
  if (total == 0)
    return;
  pool_back_kernel<<<cohort_cuda_blocks(total, 256), 256>>>(dinp, dout, HW, total);
  cohort_cuda_launched("avgpool_global_backward");
}
