/* Checkpoints survive a crash at any moment of a save or a prune: a fault-injection shim
 * (tests/fault-shim.c, LD_PRELOAD) kills cohort-train with SIGKILL right after each rename,
 * unlink and folder removal under checkpoints/, one run per such call, while the run replaces
 * an existing step-N (a resumed run reaching a step saved before) and prunes the step before;
 * once with the atomic exchange of two folders, once on a file system without it.
 * After each crash, `--resume auto` must resume from a complete checkpoint at least as new as
 * the newest one before the crash (never "no checkpoint", never a new run id), end with
 * weights bit-identical to a run that was never interrupted, and leave no half-deleted or
 * temporary folder in checkpoints/. */
#include <string.h>

#include "test-util.h"
#include "train-run.h"

static const char *const sets[] = {
    "n_layer=1",
    "n_head=2",
    "n_embd=16",
    "seq_len=16",
    "batch_size=2",
    "warmup_steps=0",
    "eval_every=0",
    "eval_steps=1",
    "sample_every=0",
    "threads=1",
    "save_every=10",
    "keep_last=1",
    "lr_schedule=constant",
    NULL,
};

static char *shim;
/* The file system cannot exchange two names (the shim refuses RENAME_EXCHANGE). */
static gboolean no_exchange;

typedef struct {
  int status;
  char *err;
  GPtrArray *events;
} Run;

static void run_clear(Run *r)
{
  g_free(r->err);
  if (r->events)
    g_ptr_array_unref(r->events);
}

/* cohort-train on `ws` with `extra`; the shim armed at call `after` (0 = count only) when
 * `log` is given. */
static Run train(const char *ws, const char *const *extra, const char *log, int after)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup(train_program()));
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(sets[i]));
  }
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  for (guint i = 0; extra[i]; i++)
    g_ptr_array_add(args, g_strdup(extra[i]));
  g_autofree char *events = g_build_filename(ws, "..", "progress.jsonl", NULL);
  g_ptr_array_add(args, g_strdup("--progress-fd"));
  g_ptr_array_add(args, g_strdup("3"));
  g_ptr_array_add(args, NULL);
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  int fd = open(events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_assert_cmpint(fd, >=, 0);
  g_subprocess_launcher_take_fd(l, fd, 3);
  if (log) {
    g_subprocess_launcher_setenv(l, "LD_PRELOAD", shim, TRUE);
    g_subprocess_launcher_setenv(l, "COHORT_FAULT_MATCH", "/checkpoints/", TRUE);
    g_subprocess_launcher_setenv(l, "COHORT_FAULT_LOG", log, TRUE);
    g_autofree char *k = g_strdup_printf("%d", after);
    g_subprocess_launcher_setenv(l, "COHORT_FAULT_AFTER", k, TRUE);
    if (no_exchange)
      g_subprocess_launcher_setenv(l, "COHORT_FAULT_NO_EXCHANGE", "1", TRUE);
    /* A sanitizer build wants its runtime first; the shim only wraps libc calls. */
    const char *asan = g_getenv("ASAN_OPTIONS");
    g_autofree char *opts =
        g_strdup_printf("%s%sverify_asan_link_order=0", asan ? asan : "", asan && *asan ? ":" : "");
    g_subprocess_launcher_setenv(l, "ASAN_OPTIONS", opts, TRUE);
  }
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) p =
      g_subprocess_launcher_spawnv(l, (const char *const *)args->pdata, &error);
  g_assert_no_error(error);
  Run r = {0};
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, &r.err, &error);
  g_assert_no_error(error);
  r.status = g_subprocess_get_if_signaled(p) ? 128 + g_subprocess_get_term_sig(p)
                                             : g_subprocess_get_exit_status(p);
  if (r.status == 0 || !log)
    r.events = tu_read_events(events);
  return r;
}

static JsonObject *find_event(GPtrArray *events, const char *name)
{
  for (guint i = 0; events && i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), name))
      return o;
  }
  return NULL;
}

static void copy_tree(const char *from, const char *to)
{
  g_autofree char *a = g_shell_quote(from), *b = g_shell_quote(to);
  g_autofree char *cmd = g_strdup_printf("cp -a %s %s", a, b);
  g_assert_cmpint(system(cmd), ==, 0);
}

/* checkpoints/ holds complete step folders only: no temporary, no half-deleted folder. */
static void assert_clean(const char *ws, const char *what)
{
  g_autofree char *ckdir = g_build_filename(ws, "checkpoints", NULL);
  g_autoptr(GDir) d = g_dir_open(ckdir, 0, NULL);
  g_assert_nonnull(d);
  const char *name;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *state = g_build_filename(ckdir, name, "state.json", NULL);
    g_autofree char *model = g_build_filename(ckdir, name, "model.safetensors", NULL);
    gboolean ok = !g_str_has_suffix(name, ".tmp") && g_file_test(state, G_FILE_TEST_IS_REGULAR) &&
                  g_file_test(model, G_FILE_TEST_IS_REGULAR);
    if (!ok)
      g_error("%s: checkpoints/%s is left over", what, name);
  }
}

