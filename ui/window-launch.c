/* Starting a run from the window: Start asks first when the workspace already holds a run
 * (the engine refuses to mix two runs' checkpoints, and that refusal should be a question
 * here, not a failed run), Resume continues the last one, and the engine's command line gets
 * the window's session options (the control channel, no human progress output on a pipe
 * nobody reads as a terminal, --resume auto). */
#include "ui/window-private.h"

#include <errno.h>
#include <glib/gi18n.h>
#include <string.h>

#include "engine/progress/workspace.h"
#include "ui/launch-check.h"
#include "ui/programs.h"

char *cohort_window_fresh_workspace(const char *workspace)
{
  g_autofree char *base = g_strdup(workspace);
  while (g_str_has_suffix(base, G_DIR_SEPARATOR_S) && strlen(base) > 1)
    base[strlen(base) - 1] = '\0';
  /* runs/x-2 becomes runs/x-3, not runs/x-2-2. */
  gint64 n = 1;
  char *dash = strrchr(base, '-');
  guint64 k;
  if (dash != NULL && dash[1] != '\0' &&
      g_ascii_string_to_unsigned(dash + 1, 10, 2, G_MAXINT, &k, NULL)) {
    n = (gint64)k;
    *dash = '\0';
  }
  for (;;) {
    char *candidate = g_strdup_printf("%s-%" G_GINT64_FORMAT, base, ++n);
    g_autofree char *resolved = cohort_resolve_path(candidate);
    if (!g_file_test(resolved, G_FILE_TEST_EXISTS))
      return candidate;
    g_free(candidate);
  }
}

/* The launch command (which already names the progress and control descriptors) with the
 * window's session options for cohort-train: --quiet (its human progress lines would repeat
 * the events in the log) and --resume auto when resuming. */
static GStrv session_argv(char **argv, gboolean resume)
{
  g_autoptr(GStrvBuilder) b = g_strv_builder_new();
  g_strv_builder_addv(b, (const char **)argv);
  g_strv_builder_add(b, "--quiet");
  if (resume)
    g_strv_builder_add_many(b, "--resume", "auto", NULL);
  return g_strv_builder_end(b);
}

gboolean cohort_window_launch(CohortWindow *win, CohortStartMode mode, GError **error)
{
  if (mode == COHORT_START_NEW_FOLDER) {
    g_autofree char *fresh =
        cohort_window_fresh_workspace(cohort_config_form_get_config(win->form)->workspace_dir);
    cohort_config_form_set_text(win->form, "workspace_dir", fresh);
    g_autofree char *msg = g_strdup_printf(_("A new run in “%s”"), fresh);
    cohort_window_toast(win, msg, NULL);
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
  g_auto(GStrv) plan = cohort_ui_launch_argv(cfg, config_path, MAX(win->gpus, 0), error);
  if (plan == NULL)
    return FALSE;
  g_auto(GStrv) argv = session_argv(plan, mode == COHORT_START_RESUME);
  cohort_window_save_last(win);

  cohort_run_page_reset(win->run_page);
  g_autofree char *joined = g_strjoinv(" ", argv);
  g_autofree char *line = g_strdup_printf("$ %s", joined);
  cohort_run_page_append_log(win->run_page, line);
  if (!cohort_run_start(win->run, (const char *const *)argv, NULL, error))
    return FALSE;
  g_free(win->run_workspace);
  win->run_workspace = g_steal_pointer(&ws);
  g_clear_pointer(&win->model_path, g_free);
  win->pending_requests = 0;
  win->status_is_summary = FALSE;
  cohort_run_page_set_live(win->run_page, TRUE);
  cohort_run_page_set_ended(win->run_page, FALSE);
  cohort_run_page_set_current_run(win->run_page, NULL);
  cohort_run_page_set_status(win->run_page, mode == COHORT_START_RESUME
                                                ? _("Resuming from the last checkpoint…")
                                                : _("Starting…"));
  gtk_stack_set_visible_child_name(GTK_STACK(win->stack), "run");
  cohort_window_update_state(win);
  return TRUE;
}

GStrv cohort_window_probe_argv(gpointer data, GError **error)
{
  CohortWindow *win = data;
  if (cohort_run_is_live(win->run)) {
    g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_FAILED, "%s",
                _("a run is going on; test the connection before Start or after it ends"));
    return NULL;
  }
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  if (g_mkdir_with_parents(ws, 0755) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), _("%s: cannot create: %s"), ws,
                g_strerror(e));
    return NULL;
  }
  /* The config Start would write and launch, with the same processes and nodes. */
  g_autofree char *config_path = g_build_filename(ws, "run.json", NULL);
  if (!cohort_config_save_file(cfg, config_path, error))
    return NULL;
  g_auto(GStrv) plan = cohort_ui_launch_argv(cfg, config_path, MAX(win->gpus, 0), error);
  if (plan == NULL)
    return NULL;
  g_autoptr(GStrvBuilder) b = g_strv_builder_new();
  g_strv_builder_addv(b, (const char **)plan);
  g_strv_builder_add_many(b, "--probe", "--quiet", NULL);
  return g_strv_builder_end(b);
}

