/* The GEMM study: every matrix product a GPT training step makes (engine/gpt.c, forward and
 * both backward products of each linear layer and of the tied head), timed on each library
 * the CPU backend could use, at each thread count, and printed as Markdown tables.
 *
 * fp32: OpenBLAS cblas_sgemm; oneDNN's matmul primitive (cached, as the backend caches the bf16
 * ones); oneDNN's dnnl_sgemm (the backend's oneDNN fp32 path); BLIS bli_sgemm (where the build
 * found BLIS). bf16: the emulation
 * (operands rounded to bf16 in fp32, then OpenBLAS), and oneDNN's bf16 matmul with fp32
 * accumulation, timed with the conversion of the operands to bf16 (what the backend does per
 * call) and without it (the kernel alone).
 *
 * Timing: each measurement is `--reps` repetitions of enough calls to take `--min-ms`; the
 * figure is the best repetition, with the spread (median / best - 1). One thread: CPU time of
 * the calling thread (CLOCK_THREAD_CPUTIME_ID: the libraries run on the caller at one thread,
 * and time lost to other processes on a shared machine is not counted); more threads: wall
 * time. */
#include "cohort-build-config.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm-paths.h"
#include "kernels/cpu/threading.h"

#include <cblas.h>
#include <dlfcn.h>
#include <immintrin.h>
#include <glib.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if HAVE_BLIS
#include <blis.h>
#endif

typedef struct Gemm {
  const char *what; /* which product of the model */
  int ta, tb, M, N, K;
  float beta;
  int per_step; /* calls per training step */
} Gemm;

typedef enum Lib {
  LIB_OPENBLAS,
  LIB_ONEDNN,
  LIB_ONEDNN_SGEMM,
  LIB_BLIS,
  LIB_BF16_EMULATED,
  LIB_BF16_ONEDNN,
  LIB_BF16_KERNEL,
  N_LIBS
} Lib;

static const char *const lib_names[N_LIBS] = {
    "OpenBLAS",    "oneDNN matmul",           "oneDNN sgemm", "BLIS", "bf16 emulated (OpenBLAS)",
    "bf16 oneDNN", "bf16 oneDNN kernel only",
};

/* The products of one step of a GPT with L layers, width C, vocabulary V, N = B*T tokens: per
 * layer qkv, attention projection, MLP up and down (beta = 1 where the residual is folded in),
 * each with dx = dy W^T and dW += x^T dy in backward; and the tied head. */
static int model_gemms(Gemm *g, const char *model, int L, int C, int V, int N)
{
  static char names[64][64]; /* 15 per model, two models */
  static int used;
  struct {
    const char *layer;
    int in, out;
    float beta;
    int count;
  } lin[] = {
      {"qkv", C, 3 * C, 0.0f, L},
      {"attn proj", C, C, 1.0f, L},
      {"mlp up", C, 4 * C, 0.0f, L},
      {"mlp down", 4 * C, C, 1.0f, L},
  };
  int n = 0;
#define NAME(...) (snprintf(names[used % 64], sizeof names[0], __VA_ARGS__), names[used++ % 64])
  for (unsigned i = 0; i < G_N_ELEMENTS(lin); i++) {
    int in = lin[i].in, out = lin[i].out;
    g[n++] =
        (Gemm){NAME("%s %s fwd", model, lin[i].layer), 0, 0, N, out, in, lin[i].beta, lin[i].count};
    g[n++] = (Gemm){NAME("%s %s dx", model, lin[i].layer), 0, 1, N, in, out, 0.0f, lin[i].count};
    g[n++] = (Gemm){NAME("%s %s dW", model, lin[i].layer), 1, 0, in, out, N, 1.0f, lin[i].count};
  }
  g[n++] = (Gemm){NAME("%s head fwd", model), 0, 1, N, V, C, 0.0f, 1};
  g[n++] = (Gemm){NAME("%s head dx", model), 0, 0, N, C, V, 0.0f, 1};
  g[n++] = (Gemm){NAME("%s head dW", model), 1, 0, V, C, N, 1.0f, 1};
#undef NAME
  return n;
}

