/* Global average pooling: [B, C, HW] to [B, C]. */
#include "cpu.h"
#include "reduce.h"

void cohort_cpu_avgpool_global_forward(float *out, const float *inp, int B, int C, int HW)
{
  if (HW <= 0)
    return;
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++)
    out[i] = cohort_row_sum(inp + (size_t)i * HW, HW) / (float)HW;
}

COHORT_VEC static void add_const(float *restrict d, float v, int n)
{
  for (int i = 0; i < n; i++)
    d[i] += v;
}

void cohort_cpu_avgpool_global_backward(float *dinp, const float *dout, int B, int C, int HW)
{
  if (HW <= 0)
    return;
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++)
    add_const(dinp + (size_t)i * HW, dout[i] / (float)HW, HW);
}
