/* The probe's result: its members, the forecast from them, the text, probe.json, and the run
 * of the whole probe on one rank (probe.h). */
#include "engine/train/probe-private.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"
#include "engine/distributed/reducer.h"
#include "engine/train/balance.h"
#include "engine/train/hang-report.h"
#include "kernels/backend.h"

/* The world sizes forecast, as multiples of the probed one. */
static const int scales[] = {1, 2, 4};
/* The efficiency the smallest batch must keep. */
#define EFFICIENCY_GOAL 0.9
/* probe.json is refused past this size (it is a few KiB). */
#define MAX_SAVED_BYTES (1 << 20)

static const char *precision_name(const CohortConfig *cfg, const char *key)
{
  static char buf[2][32];
  g_autofree char *v = cohort_config_get(cfg, key);
  int i = g_str_equal(key, "precision") ? 0 : 1;
  g_strlcpy(buf[i], v ? v : "?", sizeof buf[i]);
  return buf[i];
}

JsonObject *cohort_probe_result(CohortRankRun *r, const ProbeCompute *c, GArray *plan,
                                const double *bucket_bytes, const ProbeCollective *colls, int n,
                                double buffer_bytes, double zero_bytes, double probe_s)
{
  const CohortConfig *cfg = r->cfg;
  JsonObject *o = json_object_new();
  json_object_set_string_member(o, COHORT_FIELD_MODEL, cfg->model);
  json_object_set_int_member(o, COHORT_FIELD_PARAMS, (gint64)r->model->n_params);
  json_object_set_int_member(o, COHORT_FIELD_TRAINABLE, (gint64)r->model->n_trainable);
  json_object_set_int_member(o, COHORT_FIELD_WORLD_SIZE, r->opts->world_size);
  json_object_set_int_member(o, COHORT_FIELD_NUM_NODES,
                             MAX(r->opts->world_size / MAX(r->opts->local_world_size, 1), 1));
  json_object_set_string_member(o, COHORT_FIELD_BACKEND,
                                r->opts->comm ? cohort_comm_backend_name(r->opts->comm) : "local");
  json_object_set_string_member(o, COHORT_FIELD_DEVICE, r->dev.cuda_device >= 0 ? "cuda" : "cpu");
  json_object_set_string_member(o, COHORT_FIELD_PRECISION, precision_name(cfg, "precision"));
  json_object_set_string_member(o, COHORT_FIELD_REDUCE_PRECISION,
                                precision_name(cfg, "reduce_precision"));
  json_object_set_int_member(o, COHORT_FIELD_BATCH_SIZE, r->B);
  json_object_set_int_member(o, COHORT_FIELD_GRADIENT_ACCUMULATION_STEPS, r->accum);
  json_object_set_int_member(o, COHORT_FIELD_TOKENS_PER_EXAMPLE, r->tokens_per_example);
  g_autofree char *hash = cohort_config_hash(cfg);
  json_object_set_string_member(o, COHORT_FIELD_CONFIG_HASH, hash);
  json_object_set_double_member(o, COHORT_FIELD_PROBE_S, probe_s);
  JsonObject *m = json_object_new();
  json_object_set_double_member(m, COHORT_FIELD_FORWARD_S, c->fwd_s);
  json_object_set_double_member(m, COHORT_FIELD_BACKWARD_S, c->bwd_s);
  if (c->half_batch > 0) {
    json_object_set_int_member(m, COHORT_FIELD_HALF_BATCH, c->half_batch);
    json_object_set_double_member(m, COHORT_FIELD_FORWARD_HALF_S, c->fwd_half_s);
    json_object_set_double_member(m, COHORT_FIELD_BACKWARD_HALF_S, c->bwd_half_s);
  }
  json_object_set_double_member(m, COHORT_FIELD_OPTIMIZER_S, c->optimizer_s);
  json_object_set_double_member(m, COHORT_FIELD_DATA_S, c->data_s);
  if (c->synced_pass_s > 0)
    json_object_set_double_member(m, COHORT_FIELD_SYNCED_PASS_S, c->synced_pass_s);
  JsonArray *b = json_array_new();
  for (guint i = 0; i < plan->len; i++) {
    JsonObject *e = json_object_new();
    json_object_set_double_member(e, COHORT_FIELD_BYTES, bucket_bytes[i]);
    json_object_set_double_member(e, COHORT_FIELD_READY, c->ready[i]);
    json_array_add_object_element(b, e);
  }
  json_object_set_array_member(m, COHORT_FIELD_BUCKETS, b);
  /* The loss sum and the step vote. */
  json_object_set_int_member(m, COHORT_FIELD_SMALL_COLLECTIVES, 2);
  json_object_set_int_member(m, COHORT_FIELD_SYNCBN_GATHERS, c->syncbn_gathers);
  json_object_set_int_member(m, COHORT_FIELD_SYNCBN_REDUCES, c->syncbn_reduces);
  json_object_set_double_member(m, COHORT_FIELD_SYNCBN_BYTES, c->syncbn_bytes);
  json_object_set_double_member(m, COHORT_FIELD_BUFFER_BYTES, buffer_bytes);
  json_object_set_double_member(m, COHORT_FIELD_ZERO_GATHER_BYTES, zero_bytes);
  JsonArray *ca = json_array_new();
  for (int k = 0; k < n; k++) {
    JsonObject *e = json_object_new();
    json_object_set_string_member(e, COHORT_FIELD_COLLECTIVE, colls[k].name);
    json_object_set_double_member(e, COHORT_FIELD_ALPHA_S, colls[k].fit.alpha_s);
    json_object_set_double_member(e, COHORT_FIELD_BETA_S, colls[k].fit.beta_s);
    if (colls[k].fit.beta_s > 0)
      json_object_set_double_member(e, COHORT_FIELD_GBIT_S, 8e-9 / colls[k].fit.beta_s);
    JsonArray *pts = json_array_new();
    for (int i = 0; i < colls[k].n; i++) {
      JsonArray *pt = json_array_new();
      json_array_add_double_element(pt, colls[k].bytes[i]);
      json_array_add_double_element(pt, colls[k].seconds[i]);
      json_array_add_array_element(pts, pt);
    }
    json_object_set_array_member(e, COHORT_FIELD_POINTS, pts);
    json_array_add_object_element(ca, e);
  }
  json_object_set_array_member(m, COHORT_FIELD_COLLECTIVES, ca);
  json_object_set_object_member(o, COHORT_FIELD_MEASURED, m);
  if (c->per_rank) {
    JsonArray *pr = json_array_new();
    for (int q = 0; q < r->opts->world_size; q++) {
      const double *f = c->per_rank + 4 * q;
      JsonObject *e = json_object_new();
      json_object_set_int_member(e, COHORT_FIELD_RANK, q);
      json_object_set_double_member(e, COHORT_FIELD_FORWARD_S, f[0]);
      json_object_set_double_member(e, COHORT_FIELD_BACKWARD_S, f[1]);
      if (c->half_batch > 0) {
        json_object_set_double_member(e, COHORT_FIELD_FORWARD_HALF_S, f[2]);
        json_object_set_double_member(e, COHORT_FIELD_BACKWARD_HALF_S, f[3]);
      }
      json_array_add_object_element(pr, e);
    }
    json_object_set_array_member(o, COHORT_FIELD_PER_RANK, pr);
  }
  cohort_probe_add_forecast(o);
  return o;
}

