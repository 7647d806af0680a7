/* A live chart of training and validation loss over optimizer steps, and of a distillation's
 * two loss parts: a GtkDrawingArea drawn with cairo. In accuracy mode the same chart shows
 * validation accuracy on a fixed 0–100 % scale (a classifier's second curve). */
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

/* Adds a point to a distillation's part of the training loss, drawn dashed: the teacher term
 * (`teacher`) or the task term. Values that are not finite are dropped. Redraws. */
void cohort_loss_chart_add_part(CohortLossChart *chart, gboolean teacher, double step,
                                double value);

/* Removes every point of every series. Redraws. */
void cohort_loss_chart_clear(CohortLossChart *chart);

/* Removes the points of steps after `step` from both series: a run resumed from its
 * checkpoint at `step` redoes them. Redraws. */
void cohort_loss_chart_drop_after(CohortLossChart *chart, double step);
/* Accuracy mode: the validation series is an accuracy in [0, 1], drawn on a fixed 0–100 %
 * axis with its own legend and placeholder; the training series is not drawn. Redraws. */
void cohort_loss_chart_set_accuracy(CohortLossChart *chart, gboolean accuracy);

G_END_DECLS
