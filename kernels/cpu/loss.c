/* Softmax + cross-entropy over the vocabulary, per position. */
#include "cpu.h"
#include "kernels/math-inline.h"

#include <math.h>

COHORT_VEC static float row_lse(const float *restrict x, int V)
{
  float mx = -INFINITY;
  for (int v = 0; v < V; v++)
    mx = x[v] > mx ? x[v] : mx;
  float sum = 0.0f;
  for (int v = 0; v < V; v++)
    sum += cohort_expf(x[v] - mx);
  return mx + logf(sum);
}

void cohort_cpu_crossentropy_forward(float *losses, float *lse, const float *logits,
                                     const int *targets, int N, int V)
{
#pragma omp parallel for schedule(static) if ((size_t)N * V >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V;
    lse[n] = row_lse(x, V);
    losses[n] = lse[n] - x[targets[n]];
  }
}

COHORT_VEC static void xent_back_row(float *restrict d, const float *restrict x, float l,
                                     int target, int V, float dloss)
{
  for (int v = 0; v < V; v++)
    d[v] = cohort_expf(x[v] - l) * dloss;
  d[target] -= dloss;
}

void cohort_cpu_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                      const int *targets, int N, int V, float dloss)
{
#pragma omp parallel for schedule(static) if ((size_t)N * V >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    xent_back_row(dlogits + (size_t)n * V, logits + (size_t)n * V, lse[n], targets[n], V, dloss);
}
