/* The llama family's Hugging Face folders (engine/models/llama-io.c, engine/model/hf-weights.c):
 * folders made here by hand (tests/llama-folder.h) in BF16 shards with their index and in F16
 * load value for value; hostile config.json and index files are refused with a message naming
 * the file and the key or tensor; and the tiny-llama preset trains with cohort-train, its export
 * (config.json in transformers' form) read back by Cohort and by the float64 PyTorch reference
 * (tests/torch_llama_ref.py, strict names) to the same loss. */
#include <glib/gstdio.h>
#include <math.h>

#include "engine/model/model-io.h"
#include "engine/models/llama.h"
#include "llama-folder.h"
#include "test-util.h"
#include "torch-ref.h"
#include "train-run.h"

/* Qwen3: q/k norms, grouped-query attention, head_dim above hidden / heads, a separate head. */
static const char *const qwen3[] = {"model=llama",        "architecture=Qwen3ForCausalLM",
                                    "n_layer=2",          "n_embd=16",
                                    "n_head=4",           "num_key_value_heads=2",
                                    "head_dim=8",         "intermediate_size=24",
                                    "vocab_size=40",      "seq_len=8",
                                    "rope_theta=1000000", "tie_word_embeddings=false",
                                    "data_format=tokens", NULL};
/* Llama with attention_bias (q, k, v and o biases) and a tied head. */
static const char *const llama[] = {"model=llama",
                                    "n_layer=1",
                                    "n_embd=24",
                                    "n_head=3",
                                    "intermediate_size=32",
                                    "vocab_size=30",
                                    "seq_len=8",
                                    "attention_bias=true",
                                    "data_format=tokens",
                                    NULL};

/* A folder of `sets`' model in `dt`, `shards` shards (0: one file); its values in *made. */
static char *make_folder(const char *const *sets, LfDtype dt, guint shards, CohortModel **made)
{
  char *dir = tu_mkdtemp("llama-hf");
  CohortModel *m = lf_model(sets);
  lf_fill(m, 7, 0);
  lf_write_weights(dir, m, dt, shards);
  lf_write_config(dir, lf_config(sets));
  *made = m;
  return dir;
}

static void check_loads(const char *const *sets, LfDtype dt, guint shards)
{
  g_autoptr(CohortModel) want = NULL;
  g_autofree char *dir = make_folder(sets, dt, shards, &want);
  g_autoptr(CohortModel) got = lf_model(sets);
  g_autoptr(GPtrArray) notes = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_model_import(got, dir, notes, &error));
  g_assert_no_error(error);
  g_assert_cmpuint(got->n_params, ==, want->n_params);
  g_assert_cmpmem(got->params, got->n_params * 4, want->params, want->n_params * 4);
  if (shards > 0) {
    g_assert_cmpuint(notes->len, ==, 1);
    g_autofree char *read = g_strdup_printf("read %u shards", shards);
    g_assert_nonnull(strstr(notes->pdata[0], read));
  }
  tu_rm_rf(dir);
}

static void test_bf16_shards(void)
{
  check_loads(qwen3, LF_BF16, 3);
}

static void test_f16(void)
{
  check_loads(llama, LF_F16, 0);
}

/* config.json with one change ("key=JSON", or "-key" to remove it) must be refused with a
 * message that holds config.json's path and `expect`. */
static void refused_config(const char *change, const char *expect)
{
  g_autoptr(CohortModel) made = NULL;
  g_autofree char *dir = make_folder(qwen3, LF_F32, 0, &made);
  JsonObject *o = lf_config(qwen3);
  if (change[0] == '-') {
    json_object_remove_member(o, change + 1);
  } else {
    g_auto(GStrv) kv = g_strsplit(change, "=", 2);
    JsonNode *v = json_from_string(kv[1], NULL);
    g_assert_nonnull(v);
    json_object_set_member(o, kv[0], v);
  }
  lf_write_config(dir, o);
  g_autoptr(CohortModel) m = lf_model(qwen3);
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_model_import(m, dir, NULL, &error));
  g_assert_nonnull(error);
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  if (!strstr(error->message, path) || !strstr(error->message, expect))
    g_error("%s: expected \"%s\" and the path in: %s", change, expect, error->message);
  g_test_message("%s -> %s", change, error->message);
  for (size_t k = 0; k < m->n_params; k++) /* nothing was loaded */
    g_assert_cmpfloat(m->params[k], ==, 0.0f);
  tu_rm_rf(dir);
}

