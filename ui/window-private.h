/* Not the window's interface (that is ui/window.h): the instance struct and the functions
 * that the window's files (window.c, window-launch.c, window-actions.c, window-presets.c,
 * window-menu.c, window-state.c) share, and the getters the window tests read. Nothing else in
 * ui/ includes it. */
#pragma once

#include <adwaita.h>

#include "ui/config-form.h"
#include "ui/multinode-dialog.h"
#include "ui/run-page.h"
#include "ui/run.h"
#include "ui/window.h"

G_BEGIN_DECLS

/* Seconds between SIGTERM and SIGKILL when stopping: the engine saves a checkpoint first. */
#define COHORT_WINDOW_STOP_GRACE_S 20.0

/* What the window remembers between sessions ($XDG_CONFIG_HOME/cohort/window.ini) and the
 * preferences. */
typedef struct {
  int width, height;
  gboolean maximized;
  char *page;             /* the page shown last */
  gboolean notify;        /* a desktop notification when a run ends unseen */
  gboolean confirm_close; /* ask before closing the window during a run */
  double smoothing;       /* the chart's smoothing */
} CohortWindowState;

struct _CohortWindow {
  AdwApplicationWindow parent_instance;
  /* From the template (window.ui). */
  GtkWidget *toasts;
  GtkWidget *window_title;
  GtkWidget *sidebar_button;
  GtkWidget *preset_button;
  GtkWidget *main_menu_button;
  GtkWidget *start_button;
  GtkWidget *resume_button;
  GtkWidget *stop_button;
  GtkWidget *banner;
  GtkWidget *banner_label;
  GtkWidget *flap;
  GtkWidget *stack;
  GtkWidget *summary_label;
  GtkWidget *status_label;

  GtkWidget *sidebar; /* CohortPageSidebar */
  CohortConfigForm *form;
  CohortRun *run;
  CohortRunPage *run_page;
  GtkWidget *dist_top;
  GtkWidget *probe_view; /* CohortProbeView, at the end of dist_top */
  CohortMultinodeDialog *multinode;
  GCancellable *cancel;
  CohortWindowState state;
  char *preset;
  CohortConfig *preset_cfg;   /* the preset as loaded or saved: edits since make it "modified" */
  guint save_source;          /* pending write of the last used config */
  int gpus;                   /* detected GPUs; -1 while detection runs */
  gboolean closing;           /* closing: the application stays until the run has ended */
  gboolean close_confirmed;   /* the user said to stop the run and close */
  gboolean status_is_summary; /* the status line says how the last run ended */
  GPtrArray *problems;        /* CohortLaunchProblem: what keeps Start off besides refusals */
  GPtrArray *path_problems;   /* the path keys' part, found for `checked` */
  char *checked;              /* what the path checks read (cohort_launch_paths_read) */
  guint checkpoints;          /* complete checkpoints in the workspace (Resume) */
  char *counted_ws;           /* the workspace they were counted in */
  char *run_workspace;        /* the workspace of the run started or shown last */
  char *model_path;           /* the model the last run saved, or NULL */
  guint pending_requests;     /* Sample now / Save now sent and not answered yet */
  char *last_toast;           /* the last toast's text, for tests */
  char *last_notification;    /* title of the last desktop notification, for tests */
  char *last_opened;          /* the last URI opened (Open folder, Show model), for tests */
  GtkWidget *question;        /* the open question dialog, for tests */
  CohortConfig *deleted;      /* the preset deleted last, while its Undo toast shows */
  char *deleted_name;
};

/* window.c */

/* Shows `text` in the error banner above the pages; NULL hides the banner. */
void cohort_window_show_banner(CohortWindow *win, const char *text);
/* A short confirmation at the bottom of the window; `undo_action` (a win.* action, may be
 * NULL) adds an Undo button. */
void cohort_window_toast(CohortWindow *win, const char *text, const char *undo_action);
/* The title: "Cohort — <preset>", with "(modified)" after edits, or "Cohort". */
void cohort_window_update_title(CohortWindow *win);
/* The summary and status lines, the pre-launch checks, the sidebar's marks, and which actions
 * are enabled, from the form and the run. */
void cohort_window_update_state(CohortWindow *win);
/* Writes the config to cohort_ui_last_config_path(), best effort. */
void cohort_window_save_last(CohortWindow *win);
/* Reads again how many checkpoints the workspace holds. */
void cohort_window_count_checkpoints(CohortWindow *win);

