/* A run never loses or mixes another run's work, resumes are checked, a diverged run fails:
 * the trainer's half of the trust issue, driven through the real cohort-train.
 *  - a new run in a workspace with checkpoints is refused (the old ones untouched);
 *    --overwrite moves them aside; pruning touches only the current run;
 *  - run ids in the start event and state.json, kept by a resume;
 *  - a resume with another global batch (1 → 2 ranks, another batch size) continues after
 *    the same samples of the epoch;
 *  - NaN weights from init_from and a run that diverges after a checkpoint both fail, keep
 *    the last checkpoint and export nothing;
 *  - an unwritable workspace fails before the first step; stale temporaries are removed;
 *  - `done` is the last event of every stream;
 *  - a SIGTERM at any moment of a step stops the run with a checkpoint, never a crash. */
#include <glib.h>
#include <signal.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "engine/models/gpt.h"
#include "engine/models/gpt-io.h"
#include "engine/model/safetensors.h"
#include "test-util.h"
#include "train-run.h"

static GPtrArray *args_for(const char *ws, const char *const *extra)
{
  return small_args(ws, extra);
}

static RunResult run_in(const char *ws, const char *events, const char *const *extra)
{
  g_autoptr(GPtrArray) a = args_for(ws, extra);
  return run_train(a, events);
}

static char *ckpt_dir(const char *ws, int step)
{
  g_autofree char *name = g_strdup_printf("step-%08d", step);
  return g_build_filename(ws, "checkpoints", name, NULL);
}

static char *file_sha(const char *path)
{
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &text, &len, NULL));
  return g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)text, len);
}

static char *state_member(const char *ckpt, const char *member)
{
  g_autofree char *path = g_build_filename(ckpt, "state.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_autoptr(JsonNode) root = json_from_string(text, NULL);
  g_assert_nonnull(root);
  JsonNode *n = json_object_get_member(json_node_get_object(root), member);
  if (!n)
    return NULL;
  if (json_node_get_value_type(n) == G_TYPE_STRING)
    return g_strdup(json_node_get_string(n));
  return g_strdup_printf("%" G_GINT64_FORMAT, json_node_get_int(n));
}

/* The event objects named `event`. */
static JsonObject *first_event(GPtrArray *events, const char *event)
{
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), event))
      return o;
  }
  return NULL;
}

static void assert_done_last(GPtrArray *events)
{
  g_assert_cmpuint(events->len, >, 0);
  JsonObject *last = g_ptr_array_index(events, events->len - 1);
  g_assert_cmpstr(json_object_get_string_member(last, "event"), ==, "done");
}

static void test_fresh_run_refused(void)
{
  g_autofree char *ws = tu_mkdtemp("trust-fresh");
  const char *first[] = {"--set", "max_steps=30", "--set", "save_every=15", NULL};
  RunResult a = run_in(ws, NULL, first);
  g_assert_cmpint(a.status, ==, 0);
  g_autofree char *c15 = ckpt_dir(ws, 15), *c30 = ckpt_dir(ws, 30);
  g_autofree char *m30 = g_build_filename(c30, "model.safetensors", NULL);
  g_autofree char *sha30 = file_sha(m30);

  /* The same workspace, no --resume: refused, nothing written, nothing pruned. */
  const char *second[] = {"--set", "max_steps=9", "--set", "save_every=3",
                          "--set", "keep_last=1", NULL};
  RunResult b = run_in(ws, NULL, second);
  g_assert_cmpint(b.status, !=, 0);
  g_assert_nonnull(strstr(b.err, ws));
  g_assert_nonnull(strstr(b.err, "--resume auto"));
  g_assert_nonnull(strstr(b.err, "--overwrite"));
  g_assert_true(g_file_test(c15, G_FILE_TEST_IS_DIR));
  g_autofree char *sha30_after = file_sha(m30);
  g_assert_cmpstr(sha30, ==, sha30_after);
  g_autofree char *c3 = ckpt_dir(ws, 3);
  g_assert_false(g_file_test(c3, G_FILE_TEST_EXISTS));

  /* --overwrite: the earlier run moves to previous/<its run id>/; the new run prunes only its
   * own checkpoints. */
  g_autofree char *old_id = state_member(c30, "run_id");
  g_assert_cmpuint(strlen(old_id), ==, 32);
  const char *third[] = {"--set", "max_steps=9", "--set",       "save_every=3",
                         "--set", "keep_last=1", "--overwrite", NULL};
  RunResult c = run_in(ws, NULL, third);
  g_assert_cmpint(c.status, ==, 0);
  g_autofree char *moved = g_build_filename(ws, "previous", old_id, "checkpoints", "step-00000030",
                                            "model.safetensors", NULL);
  g_autofree char *sha_moved = file_sha(moved);
  g_assert_cmpstr(sha_moved, ==, sha30);
  g_autofree char *c9 = ckpt_dir(ws, 9), *c6 = ckpt_dir(ws, 6);
  g_assert_true(g_file_test(c9, G_FILE_TEST_IS_DIR));
  g_assert_false(g_file_test(c6, G_FILE_TEST_EXISTS));
  g_autofree char *new_id = state_member(c9, "run_id");
  g_assert_cmpstr(new_id, !=, old_id);
  run_result_clear(&a);
  run_result_clear(&b);
  run_result_clear(&c);
  tu_rm_rf(ws);
}

