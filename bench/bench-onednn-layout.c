/* oneDNN's convolution primitives alone, on the 3×3 stride-1 layers of the ResNets, in the two
 * layouts Cohort could keep between layers: NHWC (its direct kernels read it in place) and the
 * blocked layout oneDNN picks when asked ("any", where it may choose Winograd). Prints, per
 * layer, the best-of-R milliseconds of forward, backward data and backward weights and the
 * kernel oneDNN chose: the measurements behind winograd_layout() in
 * kernels/cpu/convolution-onednn.c (docs/benchmarks.md). One thread, CPU clock.
 *
 *   OMP_NUM_THREADS=1 bench-onednn-layout [--reps R]
 */
#include <glib.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static dnnl_engine_t eng;
static dnnl_stream_t st;

static double cpu_now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check(dnnl_status_t s, const char *what)
{
  if (s != dnnl_success) {
    fprintf(stderr, "bench-onednn-layout: %s failed (%d)\n", what, (int)s);
    exit(1);
  }
}

static dnnl_memory_t alloc_like(const dnnl_memory_desc_t *md)
{
  dnnl_memory_t m;
  check(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE), "memory");
  void *p;
  dnnl_memory_get_data_handle(m, &p);
  memset(p, 0, dnnl_memory_desc_get_size(md));
  return m;
}

static double best(dnnl_primitive_t p, int n, const dnnl_exec_arg_t *a, int reps, const char **impl)
{
  const_dnnl_primitive_desc_t pd;
  dnnl_primitive_get_primitive_desc(p, &pd);
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl);
  double b = 1e30;
  for (int r = 0; r <= reps; r++) {
    double t = cpu_now();
    check(dnnl_primitive_execute(p, st, n, a), "execute");
    dnnl_stream_wait(st);
    t = cpu_now() - t;
    if (r > 0 && t < b)
      b = t;
  }
  return b * 1e3;
}

static dnnl_primitive_t make(const dnnl_convolution_desc_t *d, dnnl_primitive_desc_t hint,
                             dnnl_primitive_desc_t *pd_out)
{
  dnnl_primitive_desc_t pd;
  check(dnnl_primitive_desc_create(&pd, d, NULL, eng, hint), "primitive desc");
  dnnl_primitive_t p;
  check(dnnl_primitive_create(&p, pd), "primitive");
  if (pd_out)
    *pd_out = pd;
  else
    dnnl_primitive_desc_destroy(pd);
  return p;
}

/* One layer C → C, 3×3, stride 1, padding 1, at side H and batch B. */
static void layer(int B, int C, int H, int blocked, int reps)
{
  dnnl_dims_t act = {B, C, H, H}, wd = {C, C, 3, 3}, one = {1, 1}, pad = {1, 1};
  dnnl_memory_desc_t x, w, y;
  dnnl_format_tag_t tag = blocked ? dnnl_format_tag_any : dnnl_nhwc;
  check(dnnl_memory_desc_init_by_tag(&x, 4, act, dnnl_f32, tag), "md");
  check(dnnl_memory_desc_init_by_tag(&y, 4, act, dnnl_f32, tag), "md");
  check(dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_format_tag_any), "md");
  dnnl_convolution_desc_t fd, bd, wdsc;
  check(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_auto, &x,
                                           &w, NULL, &y, one, pad, pad),
        "forward desc");
  check(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_auto, &x, &w, &y, one, pad,
                                                 pad),
        "backward data desc");
  check(dnnl_convolution_backward_weights_desc_init(&wdsc, dnnl_convolution_auto, &x, &w, NULL, &y,
                                                    one, pad, pad),
        "backward weights desc");
  dnnl_primitive_desc_t fpd;
  dnnl_primitive_t f = make(&fd, NULL, &fpd), b = make(&bd, fpd, NULL), g = make(&wdsc, fpd, NULL);
  dnnl_memory_t mx = alloc_like(dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0));
  dnnl_memory_t mw = alloc_like(dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0));
  dnnl_memory_t my = alloc_like(dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0));
  const char *k1, *k2, *k3;
  dnnl_exec_arg_t fa[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}};
  dnnl_exec_arg_t ba[] = {{DNNL_ARG_DIFF_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_DST, my}};
  dnnl_exec_arg_t ga[] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_WEIGHTS, mw}, {DNNL_ARG_DIFF_DST, my}};
  double t1 = best(f, 3, fa, reps, &k1), t2 = best(b, 3, ba, reps, &k2);
  double t3 = best(g, 3, ga, reps, &k3);
  printf("%3d -> %3d %3dx%-3d batch %3d %-7s: %6.1f + %6.1f + %6.1f ms  (%s, %s, %s)\n", C, C, H, H,
         B, blocked ? "blocked" : "NHWC", t1, t2, t3, k1, k2, k3);
  dnnl_primitive_destroy(f), dnnl_primitive_destroy(b), dnnl_primitive_destroy(g);
  dnnl_primitive_desc_destroy(fpd);
  dnnl_memory_destroy(mx), dnnl_memory_destroy(mw), dnnl_memory_destroy(my);
}

int main(int argc, char **argv)
{
  int reps = 3;
  GOptionEntry entries[] = {
      {"reps", 0, 0, G_OPTION_ARG_INT, &reps, "Timed runs of each; the best counts (3)", "R"},
      {NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- oneDNN's 3x3 convolutions, two layouts");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || reps < 1) {
    fprintf(stderr, "bench-onednn-layout: %s\n", error ? error->message : "--reps must be >= 1");
    return 2;
  }
  check(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
  check(dnnl_stream_create(&st, eng, dnnl_stream_default_flags), "stream");
  /* ResNet-20's three stages at batch 128, resnet18's four at 224×224 and batch 16 */
  const int layers[][3] = {{128, 16, 32}, {128, 32, 16}, {128, 64, 8}, {16, 64, 56},
                           {16, 128, 28}, {16, 256, 14}, {16, 512, 7}};
  for (guint i = 0; i < G_N_ELEMENTS(layers); i++)
    for (int blocked = 0; blocked < 2; blocked++)
      layer(layers[i][0], layers[i][1], layers[i][2], blocked, reps);
  dnnl_stream_destroy(st);
  dnnl_engine_destroy(eng);
  return 0;
}
