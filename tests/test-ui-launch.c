/* One launch plan, four views of it: for a table of configs (one and two nodes, spawn mode and
 * cohort-run, lr_scaling none, linear and sqrt, and combinations that cannot run), the window's
 * summary, the command line the window's Start runs, `cohort-train --explain` and `cohort-run
 * --print-commands` agree on the world size, the global batch, the learning rate and the
 * command line, and refuse the same configs. And the Multi-node dialog: its commands follow
 * the settings as they change, an edit clears the connection test's result, Export writes the
 * run.json the commands name and the hostfile, and from a build tree the programs are named by
 * absolute paths. */
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/multinode-dialog-private.h"
#include "ui/probe-view.h"
#include "ui/programs.h"
#include "ui/window-private.h"

static char *tmp_dir;

/* The number after `label` in `text` (as a double), or NaN when `label` is missing. */
static double number_after(const char *text, const char *label)
{
  const char *p = strstr(text, label);
  return p != NULL ? g_ascii_strtod(p + strlen(label), NULL) : NAN;
}

typedef struct {
  double world, global_batch, lr;
} Numbers;

/* World size, global batch and learning rate after scaling, from a summary line. */
static Numbers numbers_of(const char *line)
{
  return (Numbers){number_after(line, "world size "), number_after(line, "global batch "),
                   number_after(line, "→ ")};
}

/* A command line as words with the programs by name, without what only the window passes
 * (--progress-fd N, --control-fd N, --quiet) and the VAR=value words a shell command starts
 * with. */
static char *normalize(char **argv)
{
  g_autoptr(GString) s = g_string_new(NULL);
  gboolean leading = TRUE;
  for (guint i = 0; argv[i] != NULL; i++) {
    if (leading && strchr(argv[i], '=') != NULL && argv[i][0] != '-')
      continue;
    leading = FALSE;
    /* The window's session options: its descriptors and --quiet (its log shows the events). */
    if (g_str_equal(argv[i], "--progress-fd") || g_str_equal(argv[i], "--control-fd")) {
      i++;
      continue;
    }
    if (g_str_equal(argv[i], "--quiet"))
      continue;
    g_autofree char *base = g_path_get_basename(argv[i]);
    gboolean program = g_str_equal(base, "cohort-train") || g_str_equal(base, "cohort-run");
    g_string_append_printf(s, "%s%s", s->len ? " " : "", program ? base : argv[i]);
  }
  return g_string_free(g_steal_pointer(&s), FALSE);
}

static char *program(const char *name)
{
  g_autoptr(GError) error = NULL;
  /* The real programs of this build, whatever the fake ones of Start are. */
  g_autofree char *var = g_strdup(g_getenv("COHORT_TRAIN_PROGRAM"));
  g_autofree char *var2 = g_strdup(g_getenv("COHORT_RUN_PROGRAM"));
  g_unsetenv("COHORT_TRAIN_PROGRAM");
  g_unsetenv("COHORT_RUN_PROGRAM");
  char *path = cohort_ui_find_program(name, &error);
  g_assert_no_error(error);
  if (var)
    g_setenv("COHORT_TRAIN_PROGRAM", var, TRUE);
  if (var2)
    g_setenv("COHORT_RUN_PROGRAM", var2, TRUE);
  return path;
}

/* Runs argv; returns the exit status, with stdout and stderr. */
static int run_sync(const char *const *argv, char **out, char **err)
{
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, out, err,
                             &status, &error));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* What --print-commands prints for this machine's own command: the cohort-run command of
 * node `node` for a cohort-run plan, else the cohort-train one. */
