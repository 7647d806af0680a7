/* finetune lora end to end through cohort-train (suite dist, loopback only):
 *  - 2 (and 3) ranks with per-process batch b compute the adapters one rank computes with
 *    batch 2b (3b);
 *  - the ranks event reports the trainable parameters, and the bytes all-reduced per step
 *    are the adapters' alone, a fraction of full fine-tuning's;
 *  - a run stopped at a checkpoint and resumed ends with the files, byte for byte, of a run
 *    that never stopped; the base weights do not move;
 *  - the export is a PEFT folder that --sample's loader reads back with the base;
 *  - finetune frozen moves the trainable tensors alone, on 2 ranks (gpt, and a ResNet
 *    classifier on a model trained before: transfer learning);
 *  - ZeRO stage 1 shards the adapters' optimizer state: 2 ranks = 1 process, and a resume
 *    ends as a run that never stopped;
 *  - ZeRO stages 2 and 3 shard the adapters alone (the base whole on every rank): 2 ranks = 1
 *    process, a resume ends as a run that never stopped, and a frozen ResNet at stage 3;
 *  - a resume with another lora_alpha (or lora_rslora) is refused;
 *  - a frozen run with nothing to learn and a target that names nothing are refused. */
#include <string.h>

#include <gio/gio.h>

#include <glib/gstdio.h>

#include "engine/base/fileio.h"
#include "engine/model/lora-io.h"
#include "engine/model/lora.h"
#include "engine/train/sample-saved.h"
#include "test-util.h"

static const char *const base_sets[] = {
    "n_layer=2",    "n_head=2",     "n_embd=32",      "seq_len=32",   "warmup_steps=1",
    "eval_every=0", "eval_steps=2", "sample_every=0", "save_every=0", "threads=1",
    "timeout_s=20", "lora_rank=4",  "lora_alpha=8",   NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

typedef struct {
  char *ws;
  GPtrArray *events;
} Lora;

static void lora_clear(Lora *l)
{
  tu_rm_rf(l->ws);
  g_free(l->ws);
  if (l->events)
    g_ptr_array_unref(l->events);
}

/* cohort-train with `nproc` ranks in workspace `ws` (made when NULL); its events. */
static Lora train_in(char *ws, int nproc, const char *const *extra, const char *resume)
{
  return (Lora){.ws = ws, .events = ddp_train_events(ws, nproc, extra, resume)};
}

static GArray *adapter_weights(const Lora *l)
{
  g_autofree char *path = g_build_filename(l->ws, "adapter", "adapter_model.safetensors", NULL);
  return tu_read_weights(path);
}

/* The last ranks event. */
static JsonObject *last_ranks(const Lora *l)
{
  JsonObject *found = NULL;
  for (guint i = 0; i < l->events->len; i++) {
    JsonObject *o = g_ptr_array_index(l->events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "ranks"))
      found = o;
  }
  g_assert_nonnull(found);
  return found;
}

/* 2 ranks × batch 2 = 1 rank × batch 4 on the adapters (tolerance as tests/test-ddp.c: a
 * thousandth of the distance AdamW can move a weight), and the ranks event's figures. */
