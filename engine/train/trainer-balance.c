/* rank_batch_sizes: which rank computes which examples of each global micro-batch
 * (engine/config/rank-batches.h). Before set-up every rank learns every rank's device (one
 * backend per job), the split starts (a list, batch_size each, or for auto the even split within
 * each device's memory), and each share is held against its device's memory plan. With auto the
 * split is then chosen from the ranks' speeds before the first step and revised every
 * rebalance_every steps from the measured step times. A split changes nothing but which rank
 * computes which examples: the global micro-batches and the weighting by examples stay. */
#include "engine/train/trainer-run.h"

#include <math.h>
#include <string.h>

#include "cohort-build-config.h"
#include "engine/base/error.h"
#include "engine/model/lora.h"
#include "engine/train/balance.h"
#include "engine/train/memory-plan.h"
#include "engine/train/probe.h"
#include "engine/train/test-hooks.h"
#include "kernels/backend.h"
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

/* Auto's first revision when nothing could be timed before the first step (ZeRO stages 2 and
 * 3, whose passes need the other ranks): after this many steps. */
#define FIRST_REVISION_STEPS 3
/* Timed passes at each of the two batch sizes before the first step (after one warm-up). */
#define START_REPS 3

/* One rank's device, as every rank learns it (fixed size for the all-gather). */
typedef struct {
  gint32 cuda_device; /* -1: the CPU */
  gint32 cap;         /* auto: the most examples its memory holds (0 until known) */
  double total_bytes; /* the GPU's memory, or the machine's */
  double free_bytes;  /* the GPU's free memory at start, or the machine's */
  char bus_id[32];    /* "0000:3b:00.0"; "" on the CPU */
  char name[96];      /* "NVIDIA GeForce RTX 4070"; "CPU" */
  char host[48];
} RankDevice;

struct CohortRankBalance {
  RankDevice *devices; /* world entries */
  int *caps;           /* auto: each rank's most examples per micro-batch */
  CohortRankSpeed *speed;
  gboolean timed; /* the speeds were measured (else the start is even and revised early) */
};

static const char *src(const CohortRankRun *r)
{
  return r->opts->config_source ? r->opts->config_source : "config";
}

static double gib(double bytes)
{
  return bytes / (1024.0 * 1024.0 * 1024.0);
}

/* ---- devices ---- */

static void describe_device(const RankDevice *d, char *out, gsize len)
{
  if (d->cuda_device < 0)
    g_snprintf(out, len, "CPU (%.1f GiB)", gib(d->total_bytes));
  else
    g_snprintf(out, len, "%s (%.1f GiB, PCI %s)", d->name, gib(d->total_bytes), d->bus_id);
}

static void this_device(CohortRankRun *r, RankDevice *d)
{
  *d = (RankDevice){.cuda_device = r->dev.cuda_device};
  g_strlcpy(d->host, g_get_host_name(), sizeof d->host);
  if (r->dev.cuda_device < 0) {
    d->total_bytes = d->free_bytes = (double)cohort_machine_memory_bytes();
    g_strlcpy(d->name, "CPU", sizeof d->name);
    return;
  }
#if COHORT_HAVE_CUDA
  CohortCudaDeviceInfo info;
  if (cohort_cuda_device_info(r->dev.cuda_device, &info) == 0) {
    g_strlcpy(d->name, info.name, sizeof d->name);
    d->total_bytes = (double)info.total_bytes;
  }
  size_t free_b = 0, total_b = 0;
  if (cohort_cuda_memory(&free_b, &total_b) == 0) {
    d->free_bytes = (double)free_b;
    d->total_bytes = (double)total_b;
  }
  if (cohort_cuda_device_pci_bus_id(r->dev.cuda_device, d->bus_id, sizeof d->bus_id) != 0)
    g_strlcpy(d->bus_id, "?", sizeof d->bus_id);
#endif
}

