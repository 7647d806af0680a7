/* The Run page's chart: named curves over optimizer steps, drawn with cairo.
 *
 * A run's curves are series named as the progress events name their members: "loss" (the
 * training loss), "val_loss", other losses ("loss_task", "loss_distill"…) and metrics
 * ("accuracy"…). Names that contain "loss" share the left axis; any other metric gets the
 * right axis. Series appear as their first point arrives, so a model that reports more gets
 * more curves without the chart knowing it. Earlier runs can be laid over the live one to
 * compare (overlays). Training curves can be smoothed (an exponential moving average with
 * TensorBoard's bias correction; the raw points stay, faint), the loss axis can be
 * logarithmic, and the chart saves itself as PNG or its points as CSV. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define COHORT_TYPE_LOSS_CHART (cohort_loss_chart_get_type())
G_DECLARE_FINAL_TYPE(CohortLossChart, cohort_loss_chart, COHORT, LOSS_CHART, GtkDrawingArea)

/* The most earlier runs laid over the live one. */
#define COHORT_LOSS_CHART_MAX_OVERLAYS 4

/* An empty chart; it asks for 220 pixels of height (160 at least) and expands both ways. */
GtkWidget *cohort_loss_chart_new(void);

/* Adds a point to series `series` (created on its first point). Points that are not finite
 * are dropped. Redraws. */
void cohort_loss_chart_add_point(CohortLossChart *chart, const char *series, double step,
                                 double value);

/* The same for the two classic series: "val_loss" when `validation`, else "loss". */
void cohort_loss_chart_add(CohortLossChart *chart, gboolean validation, double step, double loss);

/* Removes every live series (overlays stay). Redraws. */
void cohort_loss_chart_clear(CohortLossChart *chart);

/* Removes the points of steps after `step` from every live series: a run resumed from its
 * checkpoint at `step` redoes them. Redraws. */
void cohort_loss_chart_drop_after(CohortLossChart *chart, double step);

/* Smoothing weight of training curves, 0 (none) to 0.99. */
void cohort_loss_chart_set_smoothing(CohortLossChart *chart, double weight);
double cohort_loss_chart_get_smoothing(CohortLossChart *chart);

/* A logarithmic loss axis (points at or below 0 are left out while it is on). */
void cohort_loss_chart_set_log_scale(CohortLossChart *chart, gboolean log_scale);
gboolean cohort_loss_chart_get_log_scale(CohortLossChart *chart);

/* Lays an earlier run over the live one: its training loss `train` and validation loss `val`
 * (GArrays of double pairs step, value; copied; either may be NULL), named `label` in the
 * legend. At most COHORT_LOSS_CHART_MAX_OVERLAYS; FALSE when that many are shown. */
gboolean cohort_loss_chart_add_overlay(CohortLossChart *chart, const char *label,
                                       const GArray *train, const GArray *val);
void cohort_loss_chart_clear_overlays(CohortLossChart *chart);
guint cohort_loss_chart_count_overlays(CohortLossChart *chart);

/* The chart as a PNG image of `width` × `height` pixels, in the widget's colours. */
gboolean cohort_loss_chart_save_png(CohortLossChart *chart, const char *path, int width, int height,
                                    GError **error);

/* Every point as CSV: a header "step,<series>,…" (overlays as "<label>/loss" and
 * "<label>/val_loss"), then one row per step that any series has, empty where a series has no
 * point at that step. */
gboolean cohort_loss_chart_save_csv(CohortLossChart *chart, const char *path, GError **error);

G_END_DECLS
