/* The probe's parts (probe.c measures, probe-report.c forecasts and reports). Not installed. */
#pragma once

#include "engine/launch/forecast.h"
#include "engine/train/probe.h"
#include "engine/train/trainer-run.h"

G_BEGIN_DECLS

/* One rank's compute, or the slowest rank's figures. */
typedef struct {
  double fwd_s, bwd_s; /* at the configured batch */
  int half_batch;      /* 0 when the batch is 1 */
  double fwd_half_s, bwd_half_s;
  double optimizer_s, data_s;
  double *ready;                      /* per bucket, its point in backward (0..1) */
  int syncbn_gathers, syncbn_reduces; /* per micro-step */
  double syncbn_bytes;                /* each, on average */
  double synced_pass_s;               /* a pass with the buckets in flight (2 ranks or more) */
  /* Each rank's own forward, backward, and the two at half the batch (world × 4): what
   * rank_batch_sizes auto splits by. */
  double *per_rank;
} ProbeCompute;

/* One collective's measured points and the line fitted to them. */
typedef struct {
  const char *name;
  CohortCollectiveShape shape;
  int n;
  double bytes[8], seconds[8];
  CohortAlphaBeta fit;
} ProbeCollective;

#define PROBE_MAX_COLLECTIVES 4

/* probe.c */
gboolean cohort_probe_measure_compute(CohortRankRun *r, GArray *plan, ProbeCompute *out,
                                      GError **error);
/* Times passes at the configured batch as training runs them, the run's reducer attached
 * (buckets of `bucket_cap_mb`) and all-reducing while backward runs: the slowest rank's median
 * to *pass_s. Call last: it leaves the reducer attached. */
gboolean cohort_probe_measure_synced(CohortRankRun *r, double bucket_cap_mb, double *pass_s,
                                     GError **error);
/* Times the collectives the run uses (every rank, the same calls); fills `out` and returns how
 * many, or -1 with an error. `bucket_bytes` are the buckets' bytes on the wire. */
int cohort_probe_measure_collectives(CohortRankRun *r, const double *bucket_bytes, guint n_buckets,
                                     double buffer_bytes, double zero_bytes,
                                     ProbeCollective out[PROBE_MAX_COLLECTIVES], GError **error);

/* probe-report.c */
/* The `probe` event's members, forecast included. */
JsonObject *cohort_probe_result(CohortRankRun *r, const ProbeCompute *c, GArray *plan,
                                const double *bucket_bytes, const ProbeCollective *colls, int n,
                                double buffer_bytes, double zero_bytes, double probe_s);
/* The forecast rows and the smallest batch for `result`'s measured part, added to it. */
void cohort_probe_add_forecast(JsonObject *result);

G_END_DECLS
