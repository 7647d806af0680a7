/* Softmax + cross-entropy over the vocabulary: one block per position for the forward (two
 * passes, max then sum, tree reductions in a fixed order), element-wise for the backward. */
#include "cuda.cuh"

#define XENT_THREADS 256

__global__ static void xent_forward_kernel(float *losses, float *lse, const float *logits,
                                           const int *targets, int V)
{
  __shared__ float sh[XENT_THREADS];
  int n = blockIdx.x;
  const float *x = logits + (size_t)n * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += XENT_THREADS)
    mx = fmaxf(mx, x[v]);
  sh[threadIdx.x] = mx;
  __syncthreads();
  for (int s = XENT_THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  mx = sh[0];
  __syncthreads();
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += XENT_THREADS)
    sum += expf(x[v] - mx);
  sum = cohort_block_sum(sum, sh);
  if (threadIdx.x == 0) {
    float l = mx + logf(sum);
    int t = targets[n];
    lse[n] = l;
    /* A target outside the vocabulary cannot be scored: NaN says so instead of a bad read. */
    losses[n] = (t >= 0 && t < V) ? l - x[t] : NAN;
  }
}

void cohort_cuda_crossentropy_forward(float *losses, float *lse, const float *logits,
                                      const int *targets, int N, int V)
{
  if (N <= 0 || V <= 0)
    return;
  xent_forward_kernel<<<N, XENT_THREADS>>>(losses, lse, logits, targets, V);
  cohort_cuda_launched("crossentropy_forward");
}

__global__ static void xent_backward_kernel(float *dlogits, const float *logits, const float *lse,
                                            const int *targets, int V, size_t total, float dloss)
{
  COHORT_GRID_STRIDE(i, total)
  {
    size_t n = i / V;
    int v = (int)(i % V);
    float d = expf(logits[i] - lse[n]) * dloss;
    if (v == targets[n])
      d -= dloss;
    dlogits[i] = d;
  }
}

void cohort_cuda_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                       const int *targets, int N, int V, float dloss)
{
  size_t total = (size_t)N * V;
  if (total == 0)
    return;
  xent_backward_kernel<<<cohort_cuda_blocks(total, 256), 256>>>(dlogits, logits, lse, targets, V,
                                                                total, dloss);
  cohort_cuda_launched("crossentropy_backward");
}
