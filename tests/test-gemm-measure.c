/* cpu_matmul "measure" (kernels/cpu/gemm-measure.c): a shape the file does not know is computed
 * by OpenBLAS and oneDNN in turn, three times each, and every one of those products is that
 * library's own result, bit for bit; then the faster (within 3 %: auto's choice) is written to
 * the file as one line and runs from then on. A run that finds the line measures nothing; a
 * line another process wrote while this one was timing wins; cut or foreign lines are skipped;
 * without a writable file the choice lives in memory. */
#include "cohort-build-config.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm-paths.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Odd sizes and a long K, so that the two libraries' sums differ somewhere. */
enum { M = 67, N = 45, K = 301 };

typedef struct Fixture {
  float *A, *B, *C0;
  float *by[2]; /* C after one product by OpenBLAS, by oneDNN */
  char *dir, *file;
} Fixture;

static void fixture_init(Fixture *f, int ta)
{
  GRand *rng = g_rand_new_with_seed(7);
  f->A = g_new(float, M *K);
  f->B = g_new(float, K *N);
  f->C0 = g_new(float, M *N);
  for (int i = 0; i < M * K; i++)
    f->A[i] = (float)g_rand_double_range(rng, -1, 1);
  for (int i = 0; i < K * N; i++)
    f->B[i] = (float)g_rand_double_range(rng, -1, 1);
  for (int i = 0; i < M * N; i++)
    f->C0[i] = (float)g_rand_double_range(rng, -1, 1);
  g_rand_free(rng);
  for (int lib = 0; lib < 2; lib++) {
    f->by[lib] = g_memdup2(f->C0, sizeof(float) * M * N);
    cohort_cpu_gemm_run(lib ? COHORT_CPU_GEMM_ONEDNN : COHORT_CPU_GEMM_OPENBLAS, ta, 0, M, N, K,
                        0.5f, f->A, ta ? M : K, f->B, N, 0.25f, f->by[lib], N);
  }
  f->dir = g_dir_make_tmp("gemm-measure-XXXXXX", NULL);
  f->file = g_build_filename(f->dir, "choices.tsv", NULL);
  g_setenv("COHORT_CPU_GEMM_CACHE", f->file, TRUE);
  cohort_cpu_gemm_measure_forget();
  g_assert_true(cohort_cpu_gemm_force("measure"));
}

static void fixture_clear(Fixture *f)
{
  g_remove(f->file);
  g_rmdir(f->dir);
  g_free(f->A), g_free(f->B), g_free(f->C0), g_free(f->by[0]), g_free(f->by[1]);
  g_free(f->dir), g_free(f->file);
  cohort_cpu_gemm_measure_forget();
  g_assert_true(cohort_cpu_gemm_force("openblas"));
}

/* One product through the backend's gemm on the fixture's operands; which library's result
 * it is (0 OpenBLAS, 1 oneDNN; both when they agree). */
static int product(const Fixture *f, int ta)
{
  g_autofree float *C = g_memdup2(f->C0, sizeof(float) * M * N);
  cohort_cpu_gemm(ta, 0, M, N, K, 0.5f, f->A, ta ? M : K, f->B, N, 0.25f, C, N);
  int is[2];
  for (int lib = 0; lib < 2; lib++)
    is[lib] = memcmp(C, f->by[lib], sizeof(float) * M * N) == 0;
  g_assert_true(is[0] || is[1]);
  return is[0] && is[1] ? 2 : is[1];
}

static char *read_file(const char *path)
{
  char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  return text;
}

static void test_timed_then_kept(void)
{
  if (!COHORT_HAVE_ONEDNN) {
    g_test_skip("this build has no oneDNN: measure chooses between OpenBLAS and oneDNN");
    return;
  }
  Fixture f;
  fixture_init(&f, 0);
  /* the test proves which library computed a product only if their sums differ */
  g_assert_true(memcmp(f.by[0], f.by[1], sizeof(float) * M * N) != 0);
  for (int call = 0; call < 6; call++)
    g_assert_cmpint(product(&f, 0), ==, call % 2);
  g_autofree char *text = read_file(f.file);
  g_test_message("%s", text);
  char **lines = g_strsplit(text, "\n", -1);
  g_assert_cmpint(g_strv_length(lines), ==, 3); /* header, the shape, "" */
  g_assert_true(g_str_has_prefix(lines[0], "# "));
  int threads, m, n, k;
  char op[4], lib[16];
  float gf[2];
  g_assert_cmpint(
      sscanf(lines[1], "%d %3s %d %d %d %15s %f %f", &threads, op, &m, &n, &k, lib, &gf[0], &gf[1]),
      ==, 8);
  g_assert_cmpint(threads, ==, omp_get_max_threads());
  g_assert_cmpstr(op, ==, "NN");
  g_assert_cmpint(m, ==, M);
  g_assert_cmpint(n, ==, N);
  g_assert_cmpint(k, ==, K);
  g_assert_true(gf[0] > 0 && gf[1] > 0);
  /* the faster beyond 3 %, else auto's library */
  int want = gf[1] > 1.03f * gf[0] ? 1
             : gf[0] > 1.03f * gf[1]
                 ? 0
                 : cohort_cpu_gemm_default_fp32_path() == COHORT_CPU_GEMM_ONEDNN;
  g_assert_cmpstr(lib, ==, want ? "onednn" : "openblas");
  g_strfreev(lines);
  for (int call = 0; call < 3; call++)
    g_assert_cmpint(product(&f, 0), ==, want);
  int used, on_onednn, timing, timed;
  cohort_cpu_gemm_measure_counts(&used, &on_onednn, &timing, &timed);
  g_assert_cmpint(used, ==, 1);
  g_assert_cmpint(on_onednn, ==, want);
  g_assert_cmpint(timed, ==, 1);

  /* A later run reads the line and times nothing: its first product is the chosen library's. */
  cohort_cpu_gemm_measure_forget();
  g_assert_cmpint(product(&f, 0), ==, want);
  cohort_cpu_gemm_measure_counts(&used, &on_onednn, &timing, &timed);
  g_assert_cmpint(used, ==, 1);
  g_assert_cmpint(timed, ==, 0);
  g_autofree char *again = read_file(f.file);
  g_assert_cmpstr(again, ==, text);
  fixture_clear(&f);
}

