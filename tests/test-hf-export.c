/* The exported model folder as Hugging Face reads it: after a run, config.json (a GPT2Config)
 * and model.safetensors in the workspace load into a plain-PyTorch GPT-2 built from
 * config.json's fields with GPT2Model's names (tests/hf_gpt2_folder.py; transformers is not in
 * Debian), and that model's loss on the validation windows Cohort evaluated is the loss Cohort
 * reported; also for a GPT-2 fine-tuned at a seq_len below its n_positions, whose export keeps
 * the base's n_positions. Skipped without /usr/bin/python3 and torch. */
#include <gio/gio.h>
#include <math.h>

#include "engine/config/config.h"
#include "test-util.h"
#include "train-run.h"

static gboolean have_torch(void)
{
  const char *argv[] = {"/usr/bin/python3", "-c", "import torch", NULL};
  int status = -1;
  return g_spawn_sync(NULL, (char **)argv, NULL,
                      G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL,
                      NULL, &status, NULL) &&
         g_spawn_check_wait_status(status, NULL);
}

static void test_folder_loads(void)
{
  if (!have_torch()) {
    g_test_skip("/usr/bin/python3 with torch is not available");
    return;
  }
  g_autofree char *ws = tu_mkdtemp("hf-export");
  g_autofree char *progress = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  const char *sets[] = {"n_layer=2",      "n_head=2",     "n_embd=32",      "seq_len=32",
                        "batch_size=4",   "max_steps=10", "eval_every=0",   "eval_steps=2",
                        "sample_every=0", "threads=1",    "warmup_steps=2", NULL};
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(sets[i]));
  }
  g_ptr_array_add(args, g_strdup("--quiet"));
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  RunResult r = run_train(args, progress);
  if (r.status != 0)
    g_error("cohort-train exited %d: %s", r.status, r.err);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(progress);
  g_autoptr(GArray) val = tu_event_values(ev, "done", "val_loss");
  g_assert_cmpuint(val->len, ==, 1);
  double cohort_loss = g_array_index(val, double, 0);

  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "hf_gpt2_folder.py", NULL);
  g_autofree char *text = cohort_resolve_path("builtin:sample/val.txt");
  /* eval_steps × batch_size windows, in order from the first: what Cohort evaluated. */
  const char *argv[] = {"/usr/bin/python3",
                        script,
                        ws,
                        "--n-layer",
                        "2",
                        "--n-head",
                        "2",
                        "--n-embd",
                        "32",
                        "--seq-len",
                        "32",
                        "--vocab",
                        "256",
                        "--text",
                        text,
                        "--windows",
                        "8",
                        NULL};
  g_autofree char *out = NULL, *err = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(
      g_spawn_sync(NULL, (char **)argv, NULL, 0, NULL, NULL, &out, &err, &status, &error));
  g_test_message("python: %s%s", out, err);
  g_assert_true(g_spawn_check_wait_status(status, NULL));
  double torch_loss = 0;
  int step = 0;
  g_assert_cmpint(sscanf(out, "loss %lf step %d", &torch_loss, &step), ==, 2);
  g_test_message("Cohort's val_loss %.6f, PyTorch's %.6f", cohort_loss, torch_loss);
  g_assert_cmpint(step, ==, 10);
  /* float32 both, sums in another order. */
  g_assert_cmpfloat(fabs(torch_loss - cohort_loss), <, 1e-4 * cohort_loss);
  tu_rm_rf(ws);
}

static char *python(const char *const *argv_in, gboolean must_succeed)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  for (guint i = 0; argv_in[i]; i++)
    g_ptr_array_add(argv, (gpointer)argv_in[i]);
  g_ptr_array_add(argv, NULL);
  g_autofree char *err = NULL;
  char *out = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(
      g_spawn_sync(NULL, (char **)argv->pdata, NULL, 0, NULL, NULL, &out, &err, &status, &error));
  g_test_message("python: %s%s", out, err);
  if (must_succeed)
    g_assert_true(g_spawn_check_wait_status(status, NULL));
  return out;
}

/* GPT-2 fine-tuned at a seq_len below its n_positions (the common, cheap case: 1024-position
 * GPT-2 at 128 tokens): the run uses the first seq_len positions, as Hugging Face does with
 * shorter inputs, and its export keeps the base's whole position table, so config.json says
 * the base's n_positions and a plain-PyTorch GPT-2 of that config (tests/hf_gpt2_folder.py)
 * loads it strictly, its wpe rows from seq_len on exactly the base's, with Cohort's
 * validation loss on windows of seq_len. Cohort reads its own export back (--sample). */