/* ---- the forecast from the members ---- */

static double num(JsonObject *o, const char *name)
{
  JsonNode *n = o ? json_object_get_member(o, name) : NULL;
  return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) != G_TYPE_STRING
             ? json_node_get_double(n)
             : 0;
}

/* affine time a + b·batch through the two measured points (proportional with one). */
static void affine(double t, double t_half, int batch, int half, double *a, double *b)
{
  if (half > 0 && batch > half) {
    *b = (t - t_half) / (batch - half);
    *a = t - *b * batch;
    if (*b < 0) { /* noise: no dependence on the batch */
      *b = 0;
      *a = t;
    } else if (*a < 0) {
      *a = 0;
      *b = t / batch;
    }
  } else {
    *a = 0;
    *b = t / MAX(batch, 1);
  }
}

/* The input of `result`; the bucket arrays are allocated into *bytes and *ready. */
static gboolean input_of(JsonObject *result, CohortForecastInput *in, double **bytes,
                         double **ready)
{
  JsonObject *m = json_object_get_object_member(result, COHORT_FIELD_MEASURED);
  if (m == NULL)
    return FALSE;
  int batch = (int)num(result, COHORT_FIELD_BATCH_SIZE),
      half = (int)num(m, COHORT_FIELD_HALF_BATCH);
  *in = (CohortForecastInput){
      .world_size = (int)num(result, COHORT_FIELD_WORLD_SIZE),
      .accum = (int)num(result, COHORT_FIELD_GRADIENT_ACCUMULATION_STEPS),
      .tokens_per_example = (int)num(result, COHORT_FIELD_TOKENS_PER_EXAMPLE),
      .optimizer_s = num(m, COHORT_FIELD_OPTIMIZER_S),
      .data_s = num(m, COHORT_FIELD_DATA_S),
      .n_small = (guint)num(m, COHORT_FIELD_SMALL_COLLECTIVES),
      .small_bytes = 32,
      .n_syncbn_gather = (guint)num(m, COHORT_FIELD_SYNCBN_GATHERS),
      .n_syncbn_reduce = (guint)num(m, COHORT_FIELD_SYNCBN_REDUCES),
      .syncbn_gather_bytes = num(m, COHORT_FIELD_SYNCBN_BYTES),
      .syncbn_reduce_bytes = num(m, COHORT_FIELD_SYNCBN_BYTES),
      .buffer_bytes = num(m, COHORT_FIELD_BUFFER_BYTES),
      .zero_gather_bytes = num(m, COHORT_FIELD_ZERO_GATHER_BYTES),
  };
  affine(num(m, COHORT_FIELD_FORWARD_S), num(m, COHORT_FIELD_FORWARD_HALF_S), batch, half,
         &in->fwd0_s, &in->fwd1_s);
  affine(num(m, COHORT_FIELD_BACKWARD_S), num(m, COHORT_FIELD_BACKWARD_HALF_S), batch, half,
         &in->bwd0_s, &in->bwd1_s);
  JsonArray *b = json_object_get_array_member(m, COHORT_FIELD_BUCKETS);
  guint nb = b ? json_array_get_length(b) : 0;
  *bytes = g_new0(double, MAX(nb, 1));
  *ready = g_new0(double, MAX(nb, 1));
  for (guint i = 0; i < nb; i++) {
    JsonObject *e = json_array_get_object_element(b, i);
    (*bytes)[i] = num(e, COHORT_FIELD_BYTES);
    (*ready)[i] = num(e, COHORT_FIELD_READY);
  }
  in->n_buckets = nb;
  in->bucket_bytes = *bytes;
  in->bucket_ready = *ready;
  JsonArray *ca = json_object_get_array_member(m, COHORT_FIELD_COLLECTIVES);
  for (guint k = 0; ca && k < json_array_get_length(ca); k++) {
    JsonObject *e = json_array_get_object_element(ca, k);
    CohortAlphaBeta ab = {num(e, COHORT_FIELD_ALPHA_S), num(e, COHORT_FIELD_BETA_S)};
    const char *name = json_object_get_string_member_with_default(e, COHORT_FIELD_COLLECTIVE, "");
    if (g_str_equal(name, "all_reduce"))
      in->all_reduce = ab;
    else if (g_str_equal(name, "all_gather"))
      in->all_gather = ab;
    else if (g_str_equal(name, "broadcast"))
      in->broadcast = ab;
  }
  /* A collective the probe did not need borrows the all-reduce's line. */
  if (in->all_gather.alpha_s == 0 && in->all_gather.beta_s == 0)
    in->all_gather = in->all_reduce;
  if (in->broadcast.alpha_s == 0 && in->broadcast.beta_s == 0)
    in->broadcast = in->all_reduce;
  return in->world_size >= 1 && batch >= 1;
}

