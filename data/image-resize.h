/* Fitting a decoded image to image_size x image_size: torchvision's
 * Resize(image_size) followed by CenterCrop(image_size) on a PIL image, pixel for pixel.
 *
 * Resize: the shorter side becomes image_size and the longer one
 * int(image_size * long / short) (truncated, as torchvision computes it). The filter is
 * Pillow's BILINEAR, which is what Resize uses on PIL images: a triangle filter whose support
 * grows with the scale factor when shrinking (so downscaling averages every source pixel,
 * "antialiased"), plain bilinear interpolation when enlarging. Like Pillow it runs a
 * horizontal pass then a vertical one, each with coefficients rounded to 22-bit fixed point
 * and a result rounded and clamped to 8 bits, so the bytes equal Pillow's.
 * CenterCrop: the window starts at round((size_in - image_size) / 2) on each axis, with
 * Python's round (halves to even), as torchvision's center_crop does. */
#pragma once

#include <glib.h>
#include "data/image-decode.h"

G_BEGIN_DECLS

/* The size after Resize(size): the shorter side `size`, the longer one scaled and truncated. */
void cohort_image_resized_size(int width, int height, int size, int *out_width, int *out_height);

/* CenterCrop's offset along one axis: round((in - out) / 2), halves to even. */
int cohort_image_crop_offset(int in, int out);

/* Resizes `src` (HWC, `channels` interleaved, sw x sh) to dw x dh and writes only the window
 * of ww x wh pixels starting at (wx, wy) of the result into `dst` (HWC). The window's bytes
 * are those of the full resize. Besides `dst` it allocates in proportion to the window and
 * the filter's support, never to dw x dh; FALSE when even that memory cannot be had. */
gboolean cohort_image_resize_window(const guint8 *src, int sw, int sh, int channels, int dw, int dh,
                                    int wx, int wy, int ww, int wh, guint8 *dst);

/* Resize + CenterCrop to size x size, written planar ([C, size, size], uint8) to `chw` with
 * `channels` planes: img->channels itself, or 3 from a grey image (its plane copied, which
 * gives the bytes of converting to RGB first). FALSE when out of memory. */
gboolean cohort_image_fit(const CohortRawImage *img, int size, int channels, guint8 *chw);

G_END_DECLS
