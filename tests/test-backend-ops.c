/* Every op of kernels/backend.h on the backend under test against the CPU backend, one test
 * per row of the op table (tests/backend-ops-<kind>.c; the harness is tests/backend-ops.h),
 * plus the CUDA cases that are no plain comparison (tests/backend-ops-cuda.c).
 *
 * The backend under test is $COHORT_TEST_DEVICE: "cuda" (the default in builds with CUDA;
 * suite `cuda`, every row skipped with the runtime's reason without a GPU) or "cpu" (suite
 * `unit`). CPU against CPU runs the same functions on both sides, so it proves that the
 * harness runs (every row's allocation, upload, op, download and comparison, under ASan in
 * `make check`), not that any CUDA kernel is right; /ops/harness/catches-wrong-results shows that
 * the comparison does catch a wrong or a missing result. /ops/coverage fails while a member of
 * CohortBackend has no row (or is not listed below as what the rows themselves use). */
#include "backend-ops.h"
#include "cohort-build-config.h"
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

#include <stdio.h>

static const CohortBackend *ref, *dut;
static int n_devices = 1; /* the CPU is always there */

/* Members of the table that are no op to compare: what every row uses (threads, memory, the
 * GEMM mode), the reducer's streams and events (test-reducer, test-nccl and the stream rows
 * to_bf16_on and from_bf16_div_on use them) and the error record (the harness reads it after
 * every row). */
static const char *const machinery[] = {
    "set_threads",   "get_threads", "alloc",      "free",         "upload",        "download",
    "set_device",    "event_new",   "event_free", "event_record", "stream_new",    "stream_free",
    "stream_copy",   "host_alloc",  "host_free",  "last_error",   "set_gemm_mode", "get_gemm_mode",
    "describe_gemm", "reserve",     "decommit",   "unreserve",
};

static const OpRows *all_rows[] = {&ops_rows_linear,     &ops_rows_pointwise, &ops_rows_norms,
                                   &ops_rows_embeddings, &ops_rows_attention, &ops_rows_conv,
                                   &ops_rows_losses,     &ops_rows_optim,     &ops_rows_vae};

/* ---- running a row ---- */

static void case_free(OpCase *c)
{
  for (int i = 0; i < c->n_bufs; i++)
    g_free(c->b[i].host);
  g_rand_free(c->rng);
}

/* The row's buffers on `be`: uploaded, the op run, the compared ones downloaded into got[]
 * (g_free each). FALSE with the reason in `why` when the backend failed. */
static gboolean run_on(const CohortBackend *be, const OpRow *row, OpCase *c, void **got,
                       double *scalar, GString *why)
{
  void *dev[OP_MAX_BUFS] = {0};
  gboolean ok = TRUE;
  for (int i = 0; i < c->n_bufs && ok; i++) {
    size_t bytes = c->b[i].n * op_type_size(c->b[i].type);
    dev[i] = be->alloc(MAX(bytes, 4));
    ok = dev[i] != NULL;
    if (ok)
      be->upload(dev[i], c->b[i].host, bytes);
    else
      g_string_append_printf(why, "%s: alloc of %zu bytes for %s failed", be->name, bytes,
                             c->b[i].name);
  }
  if (ok)
    *scalar = row->run(be, c, dev);
  for (int i = 0; i < c->n_bufs && ok; i++) {
    size_t bytes = c->b[i].n * op_type_size(c->b[i].type);
    got[i] = c->b[i].check ? g_malloc(MAX(bytes, 4)) : NULL;
    if (got[i])
      be->download(got[i], dev[i], bytes);
  }
  const char *e = be->last_error ? be->last_error() : NULL;
  if (ok && e != NULL) {
    g_string_append_printf(why, "%s: %s", be->name, e);
    ok = FALSE;
  }
#if COHORT_HAVE_CUDA
  if (e != NULL && be == cohort_backend_cuda())
    cohort_cuda_clear_error(); /* the next row starts clean */
#endif
  for (int i = 0; i < c->n_bufs; i++)
    if (dev[i])
      be->free(dev[i]);
  return ok;
}