static JsonArray *int_array(const int *v, int n)
{
  JsonArray *a = json_array_new();
  for (int i = 0; i < n; i++)
    json_array_add_int_element(a, v[i]);
  return a;
}

/* rank_batch_sizes: the even split of a global micro-batch (batch_size × world size) and the
 * one auto would start from, each with the slowest rank's forward and backward. Memory caps are
 * the run's to apply (every share may be up to the global micro-batch less one per other rank
 * here). */
static void add_split(JsonObject *result)
{
  JsonArray *pr = json_object_get_array_member(result, COHORT_FIELD_PER_RANK);
  JsonObject *m = json_object_get_object_member(result, COHORT_FIELD_MEASURED);
  int world = (int)num(result, COHORT_FIELD_WORLD_SIZE),
      batch = (int)num(result, COHORT_FIELD_BATCH_SIZE);
  int half = (int)num(m, COHORT_FIELD_HALF_BATCH);
  if (pr == NULL || world < 2 || (int)json_array_get_length(pr) != world || batch < 1)
    return;
  g_autofree CohortRankSpeed *speed = g_new(CohortRankSpeed, world);
  g_autofree int *even = g_new(int, world), *chosen = g_new(int, world), *caps = g_new(int, world);
  for (int q = 0; q < world; q++) {
    JsonObject *e = json_array_get_object_element(pr, (guint)q);
    speed[q] = cohort_rank_speed_fit(
        half, num(e, COHORT_FIELD_FORWARD_HALF_S) + num(e, COHORT_FIELD_BACKWARD_HALF_S), batch,
        num(e, COHORT_FIELD_FORWARD_S) + num(e, COHORT_FIELD_BACKWARD_S));
    even[q] = chosen[q] = batch;
    caps[q] = batch * world - (world - 1);
  }
  double t_even = cohort_balance_time(speed, even, world), t_auto = t_even;
  g_autofree int *solved = g_new(int, world);
  if (cohort_balance_solve(speed, caps, world, (gint64)batch * world, solved, NULL) &&
      cohort_balance_better(speed, caps, world, even, solved)) {
    memcpy(chosen, solved, sizeof(int) * (gsize)world);
    t_auto = cohort_balance_time(speed, chosen, world);
  }
  JsonObject *o = json_object_new();
  json_object_set_array_member(o, COHORT_FIELD_EVEN, int_array(even, world));
  json_object_set_double_member(o, COHORT_FIELD_EVEN_S, t_even);
  json_object_set_array_member(o, COHORT_FIELD_AUTO, int_array(chosen, world));
  json_object_set_double_member(o, COHORT_FIELD_AUTO_S, t_auto);
  json_object_set_object_member(result, COHORT_FIELD_SPLIT, o);
}

