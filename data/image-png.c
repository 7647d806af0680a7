/* PNG through libpng: decoding to 8-bit grey or RGB, and writing. libpng reports errors by
 * longjmp, so each setjmp sits in a small function that touches no local variable after it,
 * and the state lives in a struct the caller owns. */
#include "data/image-decode.h"

#include <png.h>
#include <string.h>
#include "data/dataset.h"
#include "engine/base/fileio.h"

typedef struct {
  const guint8 *data;
  gsize len, pos;
  gboolean truncated;
  char message[256];
  png_structp png;
  png_infop info;
  CohortRawImage img;
  png_bytep *rows;
} PngReader;

static void on_png_error(png_structp png, png_const_charp msg)
{
  PngReader *r = png_get_error_ptr(png);
  g_strlcpy(r->message, msg, sizeof r->message);
  png_longjmp(png, 1);
}

/* Warnings are conditions libpng recovered from with the right pixels (a bad colour
 * profile, an unknown ancillary chunk): not worth stopping a training run for. */
static void on_png_warning(png_structp png, png_const_charp msg)
{
  (void)png;
  (void)msg;
}

static void read_from_memory(png_structp png, png_bytep out, size_t n)
{
  PngReader *r = png_get_io_ptr(png);
  if (n > r->len - r->pos) {
    r->truncated = TRUE;
    png_error(png, "the file ends early");
  }
  memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

/* Everything that may longjmp; called only from read_png_guarded. */
static void read_png_body(PngReader *r)
{
  png_structp png = r->png;
  png_infop info = r->info;
  /* The size was checked before (check_header); libpng's own limit would stop at a terse
   * message. Its limits on chunks stay at its defaults (8 MB, 1000 cached chunks). Chunks
   * whose content Pillow's convert drops anyway (text, colour profiles, Exif, palettes of
   * suggestions) and unknown ones are skipped as they are read, never buffered: a text chunk
   * of hundreds of MB (which libpng would still read whole, only warning that it is too
   * large) costs nothing. */
  static const png_byte skipped[] = "tEXt\0zTXt\0iTXt\0iCCP\0eXIf\0sPLT\0";
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, 0);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, skipped, 6);
  png_set_read_fn(png, r, read_from_memory);
  png_read_info(png, info);

  png_uint_32 width = png_get_image_width(png, info);
  png_uint_32 height = png_get_image_height(png, info);
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  int channels = (color & PNG_COLOR_MASK_COLOR) ? 3 : 1;

  if (color == PNG_COLOR_TYPE_PALETTE)
    png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8)
    png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16)
    png_set_scale_16(png);
  /* Alpha dropped, as Pillow's convert("RGB"/"L") does; expanding a palette also turns a
   * tRNS chunk into alpha, which goes the same way. */
  if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
    png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != channels || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != (gsize)width * channels) {
    g_strlcpy(r->message, "unexpected layout after conversion", sizeof r->message);
    png_longjmp(png, 1);
  }

  r->img.width = (int)width;
  r->img.height = (int)height;
  r->img.channels = channels;
  /* The sizes come from the file: a failed allocation is an error, never an abort. */
  r->img.pixels = g_try_malloc((gsize)width * height * channels);
  r->rows = g_try_new(png_bytep, height);
  if (!r->img.pixels || !r->rows) {
    g_strlcpy(r->message, "out of memory for the decoded image", sizeof r->message);
    png_longjmp(png, 1);
  }
  for (png_uint_32 y = 0; y < height; y++)
    r->rows[y] = r->img.pixels + (gsize)y * width * channels;
  png_read_image(png, r->rows);
  png_read_end(png, NULL);
}

static gboolean read_png_guarded(PngReader *r)
{
  if (setjmp(png_jmpbuf(r->png)))
    return FALSE;
  read_png_body(r);
  return TRUE;
}

static guint32 be32(const guint8 *p)
{
  return (guint32)p[0] << 24 | (guint32)p[1] << 16 | (guint32)p[2] << 8 | p[3];
}

/* The declared size, read from IHDR (always the first chunk) before libpng allocates
 * anything or reads further, so that a huge or empty image is named as such. */
