/* cohort-vae: a diffusers AutoencoderKL folder from the command line.
 *
 *   cohort-vae encode --vae DIR [--size PX] -o OUT.safetensors IMAGE...
 *       fits each PNG/JPEG as the trainer does (Resize + CenterCrop to PX, default the VAE's
 *       sample_size) and writes its latent (the posterior mean, (mean − shift) · scaling) as
 *       one [L, s, s] tensor named after the image file;
 *   cohort-vae decode --vae DIR -o OUTDIR LATENTS.safetensors
 *       decodes every [L, s, s] tensor of the file to OUTDIR/<name>.png;
 *   cohort-vae train --config CONFIG.json --data FOLDER -o OUTDIR [--size PX] [--steps N]
 *       [--batch N] [--lr X] [--kl-weight X] [--seed S]
 *       trains a VAE of that config.json from scratch on an image folder and writes a diffusers
 *       folder (how the build makes the built-in set's VAE).
 * encode then decode is the round trip a user runs to check a VAE folder on their own images.
 * --vae, --config and --data take "builtin:" names as the config's keys do (builtin:vae/tiny,
 * the VAE the build trains). No output may be one of the inputs or another output
 * (engine/base/outputs.h): refused before anything is read or written.
 * Exit status: 0, 1 on bad input or a failure (one line naming the file), 2 on bad usage. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <glib/gstdio.h>

#include "data/image-decode.h"
#include "data/image-resize.h"
#include "data/images.h"
#include "engine/base/outputs.h"
#include "engine/config/config.h"
#include "engine/model/safetensors.h"
#include "engine/models/vae.h"

#define MAX_BATCH 8

static int fail(const char *msg)
{
  fprintf(stderr, "cohort-vae: %s\n", msg);
  return 1;
}

static int usage(const char *msg)
{
  fprintf(stderr,
          "cohort-vae: %s\nusage: cohort-vae encode --vae DIR [--size PX] -o OUT.safetensors "
          "IMAGE...\n       cohort-vae decode --vae DIR -o OUTDIR LATENTS.safetensors\n"
          "       cohort-vae train --config CONFIG.json --data FOLDER -o OUTDIR [--size PX] "
          "[--steps N] [--batch N] [--lr X] [--kl-weight X] [--seed S]\n",
          msg);
  return 2;
}

/* --size when it is not given: the VAE's sample_size (encode) or the config's (train). */
#define SIZE_UNSET INT_MIN

typedef struct {
  char *vae, *output, *config, *data;
  int size, steps, batch, threads;
  double lr, kl_weight;
  gint64 seed;
} Args;

static GOptionEntry *entries(Args *a)
{
  static GOptionEntry e[12];
  GOptionEntry list[] = {
      {"vae", 0, 0, G_OPTION_ARG_FILENAME, &a->vae, "The diffusers VAE folder", "DIR"},
      {"output", 'o', 0, G_OPTION_ARG_FILENAME, &a->output, "Output file or folder", "PATH"},
      {"size", 0, 0, G_OPTION_ARG_INT, &a->size, "Image side in pixels", "PX"},
      {"config", 0, 0, G_OPTION_ARG_FILENAME, &a->config, "train: the AutoencoderKL config.json",
       "FILE"},
      {"data", 0, 0, G_OPTION_ARG_FILENAME, &a->data, "train: an image folder", "FOLDER"},
      {"steps", 0, 0, G_OPTION_ARG_INT, &a->steps, "train: optimizer steps (2000)", "N"},
      {"batch", 0, 0, G_OPTION_ARG_INT, &a->batch, "train: images per step (16)", "N"},
      {"lr", 0, 0, G_OPTION_ARG_DOUBLE, &a->lr, "train: peak learning rate (1e-3)", "X"},
      {"kl-weight", 0, 0, G_OPTION_ARG_DOUBLE, &a->kl_weight, "train: KL weight (1e-4)", "X"},
      {"seed", 0, 0, G_OPTION_ARG_INT64, &a->seed, "train: seed (1)", "S"},
      {"threads", 0, 0, G_OPTION_ARG_INT, &a->threads, "CPU threads (0: all)", "N"},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  memcpy(e, list, sizeof list);
  return e;
}

/* The image at `path` fitted to size × size, channels as the VAE reads, in [-1, 1]. */
static gboolean load_image(const char *path, int size, int channels, float *out, GError **error)
{
  CohortRawImage raw;
  if (!cohort_image_load(path, channels, &raw, error))
    return FALSE;
  g_autofree guint8 *chw = g_new(guint8, (size_t)channels * size * size);
  gboolean fitted = cohort_image_fit(&raw, size, channels, chw);
  cohort_raw_image_clear(&raw);
  if (!fitted) {
    g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_NOMEM,
                "%s: out of memory to resize it to %d pixels", path, size);
    return FALSE;
  }
  for (size_t i = 0; i < (size_t)channels * size * size; i++)
    out[i] = chw[i] / 127.5f - 1.0f;
  return TRUE;
}

