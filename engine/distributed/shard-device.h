/* The ZeRO sharder's per-unit collectives (sharder.h) when the model lives in a device's memory
 * (the CUDA backend): with "nccl" on the device buffers themselves, ordered by events after
 * the kernels that produce them; with a host communicator ("gloo") through page-locked host
 * memory. The layout is the shard plan's (shard-plan.h).
 *
 * Threads and streams. The *_ready calls run on the thread that queues the model's work (the
 * main thread), right before the collective is queued: they commit the unit's memory, copy
 * this rank's piece into place (a gather) and record an event after them, so the collective
 * waits only for that, not for the layer computing meanwhile. The collective itself runs on
 * the communication thread and returns when its result is in place. A reduce-scatter that adds
 * into the shard (gradient accumulation) adds on the device's default stream; the next one to
 * reuse the scratch waits for that addition. Conversions (bf16) and the staging copies run on a
 * stream of the sharder's own. Every wait is for device work already queued, and collectives
 * have the communicator's timeout: nothing waits without end for another rank. */
#pragma once

#include <glib.h>

#include "engine/distributed/comm.h"
#include "engine/distributed/shard-plan.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

typedef struct CohortShardDevice CohortShardDevice;

/* For device `device` of backend `be` (one with events and streams: not the CPU), over `comm`
 * and `plan` (both borrowed). NULL with an error when its scratch cannot be had. */
CohortShardDevice *cohort_shard_device_new(CohortComm *comm, const CohortShardPlan *plan,
                                           const CohortBackend *be, int device, GError **error);
void cohort_shard_device_free(CohortShardDevice *d);

/* Main thread, as unit u's reduce-scatter is queued: its gradients in `grads` (the model's
 * reserved range) committed (a unit backward never wrote reads zeros) and their producers
 * marked. FALSE when the backend has no memory for them (last_error says why). */
gboolean cohort_shard_device_reduce_ready(CohortShardDevice *d, float *grads, guint u);
/* Communication thread: unit u's gradients reduce-scattered (averaged over the ranks: fp32, or
 * bf16 as cohort_sharder_set_precision says) into this rank's piece of `grad_shard`, replacing
 * it or added to it (`accumulate`); then the unit's gradients are decommitted. */
gboolean cohort_shard_device_reduce(CohortShardDevice *d, float *grads, float *grad_shard, guint u,
                                    gboolean accumulate, gboolean bf16, GError **error);

/* Main thread, as unit u's gather is queued (stage 3): its place in `params` (the model's
 * reserved range) committed and this rank's piece copied there from `source` (shard layout).
 * FALSE when the backend has no memory for it. */
gboolean cohort_shard_device_gather_ready(CohortShardDevice *d, float *params, const float *source,
                                          guint u);
/* Communication thread: every rank's pieces of unit u into `params`. */
gboolean cohort_shard_device_gather(CohortShardDevice *d, float *params, guint u, GError **error);

/* Any thread while the communication thread is idle: every rank's pieces of unit u into
 * `unit_values` (device memory, the unit's count floats), this rank's own piece already in
 * place; after all work queued so far. */
gboolean cohort_shard_device_gather_unit(CohortShardDevice *d, float *unit_values, guint u,
                                         GError **error);

/* Host memory (the CPU's, or a device's staged through it): the `count` values of a unit at
 * `send` (scratch afterwards) reduce-scattered with `counts` (one per rank), this rank's
 * average into `sum` (counts[rank] values): fp32, or with `bf16` rounded to bfloat16, summed in
 * bfloat16 and divided by the world size in fp32. */
gboolean cohort_shard_reduce_host(CohortComm *comm, float *send, size_t count, float *sum,
                                  const gsize *counts, gboolean bf16, GError **error);

G_END_DECLS
