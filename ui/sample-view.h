/* The Run page's sample area: the latest text sample with arrows to page back through the
 * earlier ones by step, or the latest image grid with a strip of the earlier ones to browse by
 * step; clicking a grid opens it enlarged. */
#pragma once

#include <gtk/gtk.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define COHORT_TYPE_SAMPLE_VIEW (cohort_sample_view_get_type())
G_DECLARE_FINAL_TYPE(CohortSampleView, cohort_sample_view, COHORT, SAMPLE_VIEW, GtkBox)

/* Forgets every sample ("No sample yet."). */
void cohort_sample_view_reset(CohortSampleView *view);

/* Shows a `sample` event: its "text", or its "image" (a PNG path) with "step". */
void cohort_sample_view_add(CohortSampleView *view, JsonObject *ev);

/* For tests: the text shown, the image shown (NULL when none), the number of grids in the
 * strip, and showing the strip's entry `i` as if clicked. */
const char *cohort_sample_view_get_text(CohortSampleView *view);
const char *cohort_sample_view_get_image(CohortSampleView *view);
guint cohort_sample_view_count_images(CohortSampleView *view);
/* Text samples: how many were kept, which one is shown (its step; -1 when none), showing
 * number `i`, and paging one back (direction < 0) or forward as the arrows do. */
guint cohort_sample_view_count_texts(CohortSampleView *view);
gint64 cohort_sample_view_get_text_step(CohortSampleView *view);
void cohort_sample_view_show_text(CohortSampleView *view, guint i);
void cohort_sample_view_step_text(CohortSampleView *view, int direction);
void cohort_sample_view_show(CohortSampleView *view, guint i);

/* Opens the shown grid enlarged in a window of its own; returns it (NULL without a grid). */
GtkWindow *cohort_sample_view_enlarge(CohortSampleView *view);

G_END_DECLS
