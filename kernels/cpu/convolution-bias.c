/* The bias of a convolution (one value per output channel over NCHW), apart from conv2d itself
 * so that the convolution's own path can change without touching it. */
#include "cpu.h"
#include "reduce.h"

COHORT_VEC static void add_const_row(float *restrict d, float v, int n)
{
  for (int i = 0; i < n; i++)
    d[i] += v;
}

void cohort_cpu_channel_bias_forward(float *out, const float *bias, int B, int C, int HW)
{
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int i = 0; i < B * C; i++)
    add_const_row(out + (size_t)i * HW, bias[i % C], HW);
}

void cohort_cpu_channel_bias_backward(float *dbias, const float *dout, int B, int C, int HW)
{
#pragma omp parallel for schedule(static) if ((size_t)B * C * HW >= COHORT_CPU_PAR_MIN)
  for (int c = 0; c < C; c++) {
    double s = 0.0;
    for (int b = 0; b < B; b++)
      s += cohort_row_sum(dout + ((size_t)b * C + c) * HW, HW);
    dbias[c] += (float)s;
  }
}
