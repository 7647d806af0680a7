/* Times optimizer steps (forward + backward + AdamW) of the GPT model on random tokens and
 * prints tokens/s from the median step time. Defaults are the tiny-gpt preset's shape and batch. */
#include "engine/models/gpt.h"
#include "kernels/cpu/threading.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm-paths.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp_double(const void *a, const void *b);

/* CPU time of the whole process (all its threads), in seconds. */
static double cpu_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double median(double *v, int n)
{
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
  /* The engine's programs run with these thread-pool settings; so does the benchmark. */
  cohort_cpu_threading_env(argv);
  int threads = 1, steps = 10, warmup = 2, batch = 16;
  g_autofree char *precision = NULL, *matmul = NULL;
  CohortGptShape shape = {
      .n_layer = 4, .n_head = 4, .n_embd = 256, .seq_len = 128, .vocab_size = 256};
  GOptionEntry entries[] = {
      {"threads", 0, 0, G_OPTION_ARG_INT, &threads, "Threads (OpenMP and OpenBLAS)", "N"},
      {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "Timed steps", "N"},
      {"warmup", 0, 0, G_OPTION_ARG_INT, &warmup, "Untimed steps first", "N"},
      {"batch", 0, 0, G_OPTION_ARG_INT, &batch, "Sequences per step", "B"},
      {"precision", 0, 0, G_OPTION_ARG_STRING, &precision,
       "GEMM mode: fp32 (default), bf16 or fp16 (the CPU backend's, no loss scaling)", "P"},
      {"cpu-matmul", 0, 0, G_OPTION_ARG_STRING, &matmul,
       "fp32 library as the key cpu_matmul names it: auto (default), openblas, onednn or measure",
       "LIB"},
      {"n-layer", 0, 0, G_OPTION_ARG_INT, &shape.n_layer, "Layers", "L"},
      {"n-head", 0, 0, G_OPTION_ARG_INT, &shape.n_head, "Heads", "H"},
      {"n-embd", 0, 0, G_OPTION_ARG_INT, &shape.n_embd, "Width", "C"},
      {"seq-len", 0, 0, G_OPTION_ARG_INT, &shape.seq_len, "Sequence length", "T"},
      {"vocab-size", 0, 0, G_OPTION_ARG_INT, &shape.vocab_size, "Vocabulary", "V"},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- time GPT training steps on the CPU");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
    fprintf(stderr, "bench-cpu-gpt: %s\n", error->message);
    return 2;
  }
  if (threads < 1 || steps < 1 || warmup < 0 || batch < 1) {
    fprintf(stderr, "bench-cpu-gpt: --threads, --steps and --batch must be >= 1, --warmup "
                    ">= 0\n");
    return 2;
  }
  static const char *const modes[] = {"fp32", "tf32", "bf16", "fp16"};
  int mode = -1;
  for (int i = 0; i < 4; i++)
    if (g_strcmp0(precision ? precision : "fp32", modes[i]) == 0 && i != COHORT_GEMM_TF32)
      mode = i;
  if (mode < 0) {
    fprintf(stderr, "bench-cpu-gpt: --precision '%s': allowed are fp32, bf16, fp16\n", precision);
    return 2;
  }
  if (matmul && g_strcmp0(matmul, "auto") != 0 && !cohort_cpu_gemm_force(matmul)) {
    fprintf(stderr,
            "bench-cpu-gpt: --cpu-matmul '%s' cannot run here; allowed: auto, openblas, "
            "onednn, measure (the last two with oneDNN)\n",
            matmul);
    return 2;
  }
  const CohortBackend *be = cohort_backend_cpu();
  be->set_threads(threads);
  be->set_gemm_mode(mode);

  g_autoptr(CohortGpt) gpt = cohort_gpt_new(&shape, batch, &error);
  if (!gpt) {
    fprintf(stderr, "bench-cpu-gpt: %s\n", error->message);
    return 1;
  }
  cohort_gpt_init_weights(gpt, 1);
  size_t n = cohort_gpt_num_params(gpt);
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(n);
  guint n_t;
  const CohortTensorInfo *tensors = cohort_gpt_tensors(gpt, &n_t);

  int T = shape.seq_len;
  int *tokens = g_new(int, (size_t)batch *T + 1);
  GRand *rand = g_rand_new_with_seed(42);
  for (int i = 0; i < batch * T + 1; i++)
    tokens[i] = g_rand_int_range(rand, 0, shape.vocab_size);
  g_rand_free(rand);

  double *times = g_new(double, steps), *cpu = g_new(double, steps);
  float loss = 0.0f;
  for (int s = 0; s < warmup + steps; s++) {
    gint64 t0 = g_get_monotonic_time();
    double c0 = cpu_seconds();
    cohort_gpt_zero_grad(gpt);
    loss = cohort_gpt_forward(gpt, tokens, tokens + 1, batch, T);
    cohort_gpt_backward(gpt, 1.0f);
    cohort_adamw_step(opt, cohort_gpt_params(gpt), cohort_gpt_grads(gpt), tensors, n_t, 3e-4, 0.9,
                      0.95, 1e-8, 0.1, s + 1);
    if (s >= warmup) {
      times[s - warmup] = (g_get_monotonic_time() - t0) / 1e6;
      cpu[s - warmup] = cpu_seconds() - c0;
    }
  }
  /* the median step: other processes sharing the cores inflate some steps, not most; CPU
   * time per step is the steadier figure on a shared machine */
  double step = median(times, steps), cpu_step = median(cpu, steps);
  double tok_s = batch * T / step;
  printf("cohort: L%d H%d C%d T%d V%d B%d, %zu params, %d threads: %.1f ms/step, "
         "cpu %.1f ms/step, %.0f tokens/s, %.1f GFLOP/s, last loss %.4f; %s products: %s\n",
         shape.n_layer, shape.n_head, shape.n_embd, T, shape.vocab_size, batch, n, threads,
         1e3 * step, 1e3 * cpu_step, tok_s, tok_s * cohort_gpt_flops_per_token(gpt, T) / 1e9, loss,
         modes[mode], be->describe_gemm(mode));
  g_free(tokens);
  g_free(times);
  g_free(cpu);
  return 0;
}