static void crash_anywhere(void)
{
  g_autofree char *root = tu_mkdtemp("ckpt-crash");
  const char *to30[] = {"--set", "max_steps=30", NULL};

  /* The uninterrupted run: 30 steps. */
  g_autofree char *ref_ws = g_build_filename(root, "ref", "ws", NULL);
  g_assert_cmpint(g_mkdir_with_parents(ref_ws, 0755), ==, 0);
  Run ref = train(ref_ws, to30, NULL, 0);
  g_assert_cmpint(ref.status, ==, 0);
  g_autofree char *ref_model = g_build_filename(ref_ws, "model.safetensors", NULL);
  g_autoptr(GArray) ref_weights = tu_read_weights(ref_model);

  /* The state before the crash runs (a constant learning rate: a run to step 10 then 20 is
   * the same as one to 30, which a schedule over max_steps would not be): step-20 in the workspace
   * (step-10 pruned, keep_last 1) and a copy of step-10 outside it, from which each crash run
   * resumes, so that it saves step-20 again (replacing it) and then step-30 (pruning step-20). */
  g_autofree char *base_ws = g_build_filename(root, "base", "ws", NULL);
  g_assert_cmpint(g_mkdir_with_parents(base_ws, 0755), ==, 0);
  const char *to10[] = {"--set", "max_steps=10", NULL};
  Run a1 = train(base_ws, to10, NULL, 0);
  g_assert_cmpint(a1.status, ==, 0);
  g_autofree char *step10 = g_build_filename(root, "step-00000010", NULL);
  g_autofree char *ws10 = g_build_filename(base_ws, "checkpoints", "step-00000010", NULL);
  copy_tree(ws10, step10);
  const char *to20[] = {"--resume", "auto", "--set", "max_steps=20", NULL};
  Run a2 = train(base_ws, to20, NULL, 0);
  g_assert_cmpint(a2.status, ==, 0);
  const char *run_id = json_object_get_string_member(find_event(a2.events, "start"), "run_id");
  g_assert_false(g_file_test(ws10, G_FILE_TEST_EXISTS));

  const char *crash_args[] = {"--resume", step10, "--set", "max_steps=30", NULL};
  const char *resume_args[] = {"--resume", "auto", "--set", "max_steps=30", NULL};

  /* How many counted calls an uninterrupted crash run makes. */
  g_autofree char *count_root = g_build_filename(root, "count", NULL);
  g_autofree char *count_ws = g_build_filename(count_root, "ws", NULL);
  g_assert_cmpint(g_mkdir_with_parents(count_root, 0755), ==, 0);
  copy_tree(base_ws, count_ws);
  g_autofree char *count_log = g_build_filename(count_root, "calls.log", NULL);
  Run counted = train(count_ws, crash_args, count_log, 0);
  g_assert_cmpint(counted.status, ==, 0);
  g_autofree char *calls = NULL;
  g_assert_true(g_file_get_contents(count_log, &calls, NULL, NULL));
  g_test_message("the calls of an uninterrupted run:\n%s", calls);
  int n_calls = 0;
  for (const char *c = calls; *c; c++)
    n_calls += *c == '\n';
  g_assert_cmpint(n_calls, >=, 6);

  for (int k = 1; k <= n_calls; k++) {
    g_autofree char *name = g_strdup_printf("crash-%02d", k);
    g_autofree char *dir = g_build_filename(root, name, NULL);
    g_autofree char *ws = g_build_filename(dir, "ws", NULL);
    g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
    copy_tree(base_ws, ws);
    g_autofree char *log = g_build_filename(dir, "calls.log", NULL);
    Run crash = train(ws, crash_args, log, k);
    g_autofree char *last_call = NULL;
    g_file_get_contents(log, &last_call, NULL, NULL);
    g_assert_cmpint(crash.status, ==, 128 + SIGKILL);

    Run resumed = train(ws, resume_args, NULL, 0);
    if (resumed.status != 0)
      g_error("after a crash at call %d: the resume failed: %s", k, resumed.err);
    JsonObject *start = find_event(resumed.events, "start");
    const char *from = json_object_get_string_member_with_default(start, "resumed_from", NULL);
    gint64 at = json_object_get_int_member_with_default(start, "start_step", -1);
    g_test_message("crash after call %d; resumed from %s at step %" G_GINT64_FORMAT, k,
                   from ? from : "(nothing)", at);
    if (from == NULL || at < 20)
      g_error(
          "after a crash at call %d (calls so far:\n%s): resumed from %s at step %" G_GINT64_FORMAT
          ", expected a complete checkpoint of step 20 or later",
          k, last_call, from ? from : "nothing", at);
    g_assert_cmpstr(json_object_get_string_member(start, "run_id"), ==, run_id);
    g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
    /* The tensors, bit for bit (the file's metadata names another run). */
    g_autoptr(GArray) weights = tu_read_weights(model);
    g_assert_cmpuint(weights->len, ==, ref_weights->len);
    g_assert_cmpmem(weights->data, weights->len * sizeof(float), ref_weights->data,
                    ref_weights->len * sizeof(float));
    g_autofree char *what = g_strdup_printf("after a crash at call %d", k);
    assert_clean(ws, what);
    run_clear(&crash);
    run_clear(&resumed);
    tu_rm_rf(dir);
  }
  run_clear(&ref);
  run_clear(&a1);
  run_clear(&a2);
  run_clear(&counted);
  tu_rm_rf(root);
}

static void test_crash_anywhere(void)
{
  no_exchange = FALSE;
  crash_anywhere();
}

/* The same where the old folder must be renamed aside first: the crash between the two
 * renames is the one recovery completes at start. */
static void test_crash_anywhere_no_exchange(void)
{
  no_exchange = TRUE;
  crash_anywhere();
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  shim = g_test_build_filename(G_TEST_BUILT, "libcohort-fault-shim.so", NULL);
  g_test_add_func("/ckpt-crash/anywhere", test_crash_anywhere);
  g_test_add_func("/ckpt-crash/anywhere-no-exchange", test_crash_anywhere_no_exchange);
  int rc = g_test_run();
  g_free(shim);
  return rc;
}