static char *printed_command(const char *text, const char *launcher, int node)
{
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_autofree char *title = g_strdup_printf("# %s", launcher);
  gboolean in = FALSE;
  int seen = 0;
  for (guint i = 0; lines[i] != NULL; i++) {
    /* A section's title follows a blank line; its notes follow the title. */
    if (g_str_has_prefix(lines[i], "# ") && (i == 0 || lines[i - 1][0] == '\0')) {
      in = g_str_has_prefix(lines[i], title) && lines[i][strlen(title)] != '-';
      continue;
    }
    if (in && lines[i][0] != '\0' && lines[i][0] != '#' && seen++ == node)
      return g_strdup(lines[i]);
  }
  return NULL;
}

typedef struct {
  const char *sets[8];
  const char *refused; /* NULL: runs; else words every view's refusal holds */
} Row;

static void set_all(CohortConfig *cfg, const char *const *sets, const char *ws)
{
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "row", &error));
  g_assert_no_error(error);
  const char *mine[] = {"batch_size=4", "max_steps=5", "warmup_steps=1", NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, mine, "row", &error));
  g_free(cfg->workspace_dir);
  cfg->workspace_dir = g_strdup(ws);
}

static gboolean run_ended(gpointer data)
{
  return !cohort_run_is_running(data);
}

/* The command line Start runs, as the fake programs recorded it. */
static char *start_argv(CohortWindow *win, const char *record)
{
  g_unlink(record);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_start(win, &error));
  g_assert_no_error(error);
  g_assert_true(ui_test_wait(run_ended, cohort_window_get_run(win), 20));
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(record, &text, NULL, NULL));
  g_auto(GStrv) words = g_strsplit(text, "\n", -1);
  guint n = g_strv_length(words);
  if (n > 0 && words[n - 1][0] == '\0')
    g_clear_pointer(&words[n - 1], g_free);
  return normalize(words);
}

static void check_row(CohortWindow *win, const Row *row, guint index, const char *record)
{
  g_autofree char *ws = g_strdup_printf("%s/row-%u", tmp_dir, index);
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  set_all(cfg, row->sets, ws);
  cohort_config_form_set_config(cohort_window_get_form(win), cfg);
  g_autofree char *config = g_build_filename(ws, "run.json", NULL);
  g_mkdir_with_parents(ws, 0755);
  g_assert_true(cohort_config_save_file(cfg, config, NULL));
  int node = cfg->node_rank;

  g_autofree char *train = program("cohort-train");
  g_autofree char *runner = program("cohort-run");
  const char *explain[] = {train, "--config", config, "--explain", NULL};
  const char *print[] = {runner, "--print-commands", "--config", config, NULL};
  g_autofree char *ex_out = NULL, *ex_err = NULL, *pr_out = NULL, *pr_err = NULL;
  int ex = run_sync(explain, &ex_out, &ex_err);
  int pr = run_sync(print, &pr_out, &pr_err);
  const char *summary = cohort_window_get_summary(win);
  g_test_message("row %u: %s", index, summary);

  if (row->refused != NULL) {
    const char *status = cohort_window_get_status(win);
    g_test_message("refused: window: %s; explain: %s; print: %s", status, ex_err, pr_err);
    g_assert_false(cohort_window_can_start(win));
    g_assert_cmpint(ex, !=, 0);
    g_assert_cmpint(pr, !=, 0);
    g_auto(GStrv) words = g_strsplit(row->refused, "|", -1);
    for (guint w = 0; words[w]; w++) {
      g_assert_nonnull(strstr(status, words[w]));
      g_assert_nonnull(strstr(ex_err, words[w]));
      g_assert_nonnull(strstr(pr_err, words[w]));
    }
    return;
  }
  g_assert_cmpint(ex, ==, 0);
  g_assert_cmpint(pr, ==, 0);
  g_autoptr(JsonNode) root = json_from_string(ex_out, NULL);
  JsonObject *o = json_node_get_object(root);
  JsonObject *launch = json_object_get_object_member(o, "launch");
  g_auto(GStrv) plan_line = g_strsplit(pr_out, "\n", 2);
  g_test_message("print-commands: %s", plan_line[0]);

  /* The numbers. */
  Numbers w = numbers_of(summary), p = numbers_of(plan_line[0]);
  Numbers e = {json_object_get_int_member(o, "world_size"),
               json_object_get_int_member(o, "global_batch"),
               json_object_get_double_member(o, "scaled_learning_rate")};
  g_assert_cmpfloat(w.world, ==, e.world);
  g_assert_cmpfloat(p.world, ==, e.world);
  g_assert_cmpfloat(w.global_batch, ==, e.global_batch);
  g_assert_cmpfloat(p.global_batch, ==, e.global_batch);
  g_assert_cmpfloat_with_epsilon(w.lr, e.lr, 1e-5 * e.lr);
  g_assert_cmpfloat_with_epsilon(p.lr, e.lr, 1e-5 * e.lr);

  /* The command lines. */
  g_autofree char *started = start_argv(win, record);
  JsonArray *ea = json_object_get_array_member(launch, "argv");
  g_autoptr(GPtrArray) words = g_ptr_array_new();
  for (guint i = 0; i < json_array_get_length(ea); i++)
    g_ptr_array_add(words, (gpointer)json_array_get_string_element(ea, i));
  g_ptr_array_add(words, NULL);
  g_autofree char *explained = normalize((char **)words->pdata);
  const char *kind = json_object_get_string_member(launch, "kind");
  g_autofree char *line =
      printed_command(pr_out, g_str_equal(kind, "cohort-run") ? "cohort-run" : "cohort-train",
                      g_str_equal(kind, "cohort-run") ? node : 0);
  g_assert_nonnull(line);
  g_auto(GStrv) printed_words = NULL;
  g_assert_true(g_shell_parse_argv(line, NULL, &printed_words, NULL));
  g_autofree char *printed = normalize(printed_words);
  g_test_message("Start:   %s\nexplain: %s\nprinted: %s", started, explained, printed);
  g_assert_cmpstr(started, ==, explained);
  g_assert_cmpstr(printed, ==, explained);
}

