/* PEFT adapter folders (see lora-io.h). */
#include "engine/model/lora-io.h"

#include <errno.h>
#include <string.h>
#include <json-glib/json-glib.h>
#include <glib/gstdio.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"
#include "engine/model/lora-peft.h"
#include "engine/model/model-io.h"
#include "engine/progress/checkpoint-state.h"

#define PEFT_ROOT       "base_model.model."
#define ADAPTER_CONFIG  "adapter_config.json"
#define ADAPTER_WEIGHTS "adapter_model.safetensors"
/* An adapter_config.json is a few hundred bytes; a file far beyond that is not one. */
#define ADAPTER_CONFIG_MAX (1u << 20)

/* "base_model.model." and the family's module path: the prefix of every adapter name. */
static char *name_prefix(const CohortModel *m)
{
  const char *family = m->klass->lora_module_prefix;
  return g_strconcat(PEFT_ROOT, family ? family : "", NULL);
}

/* Adapter a's layer, with the family's module path ("transformer.h.0.attn.c_attn"). */
static char *target_module(const CohortModel *m, guint a)
{
  const char *family = m->klass->lora_module_prefix;
  const char *w = m->tensors[m->lora->adapters[a].target].name;
  g_autofree char *module = g_strndup(w, strlen(w) - strlen(".weight"));
  return g_strconcat(family ? family : "", module, NULL);
}

/* Whether PEFT, matching a list entry by the name or its end after a dot, would take a layer
 * that has no adapter for one that has: a ResNet's stem "conv1" names every block's conv1 too
 * when they are not all adapted. */
static gboolean list_is_ambiguous(const CohortModel *m)
{
  const char *family = m->klass->lora_module_prefix;
  for (guint a = 0; a < m->lora->n; a++) {
    g_autofree char *full = target_module(m, a);
    g_autofree char *dot_full = g_strconcat(".", full, ".weight", NULL);
    for (guint i = 0; i < m->n_tensors; i++) {
      g_autofree char *name = g_strconcat(family ? family : "", m->tensors[i].name, NULL);
      if (m->lora->of_tensor[i] < 0 && g_str_has_suffix(name, dot_full))
        return TRUE;
    }
  }
  return FALSE;
}

/* The adapted layers as PEFT's target_modules: their full module names, which select exactly
 * these layers; where a list would select more (see list_is_ambiguous), PEFT's other form, one
 * regular expression that must match a layer's whole name: the names, dots escaped, joined by
 * "|". */
static void append_targets(JsonBuilder *b, const CohortModel *m)
{
  if (list_is_ambiguous(m)) {
    GString *re = g_string_new(NULL);
    for (guint a = 0; a < m->lora->n; a++) {
      g_autofree char *full = target_module(m, a);
      g_autofree char *escaped = g_regex_escape_string(full, -1);
      g_string_append_printf(re, "%s%s", a ? "|" : "", escaped);
    }
    json_builder_add_string_value(b, re->str);
    g_string_free(re, TRUE);
    return;
  }
  json_builder_begin_array(b);
  for (guint a = 0; a < m->lora->n; a++) {
    g_autofree char *full = target_module(m, a);
    json_builder_add_string_value(b, full);
  }
  json_builder_end_array(b);
}

