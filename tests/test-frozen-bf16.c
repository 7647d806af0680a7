/* frozen_dtype bf16 through cohort-train (suite dist, loopback only; docs/finetuning.md "The
 * frozen base in bf16"):
 *  - the referee: a run storing its frozen base in bf16 equals, bit for bit, a run storing
 *    it in fp32 whose base was rounded to bf16 first (the matrices and embedding tables;
 *    norms and biases untouched), on gpt, dit and resnet; its export is that rounded base,
 *    and its merged model the rounded base + the adapter;
 *  - 2 ranks × batch 2 = 1 rank × batch 4 with the base in bf16 (and with ZeRO stage 1);
 *  - a resume ends byte for byte as a run that never stopped, and --sample's loader has the
 *    rounded base from the workspace and from a checkpoint;
 *  - --explain's memory plan counts the frozen base at 2 bytes a stored value;
 *  - what it does not combine with is refused, naming the key. */
#include <string.h>

#include <gio/gio.h>

#include "bf16-ref.h"
#include "cohort-build-config.h"
#include "engine/model/frozen-store.h"
#include "engine/model/safetensors.h"
#include "engine/train/sample-saved.h"
#include "test-util.h"

static const char *const base_sets[] = {
    "n_layer=2",    "n_head=2",     "n_embd=32",      "seq_len=32",    "warmup_steps=1",
    "eval_every=0", "eval_steps=2", "sample_every=0", "save_every=0",  "threads=1",
    "timeout_s=20", "lora_rank=4",  "lora_alpha=8",   "finetune=lora", "precision=bf16",
    "batch_size=2", NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

static gboolean same_file(const char *a, const char *b, const char *rel)
{
  g_autoptr(GBytes) fa = ddp_export_bytes(a, rel);
  g_autoptr(GBytes) fb = ddp_export_bytes(b, rel);
  return g_bytes_equal(fa, fb);
}

/* The parameters of `rel` in both workspaces are equal, bit for bit. A ResNet's BatchNorm
 * statistics are left out: the run on the exported base imported them moved by the first run. */
static gboolean same_params(const char *a, const char *b, const char *rel)
{
  g_autofree char *pa = g_build_filename(a, rel, NULL), *pb = g_build_filename(b, rel, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) fa = cohort_safetensors_open(pa, &error);
  g_assert_no_error(error);
  g_autoptr(CohortStFile) fb = cohort_safetensors_open(pb, &error);
  g_assert_no_error(error);
  for (const char *const *name = cohort_safetensors_names(fa); *name; name++) {
    if (strstr(*name, ".running_") || strstr(*name, "num_batches_tracked"))
      continue;
    int64_t shape[8];
    int nd = cohort_safetensors_shape(fa, *name, shape);
    gsize n = 1;
    for (int d = 0; d < nd; d++)
      n *= (gsize)shape[d];
    g_autofree float *x = g_new(float, n), *y = g_new(float, n);
    g_assert_true(cohort_safetensors_read_f32(fa, *name, nd, shape, x, &error));
    if (!cohort_safetensors_read_f32(fb, *name, nd, shape, y, &error) ||
        memcmp(x, y, n * sizeof(float)) != 0)
      return FALSE;
  }
  return TRUE;
}

/* The stored values the run's log reports (its "frozen_dtype bf16: N frozen values" line). */
static gint64 logged_stored(GPtrArray *events)
{
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    const char *msg =
        json_object_has_member(o, "message") ? json_object_get_string_member(o, "message") : NULL;
    if (msg && g_str_has_prefix(msg, "frozen_dtype bf16: "))
      return g_ascii_strtoll(msg + strlen("frozen_dtype bf16: "), NULL, 10);
  }
  return -1;
}

/* `got` (the bf16 run's export) holds `plain`'s (the fp32 run's) tensors with those of two or
 * more dimensions rounded to bf16 and the rest (and the buffer `buffer`, a DiT's fixed position
 * embedding, which is no parameter) as they are; returns how many values were rounded. */
