/* adapter_config.json as PEFT's LoraConfig defines it, read whole (lora-io.h): every key that
 * changes what an adapter computes is either applied (r, lora_alpha, use_rslora,
 * target_modules, exclude_modules) or refused by name; none is ignored. */
#include "engine/model/lora-peft.h"

#include <math.h>
#include <string.h>
#include <json-glib/json-glib.h>

#include "engine/base/error.h"
#include "engine/model/lora.h"

static gboolean refuse(GError **error, const char *path, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean refuse(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, fmt, ap);
  va_end(ap);
  g_prefix_error(error, "%s: ", path);
  return FALSE;
}

/* A member that is absent or JSON null. */
static gboolean absent(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  return !n || JSON_NODE_HOLDS_NULL(n);
}

/* A number member as a double; FALSE when it is not a number. */
static gboolean number(JsonNode *n, double *out)
{
  GType t = n && JSON_NODE_HOLDS_VALUE(n) ? json_node_get_value_type(n) : G_TYPE_INVALID;
  if (t == G_TYPE_INT64)
    *out = (double)json_node_get_int(n);
  else if (t == G_TYPE_DOUBLE)
    *out = json_node_get_double(n);
  else
    return FALSE;
  return TRUE;
}

static gboolean is_bool(JsonNode *n)
{
  return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_BOOLEAN;
}

/* The value as JSON text, for messages. */
static char *text_of(JsonNode *n)
{
  g_autoptr(JsonGenerator) g = json_generator_new();
  json_generator_set_root(g, n);
  char *s = json_generator_to_data(g, NULL);
  if (strlen(s) > 120)
    strcpy(s + 100, "…");
  return s;
}

/* Keys of PEFT's LoraConfig that change what the adapter computes and that Cohort does not
 * implement: each must be absent, null, or the value that means "off". */
