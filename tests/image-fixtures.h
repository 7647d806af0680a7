/* Image files made by the tests themselves (header-only, tests only): PNG of any colour type
 * and bit depth through libpng, JPEG through libjpeg, and hand-assembled PNG chunks for
 * headers libpng would refuse to write. */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <zlib.h>

typedef struct {
  int color_type; /* PNG_COLOR_TYPE_* */
  int bit_depth;
  gboolean interlace;
  const png_color *palette;
  int n_palette;
  const png_byte *trns; /* palette alpha, or NULL */
  int n_trns;
} FxPngSpec;

/* Writes a PNG whose rows are given packed as the file stores them (16-bit samples
 * big-endian, sub-byte samples packed). */
static inline void fx_write_png(const char *path, int w, int h, const FxPngSpec *spec,
                                const guint8 *rows, gsize stride)
{
  FILE *fp = fopen(path, "wb");
  g_assert_nonnull(fp);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  g_assert_nonnull(info);
  if (setjmp(png_jmpbuf(png)))
    g_error("libpng failed writing %s", path);
  png_init_io(png, fp);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, spec->bit_depth, spec->color_type,
               spec->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (spec->palette)
    png_set_PLTE(png, info, spec->palette, spec->n_palette);
  if (spec->trns)
    png_set_tRNS(png, info, spec->trns, spec->n_trns, NULL);
  png_write_info(png, info);
  png_bytep *row_ptrs = g_new(png_bytep, h);
  for (int y = 0; y < h; y++)
    row_ptrs[y] = (png_bytep)rows + (gsize)y * stride;
  png_write_image(png, row_ptrs);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  g_free(row_ptrs);
  g_assert_cmpint(fclose(fp), ==, 0);
}

/* An 8-bit grey (channels 1) or RGB (3) PNG from interleaved pixels. */
static inline void fx_write_png8(const char *path, int w, int h, int channels, const guint8 *pixels)
{
  FxPngSpec spec = {
      channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, 8, FALSE, NULL, 0, NULL, 0};
  fx_write_png(path, w, h, &spec, pixels, (gsize)w * channels);
}

/* A baseline JPEG: components 1 (grey), 3 (RGB) or 4 (CMYK, written as Adobe CMYK). */
static inline void fx_write_jpeg(const char *path, int w, int h, int components,
                                 const guint8 *pixels, int quality)
{
  FILE *fp = fopen(path, "wb");
  g_assert_nonnull(fp);
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, fp);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = components;
  c.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)pixels + (gsize)c.next_scanline * w * components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  g_assert_cmpint(fclose(fp), ==, 0);
}

/* Deterministic pseudo-random bytes (a small LCG: fixtures only). */
static inline void fx_fill(guint8 *p, gsize n, guint32 seed)
{
  for (gsize i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (guint8)(seed >> 24);
  }
}

/* A smooth pattern with some detail, which survives JPEG well. */
static inline void fx_pattern(guint8 *p, int w, int h, int channels, int phase)
{
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < channels; c++)
        p[((gsize)y * w + x) * channels + c] =
            (guint8)((x * 255 / MAX(w - 1, 1) + y * 97 + c * 60 + phase * 31) % 256);
}

static inline void fx_put32(guint8 *p, guint32 v)
{
  p[0] = (guint8)(v >> 24);
  p[1] = (guint8)(v >> 16);
  p[2] = (guint8)(v >> 8);
  p[3] = (guint8)v;
}

/* A PNG file of just a signature, an IHDR declaring w x h 8-bit RGB, and IEND, with correct
 * CRCs: the way to declare sizes libpng will not write. */
static inline void fx_write_png_header_only(const char *path, guint32 w, guint32 h)
{
  guint8 buf[8 + 25 + 12];
  static const guint8 sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  memcpy(buf, sig, 8);
  guint8 *ihdr = buf + 8;
  fx_put32(ihdr, 13);
  memcpy(ihdr + 4, "IHDR", 4);
  fx_put32(ihdr + 8, w);
  fx_put32(ihdr + 12, h);
  ihdr[16] = 8; /* bit depth */
  ihdr[17] = 2; /* RGB */
  ihdr[18] = ihdr[19] = ihdr[20] = 0;
  fx_put32(ihdr + 21, (guint32)crc32(0, ihdr + 4, 17));
  guint8 *iend = ihdr + 25;
  fx_put32(iend, 0);
  memcpy(iend + 4, "IEND", 4);
  fx_put32(iend + 8, (guint32)crc32(0, iend + 4, 4));
  g_assert_true(g_file_set_contents(path, (const char *)buf, sizeof buf, NULL));
}

/* The first `keep` bytes of `src` as `dst`. */
static inline void fx_truncate_copy(const char *src, const char *dst, gsize keep)
{
  g_autofree char *data = NULL;
  gsize len;
  g_assert_true(g_file_get_contents(src, &data, &len, NULL));
  g_assert_cmpuint(keep, <, len);
  g_assert_true(g_file_set_contents(dst, data, (gssize)keep, NULL));
}

static inline char *fx_mkdtemp(const char *name)
{
  g_autofree char *tmpl = g_strdup_printf("cohort-%s-XXXXXX", name);
  char *dir = g_dir_make_tmp(tmpl, NULL);
  g_assert_nonnull(dir);
  return dir;
}

static inline void fx_rm_rf(const char *path)
{
  if (!path)
    return;
  g_autofree char *quoted = g_shell_quote(path);
  g_autofree char *cmd =
      g_strdup_printf("chmod -R u+rwx %s 2>/dev/null; rm -rf %s", quoted, quoted);
  g_assert_cmpint(system(cmd), ==, 0);
}

