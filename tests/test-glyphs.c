/* The built-in glyph sets that the build renders (data/glyphs): present with the expected
 * classes and counts, every image a 32x32 8-bit grey PNG with a glyph on it, readable as an
 * image set, and byte-for-byte the same when rendered again. */
#include <stdlib.h>
#include <string.h>
#include "data/image-decode.h"
#include "data/images.h"
#include "image-fixtures.h"

static const char classes[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";

static const char *glyphs_dir(void)
{
  const char *dir = g_getenv("COHORT_GLYPHS_DIR");
  g_assert_nonnull(dir);
  if (!g_file_test(dir, G_FILE_TEST_IS_DIR))
    g_error("%s: the build did not make the glyph set", dir);
  return dir;
}

/* Checks split/<class>/0000.png .. NNNN.png: names, count, and each image's format. */
static void check_split(const char *split, int per_class)
{
  g_autofree char *dir = g_build_filename(glyphs_dir(), split, NULL);
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_assert_nonnull(d);
  int n_classes = 0;
  while (g_dir_read_name(d))
    n_classes++;
  g_assert_cmpint(n_classes, ==, 36);
  for (int c = 0; classes[c]; c++) {
    char name[2] = {classes[c], 0};
    g_autofree char *cls = g_build_filename(dir, name, NULL);
    g_autoptr(GDir) files = g_dir_open(cls, 0, NULL);
    g_assert_nonnull(files);
    int n = 0;
    while (g_dir_read_name(files))
      n++;
    g_assert_cmpint(n, ==, per_class);
    for (int i = 0; i < per_class; i++) {
      g_autofree char *path = g_strdup_printf("%s/%04d.png", cls, i);
      g_autofree char *data = NULL;
      gsize len;
      g_assert_true(g_file_get_contents(path, &data, &len, NULL));
      /* IHDR: 32 x 32, bit depth 8, colour type 0 (grey). */
      g_assert_cmpuint(len, >, 33);
      g_assert_cmpmem(data + 12, 4, "IHDR", 4);
      const guint8 want_ihdr[10] = {0, 0, 0, 32, 0, 0, 0, 32, 8, 0};
      g_assert_cmpmem(data + 16, 10, want_ihdr, 10);
      CohortRawImage img;
      g_autoptr(GError) error = NULL;
      g_assert_true(cohort_image_decode(path, (const guint8 *)data, len, 1, &img, &error));
      g_assert_no_error(error);
      /* White on black: a dark border row, some bright ink, a few to half the pixels lit. */
      int lit = 0, max = 0;
      for (int p = 0; p < 32 * 32; p++) {
        lit += img.pixels[p] > 64;
        max = MAX(max, img.pixels[p]);
      }
      for (int x = 0; x < 32; x++)
        g_assert_cmpint(img.pixels[x], ==, 0);
      g_assert_cmpint(max, >=, 200);
      if (lit < 32 || lit > 512)
        g_error("%s: %d of 1024 pixels lit, not a glyph", path, lit);
      cohort_raw_image_clear(&img);
    }
  }
}

static void test_layout(void)
{
  check_split("train", 100);
  check_split("val", 20);
}

/* As a data set: 36 classes in the order 0-9 then A-Z, pixels as decoded (no resize). */
static void test_as_image_set(void)
{
  g_autofree char *train = g_build_filename(glyphs_dir(), "train", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) set = cohort_image_set_open(train, 32, 1, FALSE, NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 3600);
  g_assert_cmpint(cohort_image_set_num_classes(set), ==, 36);
  const char *const *names = cohort_image_set_class_names(set);
  for (int c = 0; c < 36; c++) {
    g_assert_cmpint(strlen(names[c]), ==, 1);
    g_assert_cmpint(names[c][0], ==, classes[c]);
  }
  g_assert_cmpint(cohort_image_set_label(set, 0), ==, 0);
  g_assert_cmpint(cohort_image_set_label(set, 3599), ==, 35);
  g_autofree char *first = g_build_filename(train, "0", "0000.png", NULL);
  CohortRawImage img;
  g_assert_true(cohort_image_load(first, 1, &img, &error));
  g_assert_cmpmem(cohort_image_set_get_bytes(set, 0), 1024, img.pixels, 1024);
  cohort_raw_image_clear(&img);
}

/* Every file of `a` equals the same file of `b`; returns how many were compared. */
static int compare_trees(const char *a, const char *b)
{
  int n = 0;
  g_autoptr(GDir) d = g_dir_open(a, 0, NULL);
  g_assert_nonnull(d);
  const char *name;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *pa = g_build_filename(a, name, NULL);
    g_autofree char *pb = g_build_filename(b, name, NULL);
    if (g_file_test(pa, G_FILE_TEST_IS_DIR)) {
      n += compare_trees(pa, pb);
      continue;
    }
    g_autofree char *da = NULL, *db = NULL;
    gsize la, lb;
    g_assert_true(g_file_get_contents(pa, &da, &la, NULL));
    if (!g_file_get_contents(pb, &db, &lb, NULL) || la != lb || memcmp(da, db, la) != 0)
      g_error("%s and %s differ", pa, pb);
    n++;
  }
  return n;
}

