/* What the training loop needs from the distributed layer, in the loop's own terms: the DDP
 * reducer around backward, sums of metrics across ranks, barriers, the start-up broadcast,
 * an agreed stop, and the per-rank timing report. With one process every call is local. */
#pragma once

#include <glib.h>
#include "engine/config/config.h"
#include "engine/model/model.h"
#include "engine/progress/progress.h"

G_BEGIN_DECLS

#include "engine/distributed/comm.h"
#include "engine/distributed/sharder.h"
#include "engine/train/device.h"
typedef struct CohortTrainDist CohortTrainDist;

/* comm NULL (or world_size 1): a single process. */
CohortTrainDist *cohort_train_dist_new(CohortComm *comm, int rank, int world_size,
                                       const CohortConfig *cfg);
void cohort_train_dist_free(CohortTrainDist *d);

/* Where the rank's gradients and parameters live (default: the CPU). A GPU rank with the
 * "nccl" communicator reduces device buffers in place; with "gloo" each bucket (and the
 * start-up broadcast) is staged through pinned host memory. Before attach. */
void cohort_train_dist_set_device(CohortTrainDist *d, const CohortComputeDevice *dev);

/* Hooks the DDP reducer into the model's backward (buckets of bucket_cap_mb), reducing in
 * the config's reduce_precision (fp32, or bf16: see cohort_reducer_set_precision). With one
 * process there is no reducer, so reduce_precision changes nothing. A reducer that cannot be
 * set up (GPU memory for the bf16 scratch) makes end_backward fail with the reason.
 *
 * With sync_batchnorm and more than one rank it also gives the model its collectives
 * (cohort_model_set_comm): SyncBatchNorm's all-gathers in forward and all-reduces in backward
 * run on the reducer's communication thread, queued behind the buckets launched before them
 * (cohort_reducer_run), so the collectives keep one order on every rank. Their time is the
 * `syncbn_s` of the ranks event; a failure among them makes end_backward fail. */
void cohort_train_dist_attach(CohortTrainDist *d, CohortModel *model, double bucket_cap_mb);

/* ZeRO stages 2 and 3: `sharder` takes the DDP reducer's place (attach then makes none): its
 * grad-ready hook, at stage 3 its layer hook, and SyncBatchNorm's collectives go through its
 * queue. shard_bytes (the rank's shard buffers) goes into the ranks event, with the gather
 * figures. Before attach. */
void cohort_train_dist_attach_sharder(CohortTrainDist *d, CohortModel *model,
                                      CohortSharder *sharder, int stage, size_t shard_bytes);
/* Before the first micro-step of an optimizer step (ZeRO stages 2 and 3 then start the
 * reduced gradients afresh). */
void cohort_train_dist_start_step(CohortTrainDist *d);

/* Around each micro-step's backward: `sync` FALSE means no communication (no_sync; ZeRO stages
 * 2 and 3 reduce every micro-step all the same). After end_backward with sync, the gradient
 * buffer holds the average over ranks (stages 2 and 3: the gradient shard). */
void cohort_train_dist_begin_backward(CohortTrainDist *d, gboolean sync);
gboolean cohort_train_dist_end_backward(CohortTrainDist *d, GError **error);

/* broadcast_buffers (PyTorch DDP's): rank 0's buffers (BatchNorm running statistics) to every
 * rank, so all ranks carry rank 0's. The trainer calls it before the first forward of each
 * optimizer step (DDP skips it after a no_sync forward) and before evaluation. Nothing with
 * one process, broadcast_buffers false or a model without buffers. */
gboolean cohort_train_dist_broadcast_buffers(CohortTrainDist *d, CohortModel *model,
                                             GError **error);

/* In-place sum over ranks. */
gboolean cohort_train_dist_sum(CohortTrainDist *d, double *values, int n, GError **error);
gboolean cohort_train_dist_barrier(CohortTrainDist *d, const char *what, GError **error);
/* A barrier for ranks waiting while another prepares the data (tokenizing a large text can
 * take far longer than timeout_s): it waits up to COHORT_DATA_WAIT_S. A rank that dies
 * meanwhile is noticed by the launcher, which stops the group. */
