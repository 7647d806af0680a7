/* The bookkeeping of a reserved address range (kernels/backend.h `reserve`) whose memory is
 * committed and released in granules: the CUDA backend's (CUDA's virtual memory management:
 * a granule is cuMemGetAllocationGranularity's, 2 MiB on current GPUs) and the CPU backend's
 * strict mode (COHORT_STRICT_RESERVE, pages without access until committed, which makes the
 * CPU fault where a GPU would). Compiled by the C compiler and by nvcc (as math-inline.h), so
 * the CPU tests run the very logic the GPU uses.
 *
 * What is committed is a set of byte intervals: `commit` adds one, `decommit` removes one. A
 * granule has memory while any committed interval touches it, so two neighbours that share a
 * granule keep it until both are gone. A granule that gets memory reads zeros (the backend
 * zeroes it); `decommit` zeroes its bytes in the granules that stay. Memory that is let go
 * may still be read by work the device has queued but not run: it is released only once a
 * fence, taken after that work, has passed (`fence` NULL: nothing is ever in flight, as on
 * the host), and a granule committed again before then is simply kept (and zeroed). */
#pragma once

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What a backend does for the map. Granules are numbered from the start of the range. */
typedef struct CohortReserveOps {
  void *ctx;
  /* Gives granules [first, first + n) memory and access; 0, or -1 (nothing mapped). */
  int (*map)(void *ctx, size_t first, size_t n);
  /* Takes the memory of granules [first, first + n) back. */
  void (*unmap)(void *ctx, size_t first, size_t n);
  /* Zeroes bytes [off, off + bytes) of the range after the work queued so far; 0 or -1. */
  int (*zero)(void *ctx, size_t off, size_t bytes);
  /* A mark after the work queued so far, or NULL when none can be in flight (the host). */
  void *(*fence)(void *ctx);
  /* 1 once the work before `fence` has finished (or can never finish: a broken device). */
  int (*fence_passed)(void *ctx, void *fence);
  void (*fence_free)(void *ctx, void *fence);
  /* Waits until all queued work has finished. */
  void (*wait_idle)(void *ctx);
} CohortReserveOps;

enum { COHORT_RM_FREE = 0, COHORT_RM_LIVE = 1, COHORT_RM_PENDING = 2 };

typedef struct {
  void *fence;
  uint64_t id;
  size_t first, n; /* granules it released; those still PENDING with its id go */
} CohortReservePending;

typedef struct CohortReserveMap {
  CohortReserveOps ops;
  size_t bytes, granule, n_granules;
  unsigned char *state;
  uint64_t *pend_id; /* per granule: the release it waits for (PENDING) */
  size_t *lo, *hi;   /* committed intervals, sorted, disjoint and not touching */
  size_t n_iv, cap_iv;
  CohortReservePending *pend; /* oldest first */
  size_t n_pend, cap_pend;
  uint64_t next_id;
  size_t live, peak; /* granules with memory (live or pending), and the most so far */
  size_t maps, unmaps;
  pthread_mutex_t lock;
} CohortReserveMap;

/* A map of `bytes` (rounded up to whole granules) with everything free; NULL when out of
 * host memory. */
static inline CohortReserveMap *cohort_rmap_new(const CohortReserveOps *ops, size_t bytes,
                                                size_t granule)
{
  CohortReserveMap *m = (CohortReserveMap *)calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->ops = *ops;
  m->granule = granule ? granule : 1;
  m->n_granules = (bytes + m->granule - 1) / m->granule;
  m->bytes = m->n_granules * m->granule;
  size_t n = m->n_granules ? m->n_granules : 1;
  m->state = (unsigned char *)calloc(n, 1);
  m->pend_id = (uint64_t *)calloc(n, sizeof(uint64_t));
  m->next_id = 1;
  pthread_mutex_init(&m->lock, NULL);
  if (!m->state || !m->pend_id) {
    free(m->state);
    free(m->pend_id);
    free(m);
    return NULL;
  }
  return m;
}

/* Unmaps runs of granules in [first, first + n) whose state is `from` (and, for PENDING, whose
 * release is `id`), making them FREE. */