void cohort_probe_add_forecast(JsonObject *result)
{
  add_split(result);
  CohortForecastInput in;
  g_autofree double *bytes = NULL, *ready = NULL;
  if (!input_of(result, &in, &bytes, &ready))
    return;
  int batch = (int)num(result, COHORT_FIELD_BATCH_SIZE);
  /* What overlapping costs compute, from the passes timed with the buckets in flight. */
  JsonObject *m = json_object_get_object_member(result, COHORT_FIELD_MEASURED);
  double synced = num(m, COHORT_FIELD_SYNCED_PASS_S);
  if (in.world_size > 1 && synced > 0) {
    in.contention = cohort_forecast_fit_contention(&in, batch, synced);
    json_object_set_double_member(result, COHORT_FIELD_CONTENTION, in.contention);
  }
  JsonArray *rows = json_array_new();
  /* With one rank nothing between ranks was measured: only its own row. */
  for (guint i = 0; i < (in.world_size > 1 ? G_N_ELEMENTS(scales) : 1); i++) {
    CohortForecast f;
    cohort_forecast_at(&in, in.world_size * scales[i], batch, &f);
    JsonObject *e = json_object_new();
    json_object_set_int_member(e, COHORT_FIELD_WORLD_SIZE, f.world_size);
    json_object_set_double_member(e, COHORT_FIELD_STEP_S, f.step_s);
    json_object_set_double_member(e, COHORT_FIELD_SAMPLES_PER_S, f.examples_per_s);
    if (f.tokens_per_s > 0)
      json_object_set_double_member(e, COHORT_FIELD_TOKENS_PER_S, f.tokens_per_s);
    json_object_set_double_member(e, COHORT_FIELD_EFFICIENCY, f.efficiency);
    json_object_set_double_member(e, COHORT_FIELD_COMPUTE_S, f.compute_s);
    json_object_set_double_member(e, COHORT_FIELD_BUCKET_COMM_S, f.bucket_comm_s);
    json_object_set_double_member(e, COHORT_FIELD_EXPOSED_S, f.exposed_s);
    json_object_set_double_member(e, COHORT_FIELD_STRETCH_S, f.stretch_s);
    json_object_set_double_member(e, COHORT_FIELD_HIDDEN, f.hidden);
    json_object_set_double_member(e, COHORT_FIELD_OTHER_COMM_S, f.other_comm_s);
    json_array_add_object_element(rows, e);
  }
  json_object_set_array_member(result, COHORT_FIELD_FORECAST, rows);
  if (in.world_size > 1) {
    int limit = CLAMP(64 * batch, 1024, 65536);
    int min = cohort_forecast_min_batch(&in, in.world_size, EFFICIENCY_GOAL, limit);
    json_object_set_int_member(result, COHORT_FIELD_MIN_BATCH_LIMIT, limit);
    if (min > 0)
      json_object_set_int_member(result, COHORT_FIELD_MIN_BATCH_90, min);
  }
}

