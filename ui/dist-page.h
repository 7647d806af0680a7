/* The top of the Distributed page: the GPUs found on this machine and the button that opens
 * the Multi-node settings dialog (action win.multinode). The keys' controls below it come
 * from the config form. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

GtkWidget *cohort_dist_page_top_new(void);

/* Shows the detected GPUs (a GPtrArray of CohortGpu; empty = "No NVIDIA GPU found"). */
void cohort_dist_page_set_gpus(GtkWidget *top, GPtrArray *gpus);

G_END_DECLS
