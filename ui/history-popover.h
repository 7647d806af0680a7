/* The Run page's History: the runs of the workspace's events.jsonl (ui/run-history.h), newest
 * first, each with "Compare" (lays its loss curves over the chart; up to
 * COHORT_LOSS_CHART_MAX_OVERLAYS at once) and "Show" (shows that run on the page: the window
 * replays it). The list is read again each time the popover opens. */
#pragma once

#include <gtk/gtk.h>

#include "ui/loss-chart.h"
#include "ui/run-history.h"

G_BEGIN_DECLS

#define COHORT_TYPE_HISTORY_POPOVER (cohort_history_popover_get_type())
G_DECLARE_FINAL_TYPE(CohortHistoryPopover, cohort_history_popover, COHORT, HISTORY_POPOVER,
                     GtkPopover)

/* Signals:
 *   "show-run" (const char *run_id): "Show" was pressed for that run. */
GtkWidget *cohort_history_popover_new(CohortLossChart *chart);

/* The workspace whose events.jsonl is listed (NULL: none). Comparisons of another workspace's
 * runs are dropped. */
void cohort_history_popover_set_workspace(CohortHistoryPopover *pop, const char *workspace);

/* Reads the list now (the popover reads it in a thread when it opens). FALSE with an error when
 * the file cannot be read. */
gboolean cohort_history_popover_reload(CohortHistoryPopover *pop, GError **error);

/* The runs listed, oldest first (CohortPastRun); NULL before a load. */
GPtrArray *cohort_history_popover_get_runs(CohortHistoryPopover *pop);

/* Turns the comparison of run `run_id` on or off, as its check button does. FALSE when the run
 * is not listed or COHORT_LOSS_CHART_MAX_OVERLAYS are compared already. */
gboolean cohort_history_popover_compare(CohortHistoryPopover *pop, const char *run_id, gboolean on);

/* The run the page shows (its row is marked, and "Show" is off for it); NULL: none. */
void cohort_history_popover_set_current(CohortHistoryPopover *pop, const char *run_id);

/* Whether "Show" is possible (not while a run is going on). */
void cohort_history_popover_set_can_show(CohortHistoryPopover *pop, gboolean can_show);

G_END_DECLS
