/* The window's run actions (win.start, win.stop, win.multinode): starting, stopping and
 * replaying a run, and showing what the run reports. */
#include "ui/window-private.h"

#include <errno.h>
#include <glib/gi18n.h>

#include "ui/programs.h"

gboolean cohort_window_start(CohortWindow *win, GError **error)
{
  if (!cohort_window_can_start(win)) {
    g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_FAILED, "%s",
                gtk_label_get_text(GTK_LABEL(win->status_label)));
    return FALSE;
  }
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  if (g_mkdir_with_parents(ws, 0755) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), _("%s: cannot create: %s"), ws,
                g_strerror(e));
    return FALSE;
  }
  g_autofree char *config_path = g_build_filename(ws, "run.json", NULL);
  if (!cohort_config_save_file(cfg, config_path, error))
    return FALSE;
  g_auto(GStrv) argv = cohort_ui_launch_argv(cfg, config_path, win->gpus, error);
  if (argv == NULL)
    return FALSE;
  cohort_window_save_last(win);

  cohort_run_page_reset(win->run_page);
  g_autofree char *joined = g_strjoinv(" ", argv);
  g_autofree char *line = g_strdup_printf("$ %s", joined);
  cohort_run_page_append_log(win->run_page, line);
  if (!cohort_run_start(win->run, (const char *const *)argv, NULL, error))
    return FALSE;
  cohort_run_page_set_status(win->run_page, _("Starting…"));
  gtk_stack_set_visible_child_name(GTK_STACK(win->stack), "run");
  cohort_window_update_state(win);
  return TRUE;
}

void cohort_window_stop(CohortWindow *win)
{
  if (!cohort_run_is_running(win->run))
    return;
  cohort_run_page_set_status(win->run_page, _("Stopping: waiting for every process to end…"));
  cohort_run_stop(win->run, COHORT_WINDOW_STOP_GRACE_S);
}

void cohort_window_replay(CohortWindow *win, const char *path)
{
  g_autoptr(GFile) file = g_file_new_for_path(path);
  g_autoptr(GError) error = NULL;
  g_autoptr(GFileInputStream) in = g_file_read(file, NULL, &error);
  if (in == NULL) {
    cohort_window_show_banner(win, error->message);
    return;
  }
  cohort_run_page_reset(win->run_page);
  cohort_run_replay(win->run, G_INPUT_STREAM(in));
  cohort_window_update_state(win);
}

static void on_start(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  g_autoptr(GError) error = NULL;
  if (!cohort_window_start(win, &error)) {
    g_autofree char *msg = g_strdup_printf(_("Could not start: %s"), error->message);
    cohort_window_show_banner(win, msg);
  }
}

static void on_stop(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  cohort_window_stop(data);
}

static void on_multinode(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  gtk_window_present(GTK_WINDOW(win->multinode));
}

static void on_run_event(CohortRun *run, JsonObject *ev, CohortWindow *win)
{
  (void)run;
  cohort_run_page_handle_event(win->run_page, ev);
}

static void on_run_output(CohortRun *run, const char *line, CohortWindow *win)
{
  (void)run;
  cohort_run_page_append_log(win->run_page, line);
}

static void on_run_finished(CohortRun *run, const char *summary, CohortWindow *win)
{
  (void)run;
  cohort_run_page_set_status(win->run_page, summary);
  cohort_run_page_append_log(win->run_page, summary);
  cohort_window_update_state(win);
  gtk_label_set_text(GTK_LABEL(win->status_label), summary);
}

void cohort_window_add_run_actions(CohortWindow *win)
{
  static const GActionEntry actions[] = {
      {.name = "start", .activate = on_start},
      {.name = "stop", .activate = on_stop},
      {.name = "multinode", .activate = on_multinode},
  };
  g_action_map_add_action_entries(G_ACTION_MAP(win), actions, G_N_ELEMENTS(actions), win);
}

void cohort_window_watch_run(CohortWindow *win)
{
  g_signal_connect(win->run, "event", G_CALLBACK(on_run_event), win);
  g_signal_connect(win->run, "output", G_CALLBACK(on_run_output), win);
  g_signal_connect(win->run, "finished", G_CALLBACK(on_run_finished), win);
}
