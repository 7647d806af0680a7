/* The Run page's views: the History reads a workspace's events.jsonl (two runs), lays their
 * curves over the chart to compare and shows one again; the chart draws every loss and metric
 * a run reports, smooths, switches to a log axis and saves PNG and CSV; text samples can be
 * paged by step; the per-rank table highlights a straggler only past its threshold and shows
 * GPU columns when the events carry them; the last step's status and the final elapsed time;
 * the latent cache's progress before the first step;
 * and the page reflows at 800×600 with the chart keeping a usable size. */
#include <math.h>

#include "tests/ui/ui-test.h"
#include "ui/loss-chart-private.h"
#include "ui/run-history.h"
#include "ui/run-page-private.h"
#include "ui/window-private.h"

static char *tmp_dir;

static gboolean run_finished(gpointer data)
{
  return cohort_run_get_summary(data) != NULL;
}

static JsonObject *event(const char *json)
{
  g_autoptr(JsonNode) node = json_from_string(json, NULL);
  g_assert_nonnull(node);
  return json_object_ref(json_node_get_object(node));
}

static void feed(CohortRunPage *page, const char *json)
{
  g_autoptr(JsonObject) ev = event(json);
  cohort_run_page_handle_event(page, ev);
}

/* Two runs in one events.jsonl: run-a with a resume (its redone steps replace the old), run-b
 * stopped. */
static char *write_two_runs(const char *ws)
{
  g_mkdir_with_parents(ws, 0755);
  g_autoptr(GString) s = g_string_new(NULL);
  g_string_append(s,
                  "{\"event\":\"start\",\"time\":1700000000,\"run\":\"ws\",\"run_id\":\"aaaa11\","
                  "\"total_steps\":4,\"start_step\":0}\n");
  for (int i = 1; i <= 3; i++)
    g_string_append_printf(s,
                           "{\"event\":\"step\",\"time\":1700000001,\"step\":%d,\"loss\":%d.5,"
                           "\"run_id\":\"aaaa11\"}\n",
                           i, 6 - i);
  g_string_append(s,
                  "{\"event\":\"start\",\"time\":1700000100,\"run\":\"ws\",\"run_id\":\"aaaa11\","
                  "\"total_steps\":4,\"start_step\":2}\n");
  g_string_append(s,
                  "{\"event\":\"step\",\"time\":1700000101,\"step\":3,\"loss\":2.0,"
                  "\"run_id\":\"aaaa11\"}\n"
                  "{\"event\":\"step\",\"time\":1700000102,\"step\":4,\"loss\":1.5,"
                  "\"run_id\":\"aaaa11\"}\n"
                  "{\"event\":\"eval\",\"time\":1700000102,\"step\":4,\"val_loss\":1.75,"
                  "\"run_id\":\"aaaa11\"}\n"
                  "{\"event\":\"done\",\"time\":1700000103,\"status\":\"completed\",\"step\":4,"
                  "\"run_id\":\"aaaa11\"}\n"
                  "not an event\n"
                  "{\"event\":\"start\",\"time\":1700001000,\"run\":\"ws\",\"run_id\":\"bbbb22\","
                  "\"total_steps\":10,\"start_step\":0}\n"
                  "{\"event\":\"step\",\"time\":1700001001,\"step\":1,\"loss\":7.0,"
                  "\"run_id\":\"bbbb22\"}\n"
                  "{\"event\":\"step\",\"time\":1700001002,\"step\":2,\"loss\":6.0,"
                  "\"run_id\":\"bbbb22\"}\n"
                  "{\"event\":\"done\",\"time\":1700001003,\"status\":\"stopped\",\"step\":2,"
                  "\"run_id\":\"bbbb22\"}\n");
  char *path = g_build_filename(ws, "events.jsonl", NULL);
  g_assert_true(g_file_set_contents(path, s->str, -1, NULL));
  return path;
}