static inline void cohort_rmap_unmap_runs_(CohortReserveMap *m, size_t first, size_t n,
                                           unsigned char from, uint64_t id)
{
  size_t g = first, end = first + n;
  while (g < end) {
    if (m->state[g] != from || (from == COHORT_RM_PENDING && m->pend_id[g] != id)) {
      g++;
      continue;
    }
    size_t run = g;
    while (run < end && m->state[run] == from &&
           (from != COHORT_RM_PENDING || m->pend_id[run] == id))
      run++;
    m->ops.unmap(m->ops.ctx, g, run - g);
    memset(m->state + g, COHORT_RM_FREE, run - g);
    m->live -= run - g;
    m->unmaps += run - g;
    g = run;
  }
}

/* Releases what waited for fences that have passed (all of them when `all`, after waiting for
 * the device). Under the lock. */
static inline void cohort_rmap_poll_(CohortReserveMap *m, int all)
{
  if (all && m->n_pend > 0 && m->ops.wait_idle)
    m->ops.wait_idle(m->ops.ctx);
  size_t done = 0;
  while (done < m->n_pend) {
    CohortReservePending *p = &m->pend[done];
    if (!all && !m->ops.fence_passed(m->ops.ctx, p->fence))
      break; /* fences pass in the order they were taken */
    cohort_rmap_unmap_runs_(m, p->first, p->n, COHORT_RM_PENDING, p->id);
    m->ops.fence_free(m->ops.ctx, p->fence);
    done++;
  }
  if (done > 0) {
    memmove(m->pend, m->pend + done, (m->n_pend - done) * sizeof *m->pend);
    m->n_pend -= done;
  }
}

/* The first interval whose end is past `off`. */
static inline size_t cohort_rmap_find_(const CohortReserveMap *m, size_t off)
{
  size_t a = 0, b = m->n_iv;
  while (a < b) {
    size_t mid = (a + b) / 2;
    if (m->hi[mid] <= off)
      a = mid + 1;
    else
      b = mid;
  }
  return a;
}

/* Whether a committed interval touches granule g. */
static inline int cohort_rmap_touched_(const CohortReserveMap *m, size_t g)
{
  size_t lo = g * m->granule, hi = lo + m->granule;
  size_t i = cohort_rmap_find_(m, lo);
  return i < m->n_iv && m->lo[i] < hi;
}

static inline int cohort_rmap_reserve_iv_(CohortReserveMap *m, size_t need)
{
  if (need <= m->cap_iv)
    return 0;
  size_t cap = m->cap_iv ? 2 * m->cap_iv : 16;
  while (cap < need)
    cap *= 2;
  size_t *lo = (size_t *)realloc(m->lo, cap * sizeof(size_t));
  if (!lo)
    return -1;
  m->lo = lo;
  size_t *hi = (size_t *)realloc(m->hi, cap * sizeof(size_t));
  if (!hi)
    return -1;
  m->hi = hi;
  m->cap_iv = cap;
  return 0;
}

/* Adds [a, b) to the committed intervals, merging what it touches. */
static inline int cohort_rmap_add_(CohortReserveMap *m, size_t a, size_t b)
{
  size_t i = cohort_rmap_find_(m, a > 0 ? a - 1 : 0);
  /* intervals i … j - 1 touch or overlap [a, b) */
  size_t j = i;
  while (j < m->n_iv && m->lo[j] <= b)
    j++;
  if (j > i) {
    a = a < m->lo[i] ? a : m->lo[i];
    b = b > m->hi[j - 1] ? b : m->hi[j - 1];
  }
  if (j == i && cohort_rmap_reserve_iv_(m, m->n_iv + 1) != 0)
    return -1;
  size_t removed = j - i;
  if (removed == 0) {
    memmove(m->lo + i + 1, m->lo + i, (m->n_iv - i) * sizeof(size_t));
    memmove(m->hi + i + 1, m->hi + i, (m->n_iv - i) * sizeof(size_t));
    m->n_iv++;
  } else if (removed > 1) {
    memmove(m->lo + i + 1, m->lo + j, (m->n_iv - j) * sizeof(size_t));
    memmove(m->hi + i + 1, m->hi + j, (m->n_iv - j) * sizeof(size_t));
    m->n_iv -= removed - 1;
  }
  m->lo[i] = a;
  m->hi[i] = b;
  return 0;
}

