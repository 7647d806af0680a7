/* The main window: pages that edit the config (built by the config form), the Run page, the
 * preset menu, Start/Stop, and the summary line. Its actions (win.start, win.stop,
 * win.multinode, win.load-preset and win.preset-*) are in ui/window-actions.c and
 * ui/window-presets.c. */
#pragma once

#include <gtk/gtk.h>

G_BEGIN_DECLS

#define COHORT_TYPE_WINDOW (cohort_window_get_type())
G_DECLARE_FINAL_TYPE(CohortWindow, cohort_window, COHORT, WINDOW, GtkApplicationWindow)

/* Opens with the last used config ($XDG_CONFIG_HOME/cohort/last.json), else the preset
 * tiny-gpt, else the defaults; a last config that no longer loads is reported in the banner. */
CohortWindow *cohort_window_new(GtkApplication *app);

/* Shows a page: "model", "data", "training", "distributed", "output" or "run". */
void cohort_window_show_page(CohortWindow *win, const char *page);

/* Presets. Loading shows a failure in the banner and keeps the current settings. */
gboolean cohort_window_load_preset(CohortWindow *win, const char *name);
gboolean cohort_window_save_preset_as(CohortWindow *win, const char *name, GError **error);
/* Deletes without asking (the menu asks first). */
gboolean cohort_window_delete_preset(CohortWindow *win, const char *name, GError **error);
/* Imports a config file; a failure shows in the banner and keeps the current settings. */
gboolean cohort_window_import(CohortWindow *win, const char *path);
gboolean cohort_window_export(CohortWindow *win, const char *path, GError **error);

/* Start writes the config to <workspace>/run.json and launches the engine (see
 * ui/programs.h); Stop ends the whole process group. */
gboolean cohort_window_start(CohortWindow *win, GError **error);
void cohort_window_stop(CohortWindow *win);

/* Shows a recorded progress stream (JSON Lines file) on the Run page. */
void cohort_window_replay(CohortWindow *win, const char *path);

G_END_DECLS
