/* cpu_matmul "measure": each fp32 product shape runs on the library measured faster for it on
 * this CPU, at this thread count (kernels/cpu/gemm-paths.h).
 *
 * Why per shape: on one core the faster library differs from product to product (Zen 3,
 * tiny-gpt: oneDNN's sgemm ahead on the MLP's up-projection, OpenBLAS twice as fast on the
 * weight gradients; docs/benchmarks.md), and a new core can reorder them all. Why timed in
 * training: a library timed alone, on one operand again and again, ranks differently from the
 * same library between the step's other ops (the study's per-shape winners together ran the
 * tiny-gpt step 2 % slower than OpenBLAS alone). Why a file: a choice made again at every start
 * would follow the machine's noise, and two runs (or two ranks) that chose differently would
 * not compute the same bits; only a run's first few steps on a new CPU differ. */
#include "cohort-build-config.h"
#include "kernels/cpu/gemm-paths.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { MAX_SHAPES = 1024, TRIALS = 3 };

typedef struct Shape {
  int threads, ta, tb, M, N, K;
  CohortCpuGemmPath path;
  float gflops[2]; /* OpenBLAS, oneDNN */
  int used;        /* asked for by this process */
  int decided;     /* path is final (published with a release store) */
  int trials[2];   /* products timed on each library so far */
  double best[2];  /* the fastest of them, seconds */
} Shape;

static Shape shapes[MAX_SHAPES];
static int n_shapes;       /* published with release stores; entries below it are final */
static int n_measured_now; /* measured by this process (the rest came from the file) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char cache_path[4096];
static int path_ready;
static int warned;

/* Keeps [A-Za-z0-9.] and turns runs of anything else into one '-'. */
static void sanitize(char *out, size_t size, const char *in)
{
  size_t o = 0;
  for (; *in && o + 1 < size; in++) {
    char c = *in;
    int keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.';
    if (keep)
      out[o++] = c;
    else if (o > 0 && out[o - 1] != '-')
      out[o++] = '-';
  }
  while (o > 0 && out[o - 1] == '-')
    o--;
  out[o] = '\0';
}

/* "vendor family model stepping" of the first processor in /proc/cpuinfo: what the CPU reports
 * about itself, which names the core generation (the model name alone does not: every EPYC
 * here says "AMD EPYC"). */
static void cpu_identity(char *out, size_t size)
{
  static const char *const keys[] = {"vendor_id", "cpu family", "model", "stepping"};
  char vals[4][64] = {"unknown", "0", "0", "0"};
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    if (line[0] == '\n')
      break; /* the first processor only */
    char *colon = strchr(line, ':');
    if (!colon)
      continue;
    for (int k = 0; k < 4; k++) {
      size_t len = strlen(keys[k]);
      if (strncmp(line, keys[k], len) == 0 && (line[len] == '\t' || line[len] == ' ')) {
        const char *v = colon + 1;
        while (*v == ' ')
          v++;
        snprintf(vals[k], sizeof vals[k], "%.*s", (int)strcspn(v, "\n"), v);
      }
    }
  }
  if (f)
    fclose(f);
  snprintf(out, size, "%s %s %s %s", vals[0], vals[1], vals[2], vals[3]);
}

static int make_dirs(char *path)
{
  for (char *p = path + 1; *p; p++) {
    if (*p != '/')
      continue;
    *p = '\0';
    int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
    *p = '/';
    if (bad)
      return 0;
  }
  return mkdir(path, 0755) == 0 || errno == EEXIST;
}

/* COHORT_CPU_GEMM_CACHE names the file ("" keeps the measurements in memory); otherwise it is
 * cohort/cpu-gemm-IDENTITY.tsv in $XDG_CACHE_HOME or ~/.cache, the identity naming the CPU and
 * both libraries' versions and kernels, so that an upgrade or another core measures again. */
static void choose_path(void)
{
  const char *given = getenv("COHORT_CPU_GEMM_CACHE");
  if (given) {
    snprintf(cache_path, sizeof cache_path, "%s", given);
    return;
  }
  char ident[512], name[400], dir[3600];
  char cpu[256];
  cpu_identity(cpu, sizeof cpu);
  snprintf(ident, sizeof ident, "%s %s onednn %s %s", cpu, openblas_get_config(),
           cohort_onednn_version(), cohort_onednn_isa_name());
  sanitize(name, sizeof name, ident);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg == '/')
    snprintf(dir, sizeof dir, "%s/cohort", xdg);
  else if (home && *home == '/')
    snprintf(dir, sizeof dir, "%s/.cache/cohort", home);
  else
    return; /* nowhere to keep it: memory only */
  if (!make_dirs(dir))
    return;
  if (snprintf(cache_path, sizeof cache_path, "%.3600s/cpu-gemm-%.400s.tsv", dir, name) >=
      (int)sizeof cache_path)
    cache_path[0] = '\0';
}

