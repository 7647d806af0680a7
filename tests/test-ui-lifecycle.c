/* The whole life of a run from the window, with real cohort-train processes: Sample now and
 * Save checkpoint reach rank 0 of a 2-rank run through the control channel and are confirmed
 * by the events that answer them; a stopped run shows as stopped and Resume continues it from
 * its checkpoint (--resume auto); Start in a workspace that holds a run asks (Cancel, Start
 * over in a new folder, Resume) instead of failing; a completed run offers Open folder and
 * Show model, notifies when the window is not in front, and logs each line once; closing the
 * window during a run asks first and leaves no process behind. */
#include <errno.h>
#include <signal.h>

#include "engine/model/checkpoint.h"
#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/programs.h"
#include "ui/run-page-private.h"
#include "ui/window-private.h"

static char *tmp_dir;

static gboolean run_finished(gpointer data)
{
  return cohort_run_get_summary(data) != NULL;
}

static gboolean has_steps(gpointer data)
{
  CohortRunPage *page = cohort_window_get_run_page(data);
  return cohort_run_page_count_points(page, FALSE) >= 3;
}

static gboolean group_gone_now(gpointer data)
{
  return kill(-GPOINTER_TO_INT(data), 0) == -1 && errno == ESRCH;
}

typedef struct {
  CohortWindow *win;
  const char *prefix;
} ToastWait;

static gboolean toast_starts(gpointer data)
{
  ToastWait *w = data;
  return g_str_has_prefix(
      cohort_window_get_last_toast(w->win) ? cohort_window_get_last_toast(w->win) : "", w->prefix);
}

/* A small model on the sample text in workspace `ws`, `nproc` ranks (spawn mode). */
static CohortWindow *small_window(const char *ws, int nproc, int max_steps)
{
  g_unsetenv("COHORT_TRAIN_PROGRAM");
  g_setenv("COHORT_NVIDIA_SMI", "/bin/false", TRUE);
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  CohortConfigForm *form = cohort_window_get_form(win);
  g_autofree char *np = g_strdup_printf("%d", nproc);
  g_autofree char *steps = g_strdup_printf("%d", max_steps);
  const char *sets[][2] = {
      {"workspace_dir", ws},
      {"n_layer", "1"},
      {"n_embd", "32"},
      {"n_head", "2"},
      {"seq_len", "16"},
      {"batch_size", "4"},
      {"max_steps", steps},
      {"warmup_steps", "1"},
      {"eval_every", "0"},
      {"eval_steps", "1"},
      {"sample_every", "0"},
      {"sample_tokens", "8"},
      {"save_every", "0"},
      {"threads", "1"},
      {"device", "cpu"},
      {"distributed_backend", "gloo"},
      {"enable_multi_gpu", nproc > 1 ? "true" : "false"},
      {"use_torchrun", "false"},
      {"nproc_per_node", np},
  };
  for (guint i = 0; i < G_N_ELEMENTS(sets); i++)
    if (!cohort_config_form_set_text(form, sets[i][0], sets[i][1]))
      g_error("%s=%s: %s", sets[i][0], sets[i][1], cohort_config_form_get_error(form, sets[i][0]));
  return win;
}

static void wait_steps(CohortWindow *win)
{
  if (!ui_test_wait(has_steps, win, 120)) {
    g_autofree char *log = cohort_run_page_get_log(cohort_window_get_run_page(win));
    g_error("no steps reached the window; output:\n%s", log);
  }
}

static void stop_and_wait(CohortWindow *win)
{
  CohortRun *run = cohort_window_get_run(win);
  int pgid = cohort_run_get_pid(run);
  cohort_window_stop(win);
  g_assert_true(ui_test_wait(run_finished, run, 60));
  g_assert_true(ui_test_wait(group_gone_now, GINT_TO_POINTER(pgid), 10));
}

static void wait_toast(CohortWindow *win, const char *prefix)
{
  ToastWait w = {win, prefix};
  if (!ui_test_wait(toast_starts, &w, 60))
    g_error("no toast \"%s…\"; last: %s", prefix, cohort_window_get_last_toast(win));
}

