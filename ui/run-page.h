/* The Run page: progress bars, figures, live loss chart, latest sample, per-rank table and
 * the child's output, all fed from progress events (docs/progress-protocol.md). */
#pragma once

#include <gtk/gtk.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define COHORT_TYPE_RUN_PAGE (cohort_run_page_get_type())
G_DECLARE_FINAL_TYPE(CohortRunPage, cohort_run_page, COHORT, RUN_PAGE, GtkBox)

/* A page that shows no run yet. */
GtkWidget *cohort_run_page_new(void);

/* Clears everything for a new run. */
void cohort_run_page_reset(CohortRunPage *page);

/* Shows one progress event; unknown events and keys are ignored. */
void cohort_run_page_handle_event(CohortRunPage *page, JsonObject *ev);

/* Appends one line to the log view (the child's stdout/stderr and `log` events). */
void cohort_run_page_append_log(CohortRunPage *page, const char *line);

/* The line above the figures: what the run is doing or how it ended. */
void cohort_run_page_set_status(CohortRunPage *page, const char *text);

G_END_DECLS