static void test_history_two_runs(void)
{
  g_autofree char *ws = g_build_filename(tmp_dir, "history", NULL);
  g_autofree char *path = write_two_runs(ws);

  /* The reader alone. */
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) runs = cohort_past_runs_load(path, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(runs->len, ==, 2);
  CohortPastRun *a = g_ptr_array_index(runs, 0), *b = g_ptr_array_index(runs, 1);
  g_assert_cmpstr(a->id, ==, "aaaa11");
  g_assert_cmpstr(a->status, ==, "completed");
  /* Steps 1, 2, then 3 and 4 from the resume: the first step 3 was redone. */
  g_assert_cmpuint(a->train->len / 2, ==, 4);
  g_assert_cmpfloat(g_array_index(a->train, double, 5), ==, 2.0);
  g_assert_cmpuint(a->val->len / 2, ==, 1);
  g_assert_cmpfloat(a->final_loss, ==, 1.5);
  g_assert_cmpstr(b->status, ==, "stopped");
  g_assert_cmpint(b->last_step, ==, 2);
  g_assert_cmpint(b->total_steps, ==, 10);

  /* In the window: the workspace's runs, compared and shown. */
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(cohort_config_form_set_text(cohort_window_get_form(win), "workspace_dir", ws));
  CohortRunPage *page = cohort_window_get_run_page(win);
  CohortHistoryPopover *history = cohort_run_page_get_history(page);
  g_assert_true(cohort_history_popover_reload(history, &error));
  g_assert_cmpuint(cohort_history_popover_get_runs(history)->len, ==, 2);
  CohortLossChart *chart = cohort_run_page_get_chart(page);
  g_assert_true(cohort_history_popover_compare(history, "aaaa11", TRUE));
  g_assert_true(cohort_history_popover_compare(history, "bbbb22", TRUE));
  g_assert_cmpuint(cohort_loss_chart_count_overlays(chart), ==, 2);
  g_assert_false(cohort_history_popover_compare(history, "cccc33", TRUE));
  g_assert_true(cohort_history_popover_compare(history, "bbbb22", FALSE));
  g_assert_cmpuint(cohort_loss_chart_count_overlays(chart), ==, 1);

  g_signal_emit_by_name(page, "show-run", "bbbb22");
  g_assert_true(ui_test_wait(run_finished, cohort_window_get_run(win), 10));
  g_assert_cmpstr(cohort_run_page_get_figure(page, "step"), ==, "2 of 10");
  g_assert_cmpuint(cohort_run_page_count_points(page, FALSE), ==, 2);
  /* The comparison stays over the run shown. */
  g_assert_cmpuint(cohort_loss_chart_count_overlays(chart), ==, 1);
  g_autofree char *log = cohort_run_page_get_log(page);
  g_assert_nonnull(strstr(log, "replay: run bbbb22"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Up to four runs compared at once. */
static void test_overlay_limit(void)
{
  g_autoptr(CohortLossChart) chart = g_object_ref_sink(COHORT_LOSS_CHART(cohort_loss_chart_new()));
  g_autoptr(GArray) xy = g_array_new(FALSE, FALSE, sizeof(double));
  double pt[2] = {1, 2};
  g_array_append_vals(xy, pt, 2);
  for (int i = 0; i < COHORT_LOSS_CHART_MAX_OVERLAYS; i++) {
    g_autofree char *label = g_strdup_printf("run %d", i);
    g_assert_true(cohort_loss_chart_add_overlay(chart, label, xy, NULL));
  }
  g_assert_false(cohort_loss_chart_add_overlay(chart, "one more", xy, NULL));
  g_assert_cmpuint(cohort_loss_chart_count_overlays(chart), ==, 4);
}

static char *read_text(const char *path)
{
  char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  return text;
}

/* Every loss a step carries and every metric an evaluation carries get a curve; smoothing,
 * the log axis, and the PNG and CSV files. */
static void test_chart(void)
{
  CohortRunPage *page = COHORT_RUN_PAGE(g_object_ref_sink(cohort_run_page_new()));
  CohortLossChart *chart = cohort_run_page_get_chart(page);
  feed(page, "{\"event\":\"start\",\"total_steps\":3,\"metrics\":[\"val_loss\",\"accuracy\"]}");
  feed(page, "{\"event\":\"step\",\"step\":1,\"loss\":4.0,\"loss_task\":3.0,\"loss_distill\":1.0,"
             "\"loss_scale\":1024}");
  feed(page, "{\"event\":\"step\",\"step\":2,\"loss\":2.0,\"loss_task\":1.5,\"loss_distill\":0.5}");
  feed(page, "{\"event\":\"eval\",\"step\":2,\"val_loss\":2.5,\"accuracy\":0.25,\"val_samples\":64,"
             "\"ema\":false}");
  g_assert_cmpuint(cohort_loss_chart_count_series(chart, "loss"), ==, 2);
  g_assert_cmpuint(cohort_loss_chart_count_series(chart, "loss_task"), ==, 2);
  g_assert_cmpuint(cohort_loss_chart_count_series(chart, "loss_distill"), ==, 2);
  g_assert_cmpuint(cohort_loss_chart_count_series(chart, "loss_scale"), ==, 0);
  g_assert_cmpuint(cohort_loss_chart_count_series(chart, "val_samples"), ==, 0);
  g_assert_cmpuint(cohort_loss_chart_count_series(chart, "accuracy"), ==, 1);
  g_assert_true(cohort_loss_chart_find(chart, "accuracy")->right);
  g_assert_false(cohort_loss_chart_find(chart, "val_loss")->right);

  /* TensorBoard's smoothing: debiased, so the first point is its own value. */
  cohort_loss_chart_set_smoothing(chart, 0.5);
  g_assert_cmpfloat(cohort_loss_chart_drawn_value(chart, "loss", 0), ==, 4.0);
  g_assert_cmpfloat_with_epsilon(cohort_loss_chart_drawn_value(chart, "loss", 1),
                                 (0.25 * 4.0 + 0.5 * 2.0) / 0.75, 1e-12);
  g_assert_cmpfloat(cohort_loss_chart_drawn_value(chart, "val_loss", 0), ==, 2.5);
  cohort_loss_chart_set_smoothing(chart, 0);
  g_assert_cmpfloat(cohort_loss_chart_drawn_value(chart, "loss", 1), ==, 2.0);
  cohort_run_page_set_smoothing(page, 0.3);
  g_assert_cmpfloat_with_epsilon(cohort_loss_chart_get_smoothing(chart), 0.3, 1e-9);

  cohort_loss_chart_set_log_scale(chart, TRUE);
  g_autofree char *png = g_build_filename(tmp_dir, "chart.png", NULL);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_loss_chart_save_png(chart, png, 640, 360, &error));
  g_assert_no_error(error);
  g_autoptr(GdkTexture) tex = gdk_texture_new_from_filename(png, &error);
  g_assert_no_error(error);
  g_assert_cmpint(gdk_texture_get_width(tex), ==, 640);
  g_assert_cmpint(gdk_texture_get_height(tex), ==, 360);

  g_autofree char *csv = g_build_filename(tmp_dir, "chart.csv", NULL);
  g_assert_true(cohort_loss_chart_save_csv(chart, csv, &error));
  g_autofree char *text = read_text(csv);
  g_test_message("%s", text);
  g_assert_cmpstr(text, ==,
                  "step,loss,loss_task,loss_distill,val_loss,accuracy\n"
                  "1,4,3,1,,\n"
                  "2,2,1.5,0.5,2.5,0.25\n");
  g_assert_false(cohort_loss_chart_save_csv(chart, "/nonexistent/dir/x.csv", &error));
  g_assert_nonnull(error);
  g_object_unref(page);
}

/* A straggler is highlighted only past the threshold; GPU columns come with GPU figures. */
static void test_ranks_table(void)
{
  g_autoptr(CohortRanksView) ranks = g_object_ref_sink(COHORT_RANKS_VIEW(cohort_ranks_view_new()));
  g_autoptr(JsonObject) close = event(
      "{\"event\":\"ranks\",\"ranks\":[{\"rank\":0,\"host\":\"a\",\"step_s\":0.400},"
      "{\"rank\":1,\"host\":\"a\",\"step_s\":0.4012},{\"rank\":2,\"host\":\"b\",\"step_s\":0.399}],"
      "\"slowest\":1}");
  cohort_ranks_view_show(ranks, close);
  g_assert_cmpuint(cohort_ranks_view_count(ranks), ==, 3);
  /* 0.3 % slower than the others is noise: nothing is highlighted, whatever "slowest" says. */
  g_assert_cmpint(cohort_ranks_view_get_slowest(ranks), ==, -1);
  g_assert_false(cohort_ranks_view_has_gpu_columns(ranks));
  g_autoptr(JsonObject) slow = event(
      "{\"event\":\"ranks\",\"ranks\":[{\"rank\":0,\"host\":\"a\",\"step_s\":0.400,"
      "\"gpu_util\":97,\"gpu_mem_used\":1073741824},{\"rank\":1,\"host\":\"a\",\"step_s\":0.460,"
      "\"gpu_util\":80,\"gpu_mem_used\":1073741824},{\"rank\":2,\"host\":\"b\",\"step_s\":0.401,"
      "\"gpu_util\":96,\"gpu_mem_used\":1073741824}],\"slowest\":1}");
  cohort_ranks_view_show(ranks, slow);
  g_assert_cmpint(cohort_ranks_view_get_slowest(ranks), ==, 1);
  g_assert_true(cohort_ranks_view_has_gpu_columns(ranks));
  cohort_ranks_view_reset(ranks);
  g_assert_cmpuint(cohort_ranks_view_count(ranks), ==, 0);
}

/* A `hang` event shows who is missing and what each does, until a resolved one; `health`
 * events read as a log line. */
static void test_hang_and_health(void)
{
  g_autoptr(CohortRanksView) ranks = g_object_ref_sink(COHORT_RANKS_VIEW(cohort_ranks_view_new()));
  g_assert_cmpstr(cohort_ranks_view_get_hang_text(ranks), ==, "");
  g_autoptr(JsonObject) hang = event(
      "{\"event\":\"hang\",\"collective\":\"all_reduce\",\"seq\":1482,\"label\":\"bucket 1 of "
      "7\",\"waited_s\":61.1,\"timeout_s\":300,\"resolved\":false,\"missing\":[1,2],\"ranks\":"
      "[{\"rank\":0,\"arrived\":true,\"phase\":\"backward\",\"phase_s\":61.4,\"step\":211},"
      "{\"rank\":1,\"arrived\":false,\"phase\":\"checkpoint\",\"phase_s\":75,\"step\":211},"
      "{\"rank\":2,\"arrived\":false}]}");
  cohort_ranks_view_show_hang(ranks, hang);
  const char *text = cohort_ranks_view_get_hang_text(ranks);
  g_test_message("%s", text);
  g_assert_nonnull(strstr(text, "Waiting 61 s in all_reduce #1482 (bucket 1 of 7)"));
  g_assert_nonnull(strstr(text, "rank 1, writing a checkpoint for 75 s at step 211"));
  g_assert_nonnull(strstr(text, "rank 2 (no heartbeat yet)"));
  g_assert_null(strstr(text, "rank 0"));
  g_assert_nonnull(strstr(text, "up to 300 s without progress"));
  g_autoptr(JsonObject) resolved =
      event("{\"event\":\"hang\",\"collective\":\"all_reduce\",\"seq\":1482,\"waited_s\":80,"
            "\"timeout_s\":300,\"resolved\":true,\"missing\":[],\"ranks\":[]}");
  cohort_ranks_view_show_hang(ranks, resolved);
  g_assert_cmpstr(cohort_ranks_view_get_hang_text(ranks), ==, "");
  g_autoptr(JsonObject) ok = event("{\"event\":\"health\",\"step\":300,\"status\":\"ok\","
                                   "\"world_size\":4,\"tensors\":77}");
  g_autofree char *a = cohort_ranks_view_health_text(ok);
  g_assert_cmpstr(a, ==, "step 300: the 4 processes hold the same weights (77 tensors compared)");
  g_autoptr(JsonObject) bad = event("{\"event\":\"health\",\"step\":3,\"status\":\"diverged\","
                                    "\"tensor\":\"h.1.mlp.c_proj.weight\"}");
  g_autofree char *b = cohort_ranks_view_health_text(bad);
  g_assert_cmpstr(b, ==, "step 3: the processes' weights differ, first in h.1.mlp.c_proj.weight");
}

/* Text samples stay, to page through by step; the newest is shown. */
static void test_text_samples(void)
{
  CohortRunPage *page = COHORT_RUN_PAGE(g_object_ref_sink(cohort_run_page_new()));
  CohortSampleView *view = cohort_run_page_get_samples(page);
  feed(page, "{\"event\":\"sample\",\"step\":10,\"text\":\"first\"}");
  feed(page, "{\"event\":\"sample\",\"step\":20,\"text\":\"second\"}");
  feed(page, "{\"event\":\"sample\",\"step\":30,\"text\":\"third\"}");
  g_assert_cmpuint(cohort_sample_view_count_texts(view), ==, 3);
  g_assert_cmpstr(cohort_sample_view_get_text(view), ==, "third");
  g_assert_cmpint(cohort_sample_view_get_text_step(view), ==, 30);
  cohort_sample_view_step_text(view, -1);
  cohort_sample_view_step_text(view, -1);
  g_assert_cmpstr(cohort_sample_view_get_text(view), ==, "first");
  g_assert_cmpint(cohort_sample_view_get_text_step(view), ==, 10);
  cohort_sample_view_step_text(view, -1); /* at the first: stays */
  g_assert_cmpint(cohort_sample_view_get_text_step(view), ==, 10);
  cohort_sample_view_step_text(view, 1);
  g_assert_cmpstr(cohort_sample_view_get_text(view), ==, "second");
  cohort_run_page_reset(page);
  g_assert_cmpuint(cohort_sample_view_count_texts(view), ==, 0);
  g_object_unref(page);
}

/* After the last step the status says what the silent seconds are; the elapsed time is the
 * whole run's, as the end reports it; image models show samples per second. */
static void test_final_phase(void)
{
  CohortRunPage *page = COHORT_RUN_PAGE(g_object_ref_sink(cohort_run_page_new()));
  feed(page, "{\"event\":\"start\",\"run\":\"r\",\"total_steps\":6,\"world_size\":1}");
  feed(page, "{\"event\":\"step\",\"step\":5,\"total_steps\":6,\"loss\":1.0,\"elapsed_s\":15,"
             "\"samples_per_s\":123.4}");
  g_assert_false(cohort_run_page_in_final_phase(page));
  g_assert_cmpstr(cohort_run_page_get_throughput_caption(page), ==, "Samples per second");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "tokens_per_s"), ==, "123.4");
  feed(page, "{\"event\":\"step\",\"step\":6,\"total_steps\":6,\"loss\":0.9,\"elapsed_s\":19}");
  g_assert_true(cohort_run_page_in_final_phase(page));
  g_assert_cmpstr(cohort_run_page_get_figure(page, "status"), ==,
                  "Final evaluation and saving the model…");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "elapsed"), ==, "19 s");
  feed(page, "{\"event\":\"done\",\"status\":\"completed\",\"step\":6,\"elapsed_s\":24.2}");
  g_assert_false(cohort_run_page_in_final_phase(page));
  g_assert_cmpstr(cohort_run_page_get_figure(page, "elapsed"), ==, "24 s");
  g_object_unref(page);
}

