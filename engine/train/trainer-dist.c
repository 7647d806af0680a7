#include "engine/train/trainer-dist.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/progress/control.h"
#include "engine/distributed/reducer.h"
#include "engine/distributed/sharder.h"
#include "engine/train/nvml.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm-paths.h"

/* Per-rank figures gathered for the `ranks` event; fixed size for all_gather. */
typedef struct {
  double step_s, data_s, comm_s, syncbn_s;
  double reduce_s, reduce_wait_s;   /* the gradient all-reduce: its time, and the part waited for */
  double mem_bytes, mem_peak_bytes; /* resident now, and the most so far (VmHWM) */
  double teacher_bytes;             /* the distillation teacher's share, 0 without one */
  double optim_bytes;               /* this rank's optimizer state */
  double shard_bytes;               /* ZeRO 2/3: its shards of gradients, EMA, parameters */
  double gathered_peak_bytes;       /* ZeRO 3: the most parameter bytes gathered at once */
  double gather_wait_s;             /* ZeRO 3: the layer hook's waits for gathers */
  guint64 order; /* the digest of the communication thread's collectives (comm-thread.h) */
  double gpu_mem_used, gpu_mem_peak, gpu_util; /* < 0: not known (CPU rank, no NVML) */
  double batch;                                /* examples per micro-batch (rank_batch_sizes) */
  char host[48];
  char device[96]; /* "cpu", or the GPU's name, memory and PCI bus id */
} RankStats;

/* How often (optimizer steps) the `ranks` event is sent. */
#define RANKS_EVERY 10

struct CohortTrainDist {
  CohortComm *comm; /* NULL with one process */
  CohortComputeDevice dev;
  int rank;
  int world_size;
  double timeout_s;
  CohortReducePrecision reduce_precision;
  CohortReducer *reducer;
  CohortSharder *sharder; /* ZeRO stages 2 and 3: in the reducer's place */
  gboolean new_step;      /* the next backward is a step's first */
  GError *reducer_error;  /* the reducer could not be set up: every synced backward fails */
  gboolean sync_bn, broadcast_buffers;
  CohortModelComm model_comm; /* SyncBatchNorm's collectives, when the model has them */
  gboolean model_comm_set;
  GError *syncbn_error; /* the first failure of one of them */
  float *stage;         /* GPU rank, host communicator: SyncBatchNorm's values go through here */
  size_t stage_len;
  void *dev_buf; /* GPU rank over NCCL: the device buffer the host-side collectives use */
  size_t dev_buf_bytes;
  gint64 data_us, step_us, comm_us, syncbn_us;
  gint64 reduce_wait_us; /* part of comm_us: waiting for the reducer at the end of backward */
  gint64 gather_wait_us; /* ZeRO 3: the layer hook's waits for gathers */
  /* The steps' time without the waits for other ranks (rank_batch_sizes auto): since the
   * last cohort_train_dist_take_busy, and the waits counted when the step began. */
  gint64 busy_us, step_waits_us;
  int busy_steps;
  int share;
  char device[96];
  guint64 gpu_mem_peak; /* the most NVML showed at any report */
  size_t teacher_bytes;
  size_t optim_bytes, shard_bytes;
  int steps_since_report;
  int syncbn_forward, syncbn_backward; /* SyncBatchNorm's collectives in this pass so far */
  /* The model's parameters, those that learn (engine/model/finetune.h), and the gradient
   * bytes one synced backward all-reduces: for the ranks event. */
  size_t params, trainable, allreduce_bytes;
};

CohortTrainDist *cohort_train_dist_new(CohortComm *comm, int rank, int world_size,
                                       const CohortConfig *cfg)
{
  CohortTrainDist *d = g_new0(CohortTrainDist, 1);
  d->comm = world_size > 1 ? comm : NULL;
  d->rank = rank;
  d->world_size = world_size;
  d->timeout_s = cfg->timeout_s;
  d->reduce_precision = cfg->reduce_precision;
  d->sync_bn = cfg->sync_batchnorm;
  d->broadcast_buffers = cfg->broadcast_buffers;
  d->dev.be = cohort_backend_cpu();
  d->dev.cuda_device = -1;
  return d;
}

