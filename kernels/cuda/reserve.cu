/* The CUDA backend's reserved address ranges (kernels/backend.h `reserve`), through CUDA's
 * virtual memory management: cuMemAddressReserve takes the address range, and each granule
 * (cuMemGetAllocationGranularity's minimum, 2 MiB on current GPUs) gets its own physical
 * allocation (cuMemCreate, cuMemMap, cuMemSetAccess) while something committed touches it,
 * and gives it back (cuMemUnmap, cuMemRelease) after. The bookkeeping, including when a
 * granule may go, is kernels/reserve-map.h's, which the CPU's strict mode runs in the tests.
 *
 * The driver's entry points come through the runtime (cudaGetDriverEntryPointByVersion), so
 * nothing links libcuda: the build works on machines without a driver, as the rest of the
 * backend does.
 *
 * Ordering. Granules get memory and are zeroed (cudaMemsetAsync on the legacy default stream,
 * where the table's ops run) before `commit` returns, so any op queued after it sees zeros. A
 * granule let go is released only when an event recorded on the legacy default stream at
 * `decommit` has completed: kernels queued before still read it safely. Work on other streams
 * that touches the range (the collectives) must have finished when `decommit` is called: the
 * ZeRO sharder's collectives return only when done. */
#include "cuda.cuh"
#include "kernels/reserve-map.h"

#include <cuda.h> /* the driver API's types; the functions come through the runtime */
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  PFN_cuMemAddressReserve_v10020 address_reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemSetAccess_v10020 set_access;
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
  PFN_cuGetErrorString_v6000 error_string;
} Driver;

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static Driver drv;
static char driver_problem[256];

static void driver_symbol(const char *name, void **fn)
{
  *fn = NULL;
  if (driver_problem[0])
    return;
#if CUDART_VERSION >= 12050
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q);
#elif CUDART_VERSION >= 12000
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = cudaGetDriverEntryPoint(name, fn, cudaEnableDefault, &q);
#elif CUDART_VERSION >= 11030
  int q = 0; /* cudaDriverEntryPointSuccess, before 12.0 had the enum */
  cudaError_t e = cudaGetDriverEntryPoint(name, fn, cudaEnableDefault);
#else
  int q = 1;
  cudaError_t e = cudaErrorNotSupported;
#endif
  if (e != cudaSuccess || q != 0 || *fn == NULL) {
    snprintf(driver_problem, sizeof driver_problem,
             "the driver's %s cannot be had (%s%s): reserved address ranges need CUDA's virtual "
             "memory management (a driver and toolkit of CUDA 11.3 or newer)",
             name, e != cudaSuccess ? cudaGetErrorString(e) : "not found",
             e == cudaSuccess && q == 2 ? ", version too old" : "");
    (void)cudaGetLastError();
    *fn = NULL;
  }
}

static void load_driver(void)
{
  driver_symbol("cuMemAddressReserve", (void **)&drv.address_reserve);
  driver_symbol("cuMemAddressFree", (void **)&drv.address_free);
  driver_symbol("cuMemCreate", (void **)&drv.create);
  driver_symbol("cuMemRelease", (void **)&drv.release);
  driver_symbol("cuMemMap", (void **)&drv.map);
  driver_symbol("cuMemUnmap", (void **)&drv.unmap);
  driver_symbol("cuMemSetAccess", (void **)&drv.set_access);
  driver_symbol("cuMemGetAllocationGranularity", (void **)&drv.granularity);
  driver_symbol("cuGetErrorString", (void **)&drv.error_string);
}

/* Records a failed driver call as the backend's error; true when it succeeded. */
static bool driver_ok(CUresult r, const char *what, size_t bytes)
{
  if (r == CUDA_SUCCESS)
    return true;
  const char *why = NULL;
  if (drv.error_string == NULL || drv.error_string(r, &why) != CUDA_SUCCESS || why == NULL)
    why = "unknown driver error";
  cohort_cuda_fail("cuda: %s (%zu bytes of a reserved range): %s (CUresult %d)", what, bytes, why,
                   (int)r);
  return false;
}

typedef struct {
  int device;
  CUdeviceptr base;
  size_t bytes, granule;
  CUmemGenericAllocationHandle *handles;
  CohortReserveMap *map;
  pthread_mutex_t events_lock;
  cudaEvent_t *spare; /* events to record fences with */
  size_t n_spare, cap_spare;
} Range;

#define MAX_RANGES 64

static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;
static Range *ranges[MAX_RANGES];

/* Makes the range's device current for the calling thread; returns the previous one. */
static int enter(const Range *r)
{
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) {
    (void)cudaGetLastError();
    prev = -1;
  }
  if (prev != r->device)
    cohort_cuda_ok(cudaSetDevice(r->device), "cudaSetDevice (reserved range)");
  return prev;
}

