/* Image augmentation for training, on one [C, H, W] float image already scaled to [-1, 1]:
 *   none       the image unchanged;
 *   crop       torchvision's RandomCrop(size, padding=4): pad 4 pixels on every side, then
 *              cut an H x W window at a random offset (0..8 in each direction);
 *   crop_flip  crop, then RandomHorizontalFlip(p=0.5) — the CIFAR ResNet recipe;
 *   flip       RandomHorizontalFlip(p=0.5) alone (what latent training can use: each image's
 *              mirrored latent is cached beside it).
 * The padding is black, -1.0 here: in the torchvision recipe RandomCrop pads the PIL image
 * with 0 before ToTensor and Normalize(0.5, 0.5) map 0 to -1, so -1 gives the same tensors.
 * The draws are a pure function of (seed, epoch, sample index) through cohort_sample_rng
 * (stream COHORT_RNG_STREAM_AUGMENT): never of the rank or of the order of calls, so N ranks
 * augment exactly as one process does. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  COHORT_AUGMENT_NONE,
  COHORT_AUGMENT_CROP,
  COHORT_AUGMENT_CROP_FLIP,
  COHORT_AUGMENT_FLIP,
} CohortAugment;

#define COHORT_AUGMENT_PADDING   4
#define COHORT_AUGMENT_PAD_VALUE (-1.0f)

/* "none", "crop", "crop_flip", "flip" to the kind; FALSE for any other name. */
gboolean cohort_augment_from_name(const char *name, CohortAugment *kind);
/* The name of a kind ("none", "crop", "crop_flip", "flip"). */
const char *cohort_augment_name(CohortAugment kind);

/* The draws for one sample: the window's offset into the padded image (*top, *left in
 * 0..2*COHORT_AUGMENT_PADDING; COHORT_AUGMENT_PADDING, i.e. no shift, for none) and whether
 * it is mirrored. Drawn in torchvision's order: top, left, then the flip (flip alone: only the
 * flip). */
void cohort_augment_draw(CohortAugment kind, guint64 seed, guint64 epoch, guint64 index, int *top,
                         int *left, gboolean *flip);

/* Writes the augmented image of sample `index` to `out` ([C, H, W]; must not overlap `in`):
 * out[c][y][x] = padded[c][y + top][x' + left], x' = flip ? W - 1 - x : x, where padded is
 * `in` with COHORT_AUGMENT_PADDING pixels of COHORT_AUGMENT_PAD_VALUE around it. */
void cohort_augment_apply(CohortAugment kind, guint64 seed, guint64 epoch, guint64 index, int C,
                          int H, int W, const float *in, float *out);

G_END_DECLS