/* keep_last prunes the current run's checkpoints and never another run's, and a resume keeps
 * the run id (start event and state.json). */
static void test_prune_own_run_only(void)
{
  g_autofree char *ws = tu_mkdtemp("trust-prune");
  g_autofree char *ev1 = g_build_filename(ws, "ev1.jsonl", NULL);
  const char *first[] = {"--set", "max_steps=10", "--set", "save_every=5", NULL};
  RunResult a = run_in(ws, ev1, first);
  g_assert_cmpint(a.status, ==, 0);
  g_autoptr(GPtrArray) e1 = tu_read_events(ev1);
  assert_done_last(e1);
  const char *run_id = json_object_get_string_member(first_event(e1, "start"), "run_id");
  g_autofree char *c10 = ckpt_dir(ws, 10);
  g_autofree char *saved_id = state_member(c10, "run_id");
  g_assert_cmpstr(run_id, ==, saved_id);

  /* A checkpoint of another run, at a later step: a copy with another run id. */
  g_autofree char *other = ckpt_dir(ws, 90);
  g_autofree char *cmd = g_strdup_printf("cp -r '%s' '%s'", c10, other);
  g_assert_cmpint(system(cmd), ==, 0);
  g_autofree char *other_state = g_build_filename(other, "state.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(other_state, &text, NULL, NULL));
  g_autofree char *swapped = g_strdup(text);
  char *at = strstr(swapped, saved_id);
  g_assert_nonnull(at);
  memset(at, 'a', 32);
  g_assert_true(g_file_set_contents(other_state, swapped, -1, NULL));

  g_autofree char *ev2 = g_build_filename(ws, "ev2.jsonl", NULL);
  const char *second[] = {"--set", "max_steps=20", "--set",    "save_every=5",
                          "--set", "keep_last=1",  "--resume", c10,
                          NULL};
  RunResult b = run_in(ws, ev2, second);
  g_assert_cmpint(b.status, ==, 0);
  g_autoptr(GPtrArray) e2 = tu_read_events(ev2);
  assert_done_last(e2);
  g_assert_cmpstr(json_object_get_string_member(first_event(e2, "start"), "run_id"), ==, run_id);
  g_autofree char *c20 = ckpt_dir(ws, 20), *c15 = ckpt_dir(ws, 15);
  g_assert_true(g_file_test(c20, G_FILE_TEST_IS_DIR));
  g_assert_false(g_file_test(c15, G_FILE_TEST_EXISTS));
  g_assert_false(g_file_test(c10, G_FILE_TEST_EXISTS));
  g_assert_true(g_file_test(other, G_FILE_TEST_IS_DIR)); /* another run's: untouched */
  run_result_clear(&a);
  run_result_clear(&b);
  tu_rm_rf(ws);
}

/* 2 ranks × batch 4 (global 8) for 10 steps, then resumed by 1 rank with batch 4 (global 4):
 * the epoch continues after its first 80 samples, and a resume with global batch 3 rounds
 * down (78 samples) and says so. */
static void test_resume_other_world(void)
{
  g_autofree char *ws = tu_mkdtemp("trust-world");
  const char *first[] = {"--set", "max_steps=10", "--set", "save_every=10", "--nproc", "2", NULL};
  RunResult a = run_in(ws, NULL, first);
  g_assert_cmpint(a.status, ==, 0);
  g_autofree char *c10 = ckpt_dir(ws, 10);
  g_autofree char *gb = state_member(c10, "global_batch");
  g_autofree char *es = state_member(c10, "epoch_samples");
  g_assert_cmpstr(gb, ==, "8");
  g_assert_cmpstr(es, ==, "80");

  const char *second[] = {"--set",    "max_steps=12", "--set", "save_every=12",
                          "--resume", "auto",         NULL};
  RunResult b = run_in(ws, NULL, second);
  g_assert_cmpint(b.status, ==, 0);
  g_assert_nonnull(strstr(b.out, "continues after 80 of its samples"));
  g_autofree char *c12 = ckpt_dir(ws, 12);
  g_autofree char *es12 = state_member(c12, "epoch_samples");
  g_assert_cmpstr(es12, ==, "88"); /* 80 + 2 steps × 4 */

  const char *third[] = {"--set",         "max_steps=14", "--set",
                         "save_every=14", "--set",        "batch_size=3",
                         "--resume",      "auto",         NULL};
  RunResult c = run_in(ws, NULL, third);
  g_assert_cmpint(c.status, ==, 0);
  g_assert_nonnull(strstr(c.out, "continues after 87 of its samples"));
  g_assert_nonnull(strstr(c.out, "seen again"));
  run_result_clear(&a);
  run_result_clear(&b);
  run_result_clear(&c);
  tu_rm_rf(ws);
}

/* A small GPT's weights with one value replaced, as a Hugging Face file for init_from. */
static void write_weights(const char *path, float value, const char *tensor)
{
  CohortGptShape shape = {2, 2, 32, 32, 256};
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortGpt) gpt = cohort_gpt_new(&shape, 1, &error);
  g_assert_no_error(error);
  cohort_gpt_init_weights(gpt, 1);
  const CohortTensorInfo *t = cohort_gpt_find_tensor(gpt, tensor);
  g_assert_nonnull(t);
  float *p = cohort_gpt_params(gpt);
  for (size_t i = 0; i < t->numel; i++)
    p[t->offset + i] = isnan(value) && i != 7 ? p[t->offset + i] : value;
  g_assert_true(cohort_gpt_save_hf(gpt, NULL, path, NULL, &error));
}

