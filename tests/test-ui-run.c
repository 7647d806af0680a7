/* The Run page and the child process: a recorded progress stream reaches every widget, a
 * workspace's events.jsonl replays its last run (or the one asked for), a failing run reports
 * which rank failed, Stop leaves no process behind, and a real
 * cohort-train run launched from the window (one process, and spawn with 2 ranks) shows its
 * progress and stops cleanly. */
#include <errno.h>
#include <signal.h>

#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/presets.h"
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
  return cohort_run_page_count_points(page, FALSE) >= 2;
}

static gboolean has_ranks(gpointer data)
{
  return cohort_run_page_count_ranks(cohort_window_get_run_page(data)) >= 2;
}

static gboolean group_gone_now(gpointer data)
{
  return kill(-GPOINTER_TO_INT(data), 0) == -1 && errno == ESRCH;
}

/* Killed ranks that the launcher did not reap are reparented and reaped by init a moment
 * later; until then they exist as zombies. */
static gboolean group_gone(int pgid)
{
  return ui_test_wait(group_gone_now, GINT_TO_POINTER(pgid), 5);
}

/* Replays tests/ui/`name` into `win` and waits for its end; returns the run. */
static CohortRun *replay(CohortWindow *win, const char *name)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "ui", name, NULL);
  cohort_window_replay(win, path);
  CohortRun *run = cohort_window_get_run(win);
  g_assert_true(ui_test_wait(run_finished, run, 10));
  return run;
}

static void test_replay(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortRun *run = replay(win, "progress-sample.jsonl");
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "step"), ==, "6 of 6");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "epoch"), ==, "1");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "loss"), ==, "5.0004");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "val_loss"), ==, "5.0055");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "lr"), ==, "0.0001");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "eta"), ==, "0 s");
  g_assert_true(g_str_has_prefix(cohort_run_page_get_figure(page, "sample"), "This License"));
  g_assert_cmpfloat(cohort_run_page_get_step_fraction(page), ==, 1.0);
  g_assert_cmpuint(cohort_run_page_count_points(page, FALSE), ==, 6);
  g_assert_cmpuint(cohort_run_page_count_points(page, TRUE), ==, 2);
  g_assert_cmpuint(cohort_run_page_count_ranks(page), ==, 2);
  g_assert_cmpint(cohort_run_page_get_slowest(page), ==, 1);
  g_autofree char *log = cohort_run_page_get_log(page);
  g_assert_nonnull(strstr(log, "not JSON and must reach the log"));
  g_assert_nonnull(strstr(log, "checkpoint saved: runs/ws/checkpoints/step-00000003"));
  g_assert_nonnull(strstr(log, "step 6: val loss 5.0055"));
  g_assert_true(g_str_has_prefix(cohort_run_get_summary(run), "Completed: 6 steps"));
  g_assert_cmpstr(cohort_run_page_get_figure(page, "status"), ==, cohort_run_get_summary(run));
  g_assert_false(cohort_run_page_figure_shown(page, "loss_scale"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* A classifier's run (recorded from cohort-train: resnet, 2 ranks with SyncBatchNorm, 10 steps,
 * evaluations at steps 5 and 10) shows the accuracy curve beside the loss; a language model's
 * stream, which has no accuracy metric, hides it again. */
static void test_replay_accuracy(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  replay(win, "progress-resnet.jsonl");
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "step"), ==, "10 of 10");
  g_assert_true(cohort_run_page_accuracy_shown(page));
  g_assert_cmpuint(cohort_run_page_count_accuracy_points(page), ==, 2);
  g_assert_cmpuint(cohort_run_page_count_points(page, TRUE), ==, 2);
  g_assert_cmpuint(cohort_run_page_count_ranks(page), ==, 2);
  g_assert_true(cohort_run_page_ranks_show_syncbn(page));

  replay(win, "progress-sample.jsonl");
  g_assert_false(cohort_run_page_accuracy_shown(page));
  g_assert_false(cohort_run_page_ranks_show_syncbn(page));
  g_assert_cmpuint(cohort_run_page_count_accuracy_points(page), ==, 0);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* An fp16 run (recorded from cohort-train: loss_scale_init 2^32, 14 steps of which the first
 * 11 overflowed) shows its loss scale and skipped steps; a later fp32 stream hides it again. */