static void test_shorter_context(void)
{
  if (!have_torch()) {
    g_test_skip("/usr/bin/python3 with torch is not available");
    return;
  }
  g_autofree char *dir = tu_mkdtemp("hf-shorter");
  g_autofree char *base = g_build_filename(dir, "gpt2-64", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_assert_cmpint(g_mkdir(base, 0755), ==, 0);
  g_autofree char *make = g_test_build_filename(G_TEST_DIST, "make_hf_gpt2.py", NULL);
  g_free(python((const char *[]){"/usr/bin/python3", make, "folder", base, "--n-layer", "2",
                                 "--n-head", "2", "--n-embd", "32", "--seq-len", "64", "--vocab",
                                 "256", NULL},
                TRUE));
  g_autofree char *progress = g_build_filename(dir, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_autofree char *init = g_strdup_printf("init_from=%s", base);
  const char *sets[] = {"n_layer=2",
                        "n_head=2",
                        "n_embd=32",
                        "seq_len=32",
                        "batch_size=4",
                        "max_steps=4",
                        "eval_every=0",
                        "eval_steps=2",
                        "sample_every=0",
                        "threads=1",
                        "warmup_steps=2",
                        init,
                        NULL};
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(sets[i]));
  }
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  RunResult r = run_train(args, progress);
  if (r.status != 0)
    g_error("cohort-train exited %d: %s", r.status, r.err);
  /* the log says what happens to the positions */
  g_assert_true(strstr(r.out, "the base has 64 positions") ||
                strstr(r.err, "the base has 64 positions"));
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(progress);
  g_autoptr(GArray) val = tu_event_values(ev, "done", "val_loss");
  g_assert_cmpuint(val->len, ==, 1);
  double cohort_loss = g_array_index(val, double, 0);

  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "hf_gpt2_folder.py", NULL);
  g_autofree char *text = cohort_resolve_path("builtin:sample/val.txt");
  g_autofree char *base_weights = g_build_filename(base, "model.safetensors", NULL);
  g_autofree char *out = python((const char *[]){"/usr/bin/python3",
                                                 script,
                                                 ws,
                                                 "--n-layer",
                                                 "2",
                                                 "--n-head",
                                                 "2",
                                                 "--n-embd",
                                                 "32",
                                                 "--seq-len",
                                                 "32",
                                                 "--n-positions",
                                                 "64",
                                                 "--wpe-tail-from",
                                                 base_weights,
                                                 "--vocab",
                                                 "256",
                                                 "--text",
                                                 text,
                                                 "--windows",
                                                 "8",
                                                 NULL},
                                TRUE);
  double torch_loss = 0;
  int step = 0;
  g_assert_cmpint(sscanf(out, "loss %lf step %d", &torch_loss, &step), ==, 2);
  g_test_message("Cohort's val_loss %.6f, PyTorch's %.6f", cohort_loss, torch_loss);
  g_assert_cmpint(step, ==, 4);
  g_assert_cmpfloat(fabs(torch_loss - cohort_loss), <, 1e-4 * cohort_loss);

  /* Cohort's own readers take the longer table: --sample of the export */
  g_autoptr(GPtrArray) sample = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(sample, g_strdup("--sample"));
  g_ptr_array_add(sample, g_strdup(ws));
  RunResult s = run_train(sample, NULL);
  if (s.status != 0)
    g_error("--sample of the export exited %d: %s", s.status, s.err);
  run_result_clear(&s);
  /* a seq_len above the base's n_positions is still refused, naming the limit */
  g_ptr_array_set_size(args, 0);
  const char *longer[] = {"n_layer=2",   "n_head=2", "n_embd=32", "seq_len=128",
                          "max_steps=1", init,       NULL};
  for (guint i = 0; longer[i]; i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(longer[i]));
  }
  g_autofree char *ws2 = g_build_filename(dir, "ws2", NULL);
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws2));
  RunResult l = run_train(args, NULL);
  g_assert_cmpint(l.status, !=, 0);
  g_assert_nonnull(strstr(l.err, "set seq_len to at most 64"));
  run_result_clear(&l);
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/hf-export/folder-loads", test_folder_loads);
  g_test_add_func("/hf-export/shorter-context", test_shorter_context);
  return g_test_run();
}