/* ---- the text ---- */

static char *rate_text(JsonObject *row)
{
  double tokens = num(row, COHORT_FIELD_TOKENS_PER_S);
  if (tokens > 0)
    return g_strdup_printf("%.0f tokens/s", tokens);
  return g_strdup_printf("%.1f samples/s", num(row, COHORT_FIELD_SAMPLES_PER_S));
}

static char *split_text(JsonArray *a)
{
  GString *s = g_string_new(NULL);
  for (guint i = 0; a && i < json_array_get_length(a); i++)
    g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? "," : "",
                           json_array_get_int_element(a, i));
  return g_string_free(s, FALSE);
}

char *cohort_probe_text(JsonObject *o)
{
  JsonObject *m = json_object_get_object_member(o, COHORT_FIELD_MEASURED);
  if (m == NULL)
    return g_strdup("probe: no measurements");
  GString *s = g_string_new(NULL);
  int world = (int)num(o, COHORT_FIELD_WORLD_SIZE), batch = (int)num(o, COHORT_FIELD_BATCH_SIZE);
  g_string_append_printf(
      s, "Probe: %d rank%s on %d node%s (%s, %s), %s, %.2fM parameters, batch %d per rank in %s\n",
      world, world == 1 ? "" : "s", (int)num(o, COHORT_FIELD_NUM_NODES),
      num(o, COHORT_FIELD_NUM_NODES) == 1 ? "" : "s",
      json_object_get_string_member_with_default(o, COHORT_FIELD_BACKEND, "?"),
      json_object_get_string_member_with_default(o, COHORT_FIELD_DEVICE, "?"),
      json_object_get_string_member_with_default(o, COHORT_FIELD_MODEL, "?"),
      num(o, COHORT_FIELD_PARAMS) / 1e6, batch,
      json_object_get_string_member_with_default(o, COHORT_FIELD_PRECISION, "?"));
  g_string_append_printf(s, "Measured (the slowest rank):\n  forward %.4f s + backward %.4f s",
                         num(m, COHORT_FIELD_FORWARD_S), num(m, COHORT_FIELD_BACKWARD_S));
  if (num(m, COHORT_FIELD_HALF_BATCH) > 0)
    g_string_append_printf(
        s, "; at batch %d: %.4f s + %.4f s", (int)num(m, COHORT_FIELD_HALF_BATCH),
        num(m, COHORT_FIELD_FORWARD_HALF_S), num(m, COHORT_FIELD_BACKWARD_HALF_S));
  g_string_append_printf(s, "\n  optimizer step %.4f s, waiting for data %.4f s per micro-batch\n",
                         num(m, COHORT_FIELD_OPTIMIZER_S), num(m, COHORT_FIELD_DATA_S));
  if (num(m, COHORT_FIELD_SYNCED_PASS_S) > 0)
    g_string_append_printf(s,
                           "  with the buckets in flight a pass took %.4f s: each second of "
                           "overlapped communication costs backward %.2f s\n",
                           num(m, COHORT_FIELD_SYNCED_PASS_S), num(o, COHORT_FIELD_CONTENTION));
  JsonArray *ca = json_object_get_array_member(m, COHORT_FIELD_COLLECTIVES);
  JsonArray *b = json_object_get_array_member(m, COHORT_FIELD_BUCKETS);
  double total = 0;
  for (guint i = 0; b && i < json_array_get_length(b); i++)
    total += num(json_array_get_object_element(b, i), COHORT_FIELD_BYTES);
  if (b != NULL)
    g_string_append_printf(s, "  %u gradient buckets, %.1f MiB on the wire per step\n",
                           json_array_get_length(b), total / 1048576.0);
  for (guint k = 0; ca && k < json_array_get_length(ca); k++) {
    JsonObject *e = json_array_get_object_element(ca, k);
    g_string_append_printf(
        s, "  %s: %.3f ms + %.2f Gbit/s\n",
        json_object_get_string_member_with_default(e, COHORT_FIELD_COLLECTIVE, "?"),
        num(e, COHORT_FIELD_ALPHA_S) * 1e3, num(e, COHORT_FIELD_GBIT_S));
  }
  JsonArray *rows = json_object_get_array_member(o, COHORT_FIELD_FORECAST);
  g_string_append_printf(s, "Forecast (per-rank batch %d, the same links):\n", batch);
  g_string_append(s, "  ranks  step      throughput          efficiency  communication  hidden\n");
  for (guint i = 0; rows && i < json_array_get_length(rows); i++) {
    JsonObject *e = json_array_get_object_element(rows, i);
    g_autofree char *rate = rate_text(e);
    g_string_append_printf(s, "  %-5d  %.3f s  %-18s  %.2f        %.3f s        %.0f %%\n",
                           (int)num(e, COHORT_FIELD_WORLD_SIZE), num(e, COHORT_FIELD_STEP_S), rate,
                           num(e, COHORT_FIELD_EFFICIENCY),
                           num(e, COHORT_FIELD_BUCKET_COMM_S) + num(e, COHORT_FIELD_OTHER_COMM_S),
                           num(e, COHORT_FIELD_HIDDEN) * 100);
  }
  JsonObject *split = json_object_get_object_member(o, COHORT_FIELD_SPLIT);
  if (split != NULL) {
    g_autofree char *even = split_text(json_object_get_array_member(split, COHORT_FIELD_EVEN));
    g_autofree char *chosen = split_text(json_object_get_array_member(split, COHORT_FIELD_AUTO));
    double te = num(split, COHORT_FIELD_EVEN_S), ta = num(split, COHORT_FIELD_AUTO_S);
    g_string_append_printf(s,
                           "Split of each global micro-batch of %d (forward and backward of the "
                           "slowest rank): even %s %.4f s; rank_batch_sizes auto %s %.4f s "
                           "(%.2f× the examples per second of compute)\n",
                           batch * world, even, te, chosen, ta, ta > 0 ? te / ta : 1.0);
  }
  if (world < 2)
    g_string_append(s, "One process: nothing to measure between ranks. Probe with the world size "
                       "you will launch to forecast its scaling.\n");
  else if (json_object_has_member(o, COHORT_FIELD_MIN_BATCH_90))
    g_string_append_printf(s, "Smallest per-rank batch for 90 %% efficiency at %d ranks: %d\n",
                           world, (int)num(o, COHORT_FIELD_MIN_BATCH_90));
  else
    g_string_append_printf(s, "No per-rank batch up to %d reaches 90 %% efficiency at %d ranks\n",
                           (int)num(o, COHORT_FIELD_MIN_BATCH_LIMIT), world);
  return g_string_free(s, FALSE);
}