static void test_nan_init(void)
{
  g_autofree char *ws = tu_mkdtemp("trust-nan");
  g_autofree char *init = g_build_filename(ws, "init.safetensors", NULL);
  write_weights(init, NAN, "h.1.mlp.c_fc.weight");
  g_autofree char *set = g_strdup_printf("init_from=%s", init);
  g_autofree char *events = g_build_filename(ws, "ev.jsonl", NULL);
  const char *extra[] = {"--set", set, NULL};
  RunResult r = run_in(ws, events, extra);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, init));
  g_assert_nonnull(strstr(r.err, "h.1.mlp.c_fc.weight"));
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  assert_done_last(ev);
  g_assert_cmpstr(json_object_get_string_member(g_ptr_array_index(ev, ev->len - 1), "status"), ==,
                  "failed");
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  g_assert_false(g_file_test(model, G_FILE_TEST_EXISTS));
  run_result_clear(&r);
  tu_rm_rf(ws);
}

/* Rewrites a checkpoint so the next update overflows: first moments of 1e30 and second
 * moments of 0 make AdamW step by ~1e35, the next forward overflows to inf and NaN. The
 * sha256 in state.json is updated, so the checkpoint still loads. */
static void poison_moments(const char *ckpt)
{
  g_autofree char *model = g_build_filename(ckpt, "model.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(model, &error);
  g_assert_no_error(error);
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  g_autoptr(GPtrArray) data = g_ptr_array_new_with_free_func(g_free);
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    CohortStEntry e = {.name = *name};
    int64_t shape[8];
    e.ndim = cohort_safetensors_shape(f, *name, shape);
    gsize n = 1;
    for (int d = 0; d < e.ndim; d++)
      n *= (gsize)(e.shape[d] = shape[d]);
    float *buf = g_new(float, n);
    g_assert_true(cohort_safetensors_read_f32(f, *name, e.ndim, shape, buf, &error));
    if (g_str_has_prefix(*name, "optim.m."))
      for (gsize i = 0; i < n; i++)
        buf[i] = 1e30f;
    if (g_str_has_prefix(*name, "optim.v."))
      memset(buf, 0, n * sizeof(float));
    e.data = buf;
    g_ptr_array_add(data, buf);
    g_array_append_val(entries, e);
  }
  g_autofree char *old_sha = file_sha(model);
  g_assert_true(
      cohort_safetensors_write(model, (CohortStEntry *)entries->data, entries->len, NULL, &error));
  g_autofree char *new_sha = file_sha(model);
  g_autofree char *state = g_build_filename(ckpt, "state.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(state, &text, NULL, NULL));
  char *at = strstr(text, old_sha);
  g_assert_nonnull(at);
  memcpy(at, new_sha, 64);
  g_assert_true(g_file_set_contents(state, text, -1, NULL));
}

static void test_diverged_run_fails(void)
{
  g_autofree char *ws = tu_mkdtemp("trust-diverge");
  const char *first[] = {"--set", "max_steps=10", "--set", "save_every=10", NULL};
  RunResult a = run_in(ws, NULL, first);
  g_assert_cmpint(a.status, ==, 0);
  g_autofree char *c10 = ckpt_dir(ws, 10);
  poison_moments(c10);
  g_autofree char *m10 = g_build_filename(c10, "model.safetensors", NULL);
  g_autofree char *sha10 = file_sha(m10);
  g_autofree char *exported = g_build_filename(ws, "model.safetensors", NULL);
  g_assert_cmpint(g_unlink(exported), ==, 0);

  g_autofree char *events = g_build_filename(ws, "ev.jsonl", NULL);
  const char *second[] = {"--set",    "max_steps=30", "--set", "save_every=30",
                          "--resume", "auto",         NULL};
  RunResult b = run_in(ws, events, second);
  g_assert_cmpint(b.status, !=, 0);
  g_assert_nonnull(strstr(b.err, "step 12"));
  g_assert_nonnull(strstr(b.err, "diverged"));
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  assert_done_last(ev);
  JsonObject *err = first_event(ev, "error");
  g_assert_nonnull(err);
  g_assert_nonnull(strstr(json_object_get_string_member(err, "message"), "step 12"));
  g_assert_false(g_file_test(exported, G_FILE_TEST_EXISTS));
  g_autofree char *sha_after = file_sha(m10);
  g_assert_cmpstr(sha10, ==, sha_after);
  g_autofree char *c30 = ckpt_dir(ws, 30);
  g_assert_false(g_file_test(c30, G_FILE_TEST_EXISTS));
  run_result_clear(&a);
  run_result_clear(&b);
  tu_rm_rf(ws);
}

static void test_unwritable_workspace(void)
{
  g_autofree char *dir = tu_mkdtemp("trust-unwritable");
  /* A file where a folder should be: no user, root included, can create the workspace. */
  g_autofree char *file = g_build_filename(dir, "a-file", NULL);
  g_assert_true(g_file_set_contents(file, "x", -1, NULL));
  g_autofree char *ws = g_build_filename(file, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "ev.jsonl", NULL);
  RunResult r = run_in(ws, events, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "workspace_dir"));
  g_assert_nonnull(strstr(r.err, ws));
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_assert_null(first_event(ev, "step"));
  assert_done_last(ev);
  run_result_clear(&r);
  tu_rm_rf(dir);
}

