/* config.json of the llama family's Hugging Face folders, in and out (see llama-io.h). */
#include "engine/models/llama-io.h"

#include <stdarg.h>
#include <string.h>
#include <json-glib/json-glib.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"
#include "engine/config/config-keys.h"

/* HF's model_type of each architecture (CohortLlamaArch order). */
static const char *const model_types[COHORT_LLAMA_ARCH_COUNT] = {"llama", "mistral", "qwen2",
                                                                 "qwen3"};

static gboolean hf_error(GError **error, const char *path, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
static gboolean hf_error(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, fmt, ap);
  va_end(ap);
  g_prefix_error(error, "%s: ", path);
  return FALSE;
}

/* A member that is absent or JSON null counts as not given. */
static JsonNode *member(JsonObject *o, const char *key)
{
  JsonNode *n = o ? json_object_get_member(o, key) : NULL;
  return n && !JSON_NODE_HOLDS_NULL(n) ? n : NULL;
}

static gboolean is_type(JsonNode *n, GType t)
{
  return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == t;
}

/* An integer `key` of the file, within the bounds of the config key `cfg_key` (and at least
 * `least`); absent: *out unchanged unless `required`. */
static gboolean hf_int(JsonObject *o, const char *path, const char *key, const char *cfg_key,
                       int least, gboolean required, int *out, GError **error)
{
  JsonNode *n = member(o, key);
  const CohortConfigKey *k = cohort_config_find_key(cfg_key);
  gint64 lo = MAX((gint64)k->min, least), hi = (gint64)k->max;
  if (!n && !required)
    return TRUE;
  if (!n)
    return hf_error(error, path,
                    "key \"%s\" is missing; allowed: an integer from %" G_GINT64_FORMAT
                    " to %" G_GINT64_FORMAT,
                    key, lo, hi);
  if (!is_type(n, G_TYPE_INT64) || json_node_get_int(n) < lo || json_node_get_int(n) > hi) {
    g_autofree char *shown = cohort_json_to_string(n, FALSE);
    return hf_error(error, path,
                    "key \"%s\": %.40s is not allowed; allowed: an integer from %" G_GINT64_FORMAT
                    " to %" G_GINT64_FORMAT " (Cohort's %s)",
                    key, shown, lo, hi, cfg_key);
  }
  *out = (int)json_node_get_int(n);
  return TRUE;
}

/* A number `key` (absent: *out unchanged), within [lo, hi]. */
static gboolean hf_number(JsonObject *o, const char *path, const char *key, double lo, double hi,
                          double *out, GError **error)
{
  JsonNode *n = member(o, key);
  if (!n)
    return TRUE;
  double v = is_type(n, G_TYPE_INT64)    ? (double)json_node_get_int(n)
             : is_type(n, G_TYPE_DOUBLE) ? json_node_get_double(n)
                                         : -G_MAXDOUBLE;
  if (!(v >= lo && v <= hi)) {
    g_autofree char *shown = cohort_json_to_string(n, FALSE);
    return hf_error(error, path,
                    "key \"%s\": %.40s is not allowed; allowed: a number from %g to %g", key, shown,
                    lo, hi);
  }
  *out = v;
  return TRUE;
}

static gboolean hf_bool(JsonObject *o, const char *path, const char *key, gboolean *out,
                        GError **error)
{
  JsonNode *n = member(o, key);
  if (!n)
    return TRUE;
  if (!is_type(n, G_TYPE_BOOLEAN))
    return hf_error(error, path, "key \"%s\" is not true or false", key);
  *out = json_node_get_boolean(n);
  return TRUE;
}

static const char *hf_string(JsonObject *o, const char *key)
{
  JsonNode *n = member(o, key);
  return is_type(n, G_TYPE_STRING) ? json_node_get_string(n) : NULL;
}