/* The file's lines decide; a line cut short (a crash while writing), a foreign library, a bad
 * op and a line with a field too many are skipped, and their shapes are timed. A line for a
 * shape this process is still timing, written by another process meanwhile, wins. */
static void test_file_lines(void)
{
  if (!COHORT_HAVE_ONEDNN) {
    g_test_skip("this build has no oneDNN");
    return;
  }
  Fixture f;
  fixture_init(&f, 1);
  int t = omp_get_max_threads();
  g_autofree char *lines =
      g_strdup_printf("# comment\n"
                      "%d NN %d %d %d onednn 1.0 2.0\n"
                      "%d NN %d %d %d openblas 9.0 1.0\n"
                      "%d TN %d %d %d blis 1.0 2.0\n"
                      "%d XY %d %d %d onednn 1.0 2.0\n"
                      "%d TN %d %d %d onednn 1.0 2.0 extra\n"
                      "%d TN %d %d %d onednn 1.0",
                      t, M, N, K, t, M, N, K, t, M, N, K, t, M, N, K, t, M, N, K, t, M, N, K);
  g_assert_true(g_file_set_contents(f.file, lines, -1, NULL));
  /* NN: the first line for it says oneDNN (the second is ignored), so no timing */
  g_autofree float *C = g_memdup2(f.C0, sizeof(float) * M * N);
  g_autofree float *want = g_memdup2(f.C0, sizeof(float) * M * N);
  cohort_cpu_gemm(0, 0, M, N, K, 0.5f, f.A, K, f.B, N, 0.25f, C, N);
  cohort_cpu_gemm_run(COHORT_CPU_GEMM_ONEDNN, 0, 0, M, N, K, 0.5f, f.A, K, f.B, N, 0.25f, want, N);
  g_assert_cmpmem(C, sizeof(float) * M * N, want, sizeof(float) * M * N);
  /* TN: no usable line, so it is timed, OpenBLAS first; another process then writes its line */
  g_assert_cmpint(product(&f, 1), ==, 0);
  g_assert_cmpint(product(&f, 1), ==, 1);
  FILE *out = fopen(f.file, "a");
  fprintf(out, "\n%d TN %d %d %d onednn 1.0 2.0\n", t, M, N, K);
  fclose(out);
  for (int call = 2; call < 6; call++)
    g_assert_cmpint(product(&f, 1), ==, call % 2);
  g_assert_cmpint(product(&f, 1), ==, 1); /* the other process's line */
  int used, on_onednn, timing, timed;
  cohort_cpu_gemm_measure_counts(&used, &on_onednn, &timing, &timed);
  g_assert_cmpint(used, ==, 2);
  g_assert_cmpint(on_onednn, ==, 2);
  g_assert_cmpint(timed, ==, 0);
  g_autofree char *text = read_file(f.file);
  g_autofree char *tail = g_strdup_printf("\n%d TN %d %d %d onednn 1.0 2.0\n", t, M, N, K);
  g_assert_true(g_str_has_suffix(text, tail)); /* nothing appended after it */
  fixture_clear(&f);
}

/* A file that cannot be made: a warning, and the choices live in this process. */
static void test_no_file(void)
{
  if (!COHORT_HAVE_ONEDNN) {
    g_test_skip("this build has no oneDNN");
    return;
  }
  Fixture f;
  fixture_init(&f, 0);
  g_autofree char *missing = g_build_filename(f.dir, "no-such-folder", "choices.tsv", NULL);
  g_setenv("COHORT_CPU_GEMM_CACHE", missing, TRUE);
  cohort_cpu_gemm_measure_forget();
  if (g_test_subprocess()) {
    for (int call = 0; call < 8; call++)
      product(&f, 0);
    int used, on_onednn, timing, timed;
    cohort_cpu_gemm_measure_counts(&used, &on_onednn, &timing, &timed);
    g_assert_cmpint(used, ==, 1);
    g_assert_cmpint(timed, ==, 1);
    fixture_clear(&f);
    return;
  }
  g_test_trap_subprocess(NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_INHERIT_STDOUT);
  g_test_trap_assert_passed();
  g_test_trap_assert_stderr("*cannot open*no-such-folder*kept for this run only*");
  g_assert_false(g_file_test(missing, G_FILE_TEST_EXISTS));
  g_setenv("COHORT_CPU_GEMM_CACHE", f.file, TRUE);
  fixture_clear(&f);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/gemm-measure/timed-then-kept", test_timed_then_kept);
  g_test_add_func("/gemm-measure/file-lines", test_file_lines);
  g_test_add_func("/gemm-measure/no-file", test_no_file);
  return g_test_run();
}
