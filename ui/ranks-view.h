/* The Run page's per-rank table, from `ranks` events (docs/progress-protocol.md): one row per
 * rank with its mean step, data and communication time and its memory, its share of each
 * micro-batch and its GPU (by name, memory and PCI bus id), GPU utilisation and GPU memory columns
 * and SyncBatchNorm's time when the events carry them, and a legend. The slowest rank is
 * highlighted only when it is clearly slower: its step time more than COHORT_RANKS_SLOW_FACTOR
 * times the median of the other ranks' (a straggler, not noise). */
#pragma once

#include <gtk/gtk.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define COHORT_RANKS_SLOW_FACTOR 1.10

#define COHORT_TYPE_RANKS_VIEW (cohort_ranks_view_get_type())
G_DECLARE_FINAL_TYPE(CohortRanksView, cohort_ranks_view, COHORT, RANKS_VIEW, GtkBox)

GtkWidget *cohort_ranks_view_new(void);

/* Back to "no ranks yet". */
void cohort_ranks_view_reset(CohortRanksView *view);

/* Shows a `ranks` event (the table appears with the first). */
void cohort_ranks_view_show(CohortRanksView *view, JsonObject *ev);

/* Shows a `hang` event above the table: the collective the ranks wait in and, for each rank
 * that has not reached it, what it is doing; a resolved one hides it. */
void cohort_ranks_view_show_hang(CohortRanksView *view, JsonObject *ev);
/* The text shown for the last `hang` event; "" when none is shown. */
const char *cohort_ranks_view_get_hang_text(CohortRanksView *view);
/* A `health` event in words, for the log (g_free it). */
char *cohort_ranks_view_health_text(JsonObject *ev);

/* Rows shown; the highlighted rank (-1: none); whether the GPU columns are shown. */
guint cohort_ranks_view_count(CohortRanksView *view);
int cohort_ranks_view_get_slowest(CohortRanksView *view);
gboolean cohort_ranks_view_has_gpu_columns(CohortRanksView *view);
/* Whether the Batch column (each rank's share of a micro-batch, `batch`) and the Device column
 * (GPU ranks' `device`: name, memory, PCI bus id) are shown. */
gboolean cohort_ranks_view_has_batch_column(CohortRanksView *view);
gboolean cohort_ranks_view_has_device_column(CohortRanksView *view);
/* Whether the SyncBN column is shown (a rank reported `syncbn_s`: SyncBatchNorm's time). */
gboolean cohort_ranks_view_has_syncbn_column(CohortRanksView *view);

G_END_DECLS
