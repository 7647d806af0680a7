/* Pillow's BILINEAR resampling (antialiased triangle filter, two passes in 8-bit fixed point)
 * and torchvision's CenterCrop offsets; see image-resize.h. Only the rows and columns that
 * the crop keeps are computed: each output pixel depends only on its own coefficients, so
 * the kept pixels are the same bytes as those of the full resize. */
#include "data/image-resize.h"

#include <math.h>
#include <string.h>

#define PRECISION_BITS 22 /* Pillow's: 32 - 8 bits of pixel - 2 bits of headroom */

typedef struct {
  int ksize;     /* coefficients per output position */
  int *first;    /* first source index of each output position */
  int *count;    /* number of source indices */
  gint32 *coeff; /* out_size * ksize fixed-point weights */
} Coeffs;

static double triangle(double x)
{
  if (x < 0.0)
    x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* The filter of one axis, computed as Pillow's precompute_coeffs and
 * normalize_coeffs_8bpc do, in the same order of double operations. */
static void coeffs_init(Coeffs *c, int in_size, int out_size)
{
  double scale = (double)in_size / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * filterscale; /* the triangle's support is 1 */
  c->ksize = (int)ceil(support) * 2 + 1;
  c->first = g_new(int, out_size);
  c->count = g_new(int, out_size);
  c->coeff = g_new0(gint32, (gsize)out_size * c->ksize);
  double *w = g_new(double, c->ksize);
  for (int xx = 0; xx < out_size; xx++) {
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
      c->coeff[(gsize)xx * c->ksize + x] = (gint32)(0.5 + k * (1 << PRECISION_BITS));
    }
    c->first[xx] = xmin;
    c->count[xx] = xmax;
  }
  g_free(w);
}

static void coeffs_clear(Coeffs *c)
{
  g_free(c->first);
  g_free(c->count);
  g_free(c->coeff);
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

/* Horizontal pass over source rows [row0, row0 + nrows): columns [wx, wx + ww) of the
 * resized width into tmp (nrows x ww x ch). */
static void pass_horizontal(const guint8 *src, int sw, int ch, const Coeffs *cx, int row0,
                            int nrows, int wx, int ww, guint8 *tmp)
{
  for (int r = 0; r < nrows; r++) {
    const guint8 *line = src + (gsize)(row0 + r) * sw * ch;
    guint8 *out = tmp + (gsize)r * ww * ch;
    for (int i = 0; i < ww; i++) {
      int xx = wx + i;
      const gint32 *k = cx->coeff + (gsize)xx * cx->ksize;
      const guint8 *p = line + (gsize)cx->first[xx] * ch;
      for (int c = 0; c < ch; c++) {
        gint32 acc = 1 << (PRECISION_BITS - 1);
        for (int x = 0; x < cx->count[xx]; x++)
          acc += p[(gsize)x * ch + c] * k[x];
        out[(gsize)i * ch + c] = clip8(acc);
      }
    }
  }
}

/* Vertical pass: rows [wy, wy + wh) of the resized height from tmp, whose first row is
 * source row row0. */
static void pass_vertical(const guint8 *tmp, int ww, int ch, const Coeffs *cy, int row0, int wy,
                          int wh, guint8 *dst)
{
  gsize stride = (gsize)ww * ch;
  for (int j = 0; j < wh; j++) {
    int yy = wy + j;
    const gint32 *k = cy->coeff + (gsize)yy * cy->ksize;
    const guint8 *base = tmp + (gsize)(cy->first[yy] - row0) * stride;
    guint8 *out = dst + (gsize)j * stride;
    for (gsize i = 0; i < stride; i++) {
      gint32 acc = 1 << (PRECISION_BITS - 1);
      for (int y = 0; y < cy->count[yy]; y++)
        acc += base[(gsize)y * stride + i] * k[y];
      out[i] = clip8(acc);
    }
  }
}

void cohort_image_resize_window(const guint8 *src, int sw, int sh, int channels, int dw, int dh,
                                int wx, int wy, int ww, int wh, guint8 *dst)
{
  g_return_if_fail(wx >= 0 && wy >= 0 && wx + ww <= dw && wy + wh <= dh);
  Coeffs cx = {0}, cy = {0};
  gboolean horizontal = dw != sw, vertical = dh != sh;
  /* Source rows the kept output rows read (all of them when there is no vertical pass). */
  int row0 = wy, nrows = wh;
  if (vertical) {
    coeffs_init(&cy, sh, dh);
    row0 = cy.first[wy];
    int end = 0;
    for (int j = wy; j < wy + wh; j++)
      end = MAX(end, cy.first[j] + cy.count[j]);
    nrows = end - row0;
  }
  gsize tmp_size = (gsize)nrows * ww * channels;
  guint8 *tmp = vertical ? g_malloc(tmp_size) : dst;
  if (horizontal) {
    coeffs_init(&cx, sw, dw);
    pass_horizontal(src, sw, channels, &cx, row0, nrows, wx, ww, tmp);
  } else {
    for (int r = 0; r < nrows; r++)
      memcpy(tmp + (gsize)r * ww * channels, src + ((gsize)(row0 + r) * sw + wx) * channels,
             (gsize)ww * channels);
  }
  if (vertical) {
    pass_vertical(tmp, ww, channels, &cy, row0, wy, wh, dst);
    g_free(tmp);
  }
  coeffs_clear(&cx);
  coeffs_clear(&cy);
}

void cohort_image_fit(const CohortRawImage *img, int size, guint8 *chw)
{
  int rw, rh;
  cohort_image_resized_size(img->width, img->height, size, &rw, &rh);
  int left = cohort_image_crop_offset(rw, size), top = cohort_image_crop_offset(rh, size);
  int ch = img->channels;
  g_autofree guint8 *hwc = g_malloc((gsize)size * size * ch);
  cohort_image_resize_window(img->pixels, img->width, img->height, ch, rw, rh, left, top, size,
                             size, hwc);
  gsize plane = (gsize)size * size;
  for (gsize p = 0; p < plane; p++)
    for (int c = 0; c < ch; c++)
      chw[c * plane + p] = hwc[p * ch + c];
}