static void test_replay_fp16(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  replay(win, "progress-fp16.jsonl");
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "step"), ==, "14 of 14");
  g_assert_true(cohort_run_page_figure_shown(page, "loss_scale"));
  g_assert_cmpstr(cohort_run_page_get_figure(page, "loss_scale"), ==, "2097152, 11 steps skipped");
  /* Skipped steps have a loss but no gradient norm: all 14 are on the chart. */
  g_assert_cmpuint(cohort_run_page_count_points(page, FALSE), ==, 14);
  g_autofree char *log = cohort_run_page_get_log(page);
  g_assert_nonnull(strstr(log, "step 1: gradients overflowed at loss scale"));

  replay(win, "progress-sample.jsonl");
  g_assert_false(cohort_run_page_figure_shown(page, "loss_scale"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* `line` with "run_id" added (a JSON object line), or as it is (any other line). */
static char *with_run_id(const char *line, const char *id)
{
  if (!g_str_has_suffix(line, "}"))
    return g_strdup(line);
  g_autofree char *head = g_strndup(line, strlen(line) - 1);
  return g_strdup_printf("%s,\"run_id\":\"%s\"}", head, id);
}

static char **fixture_lines(const char *name)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "ui", name, NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_strchomp(text);
  return g_strsplit(text, "\n", -1);
}

/* A workspace's events.jsonl as a resumed run leaves it: run-a until a kill after its
 * checkpoint at step 3 (step 4 done, then lost), run-b (the fp16 stream) in between, then
 * run-a resumed from step 3 to its end. */
static char *write_events_file(void)
{
  g_auto(GStrv) a = fixture_lines("progress-sample.jsonl");
  g_auto(GStrv) b = fixture_lines("progress-fp16.jsonl");
  g_autoptr(GString) out = g_string_new(NULL);
  guint resume_at = 0;
  for (guint i = 0; a[i] && resume_at == 0; i++) {
    g_autofree char *l = with_run_id(a[i], "run-a");
    g_string_append_printf(out, "%s\n", l);
    if (strstr(a[i], "\"event\":\"step\"") && strstr(a[i], "\"step\":4,"))
      resume_at = i + 1;
  }
  g_assert_cmpuint(resume_at, >, 0);
  for (guint i = 0; b[i]; i++) {
    g_autofree char *l = with_run_id(b[i], "run-b");
    g_string_append_printf(out, "%s\n", l);
  }
  /* The resumed process: a start at step 3, then the steps after the checkpoint again. */
  g_autoptr(GString) start = g_string_new(a[0]);
  g_assert_cmpuint(g_string_replace(start, "\"start_step\":0", "\"start_step\":3", 1), ==, 1);
  g_autofree char *s = with_run_id(start->str, "run-a");
  g_string_append_printf(out, "%s\n", s);
  for (guint i = resume_at - 1; a[i]; i++) {
    g_autofree char *l = with_run_id(a[i], "run-a");
    g_string_append_printf(out, "%s\n", l);
  }
  char *path = g_build_filename(tmp_dir, "events.jsonl", NULL);
  g_assert_true(g_file_set_contents(path, out->str, -1, NULL));
  return path;
}

/* Replays `path` into `win` showing run `run_id` (NULL: the last) and waits for its end. */
static void replay_path_run(CohortWindow *win, const char *path, const char *run_id)
{
  cohort_run_set_replay_choice(run_id);
  cohort_window_replay(win, path);
  cohort_run_set_replay_choice(NULL);
  g_assert_true(ui_test_wait(run_finished, cohort_window_get_run(win), 10));
}

/* The Run page's figures, point counts and log (whatever type the page getter returns). */
static const char *figure(CohortWindow *win, const char *name)
{
  return cohort_run_page_get_figure(cohort_window_get_run_page(win), name);
}

static guint points(CohortWindow *win, gboolean validation)
{
  return cohort_run_page_count_points(cohort_window_get_run_page(win), validation);
}

/* events.jsonl holds several runs: the last run is shown whole (both of its parts, without
 * the points its resume redid twice) and the other runs are left out, with a word in the
 * log; --run picks another. */
static void test_replay_events_file(void)
{
  g_autofree char *path = write_events_file();
  CohortWindow *win = cohort_window_new(NULL);
  replay_path_run(win, path, NULL);
  g_assert_cmpstr(figure(win, "step"), ==, "6 of 6");
  g_assert_cmpstr(figure(win, "loss"), ==, "5.0004");
  g_assert_cmpstr(figure(win, "val_loss"), ==, "5.0055");
  g_assert_false(cohort_run_page_figure_shown(cohort_window_get_run_page(win), "loss_scale"));
  /* Steps 1-4, then 4-6 again after the resume from step 3: six points, not seven. */
  g_assert_cmpuint(points(win, FALSE), ==, 6);
  g_assert_cmpuint(points(win, TRUE), ==, 2);
  g_assert_true(
      g_str_has_prefix(cohort_run_get_summary(cohort_window_get_run(win)), "Completed: 6 steps"));
  g_autofree char *log = cohort_run_page_get_log(cohort_window_get_run_page(win));
  g_assert_nonnull(strstr(log, "replay: run run-a; 33 events of other runs (run-b) left out"));
  g_assert_null(strstr(log, "gradients overflowed"));

  replay_path_run(win, path, "run-b");
  g_assert_cmpstr(figure(win, "step"), ==, "14 of 14");
  g_assert_true(cohort_run_page_figure_shown(cohort_window_get_run_page(win), "loss_scale"));
  g_assert_cmpuint(points(win, FALSE), ==, 14);

  replay_path_run(win, path, "run-c");
  g_autofree char *log_c = cohort_run_page_get_log(cohort_window_get_run_page(win));
  g_assert_nonnull(strstr(log_c, "replay: no events of run run-c in this file; its runs: run-a, "
                                 "run-b"));
  g_assert_cmpuint(points(win, FALSE), ==, 0);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* A w×h grey PNG of one shade, as a sample grid would be. */
static char *write_png(const char *name, int w, int h, guint8 shade)
{
  g_autofree guint8 *px = g_malloc((size_t)w * h * 3);
  memset(px, shade, (size_t)w * h * 3);
  g_autoptr(GBytes) bytes = g_bytes_new(px, (size_t)w * h * 3);
  g_autoptr(GdkTexture) tex = gdk_memory_texture_new(w, h, GDK_MEMORY_R8G8B8, bytes, (gsize)w * 3);
  char *path = g_build_filename(tmp_dir, name, NULL);
  g_assert_true(gdk_texture_save_to_png(tex, path));
  return path;
}

/* Image samples: the newest grid is shown, a strip keeps every grid to go back to by step,
 * and a click opens the shown one enlarged. */
static void test_image_samples(void)
{
  g_autofree char *a = write_png("step-a.png", 40, 50, 40);
  g_autofree char *b = write_png("step-b.png", 40, 50, 200);
  g_autofree char *path = g_build_filename(tmp_dir, "images.jsonl", NULL);
  g_autofree char *text = g_strdup_printf(
      "{\"event\":\"start\",\"time\":1,\"run\":\"d\",\"total_steps\":20,\"world_size\":1}\n"
      "{\"event\":\"sample\",\"time\":2,\"step\":10,\"image\":\"%s\",\"rows\":[\"0\"]}\n"
      "{\"event\":\"sample\",\"time\":3,\"step\":20,\"image\":\"%s\",\"rows\":[\"0\"]}\n"
      "{\"event\":\"done\",\"time\":4,\"status\":\"completed\",\"step\":20}\n",
      a, b);
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
  CohortWindow *win = cohort_window_new(NULL);
  cohort_window_replay(win, path);
  g_assert_true(ui_test_wait(run_finished, cohort_window_get_run(win), 10));
  CohortSampleView *view = cohort_run_page_get_samples(cohort_window_get_run_page(win));
  g_assert_cmpuint(cohort_sample_view_count_images(view), ==, 2);
  g_assert_cmpstr(cohort_sample_view_get_image(view), ==, b);
  g_assert_cmpstr(cohort_sample_view_get_text(view), ==, "Step 20");
  cohort_sample_view_show(view, 0);
  g_assert_cmpstr(cohort_sample_view_get_image(view), ==, a);
  g_assert_cmpstr(cohort_sample_view_get_text(view), ==, "Step 10");
  GtkWindow *big = cohort_sample_view_enlarge(view);
  g_assert_nonnull(big);
  g_assert_cmpstr(gtk_window_get_title(big), ==, "Sample at step 10");
  GtkWidget *pic = gtk_window_get_child(big);
  g_assert_true(GTK_IS_PICTURE(pic));
  GdkPaintable *paint = gtk_picture_get_paintable(GTK_PICTURE(pic));
  g_assert_nonnull(paint);
  g_assert_cmpint(gdk_paintable_get_intrinsic_width(paint), ==, 40);
  gtk_window_destroy(big);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Lines that are not events (too deep, wrong types, two objects, a NUL, not UTF-8) are
 * skipped with a word in the log; the run around them shows normally. */
/* A replay looks for the last run id from the end of the file: a deep last line (a torn
 * write, or a hostile file) goes through the strict reader, never json-glib's recursion. */
static void test_replay_deep_last_line(void)
{
  g_autoptr(GString) text =
      g_string_new("{\"event\":\"start\",\"run\":\"m\",\"params\":10,\"device\":\"cpu\","
                   "\"world_size\":1,\"total_steps\":2}\n"
                   "{\"event\":\"step\",\"step\":2,\"total_steps\":2,\"loss\":4.5}\n"
                   "{\"event\":\"done\",\"status\":\"completed\",\"step\":2}\n"
                   "{\"event\":\"log\",\"x\":");
  for (int i = 0; i < 1000000; i++)
    g_string_append_c(text, '[');
  g_string_append_c(text, '\n');
  g_autofree char *path = g_build_filename(tmp_dir, "deep-last.jsonl", NULL);
  g_assert_true(g_file_set_contents(path, text->str, (gssize)text->len, NULL));
  CohortWindow *win = cohort_window_new(NULL);
  cohort_window_replay(win, path);
  CohortRun *run = cohort_window_get_run(win);
  g_assert_true(ui_test_wait(run_finished, run, 20));
  g_assert_true(g_str_has_prefix(cohort_run_get_summary(run), "Completed: 2 steps"));
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_replay_malformed(void)
{
  g_autoptr(GString) deep = g_string_new("{\"event\":\"step\",\"step\":");
  for (int i = 0; i < 60000; i++)
    g_string_append_c(deep, '[');
  const char *bad[] = {
      deep->str,
      "{\"event\":5}",
      "{\"event\":\"error\",\"rank\":\"one\",\"message\":7}",
      "{\"event\":\"ranks\",\"ranks\":5}",
      "{\"event\":\"ranks\",\"ranks\":[1,\"a\"]}",
      "{\"event\":\"ranks\",\"ranks\":[{\"host\":[]}]}",
      "{\"event\":\"step\",\"step\":1}{\"event\":\"done\"}",
      "{\"event\":\"log\",\"level\":\"info\",\"message\":\"a\\u0000b\"}",
      "{\"event\":\"log\",\"message\":\"\xFF\"}",
      "{\"event\":\"step\",\"step\":{\"x\":1}}",
      "{\"event\":\"step\",\"event\":\"done\"}",
      "{\"event\":\"done\",\"status\":null}",
      "[\"event\"]",
  };
  g_autoptr(GString) text =
      g_string_new("{\"event\":\"start\",\"run\":\"m\",\"params\":10,\"device\":\"cpu\","
                   "\"world_size\":1,\"total_steps\":2}\n");
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++)
    g_string_append_printf(text, "%s\n", bad[i]);
  static const char nul_line[] = "{\"event\":\"log\",\0\"message\":\"x\"}\n";
  g_string_append_len(text, nul_line, sizeof nul_line - 1);
  g_string_append(text, "{\"event\":\"step\",\"step\":2,\"total_steps\":2,\"loss\":4.5}\n"
                        "{\"event\":\"done\",\"status\":\"completed\",\"step\":2}\n");
  g_autofree char *path = g_build_filename(tmp_dir, "malformed.jsonl", NULL);
  g_assert_true(g_file_set_contents(path, text->str, (gssize)text->len, NULL));

  CohortWindow *win = cohort_window_new(NULL);
  cohort_window_replay(win, path);
  CohortRun *run = cohort_window_get_run(win);
  g_assert_true(ui_test_wait(run_finished, run, 20));
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "step"), ==, "2 of 2");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "loss"), ==, "4.5000");
  g_assert_true(g_str_has_prefix(cohort_run_get_summary(run), "Completed: 2 steps"));
  g_autofree char *log = cohort_run_page_get_log(page);
  guint skipped = 0;
  for (const char *p = log; (p = strstr(p, "progress: not an event: ")) != NULL; p++)
    skipped++;
  g_assert_cmpuint(skipped, ==, G_N_ELEMENTS(bad) + 1);
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_crash_report(void)
{
  g_autofree char *fake = g_test_build_filename(G_TEST_DIST, "ui", "fake-train.sh", NULL);
  g_setenv("COHORT_TRAIN_PROGRAM", fake, TRUE);
  g_setenv("COHORT_FAKE_MODE", "crash", TRUE);
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_autofree char *ws = g_build_filename(tmp_dir, "crash", NULL);
  g_assert_true(cohort_config_form_set_text(form, "workspace_dir", ws));
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_start(win, &error));
  g_assert_no_error(error);
  g_assert_false(cohort_window_can_start(win));
  g_autofree char *run_json = g_build_filename(ws, "run.json", NULL);
  g_assert_true(g_file_test(run_json, G_FILE_TEST_IS_REGULAR));
  CohortRun *run = cohort_window_get_run(win);
  g_assert_true(ui_test_wait(run_finished, run, 20));
  const char *summary = cohort_run_get_summary(run);
  g_test_message("summary: %s", summary);
  g_assert_true(g_str_has_prefix(summary, "Failed: rank 1: all_reduce failed"));
  g_assert_nonnull(strstr(summary, "exited with code 1"));
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_autofree char *log = cohort_run_page_get_log(page);
  g_assert_nonnull(strstr(log, "cohort-run: rank 1 (pid 4242) exited with code 1"));
  g_assert_nonnull(strstr(log, "[rank 1] cohort-train"));
  g_assert_true(cohort_window_can_start(win));
  gtk_window_destroy(GTK_WINDOW(win));
  g_unsetenv("COHORT_TRAIN_PROGRAM");
}