static void test_agree(void)
{
  /* Fake programs record what Start runs; explain and print-commands run the real ones. */
  g_autofree char *bin = g_build_filename(tmp_dir, "bin", NULL);
  g_autofree char *record = g_build_filename(tmp_dir, "argv.txt", NULL);
  g_mkdir_with_parents(bin, 0755);
  g_autofree char *recorder = g_test_build_filename(G_TEST_DIST, "ui", "record-argv.sh", NULL);
  g_autofree char *fake_train = g_build_filename(bin, "cohort-train", NULL);
  g_autofree char *fake_run = g_build_filename(bin, "cohort-run", NULL);
  g_assert_cmpint(symlink(recorder, fake_train), ==, 0);
  g_assert_cmpint(symlink(recorder, fake_run), ==, 0);
  g_setenv("COHORT_ARGV_OUT", record, TRUE);
  /* No GPUs anywhere, as the machines here have none: every view counts the same. */
  g_setenv("COHORT_NVIDIA_SMI", "/nonexistent/nvidia-smi", TRUE);

  static const Row rows[] = {
      {{"lr_scaling=linear", NULL}, NULL},
      {{"enable_multi_gpu=true", "use_torchrun=false", "nproc_per_node=2", "lr_scaling=linear",
        NULL},
       NULL},
      {{"enable_multi_gpu=true", "nproc_per_node=2", "lr_scaling=sqrt", "max_restarts=1", NULL},
       NULL},
      {{"enable_multi_gpu=true", "nproc_per_node=2", "num_nodes=2", "node_rank=1",
        "master_addr=10.0.0.1", "master_port=29700", "lr_scaling=linear", NULL},
       NULL},
      {{"enable_multi_gpu=true", "nproc_per_node=1", "num_nodes=2", "master_addr=10.0.0.1",
        "lr_scaling=none", NULL},
       NULL},
      {{"enable_multi_gpu=true", "use_torchrun=false", "nproc_per_node=2", "num_nodes=2",
        "master_addr=10.0.0.1", NULL},
       "key \"use_torchrun\"|spawn mode"},
      {{"enable_multi_gpu=true", "nproc_per_node=2", "device_indexes=0", NULL},
       "\"device_indexes\" lists 1 GPU"},
      {{"num_nodes=2", "master_addr=10.0.0.1", NULL}, "needs \"enable_multi_gpu\""},
  };
  CohortWindow *win = cohort_window_new(NULL);
  /* After the window's GPU detection, so its count is settled (0). */
  ui_test_spin(0.5);
  g_setenv("COHORT_TRAIN_PROGRAM", fake_train, TRUE);
  g_setenv("COHORT_RUN_PROGRAM", fake_run, TRUE);
  for (guint i = 0; i < G_N_ELEMENTS(rows); i++)
    check_row(win, &rows[i], i, record);
  gtk_window_destroy(GTK_WINDOW(win));
  g_unsetenv("COHORT_TRAIN_PROGRAM");
  g_unsetenv("COHORT_RUN_PROGRAM");
  g_unsetenv("COHORT_NVIDIA_SMI");
}