static gboolean check_off(JsonObject *o, const char *path, GError **error)
{
  static const struct {
    const char *key, *why;
  } bools[] = {
      {"use_dora", "DoRA's magnitude vectors are not implemented"},
      {"lora_bias", "adapters with a bias on lora_B are not implemented"},
      {"use_qalora", "QALoRA's pooled inputs are not implemented"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bools); i++) {
    JsonNode *n = json_object_get_member(o, bools[i].key);
    if (absent(o, bools[i].key) || (is_bool(n) && !json_node_get_boolean(n)))
      continue;
    g_autofree char *v = text_of(n);
    return refuse(error, path, "field \"%s\": %s is not supported (%s); allowed: false",
                  bools[i].key, v, bools[i].why);
  }
  static const struct {
    const char *key, *why;
  } empties[] = {
      {"modules_to_save", "whole modules trained beside the adapters"},
      {"layers_to_transform", "adapters on some layers' modules only"},
      {"layer_replication", "layers repeated to build a larger model"},
      {"trainable_token_indices", "embedding rows trained beside the adapters"},
      {"target_parameters", "adapters on parameters rather than modules"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(empties); i++) {
    JsonNode *n = json_object_get_member(o, empties[i].key);
    if (absent(o, empties[i].key) ||
        (JSON_NODE_HOLDS_ARRAY(n) && json_array_get_length(json_node_get_array(n)) == 0) ||
        (JSON_NODE_HOLDS_OBJECT(n) && json_object_get_size(json_node_get_object(n)) == 0))
      continue;
    g_autofree char *v = text_of(n);
    return refuse(error, path, "field \"%s\": %s is not supported (%s); allowed: null",
                  empties[i].key, v, empties[i].why);
  }
  JsonNode *bias = json_object_get_member(o, "bias");
  if (!absent(o, "bias") &&
      !(JSON_NODE_HOLDS_VALUE(bias) && json_node_get_value_type(bias) == G_TYPE_STRING &&
        strcmp(json_node_get_string(bias), "none") == 0)) {
    g_autofree char *v = text_of(bias);
    return refuse(error, path,
                  "field \"bias\": %s is not supported (the base layers' biases trained and "
                  "saved with the adapter); allowed: \"none\"",
                  v);
  }
  return TRUE;
}

/* alpha_pattern and rank_pattern: per-module alphas and ranks. Cohort's adapters share one
 * rank and one alpha (their tensors are laid out by the one rank), so only entries equal to
 * the adapter's own r and lora_alpha, which change nothing, are taken. */
static gboolean check_patterns(JsonObject *o, const char *path, double r, double alpha,
                               GError **error)
{
  const struct {
    const char *key, *base;
    double want;
  } patterns[] = {{"alpha_pattern", "lora_alpha", alpha}, {"rank_pattern", "r", r}};
  for (guint i = 0; i < G_N_ELEMENTS(patterns); i++) {
    JsonNode *n = json_object_get_member(o, patterns[i].key);
    if (absent(o, patterns[i].key))
      continue;
    if (!JSON_NODE_HOLDS_OBJECT(n))
      return refuse(error, path, "field \"%s\" is not an object of module patterns",
                    patterns[i].key);
    JsonObject *p = json_node_get_object(n);
    g_autoptr(GList) members = json_object_get_members(p);
    for (GList *l = members; l; l = l->next) {
      double v = 0;
      if (number(json_object_get_member(p, l->data), &v) && v == patterns[i].want)
        continue;
      g_autofree char *t = text_of(json_object_get_member(p, l->data));
      return refuse(error, path,
                    "field \"%s\": \"%s\": %s differs from the adapter's %s %g; per-module values "
                    "are not supported (Cohort's adapters share one rank and one alpha); allowed: "
                    "{} or entries equal to %s",
                    patterns[i].key, (const char *)l->data, t, patterns[i].base, patterns[i].want,
                    patterns[i].base);
    }
  }
  return TRUE;
}

/* PEFT's module name of weight `i` of the parameter table ("transformer.h.0.attn.c_attn"). */
static char *module_of(const CohortModel *m, guint i)
{
  const char *family = m->klass->lora_module_prefix ? m->klass->lora_module_prefix : "";
  const char *w = m->tensors[i].name;
  return g_strdup_printf("%s%.*s", family, (int)(strlen(w) - strlen(".weight")), w);
}

/* Every layer of `m` an adapter could sit on, by module name: the weights of the table. */
static GPtrArray *module_names(const CohortModel *m)
{
  GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; i < m->n_tensors; i++)
    if (g_str_has_suffix(m->tensors[i].name, ".weight"))
      g_ptr_array_add(names, module_of(m, i));
  return names;
}

/* PEFT's rule (check_target_module_exists): a string is a regular expression the whole name
 * must match; a list names modules by their name or its end after a dot. */
typedef struct {
  GRegex *re;        /* a string */
  JsonArray *list;   /* a list */
  gboolean *matched; /* [list length]: whether the entry named a module */
} Selector;

static gboolean selector_init(Selector *s, JsonObject *o, const char *key, const char *path,
                              GError **error)
{
  memset(s, 0, sizeof *s);
  JsonNode *n = json_object_get_member(o, key);
  if (absent(o, key))
    return TRUE;
  if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    g_autofree char *anchored = g_strdup_printf("^(?:%s)$", json_node_get_string(n));
    g_autoptr(GError) local = NULL;
    s->re = g_regex_new(anchored, 0, 0, &local);
    if (!s->re)
      return refuse(error, path, "field \"%s\": \"%s\" is not a regular expression (%s)", key,
                    json_node_get_string(n), local->message);
    return TRUE;
  }
  if (JSON_NODE_HOLDS_ARRAY(n)) {
    s->list = json_node_get_array(n);
    for (guint i = 0; i < json_array_get_length(s->list); i++) {
      JsonNode *e = json_array_get_element(s->list, i);
      if (!JSON_NODE_HOLDS_VALUE(e) || json_node_get_value_type(e) != G_TYPE_STRING)
        return refuse(error, path, "field \"%s\": entry %u is not a string", key, i);
    }
    s->matched = g_new0(gboolean, MAX(json_array_get_length(s->list), 1));
    return TRUE;
  }
  return refuse(error, path, "field \"%s\" is neither a list of module names nor a string", key);
}