static void test_two_ranks(void)
{
  const int steps = 10;
  const double lr = 1e-3;
  const char *two[] = {"finetune=lora", "max_steps=10",       "learning_rate=0.001",
                       "batch_size=2",  "bucket_cap_mb=0.01", NULL};
  const char *one[] = {"finetune=lora", "max_steps=10", "learning_rate=0.001", "batch_size=4",
                       NULL};
  Lora n = train_in(tu_mkdtemp("lora-2"), 2, two, NULL);
  Lora s = train_in(tu_mkdtemp("lora-1"), 1, one, NULL);
  g_autoptr(GArray) wn = adapter_weights(&n), w1 = adapter_weights(&s);
  double diff = max_abs_diff(wn, w1), tol = 1e-3 * lr * steps;
  g_test_message("LoRA: 2 ranks × batch 2 vs 1 × 4: max |Δ adapter| = %.3g (tolerance %.3g)", diff,
                 tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* 3 ranks × batch 2 = 1 rank × batch 6 (an odd world: the data's shares and the average) */
  const char *three[] = {"finetune=lora", "max_steps=10",       "learning_rate=0.001",
                         "batch_size=2",  "bucket_cap_mb=0.01", NULL};
  const char *six[] = {"finetune=lora", "max_steps=10", "learning_rate=0.001", "batch_size=6",
                       NULL};
  Lora t3 = train_in(tu_mkdtemp("lora-3"), 3, three, NULL);
  Lora t1 = train_in(tu_mkdtemp("lora-6"), 1, six, NULL);
  g_autoptr(GArray) w3 = adapter_weights(&t3), w6 = adapter_weights(&t1);
  double diff3 = max_abs_diff(w3, w6);
  g_test_message("LoRA: 3 ranks × batch 2 vs 1 × 6: max |Δ adapter| = %.3g (tolerance %.3g)", diff3,
                 tol);
  g_assert_cmpfloat(diff3, <=, tol);
  lora_clear(&t3);
  lora_clear(&t1);
  /* the base did not move: model.safetensors is the same base in both runs */
  g_autoptr(GBytes) bn = ddp_export_bytes(n.ws, "model.safetensors");
  g_autoptr(GBytes) b1 = ddp_export_bytes(s.ws, "model.safetensors");
  g_assert_true(g_bytes_equal(bn, b1));

  JsonObject *ranks = last_ranks(&n);
  gint64 params = json_object_get_int_member(ranks, "params");
  gint64 trainable = json_object_get_int_member(ranks, "trainable");
  gint64 bytes = json_object_get_int_member(ranks, "allreduce_bytes");
  /* 2 blocks × rank 4 × (32+96 + 32+32 + 32+128 + 128+32) */
  g_assert_cmpint(trainable, ==, 2 * 4 * (32 + 96 + 32 + 32 + 32 + 128 + 128 + 32));
  g_assert_cmpint(bytes, ==, 4 * trainable);

  const char *full_two[] = {"max_steps=10", "batch_size=2", NULL};
  Lora f = train_in(tu_mkdtemp("lora-full"), 2, full_two, NULL);
  JsonObject *fr = last_ranks(&f);
  gint64 full_bytes = json_object_get_int_member(fr, "allreduce_bytes");
  g_assert_cmpint(json_object_get_int_member(fr, "trainable"), ==,
                  json_object_get_int_member(fr, "params"));
  g_assert_cmpint(params, ==, json_object_get_int_member(fr, "params") + trainable);
  g_test_message("all-reduced per step: full %" G_GINT64_FORMAT
                 " bytes, LoRA rank 4 %" G_GINT64_FORMAT
                 " bytes (%.1fx fewer); trainable %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT,
                 full_bytes, bytes, (double)full_bytes / bytes, trainable, params);
  g_assert_cmpint(bytes * 5, <, full_bytes); /* 8.5x here: rank 4 is large beside n_embd 32 */
  /* --explain's plan counts what the run holds: gradients and optimizer state for the
   * adapters alone */
  g_autoptr(JsonObject) plan = ddp_explain_memory(two);
  JsonObject *pr = json_object_get_object_member(plan, "per_rank");
  g_assert_cmpint(json_object_get_int_member(plan, "trainable"), ==, trainable);
  g_assert_cmpint(json_object_get_int_member(pr, "grads_bytes"), ==, 4 * trainable);
  g_assert_cmpint(json_object_get_int_member(pr, "optim_bytes"), ==, 8 * trainable);
  g_assert_cmpint(json_object_get_int_member(pr, "params_bytes"), ==, 4 * params);
  lora_clear(&n);
  lora_clear(&s);
  lora_clear(&f);
}

/* The checkpoint `ckpt` holds only what learns: every tensor (and its EMA and AdamW state) is
 * an adapter or matches `trainable` (a prefix; NULL: none), and state.json (version 2) names
 * the base: its file and digest when `base` is given, else none (a base from the seed). */
static void check_only_learning(const char *ckpt, const char *trainable, const char *base)
{
  g_autofree char *model = g_build_filename(ckpt, "model.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(model, &error);
  g_assert_no_error(error);
  guint n = 0;
  for (const char *const *name = cohort_safetensors_names(f); *name; name++, n++) {
    const char *bare = *name;
    const char *prefixes[] = {"ema.", "optim.m.", "optim.v.", "optim.momentum_buffer."};
    for (guint i = 0; i < G_N_ELEMENTS(prefixes); i++)
      if (g_str_has_prefix(bare, prefixes[i]))
        bare += strlen(prefixes[i]);
    /* buffers (BatchNorm's statistics) move in training: they are saved */
    gboolean buffer = strstr(bare, ".running_") || strstr(bare, "num_batches_tracked");
    if (!buffer && !strstr(bare, ".lora_A.") && !strstr(bare, ".lora_B.") &&
        !(trainable && g_str_has_prefix(bare, trainable)))
      g_error("%s holds \"%s\", a frozen base tensor", model, *name);
  }
  g_assert_cmpuint(n, >, 0);
  g_autofree char *state_path = g_build_filename(ckpt, "state.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(state_path, &text, NULL, NULL));
  g_autoptr(JsonNode) root = json_from_string(text, NULL);
  JsonObject *o = json_node_get_object(root);
  g_assert_cmpint(json_object_get_int_member(o, "version"), ==, 2);
  g_assert_cmpuint(strlen(json_object_get_string_member(o, "frozen_sha256")), ==, 64);
  if (!base) {
    g_assert_false(json_object_has_member(o, "base_path"));
    g_assert_false(json_object_has_member(o, "base_sha256"));
    return;
  }
  g_autofree char *sha = cohort_file_sha256(base, &error);
  g_assert_no_error(error);
  g_assert_cmpstr(json_object_get_string_member(o, "base_path"), ==, base);
  g_assert_cmpstr(json_object_get_string_member(o, "base_sha256"), ==, sha);
}

/* --sample's loader (cohort_model_load_saved) on `from`, the workspace `ws` or one of its
 * checkpoints, gives the base with ws's exported adapter: exactly (`exact`), or from a
 * checkpoint holding EMA weights (ema_decay 0.9) with every lora_B different. */
static void check_loads_adapter(const char *ws, const char *from, gboolean exact)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = cohort_model_load_saved(from, NULL, 1, NULL, NULL, &error);
  g_assert_no_error(error);
  g_assert_nonnull(m->lora);
  g_autofree char *path = g_build_filename(ws, "adapter", "adapter_model.safetensors", NULL);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  for (guint t = 0; t < m->lora->n_tensors; t++) {
    const CohortTensorInfo *ti = &m->lora->tensors[t];
    double worst = 0;
    g_autofree char *name = g_strconcat("base_model.model.transformer.", ti->name, NULL);
    g_autofree float *want = g_new(float, ti->numel);
    int64_t shape[2] = {ti->shape[0], ti->shape[1]};
    g_assert_true(cohort_safetensors_read_f32(f, name, 2, shape, want, &error));
    for (size_t i = 0; i < ti->numel; i++)
      worst = MAX(worst, fabs(m->params[ti->offset + i] - want[i]));
    if (exact)
      g_assert_cmpfloat(worst, ==, 0);
    else if (t % 2 == 1)
      g_assert_cmpfloat(worst, >, 0);
  }
}

/* Resume, with dropout on the adapters and EMA: 3 steps, checkpoint, then on to 6 = 6 steps
 * at once, byte for byte (adapter, base, merged model, EMA); the adapter folder is PEFT's. */
static void test_resume(void)
{
  /* a constant learning rate: a run to step 3 then 6 is one to 6 (tests/test-ckpt-crash.c) */
  const char *six[] = {"finetune=lora", "lora_dropout=0.1",     "merge_adapter=true",
                       "max_steps=6",   "save_every=3",         "batch_size=2",
                       "ema_decay=0.9", "lr_schedule=constant", NULL};
  const char *three[] = {"finetune=lora", "lora_dropout=0.1",     "merge_adapter=true",
                         "max_steps=3",   "save_every=3",         "batch_size=2",
                         "ema_decay=0.9", "lr_schedule=constant", NULL};
  Lora a = train_in(tu_mkdtemp("lora-a"), 1, six, NULL);
  char *ws = tu_mkdtemp("lora-b");
  Lora b0 = train_in(ws, 1, three, NULL);
  g_ptr_array_unref(b0.events);
  Lora b = train_in(ws, 1, six, "auto");
  const char *files[] = {"adapter/adapter_model.safetensors", "model.safetensors",
                         "merged/model.safetensors", "model-ema.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autoptr(GBytes) fa = ddp_export_bytes(a.ws, files[i]);
    g_autoptr(GBytes) fb = ddp_export_bytes(b.ws, files[i]);
    if (!g_bytes_equal(fa, fb))
      g_error("%s differs after a resume", files[i]);
  }
  g_autofree char *cfg_path = g_build_filename(a.ws, "adapter", "adapter_config.json", NULL);
  g_autofree char *cfg = NULL;
  g_assert_true(g_file_get_contents(cfg_path, &cfg, NULL, NULL));
  g_autoptr(JsonNode) root = json_from_string(cfg, NULL);
  JsonObject *o = json_node_get_object(root);
  g_assert_cmpstr(json_object_get_string_member(o, "peft_type"), ==, "LORA");
  g_assert_cmpint(json_object_get_int_member(o, "r"), ==, 4);
  g_assert_true(json_object_get_boolean_member(o, "fan_in_fan_out"));
  g_assert_cmpuint(json_array_get_length(json_object_get_array_member(o, "target_modules")), ==, 8);
  g_autofree char *ws_abs = g_canonicalize_filename(a.ws, NULL);
  g_assert_cmpstr(json_object_get_string_member(o, "base_model_name_or_path"), ==, ws_abs);
  /* training moved the adapters: lora_B is no longer zero */
  g_autoptr(GArray) w = adapter_weights(&a);
  double mx = 0;
  for (guint i = 0; i < w->len; i++)
    mx = MAX(mx, fabs(g_array_index(w, float, i)));
  g_assert_cmpfloat(mx, >, 0);
  /* --sample's loader takes the base and the adapter, from the folder and from a checkpoint,
   * which holds only the adapters and names no base file: its base comes from the seed */
  g_autofree char *ckpt = g_build_filename(a.ws, "checkpoints", "step-00000006", NULL);
  check_only_learning(ckpt, NULL, NULL);
  check_loads_adapter(a.ws, a.ws, TRUE);
  check_loads_adapter(a.ws, ckpt, FALSE);
  lora_clear(&a);
  lora_clear(&b);
}

/* One tensor of a safetensors file, as floats. */
static GArray *tensor_of(const char *ws, const char *name)
{
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  int64_t shape[8];
  int nd = cohort_safetensors_shape(f, name, shape);
  g_assert_cmpint(nd, >, 0);
  size_t n = 1;
  for (int d = 0; d < nd; d++)
    n *= (size_t)shape[d];
  GArray *a = g_array_sized_new(FALSE, FALSE, sizeof(float), (guint)n);
  g_array_set_size(a, (guint)n);
  g_assert_true(cohort_safetensors_read_f32(f, name, nd, shape, (float *)a->data, &error));
  return a;
}

/* finetune frozen with trainable ln_f.*: after 1 and after 4 steps (2 ranks) every tensor
 * but ln_f's is the same, and ln_f moved. */
static void test_frozen(void)
{
  const char *one[] = {"finetune=frozen", "trainable=ln_f.*", "max_steps=1", "batch_size=2", NULL};
  const char *four[] = {"finetune=frozen", "trainable=ln_f.*", "max_steps=4", "batch_size=2", NULL};
  Lora a = train_in(tu_mkdtemp("frozen-1"), 1, one, NULL);
  Lora b = train_in(tu_mkdtemp("frozen-4"), 2, four, NULL);
  /* the start log says what frozen means (it said "0 LoRA adapters of rank 0") */
  const char *said = NULL;
  for (guint i = 0; i < a.events->len && !said; i++) {
    JsonObject *o = g_ptr_array_index(a.events, i);
    const char *msg = json_object_get_string_member_with_default(o, "message", "");
    if (g_str_has_prefix(msg, "finetune frozen:"))
      said = msg;
  }
  g_assert_nonnull(said);
  g_test_message("%s", said);
  g_assert_nonnull(strstr(said, "the parameters `trainable` names (ln_f.*)"));
  g_assert_nonnull(strstr(said, "no gradients and no optimizer state"));
  g_assert_null(strstr(said, "LoRA"));
  const char *names[] = {"wte.weight", "h.0.attn.c_attn.weight", "h.1.mlp.c_proj.bias",
                         "ln_f.weight", "ln_f.bias"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autoptr(GArray) wa = tensor_of(a.ws, names[i]), wb = tensor_of(b.ws, names[i]);
    double d = max_abs_diff(wa, wb);
    if (g_str_has_prefix(names[i], "ln_f."))
      g_assert_cmpfloat(d, >, 1e-5);
    else
      g_assert_cmpfloat(d, ==, 0);
  }
  lora_clear(&a);
  lora_clear(&b);
}

/* Transfer learning on a ResNet: a model trained on the glyphs, then finetune frozen with
 * trainable fc.* on 2 ranks: only the classifier moves, and only its gradients travel. */
/* A ResNet-8 of width 8 on the glyphs at 16×16, SGD at a constant rate. */
#define RESNET_GLYPHS                                                                              \
  "model=resnet", "data_format=images", "train_data=builtin:glyphs/train",                         \
      "val_data=", "image_size=16", "n_layer=8", "resnet_width=8", "optimizer=sgd",                \
      "learning_rate=0.05", "lr_schedule=constant", "warmup_steps=0"

static void test_resnet_transfer(void)
{
  const char *resnet[] = {RESNET_GLYPHS, "batch_size=4", "momentum=0.9", NULL};
  g_autoptr(GPtrArray) pre = g_ptr_array_new();
  g_autoptr(GPtrArray) tune = g_ptr_array_new();
  for (guint i = 0; resnet[i]; i++) {
    g_ptr_array_add(pre, (gpointer)resnet[i]);
    g_ptr_array_add(tune, (gpointer)resnet[i]);
  }
  g_ptr_array_add(pre, "max_steps=2");
  g_ptr_array_add(pre, NULL);
  Lora base = train_in(tu_mkdtemp("resnet-base"), 1, (const char *const *)pre->pdata, NULL);
  g_autofree char *weights = g_build_filename(base.ws, "model.safetensors", NULL);
  g_autofree char *init = g_strconcat("init_from=", weights, NULL);
  g_ptr_array_add(tune, init);
  g_ptr_array_add(tune, "finetune=frozen");
  g_ptr_array_add(tune, "trainable=fc.*");
  g_ptr_array_add(tune, "sync_batchnorm=true");
  g_ptr_array_add(tune, "save_every=5");
  g_ptr_array_add(tune, "max_steps=10");
  g_ptr_array_add(tune, NULL);
  Lora t = train_in(tu_mkdtemp("resnet-tune"), 2, (const char *const *)tune->pdata, NULL);
  /* the frozen backbone's BatchNorm statistics followed the batches (PyTorch's train mode),
   * and the log said so; with freeze_bn_stats they are the base's, bit for bit */
  {
    g_autoptr(GPtrArray) fz = g_ptr_array_copy(tune, NULL, NULL);
    fz->pdata[fz->len - 1] = "freeze_bn_stats=true";
    g_ptr_array_add(fz, NULL);
    Lora f = train_in(tu_mkdtemp("resnet-bn-eval"), 2, (const char *const *)fz->pdata, NULL);
    const char *stats[] = {"bn1.running_mean", "layer1.0.bn2.running_var",
                           "layer3.0.bn1.running_mean"};
    for (guint i = 0; i < G_N_ELEMENTS(stats); i++) {
      g_autoptr(GArray) b0 = tensor_of(base.ws, stats[i]), bt = tensor_of(t.ws, stats[i]);
      g_autoptr(GArray) bf = tensor_of(f.ws, stats[i]);
      g_assert_cmpfloat(max_abs_diff(b0, bt), >, 0);
      g_assert_cmpfloat(max_abs_diff(b0, bf), ==, 0);
    }
    const char *want[] = {"still follow the batches", "BatchNorm runs in eval mode"};
    const Lora *runs[] = {&t, &f};
    for (guint k = 0; k < 2; k++) {
      gboolean found = FALSE;
      for (guint i = 0; i < runs[k]->events->len && !found; i++) {
        JsonObject *o = g_ptr_array_index(runs[k]->events, i);
        const char *msg = json_object_get_string_member_with_default(o, "message", "");
        found = g_str_has_prefix(msg, "finetune frozen:") && strstr(msg, want[k]);
      }
      g_assert_true(found);
    }
    lora_clear(&f);
  }
  /* stopped at step 5 and resumed: the same model, byte for byte, from a checkpoint holding
   * fc, the BatchNorm statistics and their SGD momentum alone */
  char *ws_half = tu_mkdtemp("resnet-half");
  tune->pdata[tune->len - 2] = "max_steps=5";
  Lora h0 = train_in(ws_half, 2, (const char *const *)tune->pdata, NULL);
  g_ptr_array_unref(h0.events);
  g_autofree char *half = g_build_filename(ws_half, "checkpoints", "step-00000005", NULL);
  check_only_learning(half, "fc.", weights);
  tune->pdata[tune->len - 2] = "max_steps=10";
  Lora h = train_in(ws_half, 2, (const char *const *)tune->pdata, "auto");
  g_autoptr(GBytes) tm = ddp_export_bytes(t.ws, "model.safetensors");
  g_autoptr(GBytes) hm = ddp_export_bytes(h.ws, "model.safetensors");
  g_assert_true(g_bytes_equal(tm, hm));
  lora_clear(&h);
  /* ZeRO stage 3 shards fc alone, the frozen base whole on every rank: 2 ranks × batch 4 =
   * 1 process × batch 8 */
  g_autoptr(GPtrArray) z3 = g_ptr_array_copy(tune, NULL, NULL);
  z3->pdata[z3->len - 1] = "zero_stage=3";
  g_ptr_array_add(z3, NULL);
  Lora z = train_in(tu_mkdtemp("resnet-z3"), 2, (const char *const *)z3->pdata, NULL);
  z3->pdata[z3->len - 2] = "batch_size=8";
  Lora o = train_in(tu_mkdtemp("resnet-one"), 1, (const char *const *)z3->pdata, NULL);
  const char *names[] = {"conv1.weight", "layer1.0.bn2.bias", "layer3.0.conv1.weight", "fc.weight",
                         "fc.bias"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autoptr(GArray) a = tensor_of(base.ws, names[i]), b = tensor_of(t.ws, names[i]);
    g_autoptr(GArray) zw = tensor_of(z.ws, names[i]), ow = tensor_of(o.ws, names[i]);
    double d = max_abs_diff(a, b), dz = max_abs_diff(zw, ow), tol = 1e-3 * 0.05 * 10;
    if (g_str_has_prefix(names[i], "fc.")) {
      g_test_message("frozen fc.* + ZeRO 3: 2 ranks × 4 vs 1 × 8: max |Δ %s| = %.3g (tol %.3g)",
                     names[i], dz, tol);
      g_assert_cmpfloat(d, >, 0);
      g_assert_cmpfloat(dz, <=, tol);
    } else {
      g_assert_cmpfloat(d, ==, 0);
      g_assert_cmpfloat(max_abs_diff(a, zw), ==, 0);
    }
  }
  lora_clear(&z);
  lora_clear(&o);
  JsonObject *ranks = last_ranks(&t);
  gint64 trainable = json_object_get_int_member(ranks, "trainable");
  g_assert_cmpint(json_object_get_int_member(ranks, "allreduce_bytes"), ==, 4 * trainable);
  /* glyphs: the classes and 32 features (4 × resnet_width), weight and bias */
  g_assert_cmpint(trainable % 33, ==, 0);
  g_test_message("resnet frozen fc.*: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                 " parameters learn; %" G_GINT64_FORMAT " bytes all-reduced per step",
                 trainable, json_object_get_int_member(ranks, "params"),
                 json_object_get_int_member(ranks, "allreduce_bytes"));
  lora_clear(&base);
  lora_clear(&t);
}

/* LoRA on a ResNet's convolutions with SyncBatchNorm: 2 ranks × batch 2 = 1 rank × batch 4
 * (and = the same 2 ranks at ZeRO stage 3)
 * on the adapters (ten SGD steps: the first moves only lora_B, B being 0; the later ones A
 * too), the base unchanged, and only the adapters all-reduced (the ranks event, every ten
 * steps). */
static void test_resnet_conv(void)
{
  const char *sets[] = {RESNET_GLYPHS,
                        "sync_batchnorm=true",
                        "finetune=lora",
                        "lora_targets=conv1,downsample.0,fc",
                        "max_steps=10",
                        NULL, /* the batch */
                        NULL};
  guint at = G_N_ELEMENTS(sets) - 2;
  sets[at] = "batch_size=2";
  Lora two = train_in(tu_mkdtemp("resnet-conv-2"), 2, sets, NULL);
  sets[at] = "batch_size=4";
  Lora one = train_in(tu_mkdtemp("resnet-conv-1"), 1, sets, NULL);
  g_autoptr(GArray) w2 = adapter_weights(&two), w1 = adapter_weights(&one);
  double diff = max_abs_diff(w2, w1);
  g_test_message("ResNet conv LoRA + SyncBN: 2 ranks × batch 2 vs 1 × 4: max |Δ adapter| = %.3g",
                 diff);
  /* measured 4.2e-6: oneDNN's convolutions round batch 2 and batch 4 apart (see
   * tests/test-resnet-ddp.c), and ten steps carry it */
  g_assert_cmpfloat(diff, <=, 2e-5);
  /* at ZeRO stage 3 (the adapters sharded and gathered with their block) as at stage 0:
   * measured identical */
  sets[at] = "batch_size=2";
  const char *stage3[G_N_ELEMENTS(sets) + 1];
  memcpy(stage3, sets, sizeof sets);
  stage3[at + 1] = "zero_stage=3";
  stage3[at + 2] = NULL;
  Lora z = train_in(tu_mkdtemp("resnet-conv-z3"), 2, stage3, NULL);
  g_autoptr(GArray) wz = adapter_weights(&z);
  g_assert_cmpfloat(max_abs_diff(wz, w2), <=, 1e-6);
  lora_clear(&z);
  /* the base weights did not move (the BatchNorm statistics, buffers, may round apart) */
  const char *names[] = {"conv1.weight", "layer2.0.conv1.weight", "layer2.0.downsample.0.weight",
                         "layer2.0.bn1.weight", "fc.weight"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autoptr(GArray) a = tensor_of(one.ws, names[i]), b = tensor_of(two.ws, names[i]);
    g_assert_cmpfloat(max_abs_diff(a, b), ==, 0);
  }
  JsonObject *ranks = last_ranks(&two);
  gint64 trainable = json_object_get_int_member(ranks, "trainable");
  /* rank 4 (base_sets) × (out + c_in·k·k): the stem 1→8 3×3, layer1..3's first 3×3 (8→8,
   * 8→16, 16→32), the shortcuts 8→16, 16→32 1×1, fc 32→classes */
  gint64 convs = 4 * ((8 + 9) + (8 + 72) + (16 + 72) + (32 + 144) + (16 + 8) + (32 + 16));
  g_autoptr(GArray) classes = tensor_of(one.ws, "fc.bias");
  g_assert_cmpint(trainable, ==, convs + 4 * (32 + (gint64)classes->len));
  g_assert_cmpint(json_object_get_int_member(ranks, "allreduce_bytes"), ==, 4 * trainable);
  lora_clear(&two);
  lora_clear(&one);
}

/* Fine-tuning a model trained before: init_from gives the base, which the LoRA run exports
 * unchanged; adapter_from starts from that run's adapter and is refused when its rank is not
 * lora_rank. */
static void test_init_and_adapter_from(void)
{
  Lora base = train_in(tu_mkdtemp("lora-base"), 1,
                       (const char *[]){"max_steps=2", "batch_size=2", NULL}, NULL);
  g_autofree char *weights = g_build_filename(base.ws, "model.safetensors", NULL);
  g_autofree char *init = g_strconcat("init_from=", weights, NULL);
  Lora first =
      train_in(tu_mkdtemp("lora-first"), 1,
               (const char *[]){"finetune=lora", init, "max_steps=2", "batch_size=2", NULL}, NULL);
  g_autoptr(GBytes) bw = ddp_export_bytes(base.ws, "model.safetensors");
  g_autoptr(GBytes) fw = ddp_export_bytes(first.ws, "model.safetensors");
  /* the same tensors, same bytes: only the metadata's step and run differ */
  g_assert_cmpuint(g_bytes_get_size(bw), ==, g_bytes_get_size(fw));
  const char *names[] = {"wte.weight", "h.0.attn.c_attn.weight", "ln_f.bias"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autoptr(GArray) a = tensor_of(base.ws, names[i]), b = tensor_of(first.ws, names[i]);
    g_assert_cmpfloat(max_abs_diff(a, b), ==, 0);
  }
  g_autofree char *adapter = g_build_filename(first.ws, "adapter", NULL);
  g_autofree char *from = g_strconcat("adapter_from=", adapter, NULL);
  Lora second = train_in(
      tu_mkdtemp("lora-second"), 1,
      (const char *[]){"finetune=lora", init, from, "max_steps=2", "batch_size=2", NULL}, NULL);
  /* the second run started from the first's adapter, so it differs from a fresh one's */
  g_autoptr(GArray) w1 = adapter_weights(&first), w2 = adapter_weights(&second);
  g_assert_cmpfloat(max_abs_diff(w1, w2), >, 0);

  g_autofree char *ws = tu_mkdtemp("lora-bad-adapter");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, (const char *[]){"finetune=lora", init, from, "lora_rank=8", NULL});
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "adapter_config.json: field \"r\""));
  g_free(r.err);
  tu_rm_rf(ws);
  lora_clear(&base);
  lora_clear(&first);
  lora_clear(&second);
}

