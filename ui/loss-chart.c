#include "ui/loss-chart-private.h"

#include <glib/gi18n.h>
#include <math.h>

struct _CohortLossChart {
  GtkDrawingArea parent_instance;
  GArray *train; /* of double pairs: step, loss */
  GArray *val;
  GArray *parts[2];  /* a distillation's teacher and task terms, likewise */
  gboolean accuracy; /* the validation series is an accuracy (cohort_loss_chart_set_accuracy) */
};

/* Colours and legend of the distillation parts, dashed under the training loss they make up. */
static const struct {
  double r, g, b;
  const char *label;
} part_style[2] = {
    {0.18, 0.62, 0.35, N_("teacher term")},
    {0.56, 0.32, 0.72, N_("task term")},
};

G_DEFINE_FINAL_TYPE(CohortLossChart, cohort_loss_chart, GTK_TYPE_DRAWING_AREA)

static void series_range(GArray *a, double *x0, double *x1, double *y0, double *y1)
{
  for (guint i = 0; i + 1 < a->len; i += 2) {
    double x = g_array_index(a, double, i), y = g_array_index(a, double, i + 1);
    *x0 = MIN(*x0, x);
    *x1 = MAX(*x1, x);
    *y0 = MIN(*y0, y);
    *y1 = MAX(*y1, y);
  }
}

static void draw_series(cairo_t *cr, GArray *a, double x0, double x1, double y0, double y1,
                        double l, double t, double w, double h, gboolean dots)
{
  for (guint i = 0; i + 1 < a->len; i += 2) {
    double x = l + (g_array_index(a, double, i) - x0) / (x1 - x0) * w;
    double y = t + h - (g_array_index(a, double, i + 1) - y0) / (y1 - y0) * h;
    if (dots) {
      cairo_new_sub_path(cr);
      cairo_arc(cr, x, y, 3, 0, 2 * G_PI);
    } else if (i == 0) {
      cairo_move_to(cr, x, y);
    } else {
      cairo_line_to(cr, x, y);
    }
  }
  if (dots)
    cairo_fill(cr);
  else
    cairo_stroke(cr);
}

static void text_at(cairo_t *cr, GtkWidget *w, const char *text, double x, double y, double align)
{
  PangoLayout *layout = gtk_widget_create_pango_layout(w, text);
  int tw, th;
  pango_layout_get_pixel_size(layout, &tw, &th);
  cairo_move_to(cr, x - tw * align, y - th / 2.0);
  pango_cairo_show_layout(cr, layout);
  g_object_unref(layout);
}

static void draw(GtkDrawingArea *area, cairo_t *cr, int width, int height, gpointer data)
{
  (void)data;
  GtkWidget *w = GTK_WIDGET(area);
  CohortLossChart *c = COHORT_LOSS_CHART(area);
  GdkRGBA fg;
  gtk_style_context_get_color(gtk_widget_get_style_context(w), &fg);
  double l = 56, r = 16, t = 12, b = 28;
  double pw = width - l - r, ph = height - t - b;
  if (pw < 20 || ph < 20)
    return;

  cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.35);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, l + 0.5, t + 0.5, pw, ph);
  cairo_stroke(cr);

  GArray *train = c->accuracy ? NULL : c->train;
  if ((!train || train->len == 0) && c->val->len == 0) {
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.6);
    text_at(cr, w,
            c->accuracy ? _("Accuracy appears here after the first evaluation")
                        : _("Loss appears here once training runs"),
            l + pw / 2, t + ph / 2, 0.5);
    return;
  }
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  if (train)
    series_range(train, &x0, &x1, &y0, &y1);
  series_range(c->val, &x0, &x1, &y0, &y1);
  for (int k = 0; k < 2; k++)
    series_range(c->parts[k], &x0, &x1, &y0, &y1);
  x0 = MIN(x0, 0);
  if (x1 <= x0)
    x1 = x0 + 1;
  if (c->accuracy) {
    y0 = 0; /* a fixed scale, so curves of runs compare by eye */
    y1 = 1;
  } else {
    if (y1 - y0 < 1e-6) {
      y0 -= 0.5;
      y1 += 0.5;
    }
    double pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }

  cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.8);
  for (int i = 0; i <= 4; i++) {
    double v = y0 + (y1 - y0) * i / 4.0;
    g_autofree char *s =
        c->accuracy ? g_strdup_printf(_("%.0f %%"), 100 * v) : g_strdup_printf("%.2f", v);
    text_at(cr, w, s, l - 6, t + ph - ph * i / 4.0, 1.0);
  }
  g_autofree char *xs0 = g_strdup_printf("%.0f", x0);
  g_autofree char *xs1 = g_strdup_printf("%.0f", x1);
  text_at(cr, w, xs0, l, t + ph + b / 2.0, 0.0);
  text_at(cr, w, xs1, l + pw, t + ph + b / 2.0, 1.0);
  text_at(cr, w, _("step"), l + pw / 2, t + ph + b / 2.0, 0.5);

  static const double dash[] = {5, 3};
  cairo_set_line_width(cr, 1.5);
  cairo_set_dash(cr, dash, 2, 0);
  for (int k = 0; k < 2; k++) {
    cairo_set_source_rgb(cr, part_style[k].r, part_style[k].g, part_style[k].b);
    draw_series(cr, c->parts[k], x0, x1, y0, y1, l, t, pw, ph, FALSE);
  }
  cairo_set_dash(cr, NULL, 0, 0);
  cairo_set_line_width(cr, 2);
  if (train) {
    cairo_set_source_rgb(cr, 0.21, 0.52, 0.89);
    draw_series(cr, train, x0, x1, y0, y1, l, t, pw, ph, FALSE);
  }
  cairo_set_source_rgb(cr, 0.90, 0.38, 0.0);
  draw_series(cr, c->val, x0, x1, y0, y1, l, t, pw, ph, TRUE);
  if (c->val->len > 2)
    draw_series(cr, c->val, x0, x1, y0, y1, l, t, pw, ph, FALSE);

  /* Legend. */
  if (c->accuracy) {
    cairo_set_source_rgb(cr, 0.90, 0.38, 0.0);
    cairo_rectangle(cr, l + pw - 170, t + ph - 20, 12, 3);
    cairo_fill(cr);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.9);
    text_at(cr, w, _("validation accuracy"), l + pw - 152, t + ph - 18, 0.0);
    return;
  }
  cairo_set_source_rgb(cr, 0.21, 0.52, 0.89);
  cairo_rectangle(cr, l + pw - 150, t + 8, 12, 3);
  cairo_fill(cr);
  cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.9);
  text_at(cr, w, _("training loss"), l + pw - 132, t + 10, 0.0);
  cairo_set_source_rgb(cr, 0.90, 0.38, 0.0);
  cairo_rectangle(cr, l + pw - 150, t + 26, 12, 3);
  cairo_fill(cr);
  cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.9);
  text_at(cr, w, _("validation loss"), l + pw - 132, t + 28, 0.0);
  for (int k = 0, row = 0; k < 2; k++) {
    if (c->parts[k]->len == 0)
      continue;
    double y = t + 44 + 18 * row++;
    cairo_set_source_rgb(cr, part_style[k].r, part_style[k].g, part_style[k].b);
    cairo_rectangle(cr, l + pw - 150, y, 12, 3);
    cairo_fill(cr);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.9);
    text_at(cr, w, _(part_style[k].label), l + pw - 132, y + 2, 0.0);
  }
}