static gboolean selects(Selector *s, const char *module)
{
  if (s->re)
    return g_regex_match(s->re, module, 0, NULL);
  gboolean any = FALSE;
  for (guint i = 0; s->list && i < json_array_get_length(s->list); i++) {
    const char *t = json_array_get_string_element(s->list, i);
    gsize lm = strlen(module), lt = strlen(t);
    if (strcmp(module, t) == 0 ||
        (lm > lt && module[lm - lt - 1] == '.' && strcmp(module + lm - lt, t) == 0)) {
      s->matched[i] = TRUE;
      any = TRUE;
    }
  }
  return any;
}

static void selector_clear(Selector *s)
{
  g_clear_pointer(&s->re, g_regex_unref);
  g_clear_pointer(&s->matched, g_free);
}

/* target_modules (less exclude_modules) must select exactly the layers this run adapts: an
 * entry that names nothing, a layer without an adapter here, or an adapted layer it leaves
 * out is refused by name. */
static gboolean check_targets(const CohortModel *m, JsonObject *o, const char *path, GError **error)
{
  if (absent(o, "target_modules"))
    return refuse(error, path,
                  "field \"target_modules\" is missing; allowed: the adapted "
                  "modules, as a list of names or one regular expression");
  Selector t, x;
  if (!selector_init(&t, o, "target_modules", path, error))
    return FALSE;
  if (!selector_init(&x, o, "exclude_modules", path, error)) {
    selector_clear(&t);
    return FALSE;
  }
  g_autoptr(GPtrArray) modules = module_names(m);
  g_autoptr(GHashTable) adapted = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint a = 0; a < m->lora->n; a++)
    g_hash_table_add(adapted, module_of(m, m->lora->adapters[a].target));
  g_autofree char *example =
      m->lora->n > 0 ? module_of(m, m->lora->adapters[0].target) : g_strdup("");
  gboolean ok = TRUE;
  for (guint i = 0; ok && i < modules->len; i++) {
    const char *mod = modules->pdata[i];
    gboolean sel = selects(&t, mod) && !selects(&x, mod);
    gboolean has = g_hash_table_contains(adapted, mod);
    if (sel && !has)
      ok = refuse(error, path,
                  "field \"target_modules\" selects \"%s\", which has no adapter in this run "
                  "(its lora_targets); allowed: target_modules that select exactly the adapted "
                  "layers (set lora_targets to the adapter's modules)",
                  mod);
    else if (!sel && has)
      ok = refuse(error, path,
                  "field \"target_modules\" does not select \"%s\", which this run adapts (its "
                  "lora_targets); allowed: target_modules that select exactly the adapted layers "
                  "(set lora_targets to the adapter's modules)",
                  mod);
  }
  for (guint i = 0; ok && t.list && i < json_array_get_length(t.list); i++)
    if (!t.matched[i])
      ok = refuse(error, path,
                  "field \"target_modules\": \"%s\" names no layer of this %s model; allowed: "
                  "its layers' module names or their ends (as \"%s\")",
                  json_array_get_string_element(t.list, i), m->klass->name, example);
  selector_clear(&t);
  selector_clear(&x);
  return ok;
}

gboolean cohort_lora_check_peft_config(const CohortModel *m, JsonObject *o, const char *path,
                                       GError **error)
{
  const CohortLora *L = m->lora;
  JsonNode *rs = json_object_get_member(o, "use_rslora");
  gboolean rslora = is_bool(rs) && json_node_get_boolean(rs);
  if (!absent(o, "use_rslora") && !is_bool(rs))
    return refuse(error, path, "field \"use_rslora\" is not true or false");
  if (rslora != L->rslora)
    return refuse(error, path,
                  "field \"use_rslora\": %s, but the run's lora_rslora is %s; allowed: "
                  "lora_rslora %s (the adapter was trained scaled by lora_alpha / %s)",
                  rslora ? "true" : "false", L->rslora ? "true" : "false",
                  rslora ? "true" : "false", rslora ? "√r" : "r");
  return check_off(o, path, error) && check_patterns(o, path, L->rank, L->alpha, error) &&
         check_targets(m, o, path, error);
}
