#include "ui/loss-chart-private.h"

#include <glib/gi18n.h>
#include <math.h>
#include <string.h>

#include "engine/progress/protocol.h"

G_DEFINE_FINAL_TYPE(CohortLossChart, cohort_loss_chart, GTK_TYPE_DRAWING_AREA)

/* Colours the curves take in order; the training and validation loss keep the first two. */
static const double palette[][3] = {
    {0.21, 0.52, 0.89}, {0.90, 0.38, 0.00}, {0.18, 0.62, 0.30}, {0.57, 0.25, 0.67},
    {0.75, 0.11, 0.16}, {0.00, 0.55, 0.55}, {0.60, 0.40, 0.20}, {0.85, 0.20, 0.55},
    {0.40, 0.40, 0.40}, {0.55, 0.65, 0.10},
};

static void series_free(gpointer p)
{
  CohortChartSeries *s = p;
  g_free(s->name);
  g_array_unref(s->xy);
  g_free(s);
}

CohortChartSeries *cohort_loss_chart_find(CohortLossChart *c, const char *name)
{
  for (guint i = 0; i < c->series->len; i++) {
    CohortChartSeries *s = g_ptr_array_index(c->series, i);
    if (g_str_equal(s->name, name))
      return s;
  }
  return NULL;
}

static int next_colour(CohortLossChart *c)
{
  gboolean used[G_N_ELEMENTS(palette)] = {FALSE};
  for (guint i = 0; i < c->series->len; i++) {
    CohortChartSeries *s = g_ptr_array_index(c->series, i);
    used[s->colour % G_N_ELEMENTS(palette)] = TRUE;
  }
  for (guint k = 2; k < G_N_ELEMENTS(palette); k++)
    if (!used[k])
      return (int)k;
  return (int)(c->series->len % G_N_ELEMENTS(palette));
}

static CohortChartSeries *series_new(CohortLossChart *c, const char *name, gboolean overlay)
{
  CohortChartSeries *s = g_new0(CohortChartSeries, 1);
  s->name = g_strdup(name);
  s->xy = g_array_new(FALSE, FALSE, sizeof(double));
  s->overlay = overlay;
  const char *base = overlay ? strrchr(name, '/') + 1 : name;
  s->dots = g_str_has_prefix(base, "val_") || (strstr(base, "loss") == NULL);
  s->right = strstr(base, "loss") == NULL;
  s->train = !s->dots;
  s->colour = g_str_equal(name, COHORT_FIELD_LOSS)       ? 0
              : g_str_equal(name, COHORT_FIELD_VAL_LOSS) ? 1
                                                         : next_colour(c);
  if (overlay) {
    /* Live series stay first: overlays are appended after them. */
    g_ptr_array_add(c->series, s);
  } else {
    guint at = 0;
    while (at < c->series->len && !((CohortChartSeries *)g_ptr_array_index(c->series, at))->overlay)
      at++;
    g_ptr_array_insert(c->series, (gint)at, s);
  }
  return s;
}

