/* One key's value: its text forms, the checks against the key table, storing it. */
#include "engine/config/config-private.h"

#include "engine/base/json-write.h"

#include <math.h>
#include <string.h>

const char *config_src(const char *source)
{
  return source && *source ? source : "config";
}

/* ---- text forms ---- */

/* A double in the JSON writer's shortest round-trip form, so files say 0.95, not
 * 0.94999999999999996; integral values keep a ".0" so they read as numbers of type double.
 * A config never holds a non-finite value, but a refused one is shown as "inf" or "nan". */
void config_append_double(GString *out, double v)
{
  if (!isfinite(v)) {
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    g_string_append(out, g_ascii_formatd(buf, sizeof buf, "%.17g", v));
    return;
  }
  gsize start = out->len;
  cohort_json_append_double(out, v);
  if (!strpbrk(out->str + start, ".eE"))
    g_string_append(out, ".0");
}

/* A value as it appears in messages: JSON spelling, cut short when huge. */
char *config_node_text(JsonNode *node)
{
  g_autoptr(GString) out = g_string_new(NULL);
  if (JSON_NODE_HOLDS_VALUE(node)) {
    GType t = json_node_get_value_type(node);
    if (t == G_TYPE_DOUBLE) {
      config_append_double(out, json_node_get_double(node));
    } else if (t == G_TYPE_STRING) {
      /* Messages are UTF-8 even when the refused text is not. */
      g_autofree char *valid = g_utf8_make_valid(json_node_get_string(node), -1);
      cohort_json_append_string(out, valid);
    } else {
      g_autofree char *s = json_to_string(node, FALSE);
      g_string_append(out, s);
    }
  } else {
    g_autofree char *s = json_to_string(node, FALSE);
    g_string_append(out, s ? s : "null");
  }
  if (out->len > 80) {
    const char *end = g_utf8_find_prev_char(out->str, out->str + 77);
    g_string_truncate(out, end ? (gsize)(end - out->str) : 77);
    g_string_append(out, "...");
  }
  return g_string_free(g_steal_pointer(&out), FALSE);
}

JsonNode *config_string_node(const char *s)
{
  return json_node_init_string(json_node_alloc(), s);
}

/* Reads one scalar typed on a command line: an integer, a finite number, true/false, or else
 * the text itself, which the key's check then refuses or accepts. */
static JsonNode *scalar_node(const char *text)
{
  g_autofree char *t = g_strstrip(g_strdup(text));
  gint64 i;
  if (g_ascii_string_to_signed(t, 10, G_MININT64, G_MAXINT64, &i, NULL))
    return json_node_init_int(json_node_alloc(), i);
  char *end = NULL;
  double d = g_ascii_strtod(t, &end);
  if (*t && end && *end == '\0' && isfinite(d))
    return json_node_init_double(json_node_alloc(), d);
  if (g_ascii_strcasecmp(t, "true") == 0 || g_ascii_strcasecmp(t, "false") == 0)
    return json_node_init_boolean(json_node_alloc(), g_ascii_strcasecmp(t, "true") == 0);
  return config_string_node(text);
}

JsonNode *config_text_to_node(const CohortConfigKey *key, const char *text)
{
  if (key->type == COHORT_KEY_STRING || key->type == COHORT_KEY_CHOICE)
    return config_string_node(text);
  if (key->type != COHORT_KEY_INT_LIST)
    return scalar_node(text);

  g_autofree char *t = g_strstrip(g_strdup(text));
  char *inner = t;
  gsize n = strlen(t);
  if (n >= 2 && t[0] == '[' && t[n - 1] == ']') {
    t[n - 1] = '\0';
    inner = g_strstrip(t + 1);
  }
  g_autoptr(JsonArray) array = json_array_new();
  /* Split by hand: g_strsplit calls strstr once per part, and a sanitizer's strstr reads the
   * whole rest of the text each time, so a long list took minutes there. */
  char *part = *inner ? inner : NULL;
  while (part) {
    char *comma = strchr(part, ',');
    if (comma)
      *comma = '\0';
    json_array_add_element(array, scalar_node(part));
    part = comma ? comma + 1 : NULL;
  }
  return json_node_init_array(json_node_alloc(), array);
}

/* ---- checking and storing one key ---- */

