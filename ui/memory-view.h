/* The Distributed page's memory plan: what each process will need for the settings (the
 * engine's own plan, `cohort-train --config … --explain`, the one a launch that cannot fit is
 * refused with), the processes of this machine together against its memory, and whether Start
 * will be refused.
 *
 * It follows every change of the settings: an edit marks the plan shown as being worked out
 * again at once (the figures dimmed in place, never shown as the new settings' plan), and one
 * engine process at a time works out the latest settings: a moment after the last edit while
 * the page is in view (a burst of edits asks once), at once when it comes into view after
 * edits elsewhere; a plan of settings already changed again is never shown. Its layout does not
 * move with the numbers: the figures sit in a grid of fixed widths, and the line under them keeps
 * the height of its longest state, so the page below stays where it was. */
#pragma once

#include <gtk/gtk.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

#define COHORT_TYPE_MEMORY_VIEW (cohort_memory_view_get_type())
G_DECLARE_FINAL_TYPE(CohortMemoryView, cohort_memory_view, COHORT, MEMORY_VIEW, GtkBox)

GtkWidget *cohort_memory_view_new(void);

/* The settings changed: the plan of `cfg` (copied), unless it is the one asked for last. */
void cohort_memory_view_update(CohortMemoryView *view, const CohortConfig *cfg);

/* For the tests: the heading, figures and the line under them as shown, one per line; whether
 * a plan is being worked out; how many engine processes were started. */
char *cohort_memory_view_get_text(CohortMemoryView *view);
gboolean cohort_memory_view_is_working(CohortMemoryView *view);
guint cohort_memory_view_count_asked(CohortMemoryView *view);

G_END_DECLS
