#include "engine/train/device.h"

#include "cohort-build-config.h"
#include "kernels/backend.h"
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

static const char *src_name(const char *source)
{
  return source ? source : "config";
}

#if COHORT_HAVE_CUDA
/* The CUDA device index local rank `lr` uses, or -1 with `error` set. */
static int device_for(const CohortConfig *cfg, const char *source, int lr, int local_world_size,
                      int count, GError **error)
{
  const char *vis = g_getenv("CUDA_VISIBLE_DEVICES");
  guint n_idx = cfg->device_indexes ? cfg->device_indexes->len : 0;
  if (n_idx > 0) {
    if ((guint)lr >= n_idx) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                  "%s: key \"device_indexes\" has %u entries but local rank %d needs one; allowed: "
                  "one device index per local rank (%d)",
                  src_name(source), n_idx, lr, local_world_size);
      return -1;
    }
    int d = g_array_index(cfg->device_indexes, int, lr);
    if (d < 0 || d >= count) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                  "%s: key \"device_indexes\": entry %d is %d but %d GPU%s visible "
                  "(CUDA_VISIBLE_DEVICES=%s); allowed: 0 to %d",
                  src_name(source), lr, d, count, count == 1 ? " is" : "s are", vis ? vis : "unset",
                  count - 1);
      return -1;
    }
    return d;
  }
  if (local_world_size > count && cfg->distributed_backend == COHORT_BACKEND_GLOO)
    return lr % count; /* Gloo stages through host memory: ranks may share a GPU */
  if (local_world_size > count) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"device\": \"cuda\" with %d local ranks but only %d GPU%s visible "
                "(CUDA_VISIBLE_DEVICES=%s); use fewer ranks per node, or list a device per rank "
                "in \"device_indexes\", or let ranks share GPUs with \"distributed_backend\": "
                "\"gloo\"",
                src_name(source), local_world_size, count, count == 1 ? " is" : "s are",
                vis ? vis : "unset");
    return -1;
  }
  return lr;
}
#endif

gboolean cohort_device_select(const CohortConfig *cfg, const char *source, int local_rank,
                              int local_world_size, CohortComputeDevice *out, GError **error)
{
  out->be = cohort_backend_cpu();
  out->cuda_device = -1;
  if (cfg->device == COHORT_DEVICE_CPU)
    return TRUE;
#if COHORT_HAVE_CUDA
  int count = cohort_cuda_device_count();
  if (count == 0) {
    if (cfg->device == COHORT_DEVICE_AUTO)
      return TRUE;
    const char *why = cohort_cuda_probe_error();
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"device\": \"cuda\" but no CUDA device is usable (%s); use \"cpu\" or "
                "\"auto\"",
                src_name(source), why ? why : "none found");
    return FALSE;
  }
  int d = device_for(cfg, source, local_rank, MAX(local_world_size, 1), count, error);
  if (d < 0)
    return FALSE;
  if (cohort_cuda_set_device(d) != 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"device\": CUDA device %d cannot be used: %s", src_name(source), d,
                cohort_cuda_last_error());
    return FALSE;
  }
  out->be = cohort_backend_cuda();
  out->cuda_device = d;
  return TRUE;
#else
  (void)local_rank;
  (void)local_world_size;
  if (cfg->device == COHORT_DEVICE_AUTO)
    return TRUE;
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
              "%s: key \"device\": \"cuda\" is not supported: this build has no CUDA path; use "
              "\"cpu\" or \"auto\"",
              src_name(source));
  return FALSE;
#endif
}

char *cohort_device_describe(const CohortComputeDevice *dev)
{
#if COHORT_HAVE_CUDA
  if (dev->cuda_device >= 0) {
    CohortCudaDeviceInfo info;
    if (cohort_cuda_device_info(dev->cuda_device, &info) == 0)
      return g_strdup_printf("cuda:%d (%s)", dev->cuda_device, info.name);
    return g_strdup_printf("cuda:%d", dev->cuda_device);
  }
#endif
  (void)dev;
  return g_strdup("cpu");
}

void cohort_device_log_local(const CohortConfig *cfg, int local_world_size,
                             CohortProgress *progress)
{
#if COHORT_HAVE_CUDA
  int count = cohort_cuda_device_count();
  if (count == 0)
    return;
  /* The devices the local ranks use, each once, in rank order. */
  g_autoptr(GArray) used = g_array_new(FALSE, FALSE, sizeof(int));
  for (int lr = 0; lr < MAX(local_world_size, 1); lr++) {
    int d = device_for(cfg, NULL, lr, MAX(local_world_size, 1), count, NULL);
    gboolean seen = d < 0;
    for (guint i = 0; i < used->len && !seen; i++)
      seen = g_array_index(used, int, i) == d;
    if (!seen)
      g_array_append_val(used, d);
  }
  if ((int)used->len < MAX(local_world_size, 1))
    cohort_progress_log(progress, COHORT_LEVEL_WARNING,
                        "%d local ranks share %u GPU%s (gloo): fine for testing, slow for "
                        "training",
                        local_world_size, used->len, used->len == 1 ? "" : "s");
  for (guint i = 0; i < used->len; i++) {
    int d = g_array_index(used, int, i);
    CohortCudaDeviceInfo info;
    if (cohort_cuda_device_info(d, &info) != 0)
      continue;
    cohort_progress_log(progress, COHORT_LEVEL_INFO,
                        "GPU %d: %s, %.1f GiB, compute capability %d.%d, %d SMs", d, info.name,
                        (double)info.total_bytes / (1024.0 * 1024.0 * 1024.0), info.cc_major,
                        info.cc_minor, info.sm_count);
  }
  for (guint i = 0; i < used->len; i++)
    for (guint j = i + 1; j < used->len; j++) {
      int a = g_array_index(used, int, i), b = g_array_index(used, int, j);
      if (cohort_cuda_can_access_peer(a, b) && cohort_cuda_can_access_peer(b, a))
        cohort_progress_log(progress, COHORT_LEVEL_INFO,
                            "GPUs %d and %d: peer access (NVLink or PCIe P2P)", a, b);
      else
        cohort_progress_log(progress, COHORT_LEVEL_WARNING,
                            "GPUs %d and %d: no peer access; gradients between them go through "
                            "host memory, which is slower",
                            a, b);
    }
#else
  (void)cfg;
  (void)local_world_size;
  (void)progress;
#endif
}

gboolean cohort_device_check(const CohortComputeDevice *dev, GError **error)
{
#if COHORT_HAVE_CUDA
  if (dev->cuda_device >= 0) {
    const char *e = cohort_cuda_last_error();
    if (e) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, "GPU %d: %s",
                  dev->cuda_device, e);
      return FALSE;
    }
  }
#endif
  (void)dev;
  (void)error;
  return TRUE;
}
