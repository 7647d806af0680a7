/* Reserved address ranges (kernels/backend.h `reserve`, `commit`, `decommit`, `unreserve`):
 *  - the bookkeeping both backends share (kernels/reserve-map.h) against a fake device whose
 *    granules, zeroing and fences the test controls: committed intervals, neighbours sharing a
 *    granule, zeros after a decommit, memory that waits for a fence before it goes (and is
 *    taken back if committed meanwhile), running out of memory;
 *  - the CPU backend: plain (commit does nothing, decommit zeroes) and strict
 *    (COHORT_STRICT_RESERVE: an access outside what is committed faults);
 *  - the CUDA backend (suite cuda; skips without a GPU): the same semantics through CUDA's
 *    virtual memory management, memory really given back to the device, and a copy queued
 *    before a decommit still reading the data (the release waits for it). */
#include <glib.h>
#include <string.h>

#include "cohort-build-config.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/reserve-map.h"

#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

/* ---- a fake device ---- */

enum { G = 16, NG = 8 };

typedef struct {
  unsigned char mem[G * NG];
  gboolean mapped[NG];
  int maps, unmaps;
  guint issued, completed; /* fences taken, and how many the "device" has passed */
  int limit;               /* granules that can have memory at once (0: any) */
} Fake;

static int fake_map(void *ctx, size_t first, size_t n)
{
  Fake *f = ctx;
  int live = 0;
  for (int g = 0; g < NG; g++)
    live += f->mapped[g];
  if (f->limit && live + (int)n > f->limit)
    return -1;
  for (size_t g = first; g < first + n; g++) {
    g_assert_false(f->mapped[g]);
    f->mapped[g] = TRUE;
    memset(f->mem + g * G, 0xab, G); /* new memory holds junk until zeroed */
  }
  f->maps += (int)n;
  return 0;
}

static void fake_unmap(void *ctx, size_t first, size_t n)
{
  Fake *f = ctx;
  for (size_t g = first; g < first + n; g++) {
    g_assert_true(f->mapped[g]);
    f->mapped[g] = FALSE;
    memset(f->mem + g * G, 0xcd, G);
  }
  f->unmaps += (int)n;
}

static int fake_zero(void *ctx, size_t off, size_t bytes)
{
  Fake *f = ctx;
  for (size_t b = off; b < off + bytes; b++)
    g_assert_true(f->mapped[b / G]); /* zeroing memory that is not there would fault */
  memset(f->mem + off, 0, bytes);
  return 0;
}

static void *fake_fence(void *ctx)
{
  Fake *f = ctx;
  return GUINT_TO_POINTER(++f->issued);
}

static int fake_passed(void *ctx, void *fence)
{
  Fake *f = ctx;
  return GPOINTER_TO_UINT(fence) <= f->completed;
}

static void fake_fence_free(void *ctx, void *fence)
{
  (void)ctx;
  (void)fence;
}

static void fake_idle(void *ctx)
{
  Fake *f = ctx;
  f->completed = f->issued;
}

static void *no_fence(void *ctx)
{
  (void)ctx;
  return NULL;
}

/* With `fences` the fake device runs behind the host (released memory waits for its fence);
 * without, as the host, nothing is ever in flight. */
static CohortReserveMap *fake_map_new(Fake *f, gboolean fences)
{
  memset(f, 0, sizeof *f);
  CohortReserveOps ops = {.ctx = f,
                          .map = fake_map,
                          .unmap = fake_unmap,
                          .zero = fake_zero,
                          .fence = fences ? fake_fence : no_fence,
                          .fence_passed = fake_passed,
                          .fence_free = fake_fence_free,
                          .wait_idle = fake_idle};
  return cohort_rmap_new(&ops, G * NG, G);
}

static int live(const Fake *f)
{
  int n = 0;
  for (int g = 0; g < NG; g++)
    n += f->mapped[g];
  return n;
}

static void expect_bytes(const Fake *f, size_t off, size_t n, unsigned char v, const char *what)
{
  for (size_t b = off; b < off + n; b++)
    if (f->mem[b] != v)
      g_error("%s: byte %zu is 0x%02x, expected 0x%02x", what, b, f->mem[b], v);
}