static void cohort_loss_chart_finalize(GObject *obj)
{
  CohortLossChart *c = COHORT_LOSS_CHART(obj);
  g_array_unref(c->train);
  g_array_unref(c->val);
  for (int k = 0; k < 2; k++)
    g_array_unref(c->parts[k]);
  G_OBJECT_CLASS(cohort_loss_chart_parent_class)->finalize(obj);
}

static void cohort_loss_chart_class_init(CohortLossChartClass *klass)
{
  G_OBJECT_CLASS(klass)->finalize = cohort_loss_chart_finalize;
  gtk_widget_class_set_template_from_resource(GTK_WIDGET_CLASS(klass),
                                              "/org/cohort/Trainer/loss-chart.ui");
}

static void cohort_loss_chart_init(CohortLossChart *c)
{
  gtk_widget_init_template(GTK_WIDGET(c));
  c->train = g_array_new(FALSE, FALSE, sizeof(double));
  c->val = g_array_new(FALSE, FALSE, sizeof(double));
  for (int k = 0; k < 2; k++)
    c->parts[k] = g_array_new(FALSE, FALSE, sizeof(double));
  gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(c), draw, NULL, NULL);
}

GtkWidget *cohort_loss_chart_new(void)
{
  return g_object_new(COHORT_TYPE_LOSS_CHART, NULL);
}

void cohort_loss_chart_add(CohortLossChart *c, gboolean validation, double step, double loss)
{
  if (!isfinite(loss))
    return;
  double pt[2] = {step, loss};
  g_array_append_vals(validation ? c->val : c->train, pt, 2);
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

void cohort_loss_chart_add_part(CohortLossChart *c, gboolean teacher, double step, double value)
{
  if (!isfinite(value))
    return;
  double pt[2] = {step, value};
  g_array_append_vals(c->parts[teacher ? 0 : 1], pt, 2);
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

guint cohort_loss_chart_count_part(CohortLossChart *c, gboolean teacher)
{
  return c->parts[teacher ? 0 : 1]->len / 2;
}

void cohort_loss_chart_clear(CohortLossChart *c)
{
  g_array_set_size(c->train, 0);
  g_array_set_size(c->val, 0);
  for (int k = 0; k < 2; k++)
    g_array_set_size(c->parts[k], 0);
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

static void drop_after(GArray *a, double step)
{
  guint keep = 0;
  for (guint i = 0; i + 1 < a->len; i += 2) {
    if (g_array_index(a, double, i) > step)
      continue;
    g_array_index(a, double, keep) = g_array_index(a, double, i);
    g_array_index(a, double, keep + 1) = g_array_index(a, double, i + 1);
    keep += 2;
  }
  g_array_set_size(a, keep);
}

void cohort_loss_chart_drop_after(CohortLossChart *c, double step)
{
  drop_after(c->train, step);
  drop_after(c->val, step);
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

void cohort_loss_chart_set_accuracy(CohortLossChart *c, gboolean accuracy)
{
  c->accuracy = accuracy;
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

guint cohort_loss_chart_count(CohortLossChart *c, gboolean validation)
{
  return (validation ? c->val : c->train)->len / 2;
}