/* architectures[0] (else model_type) as CohortLlamaArch. */
static gboolean read_arch(JsonObject *o, const char *path, int *arch, GError **error)
{
  JsonNode *a = member(o, "architectures");
  const char *name = NULL;
  if (a && JSON_NODE_HOLDS_ARRAY(a) && json_array_get_length(json_node_get_array(a)) > 0) {
    JsonNode *first = json_array_get_element(json_node_get_array(a), 0);
    name = is_type(first, G_TYPE_STRING) ? json_node_get_string(first) : "";
    for (int i = 0; i < COHORT_LLAMA_ARCH_COUNT; i++)
      if (g_str_equal(name, cohort_family_llama_archs[i]))
        return *arch = i, TRUE;
  } else if ((name = hf_string(o, "model_type"))) {
    for (int i = 0; i < COHORT_LLAMA_ARCH_COUNT; i++)
      if (g_str_equal(name, model_types[i]))
        return *arch = i, TRUE;
  }
  g_autofree char *shown = name ? cohort_utf8_escape(name) : g_strdup("(none)");
  return hf_error(error, path,
                  "key \"%s\": \"%.80s\" is not a model the llama family builds; allowed: "
                  "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM",
                  a ? "architectures" : "model_type", shown);
}

/* What the family does not compute is refused by name. */
static gboolean refuse_switches(JsonObject *o, const char *path, int arch, GError **error)
{
  const char *act = hf_string(o, "hidden_act");
  if (!act)
    act = hf_string(o, "hidden_activation");
  if (act && !g_str_equal(act, "silu"))
    return hf_error(error, path,
                    "key \"hidden_act\": \"%.40s\" is not supported; allowed: \"silu\"", act);
  gboolean mlp_bias = FALSE;
  if (!hf_bool(o, path, "mlp_bias", &mlp_bias, error))
    return FALSE;
  if (mlp_bias)
    return hf_error(error, path, "key \"mlp_bias\": true is not supported; allowed: false");
  static const char *const moe[] = {"num_experts", "num_local_experts", "n_routed_experts",
                                    "moe_intermediate_size"};
  for (guint i = 0; i < G_N_ELEMENTS(moe); i++) {
    JsonNode *n = member(o, moe[i]);
    if (n && !(is_type(n, G_TYPE_INT64) && json_node_get_int(n) == 0))
      return hf_error(error, path,
                      "key \"%s\": a mixture of experts is not supported; allowed: dense models",
                      moe[i]);
  }
  /* Qwen2/Qwen3 attend within sliding_window (4096 by default) when use_sliding_window is
   * true; Mistral whenever sliding_window is not null */
  gboolean use_sw = FALSE;
  if (!hf_bool(o, path, "use_sliding_window", &use_sw, error))
    return FALSE;
  if (use_sw)
    return hf_error(error, path,
                    "key \"use_sliding_window\": attention within a sliding window is not "
                    "supported; allowed: false");
  if (arch == COHORT_LLAMA_ARCH_MISTRAL && member(o, "sliding_window"))
    return hf_error(error, path,
                    "key \"sliding_window\": attention within a sliding window is not supported; "
                    "allowed: null");
  return TRUE;
}