/* cohort-train resuming `ws` with `sets` is refused: non-zero exit, stderr names each of
 * `needles`, and the checkpoint folder `ckpt` is as it was (nothing else is written). */
static void check_resume_refused(const char *ws, const char *const *sets, const char *ckpt,
                                 const char *const *needles)
{
  g_autoptr(GBytes) model0 = ddp_export_bytes(ckpt, "model.safetensors");
  g_autoptr(GBytes) state0 = ddp_export_bytes(ckpt, "state.json");
  g_autoptr(GBytes) export0 = ddp_export_bytes(ws, "model.safetensors");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--resume"));
  g_ptr_array_add(argv, g_strdup("auto"));
  add_sets(argv, ws, sets);
  Result r = run(argv, NULL, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_test_message("refused: %s", r.err);
  for (guint i = 0; needles[i]; i++)
    if (!strstr(r.err, needles[i]))
      g_error("the refusal does not name %s: %s", needles[i], r.err);
  g_free(r.err);
  g_autoptr(GBytes) model1 = ddp_export_bytes(ckpt, "model.safetensors");
  g_autoptr(GBytes) state1 = ddp_export_bytes(ckpt, "state.json");
  g_assert_true(g_bytes_equal(model0, model1) && g_bytes_equal(state0, state1));
  g_autofree char *ckdir = g_path_get_dirname(ckpt);
  g_autoptr(GDir) d = g_dir_open(ckdir, 0, NULL);
  guint entries = 0;
  while (g_dir_read_name(d))
    entries++;
  g_assert_cmpuint(entries, ==, 1);
  g_autoptr(GBytes) export1 = ddp_export_bytes(ws, "model.safetensors");
  g_assert_true(g_bytes_equal(export0, export1));
}

/* A checkpoint of finetune lora on an init_from base holds the adapters and the trainable
 * ln_f alone (its size: theirs with EMA and AdamW state), names the base file and its
 * sha256, and resumes byte for byte; a base with one byte changed, or missing, is refused
 * with the checkpoint, the file and the digests named, and nothing written. */
static void test_base_reference(void)
{
  Lora pre = train_in(tu_mkdtemp("lora-pre"), 1,
                      (const char *[]){"max_steps=2", "batch_size=2", NULL}, NULL);
  g_autofree char *dir = tu_mkdtemp("lora-basefile");
  g_autofree char *base = g_build_filename(dir, "base.safetensors", NULL);
  g_autoptr(GBytes) pre_bytes = ddp_export_bytes(pre.ws, "model.safetensors");
  g_assert_true(g_file_set_contents(base, g_bytes_get_data(pre_bytes, NULL),
                                    (gssize)g_bytes_get_size(pre_bytes), NULL));
  g_autofree char *init = g_strconcat("init_from=", base, NULL);
  const char *six[] = {"finetune=lora",
                       init,
                       "trainable=ln_f.*",
                       "lora_dropout=0.1",
                       "max_steps=6",
                       "save_every=3",
                       "batch_size=2",
                       "ema_decay=0.9",
                       "merge_adapter=true",
                       "lr_schedule=constant",
                       NULL};
  const char *three[] = {"finetune=lora",
                         init,
                         "trainable=ln_f.*",
                         "lora_dropout=0.1",
                         "max_steps=3",
                         "save_every=3",
                         "batch_size=2",
                         "ema_decay=0.9",
                         "merge_adapter=true",
                         "lr_schedule=constant",
                         NULL};
  Lora a = train_in(tu_mkdtemp("lora-ref-a"), 1, six, NULL);
  char *ws = tu_mkdtemp("lora-ref-b");
  Lora b0 = train_in(ws, 1, three, NULL);
  g_ptr_array_unref(b0.events);
  g_autofree char *ckpt = g_build_filename(ws, "checkpoints", "step-00000003", NULL);
  check_only_learning(ckpt, "ln_f.", base);
  /* the size: the learning part's floats 4 times (weights, EMA, AdamW's m and v) and a header */
  JsonObject *start = NULL;
  for (guint i = 0; i < a.events->len && !start; i++) {
    JsonObject *o = g_ptr_array_index(a.events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "start"))
      start = o;
  }
  g_assert_nonnull(start);
  gint64 trainable = json_object_get_int_member(start, "trainable");
  gint64 params = json_object_get_int_member(start, "params");
  g_autoptr(GBytes) ck = ddp_export_bytes(ckpt, "model.safetensors");
  gsize size = g_bytes_get_size(ck);
  g_test_message("checkpoint of what learns: %zu bytes for %" G_GINT64_FORMAT
                 " of %" G_GINT64_FORMAT " parameters (the base alone is %zu bytes)",
                 size, trainable, params, g_bytes_get_size(pre_bytes));
  /* the frozen base's floats (35 k here, 141 kB) would not fit in the header's allowance */
  g_assert_cmpuint(size, >=, 16 * (gsize)trainable);
  g_assert_cmpuint(size, <, 16 * (gsize)trainable + 16 * 1024);
  g_assert_cmpuint(4 * (gsize)(params - trainable), >, 16 * 1024);
  /* copies of the stopped workspace for the refusals, before it is resumed */
  g_autofree char *ws_changed = tu_mkdtemp("lora-ref-changed");
  g_autofree char *cmd = g_strdup_printf("cp -a %s/. %s/", ws, ws_changed);
  g_assert_cmpint(system(cmd), ==, 0);

  Lora b = train_in(ws, 1, six, "auto");
  const char *files[] = {"adapter/adapter_model.safetensors", "model.safetensors",
                         "merged/model.safetensors", "model-ema.safetensors"};
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autoptr(GBytes) fa = ddp_export_bytes(a.ws, files[i]);
    g_autoptr(GBytes) fb = ddp_export_bytes(b.ws, files[i]);
    if (!g_bytes_equal(fa, fb))
      g_error("%s differs after a resume from a checkpoint of what learns", files[i]);
  }
  /* --sample's loader rebuilds the base from the file the checkpoint names */
  {
    g_autoptr(GError) error = NULL;
    g_autofree char *last = g_build_filename(ws, "checkpoints", "step-00000006", NULL);
    g_autoptr(CohortModel) m = cohort_model_load_saved(last, NULL, 1, NULL, NULL, &error);
    g_assert_no_error(error);
    g_autoptr(GArray) want = tensor_of(pre.ws, "h.1.attn.c_attn.weight");
    const CohortTensorInfo *t = cohort_model_find_tensor(m, "h.1.attn.c_attn.weight");
    for (guint i = 0; i < want->len; i++)
      g_assert_cmpfloat(m->params[t->offset + i], ==, g_array_index(want, float, i));
  }

  /* init_from a Hugging Face folder (the base run's workspace): base_path names the folder,
   * base_sha256 digests its model.safetensors, and the checkpoint loads */
  {
    g_autofree char *canon = g_canonicalize_filename(pre.ws, NULL);
    g_autofree char *from_folder = g_strconcat("init_from=", canon, NULL);
    Lora c = train_in(tu_mkdtemp("lora-ref-folder"), 1,
                      (const char *[]){"finetune=lora", from_folder, "max_steps=1", "save_every=1",
                                       "batch_size=2", NULL},
                      NULL);
    g_autofree char *ck1 = g_build_filename(c.ws, "checkpoints", "step-00000001", NULL);
    g_autofree char *state_path = g_build_filename(ck1, "state.json", NULL);
    g_autofree char *text = NULL;
    g_assert_true(g_file_get_contents(state_path, &text, NULL, NULL));
    g_autoptr(JsonNode) root = json_from_string(text, NULL);
    JsonObject *o = json_node_get_object(root);
    g_autofree char *pre_weights = g_build_filename(pre.ws, "model.safetensors", NULL);
    g_autofree char *pre_sha = cohort_file_sha256(pre_weights, NULL);
    g_assert_cmpstr(json_object_get_string_member(o, "base_path"), ==, canon);
    g_assert_cmpstr(json_object_get_string_member(o, "base_sha256"), ==, pre_sha);
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortModel) m = cohort_model_load_saved(ck1, NULL, 1, NULL, NULL, &error);
    g_assert_no_error(error);
    lora_clear(&c);
  }

  /* adapter_from takes a checkpoint folder too: its adapters as trained (the export's) */
  {
    g_autoptr(GError) error = NULL;
    g_autofree char *last = g_build_filename(ws, "checkpoints", "step-00000006", NULL);
    g_autoptr(CohortModel) m = cohort_model_load_saved(last, NULL, 1, NULL, NULL, &error);
    g_assert_no_error(error);
    g_assert_true(cohort_lora_load(m, last, &error));
    g_assert_no_error(error);
    g_autofree char *path = g_build_filename(ws, "adapter", "adapter_model.safetensors", NULL);
    g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
    g_assert_no_error(error);
    for (guint t = 0; t < m->lora->n_tensors; t++) {
      const CohortTensorInfo *ti = &m->lora->tensors[t];
      g_autofree char *name = g_strconcat("base_model.model.transformer.", ti->name, NULL);
      g_autofree float *want = g_new(float, ti->numel);
      int64_t shape[2] = {ti->shape[0], ti->shape[1]};
      g_assert_true(cohort_safetensors_read_f32(f, name, 2, shape, want, &error));
      g_assert_cmpmem(want, ti->numel * sizeof(float), m->params + ti->offset,
                      ti->numel * sizeof(float));
    }
    /* and another rank is refused, naming the checkpoint's state.json */
    g_autofree char *ws_bad = tu_mkdtemp("lora-ref-rank");
    g_autofree char *from = g_strconcat("adapter_from=", last, NULL);
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
    g_ptr_array_add(argv, g_strdup("--quiet"));
    add_sets(argv, ws_bad, (const char *[]){"finetune=lora", init, from, "lora_rank=8", NULL});
    Result r = run(argv, NULL, NULL);
    g_assert_cmpint(r.status, !=, 0);
    g_assert_nonnull(strstr(r.err, "state.json: \"config\" has finetune lora, lora_rank 4"));
    g_free(r.err);
    tu_rm_rf(ws_bad);
  }

  /* one byte of the base changed: refused, naming the checkpoint, the file, both digests */
  g_autofree char *sha_before = cohort_file_sha256(base, NULL);
  gsize len = g_bytes_get_size(pre_bytes);
  g_autofree guchar *changed = g_memdup2(g_bytes_get_data(pre_bytes, NULL), len);
  changed[len - 1] ^= 0x01;
  g_assert_true(g_file_set_contents(base, (const char *)changed, (gssize)len, NULL));
  g_autofree char *sha_after = cohort_file_sha256(base, NULL);
  g_autofree char *ckpt_changed =
      g_build_filename(ws_changed, "checkpoints", "step-00000003", NULL);
  check_resume_refused(
      ws_changed, six, ckpt_changed,
      (const char *[]){ckpt_changed, base, sha_before, sha_after, "changed", NULL});
  /* the base missing: refused, naming the file and the digest it must have */
  g_assert_cmpint(g_unlink(base), ==, 0);
  check_resume_refused(ws_changed, six, ckpt_changed,
                       (const char *[]){ckpt_changed, base, sha_before, "missing", NULL});
  /* init_from taken away: refused, naming the base the checkpoint needs */
  g_assert_true(g_file_set_contents(base, g_bytes_get_data(pre_bytes, NULL), (gssize)len, NULL));
  const char *no_init[] = {
      "finetune=lora", "init_from=",   "trainable=ln_f.*", "lora_dropout=0.1",     "max_steps=6",
      "save_every=3",  "batch_size=2", "ema_decay=0.9",    "lr_schedule=constant", NULL};
  check_resume_refused(ws_changed, no_init, ckpt_changed,
                       (const char *[]){ckpt_changed, base, sha_before, "init_from", NULL});
  /* the file right but the frozen part another (ln_f.bias no longer learns): frozen_sha256
   * refuses it */
  const char *other_frozen[] = {"finetune=lora",         init,
                                "trainable=ln_f.weight", "lora_dropout=0.1",
                                "max_steps=6",           "save_every=3",
                                "batch_size=2",          "ema_decay=0.9",
                                "lr_schedule=constant",  NULL};
  check_resume_refused(ws_changed, other_frozen, ckpt_changed,
                       (const char *[]){ckpt_changed, "frozen weights of sha256", NULL});
  /* another lora_alpha, or rank-stabilised scaling, would match the checkpoint's tensors
   * and scale every adapter's update by another factor: refused naming the key */
  const char *other_alpha[] = {"finetune=lora",
                               init,
                               "trainable=ln_f.*",
                               "lora_dropout=0.1",
                               "max_steps=6",
                               "save_every=3",
                               "batch_size=2",
                               "ema_decay=0.9",
                               "lr_schedule=constant",
                               "lora_alpha=16",
                               NULL};
  check_resume_refused(ws_changed, other_alpha, ckpt_changed,
                       (const char *[]){ckpt_changed, "checkpoint has lora_alpha = 8", NULL});
  const char *rslora[] = {"finetune=lora",
                          init,
                          "trainable=ln_f.*",
                          "lora_dropout=0.1",
                          "max_steps=6",
                          "save_every=3",
                          "batch_size=2",
                          "ema_decay=0.9",
                          "lr_schedule=constant",
                          "lora_rslora=true",
                          NULL};
  check_resume_refused(ws_changed, rslora, ckpt_changed,
                       (const char *[]){ckpt_changed, "lora_rslora = false", NULL});
  tu_rm_rf(ws_changed);
  tu_rm_rf(dir);
  lora_clear(&pre);
  lora_clear(&a);
  lora_clear(&b);
}

