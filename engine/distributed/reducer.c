#include "engine/distributed/reducer.h"

#include "cohort-build-config.h"
#include "kernels/backend.h"
#include "kernels/math-inline.h"
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h" /* only for cohort_backend_cuda() in cohort_reducer_new_cuda */
#endif

typedef struct {
  size_t offset, count;
  size_t ready; /* floats reported final in this pass */
  gboolean launched;
} Bucket;

struct CohortReducer {
  CohortComm *comm;
  float *grads;
  GArray *buckets; /* of Bucket, bucket 0 at the end of the buffer */
  gboolean sync;

  CohortCommThread *thread;     /* all-reduces the buckets (and SyncBatchNorm's jobs) */
  CohortCommItem *bucket_items; /* one per bucket */

  /* Gradients in a device's memory (cohort_reducer_new_on): its backend table, whose streams
   * and events order the reduction after backward; NULL = host memory. */
  const CohortBackend *dev;
  int device;
  gboolean staged;
  void **events;     /* per bucket: recorded on the compute stream when it is launched */
  void *copy_stream; /* staged: device <-> pinned host copies; bf16: the conversions */
  float *pinned;     /* staged: the largest bucket */

  /* bf16 reduction (cohort_reducer_set_precision): a bfloat16 copy of one bucket. */
  gboolean bf16;
  size_t largest;    /* floats in the largest bucket */
  guint16 *half;     /* host gradients: on the heap */
  guint16 *dev_half; /* device gradients: on the device */
  void *converted;   /* "nccl": recorded on copy_stream once dev_half is written */
};

static gboolean device_failed(const CohortReducer *r, GError **error, const char *what)
{
  const char *e = r->dev->last_error ? r->dev->last_error() : NULL;
  g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "DDP reducer: %s: %s", what,
              e ? e : "device error");
  return FALSE;
}

/* bf16 reduction of a bucket of device gradients: convert on copy_stream after the bucket's
 * event, all-reduce the bfloat16 copy (in place on the device, or staged through the pinned
 * buffer, which holds twice as many 16-bit values as needed), convert back and divide. */
static gboolean reduce_device_bucket_bf16(CohortReducer *r, guint i, GError **error)
{
  Bucket *b = &g_array_index(r->buckets, Bucket, i);
  float *dev = r->grads + b->offset;
  if (r->dev->to_bf16_on(r->copy_stream, r->events[i], r->dev_half, dev, b->count,
                         r->staged ? NULL : r->converted) != 0)
    return device_failed(r, error, "bucket to bfloat16");
  if (r->staged) {
    guint16 *host = (guint16 *)r->pinned;
    size_t bytes = b->count * sizeof(guint16);
    if (r->dev->stream_copy(r->copy_stream, NULL, host, r->dev_half, bytes, 1) != 0)
      return device_failed(r, error, "bucket to host");
    if (!cohort_comm_all_reduce_bf16(r->comm, host, b->count, COHORT_REDUCE_SUM, 0, error))
      return FALSE;
    if (r->dev->stream_copy(r->copy_stream, NULL, r->dev_half, host, bytes, 0) != 0)
      return device_failed(r, error, "bucket to device");
  } else if (!cohort_comm_all_reduce_bf16_after(r->comm, r->dev_half, b->count, COHORT_REDUCE_SUM,
                                                r->converted, 0, error)) {
    return FALSE;
  }
  float world = (float)cohort_comm_world_size(r->comm);
  if (r->dev->from_bf16_div_on(r->copy_stream, dev, r->dev_half, b->count, world) != 0)
    return device_failed(r, error, "bucket from bfloat16");
  return TRUE;
}