/* rope_theta and rope_scaling, or transformers 5's rope_parameters holding both. */
static gboolean read_rope(JsonObject *o, const char *path, CohortConfig *cfg, GError **error)
{
  JsonNode *params = member(o, "rope_parameters");
  JsonObject *p = params && JSON_NODE_HOLDS_OBJECT(params) ? json_node_get_object(params) : NULL;
  JsonNode *scaling = p ? params : member(o, "rope_scaling");
  const char *key = p ? "rope_parameters" : "rope_scaling";
  cfg->rope_theta = 10000.0;
  if (!hf_number(p ? p : o, path, "rope_theta", 1.0, 1e12, &cfg->rope_theta, error))
    return FALSE;
  cfg->rope_scaling = COHORT_ROPE_DEFAULT;
  if (!scaling)
    return TRUE;
  if (!JSON_NODE_HOLDS_OBJECT(scaling))
    return hf_error(error, path, "key \"%s\" is not an object or null", key);
  JsonObject *s = json_node_get_object(scaling);
  const char *type = hf_string(s, "rope_type");
  if (!type)
    type = hf_string(s, "type");
  if (!type || g_str_equal(type, "default"))
    return TRUE;
  if (!g_str_equal(type, "linear") && !g_str_equal(type, "llama3"))
    return hf_error(error, path,
                    "key \"%s.rope_type\": \"%.40s\" is not supported; allowed: \"default\", "
                    "\"linear\", \"llama3\"",
                    key, type);
  cfg->rope_scaling = g_str_equal(type, "linear") ? COHORT_ROPE_LINEAR : COHORT_ROPE_LLAMA3;
  if (!member(s, "factor"))
    return hf_error(error, path, "key \"%s.factor\" is missing", key);
  if (!hf_number(s, path, "factor", 1.0, 1e6, &cfg->rope_scaling_factor, error))
    return FALSE;
  if (cfg->rope_scaling == COHORT_ROPE_LINEAR)
    return TRUE;
  static const char *const need[] = {"low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings"};
  for (guint i = 0; i < G_N_ELEMENTS(need); i++)
    if (!member(s, need[i]))
      return hf_error(error, path, "key \"%s.%s\" is missing (llama3 scaling)", key, need[i]);
  return hf_number(s, path, "low_freq_factor", 1e-300, 1e6, &cfg->rope_low_freq_factor, error) &&
         hf_number(s, path, "high_freq_factor", 1e-300, 1e6, &cfg->rope_high_freq_factor, error) &&
         hf_int(s, path, "original_max_position_embeddings",
                "rope_original_max_position_embeddings", 1, TRUE,
                &cfg->rope_original_max_position_embeddings, error);
}

static JsonNode *read_json_object(const char *path, GError **error)
{
  g_autoptr(GError) local = NULL;
  gsize len = 0;
  g_autofree char *text = cohort_file_read_regular(path, 16u << 20, "a config.json", &len, &local);
  g_autoptr(JsonNode) root =
      text ? cohort_json_parse_strict(text, (gssize)len, path, 0, &local) : NULL;
  if (!root) {
    g_set_error_literal(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, local->message);
    return NULL;
  }
  if (!JSON_NODE_HOLDS_OBJECT(root)) {
    hf_error(error, path, "not a JSON object");
    return NULL;
  }
  return g_steal_pointer(&root);
}

gboolean cohort_llama_read_hf_config(const char *path, CohortConfig *cfg, int *max_positions,
                                     GError **error)
{
  g_autoptr(JsonNode) root = read_json_object(path, error);
  if (!root)
    return FALSE;
  JsonObject *o = json_node_get_object(root);
  g_autoptr(CohortConfig) c = cohort_config_copy(cfg);
  int maxpos = 0;
  /* transformers' defaults for what a file leaves out */
  c->num_key_value_heads = 0, c->head_dim = 0, c->rms_norm_eps = 1e-6;
  c->attention_bias = FALSE, c->tie_word_embeddings = FALSE;
  if (!read_arch(o, path, &c->architecture, error) ||
      !refuse_switches(o, path, c->architecture, error) ||
      !hf_int(o, path, "num_hidden_layers", "n_layer", 1, TRUE, &c->n_layer, error) ||
      !hf_int(o, path, "hidden_size", "n_embd", 1, TRUE, &c->n_embd, error) ||
      !hf_int(o, path, "num_attention_heads", "n_head", 1, TRUE, &c->n_head, error) ||
      !hf_int(o, path, "num_key_value_heads", "num_key_value_heads", 1, FALSE,
              &c->num_key_value_heads, error) ||
      !hf_int(o, path, "head_dim", "head_dim", 1, FALSE, &c->head_dim, error) ||
      !hf_int(o, path, "intermediate_size", "intermediate_size", 1, TRUE, &c->intermediate_size,
              error) ||
      !hf_int(o, path, "vocab_size", "vocab_size", 1, TRUE, &c->vocab_size, error) ||
      !hf_int(o, path, "max_position_embeddings", "seq_len", 1, FALSE, &maxpos, error) ||
      !hf_number(o, path, "rms_norm_eps", 1e-300, 0.5, &c->rms_norm_eps, error) ||
      !read_rope(o, path, c, error) ||
      !hf_bool(o, path, "attention_bias", &c->attention_bias, error) ||
      !hf_bool(o, path, "tie_word_embeddings", &c->tie_word_embeddings, error))
    return FALSE;
  if (c->head_dim == 0 && c->n_embd % c->n_head != 0)
    return hf_error(error, path,
                    "key \"hidden_size\": %d is not a multiple of num_attention_heads %d and "
                    "head_dim is not given; allowed: a head_dim, or heads dividing hidden_size",
                    c->n_embd, c->n_head);
  g_free(c->model);
  c->model = g_strdup("llama");
  CohortLlamaShape s = cohort_family_llama_shape(c);
  if (!cohort_family_llama_check_shape(&s, COHORT_LLAMA_NAMES_HF, path, error))
    return FALSE;
  /* copy the shape keys back; the caller's other keys stay */
  cfg->architecture = c->architecture, cfg->n_layer = c->n_layer, cfg->n_embd = c->n_embd;
  cfg->n_head = c->n_head, cfg->num_key_value_heads = c->num_key_value_heads;
  cfg->head_dim = c->head_dim, cfg->intermediate_size = c->intermediate_size;
  cfg->vocab_size = c->vocab_size, cfg->rms_norm_eps = c->rms_norm_eps;
  cfg->rope_theta = c->rope_theta, cfg->rope_scaling = c->rope_scaling;
  cfg->rope_scaling_factor = c->rope_scaling_factor;
  cfg->rope_low_freq_factor = c->rope_low_freq_factor;
  cfg->rope_high_freq_factor = c->rope_high_freq_factor;
  cfg->rope_original_max_position_embeddings = c->rope_original_max_position_embeddings;
  cfg->attention_bias = c->attention_bias, cfg->tie_word_embeddings = c->tie_word_embeddings;
  g_free(cfg->model);
  cfg->model = g_strdup("llama");
  if (max_positions)
    *max_positions = maxpos;
  return TRUE;
}

