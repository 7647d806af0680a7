/* A Llama-family folder as the text encoder (engine/models/text-encoder.h; suite dist), on tiny
 * Hugging Face folders the test makes (tests/llama-folder.h) with a tiny byte-level BPE
 * tokenizer (tests/tokenizer-fixtures.h): the hidden states of a caption equal the float64
 * PyTorch reference's hidden_states[layer] (tests/torch_llama_ref.py; a middle layer, raw, and
 * -1, after the final norm), the post-processor's BOS is added and kept when a long caption is
 * cut, the fingerprint follows the folder's contents (a changed weight changes it, a moved
 * folder does not), a short training with the folder as encoder runs and re-encodes its captions
 * after a weight changes, and bad folders and layers fail naming the key, the value and what is
 * allowed. */
#include <glib/gstdio.h>
#include <math.h>
#include <stdlib.h>

#include "data/image-decode.h"
#include "engine/models/text-encoder.h"
#include "llama-folder.h"
#include "test-util.h"
#include "tokenizer-fixtures.h"
#include "torch-ref.h"

/* Qwen3: per-head q/k norms, grouped-query attention, head_dim above hidden / heads. */
static const char *const qwen3[] = {"model=llama",        "architecture=Qwen3ForCausalLM",
                                    "n_layer=3",          "n_embd=16",
                                    "n_head=4",           "num_key_value_heads=2",
                                    "head_dim=8",         "intermediate_size=24",
                                    "vocab_size=300",     "seq_len=16",
                                    "rope_theta=1000000", "tie_word_embeddings=false",
                                    "data_format=tokens", NULL};
/* Llama with a tied head, for the BOS of a TemplateProcessing post-processor. */
static const char *const llama[] = {"model=llama",
                                    "n_layer=2",
                                    "n_embd=16",
                                    "n_head=2",
                                    "intermediate_size=32",
                                    "vocab_size=290",
                                    "seq_len=16",
                                    "tie_word_embeddings=true",
                                    "data_format=tokens",
                                    NULL};

/* The tiny tokenizer's post-processors: Qwen's adds nothing, Llama 3's a BOS before the text
 * (here <|endoftext|>, the first special: id 256 + merges). */
static const char bytelevel_post[] = "\"post_processor\": {\"type\": \"ByteLevel\"},";

/* A folder of `sets`' model (values from `seed`), its config.json and the tiny tokenizer, with
 * a BOS-adding post-processor when `bos`. */
static char *make_folder(const char *const *sets, guint32 seed, gboolean bos)
{
  char *dir = tu_mkdtemp("text-encoder");
  g_autoptr(CohortModel) m = lf_model(sets);
  lf_fill(m, seed, 0);
  lf_write_weights(dir, m, LF_F32, 0);
  lf_write_config(dir, lf_config(sets));
  TinyTok *t = tf_new(3, 8);
  g_autofree char *json = tf_tokenizer_json(t, FALSE);
  if (bos) {
    g_autofree char *post = g_strdup_printf(
        "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
        "{\"id\": \"<|endoftext|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
        "\"type_id\": 0}}], \"pair\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
        "{\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": "
        "{\"<|endoftext|>\": {\"id\": \"<|endoftext|>\", \"ids\": [%u], \"tokens\": "
        "[\"<|endoftext|>\"]}}},",
        t->tokens->len);
    char *at = strstr(json, bytelevel_post);
    g_assert_nonnull(at);
    *at = '\0';
    char *with = g_strconcat(json, post, at + strlen(bytelevel_post), NULL);
    g_free(json);
    json = with;
  }
  tf_free(t);
  g_autofree char *path = g_build_filename(dir, "tokenizer.json", NULL);
  g_assert_true(g_file_set_contents(path, json, -1, NULL));
  return dir;
}

/* The ids of "hello world" by the tiny tokenizer's merges: "hello" and " world" are tokens. */
static void hello_world_ids(int ids[2])
{
  TinyTok *t = tf_new(3, 8);
  ids[0] = tf_find(t, (const guint8 *)"hello", 5);
  ids[1] = tf_find(t, (const guint8 *)" world", 6);
  g_assert_cmpint(ids[0], >=, 256);
  g_assert_cmpint(ids[1], >=, 256);
  tf_free(t);
}

static CohortTextEncoder *open_encoder(const char *dir, int layer, int max_tokens, GError **error)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_free(cfg->text_encoder);
  cfg->text_encoder = g_strdup(dir);
  cfg->text_encoder_layer = layer;
  cfg->max_text_tokens = max_tokens;
  return cohort_text_encoder_open(cohort_backend_cpu(), cfg, error);
}