/* ---- probe.json ---- */

static char *saved_path(const CohortConfig *cfg)
{
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  return g_build_filename(ws, "probe.json", NULL);
}

static gboolean save(const CohortConfig *cfg, JsonObject *result, GError **error)
{
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  if (g_mkdir_with_parents(ws, 0755) != 0)
    return cohort_fail(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "%s: cannot create: %s", ws,
                       g_strerror(errno));
  g_autoptr(JsonNode) node = json_node_init_object(json_node_alloc(), result);
  g_autofree char *text = cohort_json_to_string(node, TRUE);
  g_autofree char *path = saved_path(cfg);
  return cohort_write_file_atomic(path, text, strlen(text), error);
}

JsonObject *cohort_probe_load_saved(const CohortConfig *cfg)
{
  g_autofree char *path = saved_path(cfg);
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!g_file_test(path, G_FILE_TEST_IS_REGULAR) || !g_file_get_contents(path, &text, &len, NULL) ||
      len > MAX_SAVED_BYTES)
    return NULL;
  g_autoptr(JsonNode) node = cohort_json_parse_strict(text, (gssize)len, path, 0, NULL);
  if (node == NULL || !JSON_NODE_HOLDS_OBJECT(node))
    return NULL;
  JsonObject *o = json_object_ref(json_node_get_object(node));
  g_autofree char *hash = cohort_config_hash(cfg);
  const char *saved = json_object_get_string_member_with_default(o, COHORT_FIELD_CONFIG_HASH, "");
  json_object_set_boolean_member(o, COHORT_FIELD_MATCHES_CONFIG, g_str_equal(saved, hash));
  return o;
}