/* Sample now and Save checkpoint on a live 2-rank run, then Stop, then Resume. */
static void test_requests_stop_resume(void)
{
  g_autofree char *ws = g_build_filename(tmp_dir, "life", NULL);
  CohortWindow *win = small_window(ws, 2, 20000);
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_false(cohort_window_action_enabled(win, "sample-now"));
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_start(win, &error));
  g_assert_null(cohort_window_get_question(win));
  wait_steps(win);
  g_assert_true(cohort_run_page_live_buttons_shown(page));
  g_assert_false(cohort_run_page_ended_buttons_shown(page));
  g_autofree char *argv_log = cohort_run_page_get_log(page);
  g_assert_nonnull(strstr(argv_log, "--progress-fd 3 --control-fd 4"));
  g_assert_nonnull(strstr(argv_log, "--quiet"));

  /* Sample now: the next sample event, marked as the answer, confirms it. */
  g_assert_true(cohort_window_action_enabled(win, "sample-now"));
  g_action_group_activate_action(G_ACTION_GROUP(win), "sample-now", NULL);
  wait_toast(win, "Sample drawn at step ");
  CohortSampleView *samples = cohort_run_page_get_samples(page);
  g_assert_cmpuint(cohort_sample_view_count_texts(samples), ==, 1);
  g_assert_true(g_str_has_prefix(cohort_sample_view_get_text(samples), "This License"));

  /* Save checkpoint: a checkpoint of this run, at the step the toast names. */
  g_action_group_activate_action(G_ACTION_GROUP(win), "save-now", NULL);
  wait_toast(win, "Checkpoint saved at step ");
  gint64 saved = g_ascii_strtoll(
      cohort_window_get_last_toast(win) + strlen("Checkpoint saved at step "), NULL, 10);
  g_autofree char *ckpt = g_strdup_printf("%s/checkpoints/step-%08" G_GINT64_FORMAT, ws, saved);
  g_autofree char *state = g_build_filename(ckpt, "state.json", NULL);
  g_assert_true(g_file_test(state, G_FILE_TEST_IS_REGULAR));

  /* Stop: a stop, not a failure; Resume is offered. */
  stop_and_wait(win);
  CohortRun *run = cohort_window_get_run(win);
  g_test_message("summary: %s", cohort_run_get_summary(run));
  g_assert_cmpint(cohort_run_get_outcome(run), ==, COHORT_RUN_STOPPED);
  g_assert_true(g_str_has_prefix(cohort_run_get_summary(run), "Stopped at step "));
  g_assert_null(strstr(cohort_run_get_summary(run), "exited with code"));
  g_assert_true(cohort_run_page_ended_buttons_shown(page));
  g_assert_true(cohort_window_can_resume(win));
  g_assert_true(cohort_window_can_start(win));
  int stopped_at = atoi(cohort_run_get_summary(run) + strlen("Stopped at step "));
  g_assert_cmpint(stopped_at, >=, saved);
  /* It names the checkpoint Resume continues from, and no time is left. */
  g_autofree char *stop_ckpt =
      g_strdup_printf("; its checkpoint: %s/checkpoints/step-%08d", ws, stopped_at);
  g_assert_true(g_str_has_suffix(cohort_run_get_summary(run), stop_ckpt));
  g_assert_cmpstr(cohort_run_page_get_figure(page, "eta"), ==, "–");

  /* Resume: the run goes on from its last checkpoint (the stop's), with its id. */
  g_assert_true(cohort_window_resume(win, &error));
  g_assert_no_error(error);
  wait_steps(win);
  g_autofree char *log = cohort_run_page_get_log(page);
  g_assert_nonnull(strstr(log, "--resume auto"));
  g_autofree char *resumed = g_strdup_printf("at step %d", stopped_at);
  g_assert_nonnull(strstr(log, "resumed from"));
  g_assert_nonnull(strstr(log, resumed));
  stop_and_wait(win);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Start in a workspace that holds a run asks; Cancel starts nothing, "Start over in a new
 * folder" starts in <ws>-2, Resume continues. */