void cohort_train_dist_set_device(CohortTrainDist *d, const CohortComputeDevice *dev)
{
  d->dev = *dev;
}

/* "nccl" reaches device memory only: the loop's small host-side collectives (metric sums,
 * the stop vote, the ranks report) go through a device copy. */
static gboolean device_comm(const CohortTrainDist *d)
{
  return d->comm && strcmp(cohort_comm_backend_name(d->comm), "nccl") == 0;
}

/* The device buffer the small host-side collectives go through over NCCL, kept for the run:
 * cudaMalloc and cudaFree wait for the whole device, so allocating one per collective would
 * stall every step. Grows (rarely: they are a few hundred bytes) and never shrinks. */
static void *device_buffer(CohortTrainDist *d, size_t bytes, GError **error)
{
  if (d->dev_buf_bytes >= bytes)
    return d->dev_buf;
  size_t want = MAX(bytes, 4096);
  void *buf = d->dev.be->alloc(want);
  if (!buf) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "out of GPU memory for %zu bytes of a collective", bytes);
    return NULL;
  }
  if (d->dev_buf)
    d->dev.be->free(d->dev_buf);
  d->dev_buf = buf;
  d->dev_buf_bytes = want;
  return buf;
}

/* The name of the calling thread's next collectives in hang reports and errors. */
static void label(const char *what)
{
  cohort_comm_set_label(what);
}

static gboolean sum_f64(CohortTrainDist *d, double *values, int n, GError **error)
{
  if (!device_comm(d))
    return cohort_comm_all_reduce_f64(d->comm, values, (gsize)n, COHORT_REDUCE_SUM, 0, error);
  const CohortBackend *be = d->dev.be;
  size_t bytes = (size_t)n * sizeof(double);
  void *buf = device_buffer(d, bytes, error);
  if (!buf)
    return FALSE;
  be->upload(buf, values, bytes);
  gboolean ok = cohort_comm_all_reduce_f64(d->comm, buf, (gsize)n, COHORT_REDUCE_SUM, 0, error);
  if (ok)
    be->download(values, buf, bytes);
  return ok;
}

static gboolean gather_bytes(CohortTrainDist *d, const void *send, gsize nbytes, void *recv,
                             GError **error)
{
  if (!device_comm(d))
    return cohort_comm_all_gather(d->comm, send, nbytes, recv, 0, error);
  const CohortBackend *be = d->dev.be;
  size_t all = nbytes * (size_t)d->world_size;
  char *buf = device_buffer(d, nbytes + all, error);
  if (!buf)
    return FALSE;
  be->upload(buf, send, nbytes);
  gboolean ok = cohort_comm_all_gather(d->comm, buf, nbytes, buf + nbytes, 0, error);
  if (ok)
    be->download(recv, buf + nbytes, all);
  return ok;
}

/* Device buffers that the communicator cannot reach directly (GPU rank, not "nccl"). */
static gboolean staged(const CohortTrainDist *d)
{
  return d->dev.cuda_device >= 0 && strcmp(cohort_comm_backend_name(d->comm), "nccl") != 0;
}

void cohort_train_dist_free(CohortTrainDist *d)
{
  if (!d)
    return;
  cohort_reducer_free(d->reducer);
  g_clear_error(&d->reducer_error);
  g_clear_error(&d->syncbn_error);
  g_free(d->stage);
  if (d->dev_buf)
    d->dev.be->free(d->dev_buf);
  g_free(d);
}

/* One SyncBatchNorm collective, run on the reducer's communication thread. */
typedef struct {
  CohortTrainDist *d;
  const float *send; /* all-gather's input; NULL for the all-reduce */
  float *buf;        /* all-gather's output, or the all-reduce's values */
  size_t count;      /* values each rank contributes */
  char label[48];    /* "SyncBatchNorm layer 3 (forward)" */
} SyncJob;