/* hidden_states[layer] of `ids` by the PyTorch reference, [n, width] doubles. */
static double *reference(const char *dir, const int *ids, int n, int layer, int width)
{
  g_autofree int *buf = g_new0(int, 2 + 2 * n);
  buf[0] = 1, buf[1] = n;
  memcpy(buf + 2, ids, n * sizeof(int));
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_assert_true(
      g_file_set_contents(inputs, (char *)buf, (gssize)((2 + 2 * n) * sizeof(int)), NULL));
  g_autofree char *config = g_build_filename(dir, "config.json", NULL);
  g_autofree char *weights = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *k = g_strdup_printf("%d", layer);
  const char *args[] = {config, weights, inputs, "hidden", k, NULL};
  g_autofree char *out = torch_ref_run("torch_llama_ref.py", args);
  g_assert_true(g_str_has_prefix(out, "hidden "));
  g_auto(GStrv) vals = g_strsplit(g_strstrip(out + 7), " ", -1);
  g_assert_cmpuint(g_strv_length(vals), ==, (guint)(n * width));
  double *r = g_new(double, n *width);
  for (int i = 0; i < n * width; i++)
    r[i] = g_ascii_strtod(vals[i], NULL);
  g_unlink(inputs);
  return r;
}

static gboolean have_torch(void)
{
  if (g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
      system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0)
    return TRUE;
  g_test_skip("PyTorch is not importable by /usr/bin/python3: no reference to compare with");
  return FALSE;
}

/* The encoder's states of "hello world" at `layer` against the reference's: the largest error
 * relative to the largest reference value. */
static double check_layer(const char *dir, int layer, const int *ids, int n)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTextEncoder) e = open_encoder(dir, layer, 16, &error);
  g_assert_no_error(error);
  int D = cohort_text_encoder_width(e), len = 0;
  g_assert_cmpint(D, ==, 16);
  g_autofree float *got = NULL;
  g_assert_true(cohort_text_encoder_encode(e, "hello world", &got, &len, &error));
  g_assert_cmpint(len, ==, n);
  g_autofree double *want = reference(dir, ids, n, layer, D);
  double err = 0, scale = 0;
  for (int i = 0; i < n * D; i++) {
    err = fmax(err, fabs(got[i] - want[i]));
    scale = fmax(scale, fabs(want[i]));
  }
  g_test_message("layer %d: max |Cohort - PyTorch| %.3g, max |PyTorch| %.3g", layer, err, scale);
  g_assert_cmpfloat(scale, >, 0.1);
  g_assert_cmpfloat(err, <=, 1e-4 * scale);
  return err / scale;
}

/* Qwen3: no BOS; layer 2 of 3 (raw) and -1 (after model.norm) as transformers gives them. */
static void test_qwen3_reference(void)
{
  if (!have_torch())
    return;
  g_autofree char *dir = make_folder(qwen3, 11, FALSE);
  int ids[2];
  hello_world_ids(ids);
  check_layer(dir, 2, ids, 2);
  check_layer(dir, -1, ids, 2);
  tu_rm_rf(dir);
}

/* Llama with a BOS post-processor: <|endoftext|> then the text, the default layer -2; a cut
 * caption keeps the BOS and loses text tokens, and its rows are the full caption's first (the
 * attention is causal). */
static void test_llama_bos(void)
{
  g_autofree char *dir = make_folder(llama, 5, TRUE);
  int hw[2];
  hello_world_ids(hw);
  TinyTok *t = tf_new(3, 8);
  int ids[3] = {(int)t->tokens->len, hw[0], hw[1]};
  tf_free(t);
  if (have_torch())
    check_layer(dir, -2, ids, 3);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTextEncoder) full = open_encoder(dir, -2, 16, &error);
  g_autoptr(CohortTextEncoder) cut = open_encoder(dir, -2, 2, &error);
  g_assert_no_error(error);
  g_autofree float *a = NULL, *b = NULL, *empty = NULL;
  int na = 0, nb = 0, ne = 0;
  g_assert_true(cohort_text_encoder_encode(full, "hello world", &a, &na, &error));
  g_assert_true(cohort_text_encoder_encode(cut, "hello world", &b, &nb, &error));
  g_assert_true(cohort_text_encoder_encode(full, "", &empty, &ne, &error));
  g_assert_cmpint(na, ==, 3);
  g_assert_cmpint(nb, ==, 2);
  g_assert_cmpint(ne, ==, 1); /* the BOS alone, as tokenizer("") gives */
  g_assert_cmpmem(b, 2 * 16 * sizeof(float), a, 2 * 16 * sizeof(float));
  g_assert_cmpmem(empty, 16 * sizeof(float), a, 16 * sizeof(float));
  /* the fingerprints differ with max_text_tokens */
  g_assert_cmpstr(cohort_text_encoder_fingerprint(full), !=, cohort_text_encoder_fingerprint(cut));
  tu_rm_rf(dir);
}

