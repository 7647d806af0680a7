/* Times the CPU backend's conv2d forward and backward on the convolutions of a CIFAR ResNet-20
 * and prints GFLOP/s beside OpenBLAS's sgemm on one large square product (the peak the convs
 * could reach, since they are GEMMs plus im2col), and per shape the forward's GEMMs alone
 * ("GEMM GF/s": the convolution without its im2col). Each figure is the best of --reps runs: the
 * build machines are shared, and the best run is the one least disturbed. Before timing, each
 * shape's forward is checked against a direct convolution of the first image. */
#include "kernels/backend.h"
#include "kernels/cpu/threading.h"

#include <cblas.h>
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
  const char *name;
  int count; /* how many convolutions of this shape ResNet-20 has */
  int C_in, H, C_out, K, stride, pad;
} ConvCase;

/* ResNet-20 for CIFAR (He et al. 2016): a 3x3 stem, three stages of three basic blocks (two
 * 3x3 convs each) at 16, 32 and 64 channels; the first conv of stages 2 and 3 halves the size,
 * and option-B shortcuts are 1x1 stride-2 convs. */
static const ConvCase cases[] = {
    {"stem 3->16 32x32", 1, 3, 32, 16, 3, 1, 1},
    {"stage1 16->16 32x32", 6, 16, 32, 16, 3, 1, 1},
    {"stage2 16->32 s2 32->16", 1, 16, 32, 32, 3, 2, 1},
    {"stage2 32->32 16x16", 5, 32, 16, 32, 3, 1, 1},
    {"stage3 32->64 s2 16->8", 1, 32, 16, 64, 3, 2, 1},
    {"stage3 64->64 8x8", 5, 64, 8, 64, 3, 1, 1},
    {"shortcut 1x1 16->32 s2", 1, 16, 32, 32, 1, 2, 0},
    {"shortcut 1x1 32->64 s2", 1, 32, 16, 64, 1, 2, 0},
};

/* On one thread the clock is the process's CPU time, which the other jobs of a shared machine
 * do not inflate (they still share its caches); on more, wall time, which is what threads buy. */
static int use_cpu_clock;

static double now(void)
{
  struct timespec ts;
  clock_gettime(use_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fill(float *x, size_t n, guint32 seed)
{
  GRand *r = g_rand_new_with_seed(seed);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)g_rand_double_range(r, -1, 1);
  g_rand_free(r);
}

/* Direct convolution of image 0 in double; returns the largest error of `out`. */
static double check_image0(const ConvCase *c, const float *inp, const float *w, const float *out,
                           int Ho)
{
  double worst = 0.0;
  for (int co = 0; co < c->C_out; co++)
    for (int oh = 0; oh < Ho; oh++)
      for (int ow = 0; ow < Ho; ow++) {
        double s = 0.0;
        for (int ci = 0; ci < c->C_in; ci++)
          for (int kh = 0; kh < c->K; kh++)
            for (int kw = 0; kw < c->K; kw++) {
              int ih = oh * c->stride - c->pad + kh, iw = ow * c->stride - c->pad + kw;
              if (ih >= 0 && ih < c->H && iw >= 0 && iw < c->H)
                s += (double)inp[(ci * c->H + ih) * c->H + iw] *
                     w[((co * c->C_in + ci) * c->K + kh) * c->K + kw];
            }
        worst = fmax(worst, fabs(s - out[(co * Ho + oh) * Ho + ow]));
      }
  return worst;
}

/* Best time of `reps` runs of forward (which = 0) or backward (which = 1). */
static double best_time(const CohortBackend *be, int which, int reps, const ConvCase *c, int B,
                        float *out, const float *inp, const float *w, float *dinp, float *dw)
{
  double best = INFINITY;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    if (which == 0)
      be->conv2d_forward(out, inp, w, B, c->C_in, c->H, c->H, c->C_out, c->K, c->stride, c->pad);
    else
      be->conv2d_backward(dinp, dw, out, inp, w, B, c->C_in, c->H, c->H, c->C_out, c->K, c->stride,
                          c->pad);
    best = fmin(best, now() - t0);
  }
  return best;
}

/* Best time of `reps` runs of the forward's GEMMs alone (weight @ a column matrix, per image),
 * on a column matrix already built: what the convolution would cost without im2col. */
static double best_gemm_time(int reps, const ConvCase *c, int B, int howo, float *out,
                             const float *w)
{
  int ckk = c->C_in * c->K * c->K;
  float *col = g_new(float, (size_t)ckk *howo);
  fill(col, (size_t)ckk * howo, 9);
  double best = INFINITY;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    for (int b = 0; b < B; b++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->C_out, howo, ckk, 1.0f, w, ckk, col,
                  howo, 0.0f, out + (size_t)b * c->C_out * howo, howo);
    best = fmin(best, now() - t0);
  }
  g_free(col);
  return best;
}