/* The communication thread's work for a bucket of device gradients. */
static gboolean reduce_device_bucket(CohortReducer *r, guint i, GError **error)
{
  Bucket *b = &g_array_index(r->buckets, Bucket, i);
  float *dev = r->grads + b->offset;
  if (r->bf16)
    return reduce_device_bucket_bf16(r, i, error);
  if (!r->staged)
    return cohort_comm_all_reduce_f32_after(r->comm, dev, b->count, COHORT_REDUCE_AVG, r->events[i],
                                            0, error);
  size_t bytes = b->count * sizeof(float);
  if (r->dev->stream_copy(r->copy_stream, r->events[i], r->pinned, dev, bytes, 1) != 0)
    return device_failed(r, error, "bucket to host");
  if (!cohort_comm_all_reduce_f32(r->comm, r->pinned, b->count, COHORT_REDUCE_AVG, 0, error))
    return FALSE;
  if (r->dev->stream_copy(r->copy_stream, NULL, dev, r->pinned, bytes, 0) != 0)
    return device_failed(r, error, "bucket to device");
  return TRUE;
}
/* bf16 reduction of a bucket of host gradients. The conversions run here, serially: they are
 * one pass over memory, and an OpenMP team started from this thread would compete for the
 * cores with the one computing the rest of backward. */
static gboolean reduce_host_bucket_bf16(CohortReducer *r, const Bucket *b, GError **error)
{
  float *g = r->grads + b->offset;
  for (size_t k = 0; k < b->count; k++)
    r->half[k] = cohort_f32_to_bf16(g[k]);
  if (!cohort_comm_all_reduce_bf16(r->comm, r->half, b->count, COHORT_REDUCE_SUM, 0, error))
    return FALSE;
  /* Divide rather than multiply by 1/N, as the fp32 average does. */
  float world = (float)cohort_comm_world_size(r->comm);
  for (size_t k = 0; k < b->count; k++)
    g[k] = cohort_bf16_to_f32(r->half[k]) / world;
  return TRUE;
}

/* The communication thread's work for bucket item->index. */
static gboolean reduce_bucket(gpointer owner, const CohortCommItem *item, GError **error)
{
  CohortReducer *r = owner;
  Bucket *b = &g_array_index(r->buckets, Bucket, item->index);
  char name[48];
  g_snprintf(name, sizeof name, "bucket %u of %u", item->index + 1, r->buckets->len);
  cohort_comm_set_label(name);
  if (r->dev)
    return reduce_device_bucket(r, item->index, error);
  if (r->bf16)
    return reduce_host_bucket_bf16(r, b, error);
  return cohort_comm_all_reduce_f32(r->comm, r->grads + b->offset, b->count, COHORT_REDUCE_AVG, 0,
                                    error);
}

/* The thread's first act on a GPU rank: the device the buckets are on. */
static void start_on_device(gpointer owner)
{
  CohortReducer *r = owner;
  if (r->dev && r->dev->set_device)
    r->dev->set_device(r->device);
}

static CohortReducer *reducer_new(CohortComm *comm, float *grads, size_t n,
                                  const CohortTensorInfo *tensors, guint n_tensors,
                                  double bucket_cap_mb, double first_bucket_mb,
                                  const CohortBackend *dev, int device, gboolean staged)
{
  CohortReducer *r = g_new(CohortReducer, 1);
  *r = (CohortReducer){.comm = comm,
                       .dev = dev,
                       .device = device,
                       .staged = staged,
                       .grads = grads,
                       .buckets = g_array_new(FALSE, TRUE, sizeof(Bucket))};
  g_autoptr(GArray) plan =
      cohort_reducer_plan_buckets(n, tensors, n_tensors, bucket_cap_mb, first_bucket_mb);
  for (guint i = 0; i < plan->len; i++) {
    const CohortBucketRange *p = &g_array_index(plan, CohortBucketRange, i);
    Bucket b = {.offset = p->offset, .count = p->count};
    g_array_append_val(r->buckets, b);
    r->largest = MAX(r->largest, b.count);
  }
  if (dev) {
    r->events = g_new0(void *, r->buckets->len);
    for (guint i = 0; i < r->buckets->len; i++)
      r->events[i] = dev->event_new();
    if (staged) {
      r->copy_stream = dev->stream_new();
      r->pinned = dev->host_alloc(r->largest * sizeof(float));
    }
  }
  r->bucket_items = g_new0(CohortCommItem, MAX(r->buckets->len, 1));
  for (guint i = 0; i < r->buckets->len; i++)
    cohort_comm_item_init(&r->bucket_items[i], 0, i);
  CohortCommThreadHooks hooks = {.perform = reduce_bucket,
                                 .start = start_on_device,
                                 .owner = r,
                                 .rank = cohort_comm_rank(comm)};
  r->thread = cohort_comm_thread_new("cohort-ddp-comm", &hooks);
  return r;
}

