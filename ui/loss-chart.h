/* A live chart of training and validation loss over optimizer steps: a GtkDrawingArea drawn
 * with cairo. In accuracy mode the same chart shows validation accuracy on a fixed 0–100 %
 * scale (a classifier's second curve). */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define COHORT_TYPE_LOSS_CHART (cohort_loss_chart_get_type())
G_DECLARE_FINAL_TYPE(CohortLossChart, cohort_loss_chart, COHORT, LOSS_CHART, GtkDrawingArea)

/* An empty chart; it asks for 220 pixels of height and expands both ways. */
GtkWidget *cohort_loss_chart_new(void);

/* Adds a point; `validation` selects the validation series. Points with a loss that is not
 * finite are dropped. Redraws. */
void cohort_loss_chart_add(CohortLossChart *chart, gboolean validation, double step, double loss);

/* Removes every point of both series. Redraws. */
void cohort_loss_chart_clear(CohortLossChart *chart);

/* Accuracy mode: the validation series is an accuracy in [0, 1], drawn on a fixed 0–100 %
 * axis with its own legend and placeholder; the training series is not drawn. Redraws. */
void cohort_loss_chart_set_accuracy(CohortLossChart *chart, gboolean accuracy);

G_END_DECLS