/* Distillation with a LoRA student whose base is the teacher (the natural default): the run
 * trains, the teacher-base stays as it was, and the adapters moved. */
static void test_distill(void)
{
  Lora teacher = train_in(tu_mkdtemp("lora-teacher"), 1,
                          (const char *[]){"max_steps=2", "batch_size=2", NULL}, NULL);
  g_autofree char *weights = g_build_filename(teacher.ws, "model.safetensors", NULL);
  g_autofree char *init = g_strconcat("init_from=", weights, NULL);
  g_autofree char *from = g_strconcat("teacher_from=", teacher.ws, NULL);
  Lora student = train_in(tu_mkdtemp("lora-student"), 1,
                          (const char *[]){"finetune=lora", init, from, "distill_alpha=0.5",
                                           "max_steps=3", "batch_size=2", NULL},
                          NULL);
  const char *names[] = {"wte.weight", "h.1.mlp.c_fc.weight", "ln_f.weight"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
    g_autoptr(GArray) a = tensor_of(teacher.ws, names[i]), b = tensor_of(student.ws, names[i]);
    g_assert_cmpfloat(max_abs_diff(a, b), ==, 0);
  }
  g_autoptr(GArray) w = adapter_weights(&student);
  double mx = 0;
  for (guint i = 0; i < w->len; i++)
    mx = MAX(mx, fabs(g_array_index(w, float, i)));
  g_assert_cmpfloat(mx, >, 0);
  lora_clear(&teacher);
  lora_clear(&student);
}