static void test_stale_temporaries(void)
{
  g_autofree char *ws = tu_mkdtemp("trust-stale");
  g_autofree char *stale = g_build_filename(ws, "model.safetensors.tmp-Ab12Cd", NULL);
  g_autofree char *keep = g_build_filename(ws, "notes.tmp-Ab12Cd", NULL);
  g_assert_true(g_file_set_contents(stale, "half a model", -1, NULL));
  g_assert_true(g_file_set_contents(keep, "not ours", -1, NULL));
  const char *extra[] = {"--set", "max_steps=4", NULL};
  RunResult r = run_in(ws, NULL, extra);
  g_assert_cmpint(r.status, ==, 0);
  g_assert_false(g_file_test(stale, G_FILE_TEST_EXISTS));
  g_assert_true(g_file_test(keep, G_FILE_TEST_EXISTS));
  g_assert_nonnull(strstr(r.out, "interrupted save"));
  run_result_clear(&r);
  tu_rm_rf(ws);
}

/* A SIGTERM at any moment of a step stops the run cleanly: exit 143, a checkpoint of the step
 * reached, `done` last. The signal used to run its handler on the computing thread's stack,
 * under the matrix-product kernels' data, and corrupted the heap in about one try in eight
 * (engine/cli/stop-signals.h); twelve tries at spread-out moments catch that most times. */