/* How far buffer `b` of the backend under test is outside its tolerance around the
 * reference (<= 0: within), the worst element in *worst. */
static double excess(const OpBuf *b, const void *want, const void *got, size_t *worst)
{
  double most = -INFINITY;
  *worst = 0;
  for (size_t i = 0; i < b->n; i++) {
    double w, g;
    if (b->type == OP_F32)
      w = ((const float *)want)[i], g = ((const float *)got)[i];
    else if (b->type == OP_I32)
      w = ((const int *)want)[i], g = ((const int *)got)[i];
    else
      w = ((const uint16_t *)want)[i], g = ((const uint16_t *)got)[i];
    double x;
    if (isnan(w) || isnan(g))
      x = isnan(w) && isnan(g) ? -INFINITY : INFINITY;
    else if (w == g)
      x = -(b->atol + b->rtol * fabs(w));
    else
      x = fabs(g - w) - (b->atol + b->rtol * fabs(w));
    if (x > most)
      most = x, *worst = i;
  }
  return most;
}

static double value_at(const OpBuf *b, const void *p, size_t i)
{
  return b->type == OP_F32   ? ((const float *)p)[i]
         : b->type == OP_I32 ? ((const int *)p)[i]
                             : ((const uint16_t *)p)[i];
}

/* Runs `row` on the reference and on `under_test`: TRUE when every compared output is within
 * its tolerance; otherwise `report` says which element of which output is off, and by what. */
static gboolean run_row(const OpRow *row, const CohortBackend *under_test, GString *report)
{
  OpCase c = {.p = row->p};
  c.rng = g_rand_new_with_seed(g_str_hash(row->op) * 31u + g_str_hash(row->label));
  row->setup(&c);
  void *want[OP_MAX_BUFS] = {0}, *got[OP_MAX_BUFS] = {0};
  double want_s = NAN, got_s = NAN;
  gboolean ok = run_on(ref, row, &c, want, &want_s, report) &&
                run_on(under_test, row, &c, got, &got_s, report);
  for (int i = 0; i < c.n_bufs && ok; i++) {
    const OpBuf *b = &c.b[i];
    size_t k = 0;
    if (!b->check || excess(b, want[i], got[i], &k) <= 0)
      continue;
    g_string_append_printf(report,
                           "%s %s: %s: element %zu of %zu: %s %.9g, %s %.9g (allowed %g + %g * "
                           "|%s|)",
                           row->op, row->label, b->name, k, b->n, under_test->name,
                           value_at(b, got[i], k), ref->name, value_at(b, want[i], k), b->atol,
                           b->rtol, ref->name);
    ok = FALSE;
  }
  if (ok && c.has_scalar && !(fabs(got_s - want_s) <= c.scalar_rtol * fabs(want_s))) {
    g_string_append_printf(report, "%s %s: result %s %.17g, %s %.17g (allowed %g relative)",
                           row->op, row->label, under_test->name, got_s, ref->name, want_s,
                           c.scalar_rtol);
    ok = FALSE;
  }
  for (int i = 0; i < OP_MAX_BUFS; i++)
    g_free(want[i]), g_free(got[i]);
  case_free(&c);
  return ok;
}

static gboolean need_device(void)
{
  if (n_devices > 0)
    return TRUE;
#if COHORT_HAVE_CUDA
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none visible");
  g_test_skip(msg);
#endif
  return FALSE;
}

static void test_row(gconstpointer data)
{
  if (!need_device())
    return;
  g_autoptr(GString) report = g_string_new(NULL);
  if (!run_row(data, dut, report)) {
    /* a failure, not an abort: with -k the rows after this one still run and report */
    g_test_message("%s", report->str);
    g_test_fail();
  }
}

/* ---- the harness itself ---- */