/* The files of the VAE folder `folder` as inputs: an output must never replace them. */
static void vae_inputs(CohortOutputs *io, const char *folder)
{
  static const char *const names[] = {"config.json", "diffusion_pytorch_model.safetensors",
                                      "diffusion_pytorch_model.fp16.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autofree char *path = g_build_filename(folder, names[i], NULL);
    cohort_outputs_add_input(io, path);
  }
}

static int encode(const Args *a, int n, char **images)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *folder = cohort_vae_find_folder(a->vae, &error);
  CohortVaeConfig cfg;
  g_autofree char *cfg_path = folder ? g_build_filename(folder, "config.json", NULL) : NULL;
  if (!folder || !cohort_vae_config_read(cfg_path, &cfg, &error))
    return fail(error->message);
  g_autoptr(CohortOutputs) io = cohort_outputs_new();
  vae_inputs(io, folder);
  for (int i = 0; i < n; i++)
    cohort_outputs_add_input(io, images[i]);
  if (!cohort_outputs_add(io, a->output, "-o", &error))
    return fail(error->message);
  int size = a->size != SIZE_UNSET ? a->size : cfg.sample_size;
  g_autoptr(CohortVae) v =
      cohort_vae_load(cohort_backend_cpu(), a->vae, COHORT_VAE_ENCODE, MAX_BATCH, size, &error);
  if (!v)
    return fail(error->message);
  int C = cfg.in_channels, L = cfg.latent_channels, s = cohort_vae_latent_size(v);
  size_t D = (size_t)C * size * size, per = (size_t)L * s * s;
  g_autofree float *pix = g_new(float, D *MAX_BATCH);
  g_autofree float *lat = g_new(float, per *n);
  g_autoptr(GHashTable) names = g_hash_table_new(g_str_hash, g_str_equal);
  g_autoptr(GPtrArray) owned = g_ptr_array_new_with_free_func(g_free);
  for (int i = 0; i < n; i += MAX_BATCH) {
    int b = MIN(MAX_BATCH, n - i);
    for (int k = 0; k < b; k++)
      if (!load_image(images[i + k], size, C, pix + k * D, &error))
        return fail(error->message);
    cohort_vae_encode(v, pix, b, lat + (size_t)i * per);
  }
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  for (int i = 0; i < n; i++) {
    char *base = g_path_get_basename(images[i]);
    g_ptr_array_add(owned, base);
    if (!g_hash_table_add(names, base)) {
      g_autofree char *msg = g_strdup_printf("%s: a second image named \"%s\"; tensors are named "
                                             "after the files, so names must differ",
                                             images[i], base);
      return fail(msg);
    }
    CohortStEntry e = {.name = base, .data = lat + (size_t)i * per, .ndim = 3, .shape = {L, s, s}};
    g_array_append_val(entries, e);
    printf("%s: [%d, %d, %d]\n", base, L, s, s);
  }
  g_autoptr(GHashTable) meta = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free);
  g_hash_table_insert(meta, "format", g_strdup("pt"));
  g_hash_table_insert(meta, "cohort.vae_sha256", g_strdup(cohort_vae_sha256(v)));
  g_hash_table_insert(meta, "cohort.image_size", g_strdup_printf("%d", size));
  if (!cohort_safetensors_write(a->output, (CohortStEntry *)entries->data, entries->len, meta,
                                &error))
    return fail(error->message);
  return 0;
}

static guint8 to_byte(float v)
{
  float x = (v + 1.0f) * 127.5f;
  return (guint8)(x <= 0 ? 0 : x >= 255 ? 255 : lrintf(x));
}

/* A tensor name as a file name: path separators and leading dots would leave OUTDIR. */
static char *png_name(const char *tensor)
{
  g_autofree char *base = g_strdup(tensor);
  for (char *p = base; *p; p++)
    if (*p == '/' || *p == '\\')
      *p = '_';
  char *dot = strrchr(base, '.');
  if (dot && dot != base)
    *dot = 0;
  return g_strdup_printf("%s%s.png", base[0] == '.' ? "_" : "", base);
}

