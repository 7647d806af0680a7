/* Hugging Face folders of the llama family made by a test (header-only, tests only): the
 * tensors of a model made from `sets` (its tables, HF names), with random values rounded to the
 * dtype, written by hand as safetensors in F32, BF16 or F16 (one file, or shards with
 * model.safetensors.index.json as save_pretrained writes them), and config.json as transformers
 * writes it. Nothing here uses Cohort's writers, so a reader bug cannot cancel a writer bug. */
#pragma once

#include <json-glib/json-glib.h>
#include <string.h>

#include "engine/models/registry.h"
#include "kernels/backend.h"

typedef enum { LF_F32, LF_BF16, LF_F16 } LfDtype;

/* The model `sets` ("key=value", NULL-ended) configure, on the CPU for 2 sequences a batch,
 * parameters zero. */
static CohortModel *lf_model(const char *const *sets)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  (void)(cohort_config_apply_assignments(cfg, sets, "test", &error) &&
         cohort_model_check_config(cfg, "test", &error));
  g_assert_no_error(error);
  CohortModel *m = cohort_model_new(cohort_backend_cpu(), cfg, 2, &error);
  g_assert_no_error(error);
  return m;
}

static guint32 lf_bits(float v)
{
  guint32 u;
  memcpy(&u, &v, 4);
  return u;
}

static float lf_float(guint32 u)
{
  float v;
  memcpy(&v, &u, 4);
  return v;
}

/* Values F16 holds exactly when `shift` is 0: k / 2^(10 + shift) for -512 <= k < 512, norms
 * 1 + k / 2^(10 + shift). */
static void lf_fill(CohortModel *m, guint32 seed, int shift)
{
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    gboolean norm = g_str_has_suffix(t->name, "norm.weight");
    for (size_t k = 0; k < t->numel; k++) {
      seed = seed * 1664525u + 1013904223u;
      int v = (int)(seed >> 22) - 512; /* -512 … 511 */
      m->params[t->offset + k] = (norm ? 1.0f : 0.0f) + ldexpf((float)v, -10 - shift);
    }
  }
}

/* An F16's bits of a float it holds exactly (lf_fill's values, normal or subnormal). */
static guint16 lf_f16(float v)
{
  guint32 u = lf_bits(v), sign = (u >> 16) & 0x8000u;
  float a = fabsf(v);
  if (a == 0.0f)
    return (guint16)sign;
  int e;
  float f = frexpf(a, &e); /* a = f · 2^e, f in [0.5, 1) */
  if (e - 1 < -14)         /* subnormal: a / 2^-24 */
    return (guint16)(sign | (guint32)ldexpf(a, 24));
  return (guint16)(sign | (guint32)(e - 1 + 15) << 10 | ((guint32)ldexpf(f, 11) & 0x3ffu));
}

/* Writes the tensors `idx` (n of them) of `m` into the safetensors file `path` as `dt`. */
static void lf_write_st(const char *path, const CohortModel *m, const guint *idx, guint n,
                        LfDtype dt)
{
  static const char *const names[] = {"F32", "BF16", "F16"};
  size_t width = dt == LF_F32 ? 4 : 2;
  g_autoptr(GString) h = g_string_new("{\"__metadata__\":{\"format\":\"pt\"}");
  g_autoptr(GByteArray) data = g_byte_array_new();
  for (guint j = 0; j < n; j++) {
    const CohortTensorInfo *t = &m->tensors[idx[j]];
    g_string_append_printf(h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, names[dt]);
    for (int d = 0; d < t->ndim; d++)
      g_string_append_printf(h, "%s%d", d ? "," : "", t->shape[d]);
    g_string_append_printf(h, "],\"data_offsets\":[%u,%zu]}", data->len,
                           data->len + t->numel * width);
    for (size_t k = 0; k < t->numel; k++) {
      float v = m->params[t->offset + k];
      guint32 u = dt == LF_F32 ? lf_bits(v) : dt == LF_BF16 ? lf_bits(v) >> 16 : lf_f16(v);
      guint8 b[4] = {u & 0xff, (u >> 8) & 0xff, (u >> 16) & 0xff, u >> 24};
      g_byte_array_append(data, b, (guint)width);
    }
  }
  g_string_append_c(h, '}');
  while (h->len % 8)
    g_string_append_c(h, ' ');
  g_autoptr(GByteArray) file = g_byte_array_new();
  guint8 len[8] = {0};
  for (int i = 0; i < 8; i++)
    len[i] = (guint8)((guint64)h->len >> (8 * i));
  g_byte_array_append(file, len, 8);
  g_byte_array_append(file, (guint8 *)h->str, (guint)h->len);
  g_byte_array_append(file, data->data, data->len);
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_set_contents(path, (char *)file->data, file->len, &error));
}