static void leave(const Range *r, int prev)
{
  if (prev >= 0 && prev != r->device)
    cohort_cuda_ok(cudaSetDevice(prev), "cudaSetDevice");
}

static void unmap_granules(void *ctx, size_t first, size_t n)
{
  Range *r = (Range *)ctx;
  for (size_t g = first; g < first + n; g++) {
    CUdeviceptr at = r->base + g * r->granule;
    driver_ok(drv.unmap(at, r->granule), "cuMemUnmap", r->granule);
    driver_ok(drv.release(r->handles[g]), "cuMemRelease", r->granule);
    r->handles[g] = 0;
  }
}

static int map_granules(void *ctx, size_t first, size_t n)
{
  Range *r = (Range *)ctx;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = r->device;
  size_t done = 0;
  bool ok = true;
  for (; ok && done < n; done++) {
    size_t g = first + done;
    CUmemGenericAllocationHandle h = 0;
    ok = driver_ok(drv.create(&h, r->granule, &prop, 0), "cuMemCreate", r->granule);
    if (!ok)
      break;
    ok = driver_ok(drv.map(r->base + g * r->granule, r->granule, 0, h, 0), "cuMemMap", r->granule);
    if (!ok) {
      drv.release(h);
      break;
    }
    r->handles[g] = h;
  }
  if (ok) {
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = r->device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ok = driver_ok(drv.set_access(r->base + first * r->granule, n * r->granule, &access, 1),
                   "cuMemSetAccess", n * r->granule);
  }
  if (!ok) {
    unmap_granules(r, first, done);
    return -1;
  }
  return 0;
}

static int zero_bytes(void *ctx, size_t off, size_t bytes)
{
  Range *r = (Range *)ctx;
  return cohort_cuda_ok(cudaMemsetAsync((void *)(r->base + off), 0, bytes, cudaStreamLegacy),
                        "cudaMemsetAsync (reserved range)")
             ? 0
             : -1;
}

static void *take_fence(void *ctx)
{
  Range *r = (Range *)ctx;
  cudaEvent_t e = NULL;
  pthread_mutex_lock(&r->events_lock);
  if (r->n_spare > 0)
    e = r->spare[--r->n_spare];
  pthread_mutex_unlock(&r->events_lock);
  if (e == NULL &&
      !cohort_cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"))
    e = NULL;
  if (e != NULL && !cohort_cuda_ok(cudaEventRecord(e, cudaStreamLegacy), "cudaEventRecord")) {
    cudaEventDestroy(e);
    e = NULL;
  }
  if (e == NULL) {
    /* no event: wait for the device instead, so nothing queued still reads the memory */
    cohort_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize (reserved range)");
  }
  return (void *)e;
}

static int fence_passed(void *ctx, void *fence)
{
  (void)ctx;
  cudaError_t e = cudaEventQuery((cudaEvent_t)fence);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError(); /* not a failure: leave no trace for the next launch check */
    return 0;
  }
  /* done, or a broken device: nothing more will run either way */
  if (e != cudaSuccess)
    cohort_cuda_ok(e, "cudaEventQuery (reserved range)");
  return 1;
}

static void free_fence(void *ctx, void *fence)
{
  Range *r = (Range *)ctx;
  cudaEvent_t e = (cudaEvent_t)fence;
  pthread_mutex_lock(&r->events_lock);
  if (r->n_spare == r->cap_spare) {
    size_t cap = r->cap_spare ? 2 * r->cap_spare : 16;
    cudaEvent_t *s = (cudaEvent_t *)realloc(r->spare, cap * sizeof(cudaEvent_t));
    if (s) {
      r->spare = s;
      r->cap_spare = cap;
    }
  }
  bool kept = r->n_spare < r->cap_spare;
  if (kept)
    r->spare[r->n_spare++] = e;
  pthread_mutex_unlock(&r->events_lock);
  if (!kept)
    cudaEventDestroy(e);
}

static void wait_idle(void *ctx)
{
  (void)ctx;
  cohort_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize (reserved range)");
}

static Range *find_range(const void *p)
{
  CUdeviceptr a = (CUdeviceptr)p;
  Range *found = NULL;
  pthread_mutex_lock(&ranges_lock);
  for (int i = 0; i < MAX_RANGES && !found; i++)
    if (ranges[i] && a >= ranges[i]->base && a < ranges[i]->base + ranges[i]->bytes)
      found = ranges[i];
  pthread_mutex_unlock(&ranges_lock);
  return found;
}

static void free_range(Range *r)
{
  if (r->map)
    cohort_rmap_free(r->map);
  if (r->base)
    driver_ok(drv.address_free(r->base, r->bytes), "cuMemAddressFree", r->bytes);
  for (size_t i = 0; i < r->n_spare; i++)
    cudaEventDestroy(r->spare[i]);
  pthread_mutex_destroy(&r->events_lock);
  free(r->spare);
  free(r->handles);
  free(r);
}