static void test_existing_run_question(void)
{
  g_autofree char *ws = g_build_filename(tmp_dir, "asked", NULL);
  CohortWindow *win = small_window(ws, 1, 20000);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_start(win, &error));
  wait_steps(win);
  stop_and_wait(win);
  g_assert_cmpuint(cohort_checkpoint_count(ws, NULL), ==, 1);

  CohortRun *run = cohort_window_get_run(win);
  const char *ended = cohort_run_get_summary(run);
  g_assert_true(cohort_window_start(win, &error));
  GtkWidget *q = cohort_window_get_question(win);
  g_assert_nonnull(q);
  g_assert_true(ADW_IS_MESSAGE_DIALOG(q));
  g_test_message("question: %s", adw_message_dialog_get_body(ADW_MESSAGE_DIALOG(q)));
  g_assert_nonnull(strstr(adw_message_dialog_get_body(ADW_MESSAGE_DIALOG(q)), "asked-2"));
  /* A run stopped early: resuming it is what is offered first. */
  g_assert_cmpstr(adw_message_dialog_get_heading(ADW_MESSAGE_DIALOG(q)), ==,
                  "Resume the Earlier Run?");
  g_assert_nonnull(strstr(adw_message_dialog_get_body(ADW_MESSAGE_DIALOG(q)),
                          " of its 20000. These settings ask for 20000 steps. Resuming trains "
                          "it on to step 20000."));
  g_assert_cmpstr(adw_message_dialog_get_default_response(ADW_MESSAGE_DIALOG(q)), ==, "resume");
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(q), "cancel");
  g_assert_null(cohort_window_get_question(win));
  g_assert_false(cohort_run_is_running(run));
  g_assert_true(cohort_run_get_summary(run) == ended);

  g_assert_true(cohort_window_start(win, &error));
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(cohort_window_get_question(win)), "new-folder");
  g_autofree char *fresh = g_strdup_printf("%s-2", ws);
  g_assert_cmpstr(cohort_config_form_get_config(cohort_window_get_form(win))->workspace_dir, ==,
                  fresh);
  g_assert_true(cohort_run_is_running(run));
  g_assert_nonnull(strstr(cohort_window_get_last_toast(win), "asked-2"));
  wait_steps(win);
  stop_and_wait(win);
  /* The earlier run was left alone. */
  g_assert_cmpuint(cohort_checkpoint_count(ws, NULL), ==, 1);
  g_assert_cmpuint(cohort_checkpoint_count(fresh, NULL), ==, 1);

  g_assert_true(cohort_window_start(win, &error));
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(cohort_window_get_question(win)), "resume");
  wait_steps(win);
  g_autofree char *log = cohort_run_page_get_log(cohort_window_get_run_page(win));
  g_assert_nonnull(strstr(log, "--resume auto"));
  g_assert_nonnull(strstr(log, "resumed from"));
  stop_and_wait(win);
  g_assert_cmpint(cohort_run_get_outcome(run), ==, COHORT_RUN_STOPPED);
  gtk_window_destroy(GTK_WINDOW(win));
}