static double clock_s(clockid_t id)
{
  struct timespec ts;
  clock_gettime(id, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct Problem {
  const Gemm *g;
  float *A, *B, *C;
  uint16_t *hA, *hB; /* bf16 copies, for the kernel-only timing */
  int lda, ldb;
} Problem;

static void call(Lib lib, const Problem *p)
{
  const Gemm *g = p->g;
  switch (lib) {
  case LIB_OPENBLAS:
    cohort_cpu_gemm_run(COHORT_CPU_GEMM_OPENBLAS, g->ta, g->tb, g->M, g->N, g->K, 1.0f, p->A,
                        p->lda, p->B, p->ldb, g->beta, p->C, g->N);
    break;
  case LIB_ONEDNN_SGEMM:
    cohort_cpu_gemm_run(COHORT_CPU_GEMM_ONEDNN, g->ta, g->tb, g->M, g->N, g->K, 1.0f, p->A, p->lda,
                        p->B, p->ldb, g->beta, p->C, g->N);
    break;
#if COHORT_HAVE_ONEDNN
  case LIB_ONEDNN:
    cohort_onednn_gemm_f32(g->ta, g->tb, g->M, g->N, g->K, 1.0f, p->A, p->lda, p->B, p->ldb,
                           g->beta, p->C, g->N, NULL);
    break;
  case LIB_BF16_KERNEL:
    cohort_onednn_gemm_bf16(g->ta, g->tb, g->M, g->N, g->K, 1.0f, p->hA, p->lda, p->hB, p->ldb,
                            g->beta, p->C, g->N, NULL);
    break;
#endif
#if HAVE_BLIS
  case LIB_BLIS: {
    float one = 1.0f, beta = g->beta;
    bli_sgemm(g->ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              g->tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g->M, g->N, g->K, &one, p->A, p->lda, 1,
              p->B, p->ldb, 1, &beta, p->C, g->N, 1);
    break;
  }
#endif
  case LIB_BF16_EMULATED: {
    /* The CPU backend's bf16 mode before the hardware path: round, then OpenBLAS. */
    const CohortBackend *be = cohort_backend_cpu();
    CohortCpuGemmPath fp32 = cohort_cpu_gemm_fp32_path();
    int hw = cohort_cpu_gemm_bf16_hardware();
    cohort_cpu_gemm_select(COHORT_CPU_GEMM_OPENBLAS, 0);
    be->set_gemm_mode(COHORT_GEMM_BF16);
    be->gemm(g->ta, g->tb, g->M, g->N, g->K, 1.0f, p->A, p->lda, p->B, p->ldb, g->beta, p->C, g->N);
    be->set_gemm_mode(COHORT_GEMM_FP32);
    cohort_cpu_gemm_select(fp32, hw);
    break;
  }
  case LIB_BF16_ONEDNN:
    cohort_cpu_gemm_run(COHORT_CPU_GEMM_ONEDNN_BF16, g->ta, g->tb, g->M, g->N, g->K, 1.0f, p->A,
                        p->lda, p->B, p->ldb, g->beta, p->C, g->N);
    break;
  default:
    break;
  }
}

static int lib_available(Lib lib)
{
  switch (lib) {
  case LIB_OPENBLAS:
  case LIB_BF16_EMULATED:
    return 1;
  case LIB_ONEDNN:
  case LIB_ONEDNN_SGEMM:
    return cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN);
  case LIB_BF16_ONEDNN:
  case LIB_BF16_KERNEL:
    return cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16);
  case LIB_BLIS:
    return HAVE_BLIS;
  default:
    return 0;
  }
}

typedef struct Timing {
  double best, median; /* seconds per call */
} Timing;

static Timing time_lib(Lib lib, const Problem *p, int threads, int reps, double min_s)
{
  clockid_t clk = threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  double t0 = clock_s(clk);
  call(lib, p); /* warm-up: primitives, packing buffers, thread teams */
  double once = clock_s(clk) - t0;
  int calls = once >= min_s ? 1 : (int)(min_s / (once > 1e-6 ? once : 1e-6)) + 1;
  double *per = g_new(double, reps);
  for (int r = 0; r < reps; r++) {
    t0 = clock_s(clk);
    for (int c = 0; c < calls; c++)
      call(lib, p);
    per[r] = (clock_s(clk) - t0) / calls;
  }
  qsort(per, reps, sizeof(double), cmp_double);
  Timing t = {per[0], reps % 2 ? per[reps / 2] : 0.5 * (per[reps / 2 - 1] + per[reps / 2])};
  g_free(per);
  return t;
}

