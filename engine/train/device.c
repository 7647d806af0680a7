#include "engine/train/device.h"

#include "cohort-build-config.h"
#include "kernels/backend.h"

#include <string.h>
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

static const char *src_name(const char *source)
{
  return source ? source : "config";
}

int cohort_device_index_for(const CohortConfig *cfg, const char *source, int lr,
                            int local_world_size, int visible, const char *cuda_visible_devices,
                            GError **error)
{
  const char *vis = cuda_visible_devices;
  guint n_idx = cfg->device_indexes ? cfg->device_indexes->len : 0;
  if (visible <= 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"device\": no CUDA device is visible (CUDA_VISIBLE_DEVICES=%s)",
                src_name(source), vis ? vis : "unset");
    return -1;
  }
  if (n_idx > 0) {
    if ((guint)lr >= n_idx) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                  "%s: key \"device_indexes\" has %u entries but local rank %d needs one; allowed: "
                  "one device index per local rank (%d)",
                  src_name(source), n_idx, lr, local_world_size);
      return -1;
    }
    int d = g_array_index(cfg->device_indexes, int, lr);
    if (d < 0 || d >= visible) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                  "%s: key \"device_indexes\": entry %d is %d but %d GPU%s visible "
                  "(CUDA_VISIBLE_DEVICES=%s); allowed: 0 to %d",
                  src_name(source), lr, d, visible, visible == 1 ? " is" : "s are",
                  vis ? vis : "unset", visible - 1);
      return -1;
    }
    return d;
  }
  if (local_world_size <= visible)
    return lr;
  /* Fewer devices than local ranks. A launcher that binds GPUs to ranks (SLURM's
   * --gpus-per-task, a per-rank CUDA_VISIBLE_DEVICES) shows each rank only its own, so
   * LOCAL_RANK indexes past them: the rank takes lr mod visible of what it sees (device 0
   * when it sees one). Where ranks in fact share a GPU, NCCL's setup refuses with both ranks
   * and the GPU named; Gloo stages through host memory and lets them share. Without
   * CUDA_VISIBLE_DEVICES every local rank sees the whole machine, so for NCCL there are
   * simply too few GPUs: said now rather than at NCCL's setup. */
  if (vis == NULL && cfg->distributed_backend != COHORT_BACKEND_GLOO) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"device\": \"cuda\" with %d local ranks but only %d GPU%s visible "
                "(CUDA_VISIBLE_DEVICES=unset); use fewer ranks per node, or list a device per rank "
                "in \"device_indexes\", or let ranks share GPUs with \"distributed_backend\": "
                "\"gloo\"",
                src_name(source), local_world_size, visible, visible == 1 ? " is" : "s are");
    return -1;
  }
  return lr % visible;
}

