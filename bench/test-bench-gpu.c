/* The GPU benchmark's pipeline, checked without a GPU (suite bench): bench-gpu-gpt on the CPU
 * with a small shape — the parameter count, FLOPs per token, tokens/s, TFLOP/s and MFU it
 * prints are recomputed here from the shape and from each other; every precision runs; bad
 * options are one-line errors; --device cuda measures where a GPU is and exits 77 with one
 * line where none is. bench/run-gpu-bench --device cpu runs end to end and its summary agrees
 * with the result lines it printed.
 *
 * BENCH_GPU_GPT (the program), RUN_GPU_BENCH (the script) and BENCH_BUILD_ROOT (its --build)
 * come from bench/meson.build. */
#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The small shape: 2 layers, 2 heads, width 64, context 32, vocabulary 96, batch 2. */
enum { L = 2, H = 2, C = 64, T = 32, V = 96, B = 2 };

typedef struct {
  int status;
  char *out, *err;
} Run;

static void run_clear(Run *r)
{
  g_free(r->out);
  g_free(r->err);
}

/* Runs argv (NULL-terminated) and collects its exit status and output. */
static Run run_argv(const char *const *argv)
{
  Run r = {0};
  g_autoptr(GError) error = NULL;
  int wait_status = 0;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &r.out,
                             &r.err, &wait_status, &error));
  g_assert_no_error(error);
  g_assert_true(WIFEXITED(wait_status));
  r.status = WEXITSTATUS(wait_status);
  return r;
}

/* bench-gpu-gpt with the small shape and `extra` options (space-separated). */
static Run run_bench(const char *extra)
{
  g_autofree char *cmd = g_strdup_printf(
      "%s --n-layer %d --n-head %d --n-embd %d --seq-len %d --vocab-size %d --batch %d "
      "--steps 3 --warmup 1 %s",
      g_getenv("BENCH_GPU_GPT"), L, H, C, T, V, B, extra);
  g_auto(GStrv) argv = NULL;
  g_assert_true(g_shell_parse_argv(cmd, NULL, &argv, NULL));
  return run_argv((const char *const *)argv);
}

/* The number printed right before `unit` in `line` (e.g. unit " tokens/s"). */
static double figure_before(const char *line, const char *unit)
{
  const char *at = strstr(line, unit);
  g_assert_nonnull(at);
  const char *start = at;
  while (start > line && strchr("0123456789.e+-", start[-1]))
    start--;
  g_assert_true(start < at);
  g_autofree char *num = g_strndup(start, at - start);
  return g_ascii_strtod(num, NULL);
}

static double figure_after(const char *line, const char *label)
{
  const char *at = strstr(line, label);
  g_assert_nonnull(at);
  return g_ascii_strtod(at + strlen(label), NULL);
}

static void assert_rel(double got, double want, double rel)
{
  if (fabs(got - want) > rel * fabs(want))
    g_error("%g is not within %g%% of %g", got, 100 * rel, want);
}

static void assert_abs(double got, double want, double tol)
{
  if (fabs(got - want) > tol)
    g_error("%g is not within %g of %g", got, tol, want);
}

static double expected_params(void)
{
  return (double)V * C + (double)T * C + L * (12.0 * C * C + 13.0 * C) + 2.0 * C;
}

static void test_cpu_figures(void)
{
  Run r = run_bench("--device cpu --precision fp32 --peak-tflops 0.5");
  g_assert_cmpint(r.status, ==, 0);
  g_assert_true(g_str_has_prefix(r.out, "cohort: L2 H2 C64 T32 V96 B2, "));
  g_assert_nonnull(strstr(r.out, ", cpu, 1 thread, fp32: "));
  double n = figure_before(r.out, " params");
  g_assert_cmpfloat(n, ==, expected_params());
  /* 6N + 12LTC: weight products of forward and backward, and attention over T keys */
  double flops = 6.0 * n + 12.0 * L * T * C;
  double gflop_tok = figure_before(r.out, " GFLOP/token (6N+12LTC)");
  assert_rel(gflop_tok, flops / 1e9, 5e-4);
  double ms = figure_before(r.out, " ms/step"), tok_s = figure_before(r.out, " tokens/s");
  g_assert_cmpfloat(ms, >, 0);
  assert_rel(tok_s, B * T / (ms / 1e3), 0.02); /* ms is printed to 0.01 */
  double tflops = figure_before(r.out, " TFLOP/s,");
  assert_rel(tflops, tok_s * flops / 1e12, 2e-3);
  double mfu = figure_after(r.out, "MFU ");
  assert_abs(mfu, 100.0 * tflops / 0.5, 0.06); /* printed to 0.1 */
  g_assert_nonnull(strstr(r.out, "% of 0.5 TFLOP/s (given)"));
  /* random tokens over V: the loss starts near ln V and stays finite */
  double loss = figure_after(r.out, "last loss ");
  g_assert_cmpfloat(fabs(loss - log(V)), <, 0.5);
  run_clear(&r);

  r = run_bench("--device cpu");
  g_assert_cmpint(r.status, ==, 0);
  g_assert_nonnull(strstr(r.out, ", bf16: ")); /* the default precision */
  g_assert_nonnull(strstr(r.out, "MFU n/a (no peak for a CPU; give --peak-tflops)"));
  run_clear(&r);
}