/* `m`'s tensors into `dir` as `dt`: model.safetensors (n_shards 0), or n_shards shards and their
 * index. The values of m->params are first rounded to what the dtype holds (BF16 truncates). */
static void lf_write_weights(const char *dir, CohortModel *m, LfDtype dt, guint n_shards)
{
  for (size_t k = 0; dt == LF_BF16 && k < m->n_params; k++)
    m->params[k] = lf_float(lf_bits(m->params[k]) & 0xffff0000u);
  g_autofree guint *idx = g_new(guint, m->n_tensors);
  for (guint i = 0; i < m->n_tensors; i++)
    idx[i] = i;
  if (n_shards == 0) {
    g_autofree char *path = g_build_filename(dir, "model.safetensors", NULL);
    lf_write_st(path, m, idx, m->n_tensors, dt);
    return;
  }
  g_autoptr(GString) index = g_string_new("{\"metadata\":{\"total_size\":0},\"weight_map\":{");
  for (guint s = 0, first = 0; s < n_shards; s++) {
    guint end = (s + 1) * m->n_tensors / n_shards;
    g_autofree char *name = g_strdup_printf("model-%05u-of-%05u.safetensors", s + 1, n_shards);
    g_autofree char *path = g_build_filename(dir, name, NULL);
    lf_write_st(path, m, idx + first, end - first, dt);
    for (guint i = first; i < end; i++)
      g_string_append_printf(index, "%s\"%s\":\"%s\"", i ? "," : "", m->tensors[i].name, name);
    first = end;
  }
  g_string_append(index, "}}");
  g_autofree char *path = g_build_filename(dir, "model.safetensors.index.json", NULL);
  g_assert_true(g_file_set_contents(path, index->str, -1, NULL));
}

/* config.json of the model `sets` describe, as transformers writes it for `arch`. */
static JsonObject *lf_config(const char *const *sets)
{
  g_autoptr(CohortConfig) c = cohort_config_new();
  g_assert_true(cohort_config_apply_assignments(c, sets, "test", NULL));
  static const char *const archs[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                      "Qwen3ForCausalLM"};
  JsonObject *o = json_object_new();
  JsonArray *a = json_array_new();
  json_array_add_string_element(a, archs[c->architecture]);
  json_object_set_array_member(o, "architectures", a);
  json_object_set_int_member(o, "num_hidden_layers", c->n_layer);
  json_object_set_int_member(o, "hidden_size", c->n_embd);
  json_object_set_int_member(o, "num_attention_heads", c->n_head);
  json_object_set_int_member(o, "num_key_value_heads",
                             c->num_key_value_heads ? c->num_key_value_heads : c->n_head);
  if (c->head_dim)
    json_object_set_int_member(o, "head_dim", c->head_dim);
  json_object_set_int_member(o, "intermediate_size", c->intermediate_size);
  json_object_set_int_member(o, "vocab_size", c->vocab_size);
  json_object_set_int_member(o, "max_position_embeddings", 4096);
  json_object_set_double_member(o, "rms_norm_eps", c->rms_norm_eps);
  json_object_set_double_member(o, "rope_theta", c->rope_theta);
  json_object_set_null_member(o, "rope_scaling");
  json_object_set_string_member(o, "hidden_act", "silu");
  json_object_set_boolean_member(o, "attention_bias", c->attention_bias);
  json_object_set_boolean_member(o, "tie_word_embeddings", c->tie_word_embeddings);
  json_object_set_string_member(o, "torch_dtype", "bfloat16");
  return o;
}

/* Writes `o` (taken) as dir/config.json. */
static void lf_write_config(const char *dir, JsonObject *o)
{
  g_autoptr(JsonNode) root = json_node_new(JSON_NODE_OBJECT);
  json_node_take_object(root, o); /* the file's object is the caller's no more */
  g_autofree char *text = json_to_string(root, TRUE);
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  g_assert_true(g_file_set_contents(path, text, -1, NULL));
}