#if COHORT_HAVE_CUDA
static int device_for(const CohortConfig *cfg, const char *source, int lr, int local_world_size,
                      int count, GError **error)
{
  return cohort_device_index_for(cfg, source, lr, local_world_size, count,
                                 g_getenv("CUDA_VISIBLE_DEVICES"), error);
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
    char bus[32] = "";
    if (cohort_cuda_device_pci_bus_id(dev->cuda_device, bus, sizeof bus) != 0)
      bus[0] = '\0';
    if (cohort_cuda_device_info(dev->cuda_device, &info) == 0)
      return g_strdup_printf("cuda:%d (%s, %.1f GiB%s%s)", dev->cuda_device, info.name,
                             (double)info.total_bytes / (1024.0 * 1024.0 * 1024.0),
                             bus[0] ? ", PCI " : "", bus);
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
  /* The devices the local ranks use, each once, in rank order. Under a launcher that binds
   * GPUs to ranks each rank sees its own, and rank 0 can speak only for itself. */
  int lws = MAX(local_world_size, 1);
  const char *vis = g_getenv("CUDA_VISIBLE_DEVICES");
  gboolean bound = lws > count && vis != NULL && !(cfg->device_indexes && cfg->device_indexes->len);
  if (bound)
    cohort_progress_log(progress, COHORT_LEVEL_INFO,
                        "%d local ranks, %d GPU%s visible to rank 0 (CUDA_VISIBLE_DEVICES=%s): "
                        "each rank takes device LOCAL_RANK mod %d of the GPUs it sees, as "
                        "launchers that bind GPUs to ranks expect",
                        lws, count, count == 1 ? "" : "s", vis, count);
  g_autoptr(GArray) used = g_array_new(FALSE, FALSE, sizeof(int));
  for (int lr = 0; lr < (bound ? 1 : lws); lr++) {
    int d = device_for(cfg, NULL, lr, MAX(local_world_size, 1), count, NULL);
    gboolean seen = d < 0;
    for (guint i = 0; i < used->len && !seen; i++)
      seen = g_array_index(used, int, i) == d;
    if (!seen)
      g_array_append_val(used, d);
  }
  if (!bound && (int)used->len < lws)
    cohort_progress_log(progress, COHORT_LEVEL_WARNING,
                        "%d local ranks share %u GPU%s (gloo): fine for testing, slow for "
                        "training",
                        local_world_size, used->len, used->len == 1 ? "" : "s");
  for (guint i = 0; i < used->len; i++) {
    int d = g_array_index(used, int, i);
    CohortCudaDeviceInfo info;
    if (cohort_cuda_device_info(d, &info) != 0)
      continue;
    char bus[32] = "?";
    if (cohort_cuda_device_pci_bus_id(d, bus, sizeof bus) != 0)
      g_strlcpy(bus, "?", sizeof bus);
    cohort_progress_log(progress, COHORT_LEVEL_INFO,
                        "GPU %d (PCI %s): %s, %.1f GiB, compute capability %d.%d, %d SMs", d, bus,
                        info.name, (double)info.total_bytes / (1024.0 * 1024.0 * 1024.0),
                        info.cc_major, info.cc_minor, info.sm_count);
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

void cohort_device_step_begin(const CohortComputeDevice *dev, const float *params, size_t n)
{
#if COHORT_HAVE_CUDA
  if (dev->cuda_device >= 0)
    cohort_cuda_weights_begin(params, n); /* -1: the products round per call, as before */
#endif
  (void)dev;
  (void)params;
  (void)n;
}

void cohort_device_step_end(const CohortComputeDevice *dev)
{
#if COHORT_HAVE_CUDA
  if (dev->cuda_device >= 0) {
    cohort_cuda_weights_end();
    cohort_cuda_scratch_trim();
  }
#endif
  (void)dev;
}

gboolean cohort_device_check(const CohortComputeDevice *dev, GError **error)
{
  const char *e = dev->be->last_error ? dev->be->last_error() : NULL;
  if (e == NULL)
    return TRUE;
  if (dev->cuda_device >= 0)
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, "GPU %d: %s",
                dev->cuda_device, e);
  else
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, "%s: %s", dev->be->name,
                e);
  return FALSE;
}

int cohort_device_count_nvidia_gpus(const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir ? dir : "/proc/driver/nvidia/gpus", 0, NULL);
  if (d == NULL)
    return 0;
  int n = 0;
  while (g_dir_read_name(d) != NULL && n < 4096)
    n++;
  return n;
}

char *cohort_device_nvidia_driver_version(const char *path)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path ? path : "/proc/driver/nvidia/version", &text, &len, NULL))
    return NULL;
  /* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 …": the first
   * word made of digits and dots with a dot in it. */
  g_auto(GStrv) words = g_strsplit_set(text, " \t\n", -1);
  for (guint i = 0; words[i] != NULL; i++) {
    const char *w = words[i];
    gboolean digits = w[0] != '\0' && g_ascii_isdigit(w[0]) && strchr(w, '.') != NULL;
    for (const char *c = w; digits && *c; c++)
      digits = g_ascii_isdigit(*c) || *c == '.';
    if (digits && strlen(w) < 32)
      return g_strdup(w);
  }
  return NULL;
}

