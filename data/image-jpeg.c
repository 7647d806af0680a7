/* JPEG through libjpeg-turbo (the libjpeg 6b API). libjpeg reports fatal errors by calling
 * error_exit, which must not return: it longjmps back to the one setjmp below. Warnings
 * (a truncated file that libjpeg pads with grey, corrupt entropy data) are counted and turn
 * into an error at the end. */
#include "data/image-decode.h"

#include <setjmp.h>
#include <stdio.h>
#include <jpeglib.h>
#include <jerror.h>
#include "data/dataset.h"

typedef struct {
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int warnings;
  int first_warning; /* libjpeg's message code, e.g. JWRN_JPEG_EOF */
} JpegErrors;

typedef struct {
  struct jpeg_decompress_struct cinfo;
  JpegErrors errors;
  CohortRawImage img;
  const char *name;
  GError *error;
} JpegReader;

static void on_jpeg_error(j_common_ptr cinfo)
{
  JpegErrors *e = (JpegErrors *)cinfo->err;
  cinfo->err->format_message(cinfo, e->message);
  longjmp(e->jump, 1);
}

static void on_jpeg_message(j_common_ptr cinfo, int level)
{
  JpegErrors *e = (JpegErrors *)cinfo->err;
  if (level >= 0)
    return; /* trace messages */
  if (e->warnings++ == 0) {
    e->first_warning = cinfo->err->msg_code;
    cinfo->err->format_message(cinfo, e->message);
  }
}

/* Everything that may longjmp; called only from read_jpeg_guarded. */
static void read_jpeg_body(JpegReader *r, const guint8 *data, gsize len)
{
  struct jpeg_decompress_struct *cinfo = &r->cinfo;
  jpeg_mem_src(cinfo, data, (unsigned long)len);
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    g_set_error(&r->error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: CMYK JPEG is not read (only grey and RGB/YCbCr); convert it to RGB", r->name);
    return;
  }
  gboolean grey = cinfo->num_components == 1;
  if (!cohort_image_check_size(r->name, "JPEG", cinfo->image_width, cinfo->image_height,
                               grey ? 1 : 3, &r->error))
    return;
  cinfo->out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(cinfo);
  int channels = cinfo->output_components;
  r->img.width = (int)cinfo->output_width;
  r->img.height = (int)cinfo->output_height;
  r->img.channels = channels;
  gsize stride = (gsize)r->img.width * channels;
  r->img.pixels = g_malloc(stride * r->img.height);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = r->img.pixels + stride * cinfo->output_scanline;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
}

static gboolean read_jpeg_guarded(JpegReader *r, const guint8 *data, gsize len)
{
  if (setjmp(r->errors.jump))
    return FALSE;
  read_jpeg_body(r, data, len);
  return TRUE;
}

gboolean cohort_jpeg_decode(const char *name, const guint8 *data, gsize len, CohortRawImage *out,
                            GError **error)
{
  JpegReader *r = g_new0(JpegReader, 1);
  r->name = name;
  r->cinfo.err = jpeg_std_error(&r->errors.mgr);
  r->errors.mgr.error_exit = on_jpeg_error;
  r->errors.mgr.emit_message = on_jpeg_message;
  jpeg_create_decompress(&r->cinfo);
  gboolean ok = read_jpeg_guarded(r, data, len);
  jpeg_destroy_decompress(&r->cinfo);

  if (!ok) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT, "%s: corrupt JPEG: %s", name,
                r->errors.message);
  } else if (r->error) {
    g_propagate_error(error, g_steal_pointer(&r->error));
    ok = FALSE;
  } else if (r->errors.warnings > 0) {
    if (r->errors.first_warning == JWRN_JPEG_EOF)
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                  "%s: truncated JPEG: the file ends after %" G_GSIZE_FORMAT
                  " bytes, before the image data does",
                  name, len);
    else
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT, "%s: corrupt JPEG data: %s",
                  name, r->errors.message);
    ok = FALSE;
  }
  if (ok)
    *out = r->img;
  else
    cohort_raw_image_clear(&r->img);
  g_free(r);
  return ok;
}
