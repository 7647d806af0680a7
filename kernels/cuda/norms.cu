/* Normalisations: LayerNorm (GPT, DiT), RMSNorm (Llama, Qwen), BatchNorm2d split into the steps
 * that SyncBatchNorm combines across ranks, and GroupNorm (the VAE). */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#define ROWS_PER_BLOCK 8
#define THREADS        256 /* a power of two, for cohort_block_sum */
#define MAX_CHUNKS     64
#define MIN_CHUNK      2048

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

/* RMSNorm: one warp per row, as LayerNorm. */
__global__ static void rms_forward_kernel(float *out, float *rstd, const float *inp, const float *w,
                                          int N, int C, float eps)
{
  int lane = threadIdx.x % COHORT_WARP;
  int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (n >= N)
    return;
  const float *x = inp + (size_t)n * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += COHORT_WARP)
    s += x[c] * x[c];
  float rs = 1.0f / sqrtf(cohort_warp_sum(s) / C + eps);
  float *y = out + (size_t)n * C;
  for (int c = lane; c < C; c += COHORT_WARP)
    y[c] = (x[c] * rs) * (w ? w[c] : 1.0f);
  if (lane == 0)
    rstd[n] = rs;
}

void cohort_cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                                 int C, float eps)
{
  if (N <= 0 || C <= 0)
    return;
  int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  rms_forward_kernel<<<blocks, ROWS_PER_BLOCK * COHORT_WARP>>>(out, rstd, inp, w, N, C, eps);
  cohort_cuda_launched("rmsnorm_forward");
}

/* dinp += rs * (g - xhat * mean(g * xhat)), g = dout * w, xhat = x * rs. */
__global__ static void rms_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                       const float *w, const float *rstd, int N, int C)
{
  int lane = threadIdx.x % COHORT_WARP;
  int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (n >= N)
    return;
  const float *g = dout + (size_t)n * C, *x = inp + (size_t)n * C;
  float rs = rstd[n], s = 0.0f;
  for (int c = lane; c < C; c += COHORT_WARP)
    s += g[c] * (w ? w[c] : 1.0f) * (x[c] * rs);
  s = cohort_warp_sum(s) / C;
  float *d = dinp + (size_t)n * C;
  for (int c = lane; c < C; c += COHORT_WARP)
    d[c] += rs * (g[c] * (w ? w[c] : 1.0f) - (x[c] * rs) * s);
}

/* Column sums of dout * xhat over one chunk of rows, into scratch. */
__global__ static void rms_param_partial_kernel(float *part, const float *dout, const float *inp,
                                                const float *rstd, int N, int C, int rows_per)
{
  __shared__ float sh[COHORT_COLSUM_TY][COHORT_COLSUM_TX + 1];
  int c = blockIdx.x * COHORT_COLSUM_TX + threadIdx.x;
  int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
  float a = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += COHORT_COLSUM_TY)
      a += dout[(size_t)r * C + c] * (inp[(size_t)r * C + c] * rstd[r]);
  sh[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int y = 0; y < COHORT_COLSUM_TY; y++)
      s += sh[y][threadIdx.x];
    part[(size_t)blockIdx.y * C + c] = s;
  }
}

void cohort_cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                  const float *w, const float *rstd, int N, int C)
{
  if (N <= 0 || C <= 0)
    return;
  int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
  rms_dinp_kernel<<<blocks, ROWS_PER_BLOCK * COHORT_WARP>>>(dinp, dout, inp, w, rstd, N, C);
  if (!cohort_cuda_launched("rmsnorm_backward (inputs)") || !dw)
    return;
  int chunks = cohort_colsum_chunks(N);
  int rows_per = (N + chunks - 1) / chunks;
  float *part = (float *)cohort_cuda_scratch(sizeof(float) * chunks * C);
  if (!part)
    return;
  dim3 grid((C + COHORT_COLSUM_TX - 1) / COHORT_COLSUM_TX, chunks);
  rms_param_partial_kernel<<<grid, dim3(COHORT_COLSUM_TX, COHORT_COLSUM_TY)>>>(
      part, dout, inp, rstd, N, C, rows_per);
  if (!cohort_cuda_launched("rmsnorm_backward (partial sums)"))
    return;
  /* the LayerNorm finish kernel with no bias gradient */
  ln_param_finish_kernel<<<cohort_cuda_blocks(C, 256), 256>>>(dw, NULL, part, part, chunks, C);
  cohort_cuda_launched("rmsnorm_backward (final sums)");
}

