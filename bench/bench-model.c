/* Times training steps (forward, backward, AdamW) of any model family on the CPU, through the
 * model interface, on a synthetic batch of the shape its data would give: random images in
 * [-1, 1] with random labels (a latent DiT: random latents), or random tokens. The model is the
 * one a config describes:
 *
 *   bench-model [--preset NAME] [--set KEY=VALUE]... [--threads N] [--steps N] [--warmup N]
 *               [--dump DIR] [--print-config]
 *
 * Prints one line: "<model>: batch B, threads N, wall X ms/step, cpu Y ms/step, Z samples/s,
 * first loss L, last loss M" (samples/s from the median wall-clock step; CPU time is the whole
 * process's, which other processes on the machine disturb less; L the loss of the first step,
 * from the initial weights, M the last step's, after warmup + steps - 1 AdamW updates). --dump DIR
 * (token models) writes the initial weights to DIR/model.safetensors and the batch to
 * DIR/tokens.bin (int32 B, T, inputs [B*T], targets [B*T]) before the first step, so that a PyTorch
 * twin (bench/torch_llama.py) can check that it computes the same loss from the same weights: a
 * benchmark of a different model would be worthless. --print-config prints the config (preset and
 * --set) as JSON and exits: bench/run-model-bench reads the shape it gives PyTorch from it. */
#include <errno.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/model/batch.h"
#include "engine/model/model-io.h"
#include "engine/model/model.h"
#include "engine/model/optim.h"
#include "engine/config/config.h"
#include "engine/config/presets.h"
#include "kernels/backend.h"
#include "kernels/cpu/threading.h"
#include "engine/families/dit.h"
#include "engine/models/dit.h"
#include "engine/models/registry.h"

/* The initial weights and the token batch for bench/torch_llama.py's loss check. */
static gboolean dump(const CohortModel *m, const CohortBatch *b, int T, const char *dir,
                     GError **error)
{
  if (!b->inputs) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                "--dump %s: the model's batch has no tokens; allowed: token models", dir);
    return FALSE;
  }
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno), "--dump %s: %s", dir,
                g_strerror(errno));
    return FALSE;
  }
  g_autofree char *weights = g_build_filename(dir, "model.safetensors", NULL);
  if (!cohort_model_save(m, NULL, weights, NULL, error))
    return FALSE;
  size_t n = (size_t)b->B * T;
  g_autofree gint32 *buf = g_new(gint32, 2 + 2 * n);
  buf[0] = b->B;
  buf[1] = T;
  for (size_t i = 0; i < n; i++) {
    buf[2 + i] = b->inputs[i];
    buf[2 + n + i] = b->targets[i];
  }
  g_autofree char *tokens = g_build_filename(dir, "tokens.bin", NULL);
  return g_file_set_contents(tokens, (const char *)buf, (gssize)((2 + 2 * n) * sizeof(gint32)),
                             error);
}

static double cpu_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

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

/* A batch of the config's data shape (a DiT with vae_from: its latents'; with text_encoder:
 * captions), filled with seeded random values. */
static CohortBatch *random_batch(const CohortConfig *cfg, int B)
{
  gboolean images = cfg->data_format == COHORT_DATA_IMAGES;
  int S = cfg->image_size, C = cfg->image_channels;
  if (images && g_str_equal(cfg->model, "dit"))
    g_assert(cohort_dit_latent_geometry(cfg, NULL, &S, &C, NULL));
  CohortBatch *b =
      images ? cohort_batch_new(B, 0, C, S, S) : cohort_batch_new(B, cfg->seq_len, 0, 0, 0);
  GRand *rand = g_rand_new_with_seed(7);
  for (int i = 0; i < B; i++) {
    b->example_ids[i] = (guint64)i;
    if (images) {
      size_t D = (size_t)C * S * S;
      for (size_t k = 0; k < D; k++)
        b->images[i * D + k] = (float)g_rand_double_range(rand, -1, 1);
      b->labels[i] = cfg->num_classes > 0 ? g_rand_int_range(rand, 0, cfg->num_classes) : -1;
    } else {
      for (int t = 0; t < cfg->seq_len; t++) {
        b->inputs[i * cfg->seq_len + t] = g_rand_int_range(rand, 0, cfg->vocab_size);
        b->targets[i * cfg->seq_len + t] = g_rand_int_range(rand, 0, cfg->vocab_size);
      }
    }
  }
  /* the text layout: captions of 5 to 9 tokens (tiny-t2i's "red A" to "magenta A") as random
   * hidden states of the encoder's width, the rest of each row padding */
  int D = cohort_family_dit_text_width(cfg);
  if (images && D > 0) {
    int M = MIN(cfg->max_text_tokens, 9);
    cohort_batch_add_text(b, M, D);
    for (int i = 0; i < B; i++) {
      b->text_len[i] = MIN(M, 5 + i % 5);
      for (int k = 0; k < b->text_len[i] * D; k++)
        b->text[(size_t)i * M * D + k] = (float)g_rand_double_range(rand, -2, 2);
    }
  }
  b->epoch = 0;
  g_rand_free(rand);
  return b;
}

