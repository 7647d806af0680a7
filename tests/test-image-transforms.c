/* The ResNet's image pipeline (engine/model/data-source.c with the resnet keys) against
 * torchvision's transforms on PIL images (tests/torch_transforms_ref.py), float for float:
 *  - evaluation: Resize(image_resize) + CenterCrop(image_size) + ToTensor + Normalize with
 *    ImageNet's mean and standard deviation;
 *  - training with augment resized_crop_flip: RandomResizedCrop's window and flip as Cohort
 *    draws them, cut from the Resize + CenterCrop(image_resize) square and resized by
 *    F.resized_crop (Pillow's bilinear filter), F.hflip, ToTensor, Normalize;
 * and the draws themselves: every window inside the image, its area 8–100 % and its aspect
 * ratio 3/4–4/3 up to rounding, the fallback never needed on a square, flips fair. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/augment.h"
#include "engine/base/fileio.h"
#include "engine/model/data-source.h"
#include "torch-ref.h"

enum { RESIZE = 28, SIZE = 24 };
#define MEAN "0.485,0.456,0.406"
#define STD  "0.229,0.224,0.225"

static char *dir;

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
}

static CohortDataSource *open_source(const char *augment)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_autofree char *data = g_build_filename(dir, "images", NULL);
  g_autofree char *train = g_strconcat("train_data=", data, NULL);
  g_autofree char *aug = g_strconcat("augment=", augment, NULL);
  const char *sets[] = {"model=resnet",
                        "data_format=images",
                        train,
                        "image_channels=3",
                        "image_size=24",
                        "image_resize=28",
                        "image_mean=" MEAN,
                        "image_std=" STD,
                        aug,
                        "num_classes=2",
                        NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  CohortDataSource *s = cohort_data_source_open(cfg, data, NULL, &error);
  g_assert_no_error(error);
  return s;
}

/* The reference's floats, `n` images of [3, SIZE, SIZE]. */
static float *reference(const char *const *args, gsize n)
{
  g_free(torch_ref_run("torch_transforms_ref.py", args));
  const char *out = args[g_strv_length((char **)args) - 1];
  gchar *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(out, &bytes, &len, NULL));
  g_assert_cmpuint(len, ==, n * 3 * SIZE * SIZE * sizeof(float));
  return (float *)bytes;
}

static void expect_equal(const float *ours, const float *ref, gsize n, const char *what)
{
  for (gsize i = 0; i < n; i++)
    if (ours[i] != ref[i])
      g_error("%s: value %zu is %.9g, torchvision's %.9g", what, i, ours[i], ref[i]);
}

static void test_eval(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch and torchvision are not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortDataSource) s = open_source("resized_crop_flip");
  g_assert_cmpuint(cohort_data_source_count(s), ==, 2);
  g_autoptr(CohortBatch) b = cohort_data_source_batch_new(s, 2);
  b->epoch = -1; /* evaluation: the centre crop, never augmented */
  for (int i = 0; i < 2; i++)
    g_assert_true(cohort_data_source_load(s, b, i, (guint64)i, NULL));
  g_autofree char *images = g_build_filename(dir, "images", NULL);
  g_autofree char *out = g_build_filename(dir, "eval.bin", NULL);
  g_autofree float *ref =
      reference((const char *const[]){"eval", images, "28", "24", MEAN, STD, out, NULL}, 2);
  expect_equal(b->images, ref, 2 * 3 * SIZE * SIZE, "Resize + CenterCrop + Normalize");
  g_assert_cmpint(b->labels[0], ==, 0);
  g_assert_cmpint(b->labels[1], ==, 1);
}

