/* Random crop with padding and horizontal flip, keyed by (seed, epoch, sample index). */
#include "data/augment.h"

#include <string.h>
#include "data/example-rng.h"

static const char *const names[] = {"none", "crop", "crop_flip", "flip"};

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
  if (kind == COHORT_AUGMENT_NONE)
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
                          int H, int W, const float *in, float *out)
{
  int top, left;
  gboolean flip;
  cohort_augment_draw(kind, seed, epoch, index, &top, &left, &flip);
  /* Source row/column of output (y, x) in the unpadded image; outside it is padding. */
  int dy = top - COHORT_AUGMENT_PADDING, dx = left - COHORT_AUGMENT_PADDING;
  for (int c = 0; c < C; c++) {
    const float *src = in + (gsize)c * H * W;
    float *dst = out + (gsize)c * H * W;
    for (int y = 0; y < H; y++) {
      int sy = y + dy;
      for (int x = 0; x < W; x++) {
        int sx = (flip ? W - 1 - x : x) + dx;
        gboolean inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
        dst[(gsize)y * W + x] = inside ? src[(gsize)sy * W + sx] : COHORT_AUGMENT_PAD_VALUE;
      }
    }
  }
}
