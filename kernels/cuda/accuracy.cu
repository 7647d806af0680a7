/* Top-1 accuracy: one warp finds each row's first maximum (torch.argmax: a NaN counts as the
 * largest), then one block adds the hits in a fixed order and the count comes back to the host. */
#include "cuda.cuh"

#define ROWS_PER_BLOCK 8
#define SUM_THREADS    256

/* Whether value a at index ia comes before value b at index ib as argmax. */
__device__ static inline bool argmax_before(float a, int ia, float b, int ib)
{
  bool na = a != a, nb = b != b;
  if (na != nb)
    return na;
  if (!na && a != b)
    return a > b;
  return ia < ib;
}

__global__ static void hits_kernel(int *hit, const float *logits, const int *labels, int N, int V)
{
  int lane = threadIdx.x % COHORT_WARP;
  int n = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / COHORT_WARP;
  if (n >= N)
    return; /* whole warps leave together */
  const float *x = logits + (size_t)n * V;
  float best = x[lane < V ? lane : 0];
  int at = lane < V ? lane : 0;
  for (int v = lane + COHORT_WARP; v < V; v += COHORT_WARP)
    if (argmax_before(x[v], v, best, at))
      best = x[v], at = v;
  for (int o = COHORT_WARP / 2; o > 0; o /= 2) {
    float ob = __shfl_xor_sync(COHORT_FULL_MASK, best, o);
    int oa = __shfl_xor_sync(COHORT_FULL_MASK, at, o);
    if (argmax_before(ob, oa, best, at))
      best = ob, at = oa;
  }
  if (lane == 0)
    hit[n] = at == labels[n];
}

__global__ static void count_kernel(int *out, const int *hit, int N)
{
  __shared__ int sh[SUM_THREADS];
  int s = 0;
  for (int i = threadIdx.x; i < N; i += SUM_THREADS)
    s += hit[i];
  s = cohort_block_sum(s, sh);
  if (threadIdx.x == 0)
    *out = s;
}

int cohort_cuda_accuracy_count(const float *logits, const int *labels, int N, int V)
{
  if (N <= 0 || V <= 0)
    return 0;
  int *hit = (int *)cohort_cuda_scratch(sizeof(int) * ((size_t)N + 1));
  if (!hit)
    return -1;
  hits_kernel<<<(N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, ROWS_PER_BLOCK * COHORT_WARP>>>(
      hit, logits, labels, N, V);
  if (!cohort_cuda_launched("accuracy_count (rows)"))
    return -1;
  count_kernel<<<1, SUM_THREADS>>>(hit + N, hit, N);
  if (!cohort_cuda_launched("accuracy_count (sum)"))
    return -1;
  int count = -1;
  if (!cohort_cuda_ok(cudaMemcpy(&count, hit + N, sizeof count, cudaMemcpyDeviceToHost),
                      "accuracy_count (result to host)"))
    return -1;
  return count;
}