static gint64 check_rounded(const char *got_path, const char *plain_path, const char *buffer)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) g = cohort_safetensors_open(got_path, &error);
  g_assert_no_error(error);
  g_autoptr(CohortStFile) p = cohort_safetensors_open(plain_path, &error);
  g_assert_no_error(error);
  gint64 rounded = 0;
  guint changed = 0;
  for (const char *const *name = cohort_safetensors_names(p); *name; name++) {
    int64_t shape[8];
    int nd = cohort_safetensors_shape(p, *name, shape);
    gsize n = 1;
    for (int d = 0; d < nd; d++)
      n *= (gsize)shape[d];
    g_autofree float *a = g_new(float, n), *b = g_new(float, n);
    g_assert_true(cohort_safetensors_read_f32(p, *name, nd, shape, a, &error));
    g_assert_true(cohort_safetensors_read_f32(g, *name, nd, shape, b, &error));
    gboolean differs = FALSE;
    for (gsize i = 0; i < n; i++) {
      float want = nd >= 2 && g_strcmp0(*name, buffer) != 0 ? ref_round(a[i]) : a[i];
      if (memcmp(&want, &b[i], sizeof want) != 0)
        g_error("%s: %s[%zu] is %.9g, the rounded base's is %.9g", got_path, *name, i, b[i], want);
      differs |= b[i] != a[i];
    }
    rounded += nd >= 2 && g_strcmp0(*name, buffer) != 0 ? (gint64)n : 0;
    changed += differs;
  }
  g_assert_cmpuint(changed, >, 0); /* the rounding did something: the check can fail */
  return rounded;
}

/* The referee on one config: A stores its base in bf16; C is the fp32 run of the same config,
 * whose base A's export must be rounded; B stores in fp32 the base A exported: A and B end
 * with the same adapters (and merged model), byte for byte, and differ from C's. */
static void referee(const char *family, const char *const *sets, gint64 want_stored,
                    const char *buffer)
{
  g_autoptr(GPtrArray) a_sets = g_ptr_array_new(), b_sets = g_ptr_array_new();
  g_autoptr(GPtrArray) c_sets = g_ptr_array_new();
  g_autofree char *wa = tu_mkdtemp("fbf-a"), *wb = tu_mkdtemp("fbf-b"), *wc = tu_mkdtemp("fbf-c");
  g_autofree char *a_model = g_build_filename(wa, "model.safetensors", NULL);
  g_autofree char *c_model = g_build_filename(wc, "model.safetensors", NULL);
  g_autofree char *init = g_strconcat("init_from=", a_model, NULL);
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(a_sets, (gpointer)sets[i]);
    g_ptr_array_add(b_sets, (gpointer)sets[i]);
    g_ptr_array_add(c_sets, (gpointer)sets[i]);
  }
  g_ptr_array_add(a_sets, "frozen_dtype=bf16");
  g_ptr_array_add(b_sets, "frozen_dtype=fp32");
  g_ptr_array_add(b_sets, init);
  g_ptr_array_add(c_sets, "frozen_dtype=fp32");
  g_ptr_array_add(a_sets, NULL);
  g_ptr_array_add(b_sets, NULL);
  g_ptr_array_add(c_sets, NULL);
  g_autoptr(GPtrArray) ea = ddp_train_events(wa, 1, (const char *const *)a_sets->pdata, NULL);
  g_autoptr(GPtrArray) ec = ddp_train_events(wc, 1, (const char *const *)c_sets->pdata, NULL);
  g_autoptr(GPtrArray) eb = ddp_train_events(wb, 1, (const char *const *)b_sets->pdata, NULL);
  gint64 rounded = check_rounded(a_model, c_model, buffer);
  /* every parameter of two or more dimensions is frozen here (the adapters learn) */
  g_assert_cmpint(logged_stored(ea), ==, rounded);
  g_assert_cmpint(want_stored < 0 ? rounded : want_stored, ==, rounded);
  g_assert_cmpint(logged_stored(eb), ==, -1);
  g_autoptr(GArray) la = tu_event_values(ea, "step", "loss");
  g_autoptr(GArray) lb = tu_event_values(eb, "step", "loss");
  g_assert_cmpuint(la->len, >, 0);
  g_assert_cmpuint(la->len, ==, lb->len);
  for (guint i = 0; i < la->len; i++)
    g_assert_cmpfloat(g_array_index(la, double, i), ==, g_array_index(lb, double, i));
  const char *adapter = "adapter/adapter_model.safetensors";
  g_assert_true(same_file(wa, wb, adapter));
  /* gpt: the embedding lookups read the rounded tables, so the adapters learn differently
   * (a DiT's class table reaches the loss only through zero-initialised adaLN products,
   * whose rounded operands hide the difference in a few steps) */
  if (g_str_equal(family, "gpt") || g_str_equal(family, "llama"))
    g_assert_false(same_file(wa, wc, adapter));
  g_assert_true(same_params(wa, wb, "model.safetensors"));
  g_assert_true(same_params(wa, wb, "merged/model.safetensors"));
  g_test_message("%s: %" G_GINT64_FORMAT " values stored in bf16; adapters, export and merged "
                 "model equal the rounded-base run's",
                 family, rounded);
  tu_rm_rf(wa);
  tu_rm_rf(wb);
  tu_rm_rf(wc);
}