#define COHORT_DATA_WAIT_S (24 * 3600.0)
gboolean cohort_train_dist_wait_for_data(CohortTrainDist *d, GError **error);
/* Rank 0's parameters (backend memory of the device set above) to everyone. */
gboolean cohort_train_dist_broadcast_params(CohortTrainDist *d, float *params, size_t n,
                                            GError **error);
/* Rank 0's `nbytes` of HOST memory to everyone (small start-up records). */
gboolean cohort_train_dist_broadcast_host(CohortTrainDist *d, void *buf, gsize nbytes,
                                          GError **error);
/* Rank `root`'s `nbytes` of HOST memory to everyone (tokenized data from the rank that made
 * it). */
gboolean cohort_train_dist_broadcast_from(CohortTrainDist *d, void *buf, gsize nbytes, int root,
                                          GError **error);
/* Every rank's `nbytes` of HOST memory into `recv` (nbytes × world size, rank order) on every
 * rank: the latent cache's shares (engine/train/latents.c). One process: a copy. */
gboolean cohort_train_dist_all_gather_host(CohortTrainDist *d, const void *send, gsize nbytes,
                                           void *recv, GError **error);
/* Sets *stop to TRUE when any rank's stop flag is set (all ranks agree, so they stop at the
 * same step). FALSE with `error` when the vote itself failed (a peer is gone). */
gboolean cohort_train_dist_should_stop(CohortTrainDist *d, volatile int *stop_flag, gboolean *stop,
                                       GError **error);

/* Every rank's `nbytes` of HOST memory into `recv` (nbytes × world size, rank r's at offset
 * r × nbytes); `what` names the collective in hang reports. With one process a copy. */
gboolean cohort_train_dist_all_gather(CohortTrainDist *d, const void *send, gsize nbytes,
                                      void *recv, const char *what, GError **error);

/* Backend bytes of this rank's distillation teacher, reported in the `ranks` event. */
void cohort_train_dist_set_teacher_bytes(CohortTrainDist *d, size_t bytes);
/* The stop vote with the control channel's requests (engine/progress/control.h) in the same
 * all-reduce: on entry *requests holds this rank's (rank 0's from the channel, 0 elsewhere),
 * on return the union over all ranks, so every rank answers a request at the same step. */
gboolean cohort_train_dist_vote(CohortTrainDist *d, volatile int *stop_flag, guint *requests,
                                gboolean *stop, GError **error);

/* Bytes of this rank's optimizer state (its shard with ZeRO stage 1), reported in the `ranks`
 * event as optim_bytes. */
void cohort_train_dist_set_optim_bytes(CohortTrainDist *d, size_t bytes);

/* Timings for the `ranks` event (microseconds). */
void cohort_train_dist_add_data_time(CohortTrainDist *d, gint64 us);
/* Communication the loop waited for outside the calls above (ZeRO's parameter gather). */
void cohort_train_dist_add_comm_time(CohortTrainDist *d, gint64 us);
void cohort_train_dist_add_step_time(CohortTrainDist *d, gint64 us);
/* The steps' time since the last call without this rank's waits for the others (communication,
 * SyncBatchNorm, ZeRO-3's gathers) into *busy_s: what its own compute and data took; returns
 * how many steps. For rank_batch_sizes auto. */
int cohort_train_dist_take_busy(CohortTrainDist *d, double *busy_s);
/* This rank's examples per micro-batch and its device in words, for the ranks event. */
void cohort_train_dist_set_rank_info(CohortTrainDist *d, int share, const char *device);
/* Every few steps with more than one rank: gathers each rank's timings and memory with one
 * all_gather and emits a `ranks` event on rank 0. */
gboolean cohort_train_dist_report_ranks(CohortTrainDist *d, CohortProgress *progress, gint64 step,
                                        GError **error);

/* Threads for OpenMP loops and OpenBLAS. */
void cohort_train_set_threads(int threads);
/* The CPU backend's fp32 matrix-product library from the key cpu_matmul (auto leaves the
 * backend's own choice, kernels/cpu/gemm-paths.h). FALSE with an error naming the key when the
 * library asked for cannot run here. */
gboolean cohort_train_set_cpu_matmul(const CohortConfig *cfg, const char *source, GError **error);

G_END_DECLS
