/* The Multi-node settings dialog: number of nodes, this node's rank, master address and
 * port (controls of the config form), launch commands for every node and launcher
 * (engine/launch-commands.h) with copy buttons, and a connection test. */
#pragma once

#include <gtk/gtk.h>

#include "ui/config-form.h"

G_BEGIN_DECLS

#define COHORT_TYPE_MULTINODE_DIALOG (cohort_multinode_dialog_get_type())
G_DECLARE_FINAL_TYPE(CohortMultinodeDialog, cohort_multinode_dialog, COHORT, MULTINODE_DIALOG,
                     GtkWindow)

/* The dialog hides on close and is reused; it places the form's multi-node rows once.
 * `config_path` is the path the commands name (the workspace's run.json). */
CohortMultinodeDialog *cohort_multinode_dialog_new(GtkWindow *parent, CohortConfigForm *form);
void cohort_multinode_dialog_set_config_path(CohortMultinodeDialog *dlg, const char *config_path);

/* Fills the commands area from the form's config; returns FALSE and shows the engine's
 * message when the config cannot be launched as it stands. */
gboolean cohort_multinode_dialog_generate(CohortMultinodeDialog *dlg);

/* Starts the connection test; the result appears below the button. */
void cohort_multinode_dialog_test_connection(CohortMultinodeDialog *dlg);

G_END_DECLS
