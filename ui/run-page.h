/* The Run page: progress bars, figures, live loss chart, latest sample, per-rank table and
 * the child's output, all fed from progress events (docs/progress-protocol.md). */
#pragma once

#include <gtk/gtk.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

GtkWidget *cohort_run_page_new(void);

/* Clears everything for a new run. */
void cohort_run_page_reset(GtkWidget *page);

/* Shows one progress event; unknown events and keys are ignored. */
void cohort_run_page_handle_event(GtkWidget *page, JsonObject *ev);

/* Appends one line to the log view (the child's stdout/stderr and `log` events). */
void cohort_run_page_append_log(GtkWidget *page, const char *line);

/* The line above the figures: what the run is doing or how it ended. */
void cohort_run_page_set_status(GtkWidget *page, const char *text);

/* For tests and the screenshot script: the text shown for `figure` ("status", "step",
 * "epoch", "loss", "val_loss", "lr", "tokens_per_s", "eta", "elapsed", "loss_scale", "sample"). */
const char *cohort_run_page_get_figure(GtkWidget *page, const char *figure);
/* Whether a figure is shown; "loss_scale" is shown only once a step reports a loss scale
 * (fp16 runs). */
gboolean cohort_run_page_figure_shown(GtkWidget *page, const char *figure);
/* The step progress bar's fraction, the chart's point counts, the ranks table. */
double cohort_run_page_get_step_fraction(GtkWidget *page);
guint cohort_run_page_count_points(GtkWidget *page, gboolean validation);
guint cohort_run_page_count_ranks(GtkWidget *page);
/* The rank shown as the slowest (highlighted), or -1. */
int cohort_run_page_get_slowest(GtkWidget *page);
/* The whole log text. */
char *cohort_run_page_get_log(GtkWidget *page);

G_END_DECLS
