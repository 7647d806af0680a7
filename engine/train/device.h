/* Where a rank computes: the backend table for the `device` key, and for GPU ranks which CUDA
 * device (device_indexes[LOCAL_RANK], else LOCAL_RANK, as CUDA_VISIBLE_DEVICES numbers them). */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>
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

/* The CUDA device index that local rank `lr` of `local_world_size` takes when `visible`
 * devices are visible to it (CUDA_VISIBLE_DEVICES applied; `cuda_visible_devices` is that
 * variable's value, NULL when unset): device_indexes[lr] when the config lists devices (an
 * error naming the key when the list has no entry for the rank or names a device that is not
 * visible); else lr when there are at least as many visible devices as local ranks; else
 * lr mod visible when CUDA_VISIBLE_DEVICES is set or the backend is "gloo" (a launcher that
 * binds GPUs to ranks, such as SLURM's --gpus-per-task, leaves each rank fewer devices than
 * local ranks, typically one; where ranks in fact share a GPU, NCCL's setup refuses naming
 * both); else an error naming the key (too few GPUs for one per rank). Returns -1 with
 * `error` set on an error, and for visible <= 0. Needs no GPU. */
int cohort_device_index_for(const CohortConfig *cfg, const char *source, int lr,
                            int local_world_size, int visible, const char *cuda_visible_devices,
                            GError **error);

/* The GPUs the NVIDIA kernel driver drives: the entries of `dir`
 * (NULL: /proc/driver/nvidia/gpus, one folder per GPU), whatever the CUDA runtime makes of
 * the driver; 0 when the folder does not exist. */
int cohort_device_count_nvidia_gpus(const char *dir);

/* The NVIDIA driver's version ("535.104.05") from `path` (NULL: /proc/driver/nvidia/version),
 * or NULL. g_free it. */
char *cohort_device_nvidia_driver_version(const char *path);

/* The warning for `device: auto` falling back to the CPU while `nvidia_gpus` GPUs are
 * present: why CUDA cannot use them (`probe_error`, the runtime's words), the driver
 * (`driver_version`, may be NULL) and the driver branch this build's CUDA runtime
 * (`runtime_version`, CUDA's 1000 major + 10 minor; 0 for a build without CUDA) needs. NULL
 * when no GPU is present. g_free it. */
char *cohort_device_fallback_message(int nvidia_gpus, const char *probe_error, int runtime_version,
                                     const char *driver_version);

/* cohort_device_fallback_message for this machine and build: NULL when CUDA sees a device
 * or no NVIDIA GPU is present. */
char *cohort_device_auto_fallback(void);

/* The `start` event's "cuda" object (builds with CUDA only): the CUDA runtime's version, the
 * CUDA version the driver supports ("driver_cuda"), the NVIDIA driver's ("driver") and
 * NCCL's ("nccl"), each when known. */
void cohort_device_add_versions(JsonObject *fields);

/* "cpu" or "cuda:1 (NVIDIA H100 80GB HBM3, 79.1 GiB, PCI 0000:3b:00.0)". g_free it. */
char *cohort_device_describe(const CohortComputeDevice *dev);

/* Rank 0's start-up log for GPU runs: each GPU the local ranks use (name, memory) and
 * whether peer access exists between each pair of them, with a warning when it does not. */
void cohort_device_log_local(const CohortConfig *cfg, int local_world_size,
                             CohortProgress *progress);

/* Around a step's forwards and backwards, where the weights (`params`, n floats of backend
 * memory) do not change: on a GPU the bf16/fp16 GEMMs then read the weights from one 16-bit
 * copy made at the step's first product instead of rounding them in every call
 * (cohort_cuda_weights_begin), and after the step the ops' scratch memory shrinks when the
 * step needed far less than it holds. Nothing on the CPU. */
void cohort_device_step_begin(const CohortComputeDevice *dev, const float *params, size_t n);
void cohort_device_step_end(const CohortComputeDevice *dev);

/* FALSE with the backend's first recorded failure (its `last_error`: the CUDA backend's;
 * the CPU backend has none). The trainer asks before it judges the step's loss and gradient
 * norm, so that a device fault is never read as divergence or an fp16 overflow. */
gboolean cohort_device_check(const CohortComputeDevice *dev, GError **error);

G_END_DECLS