static void test_hostile_config(void)
{
  refused_config("hidden_size=1000000000", "key \"hidden_size\": 1000000000 is not allowed");
  refused_config("num_hidden_layers=-1", "key \"num_hidden_layers\": -1");
  refused_config("num_key_value_heads=3", "key \"num_key_value_heads\": 3 does not divide");
  refused_config("head_dim=7", "key \"head_dim\": 7");
  refused_config("hidden_size=\"16\"", "key \"hidden_size\": \"16\" is not allowed");
  refused_config("-vocab_size", "key \"vocab_size\" is missing");
  refused_config("architectures=[\"GPT2LMHeadModel\"]", "key \"architectures\"");
  refused_config("hidden_act=\"gelu\"", "key \"hidden_act\"");
  refused_config("num_experts=8", "key \"num_experts\"");
  refused_config("use_sliding_window=true", "key \"use_sliding_window\"");
  refused_config("rope_scaling={\"rope_type\": \"yarn\", \"factor\": 4}",
                 "key \"rope_scaling.rope_type\": \"yarn\"");
  refused_config("rope_scaling={\"rope_type\": \"llama3\", \"factor\": 8}",
                 "key \"rope_scaling.low_freq_factor\" is missing");
  refused_config("rms_norm_eps=-1", "key \"rms_norm_eps\"");
  refused_config("tie_word_embeddings=1", "key \"tie_word_embeddings\"");
  /* a config.json this family reads but that describes another model: the keys to set */
  refused_config("intermediate_size=48", "set intermediate_size=48");
}

/* Edits of a sharded folder's files that must be refused naming `expect`. */
typedef enum { CUT_MISSING_SHARD, CUT_OVERLAP, CUT_UNLISTED, CUT_ESCAPE, CUT_SHAPE } Cut;

static void refused_index(Cut cut, const char *expect)
{
  g_autoptr(CohortModel) m = NULL;
  g_autofree char *dir = make_folder(qwen3, LF_F32, 2, &m);
  g_autofree char *index = g_build_filename(dir, "model.safetensors.index.json", NULL);
  g_autofree char *shard1 = g_build_filename(dir, "model-00001-of-00002.safetensors", NULL);
  g_autofree char *shard2 = g_build_filename(dir, "model-00002-of-00002.safetensors", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(index, &text, NULL, NULL));
  guint last = m->n_tensors - 1, all_but_last[64];
  g_assert_cmpuint(last, <, G_N_ELEMENTS(all_but_last));
  for (guint i = 0; i < last; i++)
    all_but_last[i] = i;
  if (cut == CUT_MISSING_SHARD) {
    g_unlink(shard2);
  } else if (cut == CUT_OVERLAP) { /* shard 1 holds the last tensor too */
    guint half = m->n_tensors / 2;
    all_but_last[half] = last;
    lf_write_st(shard1, m, all_but_last, half + 1, LF_F32);
  } else if (cut == CUT_UNLISTED) { /* the index forgets the last tensor */
    g_autofree char *entry =
        g_strdup_printf(",\"%s\":\"model-00002-of-00002.safetensors\"", m->tensors[last].name);
    char *at = strstr(text, entry);
    g_assert_nonnull(at);
    memmove(at, at + strlen(entry), strlen(at + strlen(entry)) + 1);
    g_assert_true(g_file_set_contents(index, text, -1, NULL));
  } else if (cut == CUT_ESCAPE) {
    g_autofree char *bad =
        g_strdup_printf("{\"weight_map\": {\"%s\": \"../x.safetensors\"}}", m->tensors[0].name);
    g_assert_true(g_file_set_contents(index, bad, -1, NULL));
  } else { /* shard 1's first tensor with a shape the config does not give */
    CohortTensorInfo *t = &m->tensors[0];
    int rows = t->shape[0];
    t->shape[0] = rows - 1, t->numel = (size_t)t->shape[0] * t->shape[1];
    lf_write_st(shard1, m, all_but_last, m->n_tensors / 2, LF_F32);
    t->shape[0] = rows, t->numel = (size_t)rows * t->shape[1];
  }
  g_autoptr(CohortModel) got = lf_model(qwen3);
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_model_import(got, dir, NULL, &error));
  g_assert_nonnull(error);
  if (!strstr(error->message, dir) || !strstr(error->message, expect))
    g_error("cut %d: expected \"%s\" and the folder in: %s", cut, expect, error->message);
  g_test_message("%s", error->message);
  tu_rm_rf(dir);
}