static float *random_floats(GRand *rng, size_t n)
{
  float *v = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    v[i] = (float)g_rand_double_range(rng, -1, 1);
  return v;
}

/* Largest |x - ref| / max|ref| over C: a check that every library computed the same product. */
static double rel_diff(const float *x, const float *ref, size_t n)
{
  double d = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)x[i] - ref[i]));
    m = fmax(m, fabs((double)ref[i]));
  }
  return m > 0 ? d / m : d;
}

static void set_threads(int t)
{
  cohort_backend_cpu()->set_threads(t);
#if HAVE_BLIS
  bli_thread_set_num_threads(t);
#endif
}

/* The core's own peak, measured: 24 independent chains of fused multiply-adds (enough to hide
 * the latency on two pipes), on one thread, by its CPU time. GFLOP/s of the tables read
 * against these, not against a data sheet. */
#if defined(__x86_64__) && defined(__GNUC__)
#define PEAK_CHAINS 24
__attribute__((target("avx512f"))) static double peak_fma(long iters)
{
  __m512 acc[PEAK_CHAINS], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (int i = 0; i < PEAK_CHAINS; i++)
    acc[i] = _mm512_set1_ps((float)i);
  double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (long k = 0; k < iters; k++)
#pragma GCC unroll 24
    for (int i = 0; i < PEAK_CHAINS; i++)
      acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  double t = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  float sink = 0;
  for (int i = 0; i < PEAK_CHAINS; i++)
    sink += _mm512_reduce_add_ps(acc[i]);
  return sink == 12345.0f ? 0 : iters * PEAK_CHAINS * 16 * 2 / t / 1e9;
}

/* The same with 8-float AVX2 FMAs, for cores without AVX-512 (Zen 3 and older). */
__attribute__((target("avx2,fma"))) static double peak_fma_avx2(long iters)
{
  __m256 acc[PEAK_CHAINS], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
  for (int i = 0; i < PEAK_CHAINS; i++)
    acc[i] = _mm256_set1_ps((float)i);
  double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (long k = 0; k < iters; k++)
#pragma GCC unroll 24
    for (int i = 0; i < PEAK_CHAINS; i++)
      acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  double t = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  float lanes[8], sink = 0;
  for (int i = 0; i < PEAK_CHAINS; i++) {
    _mm256_storeu_ps(lanes, acc[i]);
    for (int l = 0; l < 8; l++)
      sink += lanes[l];
  }
  return sink == 12345.0f ? 0 : iters * PEAK_CHAINS * 8 * 2 / t / 1e9;
}

/* vdpbf16ps: 16 lanes x 2 products x 2 FLOP per instruction. */
__attribute__((target("avx512f,avx512bf16"))) static double peak_dpbf16(long iters)
{
  __m512 acc[PEAK_CHAINS];
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3a83);
  for (int i = 0; i < PEAK_CHAINS; i++)
    acc[i] = _mm512_set1_ps((float)i);
  double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
  for (long k = 0; k < iters; k++)
#pragma GCC unroll 24
    for (int i = 0; i < PEAK_CHAINS; i++)
      acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  double t = clock_s(CLOCK_THREAD_CPUTIME_ID) - t0;
  float sink = 0;
  for (int i = 0; i < PEAK_CHAINS; i++)
    sink += _mm512_reduce_add_ps(acc[i]);
  return sink == 12345.0f ? 0 : iters * PEAK_CHAINS * 32 * 2 / t / 1e9;
}