/* Removes [a, b) from the committed intervals (splitting one that holds it inside). */
static inline int cohort_rmap_remove_(CohortReserveMap *m, size_t a, size_t b)
{
  size_t i = cohort_rmap_find_(m, a);
  if (i < m->n_iv && m->lo[i] < a && m->hi[i] > b) {
    if (cohort_rmap_reserve_iv_(m, m->n_iv + 1) != 0)
      return -1;
    memmove(m->lo + i + 2, m->lo + i + 1, (m->n_iv - i - 1) * sizeof(size_t));
    memmove(m->hi + i + 2, m->hi + i + 1, (m->n_iv - i - 1) * sizeof(size_t));
    m->n_iv++;
    m->lo[i + 1] = b;
    m->hi[i + 1] = m->hi[i];
    m->hi[i] = a;
    return 0;
  }
  size_t keep_from = i;
  if (i < m->n_iv && m->lo[i] < a) {
    m->hi[i] = a; /* its head stays */
    keep_from = i + 1;
  }
  size_t j = keep_from;
  while (j < m->n_iv && m->hi[j] <= b)
    j++;
  if (j < m->n_iv && m->lo[j] < b)
    m->lo[j] = b; /* its tail stays */
  if (j > keep_from) {
    memmove(m->lo + keep_from, m->lo + j, (m->n_iv - j) * sizeof(size_t));
    memmove(m->hi + keep_from, m->hi + j, (m->n_iv - j) * sizeof(size_t));
    m->n_iv -= j - keep_from;
  }
  return 0;
}

/* Maps the FREE granules of [g0, g1) and zeroes them; -1 when the backend cannot. */
static inline int cohort_rmap_map_free_(CohortReserveMap *m, size_t g0, size_t g1)
{
  size_t g = g0;
  while (g < g1) {
    if (m->state[g] != COHORT_RM_FREE) {
      g++;
      continue;
    }
    size_t run = g;
    while (run < g1 && m->state[run] == COHORT_RM_FREE)
      run++;
    if (m->ops.map(m->ops.ctx, g, run - g) != 0)
      return -1;
    memset(m->state + g, COHORT_RM_LIVE, run - g);
    m->live += run - g;
    m->maps += run - g;
    if (m->live > m->peak)
      m->peak = m->live;
    if (m->ops.zero(m->ops.ctx, g * m->granule, (run - g) * m->granule) != 0)
      return -1;
    g = run;
  }
  return 0;
}

/* Lets go of the granules of [g0, g1) that have memory and that no committed interval
 * touches: released at once when nothing can be in flight, else once a fence taken now has
 * passed. Under the lock. */
static inline void cohort_rmap_let_go_(CohortReserveMap *m, size_t g0, size_t g1)
{
  uint64_t id = m->next_id++;
  size_t first = g1, last = g0;
  for (size_t g = g0; g < g1; g++)
    if (m->state[g] == COHORT_RM_LIVE && !cohort_rmap_touched_(m, g)) {
      m->state[g] = COHORT_RM_PENDING;
      m->pend_id[g] = id;
      first = g < first ? g : first;
      last = g + 1;
    }
  if (last <= first)
    return;
  void *fence = m->ops.fence(m->ops.ctx);
  if (fence && m->n_pend == m->cap_pend) {
    size_t cap = m->cap_pend ? 2 * m->cap_pend : 16;
    CohortReservePending *p =
        (CohortReservePending *)realloc(m->pend, cap * sizeof(CohortReservePending));
    if (p) {
      m->pend = p;
      m->cap_pend = cap;
    }
  }
  if (fence && m->n_pend < m->cap_pend) {
    CohortReservePending *p = &m->pend[m->n_pend++];
    p->fence = fence;
    p->id = id;
    p->first = first;
    p->n = last - first;
    return;
  }
  if (fence) {
    /* no host memory for the note: wait for the device instead */
    m->ops.wait_idle(m->ops.ctx);
    m->ops.fence_free(m->ops.ctx, fence);
  }
  cohort_rmap_unmap_runs_(m, first, last - first, COHORT_RM_PENDING, id);
}

/* Commits bytes [off, off + bytes): every granule they touch has memory when it returns (what
 * was committed before keeps its contents; the rest reads zeros). 0, or -1 when the backend
 * has no memory for it (then nothing new is committed). */
