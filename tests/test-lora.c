/* finetune lora and frozen on the GPT family (engine/model/finetune.h, lora.h, lora-io.h):
 * step 0 is the base exactly, the layout gives gradients to what learns alone, PyTorch with
 * PEFT's LoRA computes the same loss and adapter gradients from Cohort's files, the merged
 * export is base + adapter, and the refusals name what is wrong. */
#include "torch-ref.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <json-glib/json-glib.h>

#include "engine/base/fileio.h"
#include "engine/model/batch.h"
#include "engine/model/finetune.h"
#include "engine/model/lora-io.h"
#include "engine/model/model-io.h"
#include "engine/model/weights-file.h"
#include "engine/models/dit.h"
#include "engine/models/registry.h"
#include "kernels/backend.h"

enum { L = 2, H = 2, C = 16, T = 8, V = 40, B = 2, RANK = 4 };

/* Fields set directly: the cross-key rules (vocab_size with text data) are not the point. */
static CohortConfig *gpt_cfg(const char *finetune, const char *trainable, const char *targets)
{
  CohortConfig *cfg = cohort_config_new();
  cfg->n_layer = L, cfg->n_head = H, cfg->n_embd = C, cfg->seq_len = T, cfg->vocab_size = V;
  cfg->finetune = g_str_equal(finetune, "lora")     ? COHORT_FINETUNE_LORA
                  : g_str_equal(finetune, "frozen") ? COHORT_FINETUNE_FROZEN
                                                    : COHORT_FINETUNE_FULL;
  cfg->lora_rank = RANK;
  cfg->lora_alpha = 8.0;
  g_free(cfg->trainable);
  cfg->trainable = g_strdup(trainable ? trainable : "");
  g_free(cfg->lora_targets);
  cfg->lora_targets = g_strdup(targets ? targets : "");
  return cfg;
}

static CohortModel *make(const CohortConfig *cfg)
{
  g_autoptr(GError) error = NULL;
  CohortModel *m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_no_error(error);
  return m;
}

static CohortBatch *make_batch(void)
{
  CohortBatch *b = cohort_batch_new(B, T, 0, 0, 0);
  b->B = B;
  guint32 s = 12345;
  for (int i = 0; i < B * T; i++) {
    s = s * 1664525u + 1013904223u;
    b->inputs[i] = (int)(s >> 8) % V;
    s = s * 1664525u + 1013904223u;
    b->targets[i] = (int)(s >> 8) % V;
  }
  for (int i = 0; i < B; i++)
    b->example_ids[i] = (guint64)i;
  b->epoch = 0;
  return b;
}

/* `dst`'s tensors from `src` by name (the layouts differ: a LoRA model moves frozen ones). */
static void copy_by_name(CohortModel *dst, const CohortModel *src)
{
  g_autofree float *tmp = NULL;
  const float *sp = cohort_model_params_host(src, &tmp);
  g_autofree float *dp = g_new0(float, dst->n_params);
  cohort_model_download_params(dst, dp);
  for (guint i = 0; i < src->n_tensors; i++) {
    const CohortTensorInfo *d = cohort_model_find_tensor(dst, src->tensors[i].name);
    g_assert_nonnull(d);
    memcpy(dp + d->offset, sp + src->tensors[i].offset, d->numel * sizeof(float));
  }
  cohort_model_upload_params(dst, dp);
}

/* The layout: adapters on the 4 projections of each block, the base frozen; only the
 * adapters have gradients; a fresh adapter (B = 0) computes exactly what the base does. */
static void test_step0_is_base(void)
{
  g_autoptr(CohortConfig) full_cfg = gpt_cfg("full", NULL, NULL);
  g_autoptr(CohortConfig) lora_cfg = gpt_cfg("lora", NULL, NULL);
  g_autoptr(CohortModel) full = make(full_cfg);
  g_autoptr(CohortModel) lora = make(lora_cfg);
  cohort_model_init(full, 7);
  cohort_model_init(lora, 99);
  copy_by_name(lora, full);
  g_assert_nonnull(lora->lora);
  g_assert_cmpuint(lora->lora->n, ==, 4 * L);
  size_t adapter_floats = 0;
  for (guint k = 0; k < lora->lora->n_tensors; k++)
    adapter_floats += lora->lora->tensors[k].numel;
  /* per block: c_attn (16 -> 48), c_proj (16 -> 16), c_fc (16 -> 64), mlp.c_proj (64 -> 16) */
  g_assert_cmpuint(adapter_floats, ==, (size_t)L * RANK * (16 + 48 + 16 + 16 + 16 + 64 + 64 + 16));
  g_assert_cmpuint(lora->n_trainable, ==, adapter_floats);
  g_assert_cmpuint(lora->n_params, ==, full->n_params + adapter_floats);
  g_assert_cmpuint(lora->n_train, ==, 2 * 4 * L);
  for (guint i = 0; i < lora->n_tensors; i++)
    g_assert_true(lora->tensors[i].frozen);

  g_autoptr(CohortBatch) batch = make_batch();
  float a = full->ops->forward(full, batch, COHORT_FORWARD_EVAL);
  float b = lora->ops->forward(lora, batch, COHORT_FORWARD_EVAL);
  g_assert_cmpfloat(a, ==, b); /* bitwise: B = 0 adds exact zeros */
  /* lora_B is zero and lora_A is not (Kaiming-uniform within 1/sqrt(in)) */
  const float *p = lora->params;
  const CohortTensorInfo *A = cohort_model_find_tensor(lora, "h.0.attn.c_attn.lora_A.weight");
  const CohortTensorInfo *Bt = cohort_model_find_tensor(lora, "h.0.attn.c_attn.lora_B.weight");
  g_assert_nonnull(A);
  g_assert_nonnull(Bt);
  g_assert_cmpint(A->shape[0], ==, RANK);
  g_assert_cmpint(A->shape[1], ==, C);
  g_assert_cmpint(Bt->shape[0], ==, 3 * C);
  g_assert_cmpint(Bt->shape[1], ==, RANK);
  double amax = 0;
  for (size_t k = 0; k < A->numel; k++)
    amax = fmax(amax, fabs(p[A->offset + k]));
  g_assert_cmpfloat(amax, >, 0.1 / sqrt(C));
  g_assert_cmpfloat(amax, <=, 1.0 / sqrt(C));
  for (size_t k = 0; k < Bt->numel; k++)
    g_assert_cmpfloat(p[Bt->offset + k], ==, 0.0f);
}