/* Two neighbours that share a granule; contents kept while committed, zeros after. */
static void test_map_intervals(void)
{
  Fake f;
  CohortReserveMap *m = fake_map_new(&f, FALSE);
  g_assert_cmpint(cohort_rmap_commit(m, 0, 20), ==, 0); /* granules 0, 1 */
  g_assert_cmpint(live(&f), ==, 2);
  expect_bytes(&f, 0, 32, 0, "fresh granules read zeros");
  memset(f.mem, 1, 20);
  g_assert_cmpint(cohort_rmap_commit(m, 20, 20), ==, 0); /* 1 (shared), 2 */
  g_assert_cmpint(live(&f), ==, 3);
  expect_bytes(&f, 0, 20, 1, "the first range kept its contents");
  memset(f.mem + 20, 2, 20);
  g_assert_true(cohort_rmap_committed(m, 0, 40));
  g_assert_false(cohort_rmap_committed(m, 0, 41));
  /* the first goes: granule 0 released, granule 1 kept for the second, its bytes zeroed */
  g_assert_cmpint(cohort_rmap_decommit(m, 0, 20), ==, 0);
  g_assert_false(f.mapped[0]);
  g_assert_true(f.mapped[1] && f.mapped[2]);
  expect_bytes(&f, 16, 4, 0, "the decommitted bytes of a shared granule");
  expect_bytes(&f, 20, 20, 2, "the neighbour's bytes");
  /* committing it again: zeros, the neighbour untouched */
  g_assert_cmpint(cohort_rmap_commit(m, 0, 20), ==, 0);
  expect_bytes(&f, 0, 20, 0, "a range committed again");
  expect_bytes(&f, 20, 20, 2, "the neighbour's bytes");
  /* a hole inside a committed range splits it */
  g_assert_cmpint(cohort_rmap_decommit(m, 8, 50), ==, 0); /* [0,8) and nothing past 58 */
  g_assert_true(cohort_rmap_committed(m, 0, 8));
  g_assert_false(cohort_rmap_committed(m, 8, 1));
  g_assert_cmpint(live(&f), ==, 1);
  g_assert_cmpint(cohort_rmap_decommit(m, 0, G * NG), ==, 0);
  g_assert_cmpint(live(&f), ==, 0);
  /* out of range */
  g_assert_cmpint(cohort_rmap_commit(m, G * NG - 4, 8), ==, -1);
  g_assert_cmpint(live(&f), ==, 0);
  size_t now = 1, peak = 0;
  cohort_rmap_usage(m, &now, &peak);
  g_assert_cmpuint(now, ==, 0);
  g_assert_cmpuint(peak, ==, 3 * G);
  cohort_rmap_free(m);
}

/* Memory let go waits for its fence; committed again meanwhile, it is kept (and zeroed). */
static void test_map_fences(void)
{
  Fake f;
  CohortReserveMap *m = fake_map_new(&f, TRUE);
  g_assert_cmpint(cohort_rmap_commit(m, 0, 4 * G), ==, 0);
  memset(f.mem, 7, 4 * G);
  g_assert_cmpint(cohort_rmap_decommit(m, 0, 2 * G), ==, 0);
  /* the device has not passed the fence: still mapped, the data still there for it */
  g_assert_true(f.mapped[0] && f.mapped[1]);
  expect_bytes(&f, 0, 2 * G, 7, "memory a queued kernel may still read");
  g_assert_cmpint(f.unmaps, ==, 0);
  /* granule 1 committed again before the fence passed: taken back, zeroed, not remapped */
  int maps = f.maps;
  g_assert_cmpint(cohort_rmap_commit(m, G, G), ==, 0);
  g_assert_cmpint(f.maps, ==, maps);
  expect_bytes(&f, G, G, 0, "a pending granule committed again");
  /* the fence passes: granule 0 goes at the next call, granule 1 stays */
  f.completed = f.issued;
  g_assert_cmpint(cohort_rmap_decommit(m, 3 * G, G), ==, 0);
  g_assert_false(f.mapped[0]);
  g_assert_true(f.mapped[1] && f.mapped[2]);
  g_assert_true(f.mapped[3]); /* its own fence has not passed */
  cohort_rmap_flush(m);       /* waits for the device */
  g_assert_false(f.mapped[3]);
  g_assert_cmpint(live(&f), ==, 2);
  cohort_rmap_free(m);
  g_assert_cmpint(live(&f), ==, 0);
}