/* --model llama at Qwen3's switches (per-head q/k norms, tied head), shrunk by the same
 * options: 2 query heads over 1 key/value head of 16, MLP 96. */
enum { KV = 1, HD = 16, I = 96 };

static double expected_llama_params(void)
{
  double block = 2.0 * C + (double)C * H * HD + 2.0 * C * KV * HD + (double)H * HD * C +
                 3.0 * C * I + 2.0 * HD;
  return (double)V * C + L * block + C;
}

static void test_llama_figures(void)
{
  Run r = run_bench("--device cpu --precision fp32 --peak-tflops 0.5 --model llama --shape "
                    "qwen3-0.6b --kv-heads 1 --head-dim 16 --intermediate 96");
  g_assert_cmpint(r.status, ==, 0);
  g_assert_true(g_str_has_prefix(r.out, "cohort: qwen3-0.6b L2 H2/1 D16 C64 I96 T32 V96 B2, "));
  double n = figure_before(r.out, " params");
  g_assert_cmpfloat(n, ==, expected_llama_params());
  /* the attention products over heads × head size (32 here), not the width */
  double flops = 6.0 * n + 12.0 * L * T * (H * HD);
  assert_rel(figure_before(r.out, " GFLOP/token (6N+12LTC)"), flops / 1e9, 5e-4);
  double loss = figure_after(r.out, "last loss ");
  g_assert_cmpfloat(fabs(loss - log(V)), <, 0.5);
  run_clear(&r);
}

static void test_precisions(void)
{
  const char *names[] = {"fp32", "tf32", "bf16", "fp16"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autofree char *opts = g_strdup_printf("--device cpu --precision %s", names[i]);
    Run r = run_bench(opts);
    g_assert_cmpint(r.status, ==, 0);
    g_autofree char *label = g_strdup_printf(", %s: ", names[i]);
    g_assert_nonnull(strstr(r.out, label));
    run_clear(&r);
  }
}

static void test_bad_options(void)
{
  struct {
    const char *opts, *says;
    int status;
  } cases[] = {
      {"--device tpu", "--device is 'tpu'; allowed: cpu, cuda", 2},
      {"--device cpu --precision bf8", "--precision is 'bf8'; allowed: fp32, tf32, bf16, fp16", 2},
      {"--device cpu --steps 0", "--steps and --batch must be >= 1", 2},
      {"--device cpu --peak-tflops -2", "--peak-tflops is -2; allowed: a finite number >= 0", 2},
      {"--device cpu --clip nan", "--clip is nan; allowed: a finite number >= 0", 2},
      {"--device cpu stray", "unexpected argument 'stray'", 2},
      {"--device cpu --n-head 3", "n_embd 64 is not a multiple of n_head 3", 1},
      {"--device cpu --model bert", "--model is 'bert'; allowed: gpt, llama", 2},
      {"--device cpu --model llama --shape x", "allowed: smollm2-135m, qwen3-0.6b, llama-3.2-1b",
       2},
      {"--device cpu --shape qwen3-0.6b", "are options of --model llama", 2},
      {"--device cpu --model llama --n-head 4", "does not divide num_attention_heads 4", 2},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    Run r = run_bench(cases[i].opts);
    g_assert_cmpint(r.status, ==, cases[i].status);
    g_assert_cmpstr(r.out, ==, "");
    g_assert_nonnull(strstr(r.err, cases[i].says));
    g_assert_true(g_str_has_prefix(r.err, "bench-gpu-gpt: "));
    g_assert_nonnull(strchr(r.err, '\n'));
    g_assert_cmpstr(strchr(r.err, '\n') + 1, ==, ""); /* one line */
    run_clear(&r);
  }
}

