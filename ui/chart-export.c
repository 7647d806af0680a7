/* The chart as files: a PNG drawn by the chart's own draw function on an image surface, and
 * its points as CSV. */
#include "ui/loss-chart-private.h"

#include <errno.h>
#include <glib/gi18n.h>
#include <string.h>

#include "engine/base/fileio.h"

gboolean cohort_loss_chart_save_png(CohortLossChart *c, const char *path, int width, int height,
                                    GError **error)
{
  cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, width, height);
  cairo_t *cr = cairo_create(surface);
  /* The page's background under the curves, so the image reads alone. */
  GdkRGBA bg = {1, 1, 1, 1};
  G_GNUC_BEGIN_IGNORE_DEPRECATIONS
  gtk_style_context_lookup_color(gtk_widget_get_style_context(GTK_WIDGET(c)), "window_bg_color",
                                 &bg);
  G_GNUC_END_IGNORE_DEPRECATIONS
  cairo_set_source_rgba(cr, bg.red, bg.green, bg.blue, 1);
  cairo_paint(cr);
  cohort_loss_chart_draw(c, cr, width, height);
  cairo_destroy(cr);
  cairo_status_t st = cairo_surface_write_to_png(surface, path);
  cairo_surface_destroy(surface);
  if (st != CAIRO_STATUS_SUCCESS) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, _("%s: cannot write the image: %s"), path,
                cairo_status_to_string(st));
    return FALSE;
  }
  return TRUE;
}

static int compare_doubles(gconstpointer a, gconstpointer b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Every step any series has, sorted, once. */
static GArray *all_steps(CohortLossChart *c)
{
  GArray *steps = g_array_new(FALSE, FALSE, sizeof(double));
  for (guint i = 0; i < c->series->len; i++) {
    CohortChartSeries *s = g_ptr_array_index(c->series, i);
    for (guint k = 0; k + 1 < s->xy->len; k += 2)
      g_array_append_val(steps, g_array_index(s->xy, double, k));
  }
  g_array_sort(steps, compare_doubles);
  guint keep = 0;
  for (guint i = 0; i < steps->len; i++)
    if (keep == 0 || g_array_index(steps, double, i) != g_array_index(steps, double, keep - 1))
      g_array_index(steps, double, keep++) = g_array_index(steps, double, i);
  g_array_set_size(steps, keep);
  return steps;
}

/* A CSV field: quoted when it holds a comma, a quote or a line break. */
static void append_field(GString *out, const char *text)
{
  if (strpbrk(text, ",\"\n\r") == NULL) {
    g_string_append(out, text);
    return;
  }
  g_string_append_c(out, '"');
  for (const char *p = text; *p; p++) {
    if (*p == '"')
      g_string_append_c(out, '"');
    g_string_append_c(out, *p);
  }
  g_string_append_c(out, '"');
}

gboolean cohort_loss_chart_save_csv(CohortLossChart *c, const char *path, GError **error)
{
  g_autoptr(GString) out = g_string_new("step");
  for (guint i = 0; i < c->series->len; i++) {
    g_string_append_c(out, ',');
    append_field(out, ((CohortChartSeries *)g_ptr_array_index(c->series, i))->name);
  }
  g_string_append_c(out, '\n');
  g_autoptr(GArray) steps = all_steps(c);
  g_autofree guint *cursor = g_new0(guint, MAX(c->series->len, 1));
  for (guint r = 0; r < steps->len; r++) {
    double step = g_array_index(steps, double, r);
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    g_string_append(out, g_ascii_formatd(buf, sizeof buf, "%.15g", step));
    for (guint i = 0; i < c->series->len; i++) {
      CohortChartSeries *s = g_ptr_array_index(c->series, i);
      g_string_append_c(out, ',');
      /* Points of a series are in step order (a resume drops the redone ones). */
      while (cursor[i] + 1 < s->xy->len && g_array_index(s->xy, double, cursor[i]) < step)
        cursor[i] += 2;
      if (cursor[i] + 1 < s->xy->len && g_array_index(s->xy, double, cursor[i]) == step)
        g_string_append(out, g_ascii_formatd(buf, sizeof buf, "%.9g",
                                             g_array_index(s->xy, double, cursor[i] + 1)));
    }
    g_string_append_c(out, '\n');
  }
  return cohort_write_file_atomic(path, out->str, out->len, error);
}
