/* torch.optim.SGD, with the CPU backend's per-element formula (kernels/math-inline.h). */
#include "cuda.cuh"
#include "kernels/math-inline.h"

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
