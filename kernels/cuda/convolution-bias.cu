/* The bias of a convolution (one value per output channel over NCHW), apart from conv2d. */
#include "cuda.cuh"

#define THREADS 256

__global__ static void channel_bias_kernel(float *out, const float *bias, int C, int HW, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] += bias[i / HW % C];
}

/* One block per channel, a fixed-order block sum: no atomics. */
__global__ static void channel_bias_back_kernel(float *dbias, const float *dout, int B, int C,
                                                int HW)
{
  __shared__ double sh[THREADS];
  int c = blockIdx.x;
  double s = 0.0;
  for (size_t j = threadIdx.x; j < (size_t)B * HW; j += THREADS)
    s += dout[((j / HW) * C + c) * HW + j % HW];
  s = cohort_block_sum(s, sh);
  if (threadIdx.x == 0)
    dbias[c] += (float)s;
}

void cohort_cuda_channel_bias_forward(float *out, const float *bias, int B, int C, int HW)
{
  size_t n = (size_t)B * C * HW;
  if (n == 0)
    return;
  channel_bias_kernel<<<cohort_cuda_blocks(n, THREADS), THREADS>>>(out, bias, C, HW, n);
  cohort_cuda_launched("channel_bias_forward");
}

void cohort_cuda_channel_bias_backward(float *dbias, const float *dout, int B, int C, int HW)
{
  if (B <= 0 || C <= 0 || HW <= 0)
    return;
  channel_bias_back_kernel<<<C, THREADS>>>(dbias, dout, B, C, HW);
  cohort_cuda_launched("channel_bias_backward");
}
