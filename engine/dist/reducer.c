#include "reducer.h"

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

  GThread *thread;
  GAsyncQueue *queue; /* bucket index + 1; G_MAXINT = quit */
  GMutex lock;
  GCond done_cond;
  guint launched, completed;
  GError *error; /* first failure of this pass */
};

static gpointer comm_thread(gpointer data)
{
  CohortReducer *r = data;
  for (;;) {
    int item = GPOINTER_TO_INT(g_async_queue_pop(r->queue));
    if (item == G_MAXINT)
      return NULL;
    Bucket *b = &g_array_index(r->buckets, Bucket, item - 1);
    g_mutex_lock(&r->lock);
    gboolean failed = r->error != NULL;
    g_mutex_unlock(&r->lock);
    GError *error = NULL;
    /* After a failure the communicator is broken; later buckets are only counted. */
    if (!failed)
      cohort_comm_all_reduce_f32(r->comm, r->grads + b->offset, b->count, COHORT_REDUCE_AVG, 0,
                                 &error);
    g_mutex_lock(&r->lock);
    if (error && !r->error)
      r->error = error;
    else if (error)
      g_error_free(error);
    r->completed++;
    g_cond_broadcast(&r->done_cond);
    g_mutex_unlock(&r->lock);
  }
}

CohortReducer *cohort_reducer_new(CohortComm *comm, float *grads, size_t n,
                                  const CohortTensorInfo *tensors, guint n_tensors,
                                  double bucket_cap_mb, double first_bucket_mb)
{
  CohortReducer *r = g_new0(CohortReducer, 1);
  r->comm = comm;
  r->grads = grads;
  r->buckets = g_array_new(FALSE, TRUE, sizeof(Bucket));
  size_t cap = (size_t)(first_bucket_mb * 1024 * 1024 / sizeof(float));
  size_t hi = n, lo = n;
  for (guint i = n_tensors; i-- > 0;) {
    lo = tensors[i].offset;
    if ((hi - lo) >= cap || i == 0) {
      Bucket b = {.offset = lo, .count = hi - lo};
      g_array_append_val(r->buckets, b);
      hi = lo;
      cap = (size_t)(bucket_cap_mb * 1024 * 1024 / sizeof(float));
    }
  }
  g_mutex_init(&r->lock);
  g_cond_init(&r->done_cond);
  r->queue = g_async_queue_new();
  r->thread = g_thread_new("cohort-ddp-comm", comm_thread, r);
  return r;
}

void cohort_reducer_free(CohortReducer *r)
{
  if (!r)
    return;
  g_async_queue_push(r->queue, GINT_TO_POINTER(G_MAXINT));
  g_thread_join(r->thread);
  g_async_queue_unref(r->queue);
  g_array_free(r->buckets, TRUE);
  g_clear_error(&r->error);
  g_mutex_clear(&r->lock);
  g_cond_clear(&r->done_cond);
  g_free(r);
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
  g_mutex_lock(&r->lock);
  r->launched = r->completed = 0;
  g_clear_error(&r->error);
  g_mutex_unlock(&r->lock);
}

static void launch(CohortReducer *r, guint i)
{
  Bucket *b = &g_array_index(r->buckets, Bucket, i);
  b->launched = TRUE;
  g_mutex_lock(&r->lock);
  r->launched++;
  g_mutex_unlock(&r->lock);
  g_async_queue_push(r->queue, GINT_TO_POINTER((int)i + 1));
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
  g_mutex_lock(&r->lock);
  while (r->completed < r->launched)
    g_cond_wait(&r->done_cond, &r->lock);
  GError *e = r->error;
  r->error = NULL;
  g_mutex_unlock(&r->lock);
  if (wait_us)
    *wait_us = g_get_monotonic_time() - t0;
  if (e) {
    g_propagate_error(error, e);
    return FALSE;
  }
  return TRUE;
}