/* Random lora_B, so that every adapter gradient is non-zero. */
static void randomise_b(CohortModel *m)
{
  g_autofree float *p = g_new(float, m->n_params);
  cohort_model_download_params(m, p);
  guint32 s = 4242;
  for (guint k = 1; k < m->lora->n_tensors; k += 2) {
    const CohortTensorInfo *t = &m->lora->tensors[k];
    for (size_t i = 0; i < t->numel; i++) {
      s = s * 1664525u + 1013904223u;
      p[t->offset + i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
  }
  cohort_model_upload_params(m, p);
}

/* Every parameter random (DiT zero-initialises its gates and output layer, which would leave
 * most gradients zero). */
static void randomise_all(CohortModel *m)
{
  g_autofree float *p = g_new(float, m->n_params);
  guint32 s = 777;
  for (size_t i = 0; i < m->n_params; i++) {
    s = s * 1664525u + 1013904223u;
    p[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.4f;
  }
  cohort_model_upload_params(m, p);
}

static gboolean have_torch(void)
{
  return g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE) &&
         system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

/* The reference's token file: the ints of `hdr`, then the batch's inputs and targets. */
static void write_tokens(const char *path, const int *hdr, gsize n_hdr, const CohortBatch *batch)
{
  GByteArray *buf = g_byte_array_new();
  g_byte_array_append(buf, (const guint8 *)hdr, (guint)(n_hdr * sizeof(int)));
  g_byte_array_append(buf, (guint8 *)batch->inputs, B * T * sizeof(int));
  g_byte_array_append(buf, (guint8 *)batch->targets, B * T * sizeof(int));
  g_assert_true(g_file_set_contents(path, (char *)buf->data, buf->len, NULL));
  g_byte_array_unref(buf);
}

/* Lines "NAME v1 v2 …" of a reference against the adapters' gradients: per tensor within 1e-5
 * of its largest value. Returns the worst such error. */
static double adapter_grads_vs(const CohortModel *m, char **lines, guint n)
{
  double worst = 0;
  for (guint l = 0; l < n; l++) {
    g_auto(GStrv) f = g_strsplit(lines[l], " ", -1);
    const CohortTensorInfo *t = cohort_model_find_tensor(m, f[0]);
    g_assert_nonnull(t);
    g_assert_cmpuint(g_strv_length(f), ==, 1 + t->numel);
    const float *g = m->grads + t->offset;
    double mx = 0;
    for (size_t k = 0; k < t->numel; k++)
      mx = fmax(mx, fabs(g_ascii_strtod(f[1 + k], NULL)));
    g_assert_cmpfloat(mx, >, 0);
    for (size_t k = 0; k < t->numel; k++) {
      double e = fabs(g[k] - g_ascii_strtod(f[1 + k], NULL)) / mx;
      if (e > 1e-5)
        g_error("%s[%zu]: ours %.8g, PyTorch %s (tensor max %.3g)", t->name, k, g[k], f[1 + k], mx);
      worst = fmax(worst, e);
    }
  }
  return worst;
}

/* Cohort's base + PEFT folder + merged model, read by tests/torch_lora_ref.py (plain
 * PyTorch LoRA with PEFT's names and scaling, float64): the loss and every adapter gradient
 * agree to 1e-5 relative (per tensor, against its largest value), the merged weights are
 * W + alpha/r (B A)^T, and the merged model's loss is the adapter's. With `rslora`
 * (lora_rslora, written as use_rslora) the scaling is PEFT's alpha/√r. */
static void against_torch(gboolean rslora)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortConfig) cfg = gpt_cfg("lora", NULL, NULL);
  cfg->lora_rslora = rslora;
  g_autoptr(CohortModel) m = make(cfg);
  g_assert_cmpfloat(m->lora->scale, ==, rslora ? 8.0f / 2.0f : 8.0f / RANK); /* α/√r, α/r */
  cohort_model_init(m, 3);
  randomise_b(m);
  g_autoptr(CohortBatch) batch = make_batch();
  cohort_model_zero_grad(m);
  float loss = m->ops->forward(m, batch, COHORT_FORWARD_TRAIN);
  m->ops->backward(m, 1.0f);

  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-lora-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *base = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *adapter = g_build_filename(dir, "adapter", NULL);
  g_autofree char *merged_dir = g_build_filename(dir, "merged", NULL);
  g_autofree char *merged_path = g_build_filename(merged_dir, "model.safetensors", NULL);
  g_autofree char *tokens = g_build_filename(dir, "tokens.bin", NULL);
  g_autofree float *p = g_new(float, m->n_params), *merged = g_new(float, m->n_params);
  cohort_model_download_params(m, p);
  cohort_lora_merge(m, p, merged);
  g_assert_cmpint(g_mkdir_with_parents(merged_dir, 0755), ==, 0);
  g_assert_true(cohort_model_save(m, NULL, base, NULL, &error));
  g_assert_true(cohort_lora_export(m, p, adapter, dir, &error));
  g_assert_true(cohort_model_save(m, merged, merged_path, NULL, &error));
  g_assert_no_error(error);
  write_tokens(tokens, (const int[]){H, B, T}, 3, batch);

  g_autofree char *out = torch_ref_run("torch_lora_ref.py", (const char *[]){dir, tokens, NULL});
  cohort_remove_tree(dir);
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, 1 + m->lora->n_tensors + 1);
  double ref = g_ascii_strtod(lines[0], NULL);
  g_assert_cmpfloat(fabs(loss - ref), <=, 1e-5 * fabs(ref));
  double worst = adapter_grads_vs(m, lines + 1, m->lora->n_tensors);
  g_test_message("loss %.9g vs PyTorch %.9g; worst adapter gradient error %.3g of the tensor's "
                 "largest",
                 loss, ref, worst);
  g_auto(GStrv) mline = g_strsplit(lines[1 + m->lora->n_tensors], " ", -1);
  g_assert_cmpstr(mline[0], ==, "merged");
  g_assert_cmpfloat(g_ascii_strtod(mline[1], NULL), <=, 1e-6);
  g_assert_cmpfloat(fabs(g_ascii_strtod(mline[2], NULL) - ref), <=, 1e-5 * fabs(ref));
}

static void test_against_torch(void)
{
  against_torch(FALSE);
}

static void test_against_torch_rslora(void)
{
  against_torch(TRUE);
}

/* A Qwen3-shaped llama (q/k norms, grouped-query attention, a separate head) at the batch's
 * shape, with `finetune` and `trainable` ("key=value" or NULL). */
static CohortConfig *llama_cfg(const char *finetune, const char *trainable)
{
  const char *sets[] = {"model=llama",
                        "data_format=tokens",
                        "architecture=Qwen3ForCausalLM",
                        "n_layer=2",
                        "n_embd=16",
                        "n_head=4",
                        "num_key_value_heads=2",
                        "head_dim=8",
                        "intermediate_size=24",
                        "seq_len=8",
                        "vocab_size=40",
                        "tie_word_embeddings=false",
                        finetune,
                        "lora_rank=4",
                        "lora_alpha=8",
                        trainable,
                        NULL};
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  cohort_config_apply_assignments(cfg, sets, "test", &error);
  g_assert_no_error(error);
  return cfg;
}

