/* The Run page: progress bars, figures, the chart (with smoothing, a log scale, export and the
 * workspace's earlier runs to compare), the sample history, the per-rank table and the child's
 * output, all fed from progress events (docs/progress-protocol.md). On a narrow window the
 * sample and ranks column moves under the chart. */
#pragma once

#include <gtk/gtk.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define COHORT_TYPE_RUN_PAGE (cohort_run_page_get_type())
G_DECLARE_FINAL_TYPE(CohortRunPage, cohort_run_page, COHORT, RUN_PAGE, GtkBox)

/* A page that shows no run yet. Signals:
 *   "show-run" (const char *run_id): the History asks to show an earlier run of the
 *              workspace (the window replays it). */
GtkWidget *cohort_run_page_new(void);

/* Clears everything for a new run (comparisons with earlier runs stay). */
void cohort_run_page_reset(CohortRunPage *page);

/* Shows one progress event; unknown events and keys are ignored. */
void cohort_run_page_handle_event(CohortRunPage *page, JsonObject *ev);

/* Appends one line to the log view (the child's stdout/stderr and `log` events). */
void cohort_run_page_append_log(CohortRunPage *page, const char *line);

/* The line above the figures: what the run is doing or how it ended. */
void cohort_run_page_set_status(CohortRunPage *page, const char *text);

/* A live run (a child process, not a replay): its Sample now and Save checkpoint buttons show,
 * and `error` events stay out of the log (the engine writes each to stderr too, which the log
 * shows). */
void cohort_run_page_set_live(CohortRunPage *page, gboolean live);

/* The run ended (its `done` event, or its processes without one): a run that did not
 * complete shows no time left. */
void cohort_run_page_run_ended(CohortRunPage *page, gboolean completed);

/* A run has ended here: Open folder and Show model show. */
void cohort_run_page_set_ended(CohortRunPage *page, gboolean ended);

/* The workspace whose earlier runs the History lists (NULL: none), and the run shown. */
void cohort_run_page_set_workspace(CohortRunPage *page, const char *workspace);
void cohort_run_page_set_current_run(CohortRunPage *page, const char *run_id);

/* Whether the last step has been reported and the run is evaluating and saving. */
gboolean cohort_run_page_in_final_phase(CohortRunPage *page);

/* The chart's smoothing weight (0 to 0.99), as the page's slider shows it. */
double cohort_run_page_get_smoothing(CohortRunPage *page);
void cohort_run_page_set_smoothing(CohortRunPage *page, double weight);

G_END_DECLS