static void test_cuda(void)
{
  Run r = run_bench("--device cuda --precision bf16");
  if (r.status == 77) {
    /* no GPU: one line that says why, nothing else */
    g_assert_true(g_str_has_prefix(r.out, "no CUDA device: "));
    g_assert_cmpstr(strchr(r.out, '\n') + 1, ==, "");
    g_test_message("%s", r.out);
  } else {
    g_assert_cmpint(r.status, ==, 0);
    g_assert_nonnull(strstr(r.out, ", cuda:0 ("));
    g_assert_nonnull(strstr(r.out, "GFLOP/token (6N+12LTC)"));
    g_assert_nonnull(strstr(r.out, "device memory in use after the run"));
  }
  run_clear(&r);
}

/* The line of `out` that starts with `prefix`, or NULL. */
static char *line_starting(const char *out, const char *prefix)
{
  g_auto(GStrv) lines = g_strsplit(out, "\n", -1);
  for (guint i = 0; lines[i]; i++)
    if (g_str_has_prefix(lines[i], prefix))
      return g_strdup(lines[i]);
  return NULL;
}

static void test_script_cpu(void)
{
  const char *argv[] = {"sh",
                        g_getenv("RUN_GPU_BENCH"),
                        "--build",
                        g_getenv("BENCH_BUILD_ROOT"),
                        "--device",
                        "cpu",
                        "--shape",
                        "tiny",
                        "--batch",
                        "2",
                        "--reps",
                        "1",
                        "--steps",
                        "1",
                        "--warmup",
                        "0",
                        "--peak-tflops",
                        "2",
                        NULL};
  Run r = run_argv(argv);
  g_test_message("%s%s", r.out, r.err);
  g_assert_cmpint(r.status, ==, 0);
  g_autofree char *result = line_starting(r.out, "cohort: L4 H4 C256 T128 V256 B2, ");
  g_autofree char *summary = line_starting(r.out, "Cohort:  median ");
  g_assert_nonnull(result);
  g_assert_nonnull(summary);
  /* one rep: the median is that run's figure */
  g_assert_cmpfloat(figure_after(summary, "Cohort:  median "), ==,
                    figure_before(result, " tokens/s"));
  g_assert_cmpfloat(figure_after(summary, "MFU "), ==, figure_after(result, "MFU "));
  /* a 2-core CPU on this model is far below 40% of 2 TFLOP/s */
  g_assert_nonnull(strstr(r.out, "target >= 40% MFU: not met (Cohort "));
  g_autofree char *torch = line_starting(r.out, "torch: L4 H4 C256 T128 V256 B2, ");
  g_autofree char *ratio = line_starting(r.out, "ratio Cohort/PyTorch: ");
  g_assert_nonnull(ratio);
  if (torch) {
    /* PyTorch counted the same parameters and was given the same peak */
    g_assert_cmpfloat(figure_before(torch, " params"), ==, figure_before(result, " params"));
    g_assert_nonnull(strstr(torch, "% of 2 TFLOP/s (given)"));
    double want = figure_before(result, " tokens/s") / figure_before(torch, " tokens/s");
    assert_abs(figure_after(ratio, "ratio Cohort/PyTorch: "), want, 0.006); /* printed to 0.01 */
    g_assert_nonnull(line_starting(r.out, "target >= 1.0x PyTorch eager: "));
  } else {
    g_assert_nonnull(strstr(ratio, "not measured"));
    g_test_message("PyTorch not importable here: the script's comparison half is unchecked");
  }
  run_clear(&r);

  const char *bad[] = {"sh", g_getenv("RUN_GPU_BENCH"), "--device", "tpu", NULL};
  r = run_argv(bad);
  g_assert_cmpint(r.status, ==, 2);
  g_assert_nonnull(strstr(r.err, "--device is 'tpu'; allowed: cuda, cpu"));
  run_clear(&r);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  if (!g_getenv("BENCH_GPU_GPT") || !g_getenv("RUN_GPU_BENCH") || !g_getenv("BENCH_BUILD_ROOT")) {
    g_printerr("test-bench-gpu: run it through meson test (BENCH_GPU_GPT, RUN_GPU_BENCH and "
               "BENCH_BUILD_ROOT unset)\n");
    return 1;
  }
  g_test_add_func("/bench-gpu/cpu-figures", test_cpu_figures);
  g_test_add_func("/bench-gpu/llama-figures", test_llama_figures);
  g_test_add_func("/bench-gpu/precisions", test_precisions);
  g_test_add_func("/bench-gpu/bad-options", test_bad_options);
  g_test_add_func("/bench-gpu/cuda", test_cuda);
  g_test_add_func("/bench-gpu/script-cpu", test_script_cpu);
  return g_test_run();
}
