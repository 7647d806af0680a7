/* Token + position embedding. The backward sums each token's rows with no atomics: positions
 * are grouped by token on the host (the token ids are small), then one thread per (token,
 * channel) adds that token's rows in position order, the same order as the CPU backend. */
#include "cuda.cuh"

#include <stdlib.h>

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