static gboolean sync_job_direct(SyncJob *j, GError **error)
{
  CohortComm *comm = j->d->comm;
  label(j->label);
  if (j->send)
    return cohort_comm_all_gather(comm, j->send, j->count * sizeof(float), j->buf, 0, error);
  return cohort_comm_all_reduce_f32(comm, j->buf, j->count, COHORT_REDUCE_SUM, 0, error);
}

static gboolean sync_job(gpointer data, GError **error)
{
  SyncJob *j = data;
  CohortTrainDist *d = j->d;
  if (!staged(d))
    return sync_job_direct(j, error);
  /* Device values, host communicator: through host memory (the main thread is waiting). */
  const CohortBackend *be = d->dev.be;
  size_t world = (size_t)d->world_size, out = j->send ? world * j->count : j->count;
  if (d->stage_len < j->count + out) {
    g_free(d->stage);
    d->stage_len = j->count + out;
    d->stage = g_new(float, d->stage_len);
  }
  SyncJob host = {.d = d, .count = j->count, .buf = d->stage + j->count};
  g_strlcpy(host.label, j->label, sizeof host.label);
  if (j->send) {
    host.send = d->stage;
    be->download(d->stage, j->send, j->count * sizeof(float));
  } else {
    be->download(host.buf, j->buf, j->count * sizeof(float));
  }
  if (!sync_job_direct(&host, error))
    return FALSE;
  be->upload(j->buf, host.buf, out * sizeof(float));
  return TRUE;
}

static gboolean run_sync(CohortTrainDist *d, SyncJob *j)
{
  if (d->syncbn_error)
    return FALSE; /* the communicator is broken: do not wait for it again */
  gint64 t0 = g_get_monotonic_time();
  gboolean ok = d->sharder ? cohort_sharder_run(d->sharder, sync_job, j, &d->syncbn_error)
                           : cohort_reducer_run(d->reducer, sync_job, j, &d->syncbn_error);
  d->syncbn_us += g_get_monotonic_time() - t0;
  return ok;
}

/* SyncBatchNorm's collectives are named by the layer: the forward's k-th all-gather and the
 * backward's k-th all-reduce of the pass (backward counts from the last layer). */
static gboolean model_all_gather(gpointer data, const float *send, size_t count, float *recv)
{
  CohortTrainDist *d = data;
  SyncJob j = {.d = d, .send = send, .buf = recv, .count = count};
  g_snprintf(j.label, sizeof j.label, "SyncBatchNorm layer %d (forward)", ++d->syncbn_forward);
  return run_sync(d, &j);
}

static gboolean model_all_reduce_sum(gpointer data, float *buf, size_t count)
{
  CohortTrainDist *d = data;
  SyncJob j = {.d = d, .buf = buf, .count = count};
  g_snprintf(j.label, sizeof j.label, "SyncBatchNorm layer %d (backward)",
             d->syncbn_forward - d->syncbn_backward++);
  return run_sync(d, &j);
}

/* SyncBatchNorm: the model's collectives go through the reducer's thread. */
static void attach_model_comm(CohortTrainDist *d, CohortModel *m)
{
  d->model_comm = (CohortModelComm){
      .world_size = d->world_size,
      .all_gather = model_all_gather,
      .all_reduce_sum = model_all_reduce_sum,
      .data = d,
  };
  GError *e = NULL;
  if (!cohort_model_set_comm(m, &d->model_comm, &e)) {
    if (!d->reducer_error)
      d->reducer_error = e;
    else
      g_error_free(e);
    return;
  }
  d->model_comm_set = TRUE;
}

void cohort_train_dist_attach_sharder(CohortTrainDist *d, CohortModel *m, CohortSharder *sharder,
                                      int stage, size_t shard_bytes)
{
  if (!d->comm)
    return;
  d->sharder = sharder;
  d->shard_bytes = shard_bytes;
  cohort_sharder_set_precision(sharder, d->reduce_precision);
  cohort_model_set_grad_ready_func(m, cohort_sharder_grad_ready, sharder);
  /* stage 3 gathers layers there; both stages commit a layer's gradients */
  (void)stage;
  cohort_model_set_layer_hook(m, cohort_sharder_layer_hook, sharder);
  if (d->sync_bn)
    attach_model_comm(d, m);
}

