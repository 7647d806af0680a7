/* The image pipeline: decoding of every PNG colour type and of JPEG, the conversion to 1 or
 * 3 channels, Resize + CenterCrop against hand-computed pixels and against Pillow (the
 * library torchvision's pipeline runs on), the [-1, 1] scaling, class numbering, flat
 * folders, the layout rules, and the class mapping file. */
#include <math.h>
#include "data/image-decode.h"
#include "data/image-resize.h"
#include "data/images.h"
#include "image-fixtures.h"

/* Decodes `path` to `channels` and checks the pixels against `want` (w x h interleaved). */
static void expect_pixels(const char *path, int channels, int w, int h, const guint8 *want)
{
  g_autoptr(GError) error = NULL;
  CohortRawImage img;
  g_assert_true(cohort_image_load(path, channels, &img, &error));
  g_assert_no_error(error);
  g_assert_cmpint(img.width, ==, w);
  g_assert_cmpint(img.height, ==, h);
  g_assert_cmpint(img.channels, ==, channels);
  g_assert_cmpmem(img.pixels, (gsize)w * h * channels, want, (gsize)w * h * channels);
  cohort_raw_image_clear(&img);
}

static guint8 luma(guint8 r, guint8 g, guint8 b)
{
  return (guint8)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

/* Grey at 1, 2, 4, 8 and 16 bits: levels scaled to 0..255 (16-bit rounded), copied to RGB. */
static void test_decode_png_grey(void)
{
  g_autofree char *dir = fx_mkdtemp("png-grey");
  g_autofree char *path = g_build_filename(dir, "g.png", NULL);
  /* 4 pixels in one row at each depth. */
  struct {
    int depth;
    guint8 row[8];
    guint8 want[4];
  } cases[] = {
      {1, {0xa0}, {255, 0, 255, 0}},         /* bits 1010 */
      {2, {0x1b}, {0, 85, 170, 255}},        /* 00 01 10 11 */
      {4, {0x0f, 0x7a}, {0, 255, 119, 170}}, /* 0 15 7 10 */
      {8, {3, 100, 200, 255}, {3, 100, 200, 255}},
      /* 0x12ff rounds up to 19, where the high byte alone would give 18. */
      {16, {0x12, 0xff, 0x80, 0xff, 0xff, 0xff, 0x01, 0x01}, {19, 128, 255, 1}},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    FxPngSpec spec = {PNG_COLOR_TYPE_GRAY, cases[i].depth, FALSE, NULL, 0, NULL, 0};
    fx_write_png(path, 4, 1, &spec, cases[i].row, sizeof cases[i].row);
    expect_pixels(path, 1, 4, 1, cases[i].want);
    guint8 rgb[12];
    for (int p = 0; p < 4; p++)
      rgb[3 * p] = rgb[3 * p + 1] = rgb[3 * p + 2] = cases[i].want[p];
    expect_pixels(path, 3, 4, 1, rgb);
  }
  fx_rm_rf(dir);
}

/* RGB, RGB 16-bit, palette (8 and 4 bits, with tRNS), grey+alpha, RGBA 8 and 16, Adam7:
 * alpha and transparency are dropped, grey is Pillow's luma. */
static void test_decode_png_colour(void)
{
  g_autofree char *dir = fx_mkdtemp("png-colour");
  g_autofree char *path = g_build_filename(dir, "c.png", NULL);
  const guint8 rgb[6] = {255, 0, 0, 10, 20, 30};
  const guint8 grey[2] = {luma(255, 0, 0), luma(10, 20, 30)};
  g_assert_cmpint(grey[0], ==, 76);

  FxPngSpec spec = {PNG_COLOR_TYPE_RGB, 8, FALSE, NULL, 0, NULL, 0};
  fx_write_png(path, 2, 1, &spec, rgb, 6);
  expect_pixels(path, 3, 2, 1, rgb);
  expect_pixels(path, 1, 2, 1, grey);

  const guint8 rgb16[12] = {0xff, 0xff, 0, 0, 0x12, 0xff, 10, 10, 20, 20, 30, 30};
  const guint8 want16[6] = {255, 0, 19, 10, 20, 30};
  spec = (FxPngSpec){PNG_COLOR_TYPE_RGB, 16, FALSE, NULL, 0, NULL, 0};
  fx_write_png(path, 2, 1, &spec, rgb16, 12);
  expect_pixels(path, 3, 2, 1, want16);

  const png_color palette[3] = {{1, 2, 3}, {255, 0, 0}, {10, 20, 30}};
  const png_byte trns[3] = {0, 128, 255};
  const guint8 idx8[2] = {1, 2}, idx4[1] = {0x12};
  spec = (FxPngSpec){PNG_COLOR_TYPE_PALETTE, 8, FALSE, palette, 3, trns, 3};
  fx_write_png(path, 2, 1, &spec, idx8, 2);
  expect_pixels(path, 3, 2, 1, rgb);
  expect_pixels(path, 1, 2, 1, grey);
  spec.bit_depth = 4;
  fx_write_png(path, 2, 1, &spec, idx4, 1);
  expect_pixels(path, 3, 2, 1, rgb);

  const guint8 ga[4] = {77, 0, 200, 255};
  const guint8 want_ga[2] = {77, 200};
  spec = (FxPngSpec){PNG_COLOR_TYPE_GRAY_ALPHA, 8, FALSE, NULL, 0, NULL, 0};
  fx_write_png(path, 2, 1, &spec, ga, 4);
  expect_pixels(path, 1, 2, 1, want_ga);

  const guint8 rgba[8] = {255, 0, 0, 0, 10, 20, 30, 99};
  spec = (FxPngSpec){PNG_COLOR_TYPE_RGB_ALPHA, 8, FALSE, NULL, 0, NULL, 0};
  fx_write_png(path, 2, 1, &spec, rgba, 8);
  expect_pixels(path, 3, 2, 1, rgb);
  expect_pixels(path, 1, 2, 1, grey);
  const guint8 rgba16[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, 10, 10, 20, 20, 30, 30, 0, 1};
  spec.bit_depth = 16;
  fx_write_png(path, 2, 1, &spec, rgba16, 16);
  expect_pixels(path, 3, 2, 1, rgb);

  /* Adam7 on an image big enough to have all seven passes. */
  guint8 big[9 * 7 * 3];
  fx_fill(big, sizeof big, 7);
  spec = (FxPngSpec){PNG_COLOR_TYPE_RGB, 8, TRUE, NULL, 0, NULL, 0};
  fx_write_png(path, 9, 7, &spec, big, 27);
  expect_pixels(path, 3, 9, 7, big);
  fx_rm_rf(dir);
}

/* JPEG: grey and colour within JPEG's loss of a smooth image; the content, not the name,
 * decides (a JPEG named .png reads). */
static void test_decode_jpeg(void)
{
  g_autofree char *dir = fx_mkdtemp("jpeg");
  g_autofree char *path = g_build_filename(dir, "named-wrong.png", NULL);
  enum { W = 16, H = 8 };
  guint8 rgb[W * H * 3], grey[W * H];
  for (int i = 0; i < W * H; i++) {
    rgb[3 * i] = 200, rgb[3 * i + 1] = 100, rgb[3 * i + 2] = 50;
    grey[i] = 90;
  }
  for (int components = 1; components <= 3; components += 2) {
    fx_write_jpeg(path, W, H, components, components == 1 ? grey : rgb, 95);
    for (int channels = 1; channels <= 3; channels += 2) {
      g_autoptr(GError) error = NULL;
      CohortRawImage img;
      g_assert_true(cohort_image_load(path, channels, &img, &error));
      g_assert_no_error(error);
      g_assert_cmpint(img.width, ==, W);
      g_assert_cmpint(img.height, ==, H);
      g_assert_cmpint(img.channels, ==, channels);
      for (int i = 0; i < W * H * channels; i++) {
        int want = components == 1 ? 90 : channels == 1 ? luma(200, 100, 50) : rgb[i];
        g_assert_cmpint(abs(img.pixels[i] - want), <=, 2);
      }
      cohort_raw_image_clear(&img);
    }
  }
  fx_rm_rf(dir);
}

/* Resize and crop, worked out by hand from Pillow's triangle filter (see image-resize.c). */
static void test_resize_known_pixels(void)
{
  guint8 out[4];
  /* Shrinking 4 -> 2 (scale 2, support 2): weights 3/7 3/7 1/7 and 1/7 3/7 3/7, where a
   * box filter or point sampling would give 35 and 175. */
  const guint8 row4[4] = {0, 70, 140, 210};
  cohort_image_resize_window(row4, 4, 1, 1, 2, 1, 0, 0, 2, 1, out);
  g_assert_cmpint(out[0], ==, 50);
  g_assert_cmpint(out[1], ==, 160);
  /* Enlarging 2 -> 4: centres at 0.25, 0.75, 1.25, 1.75 give a, .75a+.25b, .25a+.75b, b,
   * rounded half up (150.75 -> 151). */
  const guint8 row2[2] = {0, 201};
  cohort_image_resize_window(row2, 2, 1, 1, 4, 1, 0, 0, 4, 1, out);
  const guint8 want_up[4] = {0, 50, 151, 201};
  g_assert_cmpmem(out, 4, want_up, 4);
  /* A window of a resize is the same bytes as the full resize. */
  cohort_image_resize_window(row2, 2, 1, 1, 4, 1, 1, 0, 2, 1, out);
  g_assert_cmpmem(out, 2, want_up + 1, 2);
  /* Columns of an RGB image are filtered channel by channel. */
  const guint8 rgb4[12] = {0, 1, 2, 70, 71, 72, 140, 141, 142, 210, 211, 212};
  guint8 rgb_out[6];
  cohort_image_resize_window(rgb4, 4, 1, 3, 2, 1, 0, 0, 2, 1, rgb_out);
  g_assert_cmpint(rgb_out[0], ==, 50);
  g_assert_cmpint(rgb_out[3], ==, 160);
  g_assert_cmpint(rgb_out[4], ==, 161);

  /* Resize(size): the shorter side to size, the longer int(size * long / short). */
  int w, h;
  cohort_image_resized_size(100, 50, 32, &w, &h);
  g_assert_cmpint(w, ==, 64);
  g_assert_cmpint(h, ==, 32);
  cohort_image_resized_size(33, 50, 32, &w, &h); /* 48.48 -> 48 */
  g_assert_cmpint(w, ==, 32);
  g_assert_cmpint(h, ==, 48);
  cohort_image_resized_size(7, 3, 5, &w, &h); /* 11.67 -> 11 */
  g_assert_cmpint(w, ==, 11);
  g_assert_cmpint(h, ==, 5);

  /* CenterCrop: round((in - out) / 2) with halves to even. */
  g_assert_cmpint(cohort_image_crop_offset(11, 5), ==, 3);
  g_assert_cmpint(cohort_image_crop_offset(12, 5), ==, 4); /* 3.5 */
  g_assert_cmpint(cohort_image_crop_offset(10, 5), ==, 2); /* 2.5 */
  g_assert_cmpint(cohort_image_crop_offset(14, 5), ==, 4); /* 4.5 */
  g_assert_cmpint(cohort_image_crop_offset(16, 5), ==, 6); /* 5.5 */
  g_assert_cmpint(cohort_image_crop_offset(5, 5), ==, 0);

  /* Fit a 6x4 grey image to 4: no resize, columns 1..4 kept. */
  guint8 grid[24];
  for (int i = 0; i < 24; i++)
    grid[i] = (guint8)(i * 10);
  CohortRawImage img = {6, 4, 1, grid};
  guint8 fitted[16];
  g_assert_true(cohort_image_fit(&img, 4, 1, fitted));
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++)
      g_assert_cmpint(fitted[y * 4 + x], ==, grid[y * 6 + x + 1]);
  /* Fit two rows of {0, 70, 140, 210} to 1: resized to 2x1 = {50, 160}, crop from 0. */
  guint8 two_rows[8] = {0, 70, 140, 210, 0, 70, 140, 210};
  img = (CohortRawImage){4, 2, 1, two_rows};
  g_assert_true(cohort_image_fit(&img, 1, 1, fitted));
  g_assert_cmpint(fitted[0], ==, 50);
  /* RGB comes out planar: [C, H, W]. */
  guint8 px[2 * 1 * 3] = {1, 2, 3, 4, 5, 6};
  img = (CohortRawImage){2, 1, 3, px};
  guint8 chw[4 * 3];
  g_assert_true(
      cohort_image_fit(&img, 1, 3, chw)); /* 2x1 -> shorter side 1: no resize, crop column 0 */
  const guint8 want_chw[3] = {1, 2, 3};
  g_assert_cmpmem(chw, 3, want_chw, 3);
}

