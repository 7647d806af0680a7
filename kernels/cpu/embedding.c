/* Token + position embedding. */
#include "cpu.h"

#include <string.h>

COHORT_VEC static void add_rows(float *restrict out, const float *restrict a,
                                const float *restrict b, int C)
{
  for (int c = 0; c < C; c++)
    out[c] = a[c] + b[c];
}

void cohort_cpu_embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                                  int B, int T, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int bt = 0; bt < B * T; bt++) {
    int t = bt % T;
    add_rows(out + (size_t)bt * C, wte + (size_t)tokens[bt] * C, wpe + (size_t)t * C, C);
  }
}

COHORT_VEC static void acc_row(float *restrict dst, const float *restrict src, int width)
{
  for (int c = 0; c < width; c++)
    dst[c] += src[c];
}

/* Parallel over stripes of channels, positions in order inside a stripe: two positions with
 * the same token never race, and the sum order is fixed. */
void cohort_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                                   int B, int T, int C)
{
  int stripes = (C + 63) / 64;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= COHORT_CPU_PAR_MIN)
  for (int s = 0; s < stripes; s++) {
    int c0 = s * 64;
    int width = C - c0 < 64 ? C - c0 : 64;
    for (int bt = 0; bt < B * T; bt++) {
      const float *g = dout + (size_t)bt * C + c0;
      acc_row(dwte + (size_t)tokens[bt] * C + c0, g, width);
      acc_row(dwpe + (size_t)(bt % T) * C + c0, g, width);
    }
  }
}
