/* The smaller DiT ops: SiLU, timestep features, label-embedding rows, the per-sample MSE and
 * axpby, with the CPU backend's per-element formulas (kernels/math-inline.h). */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#define MSE_THREADS 256

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

__global__ static void timestep_kernel(float *out, const float *t, int dim, float max_period,
                                       size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = cohort_timestep_feature(t[i / dim], (int)(i % dim), dim / 2, max_period);
}

void cohort_cuda_timestep_embedding(float *out, const float *t, int B, int dim, float max_period)
{
  size_t n = (size_t)B * dim;
  if (B <= 0 || dim <= 0)
    return;
  timestep_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, t, dim, max_period, n);
  cohort_cuda_launched("timestep_embedding");
}

__global__ static void rows_gather_kernel(float *out, const float *table, const int *rows, int C,
                                          size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = table[(size_t)rows[i / C] * C + i % C];
}

void cohort_cuda_rows_gather(float *out, const float *table, const int *rows, int B, int C)
{
  size_t n = (size_t)B * C;
  if (B <= 0 || C <= 0)
    return;
  rows_gather_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, table, rows, C, n);
  cohort_cuda_launched("rows_gather");
}

/* Thread (b, c) works only when b is the first sample with its row: it adds the rows of
 * every sample with that row, in order of b (the CPU's order), so no two threads write the
 * same element and no atomics are needed. The scans over `rows` are the same for the whole
 * block (one b per blockIdx.y), so those loads are broadcasts. */
__global__ static void rows_scatter_kernel(float *dtable, const float *dout, const int *rows, int B,
                                           int C)
{
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  for (int b = blockIdx.y; b < B; b += gridDim.y) {
    int r = rows[b];
    bool first = true;
    for (int k = 0; k < b && first; k++)
      first = rows[k] != r;
    if (!first || c >= C)
      continue;
    float *dst = dtable + (size_t)r * C + c;
    float acc = *dst;
    for (int k = b; k < B; k++)
      if (rows[k] == r)
        acc += dout[(size_t)k * C + c];
    *dst = acc;
  }
}

void cohort_cuda_rows_scatter_add(float *dtable, const float *dout, const int *rows, int B, int C)
{
  if (B <= 0 || C <= 0)
    return;
  dim3 grid((unsigned)((C + 255) / 256), (unsigned)(B < 65535 ? B : 65535));
  rows_scatter_kernel<<<grid, 256>>>(dtable, dout, rows, B, C);
  cohort_cuda_launched("rows_scatter_add");
}

/* One block per sample: strided partial sums, then the block's fixed tree. */
__global__ static void mse_kernel(float *losses, const float *pred, const float *target, int B,
                                  int D)
{
  __shared__ float sh[MSE_THREADS];
  for (int b = blockIdx.x; b < B; b += gridDim.x) {
    const float *p = pred + (size_t)b * D, *q = target + (size_t)b * D;
    float acc = 0.0f;
    for (int d = threadIdx.x; d < D; d += MSE_THREADS)
      acc += (p[d] - q[d]) * (p[d] - q[d]);
    float s = cohort_block_sum(acc, sh);
    if (threadIdx.x == 0)
      losses[b] = s / D;
  }
}

void cohort_cuda_mse_forward(float *losses, const float *pred, const float *target, int B, int D)
{
  if (B <= 0 || D <= 0)
    return;
  unsigned blocks = (unsigned)(B < 65535 ? B : 65535);
  mse_kernel<<<blocks, MSE_THREADS>>>(losses, pred, target, B, D);
  cohort_cuda_launched("mse_forward");
}

__global__ static void mse_back_kernel(float *dpred, const float *pred, const float *target,
                                       size_t n, float k)
{
  COHORT_GRID_STRIDE(i, n)
  dpred[i] = (pred[i] - target[i]) * k;
}

void cohort_cuda_mse_backward(float *dpred, const float *pred, const float *target, int B, int D,
                              float scale)
{
  size_t n = (size_t)B * D;
  if (B <= 0 || D <= 0)
    return;
  float k = 2.0f * scale / (float)D; /* the CPU's factor, rounded the same way */
  mse_back_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dpred, pred, target, n, k);
  cohort_cuda_launched("mse_backward");
}

/* out may alias x or y: each element is read before the same thread writes it. */
__global__ static void axpby_kernel(float *out, float a, const float *x, float b, const float *y,
                                    size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  out[i] = a * x[i] + b * y[i];
}

void cohort_cuda_axpby(float *out, float a, const float *x, float b, const float *y, size_t n)
{
  if (n == 0)
    return;
  axpby_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, a, x, b, y, n);
  cohort_cuda_launched("axpby");
}