/* Opens `folder` or fails the test. */
static CohortImageSet *open_ok(const char *folder, int size, int channels)
{
  g_autoptr(GError) error = NULL;
  CohortImageSet *set = cohort_image_set_open(folder, size, channels, FALSE, NULL, &error);
  g_assert_no_error(error);
  g_assert_nonnull(set);
  return set;
}

/* Every image kind and shape against Pillow with torchvision's Resize + CenterCrop
 * arithmetic (tests/pil_images.py), byte for byte, in 1 and 3 channels. */
static void test_against_pillow(void)
{
  if (!g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) ||
      system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") != 0) {
    g_test_skip("Pillow (python3-pil) is not installed");
    return;
  }
  g_autofree char *dir = fx_mkdtemp("pillow");
  g_autofree char *a = fx_subdir(dir, "a"), *b = fx_subdir(dir, "b");
  /* Landscape, portrait, square, smaller and larger than the size, odd margins. */
  const int sizes[][2] = {{40, 30}, {30, 40}, {24, 24}, {7, 5},   {5, 13},
                          {97, 33}, {33, 97}, {25, 26}, {64, 17}, {200, 150}};
  for (guint i = 0; i < G_N_ELEMENTS(sizes); i++) {
    int w = sizes[i][0], h = sizes[i][1];
    g_autofree guint8 *px = g_malloc((gsize)w * h * 3);
    fx_fill(px, (gsize)w * h * 3, i + 1);
    g_autofree char *png_rgb = g_strdup_printf("%s/rgb%02u.png", a, i);
    g_autofree char *png_grey = g_strdup_printf("%s/grey%02u.png", b, i);
    g_autofree char *jpg = g_strdup_printf("%s/photo%02u.JPG", b, i);
    fx_write_png8(png_rgb, w, h, 3, px);
    fx_write_png8(png_grey, w, h, 1, px);
    fx_pattern(px, w, h, 3, (int)i);
    fx_write_jpeg(jpg, w, h, i % 2 ? 1 : 3, px, 90);
  }
  /* A palette image with transparency and an RGBA one. */
  const png_color palette[4] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {30, 60, 90}};
  const png_byte trns[2] = {0, 100};
  guint8 idx[11 * 9], rgba[11 * 9 * 4];
  for (guint i = 0; i < sizeof idx; i++)
    idx[i] = (guint8)(i * 7 % 4);
  fx_fill(rgba, sizeof rgba, 99);
  FxPngSpec spec = {PNG_COLOR_TYPE_PALETTE, 8, FALSE, palette, 4, trns, 2};
  g_autofree char *pal = g_build_filename(a, "palette.png", NULL);
  fx_write_png(pal, 11, 9, &spec, idx, 11);
  spec = (FxPngSpec){PNG_COLOR_TYPE_RGB_ALPHA, 8, TRUE, NULL, 0, NULL, 0};
  g_autofree char *alpha = g_build_filename(a, "rgba.png", NULL);
  fx_write_png(alpha, 11, 9, &spec, rgba, 44);

  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "pil_images.py", NULL);
  for (int channels = 1; channels <= 3; channels += 2) {
    for (int size = 8; size <= 24; size += 16) {
      g_autoptr(CohortImageSet) set = open_ok(dir, size, channels);
      g_autofree char *ref = g_build_filename(dir, "ref.bin", NULL);
      g_autofree char *cmd = g_strdup_printf("/usr/bin/python3 '%s' '%s' %d %s '%s'", script, dir,
                                             size, channels == 1 ? "L" : "RGB", ref);
      g_assert_cmpint(system(cmd), ==, 0);
      g_autofree char *want = NULL;
      gsize len;
      g_assert_true(g_file_get_contents(ref, &want, &len, NULL));
      g_unlink(ref);
      gsize bytes = (gsize)size * size * channels;
      g_assert_cmpuint(len, ==, bytes * cohort_image_set_len(set));
      for (gsize i = 0; i < cohort_image_set_len(set); i++) {
        if (memcmp(cohort_image_set_get_bytes(set, i), want + i * bytes, bytes) != 0)
          g_error("%s differs from Pillow at size %d, %d channels", cohort_image_set_path(set, i),
                  size, channels);
      }
    }
  }
  fx_rm_rf(dir);
}