static int chunks_for(size_t nv, size_t *per)
{
  size_t chunks = (nv + MIN_CHUNK - 1) / MIN_CHUNK;
  chunks = chunks < 1 ? 1 : (chunks > MAX_CHUNKS ? MAX_CHUNKS : chunks);
  *per = (nv + chunks - 1) / chunks;
  return (int)chunks;
}

/* Offset of value j of channel c: j runs over the B rows of HW values. */
__device__ static inline size_t chan_index(size_t j, int c, int C, int HW)
{
  return (j / HW * C + c) * (size_t)HW + j % HW;
}

/* Per (chunk, channel): count, mean and M2 of the chunk, two passes (the second re-reads the
 * chunk from cache), into part[(c * chunks + chunk) * 3 ...]. */
__global__ static void stats_partial_kernel(double *part, const float *x, int B, int C, int HW,
                                            size_t per)
{
  __shared__ double sh[THREADS];
  int c = blockIdx.y, k = blockIdx.x;
  size_t nv = (size_t)B * HW, j0 = (size_t)k * per;
  size_t j1 = j0 + per < nv ? j0 + per : nv;
  double s = 0.0;
  for (size_t j = j0 + threadIdx.x; j < j1; j += THREADS)
    s += x[chan_index(j, c, C, HW)];
  double n = j1 > j0 ? (double)(j1 - j0) : 0.0;
  s = cohort_block_sum(s, sh);
  double m = n > 0.0 ? s / n : 0.0, q = 0.0;
  for (size_t j = j0 + threadIdx.x; j < j1; j += THREADS) {
    double d = x[chan_index(j, c, C, HW)] - m;
    q += d * d;
  }
  q = cohort_block_sum(q, sh);
  if (threadIdx.x == 0) {
    double *out = part + ((size_t)c * gridDim.x + k) * 3;
    out[0] = n;
    out[1] = m;
    out[2] = q;
  }
}

/* Chan's formula: (n, m, q) += (nb, mb, qb). */
__device__ static inline void chan_add(double *n, double *m, double *q, double nb, double mb,
                                       double qb)
{
  if (nb <= 0.0)
    return;
  double delta = mb - *m, tot = *n + nb;
  *m += delta * (nb / tot);
  *q += qb + delta * delta * (*n * nb / tot);
  *n = tot;
}

__global__ static void stats_finish_kernel(float *mean, float *m2, const double *part, int chunks,
                                           int C)
{
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    double n = 0.0, m = 0.0, q = 0.0;
    for (int k = 0; k < chunks; k++) {
      const double *p = part + ((size_t)c * chunks + k) * 3;
      chan_add(&n, &m, &q, p[0], p[1], p[2]);
    }
    mean[c] = (float)m;
    m2[c] = (float)q;
  }
}

void cohort_cuda_bn_stats(const float *x, int B, int C, int HW, float *mean, float *m2)
{
  if (C <= 0)
    return;
  size_t nv = (size_t)(B > 0 ? B : 0) * (HW > 0 ? HW : 0), per;
  int chunks = chunks_for(nv, &per);
  double *part = (double *)cohort_cuda_scratch(sizeof(double) * 3 * chunks * C);
  if (!part)
    return;
  stats_partial_kernel<<<dim3(chunks, C), THREADS>>>(part, x, B, C, HW, per);
  if (!cohort_cuda_launched("bn_stats (chunks)"))
    return;
  stats_finish_kernel<<<cohort_cuda_blocks(C, THREADS), THREADS>>>(mean, m2, part, chunks, C);
  cohort_cuda_launched("bn_stats (combine)");
}