/* What this rank waited for others so far: communication, SyncBatchNorm's collectives and
 * ZeRO-3's gathers. */
static gint64 waits_us(CohortTrainDist *d)
{
  if (d->sharder)
    d->gather_wait_us += cohort_sharder_take_gather_wait_us(d->sharder);
  return d->comm_us + d->syncbn_us + d->gather_wait_us;
}

void cohort_train_dist_start_step(CohortTrainDist *d)
{
  d->new_step = TRUE;
  d->step_waits_us = waits_us(d);
}

void cohort_train_dist_attach(CohortTrainDist *d, CohortModel *m, double bucket_cap_mb)
{
  if (!d->comm || d->sharder)
    return;
  if (bucket_cap_mb <= 0)
    bucket_cap_mb = cohort_reducer_auto_bucket_mb(m->n_trainable);
  if (d->dev.cuda_device >= 0)
    d->reducer = cohort_reducer_new_cuda(d->comm, m->grads, m->n_trainable, m->train, m->n_train,
                                         bucket_cap_mb, COHORT_REDUCER_FIRST_BUCKET_MB,
                                         d->dev.cuda_device, staged(d));
  else
    d->reducer = cohort_reducer_new(d->comm, m->grads, m->n_trainable, m->train, m->n_train,
                                    bucket_cap_mb, COHORT_REDUCER_FIRST_BUCKET_MB);
  cohort_model_set_grad_ready_func(m, cohort_reducer_grad_ready, d->reducer);
  d->params = m->n_params;
  d->trainable = m->n_trainable;
  d->allreduce_bytes = 0;
  for (guint b = 0; b < cohort_reducer_num_buckets(d->reducer); b++) {
    size_t offset, count;
    cohort_reducer_bucket(d->reducer, b, &offset, &count);
    d->allreduce_bytes += count * (d->reduce_precision == COHORT_REDUCE_FP32 ? 4 : 2);
  }
  /* attach cannot fail; the first end_backward reports it instead */
  cohort_reducer_set_precision(d->reducer, d->reduce_precision, &d->reducer_error);
  if (d->sync_bn)
    attach_model_comm(d, m);
}

void cohort_train_dist_begin_backward(CohortTrainDist *d, gboolean sync)
{
  d->syncbn_forward = d->syncbn_backward = 0;
  if (d->sharder) {
    /* Every micro-step reduces (no no_sync): the first of a step replaces the shard's sums. */
    cohort_sharder_prepare(d->sharder, !d->new_step);
    d->new_step = FALSE;
  } else if (d->reducer) {
    cohort_reducer_prepare(d->reducer, sync);
  }
}

gboolean cohort_train_dist_end_backward(CohortTrainDist *d, GError **error)
{
  if (!d->reducer && !d->sharder)
    return TRUE;
  if (d->reducer_error) {
    g_propagate_error(error, g_error_copy(d->reducer_error));
    return FALSE;
  }
  gint64 wait_us = 0;
  gboolean ok = d->sharder ? cohort_sharder_finish(d->sharder, &wait_us, error)
                           : cohort_reducer_finish(d->reducer, &wait_us, error);
  d->comm_us += wait_us;
  d->reduce_wait_us += wait_us;
  if (ok && d->syncbn_error) {
    g_propagate_prefixed_error(error, g_error_copy(d->syncbn_error), "SyncBatchNorm: ");
    return FALSE;
  }
  return ok;
}

gboolean cohort_train_dist_broadcast_buffers(CohortTrainDist *d, CohortModel *m, GError **error)
{
  if (!d->comm || !d->broadcast_buffers || m->n_buffer_floats == 0)
    return TRUE;
  gint64 t0 = g_get_monotonic_time();
  label("buffer broadcast");
  gboolean ok = cohort_train_dist_broadcast_params(d, m->buffer_data, m->n_buffer_floats, error);
  d->comm_us += g_get_monotonic_time() - t0;
  return ok;
}

