/* Activations: GELU (tanh form), SiLU, SwiGLU and ReLU, forward and backward, element-wise, and the
 * softmax of rows. */
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

__global__ static void swiglu_kernel(float *out, const float *gate, const float *up, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = cohort_silu(gate[i]) * up[i];
}

/* dgate or dup may alias dout: each element is read before the same thread writes it. */
__global__ static void swiglu_back_kernel(float *dgate, float *dup, const float *dout,
                                          const float *gate, const float *up, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  {
    float g = dout[i], x = gate[i], u = up[i];
    dgate[i] = g * u * cohort_silu_grad(x);
    dup[i] = g * cohort_silu(x);
  }
}

void cohort_cuda_swiglu_forward(float *out, const float *gate, const float *up, size_t n)
{
  if (n == 0)
    return;
  swiglu_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, gate, up, n);
  cohort_cuda_launched("swiglu_forward");
}

void cohort_cuda_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate,
                                 const float *up, size_t n)
{
  if (n == 0)
    return;
  swiglu_back_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dgate, dup, dout, gate, up, n);
  cohort_cuda_launched("swiglu_backward");
}

/* Softmax of rows: one block per row, fixed-order block reductions. */
#define SOFTMAX_THREADS 256

__global__ static void softmax_kernel(float *out, const float *inp, int V, float scale)
{
  __shared__ float shm[SOFTMAX_THREADS];
  __shared__ double shs[SOFTMAX_THREADS];
  const float *x = inp + (size_t)blockIdx.x * V;
  float *y = out + (size_t)blockIdx.x * V;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += SOFTMAX_THREADS)
    m = fmaxf(m, x[v] * scale);
  shm[threadIdx.x] = m;
  __syncthreads();
  for (unsigned s = SOFTMAX_THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      shm[threadIdx.x] = fmaxf(shm[threadIdx.x], shm[threadIdx.x + s]);
    __syncthreads();
  }
  m = shm[0];
  double s = 0.0;
  for (int v = threadIdx.x; v < V; v += SOFTMAX_THREADS) {
    float e = expf(x[v] * scale - m);
    y[v] = e;
    s += e;
  }
  float r = (float)(1.0 / cohort_block_sum(s, shs));
  for (int v = threadIdx.x; v < V; v += SOFTMAX_THREADS)
    y[v] *= r;
}

__global__ static void softmax_back_kernel(float *dinp, const float *out, const float *dout, int V,
                                           float scale)
{
  __shared__ double sh[SOFTMAX_THREADS];
  size_t row = (size_t)blockIdx.x * V;
  double s = 0.0;
  for (int v = threadIdx.x; v < V; v += SOFTMAX_THREADS)
    s += (double)dout[row + v] * out[row + v];
  float sf = (float)cohort_block_sum(s, sh);
  for (int v = threadIdx.x; v < V; v += SOFTMAX_THREADS)
    dinp[row + v] = scale * out[row + v] * (dout[row + v] - sf);
}

void cohort_cuda_softmax_forward(float *out, const float *inp, int N, int V, float scale)
{
  if (N <= 0 || V <= 0)
    return;
  softmax_kernel<<<N, SOFTMAX_THREADS>>>(out, inp, V, scale);
  cohort_cuda_launched("softmax_forward");
}

void cohort_cuda_softmax_backward(float *dinp, const float *out, const float *dout, int N, int V,
                                  float scale)
{
  if (N <= 0 || V <= 0)
    return;
  softmax_back_kernel<<<N, SOFTMAX_THREADS>>>(dinp, out, dout, V, scale);
  cohort_cuda_launched("softmax_backward");
}