static void print_peaks(void)
{
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
      printf("peak: neither AVX-512 nor AVX2 with FMA here, not measured\n");
      return;
    }
    double f8 = 0;
    for (int r = 0; r < 3; r++)
      f8 = fmax(f8, peak_fma_avx2(10000000));
    printf("measured peak of one core: fp32 FMA %.1f GFLOP/s (AVX2, no AVX-512; best of 3, "
           "thread CPU time)\n",
           f8);
    return;
  }
  double fma = 0, dp = 0;
  for (int r = 0; r < 3; r++) {
    fma = fmax(fma, peak_fma(5000000));
    if (__builtin_cpu_supports("avx512bf16"))
      dp = fmax(dp, peak_dpbf16(5000000));
  }
  printf("measured peak of one core: fp32 FMA %.1f GFLOP/s", fma);
  if (dp > 0)
    printf(", bf16 dot products (vdpbf16ps) %.1f GFLOP/s", dp);
  printf(" (best of 3, thread CPU time)\n");
}
#else
static void print_peaks(void)
{
  printf("peak: not measured on this architecture\n");
}
#endif

static void print_header(int argc, char **argv)
{
  printf("# GEMM study\n\ncommand:");
  for (int i = 0; i < argc; i++)
    printf(" %s", argv[i]);
  char host_cpu[128] = "?";
  int family = -1, model = -1;
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f) && (host_cpu[0] == '?' || family < 0 || model < 0)) {
    const char *value = strchr(line, ':');
    if (!value)
      continue;
    if (strncmp(line, "model name", 10) == 0) {
      g_strlcpy(host_cpu, value + 2, sizeof host_cpu);
      host_cpu[strcspn(host_cpu, "\n")] = 0;
    } else if (strncmp(line, "cpu family", 10) == 0) {
      family = atoi(value + 1);
    } else if (strncmp(line, "model\t", 6) == 0) {
      model = atoi(value + 1);
    }
  }
  if (f)
    fclose(f);
  double load[3] = {0};
  getloadavg(load, 3);
  g_autoptr(GDateTime) now = g_date_time_new_now_local();
  g_autofree char *date = g_date_time_format(now, "%F %R");
  Dl_info where = {0};
  dladdr((void *)cblas_sgemm, &where);
  const char *coretype = getenv("OPENBLAS_CORETYPE");
  printf("\n\n%s, %s (family %d, model %d; %ld cores online), load average %.2f %.2f %.2f\n", date,
         host_cpu, family, model, sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
  printf("OpenBLAS: %s, kernels %s (OPENBLAS_CORETYPE=%s), cblas_sgemm from %s\n",
         openblas_get_config(), openblas_get_corename(), coretype ? coretype : "unset",
         where.dli_fname ? where.dli_fname : "?");
#if COHORT_HAVE_ONEDNN
  printf("oneDNN: %s, ISA %s; bf16 hardware path: %s\n", cohort_onednn_version(),
         cohort_onednn_isa_name(),
         cohort_cpu_gemm_path_available(COHORT_CPU_GEMM_ONEDNN_BF16) ? "yes" : "no");
#else
  printf("oneDNN: not in this build\n");
#endif
#if HAVE_BLIS
  bli_init();
  printf("BLIS: %s, kernels %s\n", bli_info_get_version_str(),
         bli_arch_string(bli_arch_query_id()));
#else
  printf("BLIS: not in this build\n");
#endif
  print_peaks();
}

typedef struct Options {
  int reps, min_ms, gpt2_tokens;
  gboolean peak_only;
  char *threads, *models;
} Options;

/* The products to time: tiny-gpt (data/presets/tiny-gpt.json: L4 C256 V256, 16 x 128 tokens)
 * and GPT-2 124M (L12 C768 V50257, `gpt2_tokens` tokens). */
static int collect(Gemm *g, const Options *o)
{
  int n = 0;
  if (strstr(o->models, "tiny"))
    n += model_gemms(g + n, "tiny", 4, 256, 256, 16 * 128);
  if (strstr(o->models, "gpt2"))
    n += model_gemms(g + n, "gpt2", 12, 768, 50257, o->gpt2_tokens);
  return n;
}

