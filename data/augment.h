/* Image augmentation for training:
 *   none       the image unchanged;
 *   crop       torchvision's RandomCrop(size, padding=4): pad 4 pixels on every side, then
 *              cut an H x W window at a random offset (0..8 in each direction);
 *   crop_flip  crop, then RandomHorizontalFlip(p=0.5) — the CIFAR ResNet recipe;
 *   resized_crop_flip  torchvision's RandomResizedCrop(size) (a window of 8–100 % of the area
 *              with aspect ratio 3/4–4/3, resized to size × size) then RandomHorizontalFlip —
 *              the ImageNet recipe;
 *   flip       RandomHorizontalFlip(p=0.5) alone (what latent training can use: each image's
 *              mirrored latent is cached beside it).
 * crop, crop_flip and flip work on a [C, H, W] float image already normalised; the padding is
 * black, i.e. what ToTensor and Normalize make of a 0 pixel, (0 - mean) / std: torchvision's
 * RandomCrop pads the PIL image with 0 before them. resized_crop_flip works on the uint8
 * pixels, before normalisation, as torchvision does on a PIL image.
 * The draws are a pure function of (seed, epoch, example index) through cohort_example_rng
 * (stream COHORT_RNG_STREAM_AUGMENT): never of the rank or of the order of calls, so N ranks
 * augment exactly as one process does. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  COHORT_AUGMENT_NONE,
  COHORT_AUGMENT_CROP,
  COHORT_AUGMENT_CROP_FLIP,
  COHORT_AUGMENT_RESIZED_CROP_FLIP,
  COHORT_AUGMENT_FLIP,
} CohortAugment;

#define COHORT_AUGMENT_PADDING   4
#define COHORT_AUGMENT_PAD_VALUE (-1.0f)

/* "none", "crop", "crop_flip", "resized_crop_flip", "flip" to the kind; FALSE for any other
 * name. */
gboolean cohort_augment_from_name(const char *name, CohortAugment *kind);
/* The name of a kind. */
const char *cohort_augment_name(CohortAugment kind);

/* The draws of crop, crop_flip and flip for one example: the window's offset into the padded
 * image (*top, *left in 0..2*COHORT_AUGMENT_PADDING; COHORT_AUGMENT_PADDING, i.e. no shift, for
 * flip and any other kind) and whether it is mirrored. Drawn in torchvision's order: top, left,
 * the flip (flip alone: only the flip). */
void cohort_augment_draw(CohortAugment kind, guint64 seed, guint64 epoch, guint64 index, int *top,
                         int *left, gboolean *flip);

/* crop, crop_flip and flip: writes the augmented image of example `index` to `out` ([C, H, W]; must
 * not overlap `in`): out[c][y][x] = padded[c][y + top][x' + left], x' = flip ? W - 1 - x : x,
 * where padded is `in` with COHORT_AUGMENT_PADDING pixels of pad[c] around it (pad NULL:
 * COHORT_AUGMENT_PAD_VALUE, black under Normalize(0.5, 0.5)). Other kinds copy `in`. */
void cohort_augment_apply(CohortAugment kind, guint64 seed, guint64 epoch, guint64 index, int C,
                          int H, int W, const float *in, const float *pad, float *out);

/* RandomResizedCrop's draw for sample `index` on an H x W image, as torchvision 0.14's
 * get_params with scale (0.08, 1) and ratio (3/4, 4/3): up to 10 tries of an area fraction and
 * a log-uniform aspect ratio whose rounded window fits, at a uniform position; else the centre
 * crop of the image clamped to the ratio range. Then the flip. The window is rows
 * [*top, *top + *h), columns [*left, *left + *w). */
void cohort_augment_draw_resized_crop(guint64 seed, guint64 epoch, guint64 index, int H, int W,
                                      int *top, int *left, int *h, int *w, gboolean *flip);

/* resized_crop_flip on uint8 pixels: the window of sample `index` of `in` ([C, H, W]) resized
 * to size x size with Pillow's bilinear filter (data/image-resize.h: torchvision's resized_crop
 * on a PIL image, byte for byte), mirrored when drawn so, into `out` ([C, size, size]). */
void cohort_augment_resized_crop(guint64 seed, guint64 epoch, guint64 index, int C, int H, int W,
                                 const guint8 *in, int size, guint8 *out);

G_END_DECLS
