/* What the window tests read from the Multi-node settings dialog; not for the rest of the
 * window. */
#pragma once

#include "ui/multinode-dialog.h"

G_BEGIN_DECLS

/* The generated command of `launcher` ("cohort-run", "torchrun", "srun", "sbatch", "mpirun")
 * for node `index` (or the one command), or NULL. */
const char *cohort_multinode_dialog_get_command(CohortMultinodeDialog *dlg, const char *launcher,
                                                guint index);
/* How many commands `launcher` has. */
guint cohort_multinode_dialog_count_commands(CohortMultinodeDialog *dlg, const char *launcher);

/* The text of the connection test's result ("" before any test). */
const char *cohort_multinode_dialog_get_test_result(CohortMultinodeDialog *dlg);

/* The text of the last export's result ("" before any export, and after an edit). */
const char *cohort_multinode_dialog_get_export_result(CohortMultinodeDialog *dlg);

G_END_DECLS