/* The fingerprint follows the contents: a copy elsewhere has the same, one changed weight (same
 * size, same names) another; so does another layer. */
static void test_fingerprint(void)
{
  g_autofree char *dir = make_folder(qwen3, 11, FALSE);
  g_autofree char *copy = tu_mkdtemp("text-encoder-copy");
  g_autofree char *cp = g_strdup_printf("cp -r %s/. %s", dir, copy);
  g_assert_cmpint(system(cp), ==, 0);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTextEncoder) a = open_encoder(dir, -2, 16, &error);
  g_autoptr(CohortTextEncoder) b = open_encoder(copy, -2, 16, &error);
  g_autoptr(CohortTextEncoder) c = open_encoder(dir, -1, 16, &error);
  g_assert_no_error(error);
  g_test_message("%s", cohort_text_encoder_fingerprint(a));
  g_assert_cmpstr(cohort_text_encoder_fingerprint(a), ==, cohort_text_encoder_fingerprint(b));
  g_assert_cmpstr(cohort_text_encoder_fingerprint(a), !=, cohort_text_encoder_fingerprint(c));
  /* the copy's last block (which layer -2 does not even read) changes by one value */
  g_autoptr(CohortModel) m = lf_model(qwen3);
  lf_fill(m, 11, 0);
  const CohortTensorInfo *t = cohort_model_find_tensor(m, "model.layers.2.mlp.down_proj.weight");
  g_assert_nonnull(t);
  m->params[t->offset] += 0.25f;
  lf_write_weights(copy, m, LF_F32, 0);
  g_autoptr(CohortTextEncoder) d = open_encoder(copy, -2, 16, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(cohort_text_encoder_fingerprint(a), !=, cohort_text_encoder_fingerprint(d));
  tu_rm_rf(dir);
  tu_rm_rf(copy);
}

/* Opening fails with `sets` folder `dir` at `layer`; the message must hold each of `want`. */
static void check_refused(const char *dir, int layer, const char *const *want)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTextEncoder) e = open_encoder(dir, layer, 16, &error);
  g_assert_null(e);
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  for (guint i = 0; want[i]; i++)
    if (!strstr(error->message, want[i]))
      g_error("\"%s\" lacks \"%s\"", error->message, want[i]);
}

static void test_bad_folders(void)
{
  check_refused("/nonexistent/qwen3", -2,
                (const char *[]){"\"text_encoder\"", "/nonexistent/qwen3", "no such folder",
                                 "allowed: \"builtin\" or a Hugging Face", NULL});
  g_autofree char *dir = make_folder(qwen3, 11, FALSE);
  check_refused(
      dir, 4, (const char *[]){"\"text_encoder_layer\": 4", "(3 blocks)", "allowed: 1 to 3", NULL});
  check_refused(dir, -4, (const char *[]){"\"text_encoder_layer\": -4", "or -1 to -3", NULL});
  g_autofree char *tok = g_build_filename(dir, "tokenizer.json", NULL);
  g_autofree char *moved = g_build_filename(dir, "tokenizer.json.away", NULL);
  g_assert_cmpint(g_rename(tok, moved), ==, 0);
  check_refused(dir, -2, (const char *[]){"\"text_encoder\"", "has no tokenizer.json", NULL});
  g_assert_cmpint(g_rename(moved, tok), ==, 0);
  g_autofree char *config = g_build_filename(dir, "config.json", NULL);
  g_assert_true(g_file_set_contents(
      config, "{\"architectures\": [\"GPT2LMHeadModel\"], \"hidden_size\": 16}", -1, NULL));
  check_refused(
      dir, -2,
      (const char *[]){"\"text_encoder\"", "GPT2LMHeadModel", "allowed: LlamaForCausalLM", NULL});
  g_unlink(config);
  check_refused(dir, -2, (const char *[]){"\"text_encoder\"", "has no config.json", NULL});
  tu_rm_rf(dir);
}

