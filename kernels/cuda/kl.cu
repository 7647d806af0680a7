/* Knowledge distillation's KL divergence between temperature-softened distributions: one block
 * per row for the forward (maxima, then sums in double through the block's fixed tree, as the
 * CPU sums in double), element-wise for the backward. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

#define KL_THREADS 256

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