static void test_stop_kills_group(void)
{
  g_autofree char *fake = g_test_build_filename(G_TEST_DIST, "ui", "fake-train.sh", NULL);
  g_setenv("COHORT_FAKE_MODE", "stubborn", TRUE);
  g_autoptr(CohortRun) run = cohort_run_new();
  const char *argv[] = {fake, NULL};
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_run_start(run, argv, tmp_dir, &error));
  int pgid = cohort_run_get_pid(run);
  g_assert_cmpint(pgid, >, 0);
  /* Wait for the "ranks" to exist: the script reports their pids on its output. */
  ui_test_spin(1.5);
  g_assert_true(cohort_run_is_running(run));
  g_assert_false(group_gone_now(GINT_TO_POINTER(pgid)));
  /* The script ignores SIGTERM, so the group is killed after the grace period. */
  cohort_run_stop(run, 1.0);
  g_assert_true(ui_test_wait(run_finished, run, 15));
  g_test_message("summary: %s", cohort_run_get_summary(run));
  g_assert_nonnull(strstr(cohort_run_get_summary(run), "signal 9"));
  g_assert_true(group_gone(pgid));
}

static gboolean engine_has_nproc(void)
{
  g_autofree char *train = cohort_ui_find_program("cohort-train", NULL);
  g_autofree char *out = NULL;
  const char *argv[] = {train, "--help", NULL};
  if (train == NULL ||
      !g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, NULL, NULL, NULL))
    return FALSE;
  return strstr(out, "--nproc") != NULL;
}