/* Makes folder/sub (and parents). */
static inline char *fx_subdir(const char *folder, const char *sub)
{
  char *dir = g_build_filename(folder, sub, NULL);
  g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
  return dir;
}

/* A w x h 8-bit grey (channels 1) or RGB PNG of one flat value, written row by row: a
 * decompression bomb (16384² grey is 256 MiB decoded, a few hundred KiB on disk) without
 * holding the image. */
static inline void fx_write_flat_png(const char *path, int w, int h, int channels, guint8 value)
{
  FILE *fp = fopen(path, "wb");
  g_assert_nonnull(fp);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  g_assert_nonnull(info);
  guint8 *row = g_malloc((gsize)w * channels);
  memset(row, value, (gsize)w * channels);
  if (setjmp(png_jmpbuf(png)))
    g_error("libpng failed writing %s", path);
  png_init_io(png, fp);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8,
               channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 9);
  png_write_info(png, info);
  for (int y = 0; y < h; y++)
    png_write_row(png, row);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  g_free(row);
  g_assert_cmpint(fclose(fp), ==, 0);
}

/* Appends a PNG chunk (length, type, data, CRC) to `out`. */
static inline void fx_png_chunk(GByteArray *out, const char *type, const guint8 *data, gsize len)
{
  guint8 be[4];
  fx_put32(be, (guint32)len);
  g_byte_array_append(out, be, 4);
  g_byte_array_append(out, (const guint8 *)type, 4);
  if (len)
    g_byte_array_append(out, data, (guint)len);
  uLong crc = crc32(0, (const Bytef *)type, 4);
  crc = crc32_z(crc, data, len);
  fx_put32(be, (guint32)crc);
  g_byte_array_append(out, be, 4);
}

/* A valid 2x2 grey PNG with a zTXt chunk ("Comment") right after IHDR whose text is
 * `text_bytes` zeros, compressed: with `stored` the chunk holds them as stored (uncompressed)
 * deflate blocks, so the chunk itself is that large; else it is a zlib bomb of about a
 * thousandth of the size. */
static inline void fx_write_png_ztxt(const char *path, gsize text_bytes, gboolean stored)
{
  g_autofree char *plain = g_strconcat(path, ".plain", NULL);
  guint8 px[4] = {10, 20, 30, 40};
  fx_write_png8(plain, 2, 2, 1, px);
  g_autofree guint8 *src = NULL;
  gsize src_len = 0;
  g_assert_true(g_file_get_contents(plain, (char **)&src, &src_len, NULL));
  g_unlink(plain);
  /* zTXt data: keyword, NUL, compression method 0, then the zlib stream. */
  GByteArray *data = g_byte_array_new();
  g_byte_array_append(data, (const guint8 *)"Comment\0\0", 9);
  z_stream z = {0};
  g_assert_cmpint(deflateInit(&z, stored ? Z_NO_COMPRESSION : Z_BEST_COMPRESSION), ==, Z_OK);
  static guint8 zeros[1 << 16], buf[1 << 16];
  gsize left = text_bytes;
  int flush = Z_NO_FLUSH;
  do {
    gsize n = MIN(left, sizeof zeros);
    left -= n;
    flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    z.next_in = zeros;
    z.avail_in = (uInt)n;
    do {
      z.next_out = buf;
      z.avail_out = sizeof buf;
      deflate(&z, flush);
      g_byte_array_append(data, buf, (guint)(sizeof buf - z.avail_out));
    } while (z.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&z);
  /* signature + IHDR (8 + 25 bytes), the zTXt chunk, then the rest of the plain file. */
  GByteArray *out = g_byte_array_new();
  g_byte_array_append(out, src, 33);
  fx_png_chunk(out, "zTXt", data->data, data->len);
  g_byte_array_append(out, src + 33, (guint)(src_len - 33));
  g_assert_true(g_file_set_contents(path, (const char *)out->data, out->len, NULL));
  g_byte_array_unref(out);
  g_byte_array_unref(data);
}

/* A real 8x8 progressive grey JPEG whose frame header is then made to claim w x h: libjpeg
 * reads the header and, before the data, must hold the coefficients of the whole claimed
 * image (2 bytes a sample). */
static inline void fx_write_progressive_jpeg_claiming(const char *path, guint16 w, guint16 h)
{
  FILE *fp = fopen(path, "wb");
  g_assert_nonnull(fp);
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, fp);
  c.image_width = 8;
  c.image_height = 8;
  c.input_components = 1;
  c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  guint8 px[64];
  fx_fill(px, sizeof px, 5);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = px + c.next_scanline * 8;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  g_assert_cmpint(fclose(fp), ==, 0);
  g_autofree guint8 *d = NULL;
  gsize n = 0;
  g_assert_true(g_file_get_contents(path, (char **)&d, &n, NULL));
  gsize i = 2;
  while (i + 9 < n && !(d[i] == 0xFF && d[i + 1] == 0xC2))
    i += 2 + ((gsize)d[i + 2] << 8 | d[i + 3]);
  g_assert_cmpuint(i + 9, <, n);
  d[i + 5] = (guint8)(h >> 8), d[i + 6] = (guint8)h;
  d[i + 7] = (guint8)(w >> 8), d[i + 8] = (guint8)w;
  g_assert_true(g_file_set_contents(path, (const char *)d, (gssize)n, NULL));
}
