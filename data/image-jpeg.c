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
  int code; /* libjpeg's message code of the fatal error */
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
  gboolean progressive;
} JpegReader;

static void on_jpeg_error(j_common_ptr cinfo)
{
  JpegErrors *e = (JpegErrors *)cinfo->err;
  e->code = cinfo->err->msg_code;
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
  /* libjpeg's own buffers share the limit with the pixels: a progressive file needs its whole
   * image's coefficients at once (2 bytes a sample), and asking for more than this makes
   * libjpeg fail (it has no backing store) before it allocates them. */
  gsize out_bytes = (gsize)cinfo->image_width * cinfo->image_height * (grey ? 1 : 3);
  /* (0 would mean no limit at all to libjpeg.) */
  cinfo->mem->max_memory_to_use = (long)MAX(COHORT_IMAGE_MAX_BYTES - out_bytes, 1);
  r->progressive = jpeg_has_multiple_scans(cinfo);
  jpeg_start_decompress(cinfo);
  int channels = cinfo->output_components;
  r->img.width = (int)cinfo->output_width;
  r->img.height = (int)cinfo->output_height;
  r->img.channels = channels;
  gsize stride = (gsize)r->img.width * channels;
  r->img.pixels = g_try_malloc(stride * r->img.height);
  if (!r->img.pixels) {
    g_set_error(&r->error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: out of memory for the %dx%d decoded pixels", r->name, r->img.width,
                r->img.height);
    return;
  }
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

  if (!ok && r->errors.code == JERR_NO_BACKING_STORE) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: %sJPEG of %ux%u pixels needs more memory to decode than the %" G_GSIZE_FORMAT
                " MiB one image may use",
                name, r->progressive ? "progressive " : "", r->cinfo.image_width,
                r->cinfo.image_height, COHORT_IMAGE_MAX_BYTES >> 20);
  } else if (!ok) {
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