static void report(CohortWindow *win, GError *error)
{
  g_autofree char *msg = g_strdup_printf(_("Could not start: %s"), error->message);
  cohort_window_show_banner(win, msg);
}

static void on_existing_answer(AdwMessageDialog *dialog, const char *response, CohortWindow *win)
{
  (void)dialog;
  win->question = NULL;
  g_autoptr(GError) error = NULL;
  gboolean ok = TRUE;
  if (g_str_equal(response, "resume"))
    ok = cohort_window_launch(win, COHORT_START_RESUME, &error);
  else if (g_str_equal(response, "new-folder"))
    ok = cohort_window_launch(win, COHORT_START_NEW_FOLDER, &error);
  if (!ok)
    report(win, error);
}

/* What the workspace's newest checkpoint says of its run: where it stands (`step` -1 when it
 * cannot be read), whether that run had finished (reached its own max_steps, or its epochs),
 * and one sentence about it and what these settings ask. */
typedef struct {
  gint64 step;
  gboolean finished; /* the earlier run had done all it was asked */
  gboolean done;     /* these settings ask for no more than it did */
  char *text;
} Latest;

static void latest_clear(Latest *l)
{
  g_free(l->text);
}

static char *asked_text(const CohortConfig *cfg)
{
  if (cfg->max_steps > 0)
    return g_strdup_printf(ngettext("These settings ask for %d step.",
                                    "These settings ask for %d steps.", cfg->max_steps),
                           cfg->max_steps);
  return g_strdup_printf(ngettext("These settings ask for %d epoch.",
                                  "These settings ask for %d epochs.", cfg->epochs),
                         cfg->epochs);
}

static Latest latest_of(const CohortConfig *cfg)
{
  Latest l = {.step = -1, .text = g_strdup("")};
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  g_autofree char *dir = cohort_checkpoint_find_latest(ws);
  CohortTrainState st;
  g_autoptr(CohortConfig) its = NULL;
  if (dir == NULL || !cohort_checkpoint_read_state(dir, &st, &its, NULL) || its == NULL)
    return l;
  l.step = st.step;
  /* The trainer's end: max_steps when set, else all its epochs. */
  l.finished = its->max_steps > 0 ? st.step >= its->max_steps : st.epoch >= its->epochs;
  l.done = cfg->max_steps > 0 ? st.step >= cfg->max_steps : st.epoch >= cfg->epochs;
  g_autofree char *was =
      l.finished ? g_strdup_printf(ngettext("The earlier run finished: it trained its %lld step.",
                                            "The earlier run finished: it trained all its %lld "
                                            "steps.",
                                            (unsigned long)st.step),
                                   (long long)st.step)
      : its->max_steps > 0
          ? g_strdup_printf(_("The earlier run stopped at step %lld of its %d."),
                            (long long)st.step, its->max_steps)
          : g_strdup_printf(_("The earlier run stopped at step %lld, in epoch %lld of its %d."),
                            (long long)st.step, (long long)st.epoch + 1, its->epochs);
  /* What Resume would do with the settings now. */
  g_autofree char *asked = asked_text(cfg);
  g_autofree char *then =
      l.done               ? g_strdup(_("Resuming would train nothing more."))
      : cfg->max_steps > 0 ? g_strdup_printf(_("Resuming trains it on to step %d."), cfg->max_steps)
                           : g_strdup(_("Resuming trains it on."));
  g_free(l.text);
  l.text = g_strdup_printf("%s %s %s", was, asked, then);
  return l;
}