void cohort_loss_chart_add_point(CohortLossChart *c, const char *series, double step, double value)
{
  if (!isfinite(value) || !isfinite(step))
    return;
  CohortChartSeries *s = cohort_loss_chart_find(c, series);
  if (s == NULL)
    s = series_new(c, series, FALSE);
  double pt[2] = {step, value};
  g_array_append_vals(s->xy, pt, 2);
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

void cohort_loss_chart_add(CohortLossChart *c, gboolean validation, double step, double loss)
{
  cohort_loss_chart_add_point(c, validation ? COHORT_FIELD_VAL_LOSS : COHORT_FIELD_LOSS, step,
                              loss);
}

void cohort_loss_chart_clear(CohortLossChart *c)
{
  for (guint i = c->series->len; i-- > 0;)
    if (!((CohortChartSeries *)g_ptr_array_index(c->series, i))->overlay)
      g_ptr_array_remove_index(c->series, i);
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
  for (guint i = 0; i < c->series->len; i++) {
    CohortChartSeries *s = g_ptr_array_index(c->series, i);
    if (!s->overlay)
      drop_after(s->xy, step);
  }
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

void cohort_loss_chart_set_smoothing(CohortLossChart *c, double weight)
{
  c->smoothing = CLAMP(weight, 0.0, 0.99);
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

double cohort_loss_chart_get_smoothing(CohortLossChart *c)
{
  return c->smoothing;
}

void cohort_loss_chart_set_log_scale(CohortLossChart *c, gboolean log_scale)
{
  c->log_scale = log_scale;
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

gboolean cohort_loss_chart_get_log_scale(CohortLossChart *c)
{
  return c->log_scale;
}

gboolean cohort_loss_chart_add_overlay(CohortLossChart *c, const char *label, const GArray *train,
                                       const GArray *val)
{
  if (c->n_overlays >= COHORT_LOSS_CHART_MAX_OVERLAYS)
    return FALSE;
  const GArray *parts[] = {train, val};
  const char *names[] = {COHORT_FIELD_LOSS, COHORT_FIELD_VAL_LOSS};
  CohortChartSeries *first = NULL;
  for (guint k = 0; k < 2; k++) {
    if (parts[k] == NULL || parts[k]->len == 0)
      continue;
    g_autofree char *name = g_strdup_printf("%s/%s", label, names[k]);
    CohortChartSeries *s = series_new(c, name, TRUE);
    g_array_append_vals(s->xy, parts[k]->data, parts[k]->len);
    /* A run's two curves share its colour: its validation curve is dotted. */
    if (first != NULL)
      s->colour = first->colour;
    first = s;
  }
  c->n_overlays++;
  gtk_widget_queue_draw(GTK_WIDGET(c));
  return TRUE;
}

void cohort_loss_chart_clear_overlays(CohortLossChart *c)
{
  for (guint i = c->series->len; i-- > 0;)
    if (((CohortChartSeries *)g_ptr_array_index(c->series, i))->overlay)
      g_ptr_array_remove_index(c->series, i);
  c->n_overlays = 0;
  gtk_widget_queue_draw(GTK_WIDGET(c));
}

guint cohort_loss_chart_count_overlays(CohortLossChart *c)
{
  return c->n_overlays;
}

guint cohort_loss_chart_count_series(CohortLossChart *c, const char *name)
{
  CohortChartSeries *s = cohort_loss_chart_find(c, name);
  return s != NULL ? s->xy->len / 2 : 0;
}

guint cohort_loss_chart_count(CohortLossChart *c, gboolean validation)
{
  return cohort_loss_chart_count_series(c, validation ? COHORT_FIELD_VAL_LOSS : COHORT_FIELD_LOSS);
}

/* The values drawn for `s`: TensorBoard's debiased exponential moving average for training
 * curves while smoothing is on, else the points. g_free the result. */
static double *drawn_values(CohortLossChart *c, const CohortChartSeries *s)
{
  guint n = s->xy->len / 2;
  double *out = g_new(double, MAX(n, 1));
  double w = s->train ? c->smoothing : 0, last = 0, weight = 1;
  for (guint i = 0; i < n; i++) {
    double v = g_array_index(s->xy, double, 2 * i + 1);
    if (w <= 0) {
      out[i] = v;
      continue;
    }
    last = last * w + (1 - w) * v;
    weight *= w;
    out[i] = last / (1 - weight);
  }
  return out;
}

double cohort_loss_chart_drawn_value(CohortLossChart *c, const char *series, guint i)
{
  CohortChartSeries *s = cohort_loss_chart_find(c, series);
  g_return_val_if_fail(s != NULL && i < s->xy->len / 2, NAN);
  g_autofree double *v = drawn_values(c, s);
  return v[i];
}

static void on_draw(GtkDrawingArea *area, cairo_t *cr, int width, int height, gpointer data)
{
  (void)data;
  cohort_loss_chart_draw(COHORT_LOSS_CHART(area), cr, width, height);
}

static void cohort_loss_chart_finalize(GObject *obj)
{
  CohortLossChart *c = COHORT_LOSS_CHART(obj);
  g_ptr_array_unref(c->series);
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
  c->series = g_ptr_array_new_with_free_func(series_free);
  gtk_drawing_area_set_draw_func(GTK_DRAWING_AREA(c), on_draw, NULL, NULL);
}

GtkWidget *cohort_loss_chart_new(void)
{
  return g_object_new(COHORT_TYPE_LOSS_CHART, NULL);
}

/* Drawing. */

typedef struct {
  double l, t, w, h; /* plot area */
  double x0, x1;     /* steps */
  double y0, y1;     /* left axis, in drawn units (log10 when log scale) */
  double r0, r1;     /* right axis */
  gboolean have_right;
  gboolean log_scale;
} Frame;

static double axis_value(const Frame *f, double v)
{
  return f->log_scale ? log10(v) : v;
}

static gboolean drawable(const Frame *f, const CohortChartSeries *s, double v)
{
  return isfinite(v) && (s->right || !f->log_scale || v > 0);
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

static int text_width(GtkWidget *w, const char *text)
{
  PangoLayout *layout = gtk_widget_create_pango_layout(w, text);
  int tw, th;
  pango_layout_get_pixel_size(layout, &tw, &th);
  g_object_unref(layout);
  return tw;
}

/* The legend's words for a series. g_free the result. */
static char *series_label(const CohortChartSeries *s)
{
  const char *slash = s->overlay ? strrchr(s->name, '/') : NULL;
  const char *base = slash != NULL ? slash + 1 : s->name;
  if (slash != NULL) {
    g_autofree char *run = g_strndup(s->name, slash - s->name);
    return g_str_equal(base, COHORT_FIELD_LOSS) ? g_strdup(run)
                                                : g_strdup_printf(_("%s (validation)"), run);
  }
  if (g_str_equal(base, COHORT_FIELD_LOSS))
    return g_strdup(_("training loss"));
  if (g_str_equal(base, COHORT_FIELD_VAL_LOSS))
    return g_strdup(_("validation loss"));
  if (g_str_equal(base, COHORT_FIELD_LOSS_TASK))
    return g_strdup(_("task loss"));
  if (g_str_equal(base, COHORT_FIELD_LOSS_DISTILL))
    return g_strdup(_("distillation loss"));
  if (g_str_equal(base, COHORT_FIELD_ACCURACY))
    return g_strdup(_("accuracy (right axis)"));
  return s->right ? g_strdup_printf(_("%s (right axis)"), base) : g_strdup(base);
}

static void set_colour(cairo_t *cr, const CohortChartSeries *s, double alpha)
{
  const double *rgb = palette[s->colour % G_N_ELEMENTS(palette)];
  cairo_set_source_rgba(cr, rgb[0], rgb[1], rgb[2], alpha);
}

/* The legend in rows above the plot, wrapped to `width`; returns the height it took. Only
 * measures when `cr` is NULL. */
static double legend(CohortLossChart *c, cairo_t *cr, GtkWidget *w, const GdkRGBA *fg, double left,
                     double width)
{
  double x = left, y = 8, row_h = 18;
  gboolean any = FALSE;
  for (guint i = 0; i < c->series->len; i++) {
    CohortChartSeries *s = g_ptr_array_index(c->series, i);
    if (s->xy->len == 0)
      continue;
    g_autofree char *label = series_label(s);
    double item = 18 + text_width(w, label) + 14;
    if (any && x + item > left + width) {
      x = left;
      y += row_h;
    }
    any = TRUE;
    if (cr != NULL) {
      set_colour(cr, s, 1.0);
      cairo_rectangle(cr, x, y + row_h / 2 - 1.5, 12, 3);
      cairo_fill(cr);
      cairo_set_source_rgba(cr, fg->red, fg->green, fg->blue, 0.9);
      text_at(cr, w, label, x + 16, y + row_h / 2, 0.0);
    }
    x += item;
  }
  return any ? y + row_h + 4 : 8;
}

static void ranges(CohortLossChart *c, Frame *f)
{
  f->x0 = 0;
  f->x1 = -INFINITY;
  f->y0 = f->r0 = INFINITY;
  f->y1 = f->r1 = -INFINITY;
  for (guint i = 0; i < c->series->len; i++) {
    CohortChartSeries *s = g_ptr_array_index(c->series, i);
    for (guint k = 0; k + 1 < s->xy->len; k += 2) {
      double x = g_array_index(s->xy, double, k), v = g_array_index(s->xy, double, k + 1);
      if (!drawable(f, s, v))
        continue;
      f->x0 = MIN(f->x0, x);
      f->x1 = MAX(f->x1, x);
      double *lo = s->right ? &f->r0 : &f->y0, *hi = s->right ? &f->r1 : &f->y1;
      double a = s->right ? v : axis_value(f, v);
      *lo = MIN(*lo, a);
      *hi = MAX(*hi, a);
      f->have_right |= s->right;
    }
  }
  if (!(f->x1 > f->x0))
    f->x1 = f->x0 + 1;
  double *axes[2][2] = {{&f->y0, &f->y1}, {&f->r0, &f->r1}};
  for (int a = 0; a < 2; a++) {
    double *lo = axes[a][0], *hi = axes[a][1];
    if (!isfinite(*lo)) {
      *lo = 0;
      *hi = 1;
    }
    if (*hi - *lo < 1e-9) {
      *lo -= 0.5;
      *hi += 0.5;
    }
    double pad = (*hi - *lo) * 0.05;
    *lo -= pad;
    *hi += pad;
  }
}

static void draw_axes(cairo_t *cr, GtkWidget *w, const GdkRGBA *fg, const Frame *f)
{
  cairo_set_source_rgba(cr, fg->red, fg->green, fg->blue, 0.35);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, f->l + 0.5, f->t + 0.5, f->w, f->h);
  cairo_stroke(cr);
  cairo_set_source_rgba(cr, fg->red, fg->green, fg->blue, 0.8);
  for (int i = 0; i <= 4; i++) {
    double y = f->t + f->h - f->h * i / 4.0;
    double v = f->y0 + (f->y1 - f->y0) * i / 4.0;
    g_autofree char *s =
        g_strdup_printf(f->log_scale ? "%.3g" : "%.2f", f->log_scale ? pow(10, v) : v);
    text_at(cr, w, s, f->l - 6, y, 1.0);
    if (f->have_right) {
      g_autofree char *r = g_strdup_printf("%.3g", f->r0 + (f->r1 - f->r0) * i / 4.0);
      text_at(cr, w, r, f->l + f->w + 6, y, 0.0);
    }
  }
  g_autofree char *xs0 = g_strdup_printf("%.0f", f->x0);
  g_autofree char *xs1 = g_strdup_printf("%.0f", f->x1);
  double below = f->t + f->h + 14;
  text_at(cr, w, xs0, f->l, below, 0.0);
  text_at(cr, w, xs1, f->l + f->w, below, 1.0);
  text_at(cr, w, f->log_scale ? _("step · logarithmic loss axis") : _("step"), f->l + f->w / 2,
          below, 0.5);
}

/* Evaluations: a dot per point, over their dashed line. */
static void draw_dots(cairo_t *cr, const Frame *f, const CohortChartSeries *s, double lo, double hi)
{
  set_colour(cr, s, s->overlay ? 0.85 : 1.0);
  for (guint i = 0; i + 1 < s->xy->len; i += 2) {
    double v = g_array_index(s->xy, double, i + 1);
    if (!drawable(f, s, v))
      continue;
    double a = s->right ? v : axis_value(f, v);
    double x = f->l + (g_array_index(s->xy, double, i) - f->x0) / (f->x1 - f->x0) * f->w;
    double y = f->t + f->h - (a - lo) / (hi - lo) * f->h;
    cairo_new_sub_path(cr);
    cairo_arc(cr, x, y, s->overlay ? 2 : 3, 0, 2 * G_PI);
  }
  cairo_fill(cr);
}

/* A path through points in pixel columns: a long run has far more points than the chart has
 * columns, so each column gets the lowest and highest point it holds (spikes stay visible)
 * and the path stays as long as the chart is wide. */
typedef struct {
  cairo_t *cr;
  gboolean started;
  int column;
  double lo, hi, first, last; /* y of the column's points */
} ColumnPath;

static void column_flush(ColumnPath *p)
{
  if (p->column == G_MININT)
    return;
  double ys[] = {p->first, p->first < p->last ? p->lo : p->hi, p->first < p->last ? p->hi : p->lo,
                 p->last};
  for (guint k = 0; k < G_N_ELEMENTS(ys); k++) {
    if (!p->started)
      cairo_move_to(p->cr, p->column + 0.5, ys[k]);
    else
      cairo_line_to(p->cr, p->column + 0.5, ys[k]);
    p->started = TRUE;
  }
}

static void column_add(ColumnPath *p, double x, double y)
{
  int column = (int)floor(x);
  if (column != p->column) {
    column_flush(p);
    p->column = column;
    p->lo = p->hi = p->first = y;
  }
  p->lo = MIN(p->lo, y);
  p->hi = MAX(p->hi, y);
  p->last = y;
}

static void draw_series(CohortLossChart *c, cairo_t *cr, const Frame *f, CohortChartSeries *s)
{
  guint n = s->xy->len / 2;
  g_autofree double *v = drawn_values(c, s);
  double lo = s->right ? f->r0 : f->y0, hi = s->right ? f->r1 : f->y1;
  gboolean smoothed = s->train && c->smoothing > 0;
  /* With smoothing the raw points stay visible, faint, under the smoothed curve. */
  for (int pass = smoothed ? 0 : 1; pass < 2; pass++) {
    ColumnPath path = {.cr = cr, .column = G_MININT};
    cairo_set_line_width(cr, s->overlay ? 1.5 : 2);
    set_colour(cr, s, pass == 0 ? 0.25 : s->overlay ? 0.85 : 1.0);
    for (guint i = 0; i < n; i++) {
      double raw = g_array_index(s->xy, double, 2 * i + 1);
      double y_value = pass == 0 ? raw : v[i];
      if (!drawable(f, s, raw) || !drawable(f, s, y_value))
        continue;
      double a = s->right ? y_value : axis_value(f, y_value);
      double x = f->l + (g_array_index(s->xy, double, 2 * i) - f->x0) / (f->x1 - f->x0) * f->w;
      column_add(&path, x, f->t + f->h - (a - lo) / (hi - lo) * f->h);
    }
    column_flush(&path);
    if (s->dots) {
      double dash[] = {4, 3};
      cairo_set_dash(cr, dash, 2, 0);
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
  }
  if (s->dots)
    draw_dots(cr, f, s, lo, hi);
}

void cohort_loss_chart_draw(CohortLossChart *c, cairo_t *cr, int width, int height)
{
  GtkWidget *w = GTK_WIDGET(c);
  GdkRGBA fg;
  gtk_style_context_get_color(gtk_widget_get_style_context(w), &fg);
  Frame f = {.log_scale = c->log_scale};
  ranges(c, &f);
  f.l = 56;
  double r = f.have_right ? 52 : 16, b = 28;
  f.t = legend(c, NULL, w, &fg, f.l, width - f.l - r);
  f.w = width - f.l - r;
  f.h = height - f.t - b;
  if (f.w < 20 || f.h < 20)
    return;
  gboolean empty = TRUE;
  for (guint i = 0; i < c->series->len; i++)
    empty &= ((CohortChartSeries *)g_ptr_array_index(c->series, i))->xy->len == 0;
  if (empty) {
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.35);
    cairo_rectangle(cr, f.l + 0.5, f.t + 0.5, f.w, f.h);
    cairo_stroke(cr);
    cairo_set_source_rgba(cr, fg.red, fg.green, fg.blue, 0.6);
    text_at(cr, w, _("Loss appears here once training runs"), f.l + f.w / 2, f.t + f.h / 2, 0.5);
    return;
  }
  draw_axes(cr, w, &fg, &f);
  cairo_save(cr);
  cairo_rectangle(cr, f.l, f.t, f.w + 1, f.h + 1);
  cairo_clip(cr);
  /* Overlays under the live run. */
  for (guint i = c->series->len; i-- > 0;)
    draw_series(c, cr, &f, g_ptr_array_index(c->series, i));
  cairo_restore(cr);
  legend(c, cr, w, &fg, f.l, f.w);
}
