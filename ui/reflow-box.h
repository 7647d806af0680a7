/* Two children side by side when there is room, one above the other when not: the Run page
 * puts its chart beside the sample and ranks column on a wide window and the column under the
 * chart on a narrow one (GTK 4.8 and libadwaita 1.2 have no breakpoints). The first child is
 * the main one: it takes the width the second leaves in a row, and the height the second
 * leaves in a column. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define COHORT_TYPE_REFLOW_BOX (cohort_reflow_box_get_type())
G_DECLARE_FINAL_TYPE(CohortReflowBox, cohort_reflow_box, COHORT, REFLOW_BOX, GtkWidget)

/* Properties: "threshold" (int, px): the least width for a row (default 720); "side-width"
 * (int, px): the second child's width in a row (default 360); "spacing" (int, px, default 12).
 * Children are added with GtkBuildable (<child> in a .ui file) or cohort_reflow_box_append. */
GtkWidget *cohort_reflow_box_new(void);
void cohort_reflow_box_append(CohortReflowBox *box, GtkWidget *child);

/* Whether the last allocation put the children in a row. */
gboolean cohort_reflow_box_is_row(CohortReflowBox *box);

G_END_DECLS