/* The first row of `op` (with `label`, unless NULL). */
static const OpRow *find_row(const char *op, const char *label)
{
  for (guint k = 0; k < G_N_ELEMENTS(all_rows); k++)
    for (size_t i = 0; i < all_rows[k]->n; i++) {
      const OpRow *r = &all_rows[k]->rows[i];
      if (strcmp(r->op, op) == 0 && (label == NULL || strcmp(r->label, label) == 0))
        return r;
    }
  return NULL;
}

/* The function-pointer members of CohortBackend, from kernels/backend.h itself. */
static GPtrArray *backend_members(void)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "..", "kernels", "backend.h", NULL);
  g_autofree char *text = NULL;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, &error));
  const char *start = strstr(text, "typedef struct CohortBackend {");
  const char *end = start ? strstr(start, "} CohortBackend;") : NULL;
  g_assert_nonnull(end);
  g_autofree char *body = g_strndup(start, end - start);
  g_autoptr(GRegex) re = g_regex_new("\\(\\*\\s*(\\w+)\\)\\s*\\(", 0, 0, &error);
  g_assert_no_error(error);
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GMatchInfo) m = NULL;
  for (g_regex_match(re, body, 0, &m); g_match_info_matches(m); g_match_info_next(m, NULL))
    g_ptr_array_add(names, g_match_info_fetch(m, 1));
  return names;
}

static void test_coverage(void)
{
  g_autoptr(GPtrArray) members = backend_members();
  g_assert_cmpuint(members->len, >, 60);
  g_autoptr(GString) missing = g_string_new(NULL);
  for (guint i = 0; i < members->len; i++) {
    const char *m = g_ptr_array_index(members, i);
    gboolean listed = FALSE;
    for (guint k = 0; k < G_N_ELEMENTS(machinery) && !listed; k++)
      listed = strcmp(machinery[k], m) == 0;
    if (!listed && find_row(m, NULL) == NULL)
      g_string_append_printf(missing, " %s", m);
  }
  if (missing->len)
    g_test_message("ops of kernels/backend.h without a row in tests/backend-ops-*.c:%s",
                   missing->str);
  g_assert_cmpuint(missing->len, ==, 0);
  /* and nothing in the table or the list that the backend does not have (a typo, a rename) */
  for (guint k = 0; k < G_N_ELEMENTS(all_rows); k++)
    for (size_t i = 0; i < all_rows[k]->n; i++) {
      const OpRow *r = &all_rows[k]->rows[i];
      if (!g_ptr_array_find_with_equal_func(members, r->op, g_str_equal, NULL))
        g_test_message("row %s %s names no member of CohortBackend", r->op, r->label);
      g_assert_true(g_ptr_array_find_with_equal_func(members, r->op, g_str_equal, NULL));
    }
  for (guint k = 0; k < G_N_ELEMENTS(machinery); k++)
    g_assert_true(g_ptr_array_find_with_equal_func(members, machinery[k], g_str_equal, NULL));
}

/* A backend under test that is wrong in two ways the comparison must catch. */
static CohortBackend broken;

static void broken_gelu(float *out, const float *inp, size_t n)
{
  cohort_backend_cpu()->gelu_forward(out, inp, n);
  out[n / 2] = nextafterf(out[n / 2], INFINITY) + 1e-4f; /* off by more than the tolerance */
}

static void forgetful_relu(float *out, const float *inp, size_t n)
{
  cohort_backend_cpu()->relu_forward(out, inp, n - 1); /* the last value left as it was */
}

static double broken_sum_squares(const float *values, size_t n)
{
  return cohort_backend_cpu()->sum_squares(values, n) * (1 + 1e-9);
}