static void real_run(int nproc, gboolean torchrun)
{
  g_unsetenv("COHORT_TRAIN_PROGRAM");
  if (nproc > 1 && !torchrun && !engine_has_nproc()) {
    g_test_skip("cohort-train has no --nproc (spawn mode) in this build yet");
    return;
  }
  g_autofree char *launcher = cohort_ui_find_program("cohort-run", NULL);
  if (torchrun && launcher == NULL) {
    g_test_skip("cohort-run is not built");
    return;
  }
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_autofree char *ws = g_strdup_printf("%s/real-%d-%d", tmp_dir, nproc, torchrun);
  g_autofree char *np = g_strdup_printf("%d", nproc);
  const char *sets[][2] = {
      {"workspace_dir", ws},
      {"n_layer", "1"},
      {"n_embd", "64"},
      {"n_head", "2"},
      {"seq_len", "32"},
      {"batch_size", "4"},
      {"max_steps", "2000"},
      {"warmup_steps", "1"},
      {"eval_every", "0"},
      {"eval_steps", "1"},
      {"sample_every", "0"},
      {"save_every", "0"},
      {"threads", "1"},
      {"device", "cpu"},
      {"distributed_backend", "gloo"},
      {"enable_multi_gpu", nproc > 1 ? "true" : "false"},
      {"use_torchrun", torchrun ? "true" : "false"},
      {"nproc_per_node", np},
  };
  for (guint i = 0; i < G_N_ELEMENTS(sets); i++)
    if (!cohort_config_form_set_text(form, sets[i][0], sets[i][1]))
      g_error("%s=%s: %s", sets[i][0], sets[i][1], cohort_config_form_get_error(form, sets[i][0]));
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_start(win, &error));
  g_assert_no_error(error);
  CohortRun *run = cohort_window_get_run(win);
  int pgid = cohort_run_get_pid(run);
  if (!ui_test_wait(has_steps, win, 120)) {
    g_autofree char *log = cohort_run_page_get_log(cohort_window_get_run_page(win));
    g_error("no steps reached the window; output:\n%s", log);
  }
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_test_message("step %s, loss %s, status %s", cohort_run_page_get_figure(page, "step"),
                 cohort_run_page_get_figure(page, "loss"),
                 cohort_run_page_get_figure(page, "status"));
  g_assert_true(g_str_has_suffix(cohort_run_page_get_figure(page, "step"), "of 2000"));
  g_assert_cmpfloat(g_ascii_strtod(cohort_run_page_get_figure(page, "loss"), NULL), >, 0);
  g_autofree char *world = g_strdup_printf("%d process", nproc);
  g_assert_nonnull(strstr(cohort_run_page_get_figure(page, "status"), world));
  g_assert_false(cohort_window_can_start(win));
  if (nproc > 1) {
    /* The per-rank table fills from the engine's `ranks` events (every 10 steps). */
    g_assert_true(ui_test_wait(has_ranks, win, 120));
    g_assert_cmpuint(cohort_run_page_count_ranks(page), ==, (guint)nproc);
    /* A rank is highlighted only when clearly slower than the others (-1: none is). */
    int slowest = cohort_run_page_get_slowest(page);
    g_assert_true(slowest >= -1 && slowest < nproc);
  }

  cohort_window_stop(win);
  g_assert_true(ui_test_wait(run_finished, run, 60));
  g_test_message("summary: %s", cohort_run_get_summary(run));
  g_assert_true(g_str_has_prefix(cohort_run_get_summary(run), "Stopped"));
  g_assert_true(group_gone(pgid));
  g_assert_true(cohort_window_can_start(win));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* The window's sync_batchnorm switch reaches the engine: the tiny-resnet preset, made small,
 * trained from the window with 2 ranks (spawn mode), once with the switch off and once on;
 * only the run with it on reports SyncBatchNorm's time per rank (the engine ran its
 * collectives) and the ranks table shows it. */
