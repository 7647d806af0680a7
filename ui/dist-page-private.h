/* What the window tests read from the top of the Distributed page; not for the rest of the
 * window. */
#pragma once

#include "ui/dist-page.h"
#include "ui/memory-view.h"

G_BEGIN_DECLS

/* The text shown about GPUs. */
const char *cohort_dist_page_get_gpu_text(GtkWidget *top);
/* The memory plan shown, and its view. */
const char *cohort_dist_page_get_memory_text(GtkWidget *top);
CohortMemoryView *cohort_dist_page_get_memory_view(GtkWidget *top);

G_END_DECLS