/* ---- the folder's shape against the settings ---- */

char *cohort_llama_shape_mismatch(const CohortConfig *cfg, const CohortConfig *folder)
{
  static const char *const keys[] = {
      "architecture",
      "n_layer",
      "n_embd",
      "n_head",
      "num_key_value_heads",
      "head_dim",
      "intermediate_size",
      "vocab_size",
      "rms_norm_eps",
      "rope_theta",
      "rope_scaling",
      "rope_scaling_factor",
      "rope_low_freq_factor",
      "rope_high_freq_factor",
      "rope_original_max_position_embeddings",
      "attention_bias",
      "tie_word_embeddings",
  };
  CohortLlamaShape a = cohort_family_llama_shape(cfg), b = cohort_family_llama_shape(folder);
  g_autoptr(GString) out = g_string_new(NULL);
  for (guint i = 0; i < G_N_ELEMENTS(keys); i++) {
    const CohortConfigKey *k = cohort_config_find_key(keys[i]);
    if (!cohort_config_key_in_effect(k, folder))
      continue;
    g_autofree char *va = cohort_config_get(cfg, keys[i]);
    g_autofree char *vb = cohort_config_get(folder, keys[i]);
    gboolean same = g_str_equal(va, vb);
    /* 0 stands for n_head and n_embd / n_head: compare what they resolve to */
    if (g_str_equal(keys[i], "num_key_value_heads"))
      same = a.n_kv_head == b.n_kv_head;
    else if (g_str_equal(keys[i], "head_dim"))
      same = a.head_dim == b.head_dim;
    if (!same)
      g_string_append_printf(out, "%s%s=%s", out->len ? " " : "", keys[i], vb);
  }
  return out->len ? g_string_free(g_steal_pointer(&out), FALSE) : NULL;
}

/* ---- config.json out ---- */

