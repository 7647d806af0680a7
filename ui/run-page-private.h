/* What the window tests read from the Run page; not for the rest of the window. */
#pragma once

#include "ui/history-popover.h"
#include "ui/loss-chart.h"
#include "ui/ranks-view.h"
#include "ui/reflow-box.h"
#include "ui/run-page.h"
#include "ui/sample-view.h"

G_BEGIN_DECLS

/* The text shown for `figure` ("status", "step", "epoch", "loss", "val_loss", "lr",
 * "tokens_per_s" (tokens or samples per second), "eta", "elapsed", "loss_scale", "sample"),
 * or NULL for another name. */
const char *cohort_run_page_get_figure(CohortRunPage *page, const char *figure);
/* Whether a figure is shown; "loss_scale" is shown only once a step reports a loss scale
 * (fp16 runs). */
gboolean cohort_run_page_figure_shown(CohortRunPage *page, const char *figure);
/* The caption of the throughput figure ("Tokens per second" or "Samples per second"). */
const char *cohort_run_page_get_throughput_caption(CohortRunPage *page);
/* The step progress bar's fraction, the chart's point counts, the ranks table. */
double cohort_run_page_get_step_fraction(CohortRunPage *page);
guint cohort_run_page_count_points(CohortRunPage *page, gboolean validation);
guint cohort_run_page_count_ranks(CohortRunPage *page);
/* Points of a distillation's loss parts in the chart: the teacher term or the task term. */
guint cohort_run_page_count_parts(CohortRunPage *page, gboolean teacher);
/* Whether the chart has an accuracy curve (right axis; evaluations that report "accuracy") and its
 * number of points. */
gboolean cohort_run_page_accuracy_shown(CohortRunPage *page);
guint cohort_run_page_count_accuracy_points(CohortRunPage *page);
/* Whether the ranks table has the SyncBN column (the last ranks event reported syncbn_s). */
gboolean cohort_run_page_ranks_show_syncbn(CohortRunPage *page);
/* The rank shown as the slowest (highlighted), or -1. */
int cohort_run_page_get_slowest(CohortRunPage *page);
/* Parts of the page. */
CohortSampleView *cohort_run_page_get_samples(CohortRunPage *page);
CohortLossChart *cohort_run_page_get_chart(CohortRunPage *page);
CohortRanksView *cohort_run_page_get_ranks(CohortRunPage *page);
CohortHistoryPopover *cohort_run_page_get_history(CohortRunPage *page);
CohortReflowBox *cohort_run_page_get_reflow(CohortRunPage *page);
/* Whether the live-run buttons (Sample now, Save checkpoint) and the ended-run buttons (Open
 * folder, Show model) are shown. */
gboolean cohort_run_page_live_buttons_shown(CohortRunPage *page);
gboolean cohort_run_page_ended_buttons_shown(CohortRunPage *page);
/* The whole log text. */
char *cohort_run_page_get_log(CohortRunPage *page);

G_END_DECLS
