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

/* The buckets on one communication thread against a backward of `bwd_s`: when the last one is
 * done; their total time and how much of it ran before backward ended go to *total, *overlap. */
static double schedule(const CohortForecastInput *in, int world, double bwd_s, double *total,
                       double *overlap)
{
  double free_at = 0;
  *total = *overlap = 0;
  for (guint i = 0; i < in->n_buckets; i++) {
    double t = cohort_collective_seconds(in->all_reduce, COHORT_COLLECTIVE_ALL_REDUCE,
                                         in->world_size, world, in->bucket_bytes[i]);
    double start = MAX(free_at, CLAMP(in->bucket_ready[i], 0, 1) * bwd_s);
    free_at = start + t;
    *total += t;
    *overlap += MAX(MIN(free_at, bwd_s) - MIN(start, bwd_s), 0);
  }
  return free_at;
}

/* The buckets of the last micro-step's backward (of `bwd_s` alone): their total time, backward's
 * delay by the communication it overlaps, and what ran past backward's (delayed) end. The
 * delayed backward b solves b = bwd_s + contention × overlap(b); overlap is at most the total,
 * so the root lies in [bwd_s, bwd_s + contention × total] and bisection finds it. */
static void buckets(const CohortForecastInput *in, int world, double bwd_s, double *total,
                    double *stretch, double *exposed)
{
  double overlap, lo = bwd_s, hi = bwd_s;
  double c = CLAMP(in->contention, 0, COHORT_FORECAST_MAX_CONTENTION);
  if (c > 0 && in->n_buckets > 0) {
    schedule(in, world, bwd_s, total, &overlap);
    hi = bwd_s + c * *total;
    for (int k = 0; k < 60 && hi - lo > 1e-12 * MAX(hi, 1); k++) {
      double mid = (lo + hi) / 2;
      schedule(in, world, mid, total, &overlap);
      if (mid - bwd_s - c * overlap >= 0)
        hi = mid;
      else
        lo = mid;
    }
  }
  double free_at = schedule(in, world, hi, total, &overlap);
  *stretch = hi - bwd_s;
  *exposed = MAX(free_at - hi, 0);
}

/* SyncBatchNorm's collectives of one micro-step at `world` ranks. */
static double syncbn_seconds(const CohortForecastInput *in, int world)
{
  int w0 = in->world_size;
  return in->n_syncbn_gather * cohort_collective_seconds(in->all_gather,
                                                         COHORT_COLLECTIVE_ALL_GATHER, w0, world,
                                                         in->syncbn_gather_bytes * world) +
         in->n_syncbn_reduce * cohort_collective_seconds(in->all_reduce,
                                                         COHORT_COLLECTIVE_ALL_REDUCE, w0, world,
                                                         in->syncbn_reduce_bytes);
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
    buckets(in, world, bwd, &out->bucket_comm_s, &out->stretch_s, &out->exposed_s);
    int w0 = in->world_size;
    out->other_comm_s =
        in->n_small * cohort_collective_seconds(in->all_reduce, COHORT_COLLECTIVE_ALL_REDUCE, w0,
                                                world, in->small_bytes) +
        accum * syncbn_seconds(in, world) +
        cohort_collective_seconds(in->broadcast, COHORT_COLLECTIVE_BROADCAST, w0, world,
                                  in->buffer_bytes) +
        cohort_collective_seconds(in->all_gather, COHORT_COLLECTIVE_ALL_GATHER, w0, world,
                                  in->zero_gather_bytes);
  }
  out->hidden = out->bucket_comm_s > 0 ? CLAMP(1 - out->exposed_s / out->bucket_comm_s, 0, 1) : 1;
  out->step_s = out->single_step_s + out->stretch_s + out->exposed_s + out->other_comm_s;
  out->efficiency = out->step_s > 0 ? out->single_step_s / out->step_s : 0;
  out->examples_per_s = out->step_s > 0 ? (double)world * b * accum / out->step_s : 0;
  out->tokens_per_s = out->examples_per_s * in->tokens_per_example;
}

double cohort_forecast_synced_pass(const CohortForecastInput *in, int batch)
{
  double b = MAX(batch, 1);
  double fwd = in->fwd0_s + in->fwd1_s * b, bwd = in->bwd0_s + in->bwd1_s * b;
  double total = 0, stretch = 0, exposed = 0;
  if (in->world_size >= 2)
    buckets(in, in->world_size, bwd, &total, &stretch, &exposed);
  return fwd + bwd + stretch + exposed + syncbn_seconds(in, in->world_size);
}

double cohort_forecast_fit_contention(const CohortForecastInput *in, int batch, double measured_s)
{
  /* The pass grows with the contention (a later end of backward delays nothing that follows
   * less), so bisection on it. */
  if (in->world_size < 2 || in->n_buckets == 0)
    return 0;
  CohortForecastInput c = *in;
  c.contention = 0;
  double none = cohort_forecast_synced_pass(&c, batch);
  if (none >= measured_s)
    return 0;
  double lo = 0, hi = COHORT_FORECAST_MAX_CONTENTION;
  c.contention = hi;
  double most = cohort_forecast_synced_pass(&c, batch);
  /* No bucket runs while backward does (one bucket, final at its end): the pass says nothing
   * about contention, and none is assumed. */
  if (most - none <= 1e-3 * measured_s)
    return 0;
  if (most <= measured_s)
    return hi;
  for (int k = 0; k < 50; k++) {
    c.contention = (lo + hi) / 2;
    if (cohort_forecast_synced_pass(&c, batch) < measured_s)
      lo = c.contention;
    else
      hi = c.contention;
  }
  return (lo + hi) / 2;
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