__global__ static void combine_kernel(float *mean, float *m2, const float *ranks, int R, int C)
{
  size_t stride = 2 * (size_t)C + 1;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    double n = 0.0, m = 0.0, q = 0.0;
    for (int r = 0; r < R; r++) {
      const float *row = ranks + r * stride;
      chan_add(&n, &m, &q, row[2 * (size_t)C], row[c], row[C + c]);
    }
    mean[c] = (float)m;
    m2[c] = (float)q;
  }
}

void cohort_cuda_bn_combine_stats(float *mean, float *m2, const float *ranks, int R, int C)
{
  if (C <= 0)
    return;
  combine_kernel<<<cohort_cuda_blocks(C, THREADS), THREADS>>>(mean, m2, ranks, R, C);
  cohort_cuda_launched("bn_combine_stats");
}

__global__ static void rstd_kernel(float *rstd, const float *var, double scale, float eps, int C)
{
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x)
    rstd[c] = (float)(1.0 / sqrt((double)var[c] * scale + (double)eps));
}

void cohort_cuda_bn_rstd(float *rstd, const float *var, double scale, float eps, int C)
{
  if (C <= 0)
    return;
  rstd_kernel<<<cohort_cuda_blocks(C, THREADS), THREADS>>>(rstd, var, scale, eps, C);
  cohort_cuda_launched("bn_rstd");
}

/* y may be x: each element is read, then written, by one thread. */
__global__ static void forward_kernel(float *y, const float *x, const float *mean,
                                      const float *rstd, const float *w, const float *b, int C,
                                      int HW, size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  {
    int c = (int)(i / HW % C);
    y[i] = (x[i] - mean[c]) * (rstd[c] * w[c]) + b[c];
  }
}

void cohort_cuda_bn_forward(float *y, const float *x, const float *mean, const float *rstd,
                            const float *weight, const float *bias, int B, int C, int HW)
{
  size_t total = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0) * (HW > 0 ? HW : 0);
  if (total == 0)
    return;
  forward_kernel<<<cohort_cuda_blocks(total, THREADS), THREADS>>>(y, x, mean, rstd, weight, bias, C,
                                                                  HW, total);
  cohort_cuda_launched("bn_forward");
}

__global__ static void running_kernel(float *rm, float *rv, const float *mean, const float *m2,
                                      double count, double mom, int C)
{
  double div = count > 1.0 ? count - 1.0 : 1.0;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    rm[c] = (float)((1.0 - mom) * rm[c] + mom * mean[c]);
    rv[c] = (float)((1.0 - mom) * rv[c] + mom * (m2[c] / div));
  }
}

void cohort_cuda_bn_running_update(float *running_mean, float *running_var, const float *mean,
                                   const float *m2, double count, float momentum, int C)
{
  if (C <= 0)
    return;
  running_kernel<<<cohort_cuda_blocks(C, THREADS), THREADS>>>(running_mean, running_var, mean, m2,
                                                              count, momentum, C);
  cohort_cuda_launched("bn_running_update");
}

/* Per (chunk, channel): sums of dy and dy * xhat into part[(c * chunks + chunk) * 2 ...]. */
__global__ static void reduce_partial_kernel(double *part, const float *dy, const float *x,
                                             const float *mean, const float *rstd, int B, int C,
                                             int HW, size_t per)
{
  __shared__ double sh[THREADS];
  int c = blockIdx.y, k = blockIdx.x;
  size_t nv = (size_t)B * HW, j0 = (size_t)k * per;
  size_t j1 = j0 + per < nv ? j0 + per : nv;
  float m = mean[c], rs = rstd[c];
  double s1 = 0.0, s2 = 0.0;
  for (size_t j = j0 + threadIdx.x; j < j1; j += THREADS) {
    size_t o = chan_index(j, c, C, HW);
    float g = dy[o];
    s1 += g;
    s2 += g * ((x[o] - m) * rs);
  }
  s1 = cohort_block_sum(s1, sh);
  s2 = cohort_block_sum(s2, sh);
  if (threadIdx.x == 0) {
    double *out = part + ((size_t)c * gridDim.x + k) * 2;
    out[0] = s1;
    out[1] = s2;
  }
}

