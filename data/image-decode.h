/* Reading one PNG or JPEG file into 8-bit pixels.
 *
 * Libraries: libpng and libjpeg-turbo (Debian's libpng-dev and libjpeg62-turbo-dev), what
 * nearly every image tool and Pillow itself decode with; well kept, small, and free of any
 * GUI stack (gdk-pixbuf would bring GTK's loaders and their dependencies to cluster nodes).
 *
 * Decoding follows what torchvision's default loader (`PIL.Image.open(f).convert("RGB")`, or
 * `.convert("L")` for one channel) gives, so a folder reads the same here as in PyTorch:
 *   - the kind is recognised from the first bytes, not the name (a PNG named .jpg is fine);
 *   - PNG: palette, 1/2/4/8/16-bit grey, RGB, grey+alpha, RGBA, interlaced. Alpha (and a
 *     tRNS transparency chunk) is dropped, not composited, as Pillow's convert does; 16-bit
 *     samples are rounded to 8 bits (v * 255 / 65535, libpng's png_set_scale_16; Pillow
 *     takes the high byte of RGB and clips grey, so 16-bit files may differ by one level);
 *     gamma and colour profiles are ignored, as Pillow does;
 *   - JPEG: grey and YCbCr/RGB through libjpeg's default (islow) decoder; CMYK/YCCK is
 *     refused. Any libjpeg warning (truncated file, corrupt data) is an error: it means
 *     libjpeg had to invent pixels;
 *   - one channel from colour: ITU-R 601 luma in Pillow's fixed point,
 *     L = (19595 R + 38470 G + 7471 B + 32768) >> 16; three from grey: L copied.
 * Errors name the file and say what is wrong (COHORT_DATA_ERROR_IO when it cannot be read,
 * COHORT_DATA_ERROR_FORMAT when it is not a good image). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Limits: a side longer than this, or more decoded bytes, or a bigger file, is refused. The
 * byte limit covers everything a decode allocates: the decoded pixels and the decoder's own
 * buffers (libjpeg's whole-image coefficient arrays for progressive files; libpng keeps its
 * default limits on chunks, 8 MB, so a huge text chunk is skipped, not read). */
#define COHORT_IMAGE_MAX_SIDE  16384
#define COHORT_IMAGE_MAX_BYTES ((gsize)256 << 20)

typedef struct {
  int width, height;
  int channels;   /* 1 or 3 */
  guint8 *pixels; /* height rows of width * channels bytes, interleaved (HWC) */
} CohortRawImage;

/* Frees the pixels; the struct can be reused. */
void cohort_raw_image_clear(CohortRawImage *img);

/* Decodes `len` bytes of a PNG or JPEG image to `channels` (1 or 3) channels. `name` is the
 * file name used in error messages. On failure *out is left empty. */
gboolean cohort_image_decode(const char *name, const guint8 *data, gsize len, int channels,
                             CohortRawImage *out, GError **error);

/* Reads and decodes the file at `path` (at most COHORT_IMAGE_MAX_BYTES; a folder, an empty
 * or unreadable file is an error naming it). */
gboolean cohort_image_load(const char *path, int channels, CohortRawImage *out, GError **error);

/* The same, but a grey image asked for at 3 channels stays grey (out->channels 1):
 * cohort_image_fit brings it to 3 planes after the resize, so the full-size image is never
 * held three times over. */
gboolean cohort_image_load_native(const char *path, int channels, CohortRawImage *out,
                                  GError **error);

/* Encodes `pixels` (height rows of width * channels bytes, channels 1 = grey or 3 = RGB) as
 * an 8-bit PNG (zlib level 9). The output has no time stamp or text chunk, so the same pixels
 * always give the same bytes (for one libpng and zlib). */
GBytes *cohort_image_encode_png(const guint8 *pixels, int width, int height, int channels,
                                GError **error);
/* The same, written to `path` through a temporary file that is fsync'ed and renamed into
 * place (a crash leaves the old file or the new one). Errors name the file. */
gboolean cohort_image_write_png(const char *path, const guint8 *pixels, int width, int height,
                                int channels, GError **error);

/* Internal to data/: the decoders of each kind, on bytes already read. */
gboolean cohort_png_decode(const char *name, const guint8 *data, gsize len, CohortRawImage *out,
                           GError **error);
gboolean cohort_jpeg_decode(const char *name, const guint8 *data, gsize len, CohortRawImage *out,
                            GError **error);
/* Checks a declared size against the limits (error names the file and the size). */
gboolean cohort_image_check_size(const char *name, const char *kind, guint64 width, guint64 height,
                                 int channels, GError **error);

G_END_DECLS