/* The llama family with its default targets (the seven projections of every block), Qwen3-shaped
 * (q/k norms, grouped-query attention, a separate head): Cohort's base, config.json and PEFT
 * folder read by tests/torch_llama_lora_ref.py (PEFT's LoRA over nn.Linear on
 * tests/torch_llama_ref.py's float64 model, strict names) give the same loss and adapter
 * gradients within 1e-5 of each tensor's largest value; adapter_config.json lists the seven
 * projections of each block as target_modules and the CAUSAL_LM task; and adapter_from's reader
 * loads the folder back into a model initialised otherwise, bit for bit. */
static void test_llama_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortConfig) cfg = llama_cfg("finetune=lora", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = make(cfg);
  /* 2 layers × q, k, v, o, gate, up, down, each with lora_A and lora_B */
  g_assert_cmpuint(m->lora->n_tensors, ==, 2 * 7 * 2);
  cohort_model_init(m, 3);
  randomise_b(m);
  g_autoptr(CohortBatch) batch = make_batch();
  cohort_model_zero_grad(m);
  float loss = m->ops->forward(m, batch, COHORT_FORWARD_TRAIN);
  m->ops->backward(m, 1.0f);

  g_autofree char *dir = g_dir_make_tmp("cohort-test-lora-llama-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *base = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *adapter = g_build_filename(dir, "adapter", NULL);
  g_autofree char *tokens = g_build_filename(dir, "tokens.bin", NULL);
  g_autofree float *p = g_new(float, m->n_params);
  cohort_model_download_params(m, p);
  g_assert_true(cohort_model_save(m, NULL, base, NULL, &error));
  g_assert_true(m->klass->export_extra(m, cfg, dir, &error)); /* config.json */
  g_assert_true(cohort_lora_export(m, p, adapter, dir, &error));
  g_assert_no_error(error);
  write_tokens(tokens, (const int[]){B, T}, 2, batch);

  g_autofree char *out =
      torch_ref_run("torch_llama_lora_ref.py", (const char *[]){dir, tokens, NULL});
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, 1 + m->lora->n_tensors);
  double ref = g_ascii_strtod(lines[0], NULL);
  g_assert_cmpfloat(fabs(loss - ref), <=, 1e-5 * fabs(ref));
  double worst = adapter_grads_vs(m, lines + 1, m->lora->n_tensors);

  /* the folder as PEFT writes it for LlamaForCausalLM */
  g_autofree char *acfg_path = g_build_filename(adapter, "adapter_config.json", NULL);
  g_autoptr(JsonParser) parser = json_parser_new();
  g_assert_true(json_parser_load_from_file(parser, acfg_path, &error));
  JsonObject *acfg = json_node_get_object(json_parser_get_root(parser));
  g_assert_cmpstr(json_object_get_string_member(acfg, "task_type"), ==, "CAUSAL_LM");
  JsonArray *targets = json_object_get_array_member(acfg, "target_modules");
  g_autoptr(GString) listed = g_string_new(NULL);
  for (guint i = 0; i < json_array_get_length(targets); i++)
    g_string_append_printf(listed, "%s%s", i ? "," : "", json_array_get_string_element(targets, i));
  /* each adapted module by its full path, which PEFT matches as it matches a suffix */
  g_autoptr(GString) want = g_string_new(NULL);
  static const char *const seven[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                      "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                      "mlp.down_proj"};
  for (int l = 0; l < 2; l++)
    for (guint i = 0; i < G_N_ELEMENTS(seven); i++)
      g_string_append_printf(want, "%smodel.layers.%d.%s", want->len ? "," : "", l, seven[i]);
  g_assert_cmpstr(listed->str, ==, want->str);

  /* adapter_from: the folder into a model initialised from another seed */
  g_autoptr(CohortModel) back = make(cfg);
  cohort_model_init(back, 11);
  g_assert_true(cohort_lora_load(back, adapter, &error));
  g_assert_no_error(error);
  g_autofree float *q = g_new(float, back->n_params);
  cohort_model_download_params(back, q);
  for (guint k = 0; k < m->lora->n_tensors; k++) {
    const CohortTensorInfo *t = &m->lora->tensors[k];
    g_assert_cmpmem(q + t->offset, t->numel * sizeof(float), p + t->offset,
                    t->numel * sizeof(float));
  }
  cohort_remove_tree(dir);
  g_test_message("llama (Qwen3) with %u adapter tensors: loss %.9g vs PyTorch %.9g; worst adapter "
                 "gradient error %.3g of the tensor's largest; the folder reads back exactly",
                 m->lora->n_tensors, loss, ref, worst);
}

/* An exported adapter loads back exactly; a file with a tensor the model has not, or another
 * rank, is refused naming it, and the model is unchanged. */
static void test_adapter_round_trip(void)
{
  g_autoptr(CohortConfig) cfg = gpt_cfg("lora", NULL, "c_attn");
  g_autoptr(CohortModel) a = make(cfg);
  g_autoptr(CohortModel) b = make(cfg);
  cohort_model_init(a, 1);
  randomise_b(a);
  cohort_model_init(b, 2);
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-test-lora-XXXXXX", &error);
  g_autofree float *p = g_new(float, a->n_params);
  cohort_model_download_params(a, p);
  g_assert_true(cohort_lora_export(a, p, dir, "base", &error));
  g_assert_no_error(error);
  g_assert_true(cohort_lora_load(b, dir, &error));
  g_assert_no_error(error);
  for (guint k = 0; k < a->lora->n_tensors; k++) {
    const CohortTensorInfo *t = &a->lora->tensors[k];
    g_assert_cmpmem(a->params + t->offset, t->numel * 4, b->params + t->offset, t->numel * 4);
  }
  /* another rank: refused by adapter_config.json's r */
  g_autoptr(CohortConfig) cfg8 = gpt_cfg("lora", NULL, "c_attn");
  cfg8->lora_rank = 8;
  g_autoptr(CohortModel) c = make(cfg8);
  g_assert_false(cohort_lora_load(c, dir, &error));
  g_assert_nonnull(strstr(error->message, "\"r\""));
  g_clear_error(&error);
  /* more targets than the file holds: refused naming the layer its target_modules leaves
   * out (tests/test-lora-peft.c has the rest of target_modules) */
  g_autoptr(CohortConfig) wide = gpt_cfg("lora", NULL, "c_attn,c_fc");
  g_autoptr(CohortModel) d = make(wide);
  g_assert_false(cohort_lora_load(d, dir, &error));
  g_assert_nonnull(strstr(error->message, "does not select \"transformer.h.0.mlp.c_fc\""));
  g_clear_error(&error);
  /* fewer targets: the file's extra layer is named */
  g_autoptr(CohortConfig) narrow = gpt_cfg("lora", NULL, "h.0.attn.c_attn");
  g_autoptr(CohortModel) e = make(narrow);
  g_assert_false(cohort_lora_load(e, dir, &error));
  g_assert_nonnull(strstr(error->message, "selects \"transformer.h.1.attn.c_attn\""));
  cohort_remove_tree(dir);
}

/* finetune frozen with trainable ln_f: only ln_f has gradients, equal to the full model's. */
static void test_frozen(void)
{
  g_autoptr(CohortConfig) full_cfg = gpt_cfg("full", NULL, NULL);
  g_autoptr(CohortConfig) frozen_cfg = gpt_cfg("frozen", "ln_f", NULL);
  g_autoptr(CohortModel) full = make(full_cfg);
  g_autoptr(CohortModel) fr = make(frozen_cfg);
  cohort_model_init(full, 5);
  copy_by_name(fr, full);
  g_assert_null(fr->lora);
  g_assert_cmpuint(fr->n_trainable, ==, 2 * C);
  g_assert_cmpuint(fr->n_train, ==, 2);
  g_autoptr(CohortBatch) batch = make_batch();
  cohort_model_zero_grad(full);
  cohort_model_zero_grad(fr);
  float a = full->ops->forward(full, batch, COHORT_FORWARD_TRAIN);
  full->ops->backward(full, 1.0f);
  float b = fr->ops->forward(fr, batch, COHORT_FORWARD_TRAIN);
  fr->ops->backward(fr, 1.0f);
  g_assert_cmpfloat(a, ==, b);
  const CohortTensorInfo *tf = cohort_model_find_tensor(full, "ln_f.weight");
  const CohortTensorInfo *tr = cohort_model_find_tensor(fr, "ln_f.weight");
  g_assert_false(tr->frozen);
  g_assert_cmpmem(full->grads + tf->offset, 2 * C * 4, fr->grads + tr->offset, 2 * C * 4);
}

/* finetune frozen on llama with trainable the last block and the final norm: only those have
 * gradients, equal to the full model's bit for bit (backward stops above block 0). */
static void test_llama_frozen(void)
{
  g_autoptr(CohortConfig) full_cfg = llama_cfg("finetune=full", NULL);
  g_autoptr(CohortConfig) frozen_cfg =
      llama_cfg("finetune=frozen", "trainable=model.norm.*,model.layers.1.*");
  g_autoptr(CohortModel) full = make(full_cfg);
  g_autoptr(CohortModel) fr = make(frozen_cfg);
  cohort_model_init(full, 5);
  copy_by_name(fr, full);
  g_assert_null(fr->lora);
  g_autoptr(CohortBatch) batch = make_batch();
  cohort_model_zero_grad(full);
  cohort_model_zero_grad(fr);
  float a = full->ops->forward(full, batch, COHORT_FORWARD_TRAIN);
  full->ops->backward(full, 1.0f);
  float b = fr->ops->forward(fr, batch, COHORT_FORWARD_TRAIN);
  fr->ops->backward(fr, 1.0f);
  g_assert_cmpfloat(a, ==, b);
  size_t learned = 0;
  for (guint i = 0; i < fr->n_tensors; i++) {
    const CohortTensorInfo *tr = &fr->tensors[i];
    gboolean learns =
        g_str_has_prefix(tr->name, "model.norm.") || g_str_has_prefix(tr->name, "model.layers.1.");
    g_assert_cmpint(tr->frozen, ==, !learns);
    if (!learns)
      continue;
    const CohortTensorInfo *tf = cohort_model_find_tensor(full, tr->name);
    g_assert_cmpmem(full->grads + tf->offset, tf->numel * 4, fr->grads + tr->offset, tr->numel * 4);
    learned += tr->numel;
  }
  g_assert_cmpuint(fr->n_trainable, ==, learned);
}

/* finetune frozen on a ResNet with trainable fc.* (transfer learning): the initial weights
 * do not depend on the layout, and the classifier's gradients are the full model's exactly. */
enum { S = 8, K = 3, RB = 2 };

static CohortConfig *resnet_cfg(CohortFinetune mode, const char *trainable)
{
  CohortConfig *c = cohort_config_new();
  g_free(c->model);
  c->model = g_strdup("resnet");
  c->data_format = COHORT_DATA_IMAGES;
  c->n_layer = 8, c->resnet_width = 4, c->bn_momentum = 0.1;
  c->image_size = S, c->image_channels = 1, c->num_classes = K;
  c->finetune = mode;
  c->lora_rank = 2;
  c->lora_alpha = 4.0;
  g_free(c->trainable);
  c->trainable = g_strdup(trainable);
  return c;
}

static CohortBatch *image_batch(void)
{
  CohortBatch *batch = cohort_batch_new(RB, 0, 1, S, S);
  batch->B = RB;
  for (int i = 0; i < RB * S * S; i++)
    batch->images[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
  for (int i = 0; i < RB; i++) {
    batch->labels[i] = i % K;
    batch->example_ids[i] = (guint64)i;
  }
  return batch;
}

static void test_resnet_frozen(void)
{
  CohortConfig *cfgs[2] = {resnet_cfg(COHORT_FINETUNE_FULL, "fc.*"),
                           resnet_cfg(COHORT_FINETUNE_FROZEN, "fc.*")};
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) full = cohort_model_new(cohort_backend_cpu(), cfgs[0], RB, &error);
  g_assert_no_error(error);
  g_autoptr(CohortModel) fr = cohort_model_new(cohort_backend_cpu(), cfgs[1], RB, &error);
  g_assert_no_error(error);
  cohort_model_init(full, 11);
  cohort_model_init(fr, 11);
  g_assert_cmpuint(fr->n_trainable, ==, (size_t)K * 16 + K);
  for (guint i = 0; i < full->n_tensors; i++) {
    const CohortTensorInfo *a = &full->tensors[i];
    const CohortTensorInfo *b = cohort_model_find_tensor(fr, a->name);
    g_assert_true(b->frozen == !g_str_has_prefix(a->name, "fc."));
    g_assert_cmpmem(full->params + a->offset, a->numel * 4, fr->params + b->offset, b->numel * 4);
  }
  g_autoptr(CohortBatch) batch = image_batch();
  cohort_model_zero_grad(full);
  cohort_model_zero_grad(fr);
  float la = full->ops->forward(full, batch, COHORT_FORWARD_TRAIN);
  full->ops->backward(full, 1.0f);
  float lb = fr->ops->forward(fr, batch, COHORT_FORWARD_TRAIN);
  fr->ops->backward(fr, 1.0f);
  g_assert_cmpfloat(la, ==, lb);
  const char *names[] = {"fc.weight", "fc.bias"};
  for (guint i = 0; i < 2; i++) {
    const CohortTensorInfo *a = cohort_model_find_tensor(full, names[i]);
    const CohortTensorInfo *b = cohort_model_find_tensor(fr, names[i]);
    g_assert_cmpmem(full->grads + a->offset, a->numel * 4, fr->grads + b->offset, b->numel * 4);
  }
  cohort_config_free(cfgs[0]);
  cohort_config_free(cfgs[1]);
}

/* LoRA on a ResNet with `targets`: the classifier (nn.Linear, [out, in]: fan_in_fan_out
 * false) and convolutions (the flattened kernel [out, c_in·k·k]). The referee is the full
 * model at the merged weights W' = W + s B A: the same loss, and by the chain rule
 * dB = s dW' Aᵀ and dA = s Bᵀ dW' from its gradient dW' of each adapted weight. */
static void check_resnet_lora(const char *targets, guint n_adapters)
{
  g_autoptr(CohortConfig) lc = resnet_cfg(COHORT_FINETUNE_LORA, "");
  g_autoptr(CohortConfig) fc = resnet_cfg(COHORT_FINETUNE_FULL, "");
  g_free(lc->lora_targets);
  lc->lora_targets = g_strdup(targets);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) lora = cohort_model_new(cohort_backend_cpu(), lc, RB, &error);
  g_assert_no_error(error);
  g_autoptr(CohortModel) full = cohort_model_new(cohort_backend_cpu(), fc, RB, &error);
  g_assert_no_error(error);
  g_assert_nonnull(lora->lora);
  g_assert_cmpuint(lora->lora->n, ==, n_adapters);
  cohort_model_init(lora, 21);
  cohort_model_init(full, 21);
  g_autoptr(CohortBatch) batch = image_batch();
  /* step 0: B = 0, the base exactly */
  float l0 = lora->ops->forward(lora, batch, COHORT_FORWARD_EVAL);
  float f0 = full->ops->forward(full, batch, COHORT_FORWARD_EVAL);
  g_assert_cmpfloat(l0, ==, f0);

  randomise_b(lora);
  g_autofree float *p = g_new(float, lora->n_params), *merged = g_new(float, lora->n_params);
  cohort_model_download_params(lora, p);
  cohort_lora_merge(lora, p, merged);
  g_autofree float *fp = g_new(float, full->n_params);
  for (guint i = 0; i < full->n_tensors; i++) {
    const CohortTensorInfo *d = &full->tensors[i];
    const CohortTensorInfo *src = cohort_model_find_tensor(lora, d->name);
    memcpy(fp + d->offset, merged + src->offset, d->numel * sizeof(float));
  }
  cohort_model_upload_params(full, fp);
  cohort_model_zero_grad(lora);
  cohort_model_zero_grad(full);
  float ll = lora->ops->forward(lora, batch, COHORT_FORWARD_TRAIN);
  lora->ops->backward(lora, 1.0f);
  float fl = full->ops->forward(full, batch, COHORT_FORWARD_TRAIN);
  full->ops->backward(full, 1.0f);
  g_assert_cmpfloat(fabs(ll - fl), <=, 1e-6 * fabs(fl));
  g_assert_cmpfloat(fabs(ll - l0), >, 1e-6); /* the adapter changed the output */

  double scale = 4.0 / 2.0;
  for (guint ad = 0; ad < lora->lora->n; ad++) {
    const CohortTensorInfo *A = &lora->lora->tensors[2 * ad],
                           *Bt = &lora->lora->tensors[2 * ad + 1];
    const CohortTensorInfo *W = &full->tensors[lora->lora->adapters[ad].target];
    int r = A->shape[0], out = Bt->shape[0], in = (int)(A->numel / (size_t)r);
    g_assert_cmpuint(W->numel, ==, (size_t)out * in);
    const float *dW = full->grads + W->offset, *a = p + A->offset, *b = p + Bt->offset;
    double worst = 0, mx = 0;
    for (int o = 0; o < out; o++)
      for (int k = 0; k < r; k++) {
        double want = 0;
        for (int i = 0; i < in; i++)
          want += scale * dW[o * in + i] * a[k * in + i];
        mx = fmax(mx, fabs(want));
        worst = fmax(worst, fabs(lora->grads[Bt->offset + o * r + k] - want));
      }
    for (int k = 0; k < r; k++)
      for (int i = 0; i < in; i++) {
        double want = 0;
        for (int o = 0; o < out; o++)
          want += scale * b[o * r + k] * dW[o * in + i];
        mx = fmax(mx, fabs(want));
        worst = fmax(worst, fabs(lora->grads[A->offset + k * in + i] - want));
      }
    g_test_message("resnet LoRA on %s: worst adapter gradient error %.3g of %.3g", W->name, worst,
                   mx);
    g_assert_cmpfloat(mx, >, 0);
    g_assert_cmpfloat(worst, <=, 1e-5 * mx);
  }
  /* its adapter folder: PEFT's names for torchvision's layers, not fan_in_fan_out, a
   * convolution's pair in nn.Conv2d's shapes */
  g_autofree char *dir = g_dir_make_tmp("cohort-test-lora-XXXXXX", &error);
  g_assert_true(cohort_lora_export(lora, p, dir, "base", &error));
  g_assert_no_error(error);
  g_autofree char *json_path = g_build_filename(dir, "adapter_config.json", NULL);
  g_autofree char *json = NULL;
  g_assert_true(g_file_get_contents(json_path, &json, NULL, NULL));
  g_assert_nonnull(strstr(json, "\"fan_in_fan_out\": false"));
  g_assert_nonnull(strstr(json, "\"fc\""));
  g_autofree char *st_path = g_build_filename(dir, "adapter_model.safetensors", NULL);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(st_path, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_safetensors_has(f, "base_model.model.fc.lora_A.weight"));
  g_assert_true(cohort_safetensors_has(f, "base_model.model.fc.lora_B.weight"));
  if (n_adapters > 1) {
    g_assert_nonnull(strstr(json, "\"layer1.0.conv1\""));
    g_autoptr(CohortWeightsFile) wf = cohort_weights_file_open(st_path, &error);
    g_assert_no_error(error);
    int64_t shape[8];
    /* the stem: 1 → 4 channels, 3×3 */
    g_assert_cmpint(cohort_weights_file_shape(wf, "base_model.model.conv1.lora_A.weight", shape),
                    ==, 4);
    g_assert_true(shape[0] == 2 && shape[1] == 1 && shape[2] == 3 && shape[3] == 3);
    g_assert_cmpint(cohort_weights_file_shape(wf, "base_model.model.conv1.lora_B.weight", shape),
                    ==, 4);
    g_assert_true(shape[0] == 4 && shape[1] == 2 && shape[2] == 1 && shape[3] == 1);
  }
  cohort_remove_tree(dir);
}