/* vae_from: the `latents` events before the first step fill the status, the step bar and the
 * ETA; the start event then takes over. */
static void test_latent_caching(void)
{
  CohortRunPage *page = COHORT_RUN_PAGE(g_object_ref_sink(cohort_run_page_new()));
  feed(page, "{\"event\":\"latents\",\"set\":\"train\",\"done\":400,\"total\":1600,"
             "\"encoded\":400,\"images_per_s\":12.5,\"eta_s\":96,\"finished\":false}");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "status"), ==,
                  "Caching latents of the training images: 400 of 1600 (12.5 images per second)");
  g_assert_cmpfloat_with_epsilon(cohort_run_page_get_step_fraction(page), 0.25, 1e-9);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "eta"), ==, "1 min 36 s");
  feed(page, "{\"event\":\"latents\",\"set\":\"val\",\"done\":200,\"total\":200,"
             "\"encoded\":0,\"images_per_s\":900,\"finished\":true}");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "status"), ==,
                  "Latents of 200 validation images cached (900.0 images per second)");
  g_assert_cmpfloat_with_epsilon(cohort_run_page_get_step_fraction(page), 1.0, 1e-9);
  feed(page, "{\"event\":\"start\",\"run\":\"r\",\"params\":1000000,\"device\":\"cpu\","
             "\"total_steps\":6,\"world_size\":2}");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "status"), ==,
                  "Training r: 1.0 M parameters on cpu, 2 processes");
  g_object_unref(page);
}

