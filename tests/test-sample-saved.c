/* cohort-train --sample PATH: a sample from a saved model, for each family. GPT and Llama print
 * text, DiT writes a PNG grid where -o says (never over a FIFO or device, never into a folder it
 * would have to make, never over the saved model's own files), and a family without samples
 * (ResNet) is refused with a message that names the folder and the family, and writes nothing.
 * --perplexity FILE prints the loss of a text: windows of seq_len that follow one another (a
 * text of two windows scores as the mean of its windows scored alone), and clear refusals. */
#include <math.h>
#include <stdio.h>
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

/* --sample CKPT --perplexity FILE (with extra --set assignments); the status, out and err. */
static RunResult perplexity(const char *ckpt, const char *file, const char *set)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--sample"));
  g_ptr_array_add(args, g_strdup(ckpt));
  g_ptr_array_add(args, g_strdup("--perplexity"));
  g_ptr_array_add(args, g_strdup(file));
  if (set) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(set));
  }
  return run_train(args, NULL);
}

/* The loss --perplexity prints for `text` (written to root/name), and its token count. */
static double score(const char *ckpt, const char *root, const char *name, const char *text,
                    gsize len, long *tokens)
{
  g_autofree char *file = g_build_filename(root, name, NULL);
  g_assert_true(g_file_set_contents(file, text, (gssize)len, NULL));
  RunResult r = perplexity(ckpt, file, NULL);
  if (r.status != 0)
    g_test_message("%s", r.err);
  g_assert_cmpint(r.status, ==, 0);
  double loss = 0, ppl = 0;
  char tail = 0;
  g_assert_cmpint(
      sscanf(r.out, "loss %lf perplexity %lf over %ld tokens\n%c", &loss, &ppl, tokens, &tail), ==,
      3);
  g_assert_true(isfinite(loss) && loss > 0);
  g_assert_cmpfloat(fabs(ppl - exp(loss)), <=, 1e-5 * ppl + 1e-6);
  run_result_clear(&r);
  return loss;
}

static void test_gpt_perplexity(void)
{
  g_autofree char *root = tu_mkdtemp("sample-ppl");
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_autofree char *ckpt = train_two_steps("tiny-gpt", ws);
  /* tiny-gpt's seq_len is 128: 257 bytes are two windows, bytes 0..128 and 128..256 */
  g_autofree char *val = g_build_filename(g_getenv("COHORT_DATA_DIR"), "sample", "val.txt", NULL);
  g_autofree char *text = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(val, &text, &len, NULL));
  g_assert_cmpuint(len, >=, 257);
  long n = 0, n1 = 0, n2 = 0;
  double whole = score(ckpt, root, "whole.txt", text, 257, &n);
  double first = score(ckpt, root, "first.txt", text, 129, &n1);
  double second = score(ckpt, root, "second.txt", text + 128, 129, &n2);
  g_assert_cmpint(n, ==, 256);
  g_assert_cmpint(n1, ==, 128);
  g_assert_cmpint(n2, ==, 128);
  g_assert_cmpfloat(fabs(whole - (first + second) / 2), <=, 2e-6);
  /* the export scores as the checkpoint (no EMA: the same weights) */
  double exported = score(ws, root, "whole.txt", text, 257, &n);
  g_assert_cmpfloat(fabs(exported - whole), <=, 1e-6);

  /* refusals, each naming what is wrong, with a non-zero status */
  g_autofree char *missing = g_build_filename(root, "missing.txt", NULL);
  g_autofree char *empty = g_build_filename(root, "empty.txt", NULL);
  g_autofree char *one = g_build_filename(root, "one.txt", NULL);
  g_assert_true(g_file_set_contents(empty, "", 0, NULL));
  g_assert_true(g_file_set_contents(one, "x", 1, NULL));
  const char *cases[][3] = {
      {missing, NULL, "missing.txt"},
      {empty, NULL, "the file is empty"},
      {one, NULL, "the text is 1 token"},
      {root, NULL, "not a regular file"},
      {one, "data_format=tokens", "trained on token shards and names no tokenizer"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    RunResult r = perplexity(ckpt, cases[i][0], cases[i][1]);
    g_test_message("%s", r.err);
    g_assert_cmpint(r.status, ==, 1);
    g_assert_nonnull(strstr(r.err, cases[i][2]));
    g_assert_cmpstr(r.out, ==, "");
    run_result_clear(&r);
  }
  /* --perplexity without --sample is a bad command line */
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--perplexity"));
  g_ptr_array_add(args, g_strdup(one));
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, ==, 2);
  g_assert_nonnull(strstr(r.err, "--sample"));
  run_result_clear(&r);
  tu_rm_rf(root);
}

/* A llama checkpoint continues the prompt, greedily the same way twice. */
static void test_llama_text(void)
{
  g_autofree char *root = tu_mkdtemp("sample-llama");
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_autofree char *ckpt = train_two_steps("tiny-llama", ws);
  char *outs[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
    const char *argv[] = {"--sample", ckpt,
                          "--set",    "sample_temperature=0",
                          "--set",    "sample_prompt=It is",
                          "--set",    "sample_tokens=20",
                          NULL};
    for (guint k = 0; argv[k]; k++)
      g_ptr_array_add(args, g_strdup(argv[k]));
    RunResult r = run_train(args, NULL);
    g_assert_cmpint(r.status, ==, 0);
    g_assert_true(g_str_has_prefix(r.out, "It is"));
    outs[i] = g_strdup(r.out);
    run_result_clear(&r);
  }
  g_assert_cmpstr(outs[0], ==, outs[1]);
  g_free(outs[0]), g_free(outs[1]);
  tu_rm_rf(root);
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
  g_autofree char *text = g_build_filename(root, "text.txt", NULL);
  g_assert_true(g_file_set_contents(text, "some text", -1, NULL));
  RunResult p = perplexity(ckpt, text, NULL);
  g_assert_cmpint(p.status, ==, 1);
  g_assert_nonnull(strstr(p.err, "resnet model does not model text"));
  run_result_clear(&p);
  tu_rm_rf(root);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/sample-saved/gpt-text", test_gpt_text);
  g_test_add_func("/sample-saved/gpt-perplexity", test_gpt_perplexity);
  g_test_add_func("/sample-saved/llama-text", test_llama_text);
  g_test_add_func("/sample-saved/dit-image", test_dit_image);
  g_test_add_func("/sample-saved/resnet-refused", test_resnet_refused);
  return g_test_run();
}
