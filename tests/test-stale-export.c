/* An export is one set of files: a run that writes no EMA weights (ema_decay 0 after a resume)
 * removes the model-ema.safetensors an earlier export left, every weights file records the
 * step and the run it was written at, and a teacher folder whose EMA file disagrees with its
 * model.safetensors (a leftover copied back, or an export killed half-way) is refused with
 * both files and both values named, instead of the stale EMA being taken silently. */
#include <string.h>

#include "engine/model/safetensors.h"
#include "test-util.h"
#include "train-run.h"

static const char *const gpt[] = {
    "n_layer=1",      "n_head=2",       "n_embd=16",    "seq_len=16",
    "batch_size=2",   "warmup_steps=0", "eval_every=0", "eval_steps=1",
    "sample_every=0", "threads=1",      NULL,
};

static RunResult train(const char *ws, const char *events, const char *const *extra)
{
  g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; gpt[i]; i++) {
    g_ptr_array_add(a, g_strdup("--set"));
    g_ptr_array_add(a, g_strdup(gpt[i]));
  }
  g_ptr_array_add(a, g_strdup("--set"));
  g_ptr_array_add(a, g_strdup_printf("workspace_dir=%s", ws));
  for (guint i = 0; extra[i]; i++)
    g_ptr_array_add(a, g_strdup(extra[i]));
  RunResult r = run_train(a, events);
  if (r.status != 0)
    g_test_message("%s", r.err);
  return r;
}

static char *meta(const char *path, const char *key)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  return g_strdup(cohort_safetensors_metadata(f, key));
}

static void copy_file(const char *from, const char *to)
{
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(from, &bytes, &len, NULL));
  g_assert_true(g_file_set_contents(to, bytes, (gssize)len, NULL));
}

static void test_stale_ema(void)
{
  g_autofree char *root = tu_mkdtemp("stale-export");
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  g_autofree char *ema = g_build_filename(ws, "model-ema.safetensors", NULL);

  /* An EMA run to step 20: both files, both at step 20 of one run. */
  const char *first[] = {"--set", "max_steps=20",  "--set", "save_every=20",
                         "--set", "ema_decay=0.9", NULL};
  RunResult a = train(ws, NULL, first);
  g_assert_cmpint(a.status, ==, 0);
  g_autofree char *step20 = meta(ema, "cohort.step");
  g_assert_cmpstr(step20, ==, "20");
  g_autofree char *run_model = meta(model, "cohort.run_id");
  g_autofree char *run_ema = meta(ema, "cohort.run_id");
  g_assert_nonnull(run_model);
  g_assert_cmpuint(strlen(run_model), ==, 32);
  g_assert_cmpstr(run_model, ==, run_ema);
  g_autofree char *old_ema = g_build_filename(root, "model-ema-step20.safetensors", NULL);
  copy_file(ema, old_ema);

  /* Resumed without EMA to step 30: the export has no EMA file, so the old one goes. */
  const char *second[] = {"--resume",     "auto",        "--set",
                          "max_steps=30", "--set",       "save_every=0",
                          "--set",        "ema_decay=0", NULL};
  RunResult b = train(ws, NULL, second);
  g_assert_cmpint(b.status, ==, 0);
  g_autofree char *step30 = meta(model, "cohort.step");
  g_assert_cmpstr(step30, ==, "30");
  g_assert_false(g_file_test(ema, G_FILE_TEST_EXISTS));

  /* The workspace as a teacher: its model.safetensors of step 30. */
  g_autofree char *student = g_build_filename(root, "student", NULL);
  g_autofree char *events = g_build_filename(root, "student.jsonl", NULL);
  g_autofree char *teacher = g_strdup_printf("teacher_from=%s", ws);
  const char *distil[] = {"--set", "max_steps=2", "--set", "save_every=0", "--set", teacher, NULL};
  RunResult c = train(student, events, distil);
  g_assert_cmpint(c.status, ==, 0);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  JsonObject *t = NULL;
  for (guint i = 0; i < ev->len && !t; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "start"))
      t = json_object_get_object_member(o, "teacher");
  }
  g_assert_nonnull(t);
  g_assert_cmpstr(json_object_get_string_member(t, "weights"), ==, model);

  /* The step-20 EMA file copied back beside the step-30 model: refused, both named. */
  copy_file(old_ema, ema);
  g_autofree char *student2 = g_build_filename(root, "student2", NULL);
  RunResult d = train(student2, NULL, distil);
  g_assert_cmpint(d.status, !=, 0);
  g_test_message("%s", d.err);
  g_assert_nonnull(strstr(d.err, ema));
  g_assert_nonnull(strstr(d.err, model));
  g_assert_nonnull(strstr(d.err, "cohort.step 20"));
  g_assert_nonnull(strstr(d.err, "cohort.step 30"));
  run_result_clear(&a);
  run_result_clear(&b);
  run_result_clear(&c);
  run_result_clear(&d);
  tu_rm_rf(root);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/stale-export/ema", test_stale_ema);
  return g_test_run();
}
