/* Running cohort-train and its launchers from data-parallel tests (header-only, tests only):
 * a test defines DDP_BASE_SETS (the --set values every run gets, NULL-ended) and includes
 * this. train_weights() runs 1 or N ranks and returns the final weights. */
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gio/gio.h>

#include "test-util.h"

#ifndef DDP_BASE_SETS
#error "define DDP_BASE_SETS before including ddp-run.h"
#endif

/* Children die with the test, even when an assertion aborts it mid-run. */
static void die_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static const char *program(const char *var)
{
  const char *p = g_getenv(var);
  g_assert_nonnull(p);
  return p;
}

/* The --set arguments for base_sets, `workspace` and `extra` ("key=value", NULL-ended). */
static void add_sets(GPtrArray *argv, const char *workspace, const char *const *extra)
{
  for (guint i = 0; DDP_BASE_SETS[i]; i++) {
    g_ptr_array_add(argv, g_strdup("--set"));
    g_ptr_array_add(argv, g_strdup(DDP_BASE_SETS[i]));
  }
  for (guint i = 0; extra && extra[i]; i++) {
    g_ptr_array_add(argv, g_strdup("--set"));
    g_ptr_array_add(argv, g_strdup(extra[i]));
  }
  g_ptr_array_add(argv, g_strdup("--set"));
  g_ptr_array_add(argv, g_strdup_printf("workspace_dir=%s", workspace));
}

typedef struct {
  int status;
  char *err;
} Result;

/* Runs argv (NULL-ended GPtrArray of strings) to the end; progress to `events` when given. */
static Result run(GPtrArray *argv, const char *events, const char *const *env)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, die_with_parent, NULL, NULL);
  for (guint i = 0; env && env[i]; i += 2)
    g_subprocess_launcher_setenv(l, env[i], env[i + 1], TRUE);
  if (events) {
    int fd = open(events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_subprocess_launcher_take_fd(l, fd, 3);
  }
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) p =
      g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  Result r = {0};
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, &r.err, &error);
  g_assert_no_error(error);
  r.status = g_subprocess_get_if_signaled(p) ? 128 + g_subprocess_get_term_sig(p)
                                             : g_subprocess_get_exit_status(p);
  if (r.status != 0)
    g_test_message("exit %d, stderr:\n%s", r.status, r.err);
  return r;
}

/* cohort-train with nproc ranks (spawn mode when > 1); returns the final weights and, when
 * `losses` is given, the loss of every step (from the progress events). */
static GArray *train_run(int nproc, const char *const *extra, const char *name, GArray **losses)
{
  g_autofree char *ws = tu_mkdtemp(name);
  g_autofree char *events = losses ? g_build_filename(ws, "progress.jsonl", NULL) : NULL;
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  if (events)
    g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  if (nproc > 1) {
    g_ptr_array_add(argv, g_strdup("--nproc"));
    g_ptr_array_add(argv, g_strdup_printf("%d", nproc));
  }
  add_sets(argv, ws, extra);
  Result r = run(argv, events, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  if (losses) {
    g_autoptr(GPtrArray) ev = tu_read_events(events);
    *losses = tu_event_values(ev, "step", "loss");
  }
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  GArray *w = tu_read_weights(path);
  tu_rm_rf(ws);
  return w;
}

G_GNUC_UNUSED static GArray *train_weights(int nproc, const char *const *extra, const char *name)
{
  return train_run(nproc, extra, name, NULL);
}

/* cohort-train with `nproc` ranks (spawn mode when > 1) in workspace `ws`, from checkpoint
 * `resume` when given ("auto" or a folder); fails the test unless it succeeds; its progress
 * events. */
G_GNUC_UNUSED static GPtrArray *ddp_train_events(const char *ws, int nproc,
                                                 const char *const *extra, const char *resume)
{
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  if (resume) {
    g_ptr_array_add(argv, g_strdup("--resume"));
    g_ptr_array_add(argv, g_strdup(resume));
  }
  if (nproc > 1) {
    g_ptr_array_add(argv, g_strdup("--nproc"));
    g_ptr_array_add(argv, g_strdup_printf("%d", nproc));
  }
  add_sets(argv, ws, extra);
  Result r = run(argv, events, NULL);
  if (r.status != 0)
    g_error("cohort-train failed: %s", r.err);
  g_free(r.err);
  return tu_read_events(events);
}

/* The bytes of file `rel` in workspace `ws` with an export's run id blanked: two runs'
 * exports compared byte for byte are two runs. */
G_GNUC_UNUSED static GBytes *ddp_export_bytes(const char *ws, const char *rel)
{
  g_autofree char *path = g_build_filename(ws, rel, NULL);
  char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &data, &len, NULL));
  const char key[] = "\"cohort.run_id\":\"";
  char *at = memmem(data, MIN(len, 4096), key, sizeof key - 1);
  if (at && at + sizeof key - 1 + 32 <= data + len)
    memset(at + sizeof key - 1, '0', 32);
  return g_bytes_new_take(data, len);
}

/* cohort-train --explain's memory object for base_sets and `extra`. */
G_GNUC_UNUSED static JsonObject *ddp_explain_memory(const char *const *extra)
{
  g_autofree char *ws = tu_mkdtemp("ddp-explain");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--explain"));
  add_sets(argv, ws, extra);
  g_ptr_array_add(argv, NULL);
  g_autofree char *out = NULL, *err = NULL;
  int status = 0;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                             &err, &status, &error));
  g_assert_no_error(error);
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("--explain failed: %s", err);
  tu_rm_rf(ws);
  g_autoptr(JsonNode) root = json_from_string(out, &error);
  g_assert_no_error(error);
  return json_object_ref(json_object_get_object_member(json_node_get_object(root), "memory"));
}

/* Largest |a - b| over the two weight sets. */
G_GNUC_UNUSED static double max_abs_diff(GArray *a, GArray *b)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0;
  for (guint i = 0; i < a->len; i++)
    worst = MAX(worst, fabs((double)g_array_index(a, float, i) - g_array_index(b, float, i)));
  return worst;
}
