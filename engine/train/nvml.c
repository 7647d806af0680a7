/* NVML through dlopen: the few functions and types we use, declared here (NVML's ABI for
 * them has been stable since the _v2 entry points; there is no nvml.h on build machines). */
#include "engine/train/nvml.h"

#include <dlfcn.h>

#include "cohort-build-config.h"
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

typedef int nvmlReturn_t; /* 0 = NVML_SUCCESS */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;

static struct {
  gboolean ok;
  nvmlReturn_t (*init)(void);
  nvmlReturn_t (*by_bus_id)(const char *bus_id, nvmlDevice_t *dev);
  nvmlReturn_t (*memory)(nvmlDevice_t dev, nvmlMemory_t *mem);
  nvmlReturn_t (*util)(nvmlDevice_t dev, nvmlUtilization_t *u);
} nvml;

static gpointer load(gpointer unused)
{
  (void)unused;
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return NULL;
  *(void **)&nvml.init = dlsym(h, "nvmlInit_v2");
  *(void **)&nvml.by_bus_id = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&nvml.memory = dlsym(h, "nvmlDeviceGetMemoryInfo");
  *(void **)&nvml.util = dlsym(h, "nvmlDeviceGetUtilizationRates");
  if (!nvml.init || !nvml.by_bus_id || !nvml.memory || !nvml.util || nvml.init() != 0) {
    dlclose(h);
    return NULL;
  }
  nvml.ok = TRUE; /* the library stays loaded for the process's life */
  return NULL;
}

gboolean cohort_nvml_query(int cuda_device, guint64 *mem_used, guint *util_percent)
{
#if COHORT_HAVE_CUDA
  static GOnce once = G_ONCE_INIT;
  g_once(&once, load, NULL);
  if (!nvml.ok || cuda_device < 0)
    return FALSE;
  char bus_id[64];
  /* Fails without touching the backend's error record, which may hold a real failure that
   * the trainer has yet to report. */
  if (cohort_cuda_device_pci_bus_id(cuda_device, bus_id, sizeof bus_id) != 0)
    return FALSE;
  nvmlDevice_t dev = NULL;
  nvmlMemory_t mem;
  nvmlUtilization_t u;
  if (nvml.by_bus_id(bus_id, &dev) != 0 || nvml.memory(dev, &mem) != 0 || nvml.util(dev, &u) != 0)
    return FALSE;
  *mem_used = mem.used;
  *util_percent = u.gpu;
  return TRUE;
#else
  (void)load;
  (void)cuda_device;
  (void)mem_used;
  (void)util_percent;
  return FALSE;
#endif
}