static int decode(const Args *a, const char *latents)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(latents, &error);
  if (!f)
    return fail(error->message);
  const char *const *names = cohort_safetensors_names(f);
  if (!names[0]) {
    g_autofree char *msg = g_strdup_printf("%s: no tensors to decode", latents);
    return fail(msg);
  }
  int64_t shape[8];
  int nd = cohort_safetensors_shape(f, names[0], shape);
  g_autofree char *folder = cohort_vae_find_folder(a->vae, &error);
  CohortVaeConfig cfg;
  g_autofree char *cfg_path = folder ? g_build_filename(folder, "config.json", NULL) : NULL;
  if (!folder || !cohort_vae_config_read(cfg_path, &cfg, &error))
    return fail(error->message);
  if (nd != 3 || shape[0] != cfg.latent_channels || shape[1] != shape[2] || shape[1] < 1 ||
      shape[1] > 4096) {
    g_autofree char *msg = g_strdup_printf(
        "%s: tensor \"%s\" is not a latent of this VAE; allowed: [%d, s, s] (latent_channels, "
        "then a square side)",
        latents, names[0], cfg.latent_channels);
    return fail(msg);
  }
  int s = (int)shape[1], S = s * cohort_vae_downsample_factor(&cfg), C = cfg.out_channels;
  g_autoptr(CohortVae) v =
      cohort_vae_load(cohort_backend_cpu(), a->vae, COHORT_VAE_DECODE, 1, S, &error);
  if (!v)
    return fail(error->message);
  /* Every PNG's name before anything is decoded: two tensors whose names make one file name
   * (a.png and a.PNG), or a PNG that is an input, are refused with nothing written. */
  g_autoptr(CohortOutputs) io = cohort_outputs_new();
  vae_inputs(io, folder);
  cohort_outputs_add_input(io, latents);
  g_autoptr(GPtrArray) paths = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; names[i]; i++) {
    g_autofree char *name = png_name(names[i]);
    char *path = g_build_filename(a->output, name, NULL);
    g_ptr_array_add(paths, path);
    g_autofree char *what = g_strdup_printf("the PNG of tensor \"%s\"", names[i]);
    if (!cohort_outputs_add(io, path, what, &error))
      return fail(error->message);
  }
  if (g_mkdir_with_parents(a->output, 0755) != 0) {
    g_autofree char *msg = g_strdup_printf("%s: cannot create: %s", a->output, g_strerror(errno));
    return fail(msg);
  }
  int64_t want[3] = {cfg.latent_channels, s, s};
  g_autofree float *z = g_new(float, (size_t)cfg.latent_channels *s *s);
  g_autofree float *img = g_new(float, (size_t)C *S *S);
  g_autofree guint8 *px = g_new(guint8, (size_t)C * S * S);
  for (guint i = 0; names[i]; i++) {
    if (!cohort_safetensors_read_f32(f, names[i], 3, want, z, &error))
      return fail(error->message);
    cohort_vae_decode(v, z, 1, img);
    for (int c = 0; c < C; c++)
      for (int p = 0; p < S * S; p++)
        px[(size_t)p * C + c] = to_byte(img[(size_t)c * S * S + p]);
    const char *path = paths->pdata[i];
    if (!cohort_image_write_png(path, px, S, S, C, &error))
      return fail(error->message);
    printf("%s\n", path);
  }
  return 0;
}

static void log_step(int step, double loss, double rec, double kl, double ips, gpointer data)
{
  const Args *a = data;
  fprintf(stderr,
          "cohort-vae train: step %d/%d loss %.5f (reconstruction %.5f, KL %.3f) %.1f "
          "images/s\n",
          step, a->steps, loss, rec, kl, ips);
}