/* The allocation granule of `device`, 0 with the reason recorded. */
static size_t granule_of(int device)
{
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t g = 0;
  if (!driver_ok(drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                 "cuMemGetAllocationGranularity", 0))
    return 0;
  return g;
}

void *cohort_cuda_reserve(size_t bytes)
{
  pthread_once(&driver_once, load_driver);
  if (driver_problem[0]) {
    cohort_cuda_fail("cuda: reserve: %s", driver_problem);
    return NULL;
  }
  int device = cohort_cuda_get_device();
  if (device < 0) {
    cohort_cuda_fail("cuda: reserve: no usable device");
    return NULL;
  }
  size_t granule = granule_of(device);
  if (granule == 0)
    return NULL;
  Range *r = (Range *)calloc(1, sizeof(Range));
  if (!r)
    return NULL;
  pthread_mutex_init(&r->events_lock, NULL);
  r->device = device;
  r->granule = granule;
  r->bytes = (bytes ? bytes + granule - 1 : granule) / granule * granule;
  r->handles = (CUmemGenericAllocationHandle *)calloc(r->bytes / granule,
                                                      sizeof(CUmemGenericAllocationHandle));
  CohortReserveOps ops;
  memset(&ops, 0, sizeof ops);
  ops.ctx = r;
  ops.map = map_granules;
  ops.unmap = unmap_granules;
  ops.zero = zero_bytes;
  ops.fence = take_fence;
  ops.fence_passed = fence_passed;
  ops.fence_free = free_fence;
  ops.wait_idle = wait_idle;
  if (!r->handles || !driver_ok(drv.address_reserve(&r->base, r->bytes, 0, 0, 0),
                                "cuMemAddressReserve", r->bytes)) {
    r->base = 0;
    free_range(r);
    return NULL;
  }
  r->map = cohort_rmap_new(&ops, r->bytes, granule);
  int slot = -1;
  pthread_mutex_lock(&ranges_lock);
  for (int i = 0; i < MAX_RANGES && slot < 0; i++)
    if (!ranges[i])
      slot = i;
  if (slot >= 0 && r->map)
    ranges[slot] = r;
  pthread_mutex_unlock(&ranges_lock);
  if (slot < 0 || !r->map) {
    cohort_cuda_fail("cuda: reserve: more than %d reserved ranges, or out of host memory",
                     MAX_RANGES);
    free_range(r);
    return NULL;
  }
  return (void *)r->base;
}

int cohort_cuda_commit(void *p, size_t bytes)
{
  Range *r = find_range(p);
  if (!r) {
    cohort_cuda_fail("cuda: commit: %p is in no reserved range", p);
    return -1;
  }
  int prev = enter(r);
  int ok = cohort_rmap_commit(r->map, (size_t)((CUdeviceptr)p - r->base), bytes);
  leave(r, prev);
  if (ok != 0 && !cohort_cuda_last_error())
    cohort_cuda_fail("cuda: commit: %zu bytes of a reserved range could not be given memory",
                     bytes);
  return ok;
}

void cohort_cuda_decommit(void *p, size_t bytes)
{
  Range *r = find_range(p);
  if (!r) {
    cohort_cuda_fail("cuda: decommit: %p is in no reserved range", p);
    return;
  }
  int prev = enter(r);
  cohort_rmap_decommit(r->map, (size_t)((CUdeviceptr)p - r->base), bytes);
  leave(r, prev);
}

void cohort_cuda_unreserve(void *p, size_t bytes)
{
  (void)bytes;
  if (!p)
    return;
  Range *r = NULL;
  pthread_mutex_lock(&ranges_lock);
  for (int i = 0; i < MAX_RANGES && !r; i++)
    if (ranges[i] && ranges[i]->base == (CUdeviceptr)p) {
      r = ranges[i];
      ranges[i] = NULL;
    }
  pthread_mutex_unlock(&ranges_lock);
  if (!r) {
    cohort_cuda_fail("cuda: unreserve: %p is not a reserved range", p);
    return;
  }
  int device = r->device, prev = enter(r);
  free_range(r);
  if (prev >= 0 && prev != device)
    cohort_cuda_ok(cudaSetDevice(prev), "cudaSetDevice");
}

int cohort_cuda_reserve_usage(const void *p, size_t *now, size_t *peak, size_t *granule)
{
  Range *r = find_range(p);
  if (!r)
    return -1;
  int prev = enter(r);
  cohort_rmap_flush(r->map);
  leave(r, prev);
  cohort_rmap_usage(r->map, now, peak);
  if (granule)
    *granule = r->granule;
  return 0;
}