static void test_sigterm_mid_step(void)
{
  g_autofree char *root = tu_mkdtemp("trust-sigterm");
  GRand *rng = g_rand_new_with_seed(11);
  for (int trial = 0; trial < 12; trial++) {
    g_autofree char *ws = g_strdup_printf("%s/ws-%d", root, trial);
    g_autofree char *events = g_strdup_printf("%s/progress-%d.jsonl", root, trial);
    const char *quiet[] = {"-q", NULL};
    g_autoptr(GPtrArray) a = args_for(ws, quiet);
    g_autoptr(GSubprocess) p = start_train(a, events);
    gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
    for (;;) {
      g_autofree char *text = NULL;
      g_file_get_contents(events, &text, NULL, NULL);
      if (text && strstr(text, "\"step\":3,"))
        break;
      g_assert_cmpint(g_get_monotonic_time(), <, deadline);
      g_usleep(5000);
    }
    g_usleep((gulong)g_rand_int_range(rng, 0, 60000));
    g_subprocess_send_signal(p, SIGTERM);
    RunResult r = finish_train(p);
    if (r.status != 143)
      g_error("try %d: exit %d, stderr: %s", trial, r.status, r.err);
    run_result_clear(&r);
    g_autoptr(GPtrArray) ev = tu_read_events(events);
    assert_done_last(ev);
    JsonObject *done = g_ptr_array_index(ev, ev->len - 1);
    g_assert_cmpstr(json_object_get_string_member(done, "status"), ==, "stopped");
    g_autofree char *ckpts = g_build_filename(ws, "checkpoints", NULL);
    g_assert_true(g_file_test(ckpts, G_FILE_TEST_IS_DIR));
  }
  g_rand_free(rng);
  tu_rm_rf(root);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/trust/fresh-run-refused", test_fresh_run_refused);
  g_test_add_func("/trust/prune-own-run-only", test_prune_own_run_only);
  g_test_add_func("/trust/resume-other-world", test_resume_other_world);
  g_test_add_func("/trust/nan-init", test_nan_init);
  g_test_add_func("/trust/diverged-run-fails", test_diverged_run_fails);
  g_test_add_func("/trust/unwritable-workspace", test_unwritable_workspace);
  g_test_add_func("/trust/stale-temporaries", test_stale_temporaries);
  g_test_add_func("/trust/sigterm-mid-step", test_sigterm_mid_step);
  return g_test_run();
}