static double sgemm_gflops(int n, int reps)
{
  float *a = g_new(float, (size_t)n *n), *b = g_new(float, (size_t)n *n);
  float *c = g_new0(float, (size_t)n *n);
  fill(a, (size_t)n * n, 1);
  fill(b, (size_t)n * n, 2);
  double best = INFINITY;
  for (int r = 0; r < reps + 1; r++) { /* one more: the first run warms the caches */
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    if (r > 0)
      best = fmin(best, now() - t0);
  }
  g_free(a), g_free(b), g_free(c);
  return 2.0 * n * n * (double)n / best / 1e9;
}

int main(int argc, char **argv)
{
  cohort_cpu_threading_env(argv);
  int threads = 1, reps = 5, batch = 128;
  GOptionEntry entries[] = {
      {"threads", 0, 0, G_OPTION_ARG_INT, &threads, "Threads (OpenMP and OpenBLAS)", "N"},
      {"reps", 0, 0, G_OPTION_ARG_INT, &reps, "Timed runs per figure (the best is kept)", "N"},
      {"batch", 0, 0, G_OPTION_ARG_INT, &batch, "Images per convolution", "B"},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  GOptionContext *ctx = g_option_context_new("- time conv2d on ResNet-20 shapes on the CPU");
  g_option_context_add_main_entries(ctx, entries, NULL);
  GError *error = NULL;
  gboolean ok = g_option_context_parse(ctx, &argc, &argv, &error);
  g_option_context_free(ctx);
  if (!ok) {
    fprintf(stderr, "bench-conv: %s\n", error->message);
    g_error_free(error);
    return 2;
  }
  if (threads < 1 || reps < 1 || batch < 1) {
    fprintf(stderr, "bench-conv: --threads, --reps and --batch must be >= 1\n");
    return 2;
  }
  const CohortBackend *be = cohort_backend_cpu();
  be->set_threads(threads);
  use_cpu_clock = threads == 1;
  printf("threads %d, batch %d, best of %d, %s\n", threads, batch, reps,
         use_cpu_clock ? "CPU time" : "wall time");
  printf("%-26s %9s %9s %9s %9s %9s\n", "conv", "fwd ms", "fwd GF/s", "bwd ms", "bwd GF/s",
         "GEMM GF/s");
  double total_fwd = 0, total_bwd = 0, total_flop = 0;
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    const ConvCase *c = &cases[i];
    int Ho = (c->H + 2 * c->pad - c->K) / c->stride + 1;
    size_t n_in = (size_t)batch * c->C_in * c->H * c->H;
    size_t n_out = (size_t)batch * c->C_out * Ho * Ho,
           n_w = (size_t)c->C_out * c->C_in * c->K * c->K;
    float *inp = g_new(float, n_in), *w = g_new(float, n_w), *out = g_new(float, n_out);
    float *dinp = g_new0(float, n_in), *dw = g_new0(float, n_w);
    fill(inp, n_in, 3 + i);
    fill(w, n_w, 4 + i);
    be->conv2d_forward(out, inp, w, batch, c->C_in, c->H, c->H, c->C_out, c->K, c->stride, c->pad);
    double err = check_image0(c, inp, w, out, Ho);
    if (err > 1e-4) {
      fprintf(stderr, "bench-conv: %s: forward differs from a direct convolution by %g\n", c->name,
              err);
      return 1;
    }
    double flop = 2.0 * batch * c->C_out * Ho * Ho * (double)c->C_in * c->K * c->K;
    double tf = best_time(be, 0, reps, c, batch, out, inp, w, dinp, dw);
    /* the stem's input gradient is not needed, as in a model */
    double tb = best_time(be, 1, reps, c, batch, out, inp, w, i == 0 ? NULL : dinp, dw);
    double tg = best_gemm_time(reps, c, batch, Ho * Ho, out, w);
    double bwd_flop = i == 0 ? flop : 2 * flop;
    printf("%-26s %9.2f %9.1f %9.2f %9.1f %9.1f\n", c->name, tf * 1e3, flop / tf / 1e9, tb * 1e3,
           bwd_flop / tb / 1e9, flop / tg / 1e9);
    total_fwd += c->count * tf;
    total_bwd += c->count * tb;
    total_flop += c->count * (flop + bwd_flop);
    g_free(inp), g_free(w), g_free(out), g_free(dinp), g_free(dw);
  }
  printf("ResNet-20 (option B) convs: forward %.1f ms, backward %.1f ms, %.1f GFLOP/s overall\n",
         total_fwd * 1e3, total_bwd * 1e3, total_flop / (total_fwd + total_bwd) / 1e9);
  printf("OpenBLAS sgemm 1024x1024x1024: %.1f GFLOP/s\n", sgemm_gflops(1024, reps));
  return 0;
}