/* Under `lock`: the file's name, chosen once. */
static void ensure_path(void)
{
  if (!path_ready) {
    choose_path();
    path_ready = 1;
  }
}

const char *cohort_cpu_gemm_measure_file(void)
{
  pthread_mutex_lock(&lock);
  ensure_path();
  pthread_mutex_unlock(&lock);
  return cache_path;
}

static int find(int threads, int ta, int tb, int M, int N, int K)
{
  int n = __atomic_load_n(&n_shapes, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++) {
    const Shape *s = &shapes[i];
    if (s->threads == threads && s->ta == ta && s->tb == tb && s->M == M && s->N == N && s->K == K)
      return i;
  }
  return -1;
}

/* Appends under `lock`. A decided entry stays; a shape still being timed takes the file's
 * decision (another process of this machine finished first), and the file's first line for a
 * shape wins over later ones. */
static int add(const Shape *s)
{
  int i = find(s->threads, s->ta, s->tb, s->M, s->N, s->K);
  if (i >= 0 && !shapes[i].decided && s->decided) {
    shapes[i].path = s->path;
    shapes[i].gflops[0] = s->gflops[0], shapes[i].gflops[1] = s->gflops[1];
    __atomic_store_n(&shapes[i].decided, 1, __ATOMIC_RELEASE);
  }
  if (i >= 0 || n_shapes >= MAX_SHAPES)
    return i;
  shapes[n_shapes] = *s;
  __atomic_store_n(&n_shapes, n_shapes + 1, __ATOMIC_RELEASE);
  return n_shapes - 1;
}

static const char *const op_names[] = {"NN", "NT", "TN", "TT"};

/* Reads every complete, well-formed line of the file; anything else (a line cut short by a
 * crash, an edit, another version's format) is skipped, and measured again when needed. */
static void read_lines(int fd)
{
  FILE *f = fdopen(dup(fd), "r");
  if (!f)
    return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || !strchr(line, '\n'))
      continue;
    Shape s = {0};
    char op[4], lib[16];
    int used = 0;
    if (sscanf(line, "%d %3s %d %d %d %15s %f %f %n", &s.threads, op, &s.M, &s.N, &s.K, lib,
               &s.gflops[0], &s.gflops[1], &used) != 8 ||
        line[used] != '\0' || s.threads < 1 || s.M < 1 || s.N < 1 || s.K < 1)
      continue;
    int o = 0;
    while (o < 4 && strcmp(op, op_names[o]) != 0)
      o++;
    if (o == 4)
      continue;
    s.ta = o >> 1, s.tb = o & 1;
    if (strcmp(lib, "openblas") == 0)
      s.path = COHORT_CPU_GEMM_OPENBLAS;
    else if (strcmp(lib, "onednn") == 0)
      s.path = COHORT_CPU_GEMM_ONEDNN;
    else
      continue;
    s.decided = 1;
    add(&s);
  }
  fclose(f);
}

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void warn_once(const char *what)
{
  if (!warned) {
    warned = 1;
    fprintf(stderr,
            "cohort: %s %s: %s; measured matrix-product choices are kept for this run only\n", what,
            cache_path, strerror(errno));
  }
}

/* Under `lock`: the file opened, locked and read (its decisions enter the table), or -1 when
 * there is none. Closing the descriptor releases the file's lock. */
static int open_locked(void)
{
  ensure_path();
  if (!cache_path[0])
    return -1;
  int fd = open(cache_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    warn_once("cannot open");
    return -1;
  }
  if (flock(fd, LOCK_EX) != 0) {
    warn_once("cannot lock");
    close(fd);
    return -1;
  }
  read_lines(fd);
  return fd;
}

/* Under `lock`, once each library has been timed TRIALS times on the shape: the faster one,
 * unless another process of this machine has written the shape's line meanwhile, in which case
 * that line decides (so the ranks of one machine agree). Within 3 % the difference is noise and
 * auto's choice stays. */