/* Out of memory: a commit waits for what is on its way back, then fails cleanly. */
static void test_map_out_of_memory(void)
{
  Fake f;
  CohortReserveMap *m = fake_map_new(&f, TRUE);
  f.limit = 3;
  g_assert_cmpint(cohort_rmap_commit(m, 0, 3 * G), ==, 0);
  g_assert_cmpint(cohort_rmap_decommit(m, 0, 2 * G), ==, 0); /* pending, not released */
  g_assert_cmpint(live(&f), ==, 3);
  /* needs two more: only after the pending two are released (the retry waits) */
  g_assert_cmpint(cohort_rmap_commit(m, 4 * G, 2 * G), ==, 0);
  g_assert_cmpint(live(&f), ==, 3);
  /* more than there is: refused, nothing new committed, nothing leaked */
  g_assert_cmpint(cohort_rmap_commit(m, 6 * G, 2 * G), ==, -1);
  g_assert_false(cohort_rmap_committed(m, 6 * G, 1));
  cohort_rmap_flush(m);
  g_assert_cmpint(live(&f), ==, 3);
  cohort_rmap_free(m);
}

/* ---- the CPU backend ---- */

static void test_cpu_plain(void)
{
  g_unsetenv("COHORT_STRICT_RESERVE");
  const CohortBackend *be = cohort_backend_cpu();
  size_t bytes = 1 << 20;
  float *p = be->reserve(bytes);
  g_assert_nonnull(p);
  g_assert_cmpint(be->commit(p, 4096), ==, 0);
  p[10] = 3.0f;
  p[100000] = 4.0f; /* memory appears where written */
  be->decommit(p, bytes);
  g_assert_cmpfloat(p[10], ==, 0.0f);
  g_assert_cmpfloat(p[100000], ==, 0.0f);
  g_assert_cmpint(cohort_cpu_reserve_usage(p, NULL, NULL), ==, -1); /* not strict */
  be->unreserve(p, bytes);
}

static void test_cpu_strict(void)
{
  g_setenv("COHORT_STRICT_RESERVE", "1", TRUE);
  const CohortBackend *be = cohort_backend_cpu();
  size_t page = 4096, bytes = 64 * page;
  char *p = be->reserve(bytes);
  g_assert_nonnull(p);
  g_assert_cmpint(be->commit(p + 100, 2 * page), ==, 0); /* pages 0, 1, 2 */
  memset(p, 5, 3 * page);
  size_t now = 0, peak = 0;
  g_assert_cmpint(cohort_cpu_reserve_usage(p, &now, &peak), ==, 0);
  g_assert_cmpuint(now, ==, 3 * page);
  be->decommit(p + 100, 2 * page);
  g_assert_cmpint(cohort_cpu_reserve_usage(p, &now, &peak), ==, 0);
  g_assert_cmpuint(now, ==, 0);
  g_assert_cmpuint(peak, ==, 3 * page);
  g_assert_cmpint(be->commit(p, 10), ==, 0);
  g_assert_cmpint(p[0], ==, 0); /* zeros again */
  be->unreserve(p, bytes);
  g_unsetenv("COHORT_STRICT_RESERVE");
}

/* In a subprocess: writing where nothing is committed faults, as on a GPU. */
static void test_cpu_strict_faults(void)
{
  if (g_test_subprocess()) {
    g_setenv("COHORT_STRICT_RESERVE", "1", TRUE);
    const CohortBackend *be = cohort_backend_cpu();
    char *p = be->reserve(1 << 20);
    g_assert_cmpint(be->commit(p, 4096), ==, 0);
    p[0] = 1;
    ((volatile char *)p)[8192] = 1; /* not committed */
    return;
  }
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed();
}

/* ---- the CUDA backend ---- */

#if COHORT_HAVE_CUDA
static gboolean need_gpu(void)
{
  if (cohort_cuda_device_count() > 0 && cohort_cuda_set_device(0) == 0)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none usable");
  g_test_skip(msg);
  return FALSE;
}

static void check_cuda(const char *what)
{
  const char *e = cohort_cuda_last_error();
  if (e)
    g_error("%s: the CUDA backend recorded: %s", what, e);
}