static gboolean check_header(const char *name, const guint8 *data, gsize len, GError **error)
{
  if (len < 8 + 8 + 13 || memcmp(data + 12, "IHDR", 4) != 0)
    return TRUE; /* libpng reports what is wrong */
  int channels = (data[25] & PNG_COLOR_MASK_COLOR) ? 3 : 1;
  return cohort_image_check_size(name, "PNG", be32(data + 16), be32(data + 20), channels, error);
}

gboolean cohort_png_decode(const char *name, const guint8 *data, gsize len, CohortRawImage *out,
                           GError **error)
{
  if (!check_header(name, data, len, error))
    return FALSE;
  PngReader r = {.data = data, .len = len};
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_png_error, on_png_warning);
  r.info = r.png ? png_create_info_struct(r.png) : NULL;
  if (!r.info) {
    png_destroy_read_struct(&r.png, NULL, NULL);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: out of memory", name);
    return FALSE;
  }
  gboolean ok = read_png_guarded(&r);
  png_destroy_read_struct(&r.png, &r.info, NULL);
  g_free(r.rows);
  if (ok) {
    *out = r.img;
    return TRUE;
  }
  cohort_raw_image_clear(&r.img);
  if (r.truncated)
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: truncated PNG: the file ends after %" G_GSIZE_FORMAT " bytes, before the "
                "image data does",
                name, len);
  else
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT, "%s: corrupt PNG: %s", name,
                r.message);
  return FALSE;
}

typedef struct {
  GByteArray *bytes;
  const guint8 *pixels;
  int width, height, channels;
  char message[256];
  png_structp png;
  png_infop info;
} PngWriter;

static void on_png_write_error(png_structp png, png_const_charp msg)
{
  PngWriter *w = png_get_error_ptr(png);
  g_strlcpy(w->message, msg, sizeof w->message);
  png_longjmp(png, 1);
}

static void write_to_memory(png_structp png, png_bytep data, size_t n)
{
  PngWriter *w = png_get_io_ptr(png);
  g_byte_array_append(w->bytes, data, (guint)n);
}

static void flush_nothing(png_structp png)
{
  (void)png;
}

static void write_png_body(PngWriter *w)
{
  png_set_write_fn(w->png, w, write_to_memory, flush_nothing);
  png_set_IHDR(w->png, w->info, (png_uint_32)w->width, (png_uint_32)w->height, 8,
               w->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(w->png, 9);
  png_write_info(w->png, w->info);
  for (int y = 0; y < w->height; y++)
    png_write_row(w->png, w->pixels + (gsize)y * w->width * w->channels);
  png_write_end(w->png, NULL);
}

static gboolean write_png_guarded(PngWriter *w)
{
  if (setjmp(png_jmpbuf(w->png)))
    return FALSE;
  write_png_body(w);
  return TRUE;
}

GBytes *cohort_image_encode_png(const guint8 *pixels, int width, int height, int channels,
                                GError **error)
{
  g_return_val_if_fail(channels == 1 || channels == 3, NULL);
  g_return_val_if_fail(width > 0 && height > 0, NULL);
  PngWriter w = {.pixels = pixels, .width = width, .height = height, .channels = channels};
  w.bytes = g_byte_array_new();
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, on_png_write_error, NULL);
  w.info = w.png ? png_create_info_struct(w.png) : NULL;
  gboolean ok = w.info && write_png_guarded(&w);
  png_destroy_write_struct(&w.png, &w.info);
  if (!ok) {
    g_byte_array_unref(w.bytes);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "cannot encode PNG: %s",
                w.message[0] ? w.message : "out of memory");
    return NULL;
  }
  return g_byte_array_free_to_bytes(w.bytes);
}

gboolean cohort_image_write_png(const char *path, const guint8 *pixels, int width, int height,
                                int channels, GError **error)
{
  g_autoptr(GBytes) png = cohort_image_encode_png(pixels, width, height, channels, error);
  if (!png) {
    g_prefix_error(error, "%s: ", path);
    return FALSE;
  }
  gsize len;
  const char *data = g_bytes_get_data(png, &len);
  /* Durably, and never over a FIFO or a device (engine/base/fileio.h). */
  g_autoptr(GError) local = NULL;
  if (!cohort_write_file_atomic(path, data, len, &local)) {
    g_set_error_literal(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, local->message);
    return FALSE;
  }
  return TRUE;
}
