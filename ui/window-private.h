/* Not the window's interface (that is ui/window.h): the instance struct and the functions
 * that the window's files (window.c, window-presets.c, window-actions.c) share, and the
 * getters the window tests read. Nothing else in ui/ includes it. */
#pragma once

#include "ui/config-form.h"
#include "ui/multinode-dialog.h"
#include "ui/run-page.h"
#include "ui/run.h"
#include "ui/window.h"

G_BEGIN_DECLS

/* Seconds between SIGTERM and SIGKILL when stopping: the engine saves a checkpoint first. */
#define COHORT_WINDOW_STOP_GRACE_S 20.0

struct _CohortWindow {
  GtkApplicationWindow parent_instance;
  /* From the template (window.ui). */
  GtkWidget *preset_button;
  GtkWidget *start_button;
  GtkWidget *stop_button;
  GtkWidget *banner;
  GtkWidget *banner_label;
  GtkWidget *stack;
  GtkWidget *summary_label;
  GtkWidget *status_label;

  CohortConfigForm *form;
  CohortRun *run;
  CohortRunPage *run_page;
  GtkWidget *dist_top;
  CohortMultinodeDialog *multinode;
  GCancellable *cancel;
  char *preset;
  guint save_source; /* pending write of the last used config */
  int gpus;
  gboolean closing;
};

/* window.c */

/* Shows `text` in the error banner above the pages; NULL hides the banner. */
void cohort_window_show_banner(CohortWindow *win, const char *text);
/* The title: "Cohort — <preset>", or "Cohort" without a preset. */
void cohort_window_update_title(CohortWindow *win);
/* The summary and status lines, and which actions are enabled, from the form and the run. */
void cohort_window_update_state(CohortWindow *win);
/* Writes the config to cohort_ui_last_config_path(), best effort. */
void cohort_window_save_last(CohortWindow *win);

/* window-presets.c */

/* Adds win.load-preset and win.preset-{save,save-as,delete,import,export}. */
void cohort_window_add_preset_actions(CohortWindow *win);
/* Fills the Presets menu from the presets on disk. */
void cohort_window_rebuild_preset_menu(CohortWindow *win);
/* Remembers `name` (NULL: none) as the preset shown, for the title and the Save button. */
void cohort_window_set_preset(CohortWindow *win, const char *name);

/* window-actions.c */

/* Adds win.start, win.stop and win.multinode. */
void cohort_window_add_run_actions(CohortWindow *win);
/* Shows what win->run reports on the Run page and in the status line. */
void cohort_window_watch_run(CohortWindow *win);

/* For the window tests. */

CohortConfigForm *cohort_window_get_form(CohortWindow *win);
CohortRun *cohort_window_get_run(CohortWindow *win);
CohortRunPage *cohort_window_get_run_page(CohortWindow *win);
GtkWidget *cohort_window_get_dist_top(CohortWindow *win);
CohortMultinodeDialog *cohort_window_get_multinode_dialog(CohortWindow *win);
/* The preset shown (NULL when the settings are not a preset's). */
const char *cohort_window_get_preset(CohortWindow *win);

/* Whether Start can be pressed now (config valid and supported, nothing running). */
gboolean cohort_window_can_start(CohortWindow *win);

/* The summary line (batch, world size, global batch, learning rate after scaling), the
 * status line, and the error banner's text (NULL when hidden). */
const char *cohort_window_get_summary(CohortWindow *win);
const char *cohort_window_get_status(CohortWindow *win);
const char *cohort_window_get_banner(CohortWindow *win);

G_END_DECLS