static void test_resnet_lora(void)
{
  check_resnet_lora("", 1);
}

/* LoRA on convolutions: the stem, every block's first convolution and the shortcuts'
 * (1×1, stride 2), with the classifier. */
static void test_resnet_conv_lora(void)
{
  check_resnet_lora("conv1,downsample.0,fc", 7);
}

/* Copies a LoRA model's weights with its adapters merged (W' = W + s B A) into `full`. */
static void load_merged(CohortModel *full, CohortModel *lora)
{
  g_autofree float *p = g_new(float, lora->n_params), *merged = g_new(float, lora->n_params);
  cohort_model_download_params(lora, p);
  cohort_lora_merge(lora, p, merged);
  g_autofree float *fp = g_new(float, full->n_params);
  for (guint i = 0; i < full->n_tensors; i++) {
    const CohortTensorInfo *d = &full->tensors[i];
    const CohortTensorInfo *src = cohort_model_find_tensor(lora, d->name);
    memcpy(fp + d->offset, merged + src->offset, d->numel * sizeof(float));
  }
  cohort_model_upload_params(full, fp);
}

/* Every adapter's gradient against the chain rule through the full model at the merged
 * weights: dB = s dW' Aᵀ, dA = s Bᵀ dW' (dW' read [out, in], or [in, out] for Conv1D).
 * Returns the worst error relative to the largest expected value, over all adapters. */