/* ---- the probe on one rank ---- */

/* The slowest rank's compute: every figure's maximum over the ranks. */
static gboolean slowest(CohortRankRun *r, ProbeCompute *c, guint nb, GError **error)
{
  int world = r->opts->world_size;
  guint k = 6 + nb;
  g_autofree double *mine = g_new0(double, k);
  g_autofree double *all = g_new0(double, (gsize)k *world);
  double head[6] = {c->fwd_s, c->bwd_s, c->fwd_half_s, c->bwd_half_s, c->optimizer_s, c->data_s};
  memcpy(mine, head, sizeof head);
  memcpy(mine + 6, c->ready, nb * sizeof(double));
  if (!cohort_train_dist_all_gather(r->dist, mine, k * sizeof(double), all, "probe figures", error))
    return FALSE;
  c->per_rank = g_new(double, 4 * (gsize)world);
  for (int q = 0; q < world; q++)
    memcpy(c->per_rank + 4 * q, all + (gsize)q * k, 4 * sizeof(double));
  for (int q = 1; q < world; q++)
    for (guint i = 0; i < k; i++)
      all[i] = MAX(all[i], all[(gsize)q * k + i]);
  double *out[6] = {&c->fwd_s,      &c->bwd_s,       &c->fwd_half_s,
                    &c->bwd_half_s, &c->optimizer_s, &c->data_s};
  for (int i = 0; i < 6; i++)
    *out[i] = all[i];
  memcpy(c->ready, all + 6, nb * sizeof(double));
  return TRUE;
}

