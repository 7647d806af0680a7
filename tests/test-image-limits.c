/* What image data may cost: a decoded set that fits neither in memory nor on the cache's disk
 * is refused before anything is allocated, naming image_size, image_channels, the number of
 * images and the bytes needed (a valid image_size 4096 × 3 channels on the built-in glyphs
 * asked for 181 GB at once and died in g_malloc); with a cache folder the set is written image
 * by image and used from the disk. And a single image costs no more than the 256 MiB limit
 * plus its file and its output, measured as the process's peak resident memory (VmHWM, reset
 * through /proc/self/clear_refs): a thin 1×16384 PNG fitted to 4096, a 16384² grey PNG
 * brought to 3 channels, a progressive JPEG claiming 16384², a PNG with a zTXt bomb. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/image-decode.h"
#include "data/images.h"
#include "image-fixtures.h"
#include "test-util.h"
#include "train-run.h"

extern void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static char *tmp;

static char *make_set(const char *name, int n_images)
{
  char *dir = g_build_filename(tmp, name, NULL);
  g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
  for (int i = 0; i < n_images; i++) {
    g_autofree char *file = g_strdup_printf("%s/%02d.png", dir, i);
    guint8 px[8 * 8 * 3];
    fx_fill(px, sizeof px, (guint32)i + 1);
    fx_write_png8(file, 8, 8, 3, px);
  }
  return dir;
}

static void expect_too_large(const GError *error, const char *n_images, const char *bytes)
{
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_LARGE);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "image_size 64"));
  g_assert_nonnull(strstr(error->message, "image_channels 3"));
  g_assert_nonnull(strstr(error->message, n_images));
  g_assert_nonnull(strstr(error->message, bytes));
}

/* 3 images at 64² × 3 are 36864 bytes: refused under a budget of two, in memory and on disk;
 * with the room, the set streamed through the cache is the set decoded in memory. */
static void test_set_budget(void)
{
  g_autofree char *dir = make_set("budget", 3);
  g_autofree char *cache = g_build_filename(tmp, "budget-cache", NULL);
  guint64 two = 2 * 64 * 64 * 3;
  g_autoptr(GError) error = NULL;
  CohortImageSetOptions mem = {.memory_budget = two};
  g_assert_null(cohort_image_set_open_with(dir, 64, 3, &mem, &error));
  expect_too_large(error, "3 images", "36864 bytes");
  g_clear_error(&error);
  CohortImageSetOptions disk = {.cache_dir = cache, .disk_budget = two};
  g_assert_null(cohort_image_set_open_with(dir, 64, 3, &disk, &error));
  expect_too_large(error, "3 images", "36864 bytes");
  g_assert_nonnull(strstr(error->message, cache));
  g_clear_error(&error);

  mem.memory_budget = 3 * two;
  disk.disk_budget = 3 * two;
  g_autoptr(CohortImageSet) in_memory = cohort_image_set_open_with(dir, 64, 3, &mem, &error);
  g_assert_no_error(error);
  g_autoptr(CohortImageSet) on_disk = cohort_image_set_open_with(dir, 64, 3, &disk, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_image_set_num_decoded(on_disk), ==, 3);
  g_assert_cmpuint(cohort_image_set_len(on_disk), ==, 3);
  for (gsize i = 0; i < 3; i++)
    g_assert_cmpmem(cohort_image_set_get_bytes(on_disk, i), 64 * 64 * 3,
                    cohort_image_set_get_bytes(in_memory, i), 64 * 64 * 3);
  g_autoptr(CohortImageSet) again = cohort_image_set_open_with(dir, 64, 3, &disk, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_image_set_num_decoded(again), ==, 0);
}

/* The run that died: image_size 4096 × 3 on the 3600 glyphs (181 GB decoded) is refused
 * with the numbers, at once, when the workspace's disk cannot hold it. */
static void test_glyphs_4096(void)
{
  g_autofree char *ws = g_build_filename(tmp, "glyphs-4096", NULL);
  g_assert_cmpint(g_mkdir_with_parents(ws, 0755), ==, 0);
  guint64 needed = (guint64)3600 * 4096 * 4096 * 3;
  if (cohort_image_disk_budget(ws) >= needed) {
    g_test_skip("this disk has room for 181 GB of decoded glyphs");
    return;
  }
  const char *extra[] = {"--set", "model=dit",
                         "--set", "data_format=images",
                         "--set", "train_data=builtin:glyphs/train",
                         "--set", "val_data=",
                         "--set", "image_size=4096",
                         "--set", "image_channels=3",
                         "--set", "max_steps=1",
                         NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  gint64 t0 = g_get_monotonic_time();
  RunResult r = run_train(args, NULL);
  double seconds = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("exit %d after %.1f s: %s", r.status, seconds, r.err);
  g_assert_cmpint(r.status, >=, 1);
  g_assert_cmpint(r.status, <=, 2);
  /* Either the memory plan refuses first (a DiT's activations at 4096 px do not fit this
   * machine either: it must then name image_size), or the decoded set is refused. */
  if (strstr(r.err, "cohort-train: memory:") != NULL) {
    g_assert_nonnull(strstr(r.err, "activations"));
    g_assert_nonnull(strstr(r.err, "image_size"));
  } else {
    g_assert_nonnull(strstr(r.err, "3600 images"));
    g_assert_nonnull(strstr(r.err, "image_size 4096"));
    g_assert_nonnull(strstr(r.err, "image_channels 3"));
    g_autofree char *bytes = g_strdup_printf("%" G_GUINT64_FORMAT " bytes", needed);
    g_assert_nonnull(strstr(r.err, bytes));
  }
  g_assert_cmpfloat(seconds, <, 120);
  run_result_clear(&r);
}

/* ---- peak memory of one image ---- */

static guint64 status_kib(const char *field)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents("/proc/self/status", &text, NULL, NULL));
  const char *p = strstr(text, field);
  g_assert_nonnull(p);
  return g_ascii_strtoull(p + strlen(field), NULL, 10);
}