/* One backend per job: GPU ranks beside CPU ranks are refused, naming them. */
static gboolean same_kind(CohortRankRun *r, GError **error)
{
  const RankDevice *all = r->balance->devices;
  int world = r->opts->world_size;
  g_autoptr(GString) cpu = g_string_new(NULL), gpu = g_string_new(NULL);
  for (int q = 0; q < world; q++) {
    GString *s = all[q].cuda_device < 0 ? cpu : gpu;
    g_string_append_printf(s, "%s%d", s->len ? ", " : "", q);
  }
  if (cpu->len == 0 || gpu->len == 0)
    return TRUE;
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                     "%s: key \"device\": rank%s %s compute%s on the CPU and rank%s %s on GPUs; a "
                     "job has one backend (the gradients' all-reduce, the kernels and the memory "
                     "plan are one kind for every rank): give every rank a GPU, or set \"device\": "
                     "\"cpu\" for all (\"cuda\" makes a rank without a usable GPU fail at its "
                     "start, naming why)",
                     src(r), strchr(cpu->str, ',') ? "s" : "", cpu->str,
                     strchr(cpu->str, ',') ? "" : "s", strchr(gpu->str, ',') ? "s" : "", gpu->str);
}

/* Rank 0 names every rank's GPU by its PCI bus id (CUDA's device numbers follow
 * CUDA_DEVICE_ORDER, which cohort-train sets to PCI_BUS_ID, nvidia-smi's order). */
static void log_devices(CohortRankRun *r)
{
  const RankDevice *all = r->balance->devices;
  int world = r->opts->world_size;
  if (r->opts->rank != 0 || all[0].cuda_device < 0)
    return;
  gboolean differ = FALSE;
  for (int q = 0; q < world; q++) {
    char text[200];
    describe_device(&all[q], text, sizeof text);
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "rank %d on %s: GPU %d, %s, %.1f GiB free at start", q, all[q].host,
                        all[q].cuda_device, text, gib(all[q].free_bytes));
    differ = differ || strcmp(all[q].name, all[0].name) != 0 ||
             fabs(all[q].total_bytes - all[0].total_bytes) > 0.05 * all[0].total_bytes;
  }
  if (differ && r->split == COHORT_SPLIT_EVEN)
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "the ranks' GPUs differ: with every rank taking batch_size the job runs at "
                        "the pace and within the memory of the smallest; rank_batch_sizes \"auto\" "
                        "gives each rank a share by its speed and memory");
}

/* ---- memory ---- */

/* What the memory plan needs at the start for one rank taking `batch` examples. */
static double need_at(const CohortRankRun *r, int batch)
{
  CohortConfig c = *r->cfg;
  c.batch_size = batch;
  CohortMemoryPlan plan;
  if (!cohort_memory_plan(&c, r->opts->world_size, r->opts->local_world_size, &plan, NULL))
    return 0;
  return (double)plan.startup_bytes;
}

