/* Embeddings: token + position rows (GPT), label rows, sinusoidal timestep features and
 * image patches to tokens and back (DiT), rotary position embeddings (Llama). */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#include <cub/device/device_radix_sort.cuh>

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

__global__ static void iota_kernel(int *x, int n)
{
  COHORT_GRID_STRIDE(i, (size_t)n)
  x[i] = (int)i;
}

/* Over the positions sorted by token (pos[], stably: equal tokens keep increasing positions),
 * the thread of sorted index i and column c works only where a run of equal tokens starts: it
 * adds that token's rows of dout in order of position (the CPU's order), so no two threads
 * write the same element and no atomics are needed. */
__global__ static void dwte_kernel(float *dwte, const float *dout, const int *token, const int *pos,
                                   int n, int C)
{
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = blockIdx.y; i < n; i += gridDim.y) {
    int t = token[i];
    if (c >= C || (i > 0 && token[i - 1] == t))
      continue;
    float *dst = dwte + (size_t)t * C + c;
    float acc = *dst;
    for (int k = i; k < n && token[k] == t; k++)
      acc += dout[(size_t)pos[k] * C + c];
    *dst = acc;
  }
}

static size_t round_up(size_t bytes)
{
  return (bytes + 255) / 256 * 256;
}

/* Groups the positions by token on the device (CUB's stable radix sort of (token, position)
 * pairs), so the backward needs nothing from the host and never waits for the device. */
void cohort_cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                                    int B, int T, int C)
{
  int n = B * T;
  if (n <= 0 || C <= 0)
    return;
  if (dwpe) {
    dwpe_kernel<<<cohort_cuda_blocks((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    if (!cohort_cuda_launched("embedding_backward (positions)"))
      return;
  }
  if (!dwte)
    return;
  size_t temp_bytes = 0;
  if (!cohort_cuda_ok(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, (int *)nullptr,
                                                      (const int *)nullptr, (int *)nullptr, n),
                      "embedding_backward (sort size)"))
    return;
  /* scratch: sorted tokens, positions in, positions out, then CUB's temporaries */
  size_t words = round_up(sizeof(int) * (size_t)n);
  char *scratch = (char *)cohort_cuda_scratch(3 * words + temp_bytes);
  if (!scratch)
    return;
  int *sorted = (int *)scratch, *pos_in = (int *)(scratch + words);
  int *pos = (int *)(scratch + 2 * words);
  iota_kernel<<<cohort_cuda_blocks((size_t)n, 256), 256>>>(pos_in, n);
  if (!cohort_cuda_launched("embedding_backward (positions)") ||
      !cohort_cuda_ok(cub::DeviceRadixSort::SortPairs(scratch + 3 * words, temp_bytes, tokens,
                                                      sorted, pos_in, pos, n, 0, 32,
                                                      (cudaStream_t)0),
                      "embedding_backward (sort by token)"))
    return;
  dim3 grid((unsigned)((C + 255) / 256), (unsigned)(n < 65535 ? n : 65535));
  dwte_kernel<<<grid, 256>>>(dwte, dout, sorted, pos, n, C);
  cohort_cuda_launched("embedding_backward (tokens)");
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

/* One thread per rotated pair (row, i < half): out may be inp, as a thread reads its pair before
 * it writes it. sign -1 rotates back (the backward). */
__global__ static void rope_kernel(float *out, const float *inp, const float *cos, const float *sin,
                                   int T, int H, int half, int pos0, float sign, size_t n)
{
  COHORT_GRID_STRIDE(e, n)
  {
    size_t r = e / half;
    int i = (int)(e % half);
    size_t p = (size_t)pos0 + (r / H) % T;
    const float *x = inp + r * 2 * half;
    float c = cos[p * half + i], sn = sign * sin[p * half + i];
    float x1 = x[i], x2 = x[i + half];
    float *y = out + r * 2 * half;
    y[i] = x1 * c - x2 * sn;
    y[i + half] = x2 * c + x1 * sn;
  }
}

static void rope(float *out, const float *inp, const float *cos, const float *sin, int B, int T,
                 int H, int hd, int pos0, float sign, const char *op)
{
  if (B <= 0 || T <= 0 || H <= 0 || hd <= 0 || hd % 2 != 0) {
    if ((size_t)B * T * H * hd != 0)
      cohort_cuda_fail("cuda: %s: head size %d must be even and positive", op, hd);
    return;
  }
  size_t n = (size_t)B * T * H * (hd / 2);
  rope_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(out, inp, cos, sin, T, H, hd / 2, pos0, sign, n);
  cohort_cuda_launched(op);
}

void cohort_cuda_rope_forward(float *out, const float *inp, const float *cos, const float *sin,
                              int B, int T, int H, int hd, int pos0)
{
  rope(out, inp, cos, sin, B, T, H, hd, pos0, 1.0f, "rope_forward");
}

void cohort_cuda_rope_backward(float *dinp, const float *dout, const float *cos, const float *sin,
                               int B, int T, int H, int hd, int pos0)
{
  rope(dinp, dout, cos, sin, B, T, H, hd, pos0, -1.0f, "rope_backward");
}
