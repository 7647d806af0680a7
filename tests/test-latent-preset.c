/* The tiny-latent-dit preset as `make run PRESET=tiny-latent-dit` runs it (2 ranks with
 * distributed_data_loading, one thread each), cut to 3 steps: every colour glyph is encoded
 * by the VAE the build trained (builtin:vae/tiny) into the two ranks' caches, the DiT trains
 * on 32×32×4 latents, and the sample grid is decoded to 64-pixel RGB images; the exported
 * model samples again with `cohort-train --sample`, through the same VAE. The built VAE
 * itself: a diffusers folder that reconstructs the validation glyphs (mean squared error in
 * [-1, 1] below 0.05, where a mid-grey image scores 0.3). */
#include "test-util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <gio/gio.h>

#include "data/image-decode.h"
#include "data/images.h"
#include "engine/config/config.h"
#include "engine/models/vae.h"

static void die_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static int run(const char *const *argv, const char *events)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, die_with_parent, NULL, NULL);
  if (events) {
    int fd = open(events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_subprocess_launcher_take_fd(l, fd, 3);
  }
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) p = g_subprocess_launcher_spawnv(l, argv, &error);
  g_assert_no_error(error);
  g_autofree char *err = NULL;
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, &err, &error);
  int status = g_subprocess_get_exit_status(p);
  if (status != 0)
    g_test_message("exit %d: %s", status, err);
  return status;
}

static void test_built_vae(void)
{
  g_autofree char *dir = cohort_resolve_path("builtin:vae/tiny");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) v = cohort_vae_load(cohort_backend_cpu(), dir,
                                           COHORT_VAE_ENCODE | COHORT_VAE_DECODE, 8, 64, &error);
  g_assert_no_error(error);
  g_assert_cmpint(cohort_vae_latent_size(v), ==, 32);
  g_assert_cmpint(cohort_vae_get_config(v)->latent_channels, ==, 4);
  g_autofree char *val = cohort_resolve_path("builtin:colour-glyphs/val");
  g_autoptr(CohortImageSet) set = cohort_image_set_open(val, 64, 3, FALSE, NULL, &error);
  g_assert_no_error(error);
  enum { N = 32, D = 3 * 64 * 64, L = 4 * 32 * 32 };
  g_autofree float *img = g_new(float, N *D), *lat = g_new(float, N *L), *back = g_new(float, N *D);
  for (int i = 0; i < N; i++)
    cohort_image_set_get(set, (gsize)i * 6, img + (size_t)i * D, NULL);
  double se = 0, grey = 0;
  for (int i = 0; i < N; i += 8) {
    cohort_vae_encode(v, img + (size_t)i * D, 8, lat + (size_t)i * L);
    cohort_vae_decode(v, lat + (size_t)i * L, 8, back + (size_t)i * D);
  }
  double s = 0, q = 0;
  for (size_t k = 0; k < (size_t)N * L; k++)
    s += lat[k], q += (double)lat[k] * lat[k];
  for (size_t k = 0; k < (size_t)N * D; k++) {
    double x = CLAMP(back[k], -1.0f, 1.0f);
    se += (x - img[k]) * (x - img[k]);
    grey += (double)img[k] * img[k];
  }
  double mse = se / ((double)N * D), var = q / ((double)N * L) - pow(s / ((double)N * L), 2);
  g_test_message("reconstruction MSE %.4f (a mid-grey image: %.4f); latent variance %.3f", mse,
                 grey / ((double)N * D), var);
  g_assert_cmpfloat(mse, <, 0.05);
  /* scaling_factor makes the latents of the data about unit variance */
  g_assert_cmpfloat(var, >, 0.5);
  g_assert_cmpfloat(var, <, 2.0);
}

static void test_preset(void)
{
  g_autofree char *ws = tu_mkdtemp("latent-preset");
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autofree char *s_ws = g_strdup_printf("workspace_dir=%s/run", ws);
  const char *train = g_getenv("COHORT_TRAIN");
  const char *argv[] = {train,   "--preset",        "tiny-latent-dit", "--nproc",
                        "2",     "--progress-fd=3", "--set",           s_ws,
                        "--set", "max_steps=3",     "--set",           "eval_every=3",
                        "--set", "eval_steps=1",    "--set",           "sample_every=3",
                        "--set", "sample_steps=4",  "--set",           "threads=1",
                        NULL};
  g_assert_cmpint(run(argv, events), ==, 0);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  gint64 train_total = 0, val_total = 0;
  const char *image = NULL;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    const char *name = json_object_get_string_member(o, "event");
    if (g_str_equal(name, "latents") && json_object_get_boolean_member(o, "finished")) {
      gboolean is_train = g_str_equal(json_object_get_string_member(o, "set"), "train");
      *(is_train ? &train_total : &val_total) = json_object_get_int_member(o, "done");
    }
    if (g_str_equal(name, "sample"))
      image = json_object_get_string_member(o, "image");
  }
  g_assert_cmpint(train_total, ==, 3200);
  g_assert_cmpint(val_total, ==, 200);
  g_assert_nonnull(image);
  CohortRawImage grid;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_image_load(image, 3, &grid, &error));
  /* 8 columns and 8 rows (the classes) of 64-pixel images with 2-pixel gaps */
  g_assert_cmpint(grid.width, ==, 8 * 64 + 9 * 2);
  g_assert_cmpint(grid.height, ==, 8 * 64 + 9 * 2);
  cohort_raw_image_clear(&grid);
  for (int r = 0; r < 2; r++) {
    g_autofree char *rank = g_strdup_printf("%s/run/cache/rank-%d/latents-train.bin", ws, r);
    g_assert_true(g_file_test(rank, G_FILE_TEST_IS_REGULAR));
  }
  /* the export samples again, decoding through the VAE its config names */
  g_autofree char *model = g_strdup_printf("%s/run", ws);
  g_autofree char *out = g_build_filename(ws, "again.png", NULL);
  const char *sample[] = {train, "--sample", model, "--set", "sample_steps=2", "-o", out, NULL};
  g_assert_cmpint(run(sample, NULL), ==, 0);
  g_assert_true(cohort_image_load(out, 3, &grid, &error));
  g_assert_cmpint(grid.width, ==, 8 * 64 + 9 * 2);
  cohort_raw_image_clear(&grid);
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cohort_backend_cpu()->set_threads(1);
  g_test_add_func("/latent-preset/built-vae", test_built_vae);
  g_test_add_func("/latent-preset/preset", test_preset);
  return g_test_run();
}