/* window-launch.c */

/* How Start goes on when the workspace already holds a run. */
typedef enum {
  COHORT_START_FRESH,      /* a new run (the workspace holds none) */
  COHORT_START_RESUME,     /* --resume auto: the last checkpoint's run goes on */
  COHORT_START_NEW_FOLDER, /* a new run in a fresh workspace_dir beside the old one */
} CohortStartMode;

/* Starts now in `mode`, without asking. */
gboolean cohort_window_launch(CohortWindow *win, CohortStartMode mode, GError **error);
/* The first workspace "<ws>-2", "<ws>-3", … that does not exist yet. g_free the result. */
char *cohort_window_fresh_workspace(const char *workspace);

/* window-actions.c */

/* Adds win.start, win.resume, win.stop, win.sample-now, win.save-now, win.open-folder,
 * win.show-model and win.multinode. */
void cohort_window_add_run_actions(CohortWindow *win);
/* Shows what win->run reports on the Run page and in the status line. */
void cohort_window_watch_run(CohortWindow *win);

/* window-presets.c */

/* Adds win.load-preset (stateful: the preset shown) and win.preset-{save,save-as,delete,
 * undo-delete,import,export}. */
void cohort_window_add_preset_actions(CohortWindow *win);
/* Fills the Presets menu from the presets on disk. */
void cohort_window_rebuild_preset_menu(CohortWindow *win);
/* Remembers `name` (NULL: none) as the preset shown, with the config as it is now as the
 * preset's saved state, for the title, the modified marker and the Save button. */
void cohort_window_set_preset(CohortWindow *win, const char *name);

/* window-menu.c */

/* Adds win.about, win.preferences and the shortcuts window (win.show-help-overlay). */
void cohort_window_add_menu_actions(CohortWindow *win);

/* window-state.c */

char *cohort_window_state_path(void);
/* Reads the state (defaults for what is missing); `st` is cleared first. */
void cohort_window_state_load(CohortWindowState *st);
/* Writes it, best effort. */
void cohort_window_state_save(const CohortWindowState *st);
void cohort_window_state_clear(CohortWindowState *st);

/* For the window tests. */

CohortConfigForm *cohort_window_get_form(CohortWindow *win);
CohortRun *cohort_window_get_run(CohortWindow *win);
CohortRunPage *cohort_window_get_run_page(CohortWindow *win);
GtkWidget *cohort_window_get_dist_top(CohortWindow *win);
/* window-launch.c: the Test connection's command (a CohortProbeCommandFunc on the window). */
GStrv cohort_window_probe_argv(gpointer win, GError **error);
/* The Distributed page's Test connection (ui/probe-view.h). */
GtkWidget *cohort_window_get_probe_view(CohortWindow *win);
GtkWidget *cohort_window_get_sidebar(CohortWindow *win);
CohortMultinodeDialog *cohort_window_get_multinode_dialog(CohortWindow *win);
/* The preset shown (NULL when the settings are not a preset's), and whether they were edited
 * since it was loaded or saved. */
const char *cohort_window_get_preset(CohortWindow *win);
gboolean cohort_window_is_modified(CohortWindow *win);

/* Whether Start (Resume) can be pressed now: config valid, supported and passing the
 * pre-launch checks, nothing running (and for Resume, a checkpoint in the workspace). */
gboolean cohort_window_can_start(CohortWindow *win);
gboolean cohort_window_can_resume(CohortWindow *win);
/* Whether a window action (win.NAME) is enabled. */
gboolean cohort_window_action_enabled(CohortWindow *win, const char *name);

/* The summary line (batch, world size, global batch, learning rate after scaling), the
 * status line, and the error banner's text (NULL when hidden). */
const char *cohort_window_get_summary(CohortWindow *win);
const char *cohort_window_get_status(CohortWindow *win);
const char *cohort_window_get_banner(CohortWindow *win);

/* The question dialog open now (AdwMessageDialog; NULL when none): the existing-run question
 * of Start, the close question, the unsaved-changes question of the preset menu. */
GtkWidget *cohort_window_get_question(CohortWindow *win);
/* The text of the last toast, the last notification's title, the last URI opened. */
const char *cohort_window_get_last_toast(CohortWindow *win);
const char *cohort_window_get_last_notification(CohortWindow *win);
const char *cohort_window_get_last_opened(CohortWindow *win);

G_END_DECLS
