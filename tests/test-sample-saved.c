/* cohort-train --sample PATH: a sample from a saved model, for each family. GPT prints text, DiT
 * writes a PNG grid where -o says (never over a FIFO or device, never into a folder it would
 * have to make, never over the saved model's own files), and a family without samples (ResNet) is
 * refused with a message that names the folder and the family, and writes nothing. */
#include <string.h>
#include <sys/stat.h>

#include "test-util.h"
#include "train-run.h"

/* Two steps of `preset` into `ws`, single process, a checkpoint at the end. Returns the
 * checkpoint folder. */
static char *train_two_steps(const char *preset, const char *ws)
{
  const char *argv[] = {
      "--preset", preset,         "--set", "max_steps=2",  "--set", "warmup_steps=1",
      "--set",    "save_every=2", "--set", "eval_every=0", "--set", "sample_every=0",
      "--set",    "batch_size=4", "--set", "threads=1",    "--set", "enable_multi_gpu=false",
      NULL};
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; argv[i]; i++)
    g_ptr_array_add(args, g_strdup(argv[i]));
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  RunResult r = run_train(args, NULL);
  if (r.status != 0)
    g_test_message("%s", r.err);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  char *ckpt = g_build_filename(ws, "checkpoints", "step-00000002", NULL);
  g_assert_true(g_file_test(ckpt, G_FILE_TEST_IS_DIR));
  return ckpt;
}

/* Sampling with the preset's 32 Euler steps over tiny-dit's grid of 80 images takes a minute on
 * a loaded core; 2 steps draw the same kind of grid, which is all these tests look at. */
static RunResult sample(const char *ckpt, const char *output)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--sample"));
  g_ptr_array_add(args, g_strdup(ckpt));
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup("sample_steps=2"));
  if (output) {
    g_ptr_array_add(args, g_strdup("-o"));
    g_ptr_array_add(args, g_strdup(output));
  }
  return run_train(args, NULL);
}

static void test_gpt_text(void)
{
  g_autofree char *root = tu_mkdtemp("sample-gpt");
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_autofree char *ckpt = train_two_steps("tiny-gpt", ws);
  RunResult r = sample(ckpt, NULL);
  g_assert_cmpint(r.status, ==, 0);
  /* The sample is the prompt's continuation: some text on standard output. */
  g_assert_cmpuint(strlen(r.out), >, 1);
  run_result_clear(&r);
  tu_rm_rf(root);
}

static void test_dit_image(void)
{
  g_autofree char *root = tu_mkdtemp("sample-dit");
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_autofree char *ckpt = train_two_steps("tiny-dit", ws);
  g_autofree char *png = g_build_filename(root, "grid.png", NULL);
  RunResult r = sample(ckpt, png);
  g_assert_cmpint(r.status, ==, 0);
  g_assert_nonnull(strstr(r.out, png));
  run_result_clear(&r);
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(png, &bytes, &len, NULL));
  g_assert_cmpuint(len, >, 8);
  g_assert_cmpmem(bytes, 8, "\x89PNG\r\n\x1a\n", 8);

  /* -o never replaces a special file (a FIFO here; /dev/full as root) and never makes a
   * folder: both are refused with the path named, and left as they were. */
  g_autofree char *fifo = g_build_filename(root, "fifo.png", NULL);
  g_assert_cmpint(mkfifo(fifo, 0644), ==, 0);
  RunResult f = sample(ckpt, fifo);
  g_assert_cmpint(f.status, !=, 0);
  g_assert_nonnull(strstr(f.err, fifo));
  g_assert_nonnull(strstr(f.err, "FIFO"));
  struct stat st;
  g_assert_cmpint(lstat(fifo, &st), ==, 0);
  g_assert_true(S_ISFIFO(st.st_mode));
  run_result_clear(&f);
  g_autofree char *missing = g_build_filename(root, "no-such-folder", "grid.png", NULL);
  RunResult m = sample(ckpt, missing);
  g_assert_cmpint(m.status, !=, 0);
  g_assert_nonnull(strstr(m.err, "no-such-folder"));
  g_assert_nonnull(strstr(m.err, "does not exist"));
  g_autofree char *missing_dir = g_path_get_dirname(missing);
  g_assert_false(g_file_test(missing_dir, G_FILE_TEST_EXISTS));
  run_result_clear(&m);

  /* -o is never one of the files the sample is made from (engine/base/outputs.h): the
   * checkpoint's weights, the export's; each is left as it was. */
  g_autofree char *ck_model = g_build_filename(ckpt, "model.safetensors", NULL);
  g_autofree char *export = g_build_filename(ws, "model.safetensors", NULL);
  const char *sources[][2] = {{ckpt, ck_model}, {ws, export}};
  for (guint i = 0; i < G_N_ELEMENTS(sources); i++) {
    g_autofree char *before = NULL, *after = NULL;
    gsize n0 = 0, n1 = 0;
    g_assert_true(g_file_get_contents(sources[i][1], &before, &n0, NULL));
    RunResult o = sample(sources[i][0], sources[i][1]);
    g_test_message("%s", o.err);
    g_assert_cmpint(o.status, !=, 0);
    g_assert_nonnull(strstr(o.err, "one of the inputs"));
    run_result_clear(&o);
    g_assert_true(g_file_get_contents(sources[i][1], &after, &n1, NULL));
    g_assert_true(n0 == n1 && memcmp(before, after, n0) == 0);
  }
  tu_rm_rf(root);
}

static void test_resnet_refused(void)
{
  g_autofree char *root = tu_mkdtemp("sample-resnet");
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_autofree char *ckpt = train_two_steps("tiny-resnet", ws);
  g_autofree char *png = g_build_filename(root, "grid.png", NULL);
  RunResult r = sample(ckpt, png);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, ckpt));
  g_assert_nonnull(strstr(r.err, "resnet model does not generate samples"));
  g_assert_false(g_file_test(png, G_FILE_TEST_EXISTS));
  run_result_clear(&r);
  tu_rm_rf(root);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/sample-saved/gpt-text", test_gpt_text);
  g_test_add_func("/sample-saved/dit-image", test_dit_image);
  g_test_add_func("/sample-saved/resnet-refused", test_resnet_refused);
  return g_test_run();
}