/* The most examples (up to `limit`) whose plan fits `budget` bytes; 0 when one does not. */
static int most_that_fit(const CohortRankRun *r, double budget, int limit)
{
  if (need_at(r, limit) <= budget)
    return limit;
  int lo = 0, hi = limit; /* need(lo) fits (or lo 0), need(hi) does not */
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if (need_at(r, mid) <= budget)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Ranks that share this rank's machine (CPU ranks share its memory). */
static gboolean same_host(const RankDevice *a, const RankDevice *b)
{
  return strncmp(a->host, b->host, sizeof a->host) == 0;
}

/* A list's shares against the memory plan: a GPU rank's share against its GPU's free memory,
 * CPU ranks' shares together against their machine's. FALSE naming the key and the rank. */
static gboolean list_fits(CohortRankRun *r, GError **error)
{
  const RankDevice *all = r->balance->devices, *me = &all[r->opts->rank];
  int world = r->opts->world_size, rank = r->opts->rank;
  if (me->cuda_device >= 0) {
    double need = need_at(r, r->share);
    if (me->free_bytes <= 0 || need <= me->free_bytes)
      return TRUE;
    char text[200];
    describe_device(me, text, sizeof text);
    int most = most_that_fit(r, me->free_bytes, r->share);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"rank_batch_sizes\": rank %d's share of %d examples per "
                       "micro-batch needs %.2f GiB of GPU memory and its GPU, %s, has %.2f GiB "
                       "free; allowed: at most %d examples for rank %d (the memory plan's "
                       "figure), or \"auto\"",
                       src(r), rank, r->share, gib(need), text, gib(me->free_bytes), most, rank);
  }
  if (me->total_bytes <= 0)
    return TRUE;
  double need = 0, others = 0;
  int biggest = rank, n_local = 0;
  for (int q = 0; q < world; q++)
    if (same_host(&all[q], me)) {
      double n = need_at(r, r->shares[q]);
      need += n;
      n_local++;
      if (r->shares[q] > r->shares[biggest])
        biggest = q;
    }
  if (need <= me->total_bytes)
    return TRUE;
  for (int q = 0; q < world; q++)
    if (same_host(&all[q], me) && q != biggest)
      others += need_at(r, r->shares[q]);
  int most = most_that_fit(r, me->total_bytes - others, r->shares[biggest]);
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "%s: key \"rank_batch_sizes\": rank %d's share of %d examples per "
                     "micro-batch needs %.2f GiB, and the %d rank%s on this machine (%s) %.2f GiB "
                     "together, but it has %.2f GiB; allowed: at most %d examples for rank %d with "
                     "the other shares as they are (the memory plan's figure), or \"auto\"",
                     src(r), biggest, r->shares[biggest], gib(need_at(r, r->shares[biggest])),
                     n_local, n_local == 1 ? "" : "s", me->host, gib(need), gib(me->total_bytes),
                     most, biggest);
}

/* auto: the most each rank may take — the global micro-batch less one example for each other
 * rank, within what its memory plan fits (a GPU's free memory; a CPU rank's part of its
 * machine's, shared evenly by the ranks there). */
static gboolean auto_caps(CohortRankRun *r, GError **error)
{
  RankDevice *all = r->balance->devices, *me = &all[r->opts->rank];
  int world = r->opts->world_size, rank = r->opts->rank;
  int limit = (int)MAX(r->global_micro - (world - 1), 1);
  int n_local = 0;
  for (int q = 0; q < world; q++)
    n_local += same_host(&all[q], me);
  double budget = me->cuda_device >= 0 ? me->free_bytes : me->total_bytes / MAX(n_local, 1);
  GError *local = NULL;
  int cap = budget > 0 ? most_that_fit(r, budget, limit) : limit;
  if (cap < 1) {
    char text[200];
    describe_device(me, text, sizeof text);
    cohort_fail(&local, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"rank_batch_sizes\": \"auto\": rank %d cannot hold one example: its "
                "memory plan needs %.2f GiB and it has %.2f GiB (%s%s); allowed: a smaller model, "
                "a higher zero_stage, or fewer ranks on this machine",
                src(r), rank, gib(need_at(r, 1)), gib(budget), text,
                me->cuda_device < 0 && n_local > 1 ? ", shared by the ranks on this machine" : "");
  }
  if (!cohort_rank_run_all_ok(r, cap >= 1, local, "hold one example in memory", error))
    return FALSE;
  double mine = cap, *got = g_new(double, world);
  gboolean ok = cohort_train_dist_all_gather(r->dist, &mine, sizeof mine, got, "split caps", error);
  gint64 room = 0;
  for (int q = 0; ok && q < world; q++) {
    r->balance->caps[q] = (int)got[q];
    room += r->balance->caps[q];
  }
  g_free(got);
  if (!ok)
    return FALSE;
  if (room < r->global_micro) {
    g_autofree char *caps = cohort_rank_batches_text(r->balance->caps, world);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"rank_batch_sizes\": \"auto\" cannot place the global "
                       "micro-batch of %d examples (batch_size %d × %d ranks): the ranks' memory "
                       "holds at most %s (rank 0 first), %" G_GINT64_FORMAT " together; allowed: "
                       "a smaller batch_size, more gradient_accumulation_steps, or a higher "
                       "zero_stage",
                       src(r), r->global_micro, r->cfg->batch_size, world, caps, room);
  }
  return TRUE;
}