/* ZeRO stage 1 with LoRA: each of 2 ranks keeps half the adapters' optimizer state, and the
 * run computes what one process computes (as /lora-ddp/two-ranks); --explain counts the half;
 * stopped at a checkpoint (the state gathered to rank 0) and resumed (scattered back), it ends
 * with the adapters of a run that never stopped. */
static void test_zero1(void)
{
  const double lr = 1e-3;
  const int steps = 6;
  const char *two[] = {"finetune=lora", "zero_stage=1",        "max_steps=6",
                       "batch_size=2",  "learning_rate=0.001", "lr_schedule=constant",
                       "save_every=3",  "bucket_cap_mb=0.01",  NULL};
  const char *one[] = {"finetune=lora",       "max_steps=6",          "batch_size=4",
                       "learning_rate=0.001", "lr_schedule=constant", NULL};
  Lora n = train_in(tu_mkdtemp("lora-z1"), 2, two, NULL);
  Lora s = train_in(tu_mkdtemp("lora-z1-one"), 1, one, NULL);
  g_autoptr(GArray) wn = adapter_weights(&n), w1 = adapter_weights(&s);
  double diff = max_abs_diff(wn, w1), tol = 1e-3 * lr * steps;
  g_test_message("LoRA + ZeRO 1: 2 ranks × batch 2 vs 1 × 4: max |Δ adapter| = %.3g (tol %.3g)",
                 diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  gint64 trainable = 0;
  for (guint i = 0; i < n.events->len; i++) {
    JsonObject *o = g_ptr_array_index(n.events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "start"))
      trainable = json_object_get_int_member(o, "trainable");
  }
  g_assert_cmpint(trainable, ==, 2 * 4 * (32 + 96 + 32 + 32 + 32 + 128 + 128 + 32));
  const char *planned[] = {"finetune=lora",
                           "zero_stage=1",
                           "batch_size=2",
                           "enable_multi_gpu=true",
                           "nproc_per_node=2",
                           "device=cpu",
                           NULL};
  g_autoptr(JsonObject) plan = ddp_explain_memory(planned);
  JsonObject *pr = json_object_get_object_member(plan, "per_rank");
  /* AdamW's two moments of half the adapters (the count is even) */
  g_assert_cmpint(json_object_get_int_member(pr, "optim_bytes"), ==, 2 * 4 * (trainable / 2));
  /* stop at step 3, resume to 6 */
  const char *three[] = {"finetune=lora", "zero_stage=1",        "max_steps=3",
                         "batch_size=2",  "learning_rate=0.001", "lr_schedule=constant",
                         "save_every=3",  "bucket_cap_mb=0.01",  NULL};
  char *ws = tu_mkdtemp("lora-z1-resume");
  Lora b0 = train_in(ws, 2, three, NULL);
  g_ptr_array_unref(b0.events);
  Lora b = train_in(ws, 2, two, "auto");
  g_autoptr(GBytes) fa = ddp_export_bytes(n.ws, "adapter/adapter_model.safetensors");
  g_autoptr(GBytes) fb = ddp_export_bytes(b.ws, "adapter/adapter_model.safetensors");
  g_assert_true(g_bytes_equal(fa, fb));
  lora_clear(&n);
  lora_clear(&s);
  lora_clear(&b);
}