int main(int argc, char **argv)
{
  cohort_cpu_threading_env(argv);
  g_autofree char *preset = NULL;
  g_autofree char *dump_dir = NULL;
  gboolean print_config = FALSE;
  g_auto(GStrv) sets = NULL;
  int threads = 1, steps = 10, warmup = 2;
  GOptionEntry entries[] = {
      {"preset", 'p', 0, G_OPTION_ARG_STRING, &preset, "Preset (default tiny-gpt)", "NAME"},
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &sets, "Override a key", "KEY=VALUE"},
      {"threads", 0, 0, G_OPTION_ARG_INT, &threads, "Threads (OpenMP and OpenBLAS)", "N"},
      {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "Timed steps", "N"},
      {"warmup", 0, 0, G_OPTION_ARG_INT, &warmup, "Untimed steps first", "N"},
      {"dump", 0, 0, G_OPTION_ARG_FILENAME, &dump_dir,
       "Write the initial weights and the batch here (token models)", "DIR"},
      {"print-config", 0, 0, G_OPTION_ARG_NONE, &print_config, "Print the config as JSON, exit",
       NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- time a model's training steps");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || threads < 1 || steps < 1 ||
      warmup < 0) {
    fprintf(stderr, "bench-model: %s\n",
            error ? error->message : "--threads and --steps >= 1, --warmup >= 0");
    return 2;
  }
  g_autoptr(CohortConfig) cfg = cohort_preset_load(preset ? preset : "tiny-gpt", &error);
  if (!cfg ||
      (sets && !cohort_config_apply_assignments(cfg, (const char *const *)sets, "--set", &error))) {
    fprintf(stderr, "bench-model: %s\n", error->message);
    return 2;
  }
  if (print_config) {
    g_autofree char *json = cohort_config_to_json(cfg, TRUE);
    printf("%s\n", json);
    return 0;
  }
  if (cfg->data_format == COHORT_DATA_IMAGES && cfg->num_classes == 0)
    cfg->num_classes = 36; /* the glyphs' */
  cohort_backend_cpu()->set_threads(threads);
  int B = cfg->batch_size;
  g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  if (!m) {
    fprintf(stderr, "bench-model: %s\n", error->message);
    return 1;
  }
  m->ops->init_weights(m, 1);
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(m->n_params);
  g_autoptr(CohortBatch) batch = random_batch(cfg, B);
  if (dump_dir && !dump(m, batch, cfg->seq_len, dump_dir, &error)) {
    fprintf(stderr, "bench-model: %s\n", error->message);
    return 1;
  }
  float first_loss = 0.0f, last_loss = 0.0f;
  g_autofree double *wall = g_new(double, steps);
  g_autofree double *cpu = g_new(double, steps);
  for (int s = 0; s < warmup + steps; s++) {
    gint64 t0 = g_get_monotonic_time();
    double c0 = cpu_seconds();
    cohort_model_zero_grad(m);
    float loss = m->ops->forward(m, batch, COHORT_FORWARD_TRAIN);
    if (s == 0)
      first_loss = loss;
    last_loss = loss;
    m->ops->backward(m, 1.0f);
    cohort_adamw_step(opt, m->params, m->grads, m->tensors, m->n_tensors, 1e-4, 0.9, 0.95, 1e-8,
                      0.0, s + 1);
    if (s >= warmup) {
      wall[s - warmup] = (double)(g_get_monotonic_time() - t0) / 1e6;
      cpu[s - warmup] = cpu_seconds() - c0;
    }
  }
  double w = median(wall, steps), c = median(cpu, steps);
  printf("%s: batch %d, threads %d, %zu parameters, wall %.2f ms/step, cpu %.2f ms/step, "
         "%.4f samples/s, first loss %.6f, last loss %.6f\n",
         cfg->model, B, threads, m->n_params, w * 1e3, c * 1e3, B / w, first_loss, last_loss);
  return 0;
}
