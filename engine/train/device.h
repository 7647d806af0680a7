/* Where a rank computes: the backend table for the `device` key, and for GPU ranks which CUDA
 * device (device_indexes[LOCAL_RANK], else LOCAL_RANK, as CUDA_VISIBLE_DEVICES numbers them). */
#pragma once

#include <glib.h>
#include "engine/config/config.h"
#include "engine/progress/progress.h"

G_BEGIN_DECLS

typedef struct CohortBackend CohortBackend;

typedef struct {
  const CohortBackend *be; /* cohort_backend_cpu() or cohort_backend_cuda() */
  int cuda_device;         /* the rank's CUDA device index; -1 on the CPU */
} CohortComputeDevice;

/* Resolves cfg->device for local rank `local_rank` of `local_world_size`: "cpu"; "cuda"
 * (an error naming the key when this build has no CUDA or no device is usable, when
 * device_indexes has no entry for the rank or names a device that is not visible, or when
 * there are fewer GPUs than local ranks, unless distributed_backend is "gloo": then ranks
 * share GPUs round-robin);
 * "auto" = cuda when the build has CUDA and a device is present, else cpu. For a GPU it makes
 * the device current for the calling thread. */
gboolean cohort_device_select(const CohortConfig *cfg, const char *source, int local_rank,
                              int local_world_size, CohortComputeDevice *out, GError **error);

/* "cpu" or "cuda:1 (NVIDIA H100 80GB HBM3)". g_free it. */
char *cohort_device_describe(const CohortComputeDevice *dev);

/* Rank 0's start-up log for GPU runs: each GPU the local ranks use (name, memory) and
 * whether peer access exists between each pair of them, with a warning when it does not. */
void cohort_device_log_local(const CohortConfig *cfg, int local_world_size,
                             CohortProgress *progress);

/* After a step: FALSE with the CUDA backend's first recorded failure (GPU ranks). */
gboolean cohort_device_check(const CohortComputeDevice *dev, GError **error);

G_END_DECLS
