/* The window's run actions (win.start, win.resume, win.stop, win.sample-now, win.save-now,
 * win.open-folder, win.show-model, win.multinode), replays, and what the run reports: the Run
 * page, the status line, toasts for answered requests, and a desktop notification when a run
 * ends while the window is not looked at. */
#include "ui/window-private.h"

#include <glib/gi18n.h>

#include "engine/progress/control.h"
#include "ui/programs.h"
#include "ui/progress-event.h"

void cohort_window_stop(CohortWindow *win)
{
  if (!cohort_run_is_live(win->run))
    return;
  cohort_run_page_set_status(win->run_page, _("Stopping: waiting for every process to end…"));
  cohort_run_stop(win->run, COHORT_WINDOW_STOP_GRACE_S);
}

gboolean cohort_window_request(CohortWindow *win, const char *request, GError **error)
{
  if (!cohort_run_request(win->run, request, error))
    return FALSE;
  if (g_str_equal(request, COHORT_CONTROL_WORD_CHECK)) {
    cohort_run_page_append_log(win->run_page,
                               _("Comparison of the processes' weights requested for the next "
                                 "step."));
    return TRUE;
  }
  gboolean sample = g_str_equal(request, COHORT_CONTROL_WORD_SAMPLE);
  win->pending_requests |= sample ? COHORT_CONTROL_SAMPLE : COHORT_CONTROL_SAVE;
  cohort_run_page_append_log(win->run_page, sample ? _("Sample requested for the next step.")
                                                   : _("Checkpoint requested for the next step."));
  return TRUE;
}

/* Shows one run of a file: `run_id` NULL is the file's last run. */
static void replay_run(CohortWindow *win, const char *path, const char *run_id)
{
  g_autoptr(GFile) file = g_file_new_for_path(path);
  g_autoptr(GError) error = NULL;
  g_autoptr(GFileInputStream) in = g_file_read(file, NULL, &error);
  if (in == NULL) {
    cohort_window_show_banner(win, error->message);
    return;
  }
  cohort_run_page_reset(win->run_page);
  cohort_run_page_set_live(win->run_page, FALSE);
  cohort_run_page_set_ended(win->run_page, FALSE);
  if (run_id != NULL)
    cohort_run_set_replay_choice(run_id);
  cohort_run_replay(win->run, G_INPUT_STREAM(in));
  if (run_id != NULL)
    cohort_run_set_replay_choice(NULL);
  cohort_run_page_set_current_run(win->run_page, run_id);
  win->status_is_summary = FALSE;
  cohort_window_update_state(win);
}

void cohort_window_replay(CohortWindow *win, const char *path)
{
  replay_run(win, path, NULL);
}