gboolean cohort_train_dist_sum(CohortTrainDist *d, double *values, int n, GError **error)
{
  if (!d->comm)
    return TRUE;
  gint64 t0 = g_get_monotonic_time();
  label("metric sum");
  gboolean ok = sum_f64(d, values, n, error);
  d->comm_us += g_get_monotonic_time() - t0;
  return ok;
}

gboolean cohort_train_dist_barrier(CohortTrainDist *d, const char *what, GError **error)
{
  if (!d->comm)
    return TRUE;
  label(what);
  return cohort_comm_barrier(d->comm, 0, error);
}

gboolean cohort_train_dist_wait_for_data(CohortTrainDist *d, GError **error)
{
  if (!d->comm)
    return TRUE;
  return cohort_comm_barrier(d->comm, MAX(d->timeout_s, COHORT_DATA_WAIT_S), error);
}

gboolean cohort_train_dist_broadcast_params(CohortTrainDist *d, float *params, size_t n,
                                            GError **error)
{
  if (!d->comm)
    return TRUE;
  label("start-up broadcast");
  if (!staged(d))
    return cohort_comm_broadcast(d->comm, params, n * sizeof(float), 0, 0, error);
  /* Once at start-up: a plain host copy is enough. */
  g_autofree float *host = g_new(float, n);
  d->dev.be->download(host, params, n * sizeof(float));
  if (!cohort_comm_broadcast(d->comm, host, n * sizeof(float), 0, 0, error))
    return FALSE;
  d->dev.be->upload(params, host, n * sizeof(float));
  return TRUE;
}

gboolean cohort_train_dist_all_gather_host(CohortTrainDist *d, const void *send, gsize nbytes,
                                           void *recv, GError **error)
{
  if (!d->comm) {
    memcpy(recv, send, nbytes);
    return TRUE;
  }
  return gather_bytes(d, send, nbytes, recv, error);
}

gboolean cohort_train_dist_broadcast_host(CohortTrainDist *d, void *buf, gsize nbytes,
                                          GError **error)
{
  return cohort_train_dist_broadcast_from(d, buf, nbytes, 0, error);
}

gboolean cohort_train_dist_broadcast_from(CohortTrainDist *d, void *buf, gsize nbytes, int root,
                                          GError **error)
{
  if (!d->comm)
    return TRUE;
  label("start-up broadcast");
  if (!device_comm(d))
    return cohort_comm_broadcast(d->comm, buf, nbytes, root, 0, error);
  const CohortBackend *be = d->dev.be;
  void *dev = device_buffer(d, MAX(nbytes, 1), error);
  if (!dev)
    return FALSE;
  be->upload(dev, buf, nbytes);
  gboolean ok = cohort_comm_broadcast(d->comm, dev, nbytes, root, 0, error);
  if (ok)
    be->download(buf, dev, nbytes);
  return ok;
}

gboolean cohort_train_dist_should_stop(CohortTrainDist *d, volatile int *stop_flag, gboolean *stop,
                                       GError **error)
{
  guint none = 0;
  return cohort_train_dist_vote(d, stop_flag, &none, stop, error);
}

/* Control requests in the vote: one slot each, so a sum > 0 means some rank asked. */
static const guint vote_requests[] = {COHORT_CONTROL_SAMPLE, COHORT_CONTROL_SAVE,
                                      COHORT_CONTROL_CHECK};