static void set(CohortConfigForm *form, const char *key, const char *value)
{
  if (!cohort_config_form_set_text(form, key, value))
    g_error("%s=%s: %s", key, value, cohort_config_form_get_error(form, key));
}

static gboolean test_done(gpointer data)
{
  const char *t = cohort_multinode_dialog_get_test_result(data);
  return *t != '\0' && !g_str_equal(t, "Testing…");
}

static void test_dialog(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  CohortMultinodeDialog *dlg = cohort_window_get_multinode_dialog(win);
  g_autofree char *ws = g_build_filename(tmp_dir, "job", NULL);
  set(form, "workspace_dir", ws);
  set(form, "enable_multi_gpu", "true");
  set(form, "nproc_per_node", "2");
  set(form, "master_addr", "10.1.2.3");
  set(form, "num_nodes", "2");
  set(form, "master_port", "29650");

  /* The commands are there without a button, and name the workspace's run.json and the
   * programs of this build tree by absolute paths. */
  g_autofree char *config = g_build_filename(ws, "run.json", NULL);
  g_autofree char *train = cohort_ui_find_program("cohort-train", NULL);
  const char *cmd = cohort_multinode_dialog_get_command(dlg, "cohort-run", 1);
  g_assert_nonnull(cmd);
  g_test_message("%s", cmd);
  g_assert_true(g_path_is_absolute(train));
  g_assert_nonnull(strstr(cmd, config));
  g_assert_nonnull(strstr(cmd, train));
  g_assert_nonnull(strstr(cmd, "/engine/cli/cohort-run "));
  g_assert_nonnull(strstr(cmd, "--master-port 29650"));

  /* An edit regenerates them and clears the last connection test. */
  set(form, "master_addr", "127.0.0.1");
  set(form, "master_port", "1");
  cohort_multinode_dialog_test_connection(dlg);
  g_assert_true(ui_test_wait(test_done, dlg, 10));
  g_assert_cmpstr(cohort_multinode_dialog_get_test_result(dlg), !=, "");
  set(form, "master_addr", "10.9.8.7");
  g_assert_cmpstr(cohort_multinode_dialog_get_test_result(dlg), ==, "");
  set(form, "master_port", "29651");
  cmd = cohort_multinode_dialog_get_command(dlg, "cohort-run", 0);
  g_assert_nonnull(strstr(cmd, "--master-addr 10.9.8.7 --master-port 29651"));
  /* What cannot run shows why, and there are no commands to copy. */
  set(form, "use_torchrun", "false");
  g_assert_null(cohort_multinode_dialog_get_command(dlg, "cohort-run", 0));
  set(form, "use_torchrun", "true");
  g_assert_nonnull(cohort_multinode_dialog_get_command(dlg, "cohort-run", 0));

  /* Export: the run.json the commands name, and the hostfile they write and name. */
  set(form, "node_hosts", "gpu-a,gpu-b");
  const char *mpi = cohort_multinode_dialog_get_command(dlg, "mpirun", 0);
  g_autofree char *hostfile = g_build_filename(ws, "hostfile", NULL);
  g_assert_nonnull(strstr(mpi, hostfile));
  g_assert_false(g_file_test(config, G_FILE_TEST_EXISTS));
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_multinode_dialog_export(dlg, &error));
  g_assert_no_error(error);
  g_assert_nonnull(strstr(cohort_multinode_dialog_get_export_result(dlg), config));
  g_autoptr(CohortConfig) saved = cohort_config_load_file(config, &error);
  g_assert_no_error(error);
  g_auto(GStrv) diff = cohort_config_diff(saved, cohort_config_form_get_config(form));
  g_assert_cmpuint(g_strv_length(diff), ==, 0);
  g_autofree char *hosts = NULL;
  g_assert_true(g_file_get_contents(hostfile, &hosts, NULL, NULL));
  g_assert_cmpstr(hosts, ==, "gpu-a slots=2\ngpu-b slots=2\n");
  set(form, "max_restarts", "1");
  g_assert_cmpstr(cohort_multinode_dialog_get_export_result(dlg), ==, "");
  gtk_window_destroy(GTK_WINDOW(win));
}