static double chain_rule_error(const CohortModel *lora, const CohortModel *full)
{
  const CohortLora *L = lora->lora;
  double worst = 0;
  for (guint ad = 0; ad < L->n; ad++) {
    const CohortTensorInfo *A = &L->tensors[2 * ad], *Bt = &L->tensors[2 * ad + 1];
    const CohortTensorInfo *W =
        cohort_model_find_tensor(full, lora->tensors[L->adapters[ad].target].name);
    gboolean conv1d = L->adapters[ad].kind == COHORT_ADAPT_CONV1D;
    int r = A->shape[0], in = A->shape[1], out = Bt->shape[0];
    const float *dW = full->grads + W->offset, *a = lora->params + A->offset;
    const float *b = lora->params + Bt->offset;
    double err = 0, mx = 0;
    for (int o = 0; o < out; o++)
      for (int k = 0; k < r; k++) {
        double want = 0;
        for (int i = 0; i < in; i++)
          want += L->scale * (double)dW[conv1d ? i * out + o : o * in + i] * a[k * in + i];
        mx = fmax(mx, fabs(want));
        err = fmax(err, fabs(lora->grads[Bt->offset + o * r + k] - want));
      }
    for (int k = 0; k < r; k++)
      for (int i = 0; i < in; i++) {
        double want = 0;
        for (int o = 0; o < out; o++)
          want += L->scale * (double)b[o * r + k] * dW[conv1d ? i * out + o : o * in + i];
        mx = fmax(mx, fabs(want));
        err = fmax(err, fabs(lora->grads[A->offset + k * in + i] - want));
      }
    g_assert_cmpfloat(mx, >, 0);
    worst = fmax(worst, err / mx);
  }
  return worst;
}

