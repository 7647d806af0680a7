/* Optimizer updates: AdamW, SGD with momentum, the EMA of the weights, and the sum of squares
 * behind gradient clipping. */
#include "cuda.cuh"
#include "kernels/math-inline.h"

/* sum_squares: a fixed grid whatever the GPU, so the sum's order depends on n alone. */
#define SS_BLOCKS  512
#define SS_THREADS 256

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    float lr, float b1, float b2, float eps, float wd, float bc1,
                                    float bc2)
{
  COHORT_GRID_STRIDE(i, n)
  {
    float pi = p[i], mi = m[i], vi = v[i];
    cohort_adamw_elem(&pi, g[i], &mi, &vi, lr, b1, b2, eps, wd, bc1, bc2);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

void cohort_cuda_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                              float lr, float beta1, float beta2, float eps, float wd, float bc1,
                              float bc2)
{
  if (n == 0)
    return;
  adamw_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(params, grads, m, v, n, lr, beta1, beta2, eps,
                                                    wd, bc1, bc2);
  cohort_cuda_launched("adamw_update");
}

__global__ static void sumsq_partial_kernel(double *part, const float *x, size_t n)
{
  __shared__ double sh[SS_THREADS];
  double acc = 0.0;
  for (size_t i = blockIdx.x * (size_t)SS_THREADS + threadIdx.x; i < n;
       i += (size_t)SS_BLOCKS * SS_THREADS)
    acc += (double)x[i] * x[i];
  double s = cohort_block_sum(acc, sh);
  if (threadIdx.x == 0)
    part[blockIdx.x] = s;
}

__global__ static void sumsq_final_kernel(double *out, const double *part)
{
  __shared__ double sh[SS_BLOCKS];
  double s = cohort_block_sum(part[threadIdx.x], sh);
  if (threadIdx.x == 0)
    *out = s;
}

double cohort_cuda_sum_squares(const float *values, size_t n)
{
  if (n == 0)
    return 0.0;
  double *part = (double *)cohort_cuda_scratch(sizeof(double) * (SS_BLOCKS + 1));
  if (!part)
    return NAN;
  sumsq_partial_kernel<<<SS_BLOCKS, SS_THREADS>>>(part, values, n);
  if (!cohort_cuda_launched("sum_squares (partial sums)"))
    return NAN;
  sumsq_final_kernel<<<1, SS_BLOCKS>>>(part + SS_BLOCKS, part);
  if (!cohort_cuda_launched("sum_squares (final sum)"))
    return NAN;
  double r = NAN;
  if (!cohort_cuda_ok(cudaMemcpy(&r, part + SS_BLOCKS, sizeof r, cudaMemcpyDeviceToHost),
                      "sum_squares (result to host)"))
    return NAN;
  return r;
}

__global__ static void ema_kernel(float *e, const float *p, size_t n, float d)
{
  COHORT_GRID_STRIDE(i, n)
  e[i] = d * e[i] + (1.0f - d) * p[i];
}

void cohort_cuda_ema_update(float *ema, const float *params, size_t n, float decay)
{
  if (n == 0)
    return;
  ema_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(ema, params, n, decay);
  cohort_cuda_launched("ema_update");
}

__global__ static void sgd_kernel(float *p, const float *g, float *buf, size_t n, float lr,
                                  float mom, float damp, float wd, int nesterov, int first)
{
  COHORT_GRID_STRIDE(i, n)
  {
    float pi = p[i], bi = 0.0f;
    if (mom != 0.0f && !first)
      bi = buf[i];
    cohort_sgd_elem(&pi, g[i], &bi, lr, mom, damp, wd, nesterov, first);
    p[i] = pi;
    if (mom != 0.0f)
      buf[i] = bi;
  }
}

void cohort_cuda_sgd_update(float *params, const float *grads, float *momentum_buf, size_t n,
                            float lr, float momentum, float dampening, float weight_decay,
                            int nesterov, int first_step)
{
  if (n == 0)
    return;
  if (momentum != 0.0f && !momentum_buf) {
    cohort_cuda_fail("cuda: sgd_update: momentum %g needs a momentum buffer", momentum);
    return;
  }
  sgd_kernel<<<cohort_cuda_blocks(n, 256), 256>>>(params, grads, momentum_buf, n, lr, momentum,
                                                  dampening, weight_decay, nesterov, first_step);
  cohort_cuda_launched("sgd_update");
}