/* get() gives x / 127.5 - 1 in [C, H, W] order, with the label. */
static void test_scaling(void)
{
  g_autofree char *dir = fx_mkdtemp("scaling");
  g_autofree char *cls = fx_subdir(dir, "only");
  g_autofree char *path = g_build_filename(cls, "x.png", NULL);
  const guint8 px[2 * 2 * 3] = {0, 255, 128, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  fx_write_png8(path, 2, 2, 3, px);
  g_autoptr(CohortImageSet) set = open_ok(dir, 2, 3);
  float out[12];
  int label = -5;
  cohort_image_set_get(set, 0, out, &label);
  g_assert_cmpint(label, ==, 0);
  for (int c = 0; c < 3; c++)
    for (int p = 0; p < 4; p++)
      g_assert_cmpfloat_with_epsilon(out[c * 4 + p], px[p * 3 + c] / 127.5 - 1.0, 1e-6);
  g_assert_cmpfloat(out[0], ==, -1.0f);
  g_assert_cmpfloat(out[4], ==, 1.0f);
  fx_rm_rf(dir);
}

/* Classes in byte order of the folder names, images in byte order within each, other files
 * ignored, hidden ones skipped; the mapping round-trips through its JSON file. */
static void test_class_order(void)
{
  g_autofree char *dir = fx_mkdtemp("classes");
  const char *classes[] = {"b", "a", "B", "10", "9"};
  const char *files[] = {"img2.png", "img10.jpeg", "IMG3.PNG"};
  guint8 px[4 * 4];
  for (guint c = 0; c < G_N_ELEMENTS(classes); c++) {
    g_autofree char *cls = fx_subdir(dir, classes[c]);
    for (guint f = 0; f < G_N_ELEMENTS(files); f++) {
      g_autofree char *path = g_build_filename(cls, files[f], NULL);
      memset(px, (int)(c * 10 + f), sizeof px);
      fx_write_png8(path, 4, 4, 1, px);
    }
    g_autofree char *readme = g_build_filename(cls, "README.txt", NULL);
    g_assert_true(g_file_set_contents(readme, "not an image", -1, NULL));
  }
  g_autofree char *hidden = fx_subdir(dir, ".ipynb_checkpoints");
  g_autofree char *notes = g_build_filename(dir, "notes.txt", NULL);
  g_assert_true(g_file_set_contents(notes, "top-level text is ignored", -1, NULL));

  g_autoptr(CohortImageSet) set = open_ok(dir, 4, 1);
  const char *want_classes[] = {"10", "9", "B", "a", "b", NULL};
  g_assert_cmpstrv(cohort_image_set_class_names(set), want_classes);
  g_assert_cmpint(cohort_image_set_num_classes(set), ==, 5);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 15);
  const char *want_files[] = {"IMG3.PNG", "img10.jpeg", "img2.png"};
  for (gsize i = 0; i < 15; i++) {
    int label = cohort_image_set_label(set, i);
    g_assert_cmpint(label, ==, (int)(i / 3));
    g_autofree char *rel = g_strdup_printf("%s/%s", want_classes[label], want_files[i % 3]);
    g_assert_cmpstr(cohort_image_set_path(set, i), ==, rel);
    /* The pixel value says which class folder and file it came from. */
    guint c = 0, f = 0;
    while (strcmp(classes[c], want_classes[label]) != 0)
      c++;
    while (strcmp(files[f], want_files[i % 3]) != 0)
      f++;
    g_assert_cmpint(cohort_image_set_get_bytes(set, i)[0], ==, c * 10 + f);
  }

  g_autofree char *map = g_build_filename(dir, "classes.json", NULL);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_image_classes_write(cohort_image_set_class_names(set), map, &error));
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(map, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "\"classes\""));
  g_assert_true(strstr(text, "\"10\"") < strstr(text, "\"9\""));
  g_auto(GStrv) back = cohort_image_classes_read(map, &error);
  g_assert_no_error(error);
  g_assert_cmpstrv(back, want_classes);
  fx_rm_rf(dir);
}