/* ZeRO stages 2 and 3 with LoRA: only the adapters are cut into units and sharded, the base
 * stays whole on every rank. At each stage, 2 ranks × batch 2 (with EMA weights) compute the
 * adapters 1 process × batch 4 computes (as /lora-ddp/two-ranks) and export the base
 * unchanged; each rank keeps half the adapters' AdamW state (the ranks event and --explain,
 * which also counts the base whole) and at stage 3 never gathers more than the adapters;
 * stopped at step 5 and resumed, the run ends with the files of one that never stopped, from
 * checkpoints that hold only the adapters (a stage 2 one resumes at stage 3 alike); --sample's
 * loader reads the export and a checkpoint back. */
static void test_zero23(void)
{
  const double lr = 1e-3;
  const int steps = 10; /* the ranks event comes every 10 */
  const char *one[] = {"finetune=lora",       "max_steps=10",         "batch_size=4",
                       "learning_rate=0.001", "lr_schedule=constant", NULL};
  Lora s = train_in(tu_mkdtemp("lora-z23-one"), 1, one, NULL);
  g_autoptr(GArray) w1 = adapter_weights(&s);
  for (int stage = 2; stage <= 3; stage++) {
    g_autofree char *zs = g_strdup_printf("zero_stage=%d", stage);
    const char *two[] = {"finetune=lora",
                         "max_steps=10",
                         "batch_size=2",
                         "learning_rate=0.001",
                         zs,
                         "ema_decay=0.9",
                         "lr_schedule=constant",
                         "save_every=5",
                         NULL};
    Lora n = train_in(tu_mkdtemp("lora-z23"), 2, two, NULL);
    g_autoptr(GArray) wn = adapter_weights(&n);
    double diff = max_abs_diff(wn, w1), tol = 1e-3 * lr * steps;
    g_test_message("LoRA + ZeRO %d: 2 ranks × batch 2 vs 1 × 4: max |Δ adapter| = %.3g (tol %.3g)",
                   stage, diff, tol);
    g_assert_cmpfloat(diff, <=, tol);
    /* the base, whole on every rank, never moved */
    g_autoptr(GBytes) bn = ddp_export_bytes(n.ws, "model.safetensors");
    g_autoptr(GBytes) b1 = ddp_export_bytes(s.ws, "model.safetensors");
    g_assert_true(g_bytes_equal(bn, b1));
    gint64 params = 0, trainable = 0;
    for (guint i = 0; i < n.events->len; i++) {
      JsonObject *o = g_ptr_array_index(n.events, i);
      if (g_str_equal(json_object_get_string_member(o, "event"), "start")) {
        params = json_object_get_int_member(o, "params");
        trainable = json_object_get_int_member(o, "trainable");
      }
    }
    g_assert_cmpint(trainable, ==, 2 * 4 * (32 + 96 + 32 + 32 + 32 + 128 + 128 + 32));
    JsonArray *per = json_object_get_array_member(last_ranks(&n), "ranks");
    for (guint r = 0; r < json_array_get_length(per); r++) {
      JsonObject *o = json_array_get_object_element(per, r);
      g_assert_cmpint(json_object_get_int_member(o, "optim_bytes"), ==, 2 * 4 * (trainable / 2));
      gint64 peak = json_object_get_int_member(o, "gathered_peak_bytes");
      g_test_message("rank %u: optimizer %" G_GINT64_FORMAT
                     " bytes, gathered at most %" G_GINT64_FORMAT
                     " bytes (the adapters: %" G_GINT64_FORMAT ")",
                     r, json_object_get_int_member(o, "optim_bytes"), peak, 4 * trainable);
      if (stage == 3)
        g_assert_true(peak > 0 && peak <= 4 * trainable);
    }
    const char *planned[] = {
        "finetune=lora", zs,  "batch_size=2", "enable_multi_gpu=true", "nproc_per_node=2",
        "device=cpu",    NULL};
    g_autoptr(JsonObject) plan = ddp_explain_memory(planned);
    JsonObject *pr = json_object_get_object_member(plan, "per_rank");
    gint64 frozen = json_object_get_int_member(plan, "frozen");
    g_assert_cmpint(frozen + trainable, ==, params);
    g_assert_cmpint(json_object_get_int_member(pr, "optim_bytes"), ==, 2 * 4 * (trainable / 2));
    g_assert_cmpint(json_object_get_int_member(pr, "grads_bytes"), ==, 4 * (trainable / 2));
    g_assert_cmpint(json_object_get_int_member(pr, "params_bytes"), ==,
                    4 * frozen + 4 * (stage == 3 ? trainable / 2 : trainable));
    /* stop at step 5, resume to 10 */
    const char *three[G_N_ELEMENTS(two)];
    memcpy(three, two, sizeof two);
    three[1] = "max_steps=5";
    char *ws = tu_mkdtemp("lora-z23-resume");
    Lora b0 = train_in(ws, 2, three, NULL);
    g_ptr_array_unref(b0.events);
    g_autofree char *ckpt = g_build_filename(ws, "checkpoints", "step-00000005", NULL);
    check_only_learning(ckpt, NULL, NULL);
    Lora b = train_in(ws, 2, two, "auto");
    const char *files[] = {"adapter/adapter_model.safetensors", "model.safetensors",
                           "model-ema.safetensors"};
    for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
      g_autoptr(GBytes) fa = ddp_export_bytes(n.ws, files[i]);
      g_autoptr(GBytes) fb = ddp_export_bytes(b.ws, files[i]);
      if (!g_bytes_equal(fa, fb))
        g_error("zero_stage %d: %s differs after a resume", stage, files[i]);
    }
    if (stage == 3) {
      /* a checkpoint of stage 2 resumed at stage 3: the files are stage 0's, whatever the stage */
      char *ws2 = tu_mkdtemp("lora-z2-to-3");
      three[4] = "zero_stage=2";
      Lora c0 = train_in(ws2, 2, three, NULL);
      g_ptr_array_unref(c0.events);
      Lora c = train_in(ws2, 2, two, "auto");
      g_autoptr(GBytes) fa = ddp_export_bytes(n.ws, "adapter/adapter_model.safetensors");
      g_autoptr(GBytes) fc = ddp_export_bytes(c.ws, "adapter/adapter_model.safetensors");
      g_assert_true(g_bytes_equal(fa, fc));
      lora_clear(&c);
    }
    /* from the export, and from the last checkpoint (its EMA adapters) */
    g_autofree char *last = g_build_filename(n.ws, "checkpoints", "step-00000010", NULL);
    check_loads_adapter(n.ws, n.ws, TRUE);
    check_loads_adapter(n.ws, last, FALSE);
    lora_clear(&n);
    lora_clear(&b);
  }
  lora_clear(&s);
}