gboolean config_is_int_node(JsonNode *node)
{
  return JSON_NODE_HOLDS_VALUE(node) && json_node_get_value_type(node) == G_TYPE_INT64;
}

static gboolean is_type(JsonNode *node, GType type)
{
  return JSON_NODE_HOLDS_VALUE(node) && json_node_get_value_type(node) == type;
}

static int choice_index(const CohortConfigKey *key, const char *s)
{
  for (int i = 0; key->choices[i]; i++)
    if (strcmp(key->choices[i], s) == 0)
      return i;
  return -1;
}

/* What is wrong with a list value, or NULL when it is fine: at most COHORT_KEY_MAX_LIST
 * distinct integers within the key's bounds. Linear, so a huge list is refused quickly; the
 * bounds of list keys are small (a bitmap of max - min + 1 bits finds repeats). */
static char *list_problem(const CohortConfigKey *key, JsonNode *node, gboolean *worth_saying)
{
  /* A wrong type shows in the value itself; a bad entry of a long list does not. */
  *worth_saying = FALSE;
  if (!JSON_NODE_HOLDS_ARRAY(node))
    return g_strdup("not a list");
  JsonArray *a = json_node_get_array(node);
  guint n = json_array_get_length(a);
  for (guint i = 0; i < n; i++) {
    JsonNode *e = json_array_get_element(a, i);
    if (!config_is_int_node(e))
      return g_strdup_printf("entry %u is not an integer", i);
  }
  *worth_saying = TRUE;
  if (n > COHORT_KEY_MAX_LIST)
    return g_strdup_printf("%u entries, more than %d", n, COHORT_KEY_MAX_LIST);
  gint64 lo = (gint64)key->min, hi = (gint64)key->max;
  g_assert(hi >= lo && hi - lo < (1 << 20));
  g_autofree guint8 *seen = g_new0(guint8, (gsize)(hi - lo) / 8 + 1);
  for (guint i = 0; i < n; i++) {
    gint64 v = json_array_get_int_element(a, i);
    if (v < lo)
      return g_strdup_printf("%" G_GINT64_FORMAT " is %s", v, lo == 0 ? "negative" : "too small");
    if (v > hi)
      return g_strdup_printf("%" G_GINT64_FORMAT " is above %" G_GINT64_FORMAT, v, hi);
    gsize bit = (gsize)(v - lo);
    if (seen[bit / 8] & (1u << (bit % 8)))
      return g_strdup_printf("%" G_GINT64_FORMAT " appears twice", v);
    seen[bit / 8] |= (guint8)(1u << (bit % 8));
  }
  return NULL;
}

static gboolean value_ok(const CohortConfigKey *key, JsonNode *node)
{
  switch (key->type) {
  case COHORT_KEY_INT:
  case COHORT_KEY_INT64: {
    if (!config_is_int_node(node))
      return FALSE;
    gint64 v = json_node_get_int(node);
    return (double)v >= key->min && (double)v <= key->max;
  }
  case COHORT_KEY_DOUBLE: {
    double d;
    if (config_is_int_node(node))
      d = (double)json_node_get_int(node);
    else if (is_type(node, G_TYPE_DOUBLE))
      d = json_node_get_double(node);
    else
      return FALSE;
    return isfinite(d) && d >= key->min && d <= key->max;
  }
  case COHORT_KEY_BOOL:
    return is_type(node, G_TYPE_BOOLEAN);
  case COHORT_KEY_STRING: {
    if (!is_type(node, G_TYPE_STRING))
      return FALSE;
    const char *s = json_node_get_string(node);
    /* A string key with choices (model) is one of them, kept as text. */
    return g_utf8_validate(s, -1, NULL) && (double)strlen(s) >= key->min &&
           (!key->choices || choice_index(key, s) >= 0);
  }
  case COHORT_KEY_CHOICE:
    return is_type(node, G_TYPE_STRING) && choice_index(key, json_node_get_string(node)) >= 0;
  case COHORT_KEY_INT_LIST: {
    gboolean unused;
    g_autofree char *why = list_problem(key, node, &unused);
    return why == NULL;
  }
  }
  return FALSE;
}

