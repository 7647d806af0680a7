/* ReLU, with the CPU backend's formulas. */
#include "cuda.cuh"

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