static char *config_json(const CohortModel *m, const char *base)
{
  const CohortLora *L = m->lora;
  gboolean conv1d = L->n > 0 && L->adapters[0].kind == COHORT_ADAPT_CONV1D;
  g_autoptr(JsonBuilder) b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "peft_type");
  json_builder_add_string_value(b, "LORA");
  if (m->klass->lora_task_type) {
    json_builder_set_member_name(b, "task_type");
    json_builder_add_string_value(b, m->klass->lora_task_type);
  }
  json_builder_set_member_name(b, "base_model_name_or_path");
  json_builder_add_string_value(b, base ? base : "");
  json_builder_set_member_name(b, "r");
  json_builder_add_int_value(b, L->rank);
  json_builder_set_member_name(b, "lora_alpha");
  json_builder_add_double_value(b, L->alpha);
  json_builder_set_member_name(b, "use_rslora");
  json_builder_add_boolean_value(b, L->rslora);
  json_builder_set_member_name(b, "lora_dropout");
  json_builder_add_double_value(b, L->dropout);
  json_builder_set_member_name(b, "target_modules");
  append_targets(b, m);
  json_builder_set_member_name(b, "fan_in_fan_out");
  json_builder_add_boolean_value(b, conv1d);
  json_builder_set_member_name(b, "bias");
  json_builder_add_string_value(b, "none");
  json_builder_set_member_name(b, "inference_mode");
  json_builder_add_boolean_value(b, TRUE);
  json_builder_end_object(b);
  g_autoptr(JsonNode) root = json_builder_get_root(b);
  return cohort_json_to_string(root, TRUE);
}

gboolean cohort_lora_export(const CohortModel *m, const float *params, const char *dir,
                            const char *base, GError **error)
{
  g_return_val_if_fail(m->lora, FALSE);
  if (g_mkdir_with_parents(dir, 0755) != 0)
    return cohort_fail(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                       "%s: cannot create the adapter folder: %s", dir, g_strerror(errno));
  g_autofree char *prefix = name_prefix(m);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  cohort_tensor_st_entries(m->lora->tensors, m->lora->n_tensors, params, prefix, names, entries);
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  g_hash_table_insert(meta, "format", "pt");
  g_autofree char *weights = g_build_filename(dir, ADAPTER_WEIGHTS, NULL);
  if (!cohort_safetensors_write(weights, (CohortStEntry *)entries->data, entries->len, meta, error))
    return FALSE;
  g_autofree char *json = config_json(m, base);
  g_autofree char *config = g_build_filename(dir, ADAPTER_CONFIG, NULL);
  return cohort_write_file_atomic(config, json, strlen(json), error);
}

/* adapter_config.json against the model: r and lora_alpha here, every other key that changes
 * what the adapter computes in lora-peft.c. */
static gboolean check_config(const CohortModel *m, const char *path, GError **error)
{
  gsize len = 0;
  g_autofree char *text =
      cohort_file_read_regular(path, ADAPTER_CONFIG_MAX, "PEFT adapter config", &len, error);
  if (!text)
    return FALSE;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, path, 0, error);
  if (!root)
    return FALSE;
  JsonObject *o = JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
  const char *type = o && json_object_has_member(o, "peft_type")
                         ? json_object_get_string_member_with_default(o, "peft_type", "")
                         : "";
  if (g_strcmp0(type, "LORA") != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: field \"peft_type\": \"%s\"; allowed: \"LORA\"", path, type);
  JsonNode *r = json_object_get_member(o, "r");
  if (!r || json_node_get_value_type(r) != G_TYPE_INT64 || json_node_get_int(r) != m->lora->rank)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: field \"r\" is not %d, the run's lora_rank; allowed: the adapter's "
                       "rank as lora_rank",
                       path, m->lora->rank);
  JsonNode *alpha = json_object_get_member(o, "lora_alpha");
  GType at = alpha ? json_node_get_value_type(alpha) : G_TYPE_INVALID;
  double a = at == G_TYPE_INT64    ? (double)json_node_get_int(alpha)
             : at == G_TYPE_DOUBLE ? json_node_get_double(alpha)
                                   : -1;
  if (a != m->lora->alpha)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: field \"lora_alpha\" is not %g, the run's lora_alpha; allowed: the "
                       "adapter's alpha as lora_alpha",
                       path, m->lora->alpha);
  return cohort_lora_check_peft_config(m, o, path, error);
}

/* A checkpoint folder's adapters (as trained, not their EMA), under their bare names in its
 * model.safetensors, whose sha256 must be the one state.json records; its lora_rank and
 * lora_alpha must be the run's. */