/* ---- a short training with the folder as encoder (cohort-train) ---- */

static const char *const base_sets[] = {
    "model=dit",
    "data_format=images",
    "val_data=",
    "image_size=8",
    "image_channels=1",
    "patch_size=2",
    "n_layer=1",
    "n_head=2",
    "n_embd=16",
    "max_text_tokens=8",
    "cfg_dropout=0.3",
    "warmup_steps=1",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "batch_size=4",
    "timeout_s=60",
    NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

/* Four 8×8 images, each half white on one side, with its caption beside it. */
static char *make_images(void)
{
  static const char *const captions[] = {"white top", "white bottom", "white left", "white right"};
  char *dir = tu_mkdtemp("text-encoder-data");
  for (int side = 0; side < 4; side++) {
    guint8 px[64];
    for (int y = 0; y < 8; y++)
      for (int x = 0; x < 8; x++) {
        gboolean lit = side == 0 ? y < 4 : side == 1 ? y >= 4 : side == 2 ? x < 4 : x >= 4;
        px[y * 8 + x] = lit ? 230 : 20;
      }
    g_autofree char *png = g_strdup_printf("%s/%d.png", dir, side);
    g_autofree char *txt = g_strdup_printf("%s/%d.txt", dir, side);
    g_assert_true(cohort_image_write_png(png, px, 8, 8, 1, NULL));
    g_assert_true(g_file_set_contents(txt, captions[side], -1, NULL));
  }
  return dir;
}

/* Four steps in workspace `ws` (kept, --overwrite) with text_encoder `folder`: the log line of
 * the captions' encoding; every loss must be finite. */
static char *folder_run(const char *ws, const char *data, const char *folder)
{
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autofree char *s_data = g_strdup_printf("train_data=%s", data);
  g_autofree char *s_enc = g_strdup_printf("text_encoder=%s", folder);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--overwrite"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  add_sets(argv, ws, (const char *[]){s_data, s_enc, "max_steps=4", NULL});
  Result r = run(argv, events, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  g_autoptr(GArray) losses = tu_event_values(ev, "step", "loss");
  g_assert_cmpuint(losses->len, ==, 4);
  for (guint i = 0; i < losses->len; i++)
    g_assert_true(isfinite(g_array_index(losses, double, i)));
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = ev->pdata[i];
    const char *msg =
        json_object_has_member(o, "message") ? json_object_get_string_member(o, "message") : NULL;
    if (msg && g_str_has_prefix(msg, "train_data: ") && strstr(msg, "distinct captions"))
      return g_strdup(msg);
  }
  g_error("no log line of the captions' encoding in %s", events);
}

/* Training reads the folder's encoder; the cache serves the next run, and a changed weight of
 * the folder makes every caption new. */
static void test_trains(void)
{
  g_autofree char *folder = make_folder(qwen3, 11, FALSE);
  g_autofree char *data = make_images();
  g_autofree char *ws = tu_mkdtemp("text-encoder-ws");
  g_autofree char *a = folder_run(ws, data, folder);
  g_test_message("%s", a);
  g_assert_nonnull(strstr(a, "5 distinct captions: 5 encoded, 0 from the cache"));
  g_assert_nonnull(strstr(a, "Qwen3ForCausalLM folder sha256"));
  g_autofree char *b = folder_run(ws, data, folder);
  g_assert_nonnull(strstr(b, "5 distinct captions: 0 encoded, 5 from the cache"));
  g_autoptr(CohortModel) m = lf_model(qwen3);
  lf_fill(m, 11, 0);
  const CohortTensorInfo *t = cohort_model_find_tensor(m, "model.embed_tokens.weight");
  m->params[t->offset + 7] += 0.25f;
  lf_write_weights(folder, m, LF_F32, 0);
  g_autofree char *c = folder_run(ws, data, folder);
  g_test_message("%s", c);
  g_assert_nonnull(strstr(c, "5 distinct captions: 5 encoded, 0 from the cache"));
  tu_rm_rf(ws);
  tu_rm_rf(data);
  tu_rm_rf(folder);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/text-encoder/qwen3-reference", test_qwen3_reference);
  g_test_add_func("/text-encoder/llama-bos", test_llama_bos);
  g_test_add_func("/text-encoder/fingerprint", test_fingerprint);
  g_test_add_func("/text-encoder/bad-folders", test_bad_folders);
  g_test_add_func("/text-encoder/trains", test_trains);
  return g_test_run();
}