static void decide(Shape *s)
{
  int fd = open_locked();
  if (!s->decided) {
    double flops = 2.0 * s->M * s->N * s->K;
    for (int lib = 0; lib < 2; lib++)
      s->gflops[lib] = (float)(flops / s->best[lib] / 1e9);
    if (s->gflops[1] > 1.03f * s->gflops[0])
      s->path = COHORT_CPU_GEMM_ONEDNN;
    else if (s->gflops[0] > 1.03f * s->gflops[1])
      s->path = COHORT_CPU_GEMM_OPENBLAS;
    else
      s->path = cohort_cpu_gemm_default_fp32_path();
    __atomic_store_n(&s->decided, 1, __ATOMIC_RELEASE);
    n_measured_now++;
    char line[160];
    int len = snprintf(line, sizeof line, "%d %s %d %d %d %s %.1f %.1f\n", s->threads,
                       op_names[s->ta * 2 + s->tb], s->M, s->N, s->K,
                       s->path == COHORT_CPU_GEMM_ONEDNN ? "onednn" : "openblas", s->gflops[0],
                       s->gflops[1]);
    struct stat st;
    /* One write of a whole line (a header first in an empty file): a crash can cut only this
     * line, which the reader skips. */
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0) {
      static const char head[] =
          "# Cohort's fp32 matrix products timed on this CPU in training (cpu_matmul "
          "\"measure\"): threads, op, M, N, K, the faster library, GFLOP/s of OpenBLAS and of "
          "oneDNN\n";
      if (write(fd, head, sizeof head - 1) < 0)
        warn_once("cannot write");
    }
    if (fd >= 0 && write(fd, line, (size_t)len) != len)
      warn_once("cannot write");
  }
  if (fd >= 0)
    close(fd);
}

void cohort_cpu_gemm_measured(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                              int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
  int threads = omp_get_max_threads();
  int i = find(threads, ta, tb, M, N, K);
  if (i >= 0 && shapes[i].used && __atomic_load_n(&shapes[i].decided, __ATOMIC_ACQUIRE)) {
    cohort_cpu_gemm_run(shapes[i].path, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  pthread_mutex_lock(&lock);
  i = find(threads, ta, tb, M, N, K);
  if (i < 0) { /* first met: the file may know it */
    int fd = open_locked();
    if (fd >= 0)
      close(fd);
    i = find(threads, ta, tb, M, N, K);
  }
  if (i < 0) {
    Shape s = {
        .threads = threads, .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .best = {1e30, 1e30}};
    i = add(&s);
  }
  if (i < 0) { /* the table is full */
    pthread_mutex_unlock(&lock);
    cohort_cpu_gemm_run(cohort_cpu_gemm_default_fp32_path(), ta, tb, M, N, K, alpha, A, lda, B, ldb,
                        beta, C, ldc);
    return;
  }
  Shape *s = &shapes[i];
  s->used = 1;
  if (s->decided) {
    CohortCpuGemmPath path = s->path;
    pthread_mutex_unlock(&lock);
    cohort_cpu_gemm_run(path, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  /* Still timing: the libraries take turns on the run's own products, OpenBLAS first, so each
   * is timed with the caches as training leaves them (alone, on one operand again and again,
   * the two rank differently: docs/benchmarks.md). */
  int lib = s->trials[0] <= s->trials[1] ? 0 : 1;
  pthread_mutex_unlock(&lock);
  double t0 = now_s();
  cohort_cpu_gemm_run(lib ? COHORT_CPU_GEMM_ONEDNN : COHORT_CPU_GEMM_OPENBLAS, ta, tb, M, N, K,
                      alpha, A, lda, B, ldb, beta, C, ldc);
  double dt = now_s() - t0;
  pthread_mutex_lock(&lock);
  if (!s->decided) {
    s->trials[lib]++;
    if (dt < s->best[lib])
      s->best[lib] = dt;
    if (s->trials[0] >= TRIALS && s->trials[1] >= TRIALS)
      decide(s);
  }
  pthread_mutex_unlock(&lock);
}

void cohort_cpu_gemm_measure_counts(int *shapes_used, int *on_onednn, int *still_timing,
                                    int *measured_now)
{
  pthread_mutex_lock(&lock);
  int used = 0, dnnl = 0, timing = 0;
  for (int i = 0; i < n_shapes; i++) {
    used += shapes[i].used;
    dnnl += shapes[i].used && shapes[i].decided && shapes[i].path == COHORT_CPU_GEMM_ONEDNN;
    timing += shapes[i].used && !shapes[i].decided;
  }
  *shapes_used = used;
  *still_timing = timing;
  *on_onednn = dnnl;
  *measured_now = n_measured_now;
  pthread_mutex_unlock(&lock);
}

void cohort_cpu_gemm_measure_forget(void)
{
  pthread_mutex_lock(&lock);
  __atomic_store_n(&n_shapes, 0, __ATOMIC_RELEASE);
  n_measured_now = 0;
  path_ready = 0;
  cache_path[0] = '\0';
  warned = 0;
  pthread_mutex_unlock(&lock);
}