static void expect_mapping_error(const char *dir, const char *json, const char *fragment)
{
  g_autofree char *path = g_build_filename(dir, "bad.json", NULL);
  g_assert_true(g_file_set_contents(path, json, -1, NULL));
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = cohort_image_classes_read(path, &error);
  g_assert_null(names);
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT);
  g_assert_nonnull(strstr(error->message, path));
  if (!strstr(error->message, fragment))
    g_error("\"%s\" does not say \"%s\"", error->message, fragment);
}

static void test_mapping_errors(void)
{
  g_autofree char *dir = fx_mkdtemp("mapping");
  expect_mapping_error(dir, "{\"classes\": [\"a\", \"a\"]}", "appears twice");
  expect_mapping_error(dir, "{\"classes\": [\"a\", 3]}", "entry 1");
  expect_mapping_error(dir, "{\"names\": []}", "no \"classes\" array");
  expect_mapping_error(dir, "[1, 2", "not valid JSON");
  g_autofree char *missing = g_build_filename(dir, "missing.json", NULL);
  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_image_classes_read(missing, &error));
  g_assert_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO);
  fx_rm_rf(dir);
}

/* A folder of images without subfolders: no classes, label -1, an empty mapping. */
static void test_flat_folder(void)
{
  g_autofree char *dir = fx_mkdtemp("flat");
  guint8 px[3 * 3 * 3];
  for (int i = 0; i < 3; i++) {
    g_autofree char *path = g_strdup_printf("%s/%d.png", dir, 2 - i);
    memset(px, 50 * i, sizeof px);
    fx_write_png8(path, 3, 3, 3, px);
  }
  g_autoptr(CohortImageSet) set = open_ok(dir, 3, 3);
  g_assert_cmpint(cohort_image_set_num_classes(set), ==, 0);
  g_assert_null(cohort_image_set_class_names(set)[0]);
  g_assert_cmpuint(cohort_image_set_len(set), ==, 3);
  for (gsize i = 0; i < 3; i++) {
    g_assert_cmpint(cohort_image_set_label(set, i), ==, -1);
    g_assert_cmpint(cohort_image_set_get_bytes(set, i)[0], ==, 50 * (2 - i)); /* 0.png first */
  }
  g_autofree char *map = g_build_filename(dir, "classes.json", NULL);
  g_assert_true(cohort_image_classes_write(cohort_image_set_class_names(set), map, NULL));
  g_auto(GStrv) back = cohort_image_classes_read(map, NULL);
  g_assert_nonnull(back);
  g_assert_null(back[0]);
  fx_rm_rf(dir);
}