gboolean cohort_train_dist_vote(CohortTrainDist *d, volatile int *stop_flag, guint *requests,
                                gboolean *stop, GError **error)
{
  gboolean mine = stop_flag && *stop_flag;
  *stop = mine;
  if (!d->comm)
    return TRUE;
  /* One all-reduce for the stop and every request: the vote costs what it cost before. */
  double flags[1 + G_N_ELEMENTS(vote_requests)] = {mine ? 1 : 0};
  for (guint i = 0; i < G_N_ELEMENTS(vote_requests); i++)
    flags[1 + i] = (*requests & vote_requests[i]) ? 1 : 0;
  label("step vote");
  if (!sum_f64(d, flags, G_N_ELEMENTS(flags), error))
    return FALSE;
  *stop = flags[0] > 0;
  *requests = 0;
  for (guint i = 0; i < G_N_ELEMENTS(vote_requests); i++)
    if (flags[1 + i] > 0)
      *requests |= vote_requests[i];
  return TRUE;
}

gboolean cohort_train_dist_all_gather(CohortTrainDist *d, const void *send, gsize nbytes,
                                      void *recv, const char *what, GError **error)
{
  if (!d->comm) {
    memcpy(recv, send, nbytes);
    return TRUE;
  }
  gint64 t0 = g_get_monotonic_time();
  label(what);
  gboolean ok = gather_bytes(d, send, nbytes, recv, error);
  d->comm_us += g_get_monotonic_time() - t0;
  return ok;
}

void cohort_train_dist_set_teacher_bytes(CohortTrainDist *d, size_t bytes)
{
  d->teacher_bytes = bytes;
}

void cohort_train_dist_set_optim_bytes(CohortTrainDist *d, size_t bytes)
{
  d->optim_bytes = bytes;
}

void cohort_train_dist_add_comm_time(CohortTrainDist *d, gint64 us)
{
  d->comm_us += us;
}

void cohort_train_dist_add_data_time(CohortTrainDist *d, gint64 us)
{
  d->data_us += us;
}

void cohort_train_dist_add_step_time(CohortTrainDist *d, gint64 us)
{
  d->step_us += us;
  d->steps_since_report++;
  d->busy_us += MAX(us - (waits_us(d) - d->step_waits_us), 0);
  d->busy_steps++;
}

int cohort_train_dist_take_busy(CohortTrainDist *d, double *busy_s)
{
  int steps = d->busy_steps;
  *busy_s = (double)d->busy_us / 1e6;
  d->busy_us = 0;
  d->busy_steps = 0;
  return steps;
}

void cohort_train_dist_set_rank_info(CohortTrainDist *d, int share, const char *device)
{
  d->share = share;
  g_strlcpy(d->device, device ? device : "", sizeof d->device);
}

static double resident_bytes(void)
{
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f)
    return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
    resident = 0;
  fclose(f);
  return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/* The most this process has had resident (the kernel's high-water mark, VmHWM); 0 when
 * /proc cannot tell. */
static double peak_resident_bytes(void)
{
  g_autofree char *status = NULL;
  if (!g_file_get_contents("/proc/self/status", &status, NULL, NULL))
    return 0;
  const char *hwm = strstr(status, "\nVmHWM:");
  return hwm ? g_ascii_strtod(hwm + 7, NULL) * 1024.0 : 0; /* in kB */
}

