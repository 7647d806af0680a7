/* Random crop with padding, RandomResizedCrop and horizontal flip, keyed by (seed, epoch,
 * example index). */
#include "data/augment.h"

#include <math.h>
#include <string.h>
#include "data/example-rng.h"
#include "data/image-resize.h"

static const char *const names[] = {"none", "crop", "crop_flip", "resized_crop_flip", "flip"};

gboolean cohort_augment_from_name(const char *name, CohortAugment *kind)
{
  for (guint i = 0; name && i < G_N_ELEMENTS(names); i++) {
    if (strcmp(name, names[i]) == 0) {
      *kind = (CohortAugment)i;
      return TRUE;
    }
  }
  return FALSE;
}

const char *cohort_augment_name(CohortAugment kind)
{
  g_return_val_if_fail((guint)kind < G_N_ELEMENTS(names), NULL);
  return names[kind];
}

void cohort_augment_draw(CohortAugment kind, guint64 seed, guint64 epoch, guint64 index, int *top,
                         int *left, gboolean *flip)
{
  *top = *left = COHORT_AUGMENT_PADDING;
  *flip = FALSE;
  if (kind != COHORT_AUGMENT_CROP && kind != COHORT_AUGMENT_CROP_FLIP &&
      kind != COHORT_AUGMENT_FLIP)
    return;
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, seed, epoch, index, COHORT_RNG_STREAM_AUGMENT);
  if (kind == COHORT_AUGMENT_FLIP) {
    *flip = cohort_example_rng_below(&rng, 2) == 1;
    return;
  }
  *top = (int)cohort_example_rng_below(&rng, 2 * COHORT_AUGMENT_PADDING + 1);
  *left = (int)cohort_example_rng_below(&rng, 2 * COHORT_AUGMENT_PADDING + 1);
  if (kind == COHORT_AUGMENT_CROP_FLIP)
    *flip = cohort_example_rng_below(&rng, 2) == 1;
}

void cohort_augment_apply(CohortAugment kind, guint64 seed, guint64 epoch, guint64 index, int C,
                          int H, int W, const float *in, const float *pad, float *out)
{
  int top, left;
  gboolean flip;
  cohort_augment_draw(kind, seed, epoch, index, &top, &left, &flip);
  /* Source row/column of output (y, x) in the unpadded image; outside it is padding. */
  int dy = top - COHORT_AUGMENT_PADDING, dx = left - COHORT_AUGMENT_PADDING;
  for (int c = 0; c < C; c++) {
    const float *src = in + (gsize)c * H * W;
    float *dst = out + (gsize)c * H * W, fill = pad ? pad[c] : COHORT_AUGMENT_PAD_VALUE;
    for (int y = 0; y < H; y++) {
      int sy = y + dy;
      for (int x = 0; x < W; x++) {
        int sx = (flip ? W - 1 - x : x) + dx;
        gboolean inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
        dst[(gsize)y * W + x] = inside ? src[(gsize)sy * W + sx] : fill;
      }
    }
  }
}

/* Python's round(): to nearest, halves to even. */
static int round_even(double v)
{
  return (int)nearbyint(v);
}

void cohort_augment_draw_resized_crop(guint64 seed, guint64 epoch, guint64 index, int H, int W,
                                      int *top, int *left, int *h, int *w, gboolean *flip)
{
  const double scale_lo = 0.08, scale_hi = 1.0;
  const double log_lo = log(3.0 / 4.0), log_hi = log(4.0 / 3.0);
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, seed, epoch, index, COHORT_RNG_STREAM_AUGMENT);
  double area = (double)H * W;
  gboolean found = FALSE;
  for (int attempt = 0; attempt < 10 && !found; attempt++) {
    double target = area * (scale_lo + (scale_hi - scale_lo) * cohort_example_rng_uniform(&rng));
    double aspect = exp(log_lo + (log_hi - log_lo) * cohort_example_rng_uniform(&rng));
    int cw = round_even(sqrt(target * aspect)), ch = round_even(sqrt(target / aspect));
    if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
      *h = ch;
      *w = cw;
      *top = (int)cohort_example_rng_below(&rng, (guint32)(H - ch + 1));
      *left = (int)cohort_example_rng_below(&rng, (guint32)(W - cw + 1));
      found = TRUE;
    }
  }
  if (!found) { /* the central crop, its ratio clamped to the range */
    double in_ratio = (double)W / H;
    *w = W;
    *h = H;
    if (in_ratio < 3.0 / 4.0)
      *h = round_even(W / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0)
      *w = round_even(H * (4.0 / 3.0));
    *top = (H - *h) / 2;
    *left = (W - *w) / 2;
  }
  *flip = cohort_example_rng_below(&rng, 2) == 1;
}

void cohort_augment_resized_crop(guint64 seed, guint64 epoch, guint64 index, int C, int H, int W,
                                 const guint8 *in, int size, guint8 *out)
{
  int top, left, h, w;
  gboolean flip;
  cohort_augment_draw_resized_crop(seed, epoch, index, H, W, &top, &left, &h, &w, &flip);
  g_autofree guint8 *window = g_new(guint8, (gsize)h * w);
  for (int c = 0; c < C; c++) {
    const guint8 *src = in + (gsize)c * H * W;
    guint8 *dst = out + (gsize)c * size * size;
    for (int y = 0; y < h; y++)
      memcpy(window + (gsize)y * w, src + (gsize)(top + y) * W + left, (gsize)w);
    /* Pillow resizes each band alike, so one plane at a time gives its bytes. */
    cohort_image_resize_window(window, w, h, 1, size, size, 0, 0, size, size, dst);
    if (!flip)
      continue;
    for (int y = 0; y < size; y++)
      for (int x = 0; x < size / 2; x++) {
        guint8 t = dst[(gsize)y * size + x];
        dst[(gsize)y * size + x] = dst[(gsize)y * size + size - 1 - x];
        dst[(gsize)y * size + size - 1 - x] = t;
      }
  }
}
