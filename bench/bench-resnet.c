/* Times one ResNet training step on the CPU backend — training-mode forward with batch
 * statistics, cross-entropy, backward, and SGD with Nesterov momentum and weight decay — as the
 * trainer runs it (one rank, no communication), for a side-by-side figure with PyTorch
 * (bench/torch_resnet.py times the same model and step; bench/run-resnet-bench runs both).
 *
 *   bench-resnet [--variant V] [--batch B] [--depth N] [--width W] [--size S] [--channels C]
 *                [--classes K] [--threads T] [--reps R] [--conv im2col|onednn]
 *
 * --variant is resnet_variant: cifar (the default; --depth and --width apply) or resnet18 …
 * resnet101 (torchvision's; RGB at --size, 224 by default there, 1000 classes by default).
 * --conv picks the CPU convolution path (kernels/cpu/conv-paths.h; oneDNN by default).
 *
 * Prints the best of R steps (after 2 warm-up steps), and its forward and backward parts, in
 * milliseconds: on one thread on the process's CPU clock, which other jobs of a shared machine
 * do not inflate; on more on the wall clock, which is what threads buy. The last line,
 * "step_ms=…", is for scripts. */
#include "engine/models/resnet.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "engine/models/registry.h"
#include "kernels/cpu/conv-paths.h"
#include "kernels/cpu/threading.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int use_cpu_clock;

static double now(void)
{
  struct timespec ts;
  clock_gettime(use_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
  /* Idle threads sleep, as in cohort-train (kernels/cpu/threading.h). */
  cohort_cpu_threading_env(argv);
  int batch = 128, depth = 20, width = 16, size = 0, channels = 3, classes = 0, threads = 1;
  int reps = 10;
  g_autofree char *variant = NULL, *conv = NULL;
  GOptionEntry entries[] = {
      {"variant", 0, 0, G_OPTION_ARG_STRING, &variant, "resnet_variant (cifar)", "V"},
      {"conv", 0, 0, G_OPTION_ARG_STRING, &conv, "Convolution path: onednn or im2col", "P"},
      {"batch", 0, 0, G_OPTION_ARG_INT, &batch, "Images per step (128)", "B"},
      {"depth", 0, 0, G_OPTION_ARG_INT, &depth, "n_layer, 6n+2 (20)", "N"},
      {"width", 0, 0, G_OPTION_ARG_INT, &width, "resnet_width (16)", "W"},
      {"size", 0, 0, G_OPTION_ARG_INT, &size, "Image side (32; 224 for ImageNet variants)", "S"},
      {"channels", 0, 0, G_OPTION_ARG_INT, &channels, "Image channels (3)", "C"},
      {"classes", 0, 0, G_OPTION_ARG_INT, &classes, "Classes (10; 1000 for ImageNet ones)", "K"},
      {"threads", 0, 0, G_OPTION_ARG_INT, &threads, "Threads (1)", "T"},
      {"reps", 0, 0, G_OPTION_ARG_INT, &reps, "Timed steps; the best counts (10)", "R"},
      {NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- time a ResNet training step");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || batch < 1 || reps < 1 || threads < 1) {
    fprintf(stderr, "bench-resnet: %s\n",
            error ? error->message : "--batch, --reps and --threads must be 1 or more");
    return 2;
  }
  gboolean imagenet = variant && strcmp(variant, "cifar") != 0;
  if (size == 0)
    size = imagenet ? 224 : 32;
  if (classes == 0)
    classes = imagenet ? 1000 : 10;
  if (conv && !cohort_cpu_conv_select(strcmp(conv, "im2col") == 0 ? COHORT_CPU_CONV_IM2COL
                                                                  : COHORT_CPU_CONV_ONEDNN)) {
    fprintf(stderr, "bench-resnet: --conv %s is not available in this build\n", conv);
    return 2;
  }
  const CohortBackend *be = cohort_backend_cpu();
  be->set_threads(threads);
  use_cpu_clock = threads == 1;

  g_autoptr(CohortConfig) cfg = cohort_config_new();
  char *sets[] = {
      g_strdup("model=resnet"),
      g_strdup_printf("resnet_variant=%s", variant ? variant : "cifar"),
      g_strdup("data_format=images"),
      g_strdup_printf("n_layer=%d", depth),
      g_strdup_printf("resnet_width=%d", width),
      g_strdup_printf("image_size=%d", size),
      g_strdup_printf("image_channels=%d", channels),
      g_strdup_printf("num_classes=%d", classes),
      g_strdup("optimizer=sgd"),
      g_strdup("momentum=0.9"),
      g_strdup("nesterov=true"),
      g_strdup("weight_decay=0.0005"),
      NULL,
  };
  gboolean ok = cohort_config_apply_assignments(cfg, (const char *const *)sets, "bench", &error);
  for (guint i = 0; sets[i]; i++)
    g_free(sets[i]);
  g_autoptr(CohortModel) m = ok ? cohort_model_new(be, cfg, batch, &error) : NULL;
  if (!m) {
    fprintf(stderr, "bench-resnet: %s\n", error->message);
    return 2;
  }
  m->ops->init_weights(m, 1);
  g_autoptr(CohortOptimizer) opt = cohort_optimizer_new_for(cfg, be, m->n_params);
  size_t D = (size_t)channels * size * size;
  g_autofree float *images = g_new(float, (size_t)batch *D);
  g_autofree int *labels = g_new(int, batch);
  GRand *rng = g_rand_new_with_seed(7);
  for (size_t i = 0; i < (size_t)batch * D; i++)
    images[i] = (float)g_rand_double_range(rng, -1, 1);
  for (int b = 0; b < batch; b++)
    labels[b] = g_rand_int_range(rng, 0, classes);
  g_rand_free(rng);

  double best = G_MAXDOUBLE, best_fwd = 0, best_bwd = 0;
  float loss = 0;
  for (int r = 0; r < reps + 2; r++) {
    double t0 = now();
    cohort_model_zero_grad(m);
    loss = cohort_resnet_forward_given(m, images, labels, batch, COHORT_FORWARD_TRAIN, NULL);
    double t1 = now();
    m->ops->backward(m, 1.0f);
    double t2 = now();
    cohort_optimizer_step(opt, m->params, m->grads, m->tensors, m->n_tensors, cfg, 0.01, r + 1);
    double t3 = now();
    if (r >= 2 && t3 - t0 < best) {
      best = t3 - t0;
      best_fwd = t1 - t0;
      best_bwd = t2 - t1;
    }
  }
  g_autofree char *model =
      imagenet ? g_strdup(variant) : g_strdup_printf("resnet-%d width %d", depth, width);
  printf("%s, %dx%dx%d images, %d classes, batch %d, %d thread%s (%s clock), %s convolutions: "
         "best of %d steps %.1f ms (forward %.1f, backward %.1f), %.1f images/s; last loss %.4f\n",
         model, channels, size, size, classes, batch, threads, threads == 1 ? "" : "s",
         use_cpu_clock ? "CPU" : "wall",
         cohort_cpu_conv_path() == COHORT_CPU_CONV_ONEDNN ? "oneDNN" : "im2col", reps, best * 1e3,
         best_fwd * 1e3, best_bwd * 1e3, batch / best, loss);
  printf("step_ms=%.3f\n", best * 1e3);
  return 0;
}