static gboolean realized(gpointer data)
{
  return gtk_widget_get_realized(data) && gtk_widget_get_height(data) > 0;
}

static gboolean chart_allocated(gpointer data)
{
  CohortWindow *win = data;
  GtkWidget *chart = GTK_WIDGET(cohort_run_page_get_chart(cohort_window_get_run_page(win)));
  return gtk_widget_get_mapped(chart) && gtk_widget_get_height(chart) > 0;
}

/* At 800×600 the window fits, the sample and ranks column moves under the chart, and the chart
 * keeps a usable size; on a wide window the column stands beside it. */
static void test_narrow_layout(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  int min_h = 0, nat_h = 0, min_w = 0, nat_w = 0;
  gtk_widget_measure(GTK_WIDGET(win), GTK_ORIENTATION_HORIZONTAL, -1, &min_w, &nat_w, NULL, NULL);
  gtk_widget_measure(GTK_WIDGET(win), GTK_ORIENTATION_VERTICAL, 800, &min_h, &nat_h, NULL, NULL);
  g_test_message("window minimum %d × %d (at 800 wide)", min_w, min_h);
  /* A 1366×768 laptop shows it with room for a panel. */
  g_assert_cmpint(min_w, <=, 800);
  g_assert_cmpint(min_h, <=, 600);

  gtk_window_set_default_size(GTK_WINDOW(win), 800, 600);
  cohort_window_show_page(win, "run");
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "ui", "progress-sample.jsonl", NULL);
  cohort_window_replay(win, path);
  gtk_window_present(GTK_WINDOW(win));
  g_assert_true(ui_test_wait(realized, win, 10));
  g_assert_true(ui_test_wait(chart_allocated, win, 10));
  g_assert_true(ui_test_wait(run_finished, cohort_window_get_run(win), 10));
  ui_test_spin(0.5);
  CohortRunPage *page = cohort_window_get_run_page(win);
  GtkWidget *chart = GTK_WIDGET(cohort_run_page_get_chart(page));
  g_test_message("window %d × %d, chart %d × %d", gtk_widget_get_width(GTK_WIDGET(win)),
                 gtk_widget_get_height(GTK_WIDGET(win)), gtk_widget_get_width(chart),
                 gtk_widget_get_height(chart));
  /* The default size counts the client-side shadow, a few pixels a side. */
  g_assert_cmpint(ABS(gtk_widget_get_width(GTK_WIDGET(win)) - 800), <=, 20);
  g_assert_cmpint(ABS(gtk_widget_get_height(GTK_WIDGET(win)) - 600), <=, 20);
  g_assert_false(cohort_reflow_box_is_row(cohort_run_page_get_reflow(page)));
  g_assert_cmpint(gtk_widget_get_height(chart), >=, 160);
  g_assert_cmpint(gtk_widget_get_width(chart), >=, 400);

  gtk_window_set_default_size(GTK_WINDOW(win), 1260, 860);
  ui_test_spin(0.5);
  g_test_message("wide: chart %d × %d", gtk_widget_get_width(chart), gtk_widget_get_height(chart));
  g_assert_true(cohort_reflow_box_is_row(cohort_run_page_get_reflow(page)));
  g_assert_cmpint(gtk_widget_get_height(chart), >=, 160);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* A long run's record replays in moments, every point on the chart (lines are taken many per
 * turn of the main loop, not one per redraw). */