/* LoRA on a DiT (attention, MLP and adaLN modulation, nn.Linear): step 0 is the base exactly;
 * with random B the loss is the full model's at the merged weights and every adapter gradient
 * follows the chain rule; frozen with trainable *.bias gives the biases the full model's
 * gradients. */
static void test_dit(void)
{
  enum { DB = 2, IS = 8 };
  CohortConfig *cfgs[3];
  for (guint k = 0; k < 3; k++) {
    CohortConfig *c = cohort_config_new();
    g_free(c->model);
    c->model = g_strdup("dit");
    c->data_format = COHORT_DATA_IMAGES;
    c->n_layer = 2, c->n_head = 2, c->n_embd = 16, c->patch_size = 4;
    c->image_size = IS, c->image_channels = 1, c->num_classes = 3;
    c->finetune = k == 0   ? COHORT_FINETUNE_FULL
                  : k == 1 ? COHORT_FINETUNE_LORA
                           : COHORT_FINETUNE_FROZEN;
    c->lora_rank = 2;
    c->lora_alpha = 3.0;
    g_free(c->trainable);
    c->trainable = g_strdup(k == 2 ? "*.bias" : "");
    cfgs[k] = c;
  }
  g_autoptr(GError) error = NULL;
  CohortModel *full = cohort_model_new(cohort_backend_cpu(), cfgs[0], DB, &error);
  g_assert_no_error(error);
  CohortModel *lora = cohort_model_new(cohort_backend_cpu(), cfgs[1], DB, &error);
  g_assert_no_error(error);
  CohortModel *fr = cohort_model_new(cohort_backend_cpu(), cfgs[2], DB, &error);
  g_assert_no_error(error);
  /* 2 blocks × (qkv, proj, fc1, fc2, adaLN) + the final layer's adaLN */
  g_assert_cmpuint(lora->lora->n, ==, 11);
  cohort_model_init(full, 4);
  cohort_model_init(lora, 4);
  cohort_model_init(fr, 4);
  float x_t[DB * IS * IS], target[DB * IS * IS], t[DB] = {0.25f, 0.8f};
  int labels[DB] = {1, 3};
  for (int i = 0; i < DB * IS * IS; i++) {
    x_t[i] = (float)((i * 29) % 13) / 13.0f - 0.5f;
    target[i] = (float)((i * 17) % 11) / 11.0f - 0.5f;
  }
  float f0 = cohort_dit_forward_given(full, x_t, t, labels, target, DB);
  float l0 = cohort_dit_forward_given(lora, x_t, t, labels, target, DB);
  g_assert_cmpfloat(f0, ==, l0);

  randomise_all(lora);
  load_merged(full, lora);
  cohort_model_zero_grad(full);
  cohort_model_zero_grad(lora);
  float fl = cohort_dit_forward_given(full, x_t, t, labels, target, DB);
  full->ops->backward(full, 1.0f);
  float ll = cohort_dit_forward_given(lora, x_t, t, labels, target, DB);
  lora->ops->backward(lora, 1.0f);
  g_assert_cmpfloat(fabs(ll - fl), <=, 1e-5 * fabs(fl));
  double worst = chain_rule_error(lora, full);
  g_test_message("dit LoRA: loss %.8g vs merged full %.8g; worst adapter gradient error %.3g", ll,
                 fl, worst);
  g_assert_cmpfloat(worst, <=, 1e-5);

  /* frozen *.bias: the biases' gradients are the full model's at the same weights */
  load_merged(fr, full);
  g_autoptr(CohortModel) base = cohort_model_new(cohort_backend_cpu(), cfgs[0], DB, &error);
  cohort_model_init(base, 4); /* its buffers (pos_embed) */
  load_merged(base, full);
  cohort_model_zero_grad(fr);
  cohort_model_zero_grad(base);
  float bl = cohort_dit_forward_given(base, x_t, t, labels, target, DB);
  base->ops->backward(base, 1.0f);
  float rl = cohort_dit_forward_given(fr, x_t, t, labels, target, DB);
  fr->ops->backward(fr, 1.0f);
  g_assert_cmpfloat(bl, ==, rl);
  guint biases = 0;
  for (guint i = 0; i < fr->n_tensors; i++) {
    const CohortTensorInfo *ft = &fr->tensors[i];
    g_assert_true(ft->frozen == !g_str_has_suffix(ft->name, ".bias"));
    if (ft->frozen)
      continue;
    const CohortTensorInfo *bt = cohort_model_find_tensor(base, ft->name);
    g_assert_cmpmem(base->grads + bt->offset, bt->numel * 4, fr->grads + ft->offset, ft->numel * 4);
    biases++;
  }
  g_assert_cmpuint(biases, >, 10);
  cohort_model_free(full);
  cohort_model_free(lora);
  cohort_model_free(fr);
  for (guint k = 0; k < 3; k++)
    cohort_config_free(cfgs[k]);
}