__global__ static void reduce_finish_kernel(float *sum_dy, float *sum_dy_xhat, const double *part,
                                            int chunks, int C)
{
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    double s1 = 0.0, s2 = 0.0;
    for (int k = 0; k < chunks; k++) {
      s1 += part[((size_t)c * chunks + k) * 2];
      s2 += part[((size_t)c * chunks + k) * 2 + 1];
    }
    sum_dy[c] = (float)s1;
    sum_dy_xhat[c] = (float)s2;
  }
}

void cohort_cuda_bn_backward_reduce(const float *dy, const float *x, const float *mean,
                                    const float *rstd, int B, int C, int HW, float *sum_dy,
                                    float *sum_dy_xhat)
{
  if (C <= 0)
    return;
  size_t nv = (size_t)(B > 0 ? B : 0) * (HW > 0 ? HW : 0), per;
  int chunks = chunks_for(nv, &per);
  double *part = (double *)cohort_cuda_scratch(sizeof(double) * 2 * chunks * C);
  if (!part)
    return;
  reduce_partial_kernel<<<dim3(chunks, C), THREADS>>>(part, dy, x, mean, rstd, B, C, HW, per);
  if (!cohort_cuda_launched("bn_backward_reduce (chunks)"))
    return;
  reduce_finish_kernel<<<cohort_cuda_blocks(C, THREADS), THREADS>>>(sum_dy, sum_dy_xhat, part,
                                                                    chunks, C);
  cohort_cuda_launched("bn_backward_reduce (final sums)");
}

__global__ static void dx_kernel(float *dx, int accumulate, const float *dy, const float *x,
                                 const float *mean, const float *rstd, const float *w,
                                 const float *sum_dy, const float *sum_dy_xhat, double count, int C,
                                 int HW, size_t total)
{
  COHORT_GRID_STRIDE(i, total)
  {
    int c = (int)(i / HW % C);
    float rs = rstd[c], a = (float)(sum_dy[c] / count), bq = (float)(sum_dy_xhat[c] / count);
    float v = (w[c] * rs) * (dy[i] - a - (x[i] - mean[c]) * rs * bq);
    dx[i] = accumulate ? dx[i] + v : v;
  }
}

void cohort_cuda_bn_backward_dx(float *dx, int accumulate, const float *dy, const float *x,
                                const float *mean, const float *rstd, const float *weight,
                                const float *sum_dy, const float *sum_dy_xhat, double count, int B,
                                int C, int HW)
{
  size_t total = (size_t)(B > 0 ? B : 0) * (C > 0 ? C : 0) * (HW > 0 ? HW : 0);
  if (total == 0)
    return;
  dx_kernel<<<cohort_cuda_blocks(total, THREADS), THREADS>>>(
      dx, accumulate, dy, x, mean, rstd, weight, sum_dy, sum_dy_xhat, count, C, HW, total);
  cohort_cuda_launched("bn_backward_dx");
}

__global__ static void params_kernel(float *dw, float *db, const float *sum_dy,
                                     const float *sum_dy_xhat, int C)
{
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    if (dw)
      dw[c] += sum_dy_xhat[c];
    if (db)
      db[c] += sum_dy[c];
  }
}

void cohort_cuda_bn_backward_params(float *dweight, float *dbias, const float *sum_dy,
                                    const float *sum_dy_xhat, int C)
{
  if (C <= 0 || (!dweight && !dbias))
    return;
  params_kernel<<<cohort_cuda_blocks(C, THREADS), THREADS>>>(dweight, dbias, sum_dy, sum_dy_xhat,
                                                             C);
  cohort_cuda_launched("bn_backward_params");
}

/* GroupNorm: one block per (example, group), whose C / G * HW values are contiguous in NCHW;
 * statistics in double with fixed-order block sums. */