/* Rank r's entry of the `ranks` event. */
static JsonObject *rank_entry(const CohortTrainDist *d, RankStats *s, int r)
{
  JsonObject *o = json_object_new();
  json_object_set_int_member(o, COHORT_FIELD_RANK, r);
  s->host[sizeof s->host - 1] = 0;
  json_object_set_string_member(o, COHORT_FIELD_HOST, s->host);
  s->device[sizeof s->device - 1] = 0;
  if (s->device[0])
    json_object_set_string_member(o, COHORT_FIELD_DEVICE, s->device);
  if (s->batch > 0)
    json_object_set_int_member(o, COHORT_FIELD_BATCH, (gint64)s->batch);
  json_object_set_double_member(o, COHORT_FIELD_STEP_S, s->step_s);
  json_object_set_double_member(o, COHORT_FIELD_DATA_S, s->data_s);
  json_object_set_double_member(o, COHORT_FIELD_COMM_S, s->comm_s);
  json_object_set_double_member(o, COHORT_FIELD_ALLREDUCE_S, s->reduce_s);
  /* The share of the all-reduce that ran while backward computed (the rest was waited for). */
  if (s->reduce_s > 0)
    json_object_set_double_member(o, COHORT_FIELD_ALLREDUCE_HIDDEN,
                                  CLAMP(1.0 - s->reduce_wait_s / s->reduce_s, 0.0, 1.0));
  if (d->model_comm_set)
    json_object_set_double_member(o, COHORT_FIELD_SYNCBN_S, s->syncbn_s);
  json_object_set_int_member(o, COHORT_FIELD_MEM_BYTES, (gint64)s->mem_bytes);
  if (s->mem_peak_bytes > 0)
    json_object_set_int_member(o, COHORT_FIELD_MEM_PEAK_BYTES, (gint64)s->mem_peak_bytes);
  json_object_set_int_member(o, COHORT_FIELD_OPTIM_BYTES, (gint64)s->optim_bytes);
  if (d->sharder) {
    json_object_set_int_member(o, COHORT_FIELD_SHARD_BYTES, (gint64)s->shard_bytes);
    json_object_set_int_member(o, COHORT_FIELD_GATHERED_PEAK_BYTES, (gint64)s->gathered_peak_bytes);
    json_object_set_double_member(o, COHORT_FIELD_GATHER_WAIT_S, s->gather_wait_s);
    g_autofree char *order = g_strdup_printf("%016" G_GINT64_MODIFIER "x", s->order);
    json_object_set_string_member(o, COHORT_FIELD_ZERO_ORDER, order);
  }
  if (s->teacher_bytes > 0)
    json_object_set_int_member(o, COHORT_FIELD_TEACHER_BYTES, (gint64)s->teacher_bytes);
  if (s->gpu_mem_used >= 0) {
    json_object_set_int_member(o, COHORT_FIELD_GPU_MEM_USED, (gint64)s->gpu_mem_used);
    json_object_set_int_member(o, COHORT_FIELD_GPU_MEM_PEAK, (gint64)s->gpu_mem_peak);
    json_object_set_int_member(o, COHORT_FIELD_GPU_UTIL, (gint64)s->gpu_util);
  }
  return o;
}