static void test_resized_crop(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch and torchvision are not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortDataSource) s = open_source("resized_crop_flip");
  g_autoptr(CohortBatch) b = cohort_data_source_batch_new(s, 2);
  g_autofree char *params = g_build_filename(dir, "params.txt", NULL);
  g_autofree char *images = g_build_filename(dir, "images", NULL);
  g_autofree char *out = g_build_filename(dir, "crop.bin", NULL);
  /* six epochs: both images drawn flipped and not, at different windows */
  enum { EPOCHS = 6 };
  size_t D = 3 * SIZE * SIZE;
  g_autofree float *ours = g_new(float, EPOCHS * 2 * D);
  GString *text = g_string_new(NULL);
  for (int epoch = 0; epoch < EPOCHS; epoch++) {
    b->epoch = epoch;
    for (int i = 0; i < 2; i++) {
      g_assert_true(cohort_data_source_load(s, b, i, (guint64)i, NULL));
      int top, left, h, w;
      gboolean flip;
      /* the data source's seed is the config's default */
      cohort_augment_draw_resized_crop(1337, (guint64)epoch, (guint64)i, RESIZE, RESIZE, &top,
                                       &left, &h, &w, &flip);
      g_string_append_printf(text, "%d %d %d %d %d %d\n", i, top, left, h, w, flip);
    }
    memcpy(ours + (size_t)epoch * 2 * D, b->images, 2 * D * sizeof(float));
  }
  g_assert_true(g_file_set_contents(params, text->str, -1, NULL));
  g_test_message("windows (image top left h w flip):\n%s", text->str);
  g_string_free(text, TRUE);
  g_autofree float *ref = reference(
      (const char *const[]){"crop", images, "28", "24", MEAN, STD, params, out, NULL}, EPOCHS * 2);
  expect_equal(ours, ref, EPOCHS * 2 * D, "RandomResizedCrop + flip");
}

/* The draws on a 28 × 28 square: inside, within torchvision's area and ratio ranges up to the
 * rounding of the sides, fair flips, and spread over positions. */
static void test_draws(void)
{
  enum { N = 4000, S = 28 };
  int flips = 0, corners = 0;
  for (guint64 i = 0; i < N; i++) {
    int top, left, h, w;
    gboolean flip;
    cohort_augment_draw_resized_crop(9, 1, i, S, S, &top, &left, &h, &w, &flip);
    g_assert_true(h >= 1 && w >= 1 && top >= 0 && left >= 0 && top + h <= S && left + w <= S);
    /* a side rounded by at most half a pixel each way */
    double area_lo = 0.08 * S * S;
    g_assert_cmpfloat((w + 0.5) * (h + 0.5), >=, area_lo);
    g_assert_cmpfloat((w - 0.5) * (h - 0.5), <=, (double)S * S);
    g_assert_cmpfloat((w + 0.5) / (h - 0.5), >=, 0.75);
    g_assert_cmpfloat((w - 0.5) / (h + 0.5), <=, 4.0 / 3.0);
    flips += flip;
    corners += top == 0 && left == 0;
  }
  g_assert_cmpint(abs(flips - N / 2), <, 200);
  g_assert_cmpint(corners, <, N / 4);
  /* the same key, the same draw */
  int a[4], c[4];
  gboolean fa, fc;
  cohort_augment_draw_resized_crop(9, 1, 17, S, S, &a[0], &a[1], &a[2], &a[3], &fa);
  cohort_augment_draw_resized_crop(9, 1, 17, S, S, &c[0], &c[1], &c[2], &c[3], &fc);
  g_assert_cmpmem(a, sizeof a, c, sizeof c);
  g_assert_cmpint(fa, ==, fc);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_autoptr(GError) error = NULL;
  dir = g_dir_make_tmp("cohort-test-transforms-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *images = g_build_filename(dir, "images", NULL);
  if (have_torch())
    g_free(torch_ref_run("torch_transforms_ref.py", (const char *const[]){"make", images, NULL}));
  g_test_add_func("/image-transforms/eval-resize-centre-crop-normalise", test_eval);
  g_test_add_func("/image-transforms/random-resized-crop-flip", test_resized_crop);
  g_test_add_func("/image-transforms/draws", test_draws);
  int rc = g_test_run();
  cohort_remove_tree(dir);
  g_free(dir);
  return rc;
}
