/* The CPU backend's reserved address ranges (kernels/backend.h `reserve`).
 *
 * Normally: anonymous private pages, which the kernel backs when they are first written and
 * which read zeros until then, so `commit` has nothing to do; MAP_NORESERVE keeps a large
 * reservation from counting against overcommit, and huge pages are kept out so that what is
 * released is what the caller released.
 *
 * Strict mode (tests; the environment variable COHORT_STRICT_RESERVE = a granule size in
 * bytes, a multiple of the page size, or 1 for the page size): the pages have no access until
 * committed, granule by granule, through the very bookkeeping the CUDA backend uses
 * (kernels/reserve-map.h). A read or write of memory that is not committed then faults here as
 * it would on a GPU, so the engine's commits are checked on machines without one. */
#include "cpu.h"
#include "kernels/reserve-map.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
  char *base;
  size_t bytes, granule;
  CohortReserveMap *map;
} StrictRange;

#define MAX_STRICT 64

static pthread_mutex_t strict_lock = PTHREAD_MUTEX_INITIALIZER;
static StrictRange strict[MAX_STRICT];

static size_t page_size(void)
{
  return (size_t)sysconf(_SC_PAGESIZE);
}

/* The strict granule, or 0 when strict mode is off. */
static size_t strict_granule(void)
{
  const char *v = getenv("COHORT_STRICT_RESERVE");
  if (!v || !*v)
    return 0;
  size_t g = (size_t)strtoull(v, NULL, 10), page = page_size();
  if (g <= 1)
    return page;
  return (g + page - 1) / page * page;
}

static int strict_map(void *ctx, size_t first, size_t n)
{
  StrictRange *r = ctx;
  return mprotect(r->base + first * r->granule, n * r->granule, PROT_READ | PROT_WRITE) == 0 ? 0
                                                                                             : -1;
}

static void strict_unmap(void *ctx, size_t first, size_t n)
{
  StrictRange *r = ctx;
  char *p = r->base + first * r->granule;
  madvise(p, n * r->granule, MADV_DONTNEED);
  mprotect(p, n * r->granule, PROT_NONE);
}

static int strict_zero(void *ctx, size_t off, size_t bytes)
{
  StrictRange *r = ctx;
  memset(r->base + off, 0, bytes);
  return 0;
}

/* The host's ops have finished when they return: nothing is ever in flight. */
static void *strict_fence(void *ctx)
{
  (void)ctx;
  return NULL;
}

static int strict_fence_passed(void *ctx, void *fence)
{
  (void)ctx;
  (void)fence;
  return 1;
}

static void strict_fence_free(void *ctx, void *fence)
{
  (void)ctx;
  (void)fence;
}

static void strict_wait_idle(void *ctx)
{
  (void)ctx;
}

static StrictRange *strict_find(const void *p)
{
  const char *c = p;
  for (int i = 0; i < MAX_STRICT; i++)
    if (strict[i].map && c >= strict[i].base && c < strict[i].base + strict[i].bytes)
      return &strict[i];
  return NULL;
}

static void *strict_reserve(size_t bytes, size_t granule)
{
  size_t len = (bytes ? bytes + granule - 1 : granule) / granule * granule;
  void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
#ifdef MADV_NOHUGEPAGE
  madvise(p, len, MADV_NOHUGEPAGE);
#endif
  pthread_mutex_lock(&strict_lock);
  StrictRange *r = NULL;
  for (int i = 0; i < MAX_STRICT && !r; i++)
    if (!strict[i].map)
      r = &strict[i];
  CohortReserveOps ops = {.ctx = r,
                          .map = strict_map,
                          .unmap = strict_unmap,
                          .zero = strict_zero,
                          .fence = strict_fence,
                          .fence_passed = strict_fence_passed,
                          .fence_free = strict_fence_free,
                          .wait_idle = strict_wait_idle};
  if (r) {
    r->base = p;
    r->bytes = len;
    r->granule = granule;
    r->map = cohort_rmap_new(&ops, len, granule);
  }
  int ok = r && r->map;
  pthread_mutex_unlock(&strict_lock);
  if (!ok) {
    munmap(p, len);
    return NULL;
  }
  return p;
}

void *cohort_cpu_reserve(size_t bytes)
{
  size_t granule = strict_granule();
  if (granule)
    return strict_reserve(bytes, granule);
  size_t len = bytes ? bytes : 1;
  void *p =
      mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
#ifdef MADV_NOHUGEPAGE
  madvise(p, len, MADV_NOHUGEPAGE);
#endif
  return p;
}

int cohort_cpu_commit(void *p, size_t bytes)
{
  pthread_mutex_lock(&strict_lock);
  StrictRange *r = strict_find(p);
  pthread_mutex_unlock(&strict_lock);
  if (!r)
    return 0; /* memory appears where the range is written */
  return cohort_rmap_commit(r->map, (size_t)((char *)p - r->base), bytes);
}

void cohort_cpu_decommit(void *p, size_t bytes)
{
  pthread_mutex_lock(&strict_lock);
  StrictRange *r = strict_find(p);
  pthread_mutex_unlock(&strict_lock);
  if (r) {
    cohort_rmap_decommit(r->map, (size_t)((char *)p - r->base), bytes);
    return;
  }
  uintptr_t page = (uintptr_t)page_size();
  uintptr_t a = (uintptr_t)p, b = a + bytes;
  uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;
  if (hi <= lo) {
    memset(p, 0, bytes);
    return;
  }
  /* The partial pages at the ends are shared with the neighbours: only these bytes go. */
  memset(p, 0, lo - a);
  memset((void *)hi, 0, b - hi);
  madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void cohort_cpu_unreserve(void *p, size_t bytes)
{
  if (!p)
    return;
  pthread_mutex_lock(&strict_lock);
  StrictRange *r = strict_find(p);
  if (r) {
    CohortReserveMap *map = r->map;
    size_t len = r->bytes;
    r->map = NULL;
    pthread_mutex_unlock(&strict_lock);
    cohort_rmap_free(map);
    munmap(p, len);
    return;
  }
  pthread_mutex_unlock(&strict_lock);
  munmap(p, bytes ? bytes : 1);
}

int cohort_cpu_reserve_usage(const void *p, size_t *now, size_t *peak)
{
  pthread_mutex_lock(&strict_lock);
  StrictRange *r = strict_find(p);
  pthread_mutex_unlock(&strict_lock);
  if (!r)
    return -1;
  cohort_rmap_usage(r->map, now, peak);
  return 0;
}
