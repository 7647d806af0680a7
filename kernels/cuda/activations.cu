/* Activations: GELU (tanh form), SiLU and ReLU, forward and backward, element-wise. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#define MSE_THREADS 256

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

/* x < 0 ? 0 : x lets a NaN through, as torch.relu does. */
__global__ static void relu_kernel(float *out, const float *inp, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  {
    float x = inp[i];
    out[i] = x < 0.0f ? 0.0f : x;
  }
}

/* dinp may alias dout: each element is read before it is written by the same thread. */
__global__ static void relu_back_kernel(float *dinp, const float *x, const float *dout, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  dinp[i] = x[i] > 0.0f ? dout[i] : 0.0f;
}

void cohort_cuda_relu_forward(float *out, const float *inp, size_t n)
{
  if (n == 0)
    return;
  relu_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, inp, n);
  cohort_cuda_launched("relu_forward");
}

void cohort_cuda_relu_backward(float *dinp, const float *x, const float *dout, size_t n)
{
  if (n == 0)
    return;
  relu_back_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dinp, x, dout, n);
  cohort_cuda_launched("relu_backward");
}

__global__ static void silu_kernel(float *out, const float *inp, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = cohort_silu(inp[i]);
}

/* dinp may alias dout: each element is read before the same thread writes it. */
__global__ static void silu_back_kernel(float *dinp, const float *inp, const float *dout, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  dinp[i] = dout[i] * cohort_silu_grad(inp[i]);
}

void cohort_cuda_silu_forward(float *out, const float *inp, size_t n)
{
  if (n == 0)
    return;
  silu_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, inp, n);
  cohort_cuda_launched("silu_forward");
}

void cohort_cuda_silu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
  if (n == 0)
    return;
  silu_back_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dinp, inp, dout, n);
  cohort_cuda_launched("silu_backward");
}