static void test_hostile_index(void)
{
  refused_index(CUT_MISSING_SHARD, "model-00002-of-00002.safetensors, which is missing");
  refused_index(CUT_OVERLAP, "overlapping shards");
  refused_index(CUT_UNLISTED, "which the index does not list");
  refused_index(CUT_ESCAPE, "\"../x.safetensors\" is not allowed");
  refused_index(CUT_SHAPE, "model.embed_tokens.weight");
}

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* The tiny-llama preset, shrunk to seconds, trains from its random initialisation: the loss
 * falls. Its export is a Hugging Face folder: Cohort reads it back (config.json must describe
 * the model) and the reference, built from config.json alone and loading model.safetensors
 * strictly, gets the loss Cohort gets on the same tokens. */
static void test_preset_trains(void)
{
  g_autofree char *ws = tu_mkdtemp("llama-preset");
  g_autofree char *progress = g_build_filename(ws, "progress.jsonl", NULL);
  const char *sets[] = {"n_layer=2",    "n_embd=64",    "seq_len=32",     "intermediate_size=128",
                        "batch_size=8", "max_steps=40", "warmup_steps=4", "eval_every=0",
                        "eval_steps=4", "save_every=0", "threads=1",      NULL};
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--preset"));
  g_ptr_array_add(args, g_strdup("tiny-llama"));
  g_ptr_array_add(args, g_strdup("--quiet"));
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(sets[i]));
  }
  g_ptr_array_add(args, g_strdup_printf("--set=workspace_dir=%s", ws));
  RunResult r = run_train(args, progress);
  if (r.status != 0)
    g_error("cohort-train exited %d: %s", r.status, r.err);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(progress);
  g_autoptr(GArray) loss = tu_event_values(ev, "step", "loss");
  g_assert_cmpuint(loss->len, ==, 40);
  double first = 0, last = 0;
  for (guint i = 0; i < 5; i++)
    first += g_array_index(loss, double, i) / 5, last += g_array_index(loss, double, 35 + i) / 5;
  g_test_message("tiny-llama (2 x 64): mean loss of steps 1-5 %.4f, of steps 36-40 %.4f", first,
                 last);
  g_assert_cmpfloat(last, <, first - 1.0); /* ln 256 = 5.55 at the start; bytes are learnt */

  /* the export, read back: config.json describes the model the preset and the sets make */
  const char *shape[] = {"model=llama",
                         "n_layer=2",
                         "n_embd=64",
                         "seq_len=32",
                         "n_head=4",
                         "num_key_value_heads=2",
                         "intermediate_size=128",
                         "vocab_size=256",
                         NULL};
  g_autoptr(CohortModel) m = lf_model(shape);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_model_import(m, ws, NULL, &error));
  g_assert_no_error(error);
  if (!have_torch()) {
    g_test_message("PyTorch is not importable: the reference's half is skipped");
    tu_rm_rf(ws);
    return;
  }
  enum { NB = 2, NT = 32 };
  int buf[2 + 2 * NB * NT] = {NB, NT};
  const char *text = "The licenses for most software are designed to take away your freedom to "
                     "share and change it.";
  for (int i = 0; i < NB * NT; i++)
    buf[2 + i] = (guchar)text[i % 80], buf[2 + NB * NT + i] = (guchar)text[i % 80 + 1];
  float ours = cohort_llama_forward(m, buf + 2, buf + 2 + NB * NT, NB, NT);
  g_autofree char *inputs = g_build_filename(ws, "inputs.bin", NULL);
  g_assert_true(g_file_set_contents(inputs, (char *)buf, sizeof buf, NULL));
  g_autofree char *config = g_build_filename(ws, "config.json", NULL);
  g_autofree char *weights = g_build_filename(ws, "model.safetensors", NULL);
  const char *ref_args[] = {config, weights, inputs, "forward", NULL};
  g_autofree char *out = torch_ref_run("torch_llama_ref.py", ref_args);
  g_assert_true(g_str_has_prefix(out, "loss "));
  double ref = g_ascii_strtod(out + 5, NULL);
  g_test_message("the export's loss on %d tokens: Cohort %.7f, PyTorch (float64) %.7f", NB * NT,
                 ours, ref);
  g_assert_cmpfloat(fabs(ours - ref), <=, 1e-5 * fabs(ref));
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/llama-hf/import/bf16-shards", test_bf16_shards);
  g_test_add_func("/llama-hf/import/f16", test_f16);
  g_test_add_func("/llama-hf/hostile/config", test_hostile_config);
  g_test_add_func("/llama-hf/hostile/index", test_hostile_index);
  g_test_add_func("/llama-hf/preset-trains", test_preset_trains);
  return g_test_run();
}
