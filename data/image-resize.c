/* Pillow's BILINEAR resampling (antialiased triangle filter, two passes in 8-bit fixed point)
 * and torchvision's CenterCrop offsets; see image-resize.h. Only the rows and columns that
 * the crop keeps are computed: each output pixel depends only on its own coefficients, so
 * the kept pixels are the same bytes as those of the full resize.
 *
 * Memory follows the output, not the source: coefficients exist only for the kept output
 * positions, and the vertical pass reads the horizontally resized source rows from a ring of
 * as many rows as one output row needs (the filter's support), so a 1 x 16384 image enlarged
 * to a 4096-wide crop costs a few rows, not a 67-million-row filter. */
#include "data/image-resize.h"

#include <math.h>
#include <string.h>

#define PRECISION_BITS 22 /* Pillow's: 32 - 8 bits of pixel - 2 bits of headroom */

typedef struct {
  int ksize;     /* coefficients per output position */
  int *first;    /* first source index of each kept output position */
  int *count;    /* number of source indices */
  gint32 *coeff; /* n * ksize fixed-point weights */
} Coeffs;

static double triangle(double x)
{
  if (x < 0.0)
    x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* The filter of one axis for output positions [out0, out0 + n), computed as Pillow's
 * precompute_coeffs and normalize_coeffs_8bpc do, in the same order of double operations.
 * FALSE when the memory cannot be had. */
static gboolean coeffs_init(Coeffs *c, int in_size, int out_size, int out0, int n)
{
  double scale = (double)in_size / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * filterscale; /* the triangle's support is 1 */
  c->ksize = (int)ceil(support) * 2 + 1;
  c->first = g_try_new(int, MAX(n, 1));
  c->count = g_try_new(int, MAX(n, 1));
  c->coeff = g_try_new0(gint32, (gsize)MAX(n, 1) * c->ksize);
  double *w = g_try_new(double, c->ksize);
  if (!c->first || !c->count || !c->coeff || !w) {
    g_free(w);
    return FALSE;
  }
  for (int i = 0; i < n; i++) {
    int xx = out0 + i;
    double center = (xx + 0.5) * scale;
    double ss = 1.0 / filterscale;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0)
      xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_size)
      xmax = in_size;
    xmax -= xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; x++) {
      w[x] = triangle((x + xmin - center + 0.5) * ss);
      total += w[x];
    }
    for (int x = 0; x < xmax; x++) {
      double k = total != 0.0 ? w[x] / total : w[x];
      c->coeff[(gsize)i * c->ksize + x] = (gint32)(0.5 + k * (1 << PRECISION_BITS));
    }
    c->first[i] = xmin;
    c->count[i] = xmax;
  }
  g_free(w);
  return TRUE;
}

static void coeffs_clear(Coeffs *c)
{
  g_clear_pointer(&c->first, g_free);
  g_clear_pointer(&c->count, g_free);
  g_clear_pointer(&c->coeff, g_free);
}

static guint8 clip8(gint32 v)
{
  if (v >= (1 << PRECISION_BITS << 8))
    return 255;
  if (v <= 0)
    return 0;
  return (guint8)(v >> PRECISION_BITS);
}

void cohort_image_resized_size(int width, int height, int size, int *out_width, int *out_height)
{
  int shorter = MIN(width, height), longer = MAX(width, height);
  /* Python's int(size * long / short): an exact product, one rounded division, truncation. */
  int new_long = (int)((double)((gint64)size * longer) / shorter);
  *out_width = width <= height ? size : new_long;
  *out_height = width <= height ? new_long : size;
}

int cohort_image_crop_offset(int in, int out)
{
  int d = in - out;
  int half = d / 2;
  if (d % 2 == 0)
    return half;
  return half % 2 == 0 ? half : half + 1; /* Python's round(k + 0.5): to the even one */
}

/* Source row `row` resized horizontally to the kept columns [wx, wx + ww) (cx covers exactly
 * those), or copied when there is no horizontal pass. */
static void horizontal_row(const guint8 *src, int sw, int ch, const Coeffs *cx, int row, int wx,
                           int ww, guint8 *out)
{
  const guint8 *line = src + (gsize)row * sw * ch;
  if (!cx) {
    memcpy(out, line + (gsize)wx * ch, (gsize)ww * ch);
    return;
  }
  for (int i = 0; i < ww; i++) {
    const gint32 *k = cx->coeff + (gsize)i * cx->ksize;
    const guint8 *p = line + (gsize)cx->first[i] * ch;
    for (int c = 0; c < ch; c++) {
      gint32 acc = 1 << (PRECISION_BITS - 1);
      for (int x = 0; x < cx->count[i]; x++)
        acc += p[(gsize)x * ch + c] * k[x];
      out[(gsize)i * ch + c] = clip8(acc);
    }
  }
}