static void test_cuda_semantics(void)
{
  if (!need_gpu())
    return;
  const CohortBackend *be = cohort_backend_cuda();
  size_t total = (size_t)512 << 20;
  char *p = be->reserve(total);
  check_cuda("reserve 512 MiB");
  g_assert_nonnull(p);
  size_t now = 0, peak = 0, granule = 0;
  g_assert_cmpint(cohort_cuda_reserve_usage(p, &now, &peak, &granule), ==, 0);
  g_test_message("granule %zu bytes", granule);
  g_assert_cmpuint(granule, >, 0);
  g_assert_cmpuint(now, ==, 0);
  /* two neighbours sharing a granule */
  size_t a = granule + granule / 2, b = 2 * granule;
  g_assert_cmpint(be->commit(p, a), ==, 0);
  g_assert_cmpint(be->commit(p + a, b), ==, 0);
  check_cuda("commit");
  g_autofree unsigned char *host = g_malloc(a + b);
  memset(host, 1, a);
  memset(host + a, 2, b);
  be->upload(p, host, a + b);
  g_autofree unsigned char *back = g_malloc0(a + b);
  be->download(back, p, a + b);
  check_cuda("upload and download");
  g_assert_cmpmem(back, a + b, host, a + b);
  g_assert_cmpint(cohort_cuda_reserve_usage(p, &now, &peak, NULL), ==, 0);
  g_assert_cmpuint(now, ==, 4 * granule); /* ceil(3.5 granules) */
  /* a copy queued before the decommit still reads the data */
  unsigned char *other = be->alloc(a);
  be->copy(other, p, a);
  be->decommit(p, a);
  memset(back, 0, a);
  be->download(back, other, a);
  check_cuda("a copy queued before the decommit");
  g_assert_cmpmem(back, a, host, a);
  be->free(other);
  /* granule 0 released; granule 1, shared, kept with the decommitted half zeroed */
  g_assert_cmpint(cohort_cuda_reserve_usage(p, &now, &peak, NULL), ==, 0);
  g_assert_cmpuint(now, ==, 3 * granule);
  be->download(back, p + a, b);
  for (size_t k = 0; k < b; k++)
    if (back[k] != 2)
      g_error("the neighbour's byte %zu is %d after the decommit, expected 2", k, back[k]);
  g_assert_cmpint(be->commit(p, a), ==, 0);
  be->download(back, p, a);
  for (size_t k = 0; k < a; k++)
    if (back[k] != 0)
      g_error("byte %zu of a range committed again is %d, expected 0", k, back[k]);
  check_cuda("commit again");
  /* memory goes back to the device */
  size_t free0 = 0, free1 = 0, free2 = 0, tot = 0;
  be->decommit(p, total);
  cohort_cuda_reserve_usage(p, &now, &peak, NULL);
  g_assert_cmpuint(now, ==, 0);
  cohort_cuda_memory(&free0, &tot);
  g_assert_cmpint(be->commit(p + granule, 256u << 20), ==, 0);
  cohort_cuda_memory(&free1, &tot);
  be->decommit(p + granule, 256u << 20);
  cohort_cuda_reserve_usage(p, &now, &peak, NULL);
  cohort_cuda_memory(&free2, &tot);
  g_test_message("free memory: %zu MiB, %zu MiB with 256 MiB committed, %zu MiB after", free0 >> 20,
                 free1 >> 20, free2 >> 20);
  g_assert_cmpuint(free0 - free1, >=, (size_t)256 << 20);
  g_assert_cmpuint(free2 + (8u << 20), >=, free0);
  /* past the end: refused, recorded */
  g_assert_cmpint(be->commit(p + total - 8, 64 + granule), ==, -1);
  g_assert_nonnull(cohort_cuda_last_error());
  cohort_cuda_clear_error();
  be->unreserve(p, total);
  check_cuda("unreserve");
}
#endif

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/reserve/map/intervals", test_map_intervals);
  g_test_add_func("/reserve/map/fences", test_map_fences);
  g_test_add_func("/reserve/map/out-of-memory", test_map_out_of_memory);
  g_test_add_func("/reserve/cpu/plain", test_cpu_plain);
  g_test_add_func("/reserve/cpu/strict", test_cpu_strict);
  g_test_add_func("/reserve/cpu/strict-faults", test_cpu_strict_faults);
#if COHORT_HAVE_CUDA
  g_test_add_func("/reserve/cuda/semantics", test_cuda_semantics);
#endif
  return g_test_run();
}
