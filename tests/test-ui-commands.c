/* The Distributed page and the Multi-node settings dialog: launch commands for 2 nodes × 4
 * GPUs, the command line the window starts, GPU detection, the memory plan (and a plan that does
 * not fit), and the connection test. */
#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/dist-page-private.h"
#include "ui/multinode-dialog-private.h"
#include "ui/programs.h"
#include "ui/window-private.h"

static char *tmp_dir;

static void set(CohortConfigForm *form, const char *key, const char *value)
{
  if (!cohort_config_form_set_text(form, key, value))
    g_error("%s=%s: %s", key, value, cohort_config_form_get_error(form, key));
}

static guint count_class(GtkWidget *w, const char *css_class)
{
  guint n = gtk_widget_has_css_class(w, css_class);
  for (GtkWidget *c = gtk_widget_get_first_child(w); c != NULL; c = gtk_widget_get_next_sibling(c))
    n += count_class(c, css_class);
  return n;
}

static void test_two_nodes_four_gpus(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  CohortMultinodeDialog *dlg = cohort_window_get_multinode_dialog(win);
  set(form, "enable_multi_gpu", "true");
  set(form, "nproc_per_node", "4");
  set(form, "num_nodes", "2");
  set(form, "node_rank", "1");
  set(form, "master_port", "29600");

  /* The loopback address cannot serve two machines: the engine says so. */
  g_assert_false(cohort_multinode_dialog_generate(dlg));
  g_assert_cmpuint(count_class(GTK_WIDGET(dlg), "error"), >=, 1);

  set(form, "master_addr", "10.1.2.3");
  cohort_multinode_dialog_set_config_path(dlg, "/srv/job/run.json");
  g_assert_true(cohort_multinode_dialog_generate(dlg));
  g_assert_cmpuint(cohort_multinode_dialog_count_commands(dlg, "cohort-run"), ==, 2);
  g_assert_cmpuint(cohort_multinode_dialog_count_commands(dlg, "torchrun"), ==, 2);
  g_assert_cmpuint(cohort_multinode_dialog_count_commands(dlg, "srun"), ==, 1);
  g_assert_cmpuint(cohort_multinode_dialog_count_commands(dlg, "sbatch"), ==, 1);
  g_assert_cmpuint(cohort_multinode_dialog_count_commands(dlg, "mpirun"), ==, 1);
  for (guint node = 0; node < 2; node++) {
    const char *cmd = cohort_multinode_dialog_get_command(dlg, "cohort-run", node);
    g_test_message("cohort-run node %u: %s", node, cmd);
    /* After the nodes' shared secret, in the command's environment (test-launcher checks it). */
    g_assert_true(g_str_has_prefix(cmd, "COHORT_JOB_TOKEN=") && strstr(cmd, "/cohort-run --"));
    g_assert_nonnull(strstr(cmd, "10.1.2.3"));
    g_assert_nonnull(strstr(cmd, "29600"));
    g_assert_nonnull(strstr(cmd, "/srv/job/run.json"));
    g_autofree char *rank = g_strdup_printf("--node-rank %u", node);
    g_autofree char *rank_eq = g_strdup_printf("--node_rank=%u", node);
    g_assert_true(strstr(cmd, rank) != NULL || strstr(cmd, rank_eq) != NULL);
    const char *tr = cohort_multinode_dialog_get_command(dlg, "torchrun", node);
    g_test_message("torchrun node %u: %s", node, tr);
    g_assert_nonnull(strstr(tr, "--no_python"));
    g_assert_true(strstr(tr, rank) != NULL || strstr(tr, rank_eq) != NULL);
  }
  const char *sbatch = cohort_multinode_dialog_get_command(dlg, "sbatch", 0);
  g_assert_nonnull(strstr(sbatch, "--nodes=2"));
  g_assert_nonnull(strstr(sbatch, "--ntasks-per-node=4"));
  g_assert_nonnull(strstr(cohort_multinode_dialog_get_command(dlg, "mpirun", 0), "mpirun"));
  /* Every command is shown with a copy button. */
  g_assert_cmpuint(count_class(GTK_WIDGET(dlg), "cohort-command"), ==, 7);
  g_assert_null(cohort_multinode_dialog_get_command(dlg, "cohort-run", 2));

  /* The summary counts 2 nodes × 4 processes. */
  g_assert_nonnull(strstr(cohort_window_get_summary(win), "world size 8"));
  gtk_window_destroy(GTK_WINDOW(win));
}

