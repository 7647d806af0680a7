/* Rank health (issue 28 item 3): the checksum and the verdict (the majority is the reference,
 * rank 0 without one; the first differing tensor), and end to end on 2 ranks of cohort-train:
 * a `check` request on the control channel gives a `health` event with status ok; one rank's
 * weights changed on purpose after step 2 (COHORT_TEST_HOOKS) stop the run at the next save
 * (step 3) with an error naming that rank and the tensor, and no checkpoint of step 3. */
#include "engine/train/rank-health.h"
#include "test-util.h"
#include "train-run.h"

#include <json-glib/json-glib.h>
#include <string.h>

static void test_hash(void)
{
  float a[1001], b[1001];
  for (int i = 0; i < 1001; i++)
    a[i] = b[i] = (float)i * 0.37f;
  g_assert_cmpuint(cohort_health_hash(a, sizeof a), ==, cohort_health_hash(b, sizeof b));
  /* One bit anywhere, the tail included, changes it; so does the length. */
  for (int i = 0; i < 1001; i += 250) {
    guint32 bits;
    memcpy(&bits, &b[i], 4);
    bits ^= 1;
    memcpy(&b[i], &bits, 4);
    g_assert_cmpuint(cohort_health_hash(a, sizeof a), !=, cohort_health_hash(b, sizeof b));
    b[i] = a[i];
  }
  g_assert_cmpuint(cohort_health_hash(a, 12), !=, cohort_health_hash(a, 13));
  g_assert_cmpuint(cohort_health_hash(a, 0), ==, cohort_health_hash(b, 0));
}

static void test_judge(void)
{
  gboolean div[3];
  int ref = -1;
  /* Two ranks that agree. */
  guint64 same[] = {1, 2, 3, 1, 2, 3};
  g_assert_cmpint(cohort_health_judge(same, 2, 3, div, &ref), ==, -1);
  g_assert_false(div[0] || div[1]);
  /* Two that differ in tensors 1 and 2: rank 0 is the reference, tensor 1 the first. */
  guint64 two[] = {1, 2, 3, 1, 9, 9};
  g_assert_cmpint(cohort_health_judge(two, 2, 3, div, &ref), ==, 1);
  g_assert_cmpint(ref, ==, 0);
  g_assert_false(div[0]);
  g_assert_true(div[1]);
  /* Three where rank 0 is the odd one out: the majority (rank 1's) is the reference. */
  guint64 three[] = {1, 2, 7, 1, 2, 3, 1, 2, 3};
  g_assert_cmpint(cohort_health_judge(three, 3, 3, div, &ref), ==, 2);
  g_assert_cmpint(ref, ==, 1);
  g_assert_true(div[0]);
  g_assert_false(div[1] || div[2]);
  /* Three that all differ: compared with rank 0; the first tensor where any differs. */
  guint64 all[] = {1, 2, 3, 1, 5, 3, 4, 2, 3};
  g_assert_cmpint(cohort_health_judge(all, 3, 3, div, &ref), ==, 0);
  g_assert_cmpint(ref, ==, 0);
  g_assert_true(div[1] && div[2]);
}

/* The events of a finished run's progress file. */
static GPtrArray *read_events(const char *path)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)json_object_unref);
  for (int i = 0; lines[i]; i++) {
    if (lines[i][0] == '\0')
      continue;
    g_autoptr(JsonNode) node = json_from_string(lines[i], NULL);
    g_assert_nonnull(node);
    g_ptr_array_add(out, json_object_ref(json_node_get_object(node)));
  }
  return out;
}

static JsonObject *find_event(GPtrArray *events, const char *name)
{
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), name))
      return o;
  }
  return NULL;
}

static const char *const two_ranks[] = {
    "--nproc",      "2",     "--set",          "max_steps=4", "--set", "save_every=3", "--set",
    "eval_every=0", "--set", "sample_every=0", NULL};