/* The refusals that remain with fine-tuning across ranks: one line each, non-zero exit. */
static void test_refused(void)
{
  struct {
    const char *sets[4];
    const char *needle;
  } cases[] = {
      {{"finetune=frozen", "trainable=", "zero_stage=3", NULL}, "leaves nothing to learn"},
      {{"finetune=lora", "lora_targets=c_atn", NULL}, "\"c_atn\""},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *ws = tu_mkdtemp("lora-refused");
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
    g_ptr_array_add(argv, g_strdup("--quiet"));
    g_ptr_array_add(argv, g_strdup("--nproc"));
    g_ptr_array_add(argv, g_strdup("2"));
    add_sets(argv, ws, (const char *const *)cases[i].sets);
    Result r = run(argv, NULL, NULL);
    g_assert_cmpint(r.status, !=, 0);
    if (!strstr(r.err, cases[i].needle))
      g_error("stderr does not name %s: %s", cases[i].needle, r.err);
    g_free(r.err);
    tu_rm_rf(ws);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/lora-ddp/two-ranks", test_two_ranks);
  g_test_add_func("/lora-ddp/resume", test_resume);
  g_test_add_func("/lora-ddp/base-reference", test_base_reference);
  g_test_add_func("/lora-ddp/frozen", test_frozen);
  g_test_add_func("/lora-ddp/resnet-transfer", test_resnet_transfer);
  g_test_add_func("/lora-ddp/resnet-conv", test_resnet_conv);
  g_test_add_func("/lora-ddp/init-and-adapter-from", test_init_and_adapter_from);
  g_test_add_func("/lora-ddp/distill", test_distill);
  g_test_add_func("/lora-ddp/zero1", test_zero1);
  g_test_add_func("/lora-ddp/zero23", test_zero23);
  g_test_add_func("/lora-ddp/refused", test_refused);
  return g_test_run();
}
