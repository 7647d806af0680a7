#include "engine/launch/forecast.h"

#include <math.h>

gboolean cohort_alpha_beta_fit(const double *bytes, const double *seconds, int n,
                               CohortAlphaBeta *out)
{
  if (n < 2)
    return FALSE;
  double mx = 0, my = 0;
  for (int i = 0; i < n; i++) {
    mx += bytes[i];
    my += seconds[i];
  }
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0;
  for (int i = 0; i < n; i++) {
    sxx += (bytes[i] - mx) * (bytes[i] - mx);
    sxy += (bytes[i] - mx) * (seconds[i] - my);
  }
  if (sxx <= 0)
    return FALSE;
  double beta = sxy / sxx, alpha = my - beta * mx;
  /* Noise can tilt a line below zero: a collective never costs less than nothing per byte, nor
   * per call. Refit the other coefficient with one held at zero. */
  if (beta < 0) {
    beta = 0;
    alpha = my;
  } else if (alpha < 0) {
    double sxx0 = 0, sxy0 = 0;
    for (int i = 0; i < n; i++) {
      sxx0 += bytes[i] * bytes[i];
      sxy0 += bytes[i] * seconds[i];
    }
    alpha = 0;
    beta = sxx0 > 0 ? MAX(sxy0 / sxx0, 0) : 0;
  }
  *out = (CohortAlphaBeta){.alpha_s = alpha, .beta_s = beta};
  return TRUE;
}

/* Latency hops and the share of the bytes each rank sends, for N ranks. */
static void shape_of(CohortCollectiveShape shape, int world, double *hops, double *share)
{
  double n = MAX(world, 1);
  switch (shape) {
  case COHORT_COLLECTIVE_ALL_REDUCE: /* ring: reduce-scatter, then all-gather */
    *hops = 2 * (n - 1);
    *share = 2 * (n - 1) / n;
    return;
  case COHORT_COLLECTIVE_ALL_GATHER:
    *hops = n - 1;
    *share = (n - 1) / n;
    return;
  case COHORT_COLLECTIVE_BROADCAST: /* a tree: log2 N hops of the whole message */
    *hops = ceil(log2(n));
    *share = n > 1 ? 1 : 0;
    return;
  }
  *hops = *share = 0;
}

CohortAlphaBeta cohort_alpha_beta_at(CohortAlphaBeta measured, CohortCollectiveShape shape,
                                     int measured_world, int world)
{
  double h0, s0, h, s;
  shape_of(shape, measured_world, &h0, &s0);
  shape_of(shape, world, &h, &s);
  CohortAlphaBeta out = {0, 0};
  if (h0 > 0)
    out.alpha_s = measured.alpha_s / h0 * h;
  if (s0 > 0)
    out.beta_s = measured.beta_s / s0 * s;
  return out;
}

double cohort_collective_seconds(CohortAlphaBeta measured, CohortCollectiveShape shape,
                                 int measured_world, int world, double bytes)
{
  if (world < 2 || bytes <= 0)
    return 0;
  CohortAlphaBeta ab = cohort_alpha_beta_at(measured, shape, measured_world, world);
  return ab.alpha_s + ab.beta_s * bytes;
}

/* The buckets of the last micro-step's backward (of `bwd_s`) on one communication thread:
 * their total time, and how much of it ran past the end of backward. */
static void buckets(const CohortForecastInput *in, int world, double bwd_s, double *total,
                    double *exposed)
{
  double free_at = 0;
  *total = 0;
  for (guint i = 0; i < in->n_buckets; i++) {
    double t = cohort_collective_seconds(in->all_reduce, COHORT_COLLECTIVE_ALL_REDUCE,
                                         in->world_size, world, in->bucket_bytes[i]);
    double ready = CLAMP(in->bucket_ready[i], 0, 1) * bwd_s;
    free_at = MAX(free_at, ready) + t;
    *total += t;
  }
  *exposed = MAX(free_at - bwd_s, 0);
}

void cohort_forecast_at(const CohortForecastInput *in, int world, int batch, CohortForecast *out)
{
  int accum = MAX(in->accum, 1);
  double b = MAX(batch, 1);
  double fwd = in->fwd0_s + in->fwd1_s * b, bwd = in->bwd0_s + in->bwd1_s * b;
  *out = (CohortForecast){.world_size = world, .batch = batch};
  out->compute_s = accum * (fwd + bwd);
  double fixed = in->optimizer_s + accum * in->data_s;
  out->single_step_s = out->compute_s + fixed;
  if (world >= 2) {
    buckets(in, world, bwd, &out->bucket_comm_s, &out->exposed_s);
    int w0 = in->world_size;
    double other =
        in->n_small * cohort_collective_seconds(in->all_reduce, COHORT_COLLECTIVE_ALL_REDUCE, w0,
                                                world, in->small_bytes) +
        accum * in->n_syncbn_gather *
            cohort_collective_seconds(in->all_gather, COHORT_COLLECTIVE_ALL_GATHER, w0, world,
                                      in->syncbn_gather_bytes * world) +
        accum * in->n_syncbn_reduce *
            cohort_collective_seconds(in->all_reduce, COHORT_COLLECTIVE_ALL_REDUCE, w0, world,
                                      in->syncbn_reduce_bytes) +
        cohort_collective_seconds(in->broadcast, COHORT_COLLECTIVE_BROADCAST, w0, world,
                                  in->buffer_bytes) +
        cohort_collective_seconds(in->all_gather, COHORT_COLLECTIVE_ALL_GATHER, w0, world,
                                  in->zero_gather_bytes);
    out->other_comm_s = other;
  }
  out->hidden = out->bucket_comm_s > 0 ? CLAMP(1 - out->exposed_s / out->bucket_comm_s, 0, 1) : 1;
  out->step_s = out->single_step_s + out->exposed_s + out->other_comm_s;
  out->efficiency = out->step_s > 0 ? out->single_step_s / out->step_s : 0;
  out->examples_per_s = out->step_s > 0 ? (double)world * b * accum / out->step_s : 0;
  out->tokens_per_s = out->examples_per_s * in->tokens_per_example;
}

int cohort_forecast_min_batch(const CohortForecastInput *in, int world, double efficiency,
                              int max_batch)
{
  for (int b = 1; b <= max_batch; b++) {
    CohortForecast f;
    cohort_forecast_at(in, world, b, &f);
    if (f.efficiency >= efficiency)
      return b;
  }
  return 0;
}