static char *run_generator(const char *out, const char *extra)
{
  const char *exe = g_getenv("COHORT_MAKE_GLYPHS");
  const char *fonts = g_getenv("COHORT_GLYPH_FONTS");
  g_assert_nonnull(exe);
  g_assert_nonnull(fonts);
  g_auto(GStrv) list = g_strsplit(fonts, ":", -1);
  g_autoptr(GString) cmd = g_string_new(exe);
  g_string_append_printf(cmd, " %s '%s'", extra, out);
  for (guint i = 0; list[i]; i++)
    g_string_append_printf(cmd, " '%s'", list[i]);
  int status = system(cmd->str);
  g_assert_cmpint(status, ==, 0);
  return g_strdup(out);
}

/* Rendered again: the same bytes, all 4320 files; another seed: other images. */
static void test_deterministic(void)
{
  g_autofree char *dir = fx_mkdtemp("glyphs");
  g_autofree char *again = g_build_filename(dir, "again", NULL);
  g_free(run_generator(again, ""));
  g_assert_cmpint(compare_trees(glyphs_dir(), again), ==, 36 * 120);
  g_assert_cmpint(compare_trees(again, glyphs_dir()), ==, 36 * 120);

  g_autofree char *other = g_build_filename(dir, "other", NULL);
  g_free(run_generator(other, "--seed 7 --train 1 --val 1"));
  g_autofree char *a = g_build_filename(other, "train", "A", "0000.png", NULL);
  g_autofree char *b = g_build_filename(again, "train", "A", "0000.png", NULL);
  g_autofree char *da = NULL, *db = NULL;
  gsize la, lb;
  g_assert_true(g_file_get_contents(a, &da, &la, NULL));
  g_assert_true(g_file_get_contents(b, &db, &lb, NULL));
  g_assert_false(la == lb && memcmp(da, db, la) == 0);
  /* Rendering over an existing set replaces it whole (no files left from the old one). */
  g_free(run_generator(again, "--train 2 --val 1"));
  g_autofree char *gone = g_build_filename(again, "train", "A", "0002.png", NULL);
  g_assert_false(g_file_test(gone, G_FILE_TEST_EXISTS));
  fx_rm_rf(dir);
}

/* The colour set (data/glyphs/README.md): 8 classes of 64x64 RGB images, each a bright glyph
 * (value 1 where it is drawn) over a darker texture (value below 0.4 on the border), a class
 * per character in byte order; rendered again with the build's arguments, a few classes give
 * the same bytes. */
static void test_colour_set(void)
{
  const char *dir = g_getenv("COHORT_COLOUR_GLYPHS_DIR");
  g_assert_nonnull(dir);
  g_autofree char *train = g_build_filename(dir, "train", NULL);
  g_autofree char *val = g_build_filename(dir, "val", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) set = cohort_image_set_open(train, 64, 3, FALSE, NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 8 * 400);
  const char *const *names = cohort_image_set_class_names(set);
  const char want[] = "ABCEHOST";
  for (int c = 0; c < 8; c++)
    g_assert_cmpint(names[c][0], ==, want[c]);
  g_autoptr(CohortImageSet) vset = cohort_image_set_open(val, 64, 3, FALSE, NULL, &error);
  g_assert_cmpuint(cohort_image_set_len(vset), ==, 8 * 25);
  for (gsize i = 0; i < cohort_image_set_len(set); i += 97) {
    const guint8 *px = cohort_image_set_get_bytes(set, i); /* [3, 64, 64] */
    int bright = 0, dark_border = 0;
    for (int p = 0; p < 64 * 64; p++) {
      int v = MAX(px[p], MAX(px[4096 + p], px[8192 + p]));
      bright += v >= 250;
      if (p < 64)
        dark_border += v < 102;
    }
    if (bright < 64 || bright > 2048 || dark_border < 60)
      g_error("%s: %d bright pixels, %d dark of the top row: not a glyph on a dark texture",
              cohort_image_set_path(set, i), bright, dark_border);
  }
  g_autofree char *tmp = fx_mkdtemp("colour-glyphs");
  g_autofree char *again = g_build_filename(tmp, "again", NULL);
  g_free(run_generator(again, "--colour --side 64 --classes ABCEHOST --train 400 --val 25 --seed "
                              "20250301"));
  g_assert_cmpint(compare_trees(dir, again), ==, 8 * 425);
  fx_rm_rf(tmp);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/glyphs/colour-set", test_colour_set);
  g_test_add_func("/glyphs/layout", test_layout);
  g_test_add_func("/glyphs/as-image-set", test_as_image_set);
  g_test_add_func("/glyphs/deterministic", test_deterministic);
  return g_test_run();
}