static gboolean strv_has_pair(GStrv argv, const char *a, const char *b)
{
  for (guint i = 0; argv[i] != NULL && argv[i + 1] != NULL; i++)
    if (g_str_equal(argv[i], a) && (b == NULL || g_str_equal(argv[i + 1], b)))
      return TRUE;
  return FALSE;
}

static void test_launch_argv(void)
{
  g_setenv("COHORT_TRAIN_PROGRAM", "/bin/true", TRUE);
  g_setenv("COHORT_RUN_PROGRAM", "/bin/echo", TRUE);
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;

  g_auto(GStrv) single = cohort_ui_launch_argv(cfg, "/w/run.json", 0, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(single[0], ==, "/bin/true");
  g_assert_true(strv_has_pair(single, "--config", "/w/run.json"));
  g_assert_true(strv_has_pair(single, "--progress-fd", "3"));
  g_assert_false(g_strv_contains((const char *const *)single, "--nproc"));

  g_assert_true(cohort_config_set(cfg, "enable_multi_gpu", "true", "t", NULL));
  g_assert_true(cohort_config_set(cfg, "use_torchrun", "false", "t", NULL));
  g_assert_true(cohort_config_set(cfg, "nproc_per_node", "4", "t", NULL));
  g_auto(GStrv) spawn = cohort_ui_launch_argv(cfg, "/w/run.json", 0, &error);
  g_assert_cmpstr(spawn[0], ==, "/bin/true");
  g_assert_true(strv_has_pair(spawn, "--nproc", "4"));

  g_assert_true(cohort_config_set(cfg, "use_torchrun", "true", "t", NULL));
  g_auto(GStrv) tr = cohort_ui_launch_argv(cfg, "/w/run.json", 0, &error);
  g_assert_cmpstr(tr[0], ==, "/bin/echo");
  g_assert_true(strv_has_pair(tr, "--nproc-per-node", "4"));
  g_assert_true(g_strv_contains((const char *const *)tr, "--standalone"));
  g_assert_true(strv_has_pair(tr, "--progress-fd", "3"));
  g_assert_true(strv_has_pair(tr, "/bin/true", "--config"));

  g_assert_true(cohort_config_set(cfg, "master_addr", "10.0.0.1", "t", NULL));
  g_assert_true(cohort_config_set(cfg, "num_nodes", "2", "t", NULL));
  g_assert_true(cohort_config_set(cfg, "node_rank", "1", "t", NULL));
  g_auto(GStrv) multi = cohort_ui_launch_argv(cfg, "/w/run.json", 0, &error);
  g_assert_true(strv_has_pair(multi, "--nnodes", "2"));
  g_assert_true(strv_has_pair(multi, "--node-rank", "1"));
  g_assert_true(strv_has_pair(multi, "--master-addr", "10.0.0.1"));
  g_assert_false(g_strv_contains((const char *const *)multi, "--standalone"));
  g_autoptr(CohortLaunchPlan) plan = cohort_ui_launch_plan(cfg, 0, &error);
  g_assert_no_error(error);
  g_assert_cmpint(plan->world_size, ==, 8);

  g_setenv("COHORT_TRAIN_PROGRAM", "/nonexistent/cohort-train", TRUE);
  g_assert_null(cohort_ui_launch_argv(cfg, "/w/run.json", 0, &error));
  g_assert_nonnull(strstr(error->message, "COHORT_TRAIN_PROGRAM"));
  g_unsetenv("COHORT_TRAIN_PROGRAM");
  g_unsetenv("COHORT_RUN_PROGRAM");
}

typedef struct {
  CohortWindow *win;
  const char *want;
} GpuWait;

static gboolean gpu_text_has(gpointer data)
{
  GpuWait *w = data;
  return strstr(cohort_dist_page_get_gpu_text(cohort_window_get_dist_top(w->win)), w->want) != NULL;
}

static void test_gpu_detection(void)
{
  g_autofree char *fake = g_test_build_filename(G_TEST_DIST, "ui", "fake-nvidia-smi.sh", NULL);
  g_setenv("COHORT_NVIDIA_SMI", fake, TRUE);
  GpuWait w = {cohort_window_new(NULL), "GPU 1: NVIDIA H100 80GB HBM3, 81559 MiB"};
  g_assert_true(ui_test_wait(gpu_text_has, &w, 10));
  CohortConfigForm *form = cohort_window_get_form(w.win);
  set(form, "enable_multi_gpu", "true");
  set(form, "nproc_per_node", "0");
  set(form, "world_size", "0");
  set(form, "node_rank", "0");
  set(form, "num_nodes", "1");
  /* "auto" processes: one per detected GPU. */
  g_assert_nonnull(strstr(cohort_window_get_summary(w.win), "world size 2"));
  gtk_window_destroy(GTK_WINDOW(w.win));

  g_setenv("COHORT_NVIDIA_SMI", "/nonexistent/nvidia-smi", TRUE);
  GpuWait none = {cohort_window_new(NULL), "No NVIDIA GPU found"};
  g_assert_true(ui_test_wait(gpu_text_has, &none, 10));
  gtk_window_destroy(GTK_WINDOW(none.win));
  g_unsetenv("COHORT_NVIDIA_SMI");
}

typedef struct {
  CohortWindow *win;
  const char *want, *want_too;
} MemoryWait;

static CohortMemoryView *memory_view(CohortWindow *win)
{
  return cohort_dist_page_get_memory_view(cohort_window_get_dist_top(win));
}

/* The plan of the latest settings is shown (not being worked out) and has both texts. */
static gboolean memory_text_has(gpointer data)
{
  MemoryWait *w = data;
  if (cohort_memory_view_is_working(memory_view(w->win)))
    return FALSE;
  const char *t = cohort_dist_page_get_memory_text(cohort_window_get_dist_top(w->win));
  return strstr(t, w->want) != NULL && (!w->want_too || strstr(t, w->want_too) != NULL);
}

static void wait_memory(MemoryWait *w)
{
  if (!ui_test_wait(memory_text_has, w, 30))
    g_error("the memory plan never showed \"%s\" and \"%s\":\n%s", w->want,
            w->want_too ? w->want_too : "",
            cohort_dist_page_get_memory_text(cohort_window_get_dist_top(w->win)));
  g_test_message("%s", cohort_dist_page_get_memory_text(cohort_window_get_dist_top(w->win)));
}

static gboolean unmapped(gpointer widget)
{
  return !gtk_widget_get_mapped(widget);
}

/* The memory view's height at the page's width. */
static int memory_height(CohortWindow *win)
{
  int min = 0, nat = 0;
  gtk_widget_measure(GTK_WIDGET(memory_view(win)), GTK_ORIENTATION_VERTICAL, 560, &min, &nat, NULL,
                     NULL);
  return nat;
}

/* The Distributed page shows the engine's memory plan for the settings, and says when Start
 * will be refused: the same numbers as cohort-train --explain. It follows every edit: an edit
 * marks the plan shown as being worked out at once, in view or not; a burst of edits asks the
 * engine once; and the page does not move under the pointer: the plan is as high in every
 * state (being worked out, fits, does not fit, no plan). */
static void test_memory_plan(void)
{
  MemoryWait w = {cohort_window_new(NULL), "Memory per process at ZeRO stage 0", "MiB"};
  cohort_window_show_page(w.win, "distributed");
  gtk_window_present(GTK_WINDOW(w.win));
  CohortConfigForm *form = cohort_window_get_form(w.win);
  set(form, "device", "cpu");
  set(form, "enable_multi_gpu", "true");
  set(form, "nproc_per_node", "2");
  set(form, "zero_stage", "0");
  g_assert_true(cohort_memory_view_is_working(memory_view(w.win)));
  w.want_too = "This machine 2 processes: ";
  wait_memory(&w);
  const char *text = cohort_dist_page_get_memory_text(cohort_window_get_dist_top(w.win));
  g_assert_nonnull(strstr(text, "\nFits in this machine's memory."));
  /* A small model's figures in MiB, not 0.00 GiB. */
  g_assert_null(strstr(text, "0.00 GiB"));
  int height = memory_height(w.win);
  g_assert_cmpint(height, >, 0);

  /* An edit away from the page marks the plan as not current (no engine process is started
   * for a page nobody sees); back on the page, the plan of the settings is worked out. */
  cohort_window_show_page(w.win, "model");
  g_assert_true(ui_test_wait(unmapped, memory_view(w.win), 10));
  guint before = cohort_memory_view_count_asked(memory_view(w.win));
  set(form, "zero_stage", "3");
  g_assert_true(cohort_memory_view_is_working(memory_view(w.win)));
  g_assert_cmpint(memory_height(w.win), ==, height);
  ui_test_spin(0.6);
  g_assert_cmpuint(cohort_memory_view_count_asked(memory_view(w.win)), ==, before);
  g_assert_true(cohort_memory_view_is_working(memory_view(w.win)));
  cohort_window_show_page(w.win, "distributed");
  w.want = "Memory per process at ZeRO stage 3";
  w.want_too = "Working set ";
  wait_memory(&w);
  g_assert_cmpuint(cohort_memory_view_count_asked(memory_view(w.win)), ==, before + 1);

  /* Five edits in a row: one engine process for the last. */
  guint asked = cohort_memory_view_count_asked(memory_view(w.win));
  const char *batches[] = {"5", "6", "7", "8", "9"};
  for (guint i = 0; i < G_N_ELEMENTS(batches); i++)
    set(form, "batch_size", batches[i]);
  wait_memory(&w);
  g_assert_cmpuint(cohort_memory_view_count_asked(memory_view(w.win)), ==, asked + 1);

  /* A model no machine here holds on 2 processes at stage 0. */
  set(form, "n_layer", "64");
  set(form, "n_embd", "8192");
  set(form, "n_head", "32");
  set(form, "zero_stage", "0");
  w.want = "Does not fit: Start will be refused.";
  w.want_too = "Memory per process at ZeRO stage 0";
  wait_memory(&w);
  g_assert_cmpint(memory_height(w.win), ==, height);

  /* Settings the engine refuses to plan: the reason, in the same place. */
  g_autofree char *missing = g_build_filename(tmp_dir, "no-such-data.txt", NULL);
  set(form, "train_data", missing);
  w.want = "No memory plan: ";
  w.want_too = "no-such-data.txt";
  wait_memory(&w);
  g_assert_cmpint(memory_height(w.win), ==, height);
  gtk_window_destroy(GTK_WINDOW(w.win));
}

static gboolean test_done(gpointer data)
{
  const char *t = cohort_multinode_dialog_get_test_result(data);
  return *t != '\0' && !g_str_equal(t, "Testing…");
}

static guint16 free_port(void)
{
  g_autoptr(GSocketListener) l = g_socket_listener_new();
  guint16 port = g_socket_listener_add_any_inet_port(l, NULL, NULL);
  g_socket_listener_close(l);
  return port;
}

static void test_connection(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  CohortMultinodeDialog *dlg = cohort_window_get_multinode_dialog(win);
  set(form, "master_addr", "127.0.0.1");
  g_autofree char *port = g_strdup_printf("%u", free_port());
  set(form, "master_port", port);
  cohort_multinode_dialog_test_connection(dlg);
  g_assert_true(ui_test_wait(test_done, dlg, 10));
  g_test_message("free: %s", cohort_multinode_dialog_get_test_result(dlg));
  g_assert_nonnull(strstr(cohort_multinode_dialog_get_test_result(dlg), "is free"));

  g_autoptr(GSocketService) service = g_socket_service_new();
  guint16 listening = g_socket_listener_add_any_inet_port(G_SOCKET_LISTENER(service), NULL, NULL);
  g_assert_cmpuint(listening, >, 0);
  g_socket_service_start(service);
  g_autofree char *lport = g_strdup_printf("%u", listening);
  set(form, "master_port", lport);
  cohort_multinode_dialog_test_connection(dlg);
  g_assert_true(ui_test_wait(test_done, dlg, 10));
  g_test_message("listening: %s", cohort_multinode_dialog_get_test_result(dlg));
  g_assert_nonnull(strstr(cohort_multinode_dialog_get_test_result(dlg), "is reachable"));
  g_socket_service_stop(service);

  set(form, "master_addr", "no-such-host.invalid");
  cohort_multinode_dialog_test_connection(dlg);
  g_assert_true(ui_test_wait(test_done, dlg, 20));
  g_test_message("unknown: %s", cohort_multinode_dialog_get_test_result(dlg));
  g_assert_nonnull(strstr(cohort_multinode_dialog_get_test_result(dlg), "does not resolve"));
  gtk_window_destroy(GTK_WINDOW(win));
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/commands/two-nodes-four-gpus", test_two_nodes_four_gpus);
  g_test_add_func("/ui/commands/launch-argv", test_launch_argv);
  g_test_add_func("/ui/commands/gpu-detection", test_gpu_detection);
  g_test_add_func("/ui/commands/memory-plan", test_memory_plan);
  g_test_add_func("/ui/commands/connection-test", test_connection);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