/* The GPT's adapters (Conv1D) against the same chain rule. */
static void test_gpt_chain_rule(void)
{
  g_autoptr(CohortConfig) full_cfg = gpt_cfg("full", NULL, NULL);
  g_autoptr(CohortConfig) lora_cfg = gpt_cfg("lora", NULL, NULL);
  g_autoptr(CohortModel) full = make(full_cfg);
  g_autoptr(CohortModel) lora = make(lora_cfg);
  cohort_model_init(lora, 8);
  randomise_b(lora);
  load_merged(full, lora);
  g_autoptr(CohortBatch) batch = make_batch();
  cohort_model_zero_grad(full);
  cohort_model_zero_grad(lora);
  float fl = full->ops->forward(full, batch, COHORT_FORWARD_TRAIN);
  full->ops->backward(full, 1.0f);
  float ll = lora->ops->forward(lora, batch, COHORT_FORWARD_TRAIN);
  lora->ops->backward(lora, 1.0f);
  g_assert_cmpfloat(fabs(ll - fl), <=, 1e-5 * fabs(fl));
  double worst = chain_rule_error(lora, full);
  g_test_message("gpt LoRA: worst adapter gradient error against the chain rule %.3g", worst);
  g_assert_cmpfloat(worst, <=, 1e-5);
}

/* The DiT with adapters against tests/torch_lora_image_ref.py: the DiT of torch_dit_ref.py
 * loads Cohort's base strictly, PEFT-style LoRA layers wrap the Linear layers that the
 * folder's target_modules name and load its tensors strictly; same loss and adapter
 * gradients. */
static void test_dit_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  enum { DB = 2, IS = 8, L = 2, NH = 2, HID = 16, PATCH = 4, CL = 3 };
  g_autoptr(CohortConfig) c = cohort_config_new();
  g_free(c->model);
  c->model = g_strdup("dit");
  c->data_format = COHORT_DATA_IMAGES;
  c->n_layer = L, c->n_head = NH, c->n_embd = HID, c->patch_size = PATCH;
  c->image_size = IS, c->image_channels = 1, c->num_classes = CL;
  c->finetune = COHORT_FINETUNE_LORA;
  c->lora_rank = 2;
  c->lora_alpha = 3.0;
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), c, DB, &error);
  g_assert_no_error(error);
  cohort_model_init(m, 4); /* pos_embed */
  randomise_all(m);
  float x_t[DB * IS * IS], target[DB * IS * IS], t[DB] = {0.25f, 0.8f};
  int labels[DB] = {1, 3};
  for (int i = 0; i < DB * IS * IS; i++) {
    x_t[i] = (float)((i * 29) % 13) / 13.0f - 0.5f;
    target[i] = (float)((i * 17) % 11) / 11.0f - 0.5f;
  }
  cohort_model_zero_grad(m);
  float loss = cohort_dit_forward_given(m, x_t, t, labels, target, DB);
  m->ops->backward(m, 1.0f);

  g_autofree char *dir = g_dir_make_tmp("cohort-test-lora-XXXXXX", &error);
  g_autofree char *base = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *adapter = g_build_filename(dir, "adapter", NULL);
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_autofree float *p = g_new(float, m->n_params);
  cohort_model_download_params(m, p);
  g_assert_true(cohort_model_save(m, NULL, base, NULL, &error));
  g_assert_true(cohort_lora_export(m, p, adapter, dir, &error));
  g_assert_no_error(error);
  GByteArray *buf = g_byte_array_new();
  int hdr[8] = {L, NH, HID, IS, 1, PATCH, CL, DB};
  g_byte_array_append(buf, (guint8 *)hdr, sizeof hdr);
  g_byte_array_append(buf, (guint8 *)x_t, sizeof x_t);
  g_byte_array_append(buf, (guint8 *)t, sizeof t);
  g_byte_array_append(buf, (guint8 *)labels, sizeof labels);
  g_byte_array_append(buf, (guint8 *)target, sizeof target);
  g_assert_true(g_file_set_contents(inputs, (char *)buf->data, buf->len, &error));
  g_byte_array_unref(buf);
  g_autofree char *out = torch_ref_run("torch_lora_image_ref.py",
                                       (const char *[]){"dit", base, adapter, inputs, NULL});
  cohort_remove_tree(dir);
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, 1 + m->lora->n_tensors);
  double ref = g_ascii_strtod(lines[0], NULL);
  g_assert_cmpfloat(fabs(loss - ref), <=, 1e-5 * fabs(ref));
  double worst = adapter_grads_vs(m, lines + 1, m->lora->n_tensors);
  g_test_message("dit: loss %.9g vs PyTorch %.9g; worst adapter gradient error %.3g", loss, ref,
                 worst);
}

/* The ResNet's adapters against tests/torch_lora_image_ref.py (training mode): the classifier
 * and convolutions (PEFT's Conv2d LoRA: lora_A with the kernel's stride and padding, lora_B
 * 1×1), on the stem, the blocks' first convolutions and the shortcuts. */
static void test_resnet_against_torch(void)
{
  if (!have_torch()) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
    return;
  }
  g_autoptr(CohortConfig) c = resnet_cfg(COHORT_FINETUNE_LORA, "");
  /* the stem's conv1 and one block's, not the others': PEFT's list form would name them all,
   * so target_modules is a regular expression */
  g_free(c->lora_targets);
  c->lora_targets = g_strdup("conv?,layer2.0.conv1,downsample.0,fc");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), c, RB, &error);
  g_assert_no_error(error);
  cohort_model_init(m, 9);
  randomise_b(m);
  g_autoptr(CohortBatch) batch = image_batch();
  cohort_model_zero_grad(m);
  float loss = m->ops->forward(m, batch, COHORT_FORWARD_TRAIN);
  m->ops->backward(m, 1.0f);

  g_autofree char *dir = g_dir_make_tmp("cohort-test-lora-XXXXXX", &error);
  g_autofree char *base = g_build_filename(dir, "model.safetensors", NULL);
  g_autofree char *adapter = g_build_filename(dir, "adapter", NULL);
  g_autofree char *inputs = g_build_filename(dir, "inputs.bin", NULL);
  g_autofree float *p = g_new(float, m->n_params);
  cohort_model_download_params(m, p);
  /* the base as it was before this forward's running statistics: BatchNorm in training mode
   * normalises with the batch's, so the loss does not depend on them */
  g_assert_true(cohort_model_save(m, NULL, base, NULL, &error));
  g_assert_true(cohort_lora_export(m, p, adapter, dir, &error));
  g_assert_no_error(error);
  g_autofree char *json_path = g_build_filename(adapter, "adapter_config.json", NULL);
  g_autofree char *json = NULL;
  g_assert_true(g_file_get_contents(json_path, &json, NULL, NULL));
  g_assert_nonnull(strstr(json, "\"target_modules\": \"conv1|layer2\\\\.0\\\\.conv1|"));
  GByteArray *buf = g_byte_array_new();
  int hdr[6] = {1, 4, 1, S, K, RB};
  float mom = 0.1f;
  g_byte_array_append(buf, (guint8 *)hdr, sizeof hdr);
  g_byte_array_append(buf, (guint8 *)&mom, sizeof mom);
  g_byte_array_append(buf, (guint8 *)batch->images, RB * S * S * sizeof(float));
  g_byte_array_append(buf, (guint8 *)batch->labels, RB * sizeof(int));
  g_assert_true(g_file_set_contents(inputs, (char *)buf->data, buf->len, &error));
  g_byte_array_unref(buf);
  g_autofree char *out = torch_ref_run("torch_lora_image_ref.py",
                                       (const char *[]){"resnet", base, adapter, inputs, NULL});
  cohort_remove_tree(dir);
  g_auto(GStrv) lines = g_strsplit(g_strstrip(out), "\n", -1);
  g_assert_cmpuint(g_strv_length(lines), ==, 1 + m->lora->n_tensors);
  double ref = g_ascii_strtod(lines[0], NULL);
  g_assert_cmpfloat(fabs(loss - ref), <=, 1e-5 * fabs(ref));
  double worst = adapter_grads_vs(m, lines + 1, m->lora->n_tensors);
  g_test_message("resnet: loss %.9g vs PyTorch %.9g; worst adapter gradient error %.3g", loss, ref,
                 worst);
}