static void set_rope(JsonObject *o, const CohortLlamaShape *s)
{
  json_object_remove_member(o, "rope_parameters");
  json_object_set_double_member(o, "rope_theta", s->rope.theta);
  if (s->rope.type == COHORT_ROPE_DEFAULT) {
    json_object_set_null_member(o, "rope_scaling");
    return;
  }
  JsonObject *r = json_object_new();
  gboolean llama3 = s->rope.type == COHORT_ROPE_LLAMA3;
  json_object_set_string_member(r, "rope_type", llama3 ? "llama3" : "linear");
  json_object_set_double_member(r, "factor", s->rope.factor);
  if (llama3) {
    json_object_set_double_member(r, "low_freq_factor", s->rope.low_freq_factor);
    json_object_set_double_member(r, "high_freq_factor", s->rope.high_freq_factor);
    json_object_set_int_member(r, "original_max_position_embeddings",
                               s->rope.original_max_positions);
  }
  json_object_set_object_member(o, "rope_scaling", r);
}

/* The base's config.json when init_from is a folder that has one: its other keys (token ids,
 * max_position_embeddings, generation defaults) are kept. */
static JsonNode *base_config(const CohortConfig *cfg)
{
  if (!cfg || !cfg->init_from || !*cfg->init_from)
    return NULL;
  g_autofree char *init = cohort_resolve_path(cfg->init_from);
  g_autofree char *dir =
      g_file_test(init, G_FILE_TEST_IS_DIR) ? g_strdup(init) : g_path_get_dirname(init);
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  return g_file_test(path, G_FILE_TEST_IS_REGULAR) ? read_json_object(path, NULL) : NULL;
}

char *cohort_llama_hf_config_text(const CohortModel *m, const CohortConfig *cfg)
{
  const CohortLlamaShape *s = cohort_llama_shape(m);
  int arch = cfg ? cfg->architecture : COHORT_LLAMA_ARCH_LLAMA;
  g_autoptr(JsonNode) root = base_config(cfg);
  if (!root)
    root = json_node_init_object(json_node_alloc(), json_object_new());
  JsonObject *o = json_node_get_object(root);
  JsonArray *archs = json_array_new();
  json_array_add_string_element(archs, cohort_family_llama_archs[arch]);
  json_object_set_array_member(o, "architectures", archs);
  json_object_set_string_member(o, "model_type", model_types[arch]);
  json_object_set_int_member(o, "hidden_size", s->hidden);
  json_object_set_int_member(o, "intermediate_size", s->intermediate);
  json_object_set_int_member(o, "num_hidden_layers", s->n_layer);
  json_object_set_int_member(o, "num_attention_heads", s->n_head);
  json_object_set_int_member(o, "num_key_value_heads", s->n_kv_head);
  json_object_set_int_member(o, "head_dim", s->head_dim);
  json_object_set_int_member(o, "vocab_size", s->vocab_size);
  json_object_set_string_member(o, "hidden_act", "silu");
  JsonNode *maxpos = json_object_get_member(o, "max_position_embeddings");
  if (!maxpos || !JSON_NODE_HOLDS_VALUE(maxpos) || json_node_get_int(maxpos) < s->seq_len)
    json_object_set_int_member(o, "max_position_embeddings", s->seq_len);
  json_object_set_double_member(o, "rms_norm_eps", s->rms_eps);
  set_rope(o, s);
  if (arch == COHORT_LLAMA_ARCH_LLAMA || arch == COHORT_LLAMA_ARCH_QWEN3)
    json_object_set_boolean_member(o, "attention_bias", s->o_bias);
  if (arch == COHORT_LLAMA_ARCH_LLAMA)
    json_object_set_boolean_member(o, "mlp_bias", FALSE);
  if (arch == COHORT_LLAMA_ARCH_MISTRAL)
    json_object_set_null_member(o, "sliding_window");
  if (arch == COHORT_LLAMA_ARCH_QWEN2 || arch == COHORT_LLAMA_ARCH_QWEN3)
    json_object_set_boolean_member(o, "use_sliding_window", FALSE);
  json_object_set_boolean_member(o, "tie_word_embeddings", s->tied);
  json_object_set_double_member(o, "attention_dropout", 0.0);
  if (!json_object_has_member(o, "initializer_range"))
    json_object_set_double_member(o, "initializer_range", 0.02);
  json_object_set_string_member(o, "torch_dtype", "float32");
  json_object_remove_member(o, "dtype");
  json_object_remove_member(o, "quantization_config");
  return cohort_json_to_string(root, TRUE);
}