static void on_show_run(CohortRunPage *page, const char *run_id, CohortWindow *win)
{
  (void)page;
  if (cohort_run_is_running(win->run))
    return;
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  g_autofree char *path = g_build_filename(ws, "events.jsonl", NULL);
  replay_run(win, path, run_id);
  gtk_stack_set_visible_child_name(GTK_STACK(win->stack), "run");
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

static void on_resume(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  g_autoptr(GError) error = NULL;
  if (!cohort_window_resume(win, &error)) {
    g_autofree char *msg = g_strdup_printf(_("Could not resume: %s"), error->message);
    cohort_window_show_banner(win, msg);
  }
}

static void on_stop(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  cohort_window_stop(data);
}

static void request_or_say(CohortWindow *win, const char *request)
{
  g_autoptr(GError) error = NULL;
  if (!cohort_window_request(win, request, &error))
    cohort_window_toast(win, error->message, NULL);
}

static void on_sample_now(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  request_or_say(data, COHORT_CONTROL_WORD_SAMPLE);
}

static void on_save_now(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  request_or_say(data, COHORT_CONTROL_WORD_SAVE);
}

static void on_check_ranks(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  request_or_say(data, COHORT_CONTROL_WORD_CHECK);
}

/* Opens `uri` with the desktop's handler; says so in a toast when none can. */
static void open_uri(CohortWindow *win, const char *uri)
{
  g_free(win->last_opened);
  win->last_opened = g_strdup(uri);
  g_autoptr(GError) error = NULL;
  g_autoptr(GAppLaunchContext) ctx = G_APP_LAUNCH_CONTEXT(
      gdk_display_get_app_launch_context(gtk_widget_get_display(GTK_WIDGET(win))));
  if (!g_app_info_launch_default_for_uri(uri, ctx, &error)) {
    g_autofree char *msg = g_strdup_printf(_("Could not open %s: %s"), uri, error->message);
    cohort_window_toast(win, msg, NULL);
  }
}

static void on_open_folder(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  g_autoptr(GFile) dir = g_file_new_for_path(win->run_workspace);
  g_autofree char *uri = g_file_get_uri(dir);
  open_uri(win, uri);
}

/* Without a file manager to select the model in: the folder that holds it. */
static void open_model_folder(CohortWindow *win)
{
  if (win->model_path == NULL)
    return;
  g_autoptr(GFile) file = g_file_new_for_path(win->model_path);
  g_autoptr(GFile) dir = g_file_get_parent(file);
  g_autofree char *uri = g_file_get_uri(dir);
  open_uri(win, uri);
}

static void on_show_model_done(GObject *source, GAsyncResult *res, gpointer data)
{
  g_autoptr(GVariant) reply = g_dbus_connection_call_finish(G_DBUS_CONNECTION(source), res, NULL);
  CohortWindow *win = data;
  if (reply == NULL)
    open_model_folder(win);
  g_object_unref(win);
}

static void on_show_model(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  g_autoptr(GFile) file = g_file_new_for_path(win->model_path);
  g_autofree char *uri = g_file_get_uri(file);
  g_free(win->last_opened);
  win->last_opened = g_strdup(uri);
  /* The file manager's interface shows a file selected in its folder (what Nautilus,
   * Nemo, Dolphin and Thunar answer to). */
  /* No session bus (and none started for this: no dbus-launch under a bare X server). */
  const char *address = g_getenv("DBUS_SESSION_BUS_ADDRESS");
  g_autoptr(GDBusConnection) bus =
      address != NULL && *address != '\0' ? g_bus_get_sync(G_BUS_TYPE_SESSION, NULL, NULL) : NULL;
  if (bus == NULL) {
    open_model_folder(win);
    return;
  }
  const char *uris[] = {uri, NULL};
  g_dbus_connection_call(bus, "org.freedesktop.FileManager1", "/org/freedesktop/FileManager1",
                         "org.freedesktop.FileManager1", "ShowItems",
                         g_variant_new("(^ass)", uris, ""), NULL, G_DBUS_CALL_FLAGS_NONE, 5000,
                         NULL, on_show_model_done, g_object_ref(win));
}

static void on_multinode(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  gtk_window_present(GTK_WINDOW(win->multinode));
}

/* A sample or checkpoint that answers Sample now or Save now: said in a toast. */
static void confirm_request(CohortWindow *win, JsonObject *ev, const char *name)
{
  if (!cohort_event_flag(ev, COHORT_FIELD_REQUESTED, FALSE))
    return;
  gint64 step = cohort_event_int(ev, COHORT_FIELD_STEP, 0);
  g_autofree char *msg = NULL;
  if (g_str_equal(name, COHORT_EVENT_SAMPLE)) {
    win->pending_requests &= ~(guint)COHORT_CONTROL_SAMPLE;
    msg = g_strdup_printf(_("Sample drawn at step %lld"), (long long)step);
  } else {
    win->pending_requests &= ~(guint)COHORT_CONTROL_SAVE;
    msg = g_strdup_printf(_("Checkpoint saved at step %lld"), (long long)step);
  }
  cohort_window_toast(win, msg, NULL);
}

static void on_run_event(CohortRun *run, JsonObject *ev, CohortWindow *win)
{
  gboolean was_final = cohort_run_page_in_final_phase(win->run_page);
  cohort_run_page_handle_event(win->run_page, ev);
  const char *name = cohort_event_name(ev);
  if (g_str_equal(name, COHORT_EVENT_SAMPLE) || g_str_equal(name, COHORT_EVENT_CHECKPOINT))
    confirm_request(win, ev, name);
  if (g_str_equal(name, COHORT_EVENT_HEALTH) &&
      cohort_event_flag(ev, COHORT_FIELD_REQUESTED, FALSE)) {
    gboolean same = g_str_equal(cohort_event_text(ev, COHORT_FIELD_STATUS, ""), COHORT_STATUS_OK);
    g_autofree char *msg =
        same ? g_strdup_printf(_("Every process holds the same weights at step %lld"),
                               (long long)cohort_event_int(ev, COHORT_FIELD_STEP, 0))
             : g_strdup(_("The processes' weights differ: the run stops"));
    cohort_window_toast(win, msg, NULL);
  }
  if (g_str_equal(name, COHORT_EVENT_START) && json_object_has_member(ev, COHORT_FIELD_RUN_ID))
    cohort_run_page_set_current_run(win->run_page,
                                    cohort_event_text(ev, COHORT_FIELD_RUN_ID, NULL));
  if (g_str_equal(name, COHORT_EVENT_DONE) && cohort_run_is_live(run)) {
    const char *model = cohort_event_text(ev, COHORT_FIELD_MODEL_PATH, NULL);
    g_free(win->model_path);
    win->model_path = model != NULL ? cohort_resolve_path(model) : NULL;
  }
  if (was_final != cohort_run_page_in_final_phase(win->run_page))
    cohort_window_update_state(win);
}

static void on_run_output(CohortRun *run, const char *line, CohortWindow *win)
{
  (void)run;
  cohort_run_page_append_log(win->run_page, line);
}

/* A desktop notification when a run ends while the window is not focused. */
static void notify_end(CohortWindow *win, CohortRunOutcome outcome, const char *summary)
{
  if (!win->state.notify || gtk_window_is_active(GTK_WINDOW(win)))
    return;
  const char *title = outcome == COHORT_RUN_COMPLETED ? _("Training completed")
                      : outcome == COHORT_RUN_STOPPED ? _("Training stopped")
                                                      : _("Training failed");
  g_free(win->last_notification);
  win->last_notification = g_strdup(title);
  GApplication *app = G_APPLICATION(gtk_window_get_application(GTK_WINDOW(win)));
  if (app == NULL || !g_application_get_is_registered(app))
    return;
  g_autoptr(GNotification) n = g_notification_new(title);
  g_notification_set_body(n, summary);
  g_application_send_notification(app, "run-ended", n);
}

static void on_run_finished(CohortRun *run, const char *summary, CohortWindow *win)
{
  gboolean was_live = win->run_workspace != NULL && cohort_run_get_pid(run) > 0;
  cohort_run_page_set_status(win->run_page, summary);
  cohort_run_page_append_log(win->run_page, summary);
  cohort_run_page_set_live(win->run_page, FALSE);
  cohort_run_page_run_ended(win->run_page, cohort_run_get_outcome(run) == COHORT_RUN_COMPLETED);
  win->pending_requests = 0;
  if (was_live) {
    cohort_run_page_set_ended(win->run_page, TRUE);
    notify_end(win, cohort_run_get_outcome(run), summary);
  }
  cohort_window_count_checkpoints(win);
  win->status_is_summary = TRUE;
  cohort_window_update_state(win);
  gtk_label_set_text(GTK_LABEL(win->status_label), summary);
}

void cohort_window_add_run_actions(CohortWindow *win)
{
  static const GActionEntry actions[] = {
      {.name = "start", .activate = on_start},
      {.name = "resume", .activate = on_resume},
      {.name = "stop", .activate = on_stop},
      {.name = "sample-now", .activate = on_sample_now},
      {.name = "save-now", .activate = on_save_now},
      {.name = "check-ranks", .activate = on_check_ranks},
      {.name = "open-folder", .activate = on_open_folder},
      {.name = "show-model", .activate = on_show_model},
      {.name = "multinode", .activate = on_multinode},
  };
  g_action_map_add_action_entries(G_ACTION_MAP(win), actions, G_N_ELEMENTS(actions), win);
}

void cohort_window_watch_run(CohortWindow *win)
{
  g_signal_connect(win->run, "event", G_CALLBACK(on_run_event), win);
  g_signal_connect(win->run, "output", G_CALLBACK(on_run_output), win);
  g_signal_connect(win->run, "finished", G_CALLBACK(on_run_finished), win);
  g_signal_connect(win->run_page, "show-run", G_CALLBACK(on_show_run), win);
}