static void expect_refusal(CohortConfig *cfg, const char *needle)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_null(m);
  g_assert_nonnull(error);
  g_assert_null(strchr(error->message, '\n'));
  if (!strstr(error->message, needle))
    g_error("\"%s\" does not name \"%s\"", error->message, needle);
}

/* Patterns that name nothing, and modes a family cannot run, are refused in one line naming
 * the key and the value. */
static void test_refusals(void)
{
  g_autoptr(CohortConfig) a = gpt_cfg("lora", NULL, "c_atn");
  expect_refusal(a, "\"c_atn\"");
  g_autoptr(CohortConfig) b = gpt_cfg("lora", "h.*.ln_3.*", NULL);
  expect_refusal(b, "\"h.*.ln_3.*\"");
  g_autoptr(CohortConfig) c = gpt_cfg("lora", NULL, "ln_1");
  expect_refusal(c, "cannot take an adapter");
  /* several problems: the first pattern's is told */
  g_autoptr(CohortConfig) c2 = gpt_cfg("lora", NULL, "c_atn,ln_1");
  expect_refusal(c2, "pattern \"c_atn\" names no layer");
  g_autoptr(CohortConfig) c3 = gpt_cfg("lora", NULL, "ln_1,c_atn");
  expect_refusal(c3, "pattern \"ln_1\" names h.0.ln_1");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) f = gpt_cfg("frozen", NULL, NULL);
  g_assert_false(cohort_finetune_check_config(f, "run.json", &error));
  g_assert_nonnull(strstr(error->message, "key \"trainable\""));
  g_clear_error(&error);
  /* every ZeRO stage shards what learns alone (tests/test-lora-ddp.c drives 2 and 3) */
  g_autoptr(CohortConfig) z = gpt_cfg("lora", NULL, NULL);
  for (z->zero_stage = 1; z->zero_stage <= 3; z->zero_stage++)
    g_assert_true(cohort_finetune_check_config(z, "run.json", NULL));
  /* frozen_dtype bf16: each combination it refuses names the key and the other one */
  g_autoptr(CohortConfig) fb = gpt_cfg("lora", NULL, NULL);
  fb->frozen_dtype = COHORT_FROZEN_BF16;
  fb->precision = COHORT_PRECISION_BF16;
  g_assert_true(cohort_finetune_check_config(fb, "run.json", NULL));
  const char *needles[] = {"zero_stage 2 or 3", "ema_decay", "teacher_layers", "finetune \"full\"",
                           "precision \"bf16\""};
  for (guint i = 0; i < G_N_ELEMENTS(needles); i++) {
    g_autoptr(CohortConfig) x = cohort_config_copy(fb);
    if (i == 0)
      x->zero_stage = 2;
    else if (i == 1)
      x->ema_decay = 0.999;
    else if (i == 2)
      x->student_init = COHORT_STUDENT_INIT_TEACHER_LAYERS;
    else if (i == 3)
      x->finetune = COHORT_FINETUNE_FULL;
    else
      x->precision = COHORT_PRECISION_FP32;
    g_assert_false(cohort_finetune_check_config(x, "run.json", &error));
    if (!strstr(error->message, "key \"frozen_dtype\"") || !strstr(error->message, needles[i]))
      g_error("\"%s\" does not name frozen_dtype and %s", error->message, needles[i]);
    g_clear_error(&error);
  }
  /* resnet: not on BatchNorm; dit: not on the patch embedding */
  for (guint i = 0; i < 2; i++) {
    g_autoptr(CohortConfig) d = gpt_cfg("lora", "*.bias", NULL);
    g_free(d->model);
    d->model = g_strdup(i == 0 ? "dit" : "resnet");
    d->data_format = COHORT_DATA_IMAGES;
    d->image_size = 8, d->image_channels = 1, d->num_classes = 3;
    if (i == 0) {
      d->n_embd = 16, d->patch_size = 4;
    } else {
      d->n_layer = 8, d->resnet_width = 4;
    }
    g_free(d->lora_targets);
    d->lora_targets = g_strdup(i == 0 ? "x_embedder.proj" : "bn1");
    expect_refusal(d, "cannot take an adapter");
    if (i == 1) {
      /* a convolution's adapter is folded into its kernel: no dropout on its input */
      g_free(d->lora_targets);
      d->lora_targets = g_strdup("fc,layer2.0.conv2");
      d->lora_dropout = 0.1;
      expect_refusal(d, "\"lora_dropout\": 0.1 with the convolution layer2.0.conv2");
    }
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/lora/step0-is-base", test_step0_is_base);
  g_test_add_func("/lora/against-torch", test_against_torch);
  g_test_add_func("/lora/against-torch-rslora", test_against_torch_rslora);
  g_test_add_func("/lora/llama-against-torch", test_llama_against_torch);
  g_test_add_func("/lora/adapter-round-trip", test_adapter_round_trip);
  g_test_add_func("/lora/frozen", test_frozen);
  g_test_add_func("/lora/llama-frozen", test_llama_frozen);
  g_test_add_func("/lora/resnet-frozen", test_resnet_frozen);
  g_test_add_func("/lora/resnet-lora", test_resnet_lora);
  g_test_add_func("/lora/resnet-conv-lora", test_resnet_conv_lora);
  g_test_add_func("/lora/dit", test_dit);
  g_test_add_func("/lora/dit-against-torch", test_dit_against_torch);
  g_test_add_func("/lora/resnet-against-torch", test_resnet_against_torch);
  g_test_add_func("/lora/gpt-chain-rule", test_gpt_chain_rule);
  g_test_add_func("/lora/refusals", test_refusals);
  return g_test_run();
}