static gboolean probe_ended(gpointer data)
{
  return !cohort_probe_view_is_running(data);
}

/* The Distributed page's Test connection runs the probe with the processes Start would start,
 * and shows its forecast. */
static void test_probe(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_autofree char *ws = g_build_filename(tmp_dir, "probe", NULL);
  set(form, "workspace_dir", ws);
  const char *small[][2] = {{"n_layer", "2"},
                            {"n_head", "2"},
                            {"n_embd", "32"},
                            {"seq_len", "32"},
                            {"batch_size", "4"},
                            {"threads", "1"},
                            {"device", "cpu"},
                            {"enable_multi_gpu", "true"},
                            {"nproc_per_node", "2"},
                            {"distributed_backend", "gloo"},
                            /* The last window's config comes back: one node, here. */
                            {"num_nodes", "1"},
                            {"node_rank", "0"},
                            {"master_addr", "127.0.0.1"},
                            {"max_restarts", "0"},
                            {"timeout_s", "60"}};
  for (guint i = 0; i < G_N_ELEMENTS(small); i++)
    set(form, small[i][0], small[i][1]);
  CohortProbeView *probe = COHORT_PROBE_VIEW(cohort_window_get_probe_view(win));
  g_assert_true(gtk_widget_is_ancestor(GTK_WIDGET(probe), cohort_window_get_dist_top(win)));
  g_auto(GStrv) argv = cohort_window_probe_argv(win, NULL);
  g_autofree char *joined = g_strjoinv(" ", argv);
  g_test_message("probe: %s", joined);
  cohort_probe_view_start(probe);
  g_assert_true(ui_test_wait(probe_ended, probe, 120));
  g_test_message("status: %s", cohort_probe_view_get_status(probe));
  g_assert_cmpstr(cohort_probe_view_get_status(probe), ==,
                  "Connection tested: every process joined.");
  g_autofree char *result = cohort_probe_view_get_result(probe);
  g_test_message("%s", result);
  g_assert_nonnull(strstr(result, "Measured on 2 processes (1 node, gloo)"));
  /* The contention fitted to the passes timed with the buckets in flight. */
  g_assert_nonnull(strstr(result, "each second of communication during backward delays it "));
  g_assert_nonnull(strstr(result, "Processes\nStep\nThroughput\nEfficiency\nCommunication hidden"
                                  "\n2\n"));
  g_assert_nonnull(strstr(result, "\n8\n"));
  g_assert_nonnull(strstr(result, "tokens/s"));
  g_autofree char *saved = g_build_filename(ws, "probe.json", NULL);
  g_assert_true(g_file_test(saved, G_FILE_TEST_IS_REGULAR));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* The forecast in words people read: a time that rounds to nothing is "< 1 ms", not
 * "0.000 s"; a row without communication worth the word has "nothing to hide", not "0 %". */
static void test_probe_words(void)
{
  const char *event =
      "{\"event\":\"probe\",\"world_size\":2,\"num_nodes\":1,\"backend\":\"gloo\","
      "\"batch_size\":4,\"min_batch_90\":8,"
      "\"measured\":{\"forward_s\":0.0001,\"backward_s\":0.0002,\"optimizer_s\":0.00004},"
      "\"forecast\":[{\"world_size\":2,\"step_s\":0.0009,\"tokens_per_s\":1000,"
      "\"efficiency\":0.9,\"bucket_comm_s\":0.0002,\"hidden\":0},"
      "{\"world_size\":4,\"step_s\":0.25,\"tokens_per_s\":900,\"efficiency\":0.8,"
      "\"bucket_comm_s\":0.01,\"hidden\":0.5},"
      "{\"world_size\":8,\"step_s\":2.5,\"tokens_per_s\":500,\"efficiency\":0.4,"
      "\"bucket_comm_s\":0.3,\"hidden\":0}]}";
  g_autoptr(JsonNode) root = json_from_string(event, NULL);
  g_assert_nonnull(root);
  GtkWidget *view = g_object_ref_sink(cohort_probe_view_new(NULL, NULL));
  cohort_probe_view_show(COHORT_PROBE_VIEW(view), json_node_get_object(root));
  g_autofree char *result = cohort_probe_view_get_result(COHORT_PROBE_VIEW(view));
  g_test_message("%s", result);
  g_assert_nonnull(strstr(result, "forward and backward < 1 ms, optimizer step < 1 ms per step."));
  g_assert_null(strstr(result, "0.000"));
  g_assert_nonnull(strstr(result, "\n2\n0.9 ms\n1000 tokens/s\n90 %\nnothing to hide\n"));
  g_assert_nonnull(strstr(result, "\n4\n250 ms\n900 tokens/s\n80 %\n50 %\n"));
  /* real communication that backward did not hide is 0 %, as it is */
  g_assert_nonnull(strstr(result, "\n8\n2.50 s\n500 tokens/s\n40 %\n0 %\n"));
  g_assert_null(strstr(result, "Every gradient bucket"));
  /* One bucket, final only as backward ends (a small model's): no row has anything to hide. */
  json_object_set_array_member(
      json_object_get_object_member(json_node_get_object(root), "measured"), "buckets",
      json_array_new());
  JsonObject *bucket = json_object_new();
  json_object_set_double_member(bucket, "ready", 0.9999);
  json_array_add_object_element(
      json_object_get_array_member(
          json_object_get_object_member(json_node_get_object(root), "measured"), "buckets"),
      bucket);
  cohort_probe_view_show(COHORT_PROBE_VIEW(view), json_node_get_object(root));
  g_autofree char *one = cohort_probe_view_get_result(COHORT_PROBE_VIEW(view));
  g_test_message("%s", one);
  g_assert_nonnull(strstr(one, "Every gradient bucket is ready only when backward ends, so "
                               "backward has no communication to hide."));
  g_assert_nonnull(strstr(one, "\n8\n2.50 s\n500 tokens/s\n40 %\nnothing to hide\n"));
  g_assert_null(strstr(one, "\n50 %\n"));
  g_object_unref(view);
  g_autofree char *ms = cohort_probe_duration_text(0.0014);
  g_assert_cmpstr(ms, ==, "1.4 ms");
  g_autofree char *none = cohort_probe_duration_text(0);
  g_assert_cmpstr(none, ==, "< 1 ms");
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/launch/agree", test_agree);
  g_test_add_func("/ui/launch/dialog", test_dialog);
  g_test_add_func("/ui/launch/probe", test_probe);
  g_test_add_func("/ui/launch/probe-words", test_probe_words);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