static void test_long_replay(void)
{
  g_autofree char *path = g_build_filename(tmp_dir, "long.jsonl", NULL);
  g_autoptr(GString) s =
      g_string_new("{\"event\":\"start\",\"run\":\"long\",\"total_steps\":20000}\n");
  for (int i = 1; i <= 20000; i++)
    g_string_append_printf(s,
                           "{\"event\":\"step\",\"time\":%d,\"step\":%d,\"total_steps\":20000,"
                           "\"loss\":%.6f,\"lr\":0.001,\"tokens_per_s\":5000,\"elapsed_s\":%d}\n",
                           i, i, 5.0 / (1 + i / 1000.0), i);
  g_string_append(s, "{\"event\":\"done\",\"status\":\"completed\",\"step\":20000}\n");
  g_assert_true(g_file_set_contents(path, s->str, (gssize)s->len, NULL));
  CohortWindow *win = cohort_window_new(NULL);
  cohort_window_show_page(win, "run");
  gtk_window_present(GTK_WINDOW(win));
  gint64 t0 = g_get_monotonic_time();
  cohort_window_replay(win, path);
  g_assert_true(ui_test_wait(run_finished, cohort_window_get_run(win), 60));
  double seconds = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("20000 steps replayed in %.2f s", seconds);
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_cmpuint(cohort_run_page_count_points(page, FALSE), ==, 20000);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "step"), ==, "20000 of 20000");
  /* Lines are taken many per turn of the main loop (one per turn, each with a redraw, took
   * over 20 s here; many per turn, under one). */
  guint turns = cohort_run_get_read_turns(cohort_window_get_run(win));
  g_test_message("in %u turns of the main loop", turns);
  g_assert_cmpuint(turns, <, 20000 / 50);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Replays `events` (JSON lines) in a new window; the run's summary. */