/* `typed`, when given, is the text the user typed, shown instead of the parsed node. */
gboolean config_check_typed(const CohortConfigKey *key, JsonNode *node, const char *typed,
                            const char *source, GError **error)
{
  if (value_ok(key, node))
    return TRUE;
  g_autofree char *shown = NULL;
  if (typed) {
    g_autoptr(JsonNode) text = config_string_node(typed);
    shown = config_node_text(text);
  } else {
    shown = config_node_text(node);
  }
  /* A list can be long: say which entry is wrong. */
  gboolean say = FALSE;
  g_autofree char *why = key->type == COHORT_KEY_INT_LIST ? list_problem(key, node, &say) : NULL;
  g_autofree char *reason = say ? g_strdup_printf(" (%s)", why) : g_strdup("");
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
              "%s: key \"%s\": %s is not allowed%s; allowed: %s", config_src(source), key->name,
              shown, reason, key->allowed);
  return FALSE;
}

gboolean config_check_node(const CohortConfigKey *key, JsonNode *node, const char *source,
                           GError **error)
{
  return config_check_typed(key, node, NULL, source, error);
}

/* Stores a node that check_node accepted. */
void config_store_node(CohortConfig *cfg, const CohortConfigKey *key, JsonNode *node)
{
  switch (key->type) {
  case COHORT_KEY_INT:
    *FIELD(cfg, key, int) = (int)json_node_get_int(node);
    break;
  case COHORT_KEY_INT64:
    *FIELD(cfg, key, gint64) = json_node_get_int(node);
    break;
  case COHORT_KEY_DOUBLE:
    *FIELD(cfg, key, double) =
        config_is_int_node(node) ? (double)json_node_get_int(node) : json_node_get_double(node);
    break;
  case COHORT_KEY_BOOL:
    *FIELD(cfg, key, gboolean) = json_node_get_boolean(node);
    break;
  case COHORT_KEY_STRING: {
    char **field = FIELD(cfg, key, char *);
    g_free(*field);
    *field = g_strdup(json_node_get_string(node));
    break;
  }
  case COHORT_KEY_CHOICE:
    *FIELD(cfg, key, int) = choice_index(key, json_node_get_string(node));
    break;
  case COHORT_KEY_INT_LIST: {
    JsonArray *a = json_node_get_array(node);
    GArray *list = g_array_new(FALSE, FALSE, sizeof(int));
    for (guint i = 0; i < json_array_get_length(a); i++) {
      int v = (int)json_array_get_int_element(a, i);
      g_array_append_val(list, v);
    }
    GArray **field = FIELD(cfg, key, GArray *);
    if (*field)
      g_array_unref(*field);
    *field = list;
    break;
  }
  }
}

/* The current value as a node, to re-check a config that code edited in place. */
JsonNode *config_value_node(const CohortConfig *cfg, const CohortConfigKey *key)
{
  JsonNode *node = json_node_alloc();
  switch (key->type) {
  case COHORT_KEY_INT:
    return json_node_init_int(node, *CFIELD(cfg, key, int));
  case COHORT_KEY_INT64:
    return json_node_init_int(node, *CFIELD(cfg, key, gint64));
  case COHORT_KEY_DOUBLE:
    return json_node_init_double(node, *CFIELD(cfg, key, double));
  case COHORT_KEY_BOOL: {
    gboolean b = *CFIELD(cfg, key, gboolean);
    /* Anything but 0/1 in a gboolean field is a bug in the editing code. */
    if (b != TRUE && b != FALSE)
      return json_node_init_int(node, b);
    return json_node_init_boolean(node, b);
  }
  case COHORT_KEY_STRING: {
    const char *s = *CFIELD(cfg, key, char *);
    return s ? json_node_init_string(node, s) : json_node_init_null(node);
  }
  case COHORT_KEY_CHOICE: {
    int v = *CFIELD(cfg, key, int);
    guint n = g_strv_length((char **)key->choices);
    if (v < 0 || (guint)v >= n)
      return json_node_init_int(node, v);
    return json_node_init_string(node, key->choices[v]);
  }
  case COHORT_KEY_INT_LIST: {
    const GArray *list = *CFIELD(cfg, key, GArray *);
    g_autoptr(JsonArray) a = json_array_new();
    for (guint i = 0; list && i < list->len; i++)
      json_array_add_int_element(a, g_array_index(list, int, i));
    return json_node_init_array(node, a);
  }
  }
  return json_node_init_null(node);
}