static void test_sync_batchnorm_switch(void)
{
  g_unsetenv("COHORT_TRAIN_PROGRAM");
  if (!engine_has_nproc()) {
    g_test_skip("cohort-train has no --nproc (spawn mode) in this build yet");
    return;
  }
  for (int sync = 0; sync <= 1; sync++) {
    CohortWindow *win = cohort_window_new(NULL);
    g_assert_true(cohort_window_load_preset(win, "tiny-resnet"));
    CohortConfigForm *form = cohort_window_get_form(win);
    g_autofree char *ws = g_strdup_printf("%s/syncbn-%d", tmp_dir, sync);
    const char *sets[][2] = {
        {"workspace_dir", ws},
        {"image_size", "16"},
        {"resnet_width", "4"},
        {"batch_size", "4"},
        {"warmup_steps", "0"},
        {"max_steps", "12"},
        {"eval_every", "0"},
        {"eval_steps", "1"},
        {"val_data", ""},
        {"threads", "1"},
        {"device", "cpu"},
        {"use_torchrun", "false"},
        {"sync_batchnorm", sync ? "true" : "false"},
    };
    for (guint i = 0; i < G_N_ELEMENTS(sets); i++)
      if (!cohort_config_form_set_text(form, sets[i][0], sets[i][1]))
        g_error("%s=%s: %s", sets[i][0], sets[i][1],
                cohort_config_form_get_error(form, sets[i][0]));
    g_autoptr(GError) error = NULL;
    g_assert_true(cohort_window_start(win, &error));
    g_assert_no_error(error);
    CohortRun *run = cohort_window_get_run(win);
    g_assert_true(ui_test_wait(run_finished, run, 120));
    CohortRunPage *page = cohort_window_get_run_page(win);
    g_test_message("sync_batchnorm %d: %s", sync, cohort_run_get_summary(run));
    g_assert_true(g_str_has_prefix(cohort_run_get_summary(run), "Completed"));
    g_assert_cmpuint(cohort_run_page_count_ranks(page), ==, 2);
    g_assert_cmpint(cohort_run_page_ranks_show_syncbn(page), ==, sync);
    gtk_window_destroy(GTK_WINDOW(win));
  }
  /* Later windows start from the defaults again, not from this test's last settings. */
  g_autofree char *last = cohort_ui_last_config_path();
  g_unlink(last);
}

