/* --explain's training windows for text through a tokenizer (suite dist): before a run has
 * tokenized the text, estimated from its first MiB's tokens per byte and said to be
 * (train_windows_estimated); once the workspace's token cache holds the tokens, the windows the
 * run trains on, exactly. The sample text (158 kB) is under a MiB, so the estimate reads it
 * whole and misses only what the tokenizing job adds between documents: within 1% here (it
 * counted bytes before: 4.7 times the windows with Qwen3's tokenizer, 1.08 with this small one,
 * 4570 windows of tokens against 4942 of bytes). */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>

#include "engine/progress/explain-json.h"
#include "test-util.h"
#include "tokenizer-fixtures.h"
#include "train-run.h"

static JsonObject *explain(const char *ws, const char *const *extra)
{
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  g_ptr_array_add(args, g_strdup("--explain"));
  RunResult r = run_train(args, NULL);
  if (r.status != 0)
    g_error("--explain exited %d: %s", r.status, r.err);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) node = json_from_string(r.out, &error);
  g_assert_no_error(error);
  run_result_clear(&r);
  return json_object_ref(json_node_get_object(node));
}

static void test_windows(void)
{
  g_autofree char *root = tu_mkdtemp("explain-windows");
  g_autofree char *tokdir = g_build_filename(root, "tok", NULL);
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_assert_cmpint(g_mkdir(tokdir, 0755), ==, 0);
  TinyTok *t = tf_new(5, 200);
  tf_write_vocab_merges(t, tokdir);
  guint vocab = t->tokens->len + 1; /* and <|endoftext|> */
  tf_free(t);
  g_autofree char *tok = g_strdup_printf("tokenizer=%s", tokdir);
  g_autofree char *v = g_strdup_printf("vocab_size=%u", vocab);
  const char *extra[] = {
      "--set",     tok,     "--set",       v,   "--set", "data_format=text", "--set",
      "val_data=", "--set", "max_steps=1", NULL};

  g_autoptr(JsonObject) before = explain(ws, extra);
  g_assert_true(json_object_get_boolean_member(before, COHORT_EXPLAIN_TRAIN_WINDOWS_ESTIMATED));
  gint64 estimate = json_object_get_int_member(before, COHORT_EXPLAIN_TRAIN_WINDOWS);

  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult r = run_train(args, NULL);
  if (r.status != 0)
    g_error("the run exited %d: %s", r.status, r.err);
  run_result_clear(&r);

  g_autoptr(JsonObject) after = explain(ws, extra);
  g_assert_false(json_object_get_boolean_member(after, COHORT_EXPLAIN_TRAIN_WINDOWS_ESTIMATED));
  gint64 exact = json_object_get_int_member(after, COHORT_EXPLAIN_TRAIN_WINDOWS);
  g_autofree char *text =
      g_build_filename(g_getenv("COHORT_DATA_DIR"), "sample", "train.txt", NULL);
  GStatBuf st;
  g_assert_cmpint(g_stat(text, &st), ==, 0);
  gint64 byte_windows = (st.st_size - 1) / 32;
  g_test_message("windows of 32 tokens: estimated %" G_GINT64_FORMAT
                 ", from the cache %" G_GINT64_FORMAT " (of bytes: %" G_GINT64_FORMAT ")",
                 estimate, exact, byte_windows);
  g_assert_cmpint(exact, <, byte_windows);
  g_assert_cmpfloat(fabs((double)(estimate - exact)), <=, 0.01 * (double)exact + 1);
  if (!g_getenv("COHORT_KEEP"))
    tu_rm_rf(root);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/explain-windows/tokenized-text", test_windows);
  return g_test_run();
}