static void test_harness_catches(void)
{
  broken = *cohort_backend_cpu();
  broken.name = "broken";
  broken.gelu_forward = broken_gelu;
  broken.relu_forward = forgetful_relu;
  broken.sum_squares = broken_sum_squares;
  const struct {
    const char *op, *label, *says;
  } cases[] = {
      {"gelu_forward", "n10007", "gelu_forward n10007: out: element 5003 of 10007: broken"},
      {"relu_forward", "n10007", "relu_forward n10007: out: element 10006 of 10007: broken"},
      {"sum_squares", "n5", "sum_squares n5: result broken"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autoptr(GString) report = g_string_new(NULL);
    const OpRow *row = find_row(cases[i].op, cases[i].label);
    g_assert_nonnull(row);
    g_assert_false(run_row(row, &broken, report));
    g_test_message("%s", report->str);
    g_assert_nonnull(strstr(report->str, cases[i].says));
  }
  /* and the real CPU passes the same rows */
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autoptr(GString) report = g_string_new(NULL);
    g_assert_true(run_row(find_row(cases[i].op, cases[i].label), ref, report));
  }
}

/* The CPU backend's reserved address space (ZeRO stages 2 and 3): never-written parts read
 * as zeros; decommit zeroes exactly its own bytes, also where it shares pages with
 * neighbours still in use; the backend under test may have none (NULL ops). */
static void test_reserve(void)
{
  const CohortBackend *be = cohort_backend_cpu();
  g_assert_nonnull(be->reserve);
  size_t n = 3 * 4096 + 123; /* floats: several pages, an uneven end */
  float *p = be->reserve(n * sizeof(float));
  g_assert_nonnull(p);
  g_assert_cmpuint((guintptr)p % 64, ==, 0);
  for (size_t i = 0; i < n; i += 97)
    g_assert_cmpfloat(p[i], ==, 0.0f);
  for (size_t i = 0; i < n; i++)
    p[i] = (float)i + 1.0f;
  size_t lo = 1000, hi = 2 * 4096 + 17; /* not page-aligned at either end */
  be->decommit(p + lo, (hi - lo) * sizeof(float));
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat(p[i], ==, i >= lo && i < hi ? 0.0f : (float)i + 1.0f);
  p[lo + 5] = 7.0f; /* the range can be written again */
  g_assert_cmpfloat(p[lo + 5], ==, 7.0f);
  be->unreserve(p, n * sizeof(float));
}

void ops_add_cuda_cases(int n_devices);

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  ref = cohort_backend_cpu();
  ref->set_threads(1);
  const char *want = g_getenv("COHORT_TEST_DEVICE");
#if COHORT_HAVE_CUDA
  gboolean cuda = want == NULL || strcmp(want, "cuda") == 0;
#else
  gboolean cuda = FALSE;
#endif
  if (want != NULL && strcmp(want, "cpu") != 0 && strcmp(want, "cuda") != 0)
    g_error("COHORT_TEST_DEVICE=%s: allowed: cpu, cuda", want);
  if (!cuda && want != NULL && strcmp(want, "cuda") == 0)
    g_error("COHORT_TEST_DEVICE=cuda: this build has no CUDA path");
  dut = ref;
#if COHORT_HAVE_CUDA
  if (cuda) {
    dut = cohort_backend_cuda();
    n_devices = cohort_cuda_device_count();
    if (n_devices > 0 && cohort_cuda_set_device(0) != 0)
      g_error("cannot use CUDA device 0: %s", cohort_cuda_last_error());
  }
#endif
  g_test_add_func("/ops/coverage", test_coverage);
  g_test_add_func("/ops/harness/catches-wrong-results", test_harness_catches);
  g_test_add_func("/ops/cpu-reserve", test_reserve);
  for (guint k = 0; k < G_N_ELEMENTS(all_rows); k++)
    for (size_t i = 0; i < all_rows[k]->n; i++) {
      const OpRow *r = &all_rows[k]->rows[i];
      g_autofree char *path = g_strdup_printf("/ops/%s/%s", r->op, r->label);
      g_test_add_data_func(path, r, test_row);
    }
  if (cuda)
    ops_add_cuda_cases(n_devices);
  return g_test_run();
}
