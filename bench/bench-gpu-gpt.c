/* Times optimizer steps of a decoder language model (the GPT family, or with --model llama the
 * Llama family at a named Hugging Face shape) on random tokens, on a GPU (CUDA backend) or on
 * the CPU, and reports tokens/s and model FLOPs utilisation (MFU). One step is what the trainer
 * does: zero grad, forward, backward, gradient clipping by global norm, AdamW, with the loss
 * read once per step from the model's loss log and, on a GPU, the weights' 16-bit copy made
 * once per step (engine/train/trainer.c's micro_batches and train_step). The default
 * shape and batch are the gpt2-124m preset's; bench/run-gpu-bench runs it beside PyTorch.
 *
 * Model FLOPs per token: 6*N + 12*L*T*C with N all parameters (PaLM, appendix B; nanoGPT's
 * estimate_mfu): 6 per parameter for the weight products of forward and backward, plus the
 * attention score and value products counted over the full T (not halved for causality); for
 * the Llama family C is the attention width, heads × head_dim. */
#include "cohort-build-config.h"
#include "engine/models/gpt.h"
#include "engine/models/llama.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "kernels/cpu/threading.h"
#if COHORT_HAVE_CUDA
#include "kernels/cuda/cuda-backend.h"
#endif

#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exit status for "nothing to measure here", as meson test and automake read it. */
#define EXIT_SKIP 77

static const char *const precision_names[] = {"fp32", "tf32", "bf16", "fp16"};
static const CohortGemmMode precision_modes[] = {COHORT_GEMM_FP32, COHORT_GEMM_TF32,
                                                 COHORT_GEMM_BF16, COHORT_GEMM_FP16};

/* Dense (no sparsity) peak TFLOP/s from NVIDIA's data sheets, per GEMM mode: fp32 is the
 * non-tensor-core rate, the others tensor cores with fp32 accumulation. */
typedef struct {
  const char *label;
  double peak[4]; /* indexed like precision_names */
} GpuPeaks;

#if COHORT_HAVE_CUDA
static const GpuPeaks h100_sxm = {"H100 SXM", {67, 495, 989, 989}};
static const GpuPeaks h200 = {"H200", {67, 495, 989, 989}};
static const GpuPeaks h100_pcie = {"H100 PCIe", {51, 378, 756, 756}};
static const GpuPeaks a100 = {"A100", {19.5, 156, 312, 312}};

/* The peaks of a GPU named as the CUDA runtime names it ("NVIDIA H100 80GB HBM3"), or NULL
 * when its peaks are not in the table. The H100 and H200 NVL boards run at lower clocks than
 * the SXM ones, so they are left unknown rather than guessed. */
