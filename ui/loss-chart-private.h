/* Shared by the chart's files (loss-chart.c: data and drawing; chart-export.c: PNG and CSV)
 * and read by the window tests; not for the rest of the window. */
#pragma once

#include "ui/loss-chart.h"

G_BEGIN_DECLS

typedef struct {
  char *name;     /* "loss", "val_loss", "accuracy", or "<label>/loss" for an overlay */
  GArray *xy;     /* double pairs: step, value */
  gboolean right; /* on the right axis (a metric that is not a loss) */
  gboolean dots;  /* evaluations: a dot per point */
  gboolean train; /* smoothed when smoothing is on */
  int colour;     /* index into the palette */
  gboolean overlay;
} CohortChartSeries;

struct _CohortLossChart {
  GtkDrawingArea parent_instance;
  GPtrArray *series; /* of CohortChartSeries, live ones first */
  double smoothing;
  gboolean log_scale;
  guint n_overlays;
};

/* Draws the whole chart into `cr` at `width` × `height` (the widget's draw function). */
void cohort_loss_chart_draw(CohortLossChart *chart, cairo_t *cr, int width, int height);

/* The series called `name`, or NULL. */
CohortChartSeries *cohort_loss_chart_find(CohortLossChart *chart, const char *name);

/* Number of points in a series ("loss" when !validation, "val_loss" when validation). */
guint cohort_loss_chart_count(CohortLossChart *chart, gboolean validation);
guint cohort_loss_chart_count_series(CohortLossChart *chart, const char *name);

/* The value drawn for point `i` of `series`: smoothed for training curves when smoothing is
 * on, else the point's own. */
double cohort_loss_chart_drawn_value(CohortLossChart *chart, const char *series, guint i);

G_END_DECLS