/* ---- the split in place ---- */

static void take_shares(CohortRankRun *r, const int *shares)
{
  int world = r->opts->world_size, rank = r->opts->rank;
  gint64 sum = 0, offset = 0;
  for (int q = 0; q < world; q++) {
    r->shares[q] = shares[q];
    if (q < rank)
      offset += shares[q];
    sum += shares[q];
  }
  r->share = r->shares[rank];
  r->share_offset = (int)offset;
  r->global_micro = (int)sum;
  /* 1 exactly when every rank takes as many */
  r->weight = (float)((double)r->share * world / (double)sum);
  char text[200] = "";
  if (r->balance)
    describe_device(&r->balance->devices[rank], text, sizeof text);
  cohort_train_dist_set_rank_info(r->dist, r->share, text);
}

void cohort_rank_run_even_split(CohortRankRun *r)
{
  int world = MAX(r->opts->world_size, 1);
  r->split = COHORT_SPLIT_EVEN;
  g_free(r->shares);
  r->shares = g_new(int, world);
  g_autofree int *even = g_new(int, world);
  for (int q = 0; q < world; q++)
    even[q] = r->cfg->batch_size;
  take_shares(r, even);
  r->B = r->cfg->batch_size;
}

gboolean cohort_rank_run_plan_split(CohortRankRun *r, GError **error)
{
  const CohortConfig *cfg = r->cfg;
  int world = MAX(r->opts->world_size, 1), rank = r->opts->rank;
  r->split = cohort_rank_batches_kind(cfg);
  r->balance = g_new0(struct CohortRankBalance, 1);
  r->balance->devices = g_new0(RankDevice, world);
  r->balance->caps = g_new0(int, world);
  r->balance->speed = g_new0(CohortRankSpeed, world);
  r->shares = g_new(int, world);
  RankDevice mine;
  this_device(r, &mine);
  if (!cohort_train_dist_all_gather(r->dist, &mine, sizeof mine, r->balance->devices,
                                    "ranks' devices", error) ||
      !same_kind(r, error))
    return FALSE;
  for (int q = 0; q < world; q++)
    r->balance->devices[q].host[sizeof mine.host - 1] = 0;
  log_devices(r);
  g_autofree int *start = g_new(int, world);
  if (!cohort_rank_batches_start(cfg, r->opts->config_source, world, start, error))
    return FALSE;
  take_shares(r, start);
  r->B = r->share;
  if (r->split == COHORT_SPLIT_LIST) {
    GError *local = NULL;
    gboolean fits = list_fits(r, &local);
    return cohort_rank_run_all_ok(r, fits, local, "fit its share of the batch in memory", error);
  }
  if (r->split != COHORT_SPLIT_AUTO || world == 1)
    return TRUE;
  if (!auto_caps(r, error))
    return FALSE;
  /* The even split within the caps (equal speeds) until the ranks' speeds are known. */
  for (int q = 0; q < world; q++)
    r->balance->speed[q] = (CohortRankSpeed){0, 1};
  if (!cohort_balance_solve(r->balance->speed, r->balance->caps, world, r->global_micro, start,
                            NULL))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"rank_batch_sizes\": no split fits", src(r));
  take_shares(r, start);
  /* The model and the batches hold the most this rank may ever take. */
  r->B = r->balance->caps[rank];
  return TRUE;
}

const int *cohort_rank_run_split_caps(const CohortRankRun *r)
{
  return r->split == COHORT_SPLIT_AUTO && r->balance ? r->balance->caps : NULL;
}