static guint count(const char *text, const char *needle)
{
  guint n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* A run to its end: Open folder and Show model, a notification (the window is not in front
 * under the test's X server), every log line once. */
static void test_completed_run(void)
{
  g_autofree char *ws = g_build_filename(tmp_dir, "done", NULL);
  CohortWindow *win = small_window(ws, 1, 30);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "eval_every", "10"));
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_window_action_enabled(win, "open-folder"));
  g_assert_true(cohort_window_start(win, &error));
  CohortRun *run = cohort_window_get_run(win);
  g_assert_true(ui_test_wait(run_finished, run, 120));
  g_test_message("summary: %s", cohort_run_get_summary(run));
  g_assert_cmpint(cohort_run_get_outcome(run), ==, COHORT_RUN_COMPLETED);
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_true(cohort_run_page_ended_buttons_shown(page));
  g_assert_false(cohort_run_page_live_buttons_shown(page));
  g_assert_false(cohort_run_page_in_final_phase(page));
  g_assert_cmpstr(cohort_window_get_last_notification(win), ==, "Training completed");

  /* Start again: the run went as far as the settings ask, so a new folder comes first. */
  g_assert_true(cohort_window_start(win, &error));
  GtkWidget *q = cohort_window_get_question(win);
  g_assert_nonnull(q);
  g_assert_cmpstr(adw_message_dialog_get_heading(ADW_MESSAGE_DIALOG(q)), ==, "Start a New Run?");
  g_assert_cmpstr(adw_message_dialog_get_default_response(ADW_MESSAGE_DIALOG(q)), ==, "new-folder");
  /* It says the run finished, with its own step count and what the settings ask. */
  const char *body = adw_message_dialog_get_body(ADW_MESSAGE_DIALOG(q));
  g_test_message("question: %s", body);
  g_assert_nonnull(strstr(body, "The earlier run finished: it trained all its 30 steps. These "
                                "settings ask for 30 steps. Resuming would train nothing more."));
  g_assert_null(strstr(body, "of 30"));
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(q), "cancel");
  /* Asked for more steps now, resuming it comes first and says how far. */
  g_assert_true(cohort_config_form_set_text(form, "max_steps", "200"));
  g_assert_true(cohort_window_start(win, &error));
  q = cohort_window_get_question(win);
  g_assert_cmpstr(adw_message_dialog_get_heading(ADW_MESSAGE_DIALOG(q)), ==,
                  "Resume the Earlier Run?");
  body = adw_message_dialog_get_body(ADW_MESSAGE_DIALOG(q));
  g_assert_nonnull(strstr(body, "The earlier run finished: it trained all its 30 steps. These "
                                "settings ask for 200 steps. Resuming trains it on to step "
                                "200."));
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(q), "cancel");
  g_assert_true(cohort_config_form_set_text(form, "max_steps", "30"));

  /* Each log line once: no human progress lines beside the events, no "[info]". */
  g_autofree char *log = cohort_run_page_get_log(page);
  g_assert_cmpuint(count(log, "model saved to"), ==, 1);
  g_assert_cmpuint(count(log, "step 10: val_loss"), ==, 1);
  g_assert_null(strstr(log, "[info]"));
  g_assert_null(strstr(log, "step 1/30"));

  g_assert_true(cohort_window_action_enabled(win, "open-folder"));
  g_action_group_activate_action(G_ACTION_GROUP(win), "open-folder", NULL);
  g_autoptr(GFile) dir = g_file_new_for_path(ws);
  g_autofree char *dir_uri = g_file_get_uri(dir);
  g_assert_cmpstr(cohort_window_get_last_opened(win), ==, dir_uri);
  g_assert_true(cohort_window_action_enabled(win, "show-model"));
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  g_assert_true(g_file_test(model, G_FILE_TEST_IS_REGULAR));
  g_action_group_activate_action(G_ACTION_GROUP(win), "show-model", NULL);
  /* Without a file manager on a session bus, the model's folder opens. */
  const char *opened = cohort_window_get_last_opened(win);
  g_autoptr(GFile) model_file = g_file_new_for_path(model);
  g_autofree char *model_uri = g_file_get_uri(model_file);
  g_assert_true(g_str_equal(opened, model_uri) || g_str_equal(opened, dir_uri));
  gtk_window_destroy(GTK_WINDOW(win));
}

static void on_destroyed(gpointer data, GObject *gone)
{
  (void)gone;
  *(gboolean *)data = TRUE;
}

/* Closing during a run asks; keeping it running keeps it, stopping closes the window and
 * ends every process. */
static void test_close_asks(void)
{
  g_autofree char *ws = g_build_filename(tmp_dir, "closing", NULL);
  CohortWindow *win = small_window(ws, 2, 20000);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_start(win, &error));
  wait_steps(win);
  CohortRun *run = g_object_ref(cohort_window_get_run(win));
  int pgid = cohort_run_get_pid(run);
  gboolean destroyed = FALSE;
  g_object_weak_ref(G_OBJECT(win), on_destroyed, &destroyed);
  /* gtk_window_close does nothing to a window that was never shown. */
  gtk_window_present(GTK_WINDOW(win));
  g_assert_true(ui_test_wait((gboolean(*)(gpointer))gtk_widget_get_realized, win, 10));

  gtk_window_close(GTK_WINDOW(win));
  GtkWidget *q = cohort_window_get_question(win);
  g_assert_nonnull(q);
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(q), "cancel");
  ui_test_spin(0.3);
  g_assert_false(destroyed);
  g_assert_true(cohort_run_is_running(run));

  gtk_window_close(GTK_WINDOW(win));
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(cohort_window_get_question(win)), "stop");
  g_assert_true(ui_test_wait(run_finished, run, 60));
  g_assert_true(ui_test_wait(group_gone_now, GINT_TO_POINTER(pgid), 10));
  g_assert_true(g_str_has_prefix(cohort_run_get_summary(run), "Stopped"));
  g_assert_true(destroyed);
  g_object_unref(run);
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/lifecycle/requests-stop-resume", test_requests_stop_resume);
  g_test_add_func("/ui/lifecycle/existing-run-question", test_existing_run_question);
  g_test_add_func("/ui/lifecycle/completed-run", test_completed_run);
  g_test_add_func("/ui/lifecycle/close-asks", test_close_asks);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