CohortReducer *cohort_reducer_new(CohortComm *comm, float *grads, size_t n,
                                  const CohortTensorInfo *tensors, guint n_tensors,
                                  double bucket_cap_mb, double first_bucket_mb)
{
  return reducer_new(comm, grads, n, tensors, n_tensors, bucket_cap_mb, first_bucket_mb, NULL, -1,
                     FALSE);
}

CohortReducer *cohort_reducer_new_on(CohortComm *comm, const CohortBackend *dev, int device,
                                     gboolean staged, float *grads, size_t n,
                                     const CohortTensorInfo *tensors, guint n_tensors,
                                     double bucket_cap_mb, double first_bucket_mb)
{
  /* A backend without streams (the CPU) computes in host memory. */
  if (!dev || !dev->event_new)
    return cohort_reducer_new(comm, grads, n, tensors, n_tensors, bucket_cap_mb, first_bucket_mb);
  return reducer_new(comm, grads, n, tensors, n_tensors, bucket_cap_mb, first_bucket_mb, dev,
                     device, staged);
}

CohortReducer *cohort_reducer_new_cuda(CohortComm *comm, float *grads, size_t n,
                                       const CohortTensorInfo *tensors, guint n_tensors,
                                       double bucket_cap_mb, double first_bucket_mb,
                                       int cuda_device, gboolean staged)
{
#if COHORT_HAVE_CUDA
  return cohort_reducer_new_on(comm, cohort_backend_cuda(), cuda_device, staged, grads, n, tensors,
                               n_tensors, bucket_cap_mb, first_bucket_mb);
#else
  (void)cuda_device;
  (void)staged;
  return cohort_reducer_new(comm, grads, n, tensors, n_tensors, bucket_cap_mb, first_bucket_mb);
#endif
}

void cohort_reducer_free(CohortReducer *r)
{
  if (!r)
    return;
  cohort_comm_thread_free(r->thread);
  if (r->dev) {
    if (r->events)
      for (guint i = 0; i < r->buckets->len; i++)
        r->dev->event_free(r->events[i]);
    r->dev->stream_free(r->copy_stream);
    r->dev->host_free(r->pinned);
    r->dev->event_free(r->converted);
    if (r->dev_half)
      r->dev->free(r->dev_half);
  }
  g_free(r->half);
  g_free(r->events);
  g_free(r->bucket_items);
  g_array_free(r->buckets, TRUE);
  g_free(r);
}

gboolean cohort_reducer_set_precision(CohortReducer *r, CohortReducePrecision precision,
                                      GError **error)
{
  if (precision != COHORT_REDUCE_BF16) {
    r->bf16 = FALSE;
    return TRUE;
  }
  if (r->dev) {
    if (r->copy_stream == NULL)
      r->copy_stream = r->dev->stream_new();
    if (r->converted == NULL && !r->staged)
      r->converted = r->dev->event_new();
    if (r->dev_half == NULL)
      r->dev_half = r->dev->alloc(r->largest * sizeof(guint16));
    if (r->copy_stream == NULL || (r->converted == NULL && !r->staged) || r->dev_half == NULL) {
      const char *e = r->dev->last_error ? r->dev->last_error() : NULL;
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                  "DDP reducer: cannot set up the bf16 all-reduce on %s device %d (%.1f MiB of "
                  "bfloat16 scratch, a stream and an event): %s",
                  r->dev->name, r->device,
                  (double)(r->largest * sizeof(guint16)) / (1024.0 * 1024.0),
                  e ? e : "device error");
      return FALSE;
    }
    r->bf16 = TRUE;
    return TRUE;
  }
  (void)error; /* host memory: g_new does not fail */
  if (r->half == NULL)
    r->half = g_new(guint16, MAX(r->largest, 1));
  r->bf16 = TRUE;
  return TRUE;
}

gint64 cohort_reducer_take_busy_us(CohortReducer *r)
{
  return cohort_comm_thread_take_busy_us(r->thread);
}

guint64 cohort_reducer_order(const CohortReducer *r)
{
  return cohort_comm_thread_order(r->thread);
}

