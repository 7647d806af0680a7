/* Top-1 accuracy: how many rows of logits have their first maximum at the label. */
#include "cpu.h"

#include <math.h>

/* torch.argmax: the first maximum, and a NaN counts as larger than any number. */
static int row_argmax(const float *x, int V)
{
  int best = 0;
  for (int v = 1; v < V; v++)
    if (x[v] > x[best] || (isnan(x[v]) && !isnan(x[best])))
      best = v;
  return best;
}

int cohort_cpu_accuracy_count(const float *logits, const int *labels, int N, int V)
{
  if (V <= 0)
    return 0;
  int hits = 0;
#pragma omp parallel for schedule(static) reduction(+ : hits) if ((size_t)N * V >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    hits += row_argmax(logits + (size_t)n * V, V) == labels[n];
  return hits;
}
