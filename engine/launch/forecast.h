/* The scaling forecast (docs/launching.md, "The probe and the forecast"): from what the probe
 * measured — one rank's forward and backward at two batch sizes, when each gradient bucket
 * became final during backward, the optimizer step, the data wait, and the α–β cost of each
 * collective between the actual ranks — the step time, throughput and scaling efficiency at a
 * world size and per-rank batch, how much of the bucket communication backward hides, and the
 * smallest per-rank batch that keeps 90 % efficiency.
 *
 * The model, in short: a step is `accum` forward+backward passes; the buckets of the last one
 * are all-reduced one after another on a communication thread, each starting when it is final
 * (its measured point in backward) and the previous one is done; what runs past the end of
 * backward is exposed. Then the small all-reduces of every step (the loss sum and the vote),
 * SyncBatchNorm's collectives (which compute waits for), the buffer broadcast, ZeRO-1's
 * parameter gather, the optimizer and the data wait are added. Efficiency is the time of one
 * process on the same per-rank batch over the time of N. Collectives scale to other world
 * sizes on the same links as a ring does: an all-reduce of n bytes costs 2(N−1)·a + 2(N−1)/N·n·b
 * (a, b: a hop's latency and a byte's time, from the measured α, β); an all-gather (N−1)·a +
 * (N−1)/N·n·b; a broadcast log2(N) hops.
 *
 * Compute and communication may share hardware (on a CPU the communication thread, the loopback
 * or veth path and backward take turns on the same cores; on a GPU NCCL's kernels take SMs):
 * every second of bucket communication that runs while backward runs delays backward by
 * `contention` seconds. The probe does not assume it: it times passes with the buckets really in
 * flight and cohort_forecast_fit_contention finds the share that explains them.
 *
 * Pure arithmetic: fixed inputs give fixed numbers (tests/test-forecast.c). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The cost of one collective of `bytes` at the world size it was measured at:
 * alpha_s + beta_s × bytes. */
typedef struct {
  double alpha_s;
  double beta_s; /* seconds per byte; 1 / beta_s is the bandwidth the collective reaches */
} CohortAlphaBeta;

typedef enum {
  COHORT_COLLECTIVE_ALL_REDUCE,
  COHORT_COLLECTIVE_ALL_GATHER,
  COHORT_COLLECTIVE_BROADCAST,
} CohortCollectiveShape;

/* Least squares of `seconds` on `bytes` (n >= 2 points), both coefficients kept >= 0. FALSE
 * when the points cannot fit a line (fewer than 2, all the same size). */
gboolean cohort_alpha_beta_fit(const double *bytes, const double *seconds, int n,
                               CohortAlphaBeta *out);

/* `measured` (at `measured_world` ranks) carried to `world` ranks on the same links. */
CohortAlphaBeta cohort_alpha_beta_at(CohortAlphaBeta measured, CohortCollectiveShape shape,
                                     int measured_world, int world);

/* Seconds of one collective of `bytes` at `world` ranks. */
double cohort_collective_seconds(CohortAlphaBeta measured, CohortCollectiveShape shape,
                                 int measured_world, int world, double bytes);

typedef struct {
  int world_size;         /* where the collectives were measured, >= 2 */
  int accum;              /* gradient_accumulation_steps */
  int tokens_per_example; /* 0 for image data */
  /* One rank's forward and backward of a micro-batch of b examples:
   * forward = fwd0_s + fwd1_s·b, backward = bwd0_s + bwd1_s·b. */
  double fwd0_s, fwd1_s, bwd0_s, bwd1_s;
  double optimizer_s; /* clipping, the update, EMA: per step */
  double data_s;      /* waiting for a micro-batch, per micro-step */
  guint n_buckets;
  const double *bucket_bytes; /* on the wire (bf16 reduction: half the gradient bytes) */
  const double *bucket_ready; /* when each became final, as a share of backward (0..1) */
  CohortAlphaBeta all_reduce, all_gather, broadcast;
  guint n_small;                          /* small all-reduces per step (the loss sum, the vote) */
  double small_bytes;                     /* each */
  guint n_syncbn_gather, n_syncbn_reduce; /* SyncBatchNorm's, per micro-step */
  double syncbn_gather_bytes, syncbn_reduce_bytes; /* each (a rank's share for the gather) */
  double buffer_bytes;      /* broadcast per step (broadcast_buffers); 0 = none */
  double zero_gather_bytes; /* ZeRO stage 1's parameter all-gather per step; 0 = none */
  double contention;        /* seconds of backward lost per second of overlapped communication */
} CohortForecastInput;

typedef struct {
  int world_size;
  int batch;             /* per rank and micro-step */
  double compute_s;      /* accum × (forward + backward) */
  double bucket_comm_s;  /* the buckets' all-reduces, end to end */
  double exposed_s;      /* the part of them that backward did not hide */
  double stretch_s;      /* backward's delay by the communication it overlapped (contention) */
  double hidden;         /* 1 − exposed / bucket_comm (1 without buckets) */
  double other_comm_s;   /* small all-reduces, SyncBatchNorm, buffers, ZeRO gather */
  double step_s;         /* the step at world_size */
  double single_step_s;  /* the same per-rank batch on one process, no communication */
  double efficiency;     /* single_step_s / step_s */
  double examples_per_s; /* all ranks together */
  double tokens_per_s;   /* 0 for image data */
} CohortForecast;

/* The forecast at `world` ranks (>= 1) with `batch` examples per rank and micro-step. */
void cohort_forecast_at(const CohortForecastInput *in, int world, int batch, CohortForecast *out);

/* Seconds of one forward and backward at the measured world size with `batch` examples, the
 * buckets all-reduced as in training (hidden, exposed, and the compute they take) and
 * SyncBatchNorm's collectives: what the probe's synced passes measure. */
double cohort_forecast_synced_pass(const CohortForecastInput *in, int batch);

/* The `contention` (0 … COHORT_FORECAST_MAX_CONTENTION) for which cohort_forecast_synced_pass
 * at `batch` equals `measured_s`: 0 when the passes took no longer than separate timing says
 * or when no communication overlaps backward (nothing to tell contention by), the maximum when
 * even it does not explain them. */
#define COHORT_FORECAST_MAX_CONTENTION 2.0
double cohort_forecast_fit_contention(const CohortForecastInput *in, int batch, double measured_s);

/* The smallest per-rank batch (1 … max_batch) whose efficiency at `world` ranks is at least
 * `efficiency`, or 0 when none is. */
int cohort_forecast_min_batch(const CohortForecastInput *in, int world, double efficiency,
                              int max_batch);

G_END_DECLS