static void test_referee_gpt(void)
{
  /* dropout on the adapters, the merge, 4 steps */
  const char *sets[] = {"max_steps=4", "lora_dropout=0.1", "merge_adapter=true", NULL};
  /* wte 256×32, wpe 32×32, per block c_attn 32×96, c_proj 32×32, c_fc 32×128, c_proj 128×32 */
  referee("gpt", sets, 256 * 32 + 32 * 32 + 2 * (32 * 96 + 32 * 32 + 2 * 32 * 128), NULL);
}

static void test_referee_llama(void)
{
  const char *sets[] = {"model=llama",
                        "architecture=Qwen3ForCausalLM",
                        "tie_word_embeddings=false",
                        "num_key_value_heads=1",
                        "intermediate_size=48",
                        "vocab_size=256",
                        "data_format=text",
                        "max_steps=4",
                        "lora_dropout=0.1",
                        "merge_adapter=true",
                        NULL};
  /* embed_tokens and lm_head 256×32; per block q_proj and o_proj 32×32, k_proj and v_proj 16×32
   * (one key/value head of 16), gate_proj and up_proj 48×32, down_proj 32×48 */
  referee("llama", sets, 2 * 256 * 32 + 2 * (2 * 32 * 32 + 2 * 16 * 32 + 3 * 48 * 32), NULL);
}

static void test_referee_images(void)
{
  const char *dit[] = {"model=dit",
                       "data_format=images",
                       "train_data=builtin:glyphs/train",
                       "val_data=",
                       "image_size=8",
                       "image_channels=1",
                       "patch_size=2",
                       "cfg_dropout=0.2",
                       "max_steps=3",
                       "merge_adapter=true",
                       NULL};
  /* per block qkv 32×96, proj 32×32, fc1 32×128, fc2 128×32, adaLN 32×192; the final layer's
   * adaLN 32×64 and linear 32×4; the timestep MLP 256×32 and 32×32; the patch kernel 32×1×2×2;
   * the class table (36 glyph classes + the null class) × 32 */
  referee("dit", dit,
          2 * (32 * 96 + 32 * 32 + 2 * 32 * 128 + 32 * 192) + 32 * 64 + 32 * 4 + 256 * 32 +
              32 * 32 + 32 * 4 + 37 * 32,
          "pos_embed");
  const char *resnet[] = {"model=resnet",
                          "data_format=images",
                          "train_data=builtin:glyphs/train",
                          "val_data=",
                          "image_size=16",
                          "n_layer=8",
                          "resnet_width=8",
                          "max_steps=3",
                          "merge_adapter=true",
                          NULL};
  referee("resnet", resnet, -1, NULL);
}

static GArray *adapter_weights(const char *ws)
{
  g_autofree char *path = g_build_filename(ws, "adapter", "adapter_model.safetensors", NULL);
  return tu_read_weights(path);
}

/* 2 ranks × batch 2 = 1 rank × batch 4 on the adapters, with the base in bf16 (the bound of
 * tests/test-lora-ddp.c), and the base unchanged. The fp32 library is oneDNN's where the build
 * has it: with OpenBLAS (cpu_blas auto picks it on AVX2 cores) the two splits' sums round
 * differently, and AdamW turns that rounding of the adapters' near-zero first gradients into
 * steps of about lr (measured on a Zen 3: 3.3e-5 here against 4.5e-8 with oneDNN), which is
 * the library's summation order, not the sharding this test is about; without oneDNN the
 * bound is ten times wider. */
