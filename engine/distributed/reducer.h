/* The DDP reducer: averages gradients across ranks bucket by bucket while backward is still
 * running, as PyTorch's DistributedDataParallel does.
 *
 * The gradient buffer is cut into buckets at tensor boundaries in reverse layer order
 * (from the end of the buffer): the first bucket holds about `first_bucket_mb`, the others
 * about `bucket_cap_mb`. Backward reports finished gradient ranges (the model's grad-ready
 * hook); a bucket whose every gradient is final is handed to a communication thread
 * (comm-thread.h, shared with the ZeRO sharder) that all-reduces (averages) it, overlapping the
 * rest of backward. finish() waits for the
 * last bucket. On micro-steps with sync = FALSE (gradient accumulation, DDP's no_sync) no
 * communication happens and gradients just accumulate locally.
 *
 * The all-reduce is fp32 by default; with bf16 (cohort_reducer_set_precision) each bucket is
 * rounded to bfloat16, summed across ranks in bfloat16 and averaged back into the fp32
 * gradients, halving the bytes on the wire. */
#pragma once

#include <glib.h>
#include "engine/config/config.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/comm-thread.h"
#include "engine/base/tensor.h"

G_BEGIN_DECLS

typedef struct CohortBackend CohortBackend;

typedef struct CohortReducer CohortReducer;

/* `grads` (n floats) must stay valid for the reducer's life; tensors must cover it in
 * increasing offsets without gaps. The communication thread starts here. */
CohortReducer *cohort_reducer_new(CohortComm *comm, float *grads, size_t n,
                                  const CohortTensorInfo *tensors, guint n_tensors,
                                  double bucket_cap_mb, double first_bucket_mb);
/* The same for gradients in the memory of device `device` of backend `dev` (a backend with
 * streams and events, kernels/backend.h; a backend without them — the CPU — gives
 * cohort_reducer_new). When backward reports a bucket final, an event is recorded on
 * the compute stream (the legacy default stream), and the communication thread orders the
 * bucket's reduction after that event only, so it overlaps the rest of backward:
 *  - staged FALSE ("nccl"): the bucket is all-reduced in place on the device, the NCCL stream
 *    waiting on the event (cohort_comm_all_reduce_f32_after);
 *  - staged TRUE ("gloo" and other host backends): the bucket is copied into a pinned host
 *    buffer on a copy stream that waits on the event, all-reduced there, and copied back. */
CohortReducer *cohort_reducer_new_on(CohortComm *comm, const CohortBackend *dev, int device,
                                     gboolean staged, float *grads, size_t n,
                                     const CohortTensorInfo *tensors, guint n_tensors,
                                     double bucket_cap_mb, double first_bucket_mb);
/* cohort_reducer_new_on with the CUDA backend (CUDA builds; elsewhere it is
 * cohort_reducer_new). */
CohortReducer *cohort_reducer_new_cuda(CohortComm *comm, float *grads, size_t n,
                                       const CohortTensorInfo *tensors, guint n_tensors,
                                       double bucket_cap_mb, double first_bucket_mb,
                                       int cuda_device, gboolean staged);
/* The number format of the all-reduce. COHORT_REDUCE_FP32 (the default): buckets are averaged
 * in fp32. COHORT_REDUCE_BF16: each rank rounds a bucket to bfloat16 (to nearest, ties to
 * even), the bfloat16 values are summed across ranks (cohort_comm_all_reduce_bf16, SUM), and
 * the sum, converted back to fp32 and divided by the world size in fp32, replaces the bucket's
 * fp32 gradients. That is PyTorch's bf16_compress_hook except for where the division happens:
 * the hook divides the bfloat16 values before the sum, we divide the sum after it, in fp32,
 * which rounds once less. Every rank gets the same bits. Host gradients are converted on the
 * communication thread; device gradients by kernels on the reducer's own stream after the
 * bucket's event ("nccl": the NCCL stream waits for the conversion; staged: the bfloat16
 * bucket, half the bytes, goes through pinned memory). Call between passes, before the
 * first. FALSE with `error` when the bfloat16 scratch (the largest bucket) cannot be
 * allocated on the GPU; the precision is then unchanged. */
gboolean cohort_reducer_set_precision(CohortReducer *r, CohortReducePrecision precision,
                                      GError **error);

/* Stops the communication thread (after aborting the communicator if it is stuck). */
void cohort_reducer_free(CohortReducer *r);

/* Microseconds the communication thread spent reducing buckets since the last call (all of it,
 * whether backward was still running or the step waited for it): with the wait that
 * cohort_reducer_finish reports, how much communication was hidden. */
gint64 cohort_reducer_take_busy_us(CohortReducer *r);

/* A bucket: a range of the gradient buffer, in floats. */
typedef struct {
  size_t offset, count;
} CohortBucketRange;

/* PyTorch's DDP sends a small first bucket so communication starts early: its size in MiB. */
#define COHORT_REDUCER_FIRST_BUCKET_MB 1.0

/* The buckets a reducer cuts `n` gradients (tables as for cohort_reducer_new) into, in the
 * order it launches them (bucket 0 at the end of the buffer): a GArray of CohortBucketRange.
 * The probe (cohort-train --probe) times the same buckets. */
GArray *cohort_reducer_plan_buckets(size_t n, const CohortTensorInfo *tensors, guint n_tensors,
                                    double bucket_cap_mb, double first_bucket_mb);

/* The bucket size (MiB) bucket_cap_mb 0 ("auto") gives a model of n_floats gradients: about
 * an eighth of them, between 0.25 and 25 MiB. */
double cohort_reducer_auto_bucket_mb(size_t n_floats);

guint cohort_reducer_num_buckets(const CohortReducer *r);
/* Bucket i's range in floats; bucket 0 is the one at the end of the buffer. */
void cohort_reducer_bucket(const CohortReducer *r, guint i, size_t *offset, size_t *count);

/* Starts a backward pass; with sync FALSE the pass communicates nothing. */
void cohort_reducer_prepare(CohortReducer *r, gboolean sync);
/* The model's grad-ready hook (CohortGradReadyFunc with the reducer as user data). */
void cohort_reducer_grad_ready(size_t offset, size_t count, gpointer reducer);
/* Ends the pass: launches any bucket backward did not report, waits for all, and returns
 * the first communication error. *wait_us gets the time spent waiting here (communication
 * that did not overlap compute). */
gboolean cohort_reducer_finish(CohortReducer *r, gint64 *wait_us, GError **error);

/* Runs `job` (a collective on the reducer's communicator) on the communication thread, after
 * every bucket launched before this call, and waits for it: the way to issue another
 * collective (SyncBatchNorm's) while buckets may be in flight (cohort_comm_thread_run). Works
 * in passes with or without sync. Returns the job's result. */
gboolean cohort_reducer_run(CohortReducer *r, CohortCommJob job, gpointer data, GError **error);

/* The order digest of every bucket and job this reducer queued (cohort_comm_thread_order): the
 * same on every rank exactly when they issued the same collectives in the same order. */
guint64 cohort_reducer_order(const CohortReducer *r);

G_END_DECLS