static Problem make_problem(const Gemm *g, GRand *rng)
{
  Problem p = {.g = g};
  int a_rows = g->ta ? g->K : g->M, b_rows = g->tb ? g->N : g->K;
  p.lda = g->ta ? g->M : g->K;
  p.ldb = g->tb ? g->K : g->N;
  p.A = random_floats(rng, (size_t)a_rows * p.lda);
  p.B = random_floats(rng, (size_t)b_rows * p.ldb);
  p.C = random_floats(rng, (size_t)g->M * g->N);
  p.hA = g_new(uint16_t, (size_t)a_rows * p.lda);
  p.hB = g_new(uint16_t, (size_t)b_rows * p.ldb);
  cohort_backend_cpu()->to_bf16(p.hA, p.A, (size_t)a_rows * p.lda);
  cohort_backend_cpu()->to_bf16(p.hB, p.B, (size_t)b_rows * p.ldb);
  return p;
}

static void free_problem(Problem *p)
{
  g_free(p->A);
  g_free(p->B);
  g_free(p->C);
  g_free(p->hA);
  g_free(p->hB);
}

/* Each library once on the same C, against OpenBLAS's result: the largest relative
 * difference per library over all products, and oneDNN's implementation names. */
static void check(const Gemm *g, int n, GRand *rng)
{
  double worst[N_LIBS] = {0};
  printf("\n## Check and oneDNN implementations (1 call each)\n\n");
  for (int i = 0; i < n; i++) {
    Problem p = make_problem(&g[i], rng);
    size_t nc = (size_t)g[i].M * g[i].N;
    float *C0 = g_memdup2(p.C, nc * sizeof(float));
    float *ref = g_memdup2(p.C, nc * sizeof(float));
    float *keep = p.C;
    p.C = ref;
    call(LIB_OPENBLAS, &p);
    for (int lib = LIB_ONEDNN; lib < N_LIBS; lib++) {
      if (!lib_available(lib))
        continue;
      memcpy(keep, C0, nc * sizeof(float));
      p.C = keep;
      call(lib, &p);
      worst[lib] = fmax(worst[lib], rel_diff(keep, ref, nc));
    }
    const char *f32 = "-", *bf16 = "-";
#if COHORT_HAVE_ONEDNN
    if (lib_available(LIB_ONEDNN))
      cohort_onednn_gemm_f32(g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, 1.0f, p.A, p.lda, p.B, p.ldb,
                             g[i].beta, keep, g[i].N, &f32);
    if (lib_available(LIB_BF16_ONEDNN))
      cohort_onednn_gemm_bf16(g[i].ta, g[i].tb, g[i].M, g[i].N, g[i].K, 1.0f, p.hA, p.lda, p.hB,
                              p.ldb, g[i].beta, keep, g[i].N, &bf16);
#endif
    printf("- %s: oneDNN fp32 `%s`, bf16 `%s`\n", g[i].what, f32, bf16);
    p.C = keep;
    g_free(C0);
    g_free(ref);
    free_problem(&p);
  }
  printf("\nLargest difference from OpenBLAS, relative to the largest |C|:");
  for (int lib = LIB_ONEDNN; lib < N_LIBS; lib++)
    if (lib_available(lib))
      printf(" %s %.1e;", lib_names[lib], worst[lib]);
  printf("\n");
}