static void expect_open_error(const char *folder, int code, const char *names, const char *fragment)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortImageSet) set = cohort_image_set_open(folder, 8, 1, TRUE, NULL, &error);
  g_assert_null(set);
  g_assert_error(error, COHORT_DATA_ERROR, code);
  if (!strstr(error->message, names) || !strstr(error->message, fragment))
    g_error("\"%s\" should name %s and say \"%s\"", error->message, names, fragment);
}

/* Layout mistakes fail even with skip_bad, naming the path. */
static void test_layout_errors(void)
{
  g_autofree char *dir = fx_mkdtemp("layout");
  g_autofree char *missing = g_build_filename(dir, "missing", NULL);
  expect_open_error(missing, COHORT_DATA_ERROR_IO, missing, "no such folder");
  g_autofree char *file = g_build_filename(dir, "file.png", NULL);
  guint8 px[4] = {0};
  fx_write_png8(file, 2, 2, 1, px);
  expect_open_error(file, COHORT_DATA_ERROR_IO, file, "not a folder");

  g_autofree char *empty = fx_subdir(dir, "empty");
  expect_open_error(empty, COHORT_DATA_ERROR_TOO_SMALL, empty, "no images");

  g_autofree char *set = fx_subdir(dir, "set");
  g_autofree char *cat = fx_subdir(set, "cat"), *dog = fx_subdir(set, "dog");
  g_autofree char *cat_png = g_build_filename(cat, "1.png", NULL);
  fx_write_png8(cat_png, 2, 2, 1, px);
  g_autofree char *readme = g_build_filename(dog, "README", NULL);
  g_assert_true(g_file_set_contents(readme, "no images here", -1, NULL));
  expect_open_error(set, COHORT_DATA_ERROR_TOO_SMALL, dog, "class folder without images");

  g_autofree char *dog_png = g_build_filename(dog, "1.png", NULL);
  fx_write_png8(dog_png, 2, 2, 1, px);
  g_autofree char *nested = fx_subdir(dog, "puppies");
  expect_open_error(set, COHORT_DATA_ERROR_FORMAT, nested, "inside the class folder");
  g_rmdir(nested);

  g_autofree char *top = g_build_filename(set, "stray.png", NULL);
  fx_write_png8(top, 2, 2, 1, px);
  expect_open_error(set, COHORT_DATA_ERROR_FORMAT, "stray.png", "beside class folders");
  g_unlink(top);
  g_autoptr(CohortImageSet) ok = open_ok(set, 2, 1);
  g_assert_cmpuint(cohort_image_set_len(ok), ==, 2);

  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_image_set_open(set, 2, 2, FALSE, NULL, &error));
  g_assert_nonnull(strstr(error->message, "channels 2"));
  g_clear_error(&error);
  g_assert_null(cohort_image_set_open(set, 0, 3, FALSE, NULL, &error));
  g_assert_nonnull(strstr(error->message, "image_size 0"));
  fx_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/images/decode/png-grey", test_decode_png_grey);
  g_test_add_func("/images/decode/png-colour", test_decode_png_colour);
  g_test_add_func("/images/decode/jpeg", test_decode_jpeg);
  g_test_add_func("/images/resize/known-pixels", test_resize_known_pixels);
  g_test_add_func("/images/pillow", test_against_pillow);
  g_test_add_func("/images/scaling", test_scaling);
  g_test_add_func("/images/classes/order", test_class_order);
  g_test_add_func("/images/classes/mapping-errors", test_mapping_errors);
  g_test_add_func("/images/flat", test_flat_folder);
  g_test_add_func("/images/layout-errors", test_layout_errors);
  return g_test_run();
}