static int train(const Args *a)
{
  g_autoptr(GError) error = NULL;
  CohortVaeConfig cfg;
  if (!cohort_vae_config_read(a->config, &cfg, &error))
    return fail(error->message);
  /* The folder's two files must not be the config read (-o the config's own folder). */
  g_autoptr(CohortOutputs) io = cohort_outputs_new();
  cohort_outputs_add_input(io, a->config);
  g_autofree char *out_cfg = g_build_filename(a->output, "config.json", NULL);
  g_autofree char *out_weights =
      g_build_filename(a->output, "diffusion_pytorch_model.safetensors", NULL);
  if (!cohort_outputs_add(io, out_cfg, "-o's config.json", &error) ||
      !cohort_outputs_add(io, out_weights, "-o's weights", &error))
    return fail(error->message);
  int size = a->size != SIZE_UNSET ? a->size : cfg.sample_size;
  g_autoptr(CohortImageSet) set =
      cohort_image_set_open(a->data, size, cfg.in_channels, FALSE, NULL, &error);
  if (!set)
    return fail(error->message);
  gsize n = cohort_image_set_len(set);
  size_t D = (size_t)cfg.in_channels * size * size;
  g_autofree float *images = g_try_new(float, D *n);
  if (!images)
    return fail("out of memory for the images");
  for (gsize i = 0; i < n; i++)
    cohort_image_set_get(set, i, images + i * D, NULL);
  g_autoptr(CohortVae) v = cohort_vae_new(cohort_backend_cpu(), &cfg, COHORT_VAE_TRAIN, a->batch,
                                          size, (guint64)a->seed, &error);
  if (!v)
    return fail(error->message);
  CohortVaeFitOptions o = {.steps = a->steps,
                           .batch = a->batch,
                           .lr = a->lr,
                           .warmup = MIN(100, a->steps / 10 + 1),
                           .kl_weight = a->kl_weight,
                           .seed = (guint64)a->seed};
  if (!cohort_vae_fit(v, images, n, &o, log_step, (gpointer)a, &error) ||
      !cohort_vae_save(v, a->output, &error))
    return fail(error->message);
  fprintf(stderr, "cohort-vae train: %s: scaling_factor %.5f, %zu parameters\n", a->output,
          cohort_vae_get_config(v)->scaling_factor, cohort_vae_n_params(v));
  return 0;
}

/* The values of the flags: NULL when they are allowed, else the message (g_free it). */
static char *bad_value(const Args *a)
{
  if (a->size != SIZE_UNSET && (a->size < 1 || a->size > 16384))
    return g_strdup_printf("--size %d is not allowed; allowed: a whole number of pixels from 1 "
                           "to 16384, a multiple of the VAE's down-sampling factor",
                           a->size);
  if (a->steps < 1)
    return g_strdup_printf("--steps %d is not allowed; allowed: a whole number from 1", a->steps);
  if (a->batch < 1 || a->batch > 4096)
    return g_strdup_printf("--batch %d is not allowed; allowed: a whole number from 1 to 4096",
                           a->batch);
  if (!isfinite(a->lr) || a->lr <= 0 || a->lr > 1e3)
    return g_strdup_printf("--lr %g is not allowed; allowed: a finite number above 0 and at most "
                           "1000",
                           a->lr);
  if (!isfinite(a->kl_weight) || a->kl_weight < 0)
    return g_strdup_printf("--kl-weight %g is not allowed; allowed: a finite number from 0",
                           a->kl_weight);
  if (a->threads < 0 || a->threads > 4096)
    return g_strdup_printf("--threads %d is not allowed; allowed: 0 (all) to 4096", a->threads);
  return NULL;
}

/* "builtin:" names (builtin:vae/tiny) to paths, as the config's keys take them. */
static void resolve(char **path)
{
  if (*path) {
    char *resolved = cohort_resolve_path(*path);
    g_free(*path);
    *path = resolved;
  }
}

static int run(Args *a, int argc, char **argv)
{
  g_autofree char *bad = bad_value(a);
  if (bad)
    return usage(bad);
  if (argc < 2)
    return usage("give a command: encode, decode or train");
  resolve(&a->vae);
  resolve(&a->config);
  resolve(&a->data);
  if (a->threads > 0)
    cohort_backend_cpu()->set_threads(a->threads);
  const char *cmd = argv[1];
  if (strcmp(cmd, "encode") == 0 && a->vae && a->output && argc >= 3)
    return encode(a, argc - 2, argv + 2);
  if (strcmp(cmd, "decode") == 0 && a->vae && a->output && argc == 3)
    return decode(a, argv[2]);
  if (strcmp(cmd, "train") == 0 && a->config && a->data && a->output && argc == 2)
    return train(a);
  return usage("missing or bad arguments");
}

int main(int argc, char **argv)
{
  Args a = {
      .size = SIZE_UNSET, .steps = 2000, .batch = 16, .lr = 1e-3, .kl_weight = 1e-4, .seed = 1};
  g_autoptr(GOptionContext) ctx =
      g_option_context_new("encode|decode|train ... - run or train a diffusers AutoencoderKL");
  g_option_context_add_main_entries(ctx, entries(&a), NULL);
  g_autoptr(GError) error = NULL;
  int rc = g_option_context_parse(ctx, &argc, &argv, &error) ? run(&a, argc, argv)
                                                             : usage(error->message);
  g_free(a.vae), g_free(a.output), g_free(a.config), g_free(a.data);
  return rc;
}