/* The vertical pass over a ring of horizontally resized rows: output row j needs source rows
 * [first[j], first[j] + count[j]), which only move forward with j and number at most ksize,
 * so source row r lives in slot r % ksize until no later output row needs it. Integer sums:
 * the order of the terms does not change a byte. */
static gboolean resize_vertical(const guint8 *src, int sw, int ch, const Coeffs *cx,
                                const Coeffs *cy, int wx, int ww, int wh, guint8 *dst)
{
  gsize stride = (gsize)ww * ch;
  guint8 *ring = g_try_malloc(stride * cy->ksize);
  gint32 *acc = g_try_new(gint32, MAX(stride, 1));
  if (!ring || !acc) {
    g_free(ring);
    g_free(acc);
    return FALSE;
  }
  int done = 0; /* source rows [0, done) have been through the horizontal pass */
  for (int j = 0; j < wh; j++) {
    int first = cy->first[j], end = first + cy->count[j];
    for (done = MAX(done, first); done < end; done++)
      horizontal_row(src, sw, ch, cx, done, wx, ww, ring + (gsize)(done % cy->ksize) * stride);
    for (gsize i = 0; i < stride; i++)
      acc[i] = 1 << (PRECISION_BITS - 1);
    const gint32 *k = cy->coeff + (gsize)j * cy->ksize;
    for (int y = 0; y < cy->count[j]; y++) {
      const guint8 *row = ring + (gsize)((first + y) % cy->ksize) * stride;
      for (gsize i = 0; i < stride; i++)
        acc[i] += row[i] * k[y];
    }
    guint8 *out = dst + (gsize)j * stride;
    for (gsize i = 0; i < stride; i++)
      out[i] = clip8(acc[i]);
  }
  g_free(ring);
  g_free(acc);
  return TRUE;
}

gboolean cohort_image_resize_window(const guint8 *src, int sw, int sh, int channels, int dw, int dh,
                                    int wx, int wy, int ww, int wh, guint8 *dst)
{
  g_return_val_if_fail(wx >= 0 && wy >= 0 && wx + ww <= dw && wy + wh <= dh, FALSE);
  Coeffs cx = {0}, cy = {0};
  gboolean horizontal = dw != sw, vertical = dh != sh, ok = TRUE;
  if (horizontal)
    ok = coeffs_init(&cx, sw, dw, wx, ww);
  if (ok && vertical)
    ok = coeffs_init(&cy, sh, dh, wy, wh);
  if (ok && vertical) {
    ok = resize_vertical(src, sw, channels, horizontal ? &cx : NULL, &cy, wx, ww, wh, dst);
  } else if (ok) {
    gsize stride = (gsize)ww * channels;
    for (int j = 0; j < wh; j++)
      horizontal_row(src, sw, channels, horizontal ? &cx : NULL, wy + j, wx, ww,
                     dst + (gsize)j * stride);
  }
  coeffs_clear(&cx);
  coeffs_clear(&cy);
  return ok;
}

gboolean cohort_image_fit(const CohortRawImage *img, int size, int channels, guint8 *chw)
{
  g_return_val_if_fail(img->channels == channels || (img->channels == 1 && channels == 3), FALSE);
  int rw, rh;
  cohort_image_resized_size(img->width, img->height, size, &rw, &rh);
  int left = cohort_image_crop_offset(rw, size), top = cohort_image_crop_offset(rh, size);
  int ch = img->channels;
  g_autofree guint8 *hwc = g_try_malloc((gsize)size * size * ch);
  if (!hwc || !cohort_image_resize_window(img->pixels, img->width, img->height, ch, rw, rh, left,
                                          top, size, size, hwc))
    return FALSE;
  gsize plane = (gsize)size * size;
  for (gsize p = 0; p < plane; p++)
    for (int c = 0; c < ch; c++)
      chw[c * plane + p] = hwc[p * ch + c];
  /* Grey brought to RGB: the three planes are the same (Pillow copies L to R, G and B before
   * resizing, and the filter treats each channel alike, so copying after gives its bytes). */
  for (int c = ch; c < channels; c++)
    memcpy(chw + c * plane, chw, plane);
  return TRUE;
}
