/* What the window tests read from the loss chart; not for the rest of the window. */
#pragma once

#include "ui/loss-chart.h"

G_BEGIN_DECLS

/* Number of points in a series. */
guint cohort_loss_chart_count(CohortLossChart *chart, gboolean validation);

G_END_DECLS