static void test_two_ranks(void)
{
  const int steps = 6;
  const double lr = 1e-3;
  const char *lib = COHORT_HAVE_ONEDNN ? "cpu_matmul=onednn" : NULL;
  const char *two[] = {"frozen_dtype=bf16", "max_steps=6", "learning_rate=0.001", lib, NULL};
  const char *one[] = {"frozen_dtype=bf16", "max_steps=6", "learning_rate=0.001",
                       "batch_size=4",      lib,           NULL};
  g_autofree char *w2 = tu_mkdtemp("fbf-2"), *w1 = tu_mkdtemp("fbf-1");
  g_autoptr(GPtrArray) e2 = ddp_train_events(w2, 2, two, NULL);
  g_autoptr(GPtrArray) e1 = ddp_train_events(w1, 1, one, NULL);
  g_assert_cmpint(logged_stored(e2), >, 0);
  g_autoptr(GArray) a2 = adapter_weights(w2), a1 = adapter_weights(w1);
  double diff = max_abs_diff(a2, a1), tol = (COHORT_HAVE_ONEDNN ? 1e-3 : 1e-2) * lr * steps;
  g_test_message("frozen_dtype bf16: 2 ranks × batch 2 vs 1 × 4: max |Δ adapter| = %.3g "
                 "(tolerance %.3g)",
                 diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  g_assert_true(same_file(w2, w1, "model.safetensors"));
  /* and with ZeRO stage 1 (the adapters' optimizer state sharded) */
  const char *zero[] = {"frozen_dtype=bf16", "max_steps=6", "learning_rate=0.001",
                        "zero_stage=1",      lib,           NULL};
  g_autofree char *wz = tu_mkdtemp("fbf-z1");
  g_autoptr(GPtrArray) ez = ddp_train_events(wz, 2, zero, NULL);
  g_autoptr(GArray) az = adapter_weights(wz);
  double dz = max_abs_diff(az, a1);
  g_test_message("frozen_dtype bf16, zero_stage 1: 2 ranks vs 1: max |Δ adapter| = %.3g", dz);
  g_assert_cmpfloat(dz, <=, tol);
  tu_rm_rf(wz);
  tu_rm_rf(w2);
  tu_rm_rf(w1);
}

/* 3 steps, checkpoint, on to 6 = 6 at once, byte for byte (adapter, base, merged model). */
static void test_resume(void)
{
  const char *six[] = {"frozen_dtype=bf16",
                       "lora_dropout=0.1",
                       "merge_adapter=true",
                       "max_steps=6",
                       "save_every=3",
                       "lr_schedule=constant",
                       NULL};
  const char *three[] = {"frozen_dtype=bf16",
                         "lora_dropout=0.1",
                         "merge_adapter=true",
                         "max_steps=3",
                         "save_every=3",
                         "lr_schedule=constant",
                         NULL};
  g_autofree char *wa = tu_mkdtemp("fbf-once"), *wb = tu_mkdtemp("fbf-resumed");
  g_autoptr(GPtrArray) ea = ddp_train_events(wa, 1, six, NULL);
  g_autoptr(GPtrArray) eb0 = ddp_train_events(wb, 1, three, NULL);
  g_autoptr(GPtrArray) eb = ddp_train_events(wb, 1, six, "auto");
  g_assert_cmpint(logged_stored(eb), ==, logged_stored(ea));
  const char *files[] = {"adapter/adapter_model.safetensors", "model.safetensors",
                         "merged/model.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++)
    if (!same_file(wa, wb, files[i]))
      g_error("%s differs after a resume with frozen_dtype bf16", files[i]);
  /* --sample's loader keeps the base whole, rounded as the run had it: from the workspace
   * (whose export is the rounded base) and from a checkpoint (which rebuilds it unrounded) */
  g_autofree char *ckpt = g_build_filename(wa, "checkpoints", "step-00000006", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) mw = cohort_model_load_saved(wa, NULL, 1, NULL, NULL, &error);
  g_assert_no_error(error);
  g_autoptr(CohortModel) mc = cohort_model_load_saved(ckpt, NULL, 1, NULL, NULL, &error);
  g_assert_no_error(error);
  g_assert_null(mw->frozen_store);
  g_assert_false(mc->params_range);
  g_assert_cmpuint(mw->n_params, ==, mc->n_params);
  g_assert_true(memcmp(mw->params, mc->params, mw->n_params * sizeof(float)) == 0);
  tu_rm_rf(wa);
  tu_rm_rf(wb);
}

/* cohort-train --explain's per-rank memory for base_sets and `extra`. */
static JsonObject *explain_per_rank(const char *const *extra)
{
  g_autoptr(JsonObject) mem = ddp_explain_memory(extra);
  return json_object_ref(json_object_get_object_member(mem, "per_rank"));
}

/* The plan's frozen_bytes: 4 bytes a frozen value in fp32, 2 for each stored in bf16. */
static void test_plan(void)
{
  const gint64 stored = 256 * 32 + 32 * 32 + 2 * (32 * 96 + 32 * 32 + 2 * 32 * 128);
  const gint64 flat = 2 * (4 * 32 + 96 + 32 + 128 + 32) + 2 * 32; /* norms and biases */
  const char *fp32[] = {"frozen_dtype=fp32", NULL};
  const char *bf16[] = {"frozen_dtype=bf16", NULL};
  g_autoptr(JsonObject) p32 = explain_per_rank(fp32);
  g_autoptr(JsonObject) p16 = explain_per_rank(bf16);
  g_assert_cmpint(json_object_get_int_member(p32, "frozen_bytes"), ==, 4 * (stored + flat));
  g_assert_cmpint(json_object_get_int_member(p16, "frozen_bytes"), ==, 2 * stored + 4 * flat);
  g_assert_cmpint(json_object_get_int_member(p32, "params_bytes") -
                      json_object_get_int_member(p16, "params_bytes"),
                  ==, 2 * stored);
  /* precision bf16 on the CPU: the rounded copies of the products' largest operands, the
   * logits' gradient [2 · 32, 256] and the larger of the embedding [256, 32] and the MLP's input
   * [2 · 32, 128] */
  const gint64 operands = 4 * (64 * 256 + MAX(256 * 32, 64 * 128));
  /* the widest layer while in use: a block (wider than the embeddings at this shape) */
  g_assert_cmpint(json_object_get_int_member(p16, "working_bytes"), ==,
                  4 * (32 * 96 + 32 * 32 + 2 * 32 * 128) + operands);
  g_assert_cmpint(json_object_get_int_member(p32, "working_bytes"), ==, operands);
}

/* A refused combination: exit status 1, one line naming the key and `what`. */
static void refused(const char *const *extra, const char *what)
{
  g_autofree char *ws = tu_mkdtemp("fbf-refused");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, extra);
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, !=, 0);
  if (!strstr(r.err, "frozen_dtype") || !strstr(r.err, what))
    g_error("expected a refusal naming frozen_dtype and %s, got: %s", what, r.err);
  g_free(r.err);
  tu_rm_rf(ws);
}