static inline int cohort_rmap_commit(CohortReserveMap *m, size_t off, size_t bytes)
{
  if (bytes == 0)
    return 0;
  if (off > m->bytes || bytes > m->bytes - off)
    return -1;
  pthread_mutex_lock(&m->lock);
  cohort_rmap_poll_(m, 0);
  size_t g0 = off / m->granule, g1 = (off + bytes + m->granule - 1) / m->granule;
  /* granules let go but not released yet are kept: zeroed, as nothing committed uses them */
  int ok = 0;
  for (size_t g = g0; g < g1 && ok == 0; g++)
    if (m->state[g] == COHORT_RM_PENDING) {
      m->state[g] = COHORT_RM_LIVE;
      ok = m->ops.zero(m->ops.ctx, g * m->granule, m->granule);
    }
  if (ok == 0 && cohort_rmap_map_free_(m, g0, g1) != 0) {
    /* out of memory: wait for what is on its way back, and try once more */
    cohort_rmap_poll_(m, 1);
    ok = cohort_rmap_map_free_(m, g0, g1);
  }
  if (ok == 0)
    ok = cohort_rmap_add_(m, off, off + bytes);
  if (ok != 0)
    cohort_rmap_let_go_(m, g0, g1); /* what this call gave memory to, unused */
  pthread_mutex_unlock(&m->lock);
  return ok;
}

/* Decommits bytes [off, off + bytes): they read zeros if committed again; the granules no
 * committed interval touches any more are released once the work queued so far has finished.
 * 0, or -1 when a zeroing failed. */
static inline int cohort_rmap_decommit(CohortReserveMap *m, size_t off, size_t bytes)
{
  if (bytes == 0 || off >= m->bytes)
    return 0;
  if (bytes > m->bytes - off)
    bytes = m->bytes - off;
  pthread_mutex_lock(&m->lock);
  int ok = cohort_rmap_remove_(m, off, off + bytes);
  size_t g0 = off / m->granule, g1 = (off + bytes + m->granule - 1) / m->granule;
  /* the granules that keep memory (only the two ends can): these bytes read zeros */
  for (size_t g = g0; g < g1 && ok == 0; g++) {
    if (m->state[g] != COHORT_RM_LIVE || !cohort_rmap_touched_(m, g))
      continue;
    size_t a = g * m->granule, b = a + m->granule;
    a = a > off ? a : off;
    b = b < off + bytes ? b : off + bytes;
    ok = m->ops.zero(m->ops.ctx, a, b - a);
  }
  cohort_rmap_let_go_(m, g0, g1);
  cohort_rmap_poll_(m, 0);
  pthread_mutex_unlock(&m->lock);
  return ok;
}

/* Releases everything that waits for a fence, after waiting for the device. */
static inline void cohort_rmap_flush(CohortReserveMap *m)
{
  pthread_mutex_lock(&m->lock);
  cohort_rmap_poll_(m, 1);
  pthread_mutex_unlock(&m->lock);
}

/* Bytes with memory now (committed, or let go and not released yet) and the most so far. */
static inline void cohort_rmap_usage(CohortReserveMap *m, size_t *now, size_t *peak)
{
  pthread_mutex_lock(&m->lock);
  if (now)
    *now = m->live * m->granule;
  if (peak)
    *peak = m->peak * m->granule;
  pthread_mutex_unlock(&m->lock);
}

/* Whether every byte of [off, off + bytes) is committed. */
static inline int cohort_rmap_committed(CohortReserveMap *m, size_t off, size_t bytes)
{
  pthread_mutex_lock(&m->lock);
  size_t i = cohort_rmap_find_(m, off);
  int yes = bytes == 0 || (i < m->n_iv && m->lo[i] <= off && m->hi[i] >= off + bytes);
  pthread_mutex_unlock(&m->lock);
  return yes;
}

/* Releases every granule (after waiting for the device) and frees the map. */
static inline void cohort_rmap_free(CohortReserveMap *m)
{
  if (!m)
    return;
  pthread_mutex_lock(&m->lock);
  cohort_rmap_poll_(m, 1);
  cohort_rmap_unmap_runs_(m, 0, m->n_granules, COHORT_RM_LIVE, 0);
  pthread_mutex_unlock(&m->lock);
  pthread_mutex_destroy(&m->lock);
  free(m->state);
  free(m->pend_id);
  free(m->lo);
  free(m->hi);
  free(m->pend);
  free(m);
}
