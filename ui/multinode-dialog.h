/* The Multi-node settings dialog: number of nodes, this node's rank, master address and
 * port, the nodes' host names (controls of the config form), launch commands for every node
 * and launcher (engine/launch/launch-commands.h) with copy buttons, regenerated as the settings
 * change, an Export button that writes the run.json they name (and mpirun's hostfile when the
 * nodes are named), and a connection test whose result clears when the settings change. */
#pragma once

#include <gtk/gtk.h>

#include "ui/config-form.h"

G_BEGIN_DECLS

#define COHORT_TYPE_MULTINODE_DIALOG (cohort_multinode_dialog_get_type())
G_DECLARE_FINAL_TYPE(CohortMultinodeDialog, cohort_multinode_dialog, COHORT, MULTINODE_DIALOG,
                     GtkWindow)

/* The dialog hides on close and is reused; it places the form's multi-node rows once. */
CohortMultinodeDialog *cohort_multinode_dialog_new(GtkWindow *parent, CohortConfigForm *form);

/* The config file the commands name: the workspace's run.json, absolute (the file Start
 * writes), unless cohort_multinode_dialog_set_config_path gave another. g_free it. */
char *cohort_multinode_dialog_get_config_path(CohortMultinodeDialog *dlg);
void cohort_multinode_dialog_set_config_path(CohortMultinodeDialog *dlg, const char *config_path);

/* Fills the commands area from the form's config (the dialog does it on every edit of the
 * form); returns FALSE and shows the engine's message when the config cannot be launched as it
 * stands. Program paths are absolute when the window runs from a build tree. */
gboolean cohort_multinode_dialog_generate(CohortMultinodeDialog *dlg);

/* Writes the config to the file the commands name, and beside it the hostfile for mpirun when
 * node_hosts names the nodes (Export). FALSE with an error when the config cannot be launched
 * or a file cannot be written; the result shows below the button. */
gboolean cohort_multinode_dialog_export(CohortMultinodeDialog *dlg, GError **error);

/* Starts the connection test; the result appears below the button. */
void cohort_multinode_dialog_test_connection(CohortMultinodeDialog *dlg);

G_END_DECLS