static void test_real_single(void)
{
  real_run(1, FALSE);
}

static void test_real_spawn_two_ranks(void)
{
  real_run(2, FALSE);
}

static void test_real_cohort_run_two_ranks(void)
{
  real_run(2, TRUE);
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/run/replay", test_replay);
  g_test_add_func("/ui/run/replay-fp16", test_replay_fp16);
  g_test_add_func("/ui/run/replay-events-file", test_replay_events_file);
  g_test_add_func("/ui/run/image-samples", test_image_samples);
  g_test_add_func("/ui/run/replay-malformed", test_replay_malformed);
  g_test_add_func("/ui/run/replay-deep-last-line", test_replay_deep_last_line);
  g_test_add_func("/ui/run/replay-accuracy", test_replay_accuracy);
  g_test_add_func("/ui/run/crash-report", test_crash_report);
  g_test_add_func("/ui/run/stop-kills-group", test_stop_kills_group);
  g_test_add_func("/ui/run/sync-batchnorm-switch", test_sync_batchnorm_switch);
  g_test_add_func("/ui/run/real-single", test_real_single);
  g_test_add_func("/ui/run/real-spawn-2-ranks", test_real_spawn_two_ranks);
  g_test_add_func("/ui/run/real-cohort-run-2-ranks", test_real_cohort_run_two_ranks);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