static void test_refusals(void)
{
  const char *full[] = {"frozen_dtype=bf16", "finetune=full", NULL};
  refused(full, "finetune \"full\" nothing is frozen");
  const char *fp32[] = {"frozen_dtype=bf16", "precision=fp32", NULL};
  refused(fp32, "precision \"bf16\"");
  const char *ema[] = {"frozen_dtype=bf16", "ema_decay=0.9", NULL};
  refused(ema, "ema_decay");
  /* a backend that cannot give memory back per layer (both of Cohort's can) */
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  cfg->finetune = COHORT_FINETUNE_LORA;
  cfg->precision = COHORT_PRECISION_BF16;
  cfg->frozen_dtype = COHORT_FROZEN_BF16;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_frozen_store_wanted(cfg, FALSE, "cuda", &error));
  g_assert_nonnull(error);
  g_assert_nonnull(strstr(error->message, "give memory back per layer"));
  g_clear_error(&error);
  g_assert_true(cohort_frozen_store_wanted(cfg, TRUE, "cpu", &error));
  g_assert_no_error(error);
  cfg->frozen_dtype = COHORT_FROZEN_FP32;
  g_assert_false(cohort_frozen_store_wanted(cfg, TRUE, "cpu", &error));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/frozen-bf16/referee-gpt", test_referee_gpt);
  g_test_add_func("/frozen-bf16/referee-llama", test_referee_llama);
  g_test_add_func("/frozen-bf16/referee-images", test_referee_images);
  g_test_add_func("/frozen-bf16/two-ranks", test_two_ranks);
  g_test_add_func("/frozen-bf16/resume", test_resume);
  g_test_add_func("/frozen-bf16/plan", test_plan);
  g_test_add_func("/frozen-bf16/refusals", test_refusals);
  return g_test_run();
}