static void table(const Gemm *g, int n, int threads, const Options *o, GRand *rng)
{
  printf("\n## %d thread%s: GFLOP/s, best of %d (spread: median/best - 1), clock: %s\n\n", threads,
         threads == 1 ? "" : "s", o->reps, threads == 1 ? "thread CPU time" : "wall time");
  printf("| product | op | M x N x K | per step |");
  for (int lib = 0; lib < N_LIBS; lib++)
    if (lib_available(lib))
      printf(" %s |", lib_names[lib]);
  printf("\n| --- | --- | --- | --- |");
  for (int lib = 0; lib < N_LIBS; lib++)
    if (lib_available(lib))
      printf(" --- |");
  printf("\n");
  set_threads(threads);
  /* Per model: FLOPs of a step's products and each library's time for them. */
  double flops[2] = {0}, secs[2][N_LIBS] = {{0}};
  for (int i = 0; i < n; i++) {
    Problem p = make_problem(&g[i], rng);
    double f = 2.0 * g[i].M * g[i].N * g[i].K;
    int model = strncmp(g[i].what, "tiny", 4) != 0;
    flops[model] += f * g[i].per_step;
    printf("| %s | %s%s | %d x %d x %d | %d |", g[i].what, g[i].ta ? "T" : "N", g[i].tb ? "T" : "N",
           g[i].M, g[i].N, g[i].K, g[i].per_step);
    for (int lib = 0; lib < N_LIBS; lib++) {
      if (!lib_available(lib))
        continue;
      Timing t = time_lib(lib, &p, threads, o->reps, o->min_ms / 1000.0);
      secs[model][lib] += t.best * g[i].per_step;
      printf(" %.1f (%.0f%%) |", f / t.best / 1e9, 100 * (t.median / t.best - 1));
      fflush(stdout);
    }
    printf("\n");
    free_problem(&p);
  }
  for (int model = 0; model < 2; model++) {
    if (flops[model] == 0)
      continue;
    printf("| **%s step, all products** | | %.2f GFLOP | |", model ? "gpt2" : "tiny",
           flops[model] / 1e9);
    for (int lib = 0; lib < N_LIBS; lib++)
      if (lib_available(lib))
        printf(" **%.1f** (%.1f ms) |", flops[model] / secs[model][lib] / 1e9,
               secs[model][lib] * 1e3);
    printf("\n");
  }
}

int main(int argc, char **argv)
{
  /* The thread-pool settings every Cohort program runs with (kernels/cpu/threading.h). */
  cohort_cpu_threading_env(argv);
  int orig_argc = argc;
  char **orig_argv = g_strdupv(argv);
  Options o = {.reps = 5, .min_ms = 50, .gpt2_tokens = 1024};
  GOptionEntry entries[] = {
      {"threads", 0, 0, G_OPTION_ARG_STRING, &o.threads, "Thread counts (default 1,2)", "LIST"},
      {"models", 0, 0, G_OPTION_ARG_STRING, &o.models, "tiny, gpt2 or both (default tiny,gpt2)",
       "LIST"},
      {"gpt2-tokens", 0, 0, G_OPTION_ARG_INT, &o.gpt2_tokens, "Tokens per GPT-2 step (1024)", "N"},
      {"reps", 0, 0, G_OPTION_ARG_INT, &o.reps, "Repetitions per measurement (5)", "N"},
      {"min-ms", 0, 0, G_OPTION_ARG_INT, &o.min_ms, "Least time per repetition (50)", "MS"},
      {"peak-only", 0, 0, G_OPTION_ARG_NONE, &o.peak_only,
       "Print the machine and the measured peak of one core, time no product", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- time the model's GEMMs per library");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
    fprintf(stderr, "bench-gemm: %s\n", error->message);
    return 2;
  }
  if (!o.threads)
    o.threads = g_strdup("1,2");
  if (!o.models)
    o.models = g_strdup("tiny,gpt2");
  if (o.reps < 1 || o.min_ms < 0 || o.gpt2_tokens < 1 ||
      (!strstr(o.models, "tiny") && !strstr(o.models, "gpt2"))) {
    fprintf(stderr, "bench-gemm: --reps and --gpt2-tokens must be >= 1, --min-ms >= 0, "
                    "--models one or both of tiny, gpt2\n");
    return 2;
  }
  print_header(orig_argc, orig_argv);
  if (o.peak_only)
    return 0;
  Gemm g[32];
  int n = collect(g, &o);
  GRand *rng = g_rand_new_with_seed(1);
  set_threads(1);
  check(g, n, rng);
  g_auto(GStrv) counts = g_strsplit(o.threads, ",", -1);
  for (int i = 0; counts[i]; i++) {
    int t = atoi(counts[i]);
    if (t < 1) {
      fprintf(stderr, "bench-gemm: --threads: '%s' is not a thread count >= 1\n", counts[i]);
      return 2;
    }
    table(g, n, t, &o, rng);
  }
  g_rand_free(rng);
  g_strfreev(orig_argv);
  g_free(o.threads);
  g_free(o.models);
  return 0;
}
