/* Embeddings: token + position rows (GPT), label rows, sinusoidal timestep features and
 * image patches to tokens and back (DiT). */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#include <stdlib.h>

#define MSE_THREADS 256

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

__global__ static void embedding_kernel(float *out, const int *tokens, const float *wte,
                                        const float *wpe, int T, int C, size_t n)
{
  COHORT_GRID_STRIDE(i, n)
  {
    size_t bt = i / C;
    int c = (int)(i % C);
    int t = (int)(bt % T);
    out[i] = wte[(size_t)tokens[bt] * C + c] + wpe[(size_t)t * C + c];
  }
}

void cohort_cuda_embedding_forward(float *out, const int *tokens, const float *wte,
                                   const float *wpe, int B, int T, int C)
{
  size_t n = (size_t)B * T * C;
  if (n == 0)
    return;
  embedding_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, tokens, wte, wpe, T, C, n);
  cohort_cuda_launched("embedding_forward");
}

/* dwpe[t, c] += dout[b, t, c] over b in order. */
__global__ static void dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
  COHORT_GRID_STRIDE(i, (size_t)T * C)
  {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++)
      acc += dout[(size_t)b * T * C + i];
    dwpe[i] = acc;
  }
}

/* One group per distinct token: group g holds positions pos[start[g] .. start[g+1]). */
__global__ static void dwte_kernel(float *dwte, const float *dout, const int *group_token,
                                   const int *group_start, const int *pos, int groups, int C)
{
  COHORT_GRID_STRIDE(i, (size_t)groups * C)
  {
    int g = (int)(i / C), c = (int)(i % C);
    float *dst = dwte + (size_t)group_token[g] * C + c;
    float acc = *dst;
    for (int k = group_start[g]; k < group_start[g + 1]; k++)
      acc += dout[(size_t)pos[k] * C + c];
    *dst = acc;
  }
}

/* Orders positions by (token, position): qsort is not stable, so the position breaks ties. */
static int cmp_pair(const void *a, const void *b)
{
  const int *x = (const int *)a, *y = (const int *)b;
  if (x[0] != y[0])
    return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

void cohort_cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                                    int B, int T, int C)
{
  int n = B * T;
  if (n <= 0 || C <= 0)
    return;
  dwpe_kernel<<<cohort_cuda_blocks((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
  if (!cohort_cuda_launched("embedding_backward (positions)"))
    return;

  /* host: tokens [n], pairs [2n]; device upload: token [n], start [n + 1], pos [n] */
  int *host = (int *)malloc(sizeof(int) * (size_t)(6 * n + 1));
  if (!host) {
    cohort_cuda_fail("cuda: embedding_backward: out of host memory for %d positions", n);
    return;
  }
  int *tok = host, *pairs = host + n, *up = host + 3 * n;
  if (!cohort_cuda_ok(cudaMemcpy(tok, tokens, sizeof(int) * n, cudaMemcpyDeviceToHost),
                      "embedding_backward (tokens to host)")) {
    free(host);
    return;
  }
  for (int i = 0; i < n; i++) {
    if (tok[i] < 0) {
      cohort_cuda_fail("cuda: embedding_backward: token %d at position %d is negative", tok[i], i);
      free(host);
      return;
    }
    pairs[2 * i] = tok[i];
    pairs[2 * i + 1] = i;
  }
  qsort(pairs, n, 2 * sizeof(int), cmp_pair);
  int *g_token = up, *g_start, *pos;
  int groups = 0;
  for (int i = 0; i < n; i++)
    if (i == 0 || pairs[2 * i] != pairs[2 * i - 2])
      g_token[groups++] = pairs[2 * i];
  g_start = g_token + groups;
  pos = g_start + groups + 1;
  for (int i = 0, g = 0; i < n; i++) {
    if (i == 0 || pairs[2 * i] != pairs[2 * i - 2])
      g_start[g++] = i;
    pos[i] = pairs[2 * i + 1];
  }
  g_start[groups] = n;
  size_t words = (size_t)groups + groups + 1 + n;
  int *dev = (int *)cohort_cuda_scratch(sizeof(int) * words);
  if (dev && cohort_cuda_ok(cudaMemcpy(dev, up, sizeof(int) * words, cudaMemcpyHostToDevice),
                            "embedding_backward (groups to device)")) {
    dwte_kernel<<<cohort_cuda_blocks((size_t)groups * C, 256), 256>>>(
        dwte, dout, dev, dev + groups, dev + 2 * groups + 1, groups, C);
    cohort_cuda_launched("embedding_backward (tokens)");
  }
  free(host);
}

__global__ static void patch_kernel(float *dst, const float *src, int C, int H, int W, int p,
                                    int channel_last, int to_tokens, size_t n)
{
  int gw = W / p, T = (H / p) * gw;
  COHORT_GRID_STRIDE(i, n)
  {
    int x = (int)(i % W), y = (int)(i / W % H);
    size_t bc = i / ((size_t)W * H);
    size_t k = cohort_patch_offset((int)(bc / C), (int)(bc % C), y, x, C, p, gw, T, channel_last);
    if (to_tokens)
      dst[k] = src[i];
    else
      dst[i] = src[k];
  }
}

/* to_tokens: dst holds tokens and src the image; else the reverse. */
static void patch_map(float *dst, const float *src, int B, int C, int H, int W, int p,
                      int channel_last, int to_tokens, const char *op)
{
  if (B <= 0 || C <= 0 || p <= 0 || H <= 0 || W <= 0 || H % p || W % p) {
    cohort_cuda_fail("cuda: %s: shape B=%d C=%d H=%d W=%d p=%d is invalid (H and W must be "
                     "positive multiples of the patch size p)",
                     op, B, C, H, W, p);
    return;
  }
  size_t n = (size_t)B * C * H * W;
  patch_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(dst, src, C, H, W, p, channel_last, to_tokens,
                                                    n);
  cohort_cuda_launched(op);
}

void cohort_cuda_patchify(float *out, const float *img, int B, int C, int H, int W, int p)
{
  patch_map(out, img, B, C, H, W, p, 0, 1, "patchify");
}

void cohort_cuda_patchify_backward(float *dimg, const float *dtokens, int B, int C, int H, int W,
                                   int p)
{
  patch_map(dimg, dtokens, B, C, H, W, p, 0, 0, "patchify_backward");
}

void cohort_cuda_unpatchify(float *img, const float *tokens, int B, int C, int H, int W, int p)
{
  patch_map(img, tokens, B, C, H, W, p, 1, 0, "unpatchify");
}

void cohort_cuda_unpatchify_backward(float *dtokens, const float *dimg, int B, int C, int H, int W,
                                     int p)
{
  patch_map(dtokens, dimg, B, C, H, W, p, 1, 1, "unpatchify_backward");
}