static const GpuPeaks *peaks_for(const char *name)
{
  if (strstr(name, "NVL"))
    return NULL;
  if (strstr(name, "H200")) /* also GH200, whose GPU is rated like the H100 SXM */
    return &h200;
  if (strstr(name, "H100"))
    return strstr(name, "PCIe") ? &h100_pcie : &h100_sxm;
  if (strstr(name, "A100"))
    return &a100;
  return NULL;
}
#endif

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n)
{
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int parse_choice(const char *opt, const char *value, const char *const *names, int n)
{
  for (int i = 0; i < n; i++)
    if (g_strcmp0(value, names[i]) == 0)
      return i;
  g_autoptr(GString) allowed = g_string_new(NULL);
  for (int i = 0; i < n; i++)
    g_string_append_printf(allowed, "%s%s", i ? ", " : "", names[i]);
  fprintf(stderr, "bench-gpu-gpt: %s is '%s'; allowed: %s\n", opt, value, allowed->str);
  return -1;
}

/* Picks the backend for `device`, writes its description to *label (g_free it) and, on CUDA,
 * looks up the GPU's peaks. Returns the backend, or NULL with the exit status in *status. */
static const CohortBackend *open_device(int cuda, int threads, char **label, const GpuPeaks **peaks,
                                        int *status)
{
  *peaks = NULL;
  if (!cuda) {
    cohort_backend_cpu()->set_threads(threads);
    *label = g_strdup_printf("cpu, %d thread%s", threads, threads == 1 ? "" : "s");
    return cohort_backend_cpu();
  }
#if COHORT_HAVE_CUDA
  if (cohort_cuda_device_count() == 0) {
    const char *why = cohort_cuda_probe_error();
    printf("no CUDA device: %s\n", why ? why : "none found");
    *status = EXIT_SKIP;
    return NULL;
  }
  CohortCudaDeviceInfo info;
  if (cohort_cuda_set_device(0) != 0 || cohort_cuda_device_info(0, &info) != 0) {
    fprintf(stderr, "bench-gpu-gpt: CUDA device 0 cannot be used: %s\n", cohort_cuda_last_error());
    *status = 1;
    return NULL;
  }
  *label = g_strdup_printf("cuda:0 (%s)", info.name);
  *peaks = peaks_for(info.name);
  return cohort_backend_cuda();
#else
  (void)label;
  printf("no CUDA device: this build has no CUDA path (configure with -Dcuda=enabled where "
         "nvcc is installed)\n");
  *status = EXIT_SKIP;
  return NULL;
#endif
}

/* Waits for the device and reports a failure of any op so far; a no-op on the CPU. */
static gboolean device_ok(const CohortBackend *be, const char *when)
{
#if COHORT_HAVE_CUDA
  if (be == cohort_backend_cuda() && cohort_cuda_synchronize() != 0) {
    fprintf(stderr, "bench-gpu-gpt: CUDA failure %s: %s\n", when, cohort_cuda_last_error());
    return FALSE;
  }
#endif
  (void)be;
  (void)when;
  return TRUE;
}

/* Around the step's forward and backward, as the trainer (cohort_device_step_begin/end). */
static void weights_scope(const CohortBackend *be, CohortGpt *gpt, gboolean open)
{
#if COHORT_HAVE_CUDA
  if (be == cohort_backend_cuda() && open)
    cohort_cuda_weights_begin(cohort_gpt_params(gpt), cohort_gpt_num_params(gpt));
  else if (be == cohort_backend_cuda()) {
    cohort_cuda_weights_end();
    cohort_cuda_scratch_trim();
  }
#endif
  (void)be;
  (void)gpt;
  (void)open;
}

/* One line about the memory the device has in use (all processes), on CUDA only. */
static void print_device_memory(const CohortBackend *be)
{
#if COHORT_HAVE_CUDA
  size_t free_b = 0, total_b = 0;
  if (be == cohort_backend_cuda() && cohort_cuda_memory(&free_b, &total_b) == 0)
    printf("cohort: device memory in use after the run: %.1f GiB of %.1f GiB (whole GPU, all "
           "processes)\n",
           (double)(total_b - free_b) / (1 << 30), (double)total_b / (1 << 30));
#endif
  (void)be;
}

/* The numeric options in range; a message on stderr when not. */
static gboolean numbers_ok(int threads, int steps, int warmup, int batch, double peak_tflops,
                           double clip)
{
  if (threads < 1 || steps < 1 || warmup < 0 || batch < 1) {
    fprintf(stderr, "bench-gpu-gpt: --threads, --steps and --batch must be >= 1, --warmup "
                    ">= 0\n");
    return FALSE;
  }
  if (!(peak_tflops >= 0.0) || !isfinite(peak_tflops)) {
    fprintf(stderr, "bench-gpu-gpt: --peak-tflops is %g; allowed: a finite number >= 0\n",
            peak_tflops);
    return FALSE;
  }
  if (!(clip >= 0.0) || !isfinite(clip)) {
    fprintf(stderr, "bench-gpu-gpt: --clip is %g; allowed: a finite number >= 0\n", clip);
    return FALSE;
  }
  return TRUE;
}

/* What the result line says of the model: its shape in words, and the figures FLOPs per token
 * are computed from. */
typedef struct {
  char *label;  /* "L12 H12 C768 T1024 V50257" or "smollm2-135m L30 H9/3 C576 …" */
  int n_layer;  /* L */
  int T;        /* context */
  int attn_dim; /* C of 12·L·T·C: heads × head size */
  int vocab;    /* tokens are drawn below it */
} ModelFigures;

/* The result line: the median step (a step slowed by something else on the machine moves it
 * little), tokens/s, FLOP/s and MFU against the peak given or looked up. */
static void report(const ModelFigures *mf, int batch, size_t n, double *times, int steps,
                   float loss, gboolean cpu, const char *dev_label, int prec, const GpuPeaks *peaks,
                   double peak_tflops)
{
  const char *precision = precision_names[prec];
  double step = median(times, steps);
  double tok_s = (double)batch * mf->T / step;
  double flops_tok = 6.0 * (double)n + 12.0 * mf->n_layer * (double)mf->T * mf->attn_dim;
  double tflops = tok_s * flops_tok / 1e12;
  g_autofree char *mfu = NULL;
  if (peak_tflops > 0)
    mfu = g_strdup_printf("MFU %.1f%% of %g TFLOP/s (given)", 100.0 * tflops / peak_tflops,
                          peak_tflops);
  else if (peaks)
    mfu = g_strdup_printf("MFU %.1f%% of %g TFLOP/s (%s %s dense)",
                          100.0 * tflops / peaks->peak[prec], peaks->peak[prec], peaks->label,
                          precision);
  else if (cpu)
    mfu = g_strdup("MFU n/a (no peak for a CPU; give --peak-tflops)");
  else
    mfu = g_strdup_printf("MFU n/a (peak of %s not in the table; give --peak-tflops)", dev_label);
  printf("cohort: %s B%d, %zu params, %s, %s: %.2f ms/step, %.0f tokens/s, "
         "%.4g GFLOP/token (6N+12LTC), %.4g TFLOP/s, %s, last loss %.4f\n",
         mf->label, batch, n, dev_label, precision, 1e3 * step, tok_s, flops_tok / 1e9, tflops, mfu,
         loss);
}

/* Hugging Face shapes of the Llama family (their config.json), for --model llama --shape. */
typedef struct {
  const char *name;
  CohortLlamaShape shape;
} LlamaPreset;

static const LlamaPreset llama_presets[] = {
    {"smollm2-135m", /* HuggingFaceTB/SmolLM2-135M, LlamaForCausalLM */
     {.n_layer = 30,
      .hidden = 576,
      .intermediate = 1536,
      .n_head = 9,
      .n_kv_head = 3,
      .head_dim = 64,
      .vocab_size = 49152,
      .rms_eps = 1e-5,
      .rope = {.type = COHORT_ROPE_DEFAULT, .theta = 100000},
      .tied = TRUE}},
    {"qwen3-0.6b", /* Qwen/Qwen3-0.6B, Qwen3ForCausalLM */
     {.n_layer = 28,
      .hidden = 1024,
      .intermediate = 3072,
      .n_head = 16,
      .n_kv_head = 8,
      .head_dim = 128,
      .vocab_size = 151936,
      .rms_eps = 1e-6,
      .rope = {.type = COHORT_ROPE_DEFAULT, .theta = 1000000},
      .qk_norm = TRUE,
      .tied = TRUE}},
    {"llama-3.2-1b", /* meta-llama/Llama-3.2-1B, LlamaForCausalLM, rope_scaling llama3 */
     {.n_layer = 16,
      .hidden = 2048,
      .intermediate = 8192,
      .n_head = 32,
      .n_kv_head = 8,
      .head_dim = 64,
      .vocab_size = 128256,
      .rms_eps = 1e-5,
      .rope = {.type = COHORT_ROPE_LLAMA3,
               .theta = 500000,
               .factor = 32,
               .low_freq_factor = 1,
               .high_freq_factor = 4,
               .original_max_positions = 8192},
      .tied = TRUE}},
};

/* Shape options; 0 (or NULL) keeps the family's default or the named shape's value. */
typedef struct {
  char *model, *shape;
  int n_layer, n_head, n_kv_head, head_dim, n_embd, intermediate, seq_len, vocab_size;
} ShapeOptions;

/* The model the options ask for on `be` for `batch` sequences, initialised (seed 1), and what
 * the result line says of it; NULL with a message on stderr and *status set. */
static CohortModel *build_model(const ShapeOptions *o, const CohortBackend *be, int batch,
                                const char *dev_label, ModelFigures *mf, int *status)
{
  g_autoptr(GError) error = NULL;
  CohortModel *m = NULL;
  *status = 2;
  if (g_strcmp0(o->model, "gpt") == 0) {
    if (o->shape || o->n_kv_head || o->head_dim || o->intermediate) {
      fprintf(stderr, "bench-gpu-gpt: --shape, --kv-heads, --head-dim and --intermediate are "
                      "options of --model llama\n");
      return NULL;
    }
    CohortGptShape sh = {.n_layer = o->n_layer ? o->n_layer : 12,
                         .n_head = o->n_head ? o->n_head : 12,
                         .n_embd = o->n_embd ? o->n_embd : 768,
                         .seq_len = o->seq_len ? o->seq_len : 1024,
                         .vocab_size = o->vocab_size ? o->vocab_size : 50257};
    mf->label = g_strdup_printf("L%d H%d C%d T%d V%d", sh.n_layer, sh.n_head, sh.n_embd, sh.seq_len,
                                sh.vocab_size);
    *mf = (ModelFigures){mf->label, sh.n_layer, sh.seq_len, sh.n_embd, sh.vocab_size};
    if ((m = cohort_gpt_new_on(be, &sh, batch, &error)))
      cohort_gpt_init_weights(m, 1);
  } else if (g_strcmp0(o->model, "llama") == 0) {
    const char *name = o->shape ? o->shape : llama_presets[0].name;
    const LlamaPreset *p = NULL;
    g_autoptr(GString) names = g_string_new(NULL);
    for (guint i = 0; i < G_N_ELEMENTS(llama_presets); i++) {
      g_string_append_printf(names, "%s%s", i ? ", " : "", llama_presets[i].name);
      if (g_str_equal(name, llama_presets[i].name))
        p = &llama_presets[i];
    }
    if (!p) {
      fprintf(stderr, "bench-gpu-gpt: --shape is '%s'; allowed: %s\n", name, names->str);
      return NULL;
    }
    CohortLlamaShape sh = p->shape;
    sh.n_layer = o->n_layer ? o->n_layer : sh.n_layer;
    sh.n_head = o->n_head ? o->n_head : sh.n_head;
    sh.n_kv_head = o->n_kv_head ? o->n_kv_head : sh.n_kv_head;
    sh.head_dim = o->head_dim ? o->head_dim : sh.head_dim;
    sh.hidden = o->n_embd ? o->n_embd : sh.hidden;
    sh.intermediate = o->intermediate ? o->intermediate : sh.intermediate;
    sh.seq_len = o->seq_len ? o->seq_len : 1024;
    sh.vocab_size = o->vocab_size ? o->vocab_size : sh.vocab_size;
    if (!cohort_llama_check_shape(&sh, &error)) {
      fprintf(stderr, "bench-gpu-gpt: %s\n", error->message);
      return NULL;
    }
    mf->label = g_strdup_printf("%s L%d H%d/%d D%d C%d I%d T%d V%d", name, sh.n_layer, sh.n_head,
                                sh.n_kv_head, sh.head_dim, sh.hidden, sh.intermediate, sh.seq_len,
                                sh.vocab_size);
    *mf = (ModelFigures){mf->label, sh.n_layer, sh.seq_len, sh.n_head * sh.head_dim, sh.vocab_size};
    if ((m = cohort_llama_new_on(be, &sh, batch, &error)))
      cohort_model_init(m, 1);
  } else {
    fprintf(stderr, "bench-gpu-gpt: --model is '%s'; allowed: gpt, llama\n", o->model);
    return NULL;
  }
  if (!m) {
    fprintf(stderr, "bench-gpu-gpt: %s (%s, batch %d on %s)\n", error->message, mf->label, batch,
            dev_label);
    *status = 1;
  }
  return m;
}

/* One training step's forward of the model's family. */
static void forward(CohortModel *m, const int *tokens, int batch, int T)
{
  if (cohort_is_llama(m))
    cohort_llama_forward(m, tokens, tokens + 1, batch, T);
  else
    cohort_gpt_forward(m, tokens, tokens + 1, batch, T);
}

/* Times warmup + steps optimizer steps of `m` on random tokens and prints the result line;
 * the exit status. */
static int time_steps(CohortModel *m, const CohortBackend *be, const ModelFigures *mf, int batch,
                      int steps, int warmup, double clip, gboolean cpu, const char *dev_label,
                      int prec, const GpuPeaks *peaks, double peak_tflops)
{
  size_t n = m->n_params;
  g_autoptr(CohortAdamW) opt = cohort_adamw_new_on(be, n);
  if (!opt) {
    fprintf(stderr, "bench-gpu-gpt: out of memory for the AdamW moments (%zu parameters on %s)\n",
            n, dev_label);
    return 1;
  }
  if (!device_ok(be, "setting up the model"))
    return 1;
  guint n_t = m->n_tensors;
  const CohortTensorInfo *tensors = m->tensors;

  int T = mf->T;
  g_autofree int *tokens = g_new(int, (size_t)batch *T + 1);
  GRand *rand = g_rand_new_with_seed(42);
  for (int i = 0; i < batch * T + 1; i++)
    tokens[i] = g_rand_int_range(rand, 0, mf->vocab);
  g_rand_free(rand);

  g_autofree double *times = g_new(double, steps);
  float loss = 0.0f;
  for (int s = 0; s < warmup + steps; s++) {
    gint64 t0 = g_get_monotonic_time();
    cohort_model_zero_grad(m);
    weights_scope(be, m, TRUE);
    cohort_model_begin_losses(m);
    forward(m, tokens, batch, T);
    m->ops->backward(m, 1.0f);
    weights_scope(be, m, FALSE);
    double sum = NAN;
    guint logged = 0;
    cohort_model_take_losses(m, &sum, &logged);
    loss = (float)sum;
    cohort_clip_grad_norm_on(be, m->grads, n, clip);
    cohort_adamw_step(opt, m->params, m->grads, tensors, n_t, 3e-4, 0.9, 0.95, 1e-8, 0.1, s + 1);
    /* the clock is read only once the device has finished the step's queued work */
    g_autofree char *when = g_strdup_printf("in step %d", s + 1);
    if (!device_ok(be, when))
      return 1;
    if (s >= warmup)
      times[s - warmup] = (g_get_monotonic_time() - t0) / 1e6;
  }
  if (!isfinite(loss)) {
    fprintf(stderr,
            "bench-gpu-gpt: the loss is %g after %d steps at %s; the timing of a "
            "diverged run is not reported\n",
            loss, warmup + steps, precision_names[prec]);
    return 1;
  }

  report(mf, batch, n, times, steps, loss, cpu, dev_label, prec, peaks, peak_tflops);
  print_device_memory(be);
  return 0;
}

int main(int argc, char **argv)
{
  /* The engine's programs run with these thread-pool settings; so does the benchmark. */
  cohort_cpu_threading_env(argv);
  int threads = 1, steps = 10, warmup = 3, batch = 0;
  double peak_tflops = 0.0, clip = 1.0;
  g_autofree char *device = g_strdup("cuda"), *precision = g_strdup("bf16");
  ShapeOptions so = {.model = g_strdup("gpt")};
  GOptionEntry entries[] = {
      {"device", 0, 0, G_OPTION_ARG_STRING, &device, "cuda (GPU 0) or cpu", "DEV"},
      {"precision", 0, 0, G_OPTION_ARG_STRING, &precision, "GEMM mode: fp32, tf32, bf16, fp16",
       "P"},
      {"threads", 0, 0, G_OPTION_ARG_INT, &threads, "CPU threads (OpenMP and OpenBLAS)", "N"},
      {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "Timed steps", "N"},
      {"warmup", 0, 0, G_OPTION_ARG_INT, &warmup, "Untimed steps first", "N"},
      {"batch", 0, 0, G_OPTION_ARG_INT, &batch, "Sequences per step (gpt 16, llama 8)", "B"},
      {"model", 0, 0, G_OPTION_ARG_STRING, &so.model, "Family: gpt (GPT-2 124M) or llama", "F"},
      {"shape", 0, 0, G_OPTION_ARG_STRING, &so.shape,
       "llama: smollm2-135m (default), qwen3-0.6b or llama-3.2-1b", "NAME"},
      {"n-layer", 0, 0, G_OPTION_ARG_INT, &so.n_layer, "Layers", "L"},
      {"n-head", 0, 0, G_OPTION_ARG_INT, &so.n_head, "Heads", "H"},
      {"kv-heads", 0, 0, G_OPTION_ARG_INT, &so.n_kv_head, "llama: key/value heads", "N"},
      {"head-dim", 0, 0, G_OPTION_ARG_INT, &so.head_dim, "llama: head size", "D"},
      {"n-embd", 0, 0, G_OPTION_ARG_INT, &so.n_embd, "Width", "C"},
      {"intermediate", 0, 0, G_OPTION_ARG_INT, &so.intermediate, "llama: MLP width", "I"},
      {"seq-len", 0, 0, G_OPTION_ARG_INT, &so.seq_len, "Sequence length (1024)", "T"},
      {"vocab-size", 0, 0, G_OPTION_ARG_INT, &so.vocab_size, "Vocabulary", "V"},
      {"clip", 0, 0, G_OPTION_ARG_DOUBLE, &clip, "Gradient clipping max norm (0: measure only)",
       "X"},
      {"peak-tflops", 0, 0, G_OPTION_ARG_DOUBLE, &peak_tflops,
       "Peak TFLOP/s for MFU (default: looked up from the GPU's name)", "X"},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx =
      g_option_context_new("- time decoder training steps and report tokens/s and MFU");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
    fprintf(stderr, "bench-gpu-gpt: %s\n", error->message);
    return 2;
  }
  if (argc > 1) {
    fprintf(stderr, "bench-gpu-gpt: unexpected argument '%s'; allowed: options only (--help)\n",
            argv[1]);
    return 2;
  }
  if (batch == 0)
    batch = g_strcmp0(so.model, "llama") == 0 ? 8 : 16;
  if (so.n_layer < 0 || so.n_head < 0 || so.n_kv_head < 0 || so.head_dim < 0 || so.n_embd < 0 ||
      so.intermediate < 0 || so.seq_len < 0 || so.vocab_size < 0) {
    fprintf(stderr, "bench-gpu-gpt: shape options must be >= 1\n");
    return 2;
  }
  if (!numbers_ok(threads, steps, warmup, batch, peak_tflops, clip))
    return 2;
  const char *devices[] = {"cpu", "cuda"};
  int dev = parse_choice("--device", device, devices, G_N_ELEMENTS(devices));
  int prec = parse_choice("--precision", precision, precision_names, G_N_ELEMENTS(precision_names));
  if (dev < 0 || prec < 0)
    return 2;

  int status = 0;
  g_autofree char *dev_label = NULL;
  const GpuPeaks *peaks = NULL;
  const CohortBackend *be = open_device(dev == 1, threads, &dev_label, &peaks, &status);
  if (!be)
    return status;
  be->set_gemm_mode(precision_modes[prec]);
  ModelFigures mf = {0};
  CohortModel *m = build_model(&so, be, batch, dev_label, &mf, &status);
  int rc = m ? time_steps(m, be, &mf, batch, steps, warmup, clip, dev == 0, dev_label, prec, peaks,
                          peak_tflops)
             : status;
  if (m)
    cohort_model_free(m);
  g_free(mf.label);
  g_free(so.model);
  g_free(so.shape);
  return rc;
}
