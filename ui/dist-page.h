/* The top of the Distributed page: the GPUs found on this machine, the memory each process
 * will need (the engine's plan, as --explain prints it) and the button that opens the
 * Multi-node settings dialog (action win.multinode). The keys' controls below it come from
 * the config form. */
#pragma once

#include <gtk/gtk.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

GtkWidget *cohort_dist_page_top_new(void);

/* Shows the detected GPUs (a GPtrArray of CohortGpu; empty = "No NVIDIA GPU found"). */
void cohort_dist_page_set_gpus(GtkWidget *top, GPtrArray *gpus);

/* The settings changed: the memory plan follows them (ui/memory-view.h): per process the
 * parameters, gradients, optimizer state, EMA, activations and the largest gathered working set
 * for its ZeRO stage, the processes on this machine together against its memory, and whether
 * Start will be refused. */
void cohort_dist_page_update_memory(GtkWidget *top, const CohortConfig *cfg);

G_END_DECLS