GArray *cohort_reducer_plan_buckets(size_t n, const CohortTensorInfo *tensors, guint n_tensors,
                                    double bucket_cap_mb, double first_bucket_mb)
{
  GArray *out = g_array_new(FALSE, TRUE, sizeof(CohortBucketRange));
  size_t cap = (size_t)(first_bucket_mb * 1024 * 1024 / sizeof(float));
  size_t hi = n, lo = n;
  for (guint i = n_tensors; i-- > 0;) {
    lo = tensors[i].offset;
    if ((hi - lo) >= cap || i == 0) {
      CohortBucketRange b = {.offset = lo, .count = hi - lo};
      g_array_append_val(out, b);
      hi = lo;
      cap = (size_t)(bucket_cap_mb * 1024 * 1024 / sizeof(float));
    }
  }
  return out;
}

double cohort_reducer_auto_bucket_mb(size_t n_floats)
{
  /* About eight buckets, so the first all-reduce starts while most of backward is still to
   * come and the last one left to wait for is small; not below 0.25 MiB, where the latency
   * of a round trip outweighs the overlap, nor above PyTorch's 25 MiB. */
  double total_mb = (double)n_floats * sizeof(float) / (1024.0 * 1024.0);
  return CLAMP(total_mb / 8.0, 0.25, 25.0);
}

guint cohort_reducer_num_buckets(const CohortReducer *r)
{
  return r->buckets->len;
}

void cohort_reducer_bucket(const CohortReducer *r, guint i, size_t *offset, size_t *count)
{
  const Bucket *b = &g_array_index(r->buckets, Bucket, i);
  *offset = b->offset;
  *count = b->count;
}

void cohort_reducer_prepare(CohortReducer *r, gboolean sync)
{
  r->sync = sync;
  for (guint i = 0; i < r->buckets->len; i++) {
    Bucket *b = &g_array_index(r->buckets, Bucket, i);
    b->ready = 0;
    b->launched = FALSE;
  }
  /* The previous pass ended in finish: the thread is idle, and a failure left from a pass that
   * was not finished is not this one's. */
  g_autoptr(GError) stale = NULL;
  cohort_comm_thread_take_error(r->thread, &stale);
}

static void launch(CohortReducer *r, guint i)
{
  Bucket *b = &g_array_index(r->buckets, Bucket, i);
  b->launched = TRUE;
  /* The bucket's gradients are queued on the compute stream: mark that point. */
  if (r->events)
    r->dev->event_record(r->events[i]);
  cohort_comm_thread_push(r->thread, &r->bucket_items[i]);
}

void cohort_reducer_grad_ready(size_t offset, size_t count, gpointer reducer)
{
  CohortReducer *r = reducer;
  if (!r->sync)
    return;
  size_t end = offset + count;
  for (guint i = 0; i < r->buckets->len; i++) {
    Bucket *b = &g_array_index(r->buckets, Bucket, i);
    size_t lo = MAX(offset, b->offset), hi = MIN(end, b->offset + b->count);
    if (lo >= hi)
      continue;
    b->ready += hi - lo;
  }
  /* Buckets go out in index order (every rank the same), as the collectives require. */
  for (guint i = 0; i < r->buckets->len; i++) {
    Bucket *b = &g_array_index(r->buckets, Bucket, i);
    if (b->launched)
      continue;
    if (b->ready < b->count)
      break;
    launch(r, i);
  }
}

gboolean cohort_reducer_finish(CohortReducer *r, gint64 *wait_us, GError **error)
{
  gint64 t0 = g_get_monotonic_time();
  if (r->sync) {
    for (guint i = 0; i < r->buckets->len; i++) {
      if (!g_array_index(r->buckets, Bucket, i).launched)
        launch(r, i);
    }
  }
  cohort_comm_thread_drain(r->thread);
  if (wait_us)
    *wait_us = g_get_monotonic_time() - t0;
  return cohort_comm_thread_take_error(r->thread, error);
}

gboolean cohort_reducer_run(CohortReducer *r, CohortCommJob job, gpointer data, GError **error)
{
  return cohort_comm_thread_run(r->thread, job, data, error);
}
