/* Element-wise ops: tanh-GELU and the residual add, with the CPU backend's per-element math. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

__global__ static void gelu_kernel(float *out, const float *inp, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = cohort_gelu(inp[i]);
}

/* dinp may alias dout: each element is read before it is written by the same thread. */
__global__ static void gelu_back_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  dinp[i] = dout[i] * cohort_gelu_grad(inp[i]);
}

__global__ static void add_kernel(float *out, const float *a, const float *b, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = a[i] + b[i];
}

void cohort_cuda_gelu_forward(float *out, const float *inp, size_t n)
{
  if (n == 0)
    return;
  gelu_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, inp, n);
  cohort_cuda_launched("gelu_forward");
}

void cohort_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
  if (n == 0)
    return;
  gelu_back_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dinp, inp, dout, n);
  cohort_cuda_launched("gelu_backward");
}

void cohort_cuda_residual_forward(float *out, const float *a, const float *b, size_t n)
{
  if (n == 0)
    return;
  add_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, a, b, n);
  cohort_cuda_launched("residual_forward");
}