static char *replay_summary(const char *name, const char *events, CohortWindow **out)
{
  g_autofree char *path = g_build_filename(tmp_dir, name, NULL);
  g_assert_true(g_file_set_contents(path, events, -1, NULL));
  CohortWindow *win = cohort_window_new(NULL);
  cohort_window_replay(win, path);
  g_assert_true(ui_test_wait(run_finished, cohort_window_get_run(win), 10));
  *out = win;
  return g_strdup(cohort_run_get_summary(cohort_window_get_run(win)));
}

/* A stopped run names the checkpoint a Resume continues from (the checkpoint event's, or the one
 * it resumed from when it stopped before a step), and shows no time left. */
static void test_stopped_run(void)
{
  CohortWindow *win = NULL;
  g_autofree char *saved = replay_summary(
      "stopped.jsonl",
      "{\"event\":\"start\",\"run\":\"s\",\"total_steps\":200,\"start_step\":0}\n"
      "{\"event\":\"step\",\"step\":12,\"total_steps\":200,\"loss\":3.5,\"eta_s\":95}\n"
      "{\"event\":\"checkpoint\",\"step\":12,\"path\":\"runs/s/checkpoints/step-00000012\"}\n"
      "{\"event\":\"done\",\"status\":\"stopped\",\"step\":12}\n",
      &win);
  g_test_message("%s", saved);
  g_assert_cmpstr(saved, ==,
                  "Stopped at step 12; its checkpoint: runs/s/checkpoints/step-00000012");
  CohortRunPage *page = cohort_window_get_run_page(win);
  g_assert_cmpstr(cohort_run_page_get_figure(page, "eta"), ==, "–");
  g_assert_cmpstr(cohort_run_page_get_figure(page, "step"), ==, "12 of 200");
  gtk_window_destroy(GTK_WINDOW(win));

  g_autofree char *resumed =
      replay_summary("resumed.jsonl",
                     "{\"event\":\"start\",\"run\":\"s\",\"total_steps\":200,\"start_step\":12,"
                     "\"resumed_from\":\"runs/s/checkpoints/step-00000012\"}\n"
                     "{\"event\":\"done\",\"status\":\"stopped\",\"step\":12}\n",
                     &win);
  g_assert_cmpstr(resumed, ==,
                  "Stopped at step 12; its checkpoint: runs/s/checkpoints/step-00000012");
  gtk_window_destroy(GTK_WINDOW(win));

  g_autofree char *early =
      replay_summary("early.jsonl",
                     "{\"event\":\"start\",\"run\":\"s\",\"total_steps\":200,\"start_step\":0}\n"
                     "{\"event\":\"done\",\"status\":\"stopped\",\"step\":0}\n",
                     &win);
  g_assert_cmpstr(early, ==, "Stopped at step 0, before the first step: no checkpoint was saved");
  gtk_window_destroy(GTK_WINDOW(win));

  /* A completed run keeps its 0 s left. */
  g_autofree char *completed = replay_summary(
      "completed.jsonl",
      "{\"event\":\"start\",\"run\":\"s\",\"total_steps\":2,\"start_step\":0}\n"
      "{\"event\":\"step\",\"step\":2,\"total_steps\":2,\"loss\":3.5,\"eta_s\":0.4}\n"
      "{\"event\":\"done\",\"status\":\"completed\",\"step\":2,\"elapsed_s\":3}\n",
      &win);
  g_assert_cmpstr(cohort_run_page_get_figure(cohort_window_get_run_page(win), "eta"), ==, "0 s");
  gtk_window_destroy(GTK_WINDOW(win));
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/runview/history-two-runs", test_history_two_runs);
  g_test_add_func("/ui/runview/overlay-limit", test_overlay_limit);
  g_test_add_func("/ui/runview/chart", test_chart);
  g_test_add_func("/ui/runview/ranks-table", test_ranks_table);
  g_test_add_func("/ui/runview/hang-and-health", test_hang_and_health);
  g_test_add_func("/ui/runview/text-samples", test_text_samples);
  g_test_add_func("/ui/runview/final-phase", test_final_phase);
  g_test_add_func("/ui/runview/latent-caching", test_latent_caching);
  g_test_add_func("/ui/runview/narrow-layout", test_narrow_layout);
  g_test_add_func("/ui/runview/long-replay", test_long_replay);
  g_test_add_func("/ui/runview/stopped-run", test_stopped_run);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