static gboolean load_from_checkpoint(CohortModel *m, const char *dir, const char *state,
                                     GError **error)
{
  gsize len = 0;
  g_autofree char *text = cohort_checkpoint_read_state_text(state, &len, error);
  CohortTrainState st = {0};
  g_auto(CohortStateExtras) x = {0};
  if (!text || !cohort_state_parse(text, len, state, &st, &x, error))
    return FALSE;
  g_autoptr(CohortConfig) saved = cohort_config_load_data(x.config_json, -1, state, error);
  if (!saved)
    return FALSE;
  const CohortLora *L = m->lora;
  g_autofree char *mode = cohort_config_get(saved, "finetune");
  if (saved->finetune != COHORT_FINETUNE_LORA || saved->lora_rank != L->rank ||
      saved->lora_alpha != L->alpha || !saved->lora_rslora != !L->rslora)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: \"config\" has finetune %s, lora_rank %d, lora_alpha %g and "
                       "lora_rslora %s; allowed for adapter_from: finetune lora with the run's "
                       "lora_rank %d, lora_alpha %g and lora_rslora %s",
                       state, mode, saved->lora_rank, saved->lora_alpha,
                       saved->lora_rslora ? "true" : "false", L->rank, L->alpha,
                       L->rslora ? "true" : "false");
  g_autofree char *weights = g_build_filename(dir, COHORT_CHECKPOINT_MODEL_FILE, NULL);
  g_autoptr(GError) local = NULL;
  g_autofree char *sha = cohort_file_sha256(weights, &local);
  if (!sha)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, "%s",
                       local->message);
  if (g_ascii_strcasecmp(sha, x.model_sha256) != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: sha256 %s does not match %s recorded in %s; the file is truncated or "
                       "corrupt",
                       weights, sha, x.model_sha256, state);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(weights, error);
  if (!f)
    return FALSE;
  g_autofree float *tmp = NULL;
  g_autofree float *params = g_new(float, MAX(m->n_params, 1));
  memcpy(params, cohort_model_params_host(m, &tmp), m->n_params * sizeof(float));
  if (!cohort_tensor_check(L->tensors, L->n_tensors, f, weights, "", error) ||
      !cohort_tensor_read(L->tensors, L->n_tensors, f, "", params, error))
    return FALSE;
  cohort_model_upload_params(m, params);
  return cohort_model_check_finite(m, weights, error);
}

gboolean cohort_lora_load(CohortModel *m, const char *dir, GError **error)
{
  if (!m->lora)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"adapter_from\": \"%s\" needs finetune \"lora\"; allowed: \"\"", dir);
  g_autofree char *state = g_build_filename(dir, COHORT_CHECKPOINT_STATE_FILE, NULL);
  if (g_file_test(state, G_FILE_TEST_EXISTS))
    return load_from_checkpoint(m, dir, state, error);
  g_autofree char *config = g_build_filename(dir, ADAPTER_CONFIG, NULL);
  if (!check_config(m, config, error))
    return FALSE;
  g_autofree char *weights = g_build_filename(dir, ADAPTER_WEIGHTS, NULL);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(weights, error);
  if (!f)
    return FALSE;
  g_autofree char *prefix = name_prefix(m);
  const CohortLora *L = m->lora;
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    const char *bare = g_str_has_prefix(*name, prefix) ? *name + strlen(prefix) : NULL;
    if (!bare || !cohort_tensor_find(L->tensors, L->n_tensors, bare))
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "%s: tensor \"%s\" is no adapter of this %s model; allowed: %s<layer>"
                         ".lora_A.weight and .lora_B.weight of the adapted layers",
                         weights, *name, m->klass->name, prefix);
  }
  g_autofree float *tmp = NULL;
  g_autofree float *params = g_new(float, MAX(m->n_params, 1));
  memcpy(params, cohort_model_params_host(m, &tmp), m->n_params * sizeof(float));
  if (!cohort_tensor_check(L->tensors, L->n_tensors, f, weights, prefix, error) ||
      !cohort_tensor_read(L->tensors, L->n_tensors, f, prefix, params, error))
    return FALSE;
  cohort_model_upload_params(m, params);
  return cohort_model_check_finite(m, weights, error);
}