void cohort_rank_run_balance_free(CohortRankRun *r)
{
  if (r->balance) {
    g_free(r->balance->devices);
    g_free(r->balance->caps);
    g_free(r->balance->speed);
    g_clear_pointer(&r->balance, g_free);
  }
  g_clear_pointer(&r->shares, g_free);
}

gboolean cohort_rank_run_set_split(CohortRankRun *r, const int *shares, GError **error)
{
  /* The loader threads read the example orders: they stop, the orders go, they start again
   * at the next micro-batch with the new shares. */
  g_clear_pointer(&r->prefetch, cohort_prefetch_free);
  take_shares(r, shares);
  cohort_rank_run_set_spec(r);
  cohort_rank_run_forget_orders(r);
  return cohort_rank_run_start_loading(r, error);
}

/* ---- auto: the speeds ---- */

/* Seconds of one training forward and backward of the first `b` examples of r->batch. */
static double time_pass(CohortRankRun *r, int b)
{
  CohortModel *m = r->model;
  float x;
  r->batch->B = b;
  cohort_model_zero_grad(m);
  m->be->download(&x, m->grads, sizeof x); /* the device is idle: wall time is its time */
  gint64 t0 = g_get_monotonic_time();
  cohort_test_hooks_slow(r->opts->rank, b);
  cohort_lora_set_train_batch(m, r->batch, (guint64)r->cfg->seed);
  if (r->distill) {
    double parts[COHORT_DISTILL_N_PARTS];
    cohort_distill_forward(r->distill, r->batch, parts);
    cohort_distill_backward(r->distill, 1.0f);
  } else {
    m->ops->forward(m, r->batch, COHORT_FORWARD_TRAIN);
    m->ops->backward(m, 1.0f);
  }
  cohort_lora_set_train_batch(m, NULL, 0);
  m->be->download(&x, m->grads, sizeof x);
  return (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
}

static int compare_doubles(gconstpointer a, gconstpointer b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of START_REPS passes at `b`, the ranks starting each together (as they share a
 * machine in training), after one warm-up. */
static gboolean median_pass(CohortRankRun *r, int b, double *out, GError **error)
{
  double t[START_REPS];
  time_pass(r, b);
  for (int k = 0; k < START_REPS; k++) {
    if (!cohort_train_dist_barrier(r->dist, "split timing", error))
      return FALSE;
    t[k] = time_pass(r, b);
  }
  qsort(t, START_REPS, sizeof t[0], compare_doubles);
  *out = t[START_REPS / 2];
  return TRUE;
}

/* This rank's speed, timed apart from the others before the first step: forward and backward
 * at the even share and half of it, as the probe times them. The passes leave nothing behind:
 * the gradients are zeroed, the buffers (BatchNorm's running statistics) put back. */
static gboolean time_speed(CohortRankRun *r, CohortRankSpeed *out, GError **error)
{
  CohortModel *m = r->model;
  int world = r->opts->world_size;
  int large = MIN(r->B, (int)((r->global_micro + world - 1) / world)), small = large / 2;
  g_autofree float *buffers = m->n_buffer_floats ? g_new(float, m->n_buffer_floats) : NULL;
  if (buffers)
    m->be->download(buffers, m->buffer_data, m->n_buffer_floats * sizeof(float));
  guint64 n = cohort_data_source_count(r->train);
  GError *local = NULL;
  r->batch->epoch = 0;
  for (int b = 0; b < large && !local; b++)
    cohort_data_source_load(r->train, r->batch, b, (guint64)b % MAX(n, 1), &local);
  double t_large = 0, t_small = 0;
  gboolean ok = !local && median_pass(r, large, &t_large, error) &&
                (small < 1 || median_pass(r, small, &t_small, error));
  cohort_model_zero_grad(m);
  if (buffers)
    m->be->upload(m->buffer_data, buffers, m->n_buffer_floats * sizeof(float));
  if (local)
    g_propagate_error(error, local);
  *out = cohort_rank_speed_fit(small, t_small, large, t_large);
  return ok && !local && cohort_device_check(&r->dev, error);
}

/* probe.json's per-rank speeds when the probe measured this config on as many ranks (rank
 * 0's workspace). */
static gboolean probe_speeds(CohortRankRun *r, CohortRankSpeed *speed)
{
  g_autoptr(JsonObject) o = cohort_probe_load_saved(r->cfg);
  int world = r->opts->world_size;
  if (o == NULL ||
      !json_object_get_boolean_member_with_default(o, COHORT_FIELD_MATCHES_CONFIG, FALSE) ||
      json_object_get_int_member_with_default(o, COHORT_FIELD_WORLD_SIZE, 0) != world)
    return FALSE;
  JsonArray *a = json_object_get_array_member(o, COHORT_FIELD_PER_RANK);
  JsonObject *m = json_object_get_object_member(o, COHORT_FIELD_MEASURED);
  if (a == NULL || m == NULL || (int)json_array_get_length(a) != world)
    return FALSE;
  int large = (int)json_object_get_int_member_with_default(o, COHORT_FIELD_BATCH_SIZE, 0);
  int small = (int)json_object_get_int_member_with_default(m, COHORT_FIELD_HALF_BATCH, 0);
  for (int q = 0; q < world; q++) {
    JsonObject *e = json_array_get_object_element(a, (guint)q);
    if (e == NULL || large < 1)
      return FALSE;
    double t = json_object_get_double_member_with_default(e, COHORT_FIELD_FORWARD_S, 0) +
               json_object_get_double_member_with_default(e, COHORT_FIELD_BACKWARD_S, 0);
    double th = json_object_get_double_member_with_default(e, COHORT_FIELD_FORWARD_HALF_S, 0) +
                json_object_get_double_member_with_default(e, COHORT_FIELD_BACKWARD_HALF_S, 0);
    if (!(t > 0))
      return FALSE;
    speed[q] = cohort_rank_speed_fit(small, th, large, t);
  }
  return TRUE;
}

static char *speeds_text(const CohortRankSpeed *speed, int world)
{
  GString *s = g_string_new(NULL);
  for (int q = 0; q < world; q++)
    g_string_append_printf(s, "%srank %d %.4f s + %.5f s per example", q ? ", " : "", q,
                           speed[q].fixed_s, speed[q].per_example_s);
  return g_string_free(s, FALSE);
}

/* Rank 0's choice from its speeds, sent to every rank, and put in place where it changes the
 * split. `why` says where the speeds came from. */
static gboolean choose(CohortRankRun *r, const char *why, GError **error)
{
  struct CohortRankBalance *bal = r->balance;
  int world = r->opts->world_size;
  g_autofree gint32 *next = g_new(gint32, world);
  g_autofree int *current = g_memdup2(r->shares, sizeof(int) * (gsize)world);
  double t_new = 0, t_old = cohort_balance_time(bal->speed, current, world);
  if (r->opts->rank == 0) {
    g_autofree int *solved = g_new(int, world);
    gboolean better =
        cohort_balance_solve(bal->speed, bal->caps, world, r->global_micro, solved, &t_new) &&
        cohort_balance_better(bal->speed, bal->caps, world, current, solved);
    for (int q = 0; q < world; q++)
      next[q] = better ? solved[q] : current[q];
  }
  if (!cohort_train_dist_broadcast_host(r->dist, next, sizeof(gint32) * (gsize)world, error))
    return FALSE;
  gboolean changed = FALSE;
  g_autofree int *shares = g_new(int, world);
  for (int q = 0; q < world; q++) {
    shares[q] = next[q];
    changed = changed || shares[q] != current[q];
  }
  if (r->opts->rank == 0) {
    g_autofree char *a = cohort_rank_batches_text(current, world);
    g_autofree char *b = cohort_rank_batches_text(shares, world);
    g_autofree char *sp = speeds_text(bal->speed, world);
    if (changed)
      cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                          "rank_batch_sizes auto at step %" G_GINT64_FORMAT ": %s (was %s) of "
                          "each global micro-batch of %d, from %s (%s): forecast %.4f s per "
                          "micro-batch instead of %.4f s",
                          r->st.step, b, a, r->global_micro, why, sp, t_new, t_old);
    else
      cohort_progress_log(r->progress, COHORT_LEVEL_DEBUG,
                          "rank_batch_sizes auto at step %" G_GINT64_FORMAT ": %s stays (%s: %s)",
                          r->st.step, a, why, sp);
  }
  return !changed || cohort_rank_run_set_split(r, shares, error);
}

gboolean cohort_rank_run_balance_start(CohortRankRun *r, GError **error)
{
  int world = r->opts->world_size;
  if (r->opts->rank == 0 && r->split == COHORT_SPLIT_LIST && world > 1) {
    g_autofree char *t = cohort_rank_batches_text(r->shares, world);
    cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                        "rank_batch_sizes: %s of each global micro-batch of %d examples", t,
                        r->global_micro);
  }
  if (r->split != COHORT_SPLIT_AUTO || world < 2)
    return TRUE;
  struct CohortRankBalance *bal = r->balance;
  double busy;
  cohort_train_dist_take_busy(r->dist, &busy);
  gint32 from_probe = r->opts->rank == 0 && probe_speeds(r, bal->speed);
  if (!cohort_train_dist_broadcast_host(r->dist, &from_probe, sizeof from_probe, error))
    return FALSE;
  const char *why = "the probe's timing (probe.json)";
  if (!from_probe && r->shard == NULL) {
    /* ZeRO stages 2 and 3 cannot time a pass apart (its layers and gradients need the others):
     * they start even and revise early. */
    CohortRankSpeed mine;
    if (!time_speed(r, &mine, error) ||
        !cohort_train_dist_all_gather(r->dist, &mine, sizeof mine, bal->speed, "split speeds",
                                      error))
      return FALSE;
    why = "passes timed before the first step";
    from_probe = TRUE;
  }
  bal->timed = from_probe;
  if (!bal->timed) {
    if (r->opts->rank == 0)
      cohort_progress_log(r->progress, COHORT_LEVEL_INFO,
                          "rank_batch_sizes auto: the ranks start even and the split follows "
                          "their step times from step %d (ZeRO stage %d cannot time a pass "
                          "apart, and probe.json has not measured this config)",
                          FIRST_REVISION_STEPS, r->cfg->zero_stage);
    return TRUE;
  }
  return choose(r, why, error);
}

gboolean cohort_rank_run_balance_step(CohortRankRun *r, GError **error)
{
  int world = r->opts->world_size, every = r->cfg->rebalance_every;
  gint64 step = r->st.step;
  if (r->split != COHORT_SPLIT_AUTO || world < 2 || step >= r->total_steps)
    return TRUE;
  struct CohortRankBalance *bal = r->balance;
  gboolean first = !bal->timed && step == FIRST_REVISION_STEPS;
  if (!first && !(every > 0 && step % every == 0))
    return TRUE;
  double busy = 0;
  int steps = cohort_train_dist_take_busy(r->dist, &busy);
  double mine = steps > 0 ? busy / steps / r->accum : 0;
  g_autofree double *measured = g_new(double, world);
  if (!cohort_train_dist_all_gather(r->dist, &mine, sizeof mine, measured, "split times", error))
    return FALSE;
  if (!bal->timed)
    for (int q = 0; q < world; q++)
      bal->speed[q] = (CohortRankSpeed){0, MAX(measured[q], 1e-9) / r->shares[q]};
  else
    cohort_balance_correct(bal->speed, r->shares, measured, world);
  bal->timed = TRUE;
  return choose(r, "the step times measured since the last revision", error);
}
