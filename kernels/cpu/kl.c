/* Knowledge distillation's KL divergence between temperature-softened distributions, per row
 * of logits. Row sums run in double: the divergence of a student close to its teacher is a
 * small difference of sums of order |logits| / tau, and float sums would lose it. */
#include "cpu.h"
#include "kernels/math-inline.h"

#include <math.h>

static float row_max(const float *x, int V)
{
  float mx = -INFINITY;
  for (int v = 0; v < V; v++)
    mx = x[v] > mx ? x[v] : mx;
  return mx;
}

/* log sum_v exp(x[v] / tau), and the sum of exp((x[v] - max) / tau) in *sum. */
static double lse_scaled(const float *x, int V, float inv_tau, double *sum)
{
  float mx = row_max(x, V);
  double s = 0.0;
  for (int v = 0; v < V; v++)
    s += cohort_expf((x[v] - mx) * inv_tau);
  *sum = s;
  return (double)mx * inv_tau + log(s);
}

/* KL(p || q) = sum_v p_v (log p_v - log q_v) with log p_v - log q_v = (t_v - s_v) / tau -
 * (lse_t - lse_s); the p_v sum to 1, so the constant comes out of the sum. */
static void kl_row(float *loss, float *lse, const float *s, const float *t, int V, float inv_tau)
{
  double sum_s, sum_t;
  double lse_s = lse_scaled(s, V, inv_tau, &sum_s);
  double lse_t = lse_scaled(t, V, inv_tau, &sum_t);
  float mt = row_max(t, V);
  double dot = 0.0;
  for (int v = 0; v < V; v++)
    dot += (double)cohort_expf((t[v] - mt) * inv_tau) * ((double)t[v] - s[v]);
  *loss = (float)(dot / sum_t * inv_tau - (lse_t - lse_s));
  lse[0] = (float)lse_s;
  lse[1] = (float)lse_t;
}

void cohort_cpu_kl_div_forward(float *losses, float *lse, const float *student,
                               const float *teacher, int N, int V, float tau)
{
  float inv_tau = 1.0f / tau;
#pragma omp parallel for schedule(static) if ((size_t)N * V >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    kl_row(losses + n, lse + 2 * (size_t)n, student + (size_t)n * V, teacher + (size_t)n * V, V,
           inv_tau);
}

COHORT_VEC static void kl_back_row(float *restrict d, const float *restrict s,
                                   const float *restrict t, float lse_s, float lse_t, int V,
                                   float inv_tau, float scale)
{
  float k = scale * inv_tau;
  for (int v = 0; v < V; v++) {
    float q = cohort_expf(s[v] * inv_tau - lse_s);
    float p = cohort_expf(t[v] * inv_tau - lse_t);
    d[v] += k * (q - p);
  }
}

void cohort_cpu_kl_div_backward(float *dstudent, const float *student, const float *teacher,
                                const float *lse, int N, int V, float tau, float scale)
{
  float inv_tau = 1.0f / tau;
#pragma omp parallel for schedule(static) if ((size_t)N * V >= COHORT_CPU_PAR_MIN)
  for (int n = 0; n < N; n++)
    kl_back_row(dstudent + (size_t)n * V, student + (size_t)n * V, teacher + (size_t)n * V,
                lse[2 * (size_t)n], lse[2 * (size_t)n + 1], V, inv_tau, scale);
}