static gboolean probe_rank(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  gint64 t0 = g_get_monotonic_time();
  if (!cohort_rank_run_setup_probe(r, error) || !cohort_rank_run_start_loading(r, error))
    return FALSE;
  CohortModel *m = r->model;
  /* The buckets training will use: of the learning part only (finetune: lora or frozen). */
  double cap =
      cfg->bucket_cap_mb > 0 ? cfg->bucket_cap_mb : cohort_reducer_auto_bucket_mb(m->n_trainable);
  g_autoptr(GArray) plan = cohort_reducer_plan_buckets(m->n_trainable, m->train, m->n_train, cap,
                                                       COHORT_REDUCER_FIRST_BUCKET_MB);
  double wire = cfg->reduce_precision == COHORT_REDUCE_BF16 ? 2 : 4;
  g_autofree double *bucket_bytes = g_new0(double, MAX(plan->len, 1));
  for (guint i = 0; i < plan->len; i++)
    bucket_bytes[i] = (double)g_array_index(plan, CohortBucketRange, i).count * wire;
  cohort_phase_enter(COHORT_RANK_PHASE_PROBE);
  ProbeCompute c = {0};
  gboolean ok =
      cohort_probe_measure_compute(r, plan, &c, error) && slowest(r, &c, plan->len, error);
  double buffer_bytes =
      cfg->broadcast_buffers && m->n_buffer_floats > 0 ? (double)m->n_buffer_floats * 4 : 0;
  /* ZeRO stage 1 gathers what learns */
  double zero_bytes = r->zero != NULL ? (double)m->n_trainable * 4 : 0;
  ProbeCollective colls[PROBE_MAX_COLLECTIVES];
  int n = 0;
  if (ok && r->opts->world_size > 1) {
    n = cohort_probe_measure_collectives(r, bucket_bytes, plan->len, buffer_bytes, zero_bytes,
                                         colls, error);
    ok = n >= 0 && cohort_probe_measure_synced(r, cap, &c.synced_pass_s, error);
  }
  if (ok && r->opts->rank == 0) {
    double probe_s = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
    g_autoptr(JsonObject) result =
        cohort_probe_result(r, &c, plan, bucket_bytes, colls, n, buffer_bytes, zero_bytes, probe_s);
    g_autofree char *text = cohort_probe_text(result);
    fputs(text, stdout);
    fflush(stdout);
    GError *local = NULL;
    if (!save(cfg, result, &local)) {
      cohort_progress_log(r->progress, COHORT_LEVEL_WARNING, "probe: %s", local->message);
      g_clear_error(&local);
    }
    cohort_progress_emit(r->progress, COHORT_EVENT_PROBE, json_object_ref(result));
  }
  g_free(c.ready);
  g_free(c.per_rank);
  /* Rank 0's store serves the others until they are done. */
  return ok && cohort_train_dist_barrier(r->dist, "probe end", error);
}

gboolean cohort_probe(const CohortConfig *cfg, const CohortTrainOptions *opts, GError **error)
{
  CohortRankRun run = {.cfg = cfg, .opts = opts, .progress = opts->progress};
  CohortRankRun *r = &run;
  int threads = 1;
  cohort_phase_enter(COHORT_RANK_PHASE_STARTUP);
  cohort_hang_report_attach(opts->comm, cfg, opts->rank, opts->progress);
  if (!cohort_rank_run_prepare_device(r, &threads, error))
    return FALSE;
  r->dist = cohort_train_dist_new(opts->comm, opts->rank, opts->world_size, cfg);
  cohort_train_dist_set_device(r->dist, &r->dev);
  g_mutex_init(&r->indices_lock);
  gboolean ok = probe_rank(r, error);
  JsonObject *done = json_object_new();
  json_object_set_string_member(done, COHORT_FIELD_STATUS,
                                ok ? COHORT_STATUS_COMPLETED : COHORT_STATUS_FAILED);
  if (ok)
    cohort_progress_emit(r->progress, COHORT_EVENT_DONE, done);
  else
    json_object_unref(done);
  cohort_phase_enter(COHORT_RANK_PHASE_DONE);
  cohort_rank_run_free(r);
  g_mutex_clear(&r->indices_lock);
  if (r->be)
    r->be->set_gemm_mode(COHORT_GEMM_FP32);
  return ok;
}
