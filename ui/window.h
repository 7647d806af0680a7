/* The main window: pages that edit the config (built by the config form), the Run page, the
 * preset menu, Start/Stop, and the summary line. */
#pragma once

#include <gtk/gtk.h>

#include "ui/config-form.h"
#include "ui/multinode-dialog.h"
#include "ui/run.h"

G_BEGIN_DECLS

#define COHORT_TYPE_WINDOW (cohort_window_get_type())
G_DECLARE_FINAL_TYPE(CohortWindow, cohort_window, COHORT, WINDOW, GtkApplicationWindow)

/* Opens with the last used config ($XDG_CONFIG_HOME/cohort/last.json), else the preset
 * tiny-gpt, else the defaults; a last config that no longer loads is reported in the banner. */
CohortWindow *cohort_window_new(GtkApplication *app);

CohortConfigForm *cohort_window_get_form(CohortWindow *win);
CohortRun *cohort_window_get_run(CohortWindow *win);
GtkWidget *cohort_window_get_run_page(CohortWindow *win);
GtkWidget *cohort_window_get_dist_top(CohortWindow *win);
CohortMultinodeDialog *cohort_window_get_multinode_dialog(CohortWindow *win);

/* Whether Start can be pressed now (config valid and supported, nothing running). */
gboolean cohort_window_can_start(CohortWindow *win);

/* The summary line (batch, world size, global batch, learning rate after scaling), the
 * status line, and the error banner's text (NULL when hidden). */
const char *cohort_window_get_summary(CohortWindow *win);
const char *cohort_window_get_status(CohortWindow *win);
const char *cohort_window_get_banner(CohortWindow *win);

/* Shows a page: "model", "data", "training", "distributed", "output" or "run". */
void cohort_window_show_page(CohortWindow *win, const char *page);

/* Presets. Loading shows a failure in the banner and keeps the current settings. */
gboolean cohort_window_load_preset(CohortWindow *win, const char *name);
const char *cohort_window_get_preset(CohortWindow *win);
gboolean cohort_window_save_preset_as(CohortWindow *win, const char *name, GError **error);
/* Deletes without asking (the menu asks first). */
gboolean cohort_window_delete_preset(CohortWindow *win, const char *name, GError **error);
gboolean cohort_window_import(CohortWindow *win, const char *path);
gboolean cohort_window_export(CohortWindow *win, const char *path, GError **error);

/* Start writes the config to <workspace>/run.json and launches the engine (see
 * ui/programs.h); Stop ends the whole process group. */
gboolean cohort_window_start(CohortWindow *win, GError **error);
void cohort_window_stop(CohortWindow *win);

/* Shows a recorded progress stream (JSON Lines file) on the Run page. */
void cohort_window_replay(CohortWindow *win, const char *path);

G_END_DECLS
