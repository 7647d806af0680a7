/* Times a VAE encoding images on the CPU: diffusers' AutoencoderKL of a config.json (by default
 * Stable Diffusion's, bench/sd-vae/config.json) with random weights, batches of random images
 * at a given size, the encoder and quant_conv (what caching latents runs):
 *
 *   bench-vae [--config FILE] [--size PX] [--batch N] [--threads N] [--reps N]
 *
 * Prints one line: "vae encode: size S, batch B, threads N, wall X ms/batch, cpu Y ms/batch,
 * Z images/s" (the median repetition after one untimed one). */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/models/vae.h"
#include "kernels/backend.h"
#include "kernels/cpu/threading.h"

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

int main(int argc, char **argv)
{
  cohort_cpu_threading_env(argv);
  g_autofree char *config = NULL;
  int size = 256, batch = 2, threads = 1, reps = 3;
  GOptionEntry entries[] = {
      {"config", 0, 0, G_OPTION_ARG_FILENAME, &config, "AutoencoderKL config.json", "FILE"},
      {"size", 0, 0, G_OPTION_ARG_INT, &size, "Image side (256)", "PX"},
      {"batch", 0, 0, G_OPTION_ARG_INT, &batch, "Images per batch (2)", "N"},
      {"threads", 0, 0, G_OPTION_ARG_INT, &threads, "Threads (OpenMP and BLAS)", "N"},
      {"reps", 0, 0, G_OPTION_ARG_INT, &reps, "Timed batches (3)", "N"},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- time a VAE's encoder");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error) || batch < 1 || threads < 1 || reps < 1) {
    fprintf(stderr, "bench-vae: %s\n", error ? error->message : "--batch, --threads, --reps >= 1");
    return 2;
  }
  g_autofree char *path =
      config ? g_strdup(config) : g_build_filename(BENCH_SOURCE_DIR, "sd-vae", "config.json", NULL);
  CohortVaeConfig cfg;
  if (!cohort_vae_config_read(path, &cfg, &error)) {
    fprintf(stderr, "bench-vae: %s\n", error->message);
    return 2;
  }
  const CohortBackend *be = cohort_backend_cpu();
  be->set_threads(threads);
  g_autoptr(CohortVae) v = cohort_vae_new(be, &cfg, COHORT_VAE_ENCODE, batch, size, 1, &error);
  if (!v) {
    fprintf(stderr, "bench-vae: %s\n", error->message);
    return 1;
  }
  size_t D = (size_t)cfg.in_channels * size * size,
         L = (size_t)cfg.latent_channels * cohort_vae_latent_size(v) * cohort_vae_latent_size(v);
  g_autofree float *img = g_new(float, D *batch), *lat = g_new(float, L *batch);
  GRand *r = g_rand_new_with_seed(3);
  for (size_t i = 0; i < D * batch; i++)
    img[i] = (float)g_rand_double_range(r, -1, 1);
  g_rand_free(r);
  g_autofree double *wall = g_new(double, reps), *cpu = g_new(double, reps);
  for (int k = -1; k < reps; k++) {
    gint64 t0 = g_get_monotonic_time();
    double c0 = cpu_seconds();
    cohort_vae_encode(v, img, batch, lat);
    if (k >= 0) {
      wall[k] = (g_get_monotonic_time() - t0) / 1e6;
      cpu[k] = cpu_seconds() - c0;
    }
  }
  qsort(wall, reps, sizeof(double), cmp_double);
  qsort(cpu, reps, sizeof(double), cmp_double);
  double w = wall[reps / 2], c = cpu[reps / 2];
  printf("vae encode: size %d, batch %d, threads %d, %zu parameters, wall %.1f ms/batch, cpu "
         "%.1f ms/batch, %.2f images/s\n",
         size, batch, threads, cohort_vae_n_params(v), w * 1e3, c * 1e3, batch / w);
  return 0;
}