static void ask_existing(CohortWindow *win)
{
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *fresh = cohort_window_fresh_workspace(cfg->workspace_dir);
  Latest latest = latest_of(cfg);
  /* A run that already went as far as these settings ask is better started over; one that
   * stopped early (or whose step limit was raised) is better resumed. */
  gboolean done = latest.step >= 0 && latest.done;
  g_autofree char *body = g_strdup_printf(
      ngettext("The workspace “%s” holds %u checkpoint of an earlier run. %s Resume that run "
               "from its last checkpoint, or start a new run in a new folder, “%s”; the "
               "earlier run stays as it is.",
               "The workspace “%s” holds %u checkpoints of an earlier run. %s Resume that run "
               "from its last checkpoint, or start a new run in a new folder, “%s”; the "
               "earlier run stays as it is.",
               win->checkpoints),
      cfg->workspace_dir, win->checkpoints, latest.text, fresh);
  latest_clear(&latest);
  GtkWidget *d = adw_message_dialog_new(
      GTK_WINDOW(win), done ? _("Start a New Run?") : _("Resume the Earlier Run?"), body);
  adw_message_dialog_add_responses(ADW_MESSAGE_DIALOG(d), "cancel", _("_Cancel"), "new-folder",
                                   _("Start _Over in a New Folder"), "resume", _("_Resume"), NULL);
  const char *suggested = done ? "new-folder" : "resume";
  adw_message_dialog_set_response_appearance(ADW_MESSAGE_DIALOG(d), suggested,
                                             ADW_RESPONSE_SUGGESTED);
  adw_message_dialog_set_default_response(ADW_MESSAGE_DIALOG(d), suggested);
  adw_message_dialog_set_close_response(ADW_MESSAGE_DIALOG(d), "cancel");
  g_signal_connect(d, "response", G_CALLBACK(on_existing_answer), win);
  win->question = d;
  gtk_window_present(GTK_WINDOW(d));
}

/* FALSE with the status line's reason when Start (or Resume) is off. */
static gboolean ready(CohortWindow *win, const char *action, GError **error)
{
  if (cohort_window_action_enabled(win, action))
    return TRUE;
  g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_FAILED, "%s",
              gtk_label_get_text(GTK_LABEL(win->status_label)));
  return FALSE;
}

gboolean cohort_window_start(CohortWindow *win, GError **error)
{
  /* Files may have changed since the last edit: check again. */
  g_clear_pointer(&win->checked, g_free);
  cohort_window_count_checkpoints(win);
  cohort_window_update_state(win);
  if (!ready(win, "start", error))
    return FALSE;
  if (win->checkpoints > 0) {
    ask_existing(win);
    return TRUE;
  }
  return cohort_window_launch(win, COHORT_START_FRESH, error);
}

gboolean cohort_window_resume(CohortWindow *win, GError **error)
{
  g_clear_pointer(&win->checked, g_free);
  cohort_window_count_checkpoints(win);
  cohort_window_update_state(win);
  if (!ready(win, "resume", error))
    return FALSE;
  return cohort_window_launch(win, COHORT_START_RESUME, error);
}