/* The oldest Linux driver branch a CUDA major version runs on (NVIDIA's minor version
 * compatibility table); 0 when unknown. */
static int driver_branch_for(int cuda_major)
{
  return cuda_major >= 13 ? 580 : cuda_major == 12 ? 525 : cuda_major == 11 ? 450 : 0;
}

char *cohort_device_fallback_message(int nvidia_gpus, const char *probe_error, int runtime_version,
                                     const char *driver_version)
{
  if (nvidia_gpus <= 0)
    return NULL;
  g_autofree char *gpus =
      g_strdup_printf("%d NVIDIA GPU%s", nvidia_gpus, nvidia_gpus == 1 ? " is" : "s are");
  g_autofree char *driver =
      driver_version ? g_strdup_printf(" (driver %s)", driver_version) : g_strdup("");
  if (runtime_version <= 0)
    return g_strdup_printf("device \"auto\": %s present%s but this build has no CUDA path "
                           "(nvcc was not found when it was configured; docs/cuda.md): training "
                           "on the CPU",
                           gpus, driver);
  int major = runtime_version / 1000, minor = runtime_version % 1000 / 10;
  int branch = driver_branch_for(major);
  g_autofree char *needs =
      branch > 0 ? g_strdup_printf("; this build's CUDA %d.%d runtime needs driver %d or newer, or "
                                   "build with an older toolkit (docs/cuda.md, \"Which driver\")",
                                   major, minor, branch)
                 : g_strdup("");
  return g_strdup_printf("device \"auto\": %s present%s but CUDA cannot use them (%s): training "
                         "on the CPU%s; set \"device\": \"cuda\" to make this an error",
                         gpus, driver, probe_error ? probe_error : "no device found", needs);
}

char *cohort_device_auto_fallback(void)
{
  int runtime = 0;
  const char *why = NULL;
#if COHORT_HAVE_CUDA
  if (cohort_cuda_device_count() > 0)
    return NULL;
  runtime = cohort_cuda_runtime_version();
  why = cohort_cuda_probe_error();
#endif
  g_autofree char *driver = cohort_device_nvidia_driver_version(NULL);
  return cohort_device_fallback_message(cohort_device_count_nvidia_gpus(NULL), why, runtime,
                                        driver);
}

#if COHORT_HAVE_CUDA
static char *version_text(int v)
{
  /* CUDA's encoding: 1000 major + 10 minor */
  return g_strdup_printf("%d.%d", v / 1000, v % 1000 / 10);
}
#endif

void cohort_device_add_versions(JsonObject *fields)
{
#if COHORT_HAVE_CUDA
  JsonObject *o = json_object_new();
  g_autofree char *runtime = version_text(cohort_cuda_runtime_version());
  json_object_set_string_member(o, COHORT_FIELD_CUDA_RUNTIME, runtime);
  int dv = cohort_cuda_driver_version();
  if (dv > 0) {
    g_autofree char *driver_cuda = version_text(dv);
    json_object_set_string_member(o, COHORT_FIELD_CUDA_DRIVER_CUDA, driver_cuda);
  }
  g_autofree char *driver = cohort_device_nvidia_driver_version(NULL);
  if (driver)
    json_object_set_string_member(o, COHORT_FIELD_CUDA_DRIVER, driver);
#if COHORT_NCCL_VERSION_CODE > 0
  g_autofree char *nccl =
      g_strdup_printf("%d.%d.%d", COHORT_NCCL_VERSION_CODE / 10000,
                      COHORT_NCCL_VERSION_CODE / 100 % 100, COHORT_NCCL_VERSION_CODE % 100);
  json_object_set_string_member(o, COHORT_FIELD_CUDA_NCCL, nccl);
#endif
  json_object_set_object_member(fields, COHORT_FIELD_CUDA, o);
#else
  (void)fields;
#endif
}
