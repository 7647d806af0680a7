/* Losses and metrics: cross-entropy, the distillation KL divergence, the per-example MSE of
 * flow matching, and top-1 accuracy. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#define MSE_THREADS    256
#define XENT_THREADS   256
#define KL_THREADS     256
#define ROWS_PER_BLOCK 8
#define SUM_THREADS    256

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
    /* A negative target counts in no loss (0); one past the vocabulary cannot be scored: NaN
     * says so instead of a bad read. */
    losses[n] = t < 0 ? 0.0f : t < V ? l - x[t] : NAN;
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
    float d = targets[n] < 0 ? 0.0f : expf(logits[i] - lse[n]) * dloss;
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

__device__ static float block_max(float v, float *sh)
{
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = KL_THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

__global__ static void kl_forward_kernel(float *losses, float *lse, const float *student,
                                         const float *teacher, int N, int V, float inv_tau)
{
  __shared__ float shf[KL_THREADS];
  __shared__ double shd[KL_THREADS];
  for (int n = blockIdx.x; n < N; n += gridDim.x) {
    const float *s = student + (size_t)n * V, *t = teacher + (size_t)n * V;
    float ms = -INFINITY, mt = -INFINITY;
    for (int v = threadIdx.x; v < V; v += KL_THREADS) {
      ms = fmaxf(ms, s[v]);
      mt = fmaxf(mt, t[v]);
    }
    ms = block_max(ms, shf);
    mt = block_max(mt, shf);
    double ss = 0.0, st = 0.0, dot = 0.0;
    for (int v = threadIdx.x; v < V; v += KL_THREADS) {
      float et = cohort_expf((t[v] - mt) * inv_tau);
      ss += cohort_expf((s[v] - ms) * inv_tau);
      st += et;
      dot += (double)et * ((double)t[v] - s[v]);
    }
    ss = cohort_block_sum(ss, shd);
    st = cohort_block_sum(st, shd);
    dot = cohort_block_sum(dot, shd);
    if (threadIdx.x == 0) {
      double lse_s = (double)ms * inv_tau + log(ss), lse_t = (double)mt * inv_tau + log(st);
      losses[n] = (float)(dot / st * inv_tau - (lse_t - lse_s));
      lse[2 * (size_t)n] = (float)lse_s;
      lse[2 * (size_t)n + 1] = (float)lse_t;
    }
  }
}

void cohort_cuda_kl_div_forward(float *losses, float *lse, const float *student,
                                const float *teacher, int N, int V, float tau)
{
  if (N <= 0 || V <= 0)
    return;
  unsigned blocks = (unsigned)(N < 65535 ? N : 65535);
  kl_forward_kernel<<<blocks, KL_THREADS>>>(losses, lse, student, teacher, N, V, 1.0f / tau);
  cohort_cuda_launched("kl_div_forward");
}

__global__ static void kl_backward_kernel(float *d, const float *s, const float *t,
                                          const float *lse, int V, size_t total, float inv_tau,
                                          float k)
{
  COHORT_GRID_STRIDE(i, total)
  {
    size_t n = i / V;
    float q = cohort_expf(s[i] * inv_tau - lse[2 * n]);
    float p = cohort_expf(t[i] * inv_tau - lse[2 * n + 1]);
    d[i] += k * (q - p);
  }
}

void cohort_cuda_kl_div_backward(float *dstudent, const float *student, const float *teacher,
                                 const float *lse, int N, int V, float tau, float scale)
{
  size_t total = (size_t)N * V;
  if (total == 0)
    return;
  float inv_tau = 1.0f / tau;
  kl_backward_kernel<<<cohort_cuda_blocks(total, 256), 256>>>(dstudent, student, teacher, lse, V,
                                                              total, inv_tau, scale * inv_tau);
  cohort_cuda_launched("kl_div_backward");
}

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
