/* LayerNorm over the last dimension: one warp per row, two passes (mean, then variance) like
 * the CPU backend. A NULL weight reads as ones and a NULL bias as zeros (DiT's LayerNorms
 * have no affine parameters). */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#define ROWS_PER_BLOCK 8

__global__ static void ln_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, int N, int C, float eps)
{
  int lane = threadIdx.x % COHORT_WARP;
  int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (n >= N)
    return; /* whole warps leave together: no block barrier below */
  const float *x = inp + (size_t)n * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += COHORT_WARP)
    s += x[c];
  float m = cohort_warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += COHORT_WARP)
    v += (x[c] - m) * (x[c] - m);
  float rs = 1.0f / sqrtf(cohort_warp_sum(v) / C + eps);
  float *y = out + (size_t)n * C;
  for (int c = lane; c < C; c += COHORT_WARP)
    y[c] = cohort_ln_norm(x[c], m, rs) * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = rs;
  }
}

void cohort_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int N, int C, float eps)
{
  if (N <= 0 || C <= 0)
    return;
  int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  ln_forward_kernel<<<blocks, ROWS_PER_BLOCK * COHORT_WARP>>>(out, mean, rstd, inp, w, b, N, C,
                                                              eps);
  cohort_cuda_launched("layernorm_forward");
}

/* dinp += rs * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dout * w. */
__global__ static void ln_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, int N,
                                      int C)
{
  int lane = threadIdx.x % COHORT_WARP;
  int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (n >= N)
    return;
  const float *g = dout + (size_t)n * C;
  const float *x = inp + (size_t)n * C;
  float m = mean[n], rs = rstd[n];
  float s1 = 0.0f, s2 = 0.0f;
  for (int c = lane; c < C; c += COHORT_WARP) {
    float dxh = g[c] * (w ? w[c] : 1.0f);
    s1 += dxh;
    s2 += dxh * cohort_ln_norm(x[c], m, rs);
  }
  s1 = cohort_warp_sum(s1) / C;
  s2 = cohort_warp_sum(s2) / C;
  float *d = dinp + (size_t)n * C;
  for (int c = lane; c < C; c += COHORT_WARP)
    d[c] += rs * (g[c] * (w ? w[c] : 1.0f) - s1 - cohort_ln_norm(x[c], m, rs) * s2);
}

/* Column sums of dout * xhat (for dw) and dout (for db) over one chunk of rows, both always
 * (into scratch); the finish kernel adds only the ones asked for. */
__global__ static void ln_param_partial_kernel(float *part_w, float *part_b, const float *dout,
                                               const float *inp, const float *mean,
                                               const float *rstd, int N, int C, int rows_per)
{
  __shared__ float shw[COHORT_COLSUM_TY][COHORT_COLSUM_TX + 1];
  __shared__ float shb[COHORT_COLSUM_TY][COHORT_COLSUM_TX + 1];
  int c = blockIdx.x * COHORT_COLSUM_TX + threadIdx.x;
  int r0 = blockIdx.y * rows_per;
  int r1 = min(N, r0 + rows_per);
  float aw = 0.0f, ab = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += COHORT_COLSUM_TY) {
      float g = dout[(size_t)r * C + c];
      aw += g * cohort_ln_norm(inp[(size_t)r * C + c], mean[r], rstd[r]);
      ab += g;
    }
  shw[threadIdx.y][threadIdx.x] = aw;
  shb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sw = 0.0f, sb = 0.0f;
    for (int y = 0; y < COHORT_COLSUM_TY; y++) {
      sw += shw[y][threadIdx.x];
      sb += shb[y][threadIdx.x];
    }
    part_w[(size_t)blockIdx.y * C + c] = sw;
    part_b[(size_t)blockIdx.y * C + c] = sb;
  }
}

__global__ static void ln_param_finish_kernel(float *dw, float *db, const float *part_w,
                                              const float *part_b, int chunks, int C)
{
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < chunks; k++) {
      sw += part_w[(size_t)k * C + c];
      sb += part_b[(size_t)k * C + c];
    }
    if (dw)
      dw[c] += sw;
    if (db)
      db[c] += sb;
  }
}

void cohort_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean,
                                    const float *rstd, int N, int C)
{
  if (N <= 0 || C <= 0)
    return;
  int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  ln_dinp_kernel<<<blocks, ROWS_PER_BLOCK * COHORT_WARP>>>(dinp, dout, inp, w, mean, rstd, N, C);
  if (!cohort_cuda_launched("layernorm_backward (inputs)") || (!dw && !db))
    return;
  int chunks = cohort_colsum_chunks(N);
  int rows_per = (N + chunks - 1) / chunks;
  float *part = (float *)cohort_cuda_scratch(sizeof(float) * 2 * chunks * C);
  if (!part)
    return;
  float *part_w = part, *part_b = part + (size_t)chunks * C;
  dim3 grid((C + COHORT_COLSUM_TX - 1) / COHORT_COLSUM_TX, chunks);
  ln_param_partial_kernel<<<grid, dim3(COHORT_COLSUM_TX, COHORT_COLSUM_TY)>>>(
      part_w, part_b, dout, inp, mean, rstd, N, C, rows_per);
  if (!cohort_cuda_launched("layernorm_backward (partial sums)"))
    return;
  ln_param_finish_kernel<<<cohort_cuda_blocks(C, 256), 256>>>(dw, db, part_w, part_b, chunks, C);
  cohort_cuda_launched("layernorm_backward (final sums)");
}
