/* torch.optim.SGD (momentum, dampening, Nesterov, weight decay in the gradient). */
#include "cpu.h"
#include "kernels/math-inline.h"

#define CHUNK 8192

COHORT_VEC static void sgd_chunk(float *restrict p, const float *restrict g, float *restrict buf,
                                 size_t n, float lr, float mom, float damp, float wd, int nesterov,
                                 int first)
{
  for (size_t i = 0; i < n; i++)
    cohort_sgd_elem(&p[i], g[i], &buf[i], lr, mom, damp, wd, nesterov, first);
}

/* Without momentum there is no buffer. */
COHORT_VEC static void sgd_plain_chunk(float *restrict p, const float *restrict g, size_t n,
                                       float lr, float wd)
{
  for (size_t i = 0; i < n; i++)
    cohort_sgd_elem(&p[i], g[i], NULL, lr, 0.0f, 0.0f, wd, 0, 0);
}

void cohort_cpu_sgd_update(float *params, const float *grads, float *momentum_buf, size_t n,
                           float lr, float momentum, float dampening, float weight_decay,
                           int nesterov, int first_step)
{
  long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK, len = n - i0 < CHUNK ? n - i0 : CHUNK;
    if (momentum != 0.0f)
      sgd_chunk(params + i0, grads + i0, momentum_buf + i0, len, lr, momentum, dampening,
                weight_decay, nesterov, first_step);
    else
      sgd_plain_chunk(params + i0, grads + i0, len, lr, weight_decay);
  }
}
