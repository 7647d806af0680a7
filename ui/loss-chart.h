/* A live chart of training and validation loss over optimizer steps (a GtkDrawingArea drawn
 * with cairo). */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

GtkWidget *cohort_loss_chart_new(void);
/* Adds a point; `validation` selects the validation series. Redraws. */
void cohort_loss_chart_add(GtkWidget *chart, gboolean validation, double step, double loss);
void cohort_loss_chart_clear(GtkWidget *chart);
/* Removes the points of steps after `step` from both series: a run resumed from its
 * checkpoint at `step` redoes them. */
void cohort_loss_chart_drop_after(GtkWidget *chart, double step);
/* Number of points in a series. */
guint cohort_loss_chart_count(GtkWidget *chart, gboolean validation);

G_END_DECLS