__global__ static void gn_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, int C, int HW, int G,
                                         float eps)
{
  __shared__ double sh[THREADS];
  int i = blockIdx.x, g = i % G, cg = C / G;
  size_t n = (size_t)cg * HW;
  const float *x = inp + (size_t)i * n;
  double s = 0.0;
  for (size_t j = threadIdx.x; j < n; j += THREADS)
    s += x[j];
  double m = cohort_block_sum(s, sh) / (double)n, q = 0.0;
  for (size_t j = threadIdx.x; j < n; j += THREADS) {
    double d = x[j] - m;
    q += d * d;
  }
  q = cohort_block_sum(q, sh);
  float mf = (float)m, rs = (float)(1.0 / sqrt(q / (double)n + (double)eps));
  float *y = out + (size_t)i * n;
  for (size_t j = threadIdx.x; j < n; j += THREADS) {
    int ch = g * cg + (int)(j / HW);
    y[j] = (x[j] - mf) * rs * (w ? w[ch] : 1.0f) + (b ? b[ch] : 0.0f);
  }
  if (threadIdx.x == 0) {
    mean[i] = mf;
    rstd[i] = rs;
  }
}

void cohort_cuda_group_norm_forward(float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int B, int C, int HW, int G,
                                    float eps)
{
  if (B <= 0 || C <= 0 || HW <= 0 || G <= 0)
    return;
  gn_forward_kernel<<<B * G, THREADS>>>(out, mean, rstd, inp, w, b, C, HW, G, eps);
  cohort_cuda_launched("group_norm_forward");
}

/* dx += rs (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) over one (example, group). */
__global__ static void gn_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *mean, const float *rstd, int C,
                                      int HW, int G)
{
  __shared__ double sh[THREADS];
  int i = blockIdx.x, g = i % G, cg = C / G;
  size_t n = (size_t)cg * HW, base = (size_t)i * n;
  float m = mean[i], rs = rstd[i];
  double a = 0.0, bq = 0.0;
  for (size_t j = threadIdx.x; j < n; j += THREADS) {
    float dxh = dout[base + j] * (w ? w[g * cg + (int)(j / HW)] : 1.0f);
    a += dxh;
    bq += dxh * ((inp[base + j] - m) * rs);
  }
  float am = (float)(cohort_block_sum(a, sh) / (double)n);
  float bm = (float)(cohort_block_sum(bq, sh) / (double)n);
  for (size_t j = threadIdx.x; j < n; j += THREADS) {
    float wc = w ? w[g * cg + (int)(j / HW)] : 1.0f;
    dinp[base + j] += rs * (dout[base + j] * wc - am - (inp[base + j] - m) * rs * bm);
  }
}

/* dw[c] += sum of dout * xhat, db[c] += sum of dout over the examples and positions of channel
 * c: one block per channel. */
__global__ static void gn_params_kernel(float *dw, float *db, const float *dout, const float *inp,
                                        const float *mean, const float *rstd, int B, int C, int HW,
                                        int G)
{
  __shared__ double sh[THREADS];
  int c = blockIdx.x, g = c / (C / G);
  double s1 = 0.0, s2 = 0.0;
  for (size_t j = threadIdx.x; j < (size_t)B * HW; j += THREADS) {
    int b = (int)(j / HW);
    size_t off = ((size_t)b * C + c) * HW + j % HW;
    float gv = dout[off];
    s1 += gv;
    s2 += gv * ((inp[off] - mean[b * G + g]) * rstd[b * G + g]);
  }
  s1 = cohort_block_sum(s1, sh);
  s2 = cohort_block_sum(s2, sh);
  if (threadIdx.x == 0) {
    if (dw)
      dw[c] += (float)s2;
    if (db)
      db[c] += (float)s1;
  }
}

void cohort_cuda_group_norm_backward(float *dinp, float *dw, float *db, const float *dout,
                                     const float *inp, const float *w, const float *mean,
                                     const float *rstd, int B, int C, int HW, int G)
{
  if (B <= 0 || C <= 0 || HW <= 0 || G <= 0)
    return;
  gn_dinp_kernel<<<B * G, THREADS>>>(dinp, dout, inp, w, mean, rstd, C, HW, G);
  if (!cohort_cuda_launched("group_norm_backward (inputs)") || (!dw && !db))
    return;
  gn_params_kernel<<<C, THREADS>>>(dw, db, dout, inp, mean, rstd, B, C, HW, G);
  cohort_cuda_launched("group_norm_backward (parameters)");
}