/* Resets the peak to the current resident size; FALSE when the kernel does not allow it. */
static gboolean reset_peak(void)
{
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f)
    return FALSE;
  gboolean ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

/* Opens a folder holding just `file` at `size` × 3 channels (no cache: in memory) and returns
 * how far the resident memory rose above where it was, in bytes. *opened: whether the image
 * was taken. */
static guint64 peak_of_open(const char *folder, int size, gboolean *opened, char **why)
{
  g_assert_true(reset_peak());
  guint64 base = status_kib("VmRSS:");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) set = cohort_image_set_open(folder, size, 3, TRUE, NULL, &error);
  guint64 peak = status_kib("VmHWM:");
  *opened = set != NULL;
  *why = set && cohort_image_set_num_skipped(set)
             ? g_strdup(cohort_image_set_skipped_reason(set, 0))
         : error ? g_strdup(error->message)
                 : NULL;
  return (peak > base ? peak - base : 0) << 10;
}

typedef struct {
  const char *name;
  gboolean taken; /* decoded (TRUE) or refused as a bad image */
  guint64 decoded;
} Bomb;

static void check_bomb(const char *file, const Bomb *b, int size)
{
  g_autofree char *folder = g_path_get_dirname(file);
  struct stat st;
  g_assert_cmpint(stat(file, &st), ==, 0);
  gboolean opened = FALSE;
  g_autofree char *why = NULL;
  guint64 peak = peak_of_open(folder, size, &opened, &why);
  /* The file, what the limit lets the decode hold, the output planes and their interleaved
   * copy, and some slack for the allocator; a sanitizer's shadow memory adds an eighth. */
  guint64 out = (guint64)size * size * 3;
  guint64 bound = (guint64)st.st_size + b->decoded + 2 * out + (48u << 20);
  if (__sanitizer_set_death_callback)
    bound += bound / 4;
  g_test_message("%s: peak %" G_GUINT64_FORMAT " MiB above the start (bound %" G_GUINT64_FORMAT
                 " MiB), %s%s%s",
                 b->name, peak >> 20, bound >> 20, b->taken ? "decoded" : "refused",
                 why ? ": " : "", why ? why : "");
  g_assert_cmpuint(peak, <=, bound);
  if (b->taken)
    g_assert_true(opened && why == NULL);
  else
    g_assert_nonnull(why);
}

static char *bomb_path(const char *name, const char *file)
{
  g_autofree char *dir = g_build_filename(tmp, "bombs", name, NULL);
  g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
  return g_build_filename(dir, file, NULL);
}

static void test_image_peak(void)
{
  if (!reset_peak()) {
    g_test_skip("cannot reset the peak resident size (/proc/self/clear_refs)");
    return;
  }
  /* 1 × 16384 grey fitted to 4096: 67 million resized rows, of which the crop keeps 4096. */
  g_autofree char *thin = bomb_path("thin", "thin.png");
  guint8 *column = g_malloc0(16384);
  fx_write_png8(thin, 1, 16384, 1, column);
  g_free(column);
  check_bomb(thin, &(Bomb){"1x16384 PNG at 4096", TRUE, 16384}, 4096);

  /* 16384² grey (256 MiB decoded, the limit) brought to 3 channels at 4096. */
  g_autofree char *grey = bomb_path("grey", "grey.png");
  fx_write_flat_png(grey, 16384, 16384, 1, 7);
  check_bomb(grey, &(Bomb){"16384^2 grey PNG at 3 channels", TRUE, COHORT_IMAGE_MAX_BYTES}, 64);

  /* A progressive JPEG claiming 16384² grey: its coefficients alone would be 512 MiB. */
  g_autofree char *jpeg = bomb_path("jpeg", "progressive.jpg");
  fx_write_progressive_jpeg_claiming(jpeg, 16384, 16384);
  check_bomb(jpeg, &(Bomb){"progressive JPEG claiming 16384^2", FALSE, 0}, 64);

  /* A zTXt chunk that inflates to 1 GiB of text, and one stored as 40 MiB: libpng's default
   * chunk limits skip both; the tiny image is read. */
  g_autofree char *ztxt = bomb_path("ztxt", "ztxt.png");
  fx_write_png_ztxt(ztxt, (gsize)1 << 30, FALSE);
  check_bomb(ztxt, &(Bomb){"PNG with a zTXt bomb", TRUE, 4}, 64);
  g_autofree char *stored = bomb_path("stored", "stored.png");
  fx_write_png_ztxt(stored, (gsize)40 << 20, TRUE);
  check_bomb(stored, &(Bomb){"PNG with a 40 MiB zTXt chunk", TRUE, 4}, 64);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_autoptr(GError) error = NULL;
  tmp = g_dir_make_tmp("cohort-image-limits-XXXXXX", &error);
  g_assert_no_error(error);
  g_test_add_func("/image-limits/set-budget", test_set_budget);
  g_test_add_func("/image-limits/glyphs-4096", test_glyphs_4096);
  g_test_add_func("/image-limits/image-peak", test_image_peak);
  int rc = g_test_run();
  tu_rm_rf(tmp);
  g_free(tmp);
  return rc;
}
