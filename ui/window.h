/* The main window: pages that edit the config (built by the config form), the Run page, the
 * preset menu, Start/Resume/Stop, the main menu, and the summary line. Its actions are in
 * ui/window-actions.c (the run), ui/window-presets.c (presets) and ui/window-menu.c (About,
 * Preferences, Keyboard Shortcuts). */
#pragma once

#include <adwaita.h>

G_BEGIN_DECLS

#define COHORT_TYPE_WINDOW (cohort_window_get_type())
G_DECLARE_FINAL_TYPE(CohortWindow, cohort_window, COHORT, WINDOW, AdwApplicationWindow)

/* Opens with the last used config ($XDG_CONFIG_HOME/cohort/last.json), else the preset
 * tiny-gpt, else the defaults; a last config that no longer loads is reported in the banner.
 * The size and page of the last session are restored ($XDG_CONFIG_HOME/cohort/window.ini). */
CohortWindow *cohort_window_new(GtkApplication *app);

/* Shows a page: "model", "data", "training", "distributed", "output" or "run". */
void cohort_window_show_page(CohortWindow *win, const char *page);

/* Presets. Loading shows a failure in the banner and keeps the current settings. */
gboolean cohort_window_load_preset(CohortWindow *win, const char *name);
gboolean cohort_window_save_preset_as(CohortWindow *win, const char *name, GError **error);
/* Deletes without asking; the toast that says so offers Undo (win.preset-undo-delete). */
gboolean cohort_window_delete_preset(CohortWindow *win, const char *name, GError **error);
/* Imports a config file as a new user preset named after the file and shows it; a failure
 * shows in the banner and keeps the current settings. */
gboolean cohort_window_import(CohortWindow *win, const char *path);
gboolean cohort_window_export(CohortWindow *win, const char *path, GError **error);

/* What Start does: when the workspace already holds a run's checkpoints it asks (Resume,
 * Start over in a new folder, Cancel) and returns TRUE, the answer doing the rest; otherwise
 * it writes the config to <workspace>/run.json and launches the engine (see ui/programs.h).
 * FALSE with an error when it cannot start. */
gboolean cohort_window_start(CohortWindow *win, GError **error);
/* Continues the workspace's last run from its last checkpoint (--resume auto). */
gboolean cohort_window_resume(CohortWindow *win, GError **error);
/* Ends the whole process group (a checkpoint is saved first). */
void cohort_window_stop(CohortWindow *win);
/* Asks the running job for a sample, a checkpoint or a comparison of the ranks' weights
 * ("sample", "save", "check") at its next step (the control channel,
 * docs/progress-protocol.md); the answering event confirms it in a toast. */
gboolean cohort_window_request(CohortWindow *win, const char *request, GError **error);

/* Shows a recorded progress stream (JSON Lines file) on the Run page. */
void cohort_window_replay(CohortWindow *win, const char *path);

G_END_DECLS
