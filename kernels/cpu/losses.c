/* Losses and metrics: cross-entropy, the distillation KL divergence, the per-example MSE of
 * flow matching, and top-1 accuracy. */
#include "cpu.h"
#include "kernels/math-inline.h"
#include "reduce.h"

#include <string.h>
#include <math.h>

#define CHUNK  4096
#define STRIPE 64

static long n_chunks(size_t n)
{
  return (long)((n + CHUNK - 1) / CHUNK);
}

static size_t chunk_len(size_t n, size_t i0)
{
  return n - i0 < CHUNK ? n - i0 : CHUNK;
}

/* sum of (p - q)^2 in the lane order of reduce.h */
COHORT_VEC static float row_sq_diff(const float *restrict p, const float *restrict q, int n)
{
  float acc[COHORT_LANES] = {0};
  int i = 0;
  for (; i + COHORT_LANES <= n; i += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++) {
      float d = p[i + l] - q[i + l];
      acc[l] += d * d;
    }
  float s = cohort_sum_lanes(acc);
  for (; i < n; i++)
    s += (p[i] - q[i]) * (p[i] - q[i]);
  return s;
}

void cohort_cpu_mse_forward(float *losses, const float *pred, const float *target, int B, int D)
{
#pragma omp parallel for schedule(static) if ((size_t)B * D >= COHORT_CPU_PAR_MIN)
  for (int b = 0; b < B; b++)
    losses[b] = row_sq_diff(pred + (size_t)b * D, target + (size_t)b * D, D) / D;
}

COHORT_VEC static void mse_back_chunk(float *restrict d, const float *restrict p,
                                      const float *restrict q, size_t n, float k)
{
  for (size_t i = 0; i < n; i++)
    d[i] = (p[i] - q[i]) * k;
}

void cohort_cpu_mse_backward(float *dpred, const float *pred, const float *target, int B, int D,
                             float scale)
{
  size_t n = (size_t)B * D;
  float k = 2.0f * scale / (float)D;
  long chunks = n_chunks(n);
#pragma omp parallel for schedule(static) if (n >= COHORT_CPU_PAR_MIN)
  for (long c = 0; c < chunks; c++) {
    size_t i0 = (size_t)c * CHUNK;
    mse_back_chunk(dpred + i0, pred + i0, target + i0, chunk_len(n, i0), k);
  }
}

/* log sum_v exp(x[v]): the maximum and the sum in reduce.h's lanes, so that both vectorise. */
COHORT_VEC static float row_lse(const float *restrict x, int V)
{
  float mx = cohort_row_max(x, V);
  float acc[COHORT_LANES] = {0};
  int v = 0;
  for (; v + COHORT_LANES <= V; v += COHORT_LANES)
    for (int l = 0; l < COHORT_LANES; l++)
      acc[l] += cohort_expf(x[v + l] - mx);
  float sum = cohort_sum_lanes(acc);
  for (; v < V; v++)
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
    losses[n] = targets[n] < 0 ? 0.0f : lse[n] - x[targets[n]];
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
  for (int n = 0; n < N; n++) {
    if (targets[n] < 0)
      memset(dlogits + (size_t)n * V, 0, (size_t)V * sizeof(float));
    else
      xent_back_row(dlogits + (size_t)n * V, logits + (size_t)n * V, lse[n], targets[n], V, dloss);
  }
}

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
