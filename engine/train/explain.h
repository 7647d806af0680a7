/* `cohort-train --explain`: the resolved plan of a run as JSON, without training. */
#pragma once

#include <glib.h>
#include "engine/config/config.h"
#include "engine/launch/launch-plan.h"

G_BEGIN_DECLS

/* The plan: the config after overrides, the launch plan (`plan`: who starts how many
 * processes, and `argv`, the command line that does), parameter count, tokens per optimizer
 * step, global batch and scaled learning rate, steps per epoch and in all, the device and
 * threads, and the first `n_first` data indices each of the plan's ranks reads in epoch 0.
 * Opens the training data (to count windows); errors are those of the data. */
char *cohort_explain(const CohortConfig *cfg, const CohortLaunchPlan *plan, const char *const *argv,
                     int n_first, GError **error);

G_END_DECLS