gboolean cohort_train_dist_report_ranks(CohortTrainDist *d, CohortProgress *progress, gint64 step,
                                        GError **error)
{
  if (!d->comm || d->steps_since_report < RANKS_EVERY)
    return TRUE;
  double k = d->steps_since_report;
  waits_us(d); /* ZeRO-3's gather waits into gather_wait_us */
  RankStats mine = {
      .step_s = (double)d->step_us / 1e6 / k,
      .data_s = (double)d->data_us / 1e6 / k,
      .comm_s = (double)d->comm_us / 1e6 / k,
      .reduce_s = d->reducer   ? (double)cohort_reducer_take_busy_us(d->reducer) / 1e6 / k
                  : d->sharder ? (double)cohort_sharder_take_busy_us(d->sharder) / 1e6 / k
                               : 0,
      .reduce_wait_s = (double)d->reduce_wait_us / 1e6 / k,
      .syncbn_s = (double)d->syncbn_us / 1e6 / k,
      .mem_bytes = resident_bytes(),
      .mem_peak_bytes = peak_resident_bytes(),
      .teacher_bytes = (double)d->teacher_bytes,
      .optim_bytes = (double)d->optim_bytes,
      .shard_bytes = (double)d->shard_bytes,
      .gathered_peak_bytes =
          d->sharder ? (double)cohort_sharder_gathered_peak_bytes(d->sharder) : 0,
      .gather_wait_s = (double)d->gather_wait_us / 1e6 / k,
      .batch = d->share,
      .order = d->sharder   ? cohort_sharder_order(d->sharder)
               : d->reducer ? cohort_reducer_order(d->reducer)
                            : 0,
  };
  g_strlcpy(mine.host, g_get_host_name(), sizeof mine.host);
  mine.gpu_mem_used = mine.gpu_mem_peak = mine.gpu_util = -1;
  guint64 used = 0;
  guint util = 0;
  if (d->dev.cuda_device >= 0 && cohort_nvml_query(d->dev.cuda_device, &used, &util)) {
    d->gpu_mem_peak = MAX(d->gpu_mem_peak, used);
    mine.gpu_mem_used = (double)used;
    mine.gpu_mem_peak = (double)d->gpu_mem_peak;
    mine.gpu_util = util;
  }
  g_strlcpy(mine.device, d->device, sizeof mine.device);
  d->step_us = d->data_us = d->comm_us = d->reduce_wait_us = d->syncbn_us = 0;
  d->gather_wait_us = 0;
  d->steps_since_report = 0;
  g_autofree RankStats *all = g_new0(RankStats, d->world_size);
  label("ranks report");
  if (!gather_bytes(d, &mine, sizeof mine, all, error))
    return FALSE;
  /* The communication thread (DDP's buckets, ZeRO's gathers and reduce-scatters, and
   * SyncBatchNorm's collectives among them) must queue the same collectives in the same order
   * on every rank: any rank that did not stops all of them here, together. */
  const char *items = d->sharder ? "gathers and reduce-scatters"
                                 : "gradient buckets and SyncBatchNorm's collectives";
  const char *how = d->sharder ? "the model's layer hooks"
                               : "the model's gradient reports and SyncBatchNorm calls";
  for (int r = 1; r < d->world_size; r++)
    if (all[r].order != all[0].order) {
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                  "%s: rank %d queued its %s in another order than rank 0 (digests "
                  "%016" G_GINT64_MODIFIER "x and %016" G_GINT64_MODIFIER "x); %s must come in "
                  "the same order on every rank",
                  d->sharder ? "ZeRO" : "DDP", r, items, all[r].order, all[0].order, how);
      return FALSE;
    }
  if (d->rank != 0)
    return TRUE;
  JsonObject *f = json_object_new();
  json_object_set_int_member(f, COHORT_FIELD_STEP, step);
  JsonArray *ranks = json_array_new();
  int slowest = 0;
  for (int r = 0; r < d->world_size; r++) {
    JsonObject *o = rank_entry(d, &all[r], r);
    json_array_add_object_element(ranks, o);
    /* The slowest rank is the one the others wait for: most compute, least waiting. */
    if (all[r].step_s - all[r].comm_s - all[r].syncbn_s >
        all[slowest].step_s - all[slowest].comm_s - all[slowest].syncbn_s)
      slowest = r;
  }
  json_object_set_array_member(f, COHORT_FIELD_RANKS, ranks);
  json_object_set_int_member(f, COHORT_FIELD_SLOWEST, slowest);
  JsonArray *shares = json_array_new();
  for (int r = 0; r < d->world_size; r++)
    json_array_add_int_element(shares, (gint64)all[r].batch);
  json_object_set_array_member(f, COHORT_FIELD_RANK_BATCH_SIZES, shares);
  if (d->reducer) {
    json_object_set_int_member(f, COHORT_FIELD_PARAMS, (gint64)d->params);
    json_object_set_int_member(f, COHORT_FIELD_TRAINABLE, (gint64)d->trainable);
    json_object_set_int_member(f, COHORT_FIELD_ALLREDUCE_BYTES, (gint64)d->allreduce_bytes);
  }
  cohort_progress_emit(progress, COHORT_EVENT_RANKS, f);
  return TRUE;
}

void cohort_train_set_threads(int threads)
{
  cohort_backend_cpu()->set_threads(threads);
}

gboolean cohort_train_set_cpu_matmul(const CohortConfig *cfg, const char *source, GError **error)
{
  static const char *const names[] = {"auto", "openblas", "onednn", "measure"};
  if (cfg->cpu_matmul == COHORT_CPU_MATMUL_AUTO || cohort_cpu_gemm_force(names[cfg->cpu_matmul]))
    return TRUE;
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
              "%s: key \"cpu_matmul\": \"%s\" cannot run on this machine (oneDNN did not "
              "start); allowed: \"auto\" or \"openblas\"",
              source ? source : "config", names[cfg->cpu_matmul]);
  return FALSE;
}