static void test_train_check_requested(void)
{
  g_autofree char *dir = g_dir_make_tmp("cohort-health-XXXXXX", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events.jsonl", NULL);
  g_autoptr(GPtrArray) args = small_args(ws, two_ranks);
  int p[2];
  g_assert_cmpint(pipe(p), ==, 0);
  g_assert_cmpint(write(p[1], "check\n", 6), ==, 6);
  close(p[1]);
  g_ptr_array_add(args, g_strdup("--control-fd"));
  g_ptr_array_add(args, g_strdup("4"));
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  int out = open(events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_subprocess_launcher_take_fd(l, out, 3);
  g_subprocess_launcher_take_fd(l, p[0], 4);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)train_program());
  g_ptr_array_add(argv, "--progress-fd");
  g_ptr_array_add(argv, "3");
  for (guint i = 0; i < args->len; i++)
    g_ptr_array_add(argv, args->pdata[i]);
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) sp =
      g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  RunResult res = finish_train(sp);
  g_test_message("stderr: %s", res.err);
  g_assert_cmpint(res.status, ==, 0);
  g_autoptr(GPtrArray) evs = read_events(events);
  int checks = 0, requested = 0;
  for (guint i = 0; i < evs->len; i++) {
    JsonObject *o = g_ptr_array_index(evs, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "health"))
      continue;
    checks++;
    g_assert_cmpstr(json_object_get_string_member(o, "status"), ==, "ok");
    g_assert_cmpint(json_object_get_int_member(o, "world_size"), ==, 2);
    g_assert_cmpint(json_object_get_int_member(o, "tensors"), >, 4);
    g_assert_cmpuint(strlen(json_object_get_string_member(o, "checksum")), ==, 16);
    requested += json_object_get_boolean_member_with_default(o, "requested", FALSE);
  }
  /* The request (after step 1), the save at step 3 and the one at the end (step 4). */
  g_assert_cmpint(checks, ==, 3);
  g_assert_cmpint(requested, ==, 1);
  run_result_clear(&res);
  tu_rm_rf(dir);
}

static void test_train_drift(void)
{
  g_autofree char *dir = g_dir_make_tmp("cohort-health-XXXXXX", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events.jsonl", NULL);
  g_autoptr(GPtrArray) args = small_args(ws, two_ranks);
  g_setenv("COHORT_TEST_HOOKS", "perturb:1:2:h.1.mlp.c_proj.weight", TRUE);
  RunResult res = run_train(args, events);
  g_unsetenv("COHORT_TEST_HOOKS");
  g_test_message("stderr: %s", res.err);
  g_assert_cmpint(res.status, ==, 1);
  g_assert_nonnull(strstr(res.err, "rank 1 differs from rank 0, first in parameter "
                                   "\"h.1.mlp.c_proj.weight\""));
  g_autoptr(GPtrArray) evs = read_events(events);
  JsonObject *h = find_event(evs, "health");
  g_assert_nonnull(h);
  g_assert_cmpstr(json_object_get_string_member(h, "status"), ==, "diverged");
  g_assert_cmpint(json_object_get_int_member(h, "step"), ==, 3);
  g_assert_cmpstr(json_object_get_string_member(h, "tensor"), ==, "h.1.mlp.c_proj.weight");
  JsonArray *d = json_object_get_array_member(h, "diverging");
  g_assert_cmpuint(json_array_get_length(d), ==, 1);
  g_assert_cmpint(json_array_get_int_element(d, 0), ==, 1);
  JsonObject *e = find_event(evs, "error");
  g_assert_nonnull(e);
  g_assert_nonnull(strstr(json_object_get_string_member(e, "message"), "h.1.mlp.c_proj.weight"));
  g_assert_null(find_event(evs, "checkpoint"));
  g_autofree char *ck = g_build_filename(ws, "checkpoints", "step-00000003", NULL);
  g_assert_false(g_file_test(ck, G_FILE_TEST_EXISTS));
  run_result_clear(&res);
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/health/hash", test_hash);
  g_test_add_func("/health/judge", test_judge);
  g_test_add_func("/health/train/check-requested", test_train_check_requested);
  g_test_add_func("/health/train/drift-stops", test_train_drift);
  return g_test_run();
}
