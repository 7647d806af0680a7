/* What the window tests read from the loss chart; not for the rest of the window. */
#pragma once

#include "ui/loss-chart.h"

G_BEGIN_DECLS

/* Number of points in a series. */
guint cohort_loss_chart_count(CohortLossChart *chart, gboolean validation);
/* Number of points of the teacher term (`teacher`) or the task term. */
guint cohort_loss_chart_count_part(CohortLossChart *chart, gboolean teacher);

G_END_DECLS
