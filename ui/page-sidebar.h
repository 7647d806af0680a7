/* The window's list of pages: one row per page of a GtkStack (its title), selecting a row
 * shows the page, and a row can carry a warning mark (a page that holds an invalid setting).
 * GtkStackSidebar has no such mark in GTK 4.8. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define COHORT_TYPE_PAGE_SIDEBAR (cohort_page_sidebar_get_type())
G_DECLARE_FINAL_TYPE(CohortPageSidebar, cohort_page_sidebar, COHORT, PAGE_SIDEBAR, GtkWidget)

/* A sidebar for `stack`'s pages; call cohort_page_sidebar_rebuild after adding pages. */
GtkWidget *cohort_page_sidebar_new(GtkStack *stack);

/* Makes one row per page of the stack, in order, and selects the visible one. */
void cohort_page_sidebar_rebuild(CohortPageSidebar *sidebar);

/* Marks page `name` (NULL `reason`: clears the mark); the reason is the mark's tooltip. */
void cohort_page_sidebar_set_attention(CohortPageSidebar *sidebar, const char *name,
                                       const char *reason);

/* Whether page `name` carries the mark (for tests). */
gboolean cohort_page_sidebar_get_attention(CohortPageSidebar *sidebar, const char *name);

G_END_DECLS
