/* Reading an image file: limits, recognising the kind from its first bytes, and the
 * conversion to the wanted number of channels. The decoders are in image-png.c and
 * image-jpeg.c. */
#include "data/image-decode.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include "data/dataset.h"
#include "engine/base/fileio.h"

void cohort_raw_image_clear(CohortRawImage *img)
{
  g_clear_pointer(&img->pixels, g_free);
  img->width = img->height = img->channels = 0;
}

gboolean cohort_image_check_size(const char *name, const char *kind, guint64 width, guint64 height,
                                 int channels, GError **error)
{
  if (width < 1 || height < 1) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: %s image of %" G_GUINT64_FORMAT "x%" G_GUINT64_FORMAT
                " pixels (at least 1x1 is needed)",
                name, kind, width, height);
    return FALSE;
  }
  if (width > COHORT_IMAGE_MAX_SIDE || height > COHORT_IMAGE_MAX_SIDE ||
      width * height * channels > COHORT_IMAGE_MAX_BYTES) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: %s image of %" G_GUINT64_FORMAT "x%" G_GUINT64_FORMAT
                " pixels is too large (at most %dx%d and %" G_GSIZE_FORMAT " MiB decoded)",
                name, kind, width, height, COHORT_IMAGE_MAX_SIDE, COHORT_IMAGE_MAX_SIDE,
                COHORT_IMAGE_MAX_BYTES >> 20);
    return FALSE;
  }
  return TRUE;
}

/* Kinds recognised only to say clearly that they are not read. */
static const char *other_kind(const guint8 *d, gsize n)
{
  if (n >= 6 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0))
    return "GIF";
  if (n >= 12 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0)
    return "WebP";
  if (n >= 4 && (memcmp(d, "II*\0", 4) == 0 || memcmp(d, "MM\0*", 4) == 0))
    return "TIFF";
  if (n >= 2 && d[0] == 'B' && d[1] == 'M')
    return "BMP";
  return NULL;
}

/* Pillow's "L" from RGB: ITU-R 601 luma in 16-bit fixed point (the weights sum to 65536). */
static void rgb_to_grey(const guint8 *rgb, gsize n, guint8 *grey)
{
  for (gsize i = 0; i < n; i++, rgb += 3)
    grey[i] = (guint8)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

/* To `channels`: RGB to grey in place (it only shrinks); grey to RGB only when `expand`, in a
 * new buffer that the image limit covers too. FALSE when that buffer cannot be had. */
static gboolean convert_channels(const char *name, CohortRawImage *img, int channels,
                                 gboolean expand, GError **error)
{
  if (img->channels == channels)
    return TRUE;
  gsize n = (gsize)img->width * img->height;
  if (channels == 1) {
    rgb_to_grey(img->pixels, n, img->pixels);
    img->pixels = g_realloc(img->pixels, MAX(n, 1));
    img->channels = 1;
    return TRUE;
  }
  if (!expand)
    return TRUE;
  guint8 *out = n * 3 <= COHORT_IMAGE_MAX_BYTES ? g_try_malloc(n * 3) : NULL;
  if (!out) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: grey image of %dx%d pixels is too large to bring to 3 channels (at most "
                "%" G_GSIZE_FORMAT " MiB decoded)",
                name, img->width, img->height, COHORT_IMAGE_MAX_BYTES >> 20);
    return FALSE;
  }
  for (gsize i = 0; i < n; i++)
    out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = img->pixels[i];
  g_free(img->pixels);
  img->pixels = out;
  img->channels = 3;
  return TRUE;
}

static gboolean decode(const char *name, const guint8 *data, gsize len, int channels,
                       gboolean expand, CohortRawImage *out, GError **error)
{
  g_return_val_if_fail(channels == 1 || channels == 3, FALSE);
  memset(out, 0, sizeof *out);
  static const guint8 png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  gboolean ok;
  if (len == 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT, "%s: empty file (0 bytes)",
                name);
    return FALSE;
  } else if (len >= 8 && memcmp(data, png_magic, 8) == 0) {
    ok = cohort_png_decode(name, data, len, out, error);
  } else if (len >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
    ok = cohort_jpeg_decode(name, data, len, out, error);
  } else if (other_kind(data, len)) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: a %s image; only PNG and JPEG are read (convert it)", name,
                other_kind(data, len));
    return FALSE;
  } else {
    g_autoptr(GString) head = g_string_new(NULL);
    for (gsize i = 0; i < MIN(len, 8); i++)
      g_string_append_printf(head, "%s%02x", i ? " " : "", data[i]);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: not a PNG or JPEG image (it starts with bytes %s)", name, head->str);
    return FALSE;
  }
  if (ok && !convert_channels(name, out, channels, expand, error)) {
    cohort_raw_image_clear(out);
    ok = FALSE;
  }
  return ok;
}

gboolean cohort_image_decode(const char *name, const guint8 *data, gsize len, int channels,
                             CohortRawImage *out, GError **error)
{
  return decode(name, data, len, channels, TRUE, out, error);
}

/* The whole file, refusing folders, special files and files over the limit (a FIFO with an
 * image's name is refused instead of waiting for a writer forever). */
static guint8 *read_image_file(const char *path, gsize *len, GError **error)
{
  g_autoptr(GError) local = NULL;
  guint8 *data =
      (guint8 *)cohort_file_read_regular(path, COHORT_IMAGE_MAX_BYTES, "one image", len, &local);
  if (!data)
    g_set_error_literal(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, local->message);
  return data;
}

static gboolean load(const char *path, int channels, gboolean expand, CohortRawImage *out,
                     GError **error)
{
  memset(out, 0, sizeof *out);
  gsize len = 0;
  g_autofree guint8 *data = read_image_file(path, &len, error);
  if (!data)
    return FALSE;
  return decode(path, data, len, channels, expand, out, error);
}

gboolean cohort_image_load(const char *path, int channels, CohortRawImage *out, GError **error)
{
  return load(path, channels, TRUE, out, error);
}

gboolean cohort_image_load_native(const char *path, int channels, CohortRawImage *out,
                                  GError **error)
{
  return load(path, channels, FALSE, out, error);
}
