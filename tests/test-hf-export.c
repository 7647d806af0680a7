/* The exported model folder as Hugging Face reads it: after a run, config.json (a GPT2Config)
 * and model.safetensors in the workspace load into a plain-PyTorch GPT-2 built from
 * config.json's fields with GPT2Model's names (tests/hf_gpt2_folder.py; transformers is not in
 * Debian), and that model's loss on the validation windows Cohort evaluated is the loss Cohort
 * reported. Skipped without /usr/bin/python3 and torch. */
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

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/hf-export/folder-loads", test_folder_loads);
  return g_test_run();
}
