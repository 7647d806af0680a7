/* TrainConfig: JSON load and save, validation, --set, hashing and diffs, all driven by the key
 * table in config-keys.c. A value is checked as a JsonNode whether it came from a file or from
 * --set text, so both paths give the same messages. */
#include "engine/config.h"
#include "engine/config-keys.h"
#include "engine/json-write.h"
#include "cohort-build-config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

GQuark cohort_config_error_quark(void)
{
  return g_quark_from_static_string("cohort-config-error-quark");
}

/* Choice fields are stored through an int pointer. */
G_STATIC_ASSERT(sizeof(CohortDataFormat) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortLrSchedule) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortOptimizerKind) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortPrecision) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortDevice) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortDistBackend) == sizeof(int));
G_STATIC_ASSERT(sizeof(CohortLrScaling) == sizeof(int));
G_STATIC_ASSERT(sizeof(gboolean) == sizeof(int));

/* Config files are small; a cap keeps a mistaken path (a data set) from being slurped. */
#define MAX_CONFIG_BYTES (16 * 1024 * 1024)

#define FIELD(cfg, key, type)  ((type *)((char *)(cfg) + cohort_config_key_offset(key)))
#define CFIELD(cfg, key, type) ((const type *)((const char *)(cfg) + cohort_config_key_offset(key)))

static const char *src(const char *source)
{
  return source && *source ? source : "config";
}

/* ---- text forms ---- */

/* A double in the JSON writer's shortest round-trip form, so files say 0.95, not
 * 0.94999999999999996; integral values keep a ".0" so they read as numbers of type double.
 * A config never holds a non-finite value, but a refused one is shown as "inf" or "nan". */
static void append_double(GString *out, double v)
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
static char *node_text(JsonNode *node)
{
  g_autoptr(GString) out = g_string_new(NULL);
  if (JSON_NODE_HOLDS_VALUE(node)) {
    GType t = json_node_get_value_type(node);
    if (t == G_TYPE_DOUBLE) {
      append_double(out, json_node_get_double(node));
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

static JsonNode *string_node(const char *s)
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
  return string_node(text);
}

static JsonNode *text_to_node(const CohortConfigKey *key, const char *text)
{
  if (key->type == COHORT_KEY_STRING || key->type == COHORT_KEY_CHOICE)
    return string_node(text);
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
  if (*inner) {
    g_auto(GStrv) parts = g_strsplit(inner, ",", -1);
    for (char **p = parts; *p; p++)
      json_array_add_element(array, scalar_node(*p));
  }
  return json_node_init_array(json_node_alloc(), array);
}

/* ---- checking and storing one key ---- */

static gboolean is_int_node(JsonNode *node)
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

static gboolean value_ok(const CohortConfigKey *key, JsonNode *node)
{
  switch (key->type) {
  case COHORT_KEY_INT:
  case COHORT_KEY_INT64: {
    if (!is_int_node(node))
      return FALSE;
    gint64 v = json_node_get_int(node);
    return (double)v >= key->min && (double)v <= key->max;
  }
  case COHORT_KEY_DOUBLE: {
    double d;
    if (is_int_node(node))
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
    if (!JSON_NODE_HOLDS_ARRAY(node))
      return FALSE;
    JsonArray *a = json_node_get_array(node);
    for (guint i = 0; i < json_array_get_length(a); i++) {
      JsonNode *e = json_array_get_element(a, i);
      if (!is_int_node(e) || (double)json_node_get_int(e) < key->min ||
          (double)json_node_get_int(e) > key->max)
        return FALSE;
    }
    return TRUE;
  }
  }
  return FALSE;
}

/* `typed`, when given, is the text the user typed, shown instead of the parsed node. */
static gboolean check_typed(const CohortConfigKey *key, JsonNode *node, const char *typed,
                            const char *source, GError **error)
{
  if (value_ok(key, node))
    return TRUE;
  g_autofree char *shown = NULL;
  if (typed) {
    g_autoptr(JsonNode) text = string_node(typed);
    shown = node_text(text);
  } else {
    shown = node_text(node);
  }
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
              "%s: key \"%s\": %s is not allowed; allowed: %s", src(source), key->name, shown,
              key->allowed);
  return FALSE;
}

static gboolean check_node(const CohortConfigKey *key, JsonNode *node, const char *source,
                           GError **error)
{
  return check_typed(key, node, NULL, source, error);
}

/* Stores a node that check_node accepted. */
static void store_node(CohortConfig *cfg, const CohortConfigKey *key, JsonNode *node)
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
        is_int_node(node) ? (double)json_node_get_int(node) : json_node_get_double(node);
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
static JsonNode *value_node(const CohortConfig *cfg, const CohortConfigKey *key)
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

/* ---- life cycle ---- */

CohortConfig *cohort_config_new(void)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  CohortConfig *cfg = g_new0(CohortConfig, 1);
  cfg->version = COHORT_CONFIG_VERSION;
  for (guint i = 0; i < n; i++) {
    g_autoptr(JsonNode) node = text_to_node(&keys[i], cohort_config_key_default(&keys[i]));
    g_autoptr(GError) error = NULL;
    if (!check_node(&keys[i], node, "the built-in defaults", &error))
      g_error("%s", error->message);
    store_node(cfg, &keys[i], node);
  }
  return cfg;
}

void cohort_config_free(CohortConfig *cfg)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  if (!cfg)
    return;
  for (guint i = 0; i < n; i++) {
    if (keys[i].type == COHORT_KEY_STRING) {
      g_free(*FIELD(cfg, &keys[i], char *));
    } else if (keys[i].type == COHORT_KEY_INT_LIST) {
      GArray *list = *FIELD(cfg, &keys[i], GArray *);
      if (list)
        g_array_unref(list);
    }
  }
  g_free(cfg);
}

CohortConfig *cohort_config_copy(const CohortConfig *cfg)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  CohortConfig *copy = g_memdup2(cfg, sizeof *cfg);
  for (guint i = 0; i < n; i++) {
    if (keys[i].type == COHORT_KEY_STRING) {
      char **field = FIELD(copy, &keys[i], char *);
      *field = g_strdup(*field);
    } else if (keys[i].type == COHORT_KEY_INT_LIST) {
      GArray **field = FIELD(copy, &keys[i], GArray *);
      const GArray *old = *field;
      *field = g_array_new(FALSE, FALSE, sizeof(int));
      if (old)
        g_array_append_vals(*field, old->data, old->len);
    }
  }
  return copy;
}

/* ---- key names ---- */

/* Keys renamed by a migration; a file of the current version that still uses an old name gets
 * the new one suggested. */
typedef struct {
  const char *old_name;
  const char *new_name;
} Rename;

static const Rename v0_renames[] = {
    {"multi_gpu", "enable_multi_gpu"},
    {"backend", "distributed_backend"},
    {"lr", "learning_rate"},
};

static guint edit_distance(const char *a, const char *b)
{
  gsize la = strlen(a), lb = strlen(b);
  g_autofree guint *prev = g_new(guint, lb + 1);
  g_autofree guint *cur = g_new(guint, lb + 1);
  for (gsize j = 0; j <= lb; j++)
    prev[j] = (guint)j;
  for (gsize i = 1; i <= la; i++) {
    cur[0] = (guint)i;
    for (gsize j = 1; j <= lb; j++) {
      guint sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      cur[j] = MIN(sub, MIN(prev[j], cur[j - 1]) + 1);
    }
    guint *t = prev;
    prev = cur;
    cur = t;
  }
  return prev[lb];
}

const char *cohort_config_suggest_key(const char *name)
{
  guint n_keys;
  const CohortConfigKey *keys = cohort_config_keys(&n_keys);
  if (!name || !*name || strlen(name) > 200)
    return NULL;
  for (guint i = 0; i < G_N_ELEMENTS(v0_renames); i++)
    if (strcmp(name, v0_renames[i].old_name) == 0)
      return cohort_config_find_key(v0_renames[i].new_name)->name;

  g_autofree char *lower = g_ascii_strdown(name, -1);
  const char *best = NULL;
  guint best_d = G_MAXUINT;
  for (guint i = 0; i < n_keys; i++) {
    guint d = edit_distance(lower, keys[i].name);
    if (d < best_d) {
      best_d = d;
      best = keys[i].name;
    }
  }
  /* Close means a few typos (up to 3) or up to a third of a long name; short names get less
   * room, or every three-letter word would "mean" eps. */
  int len = (int)strlen(name);
  int limit = MAX(len / 3, MIN(3, (len - 1) / 2));
  return (int)best_d <= limit ? best : NULL;
}

static void unknown_key_error(const char *source, const char *name, GError **error)
{
  const char *suggestion = cohort_config_suggest_key(name);
  if (suggestion)
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY,
                "%s: unknown key \"%s\"; did you mean \"%s\"?", src(source), name, suggestion);
  else
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY,
                "%s: unknown key \"%s\"; the keys are listed in docs/config.md", src(source), name);
}

/* ---- validation ---- */

static gboolean cross_error(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static gboolean cross_error(GError **error, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error_literal(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, msg);
  return FALSE;
}

gboolean cohort_config_validate(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *s = src(source);
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    g_autoptr(JsonNode) node = value_node(cfg, &keys[i]);
    if (!check_node(&keys[i], node, source, error))
      return FALSE;
  }

  if (cfg->image_channels == 2)
    return cross_error(error,
                       "%s: key \"image_channels\": 2 is not allowed; allowed: 1 (grey) or 3 "
                       "(RGB)",
                       s);
  if (cfg->n_embd % cfg->n_head != 0)
    return cross_error(error,
                       "%s: key \"n_embd\": %d is not a multiple of \"n_head\": %d; allowed: "
                       "n_embd divisible by n_head, like %d",
                       s, cfg->n_embd, cfg->n_head,
                       cfg->n_head * MAX(1, cfg->n_embd / cfg->n_head));
  if (cfg->node_rank >= cfg->num_nodes)
    return cross_error(error,
                       "%s: key \"node_rank\": %d is not allowed with \"num_nodes\": %d; allowed: "
                       "an integer from 0 to %d",
                       s, cfg->node_rank, cfg->num_nodes, cfg->num_nodes - 1);
  if (cfg->max_steps > 0 && cfg->warmup_steps > cfg->max_steps)
    return cross_error(error,
                       "%s: key \"warmup_steps\": %d is not allowed with \"max_steps\": %d; "
                       "allowed: at most max_steps",
                       s, cfg->warmup_steps, cfg->max_steps);
  const GArray *dev = cfg->device_indexes;
  for (guint i = 0; dev && i < dev->len; i++) {
    int v = g_array_index(dev, int, i);
    gboolean dup = FALSE;
    for (guint j = 0; j < i; j++)
      dup = dup || g_array_index(dev, int, j) == v;
    if (v < 0 || dup) {
      g_autoptr(JsonNode) node = value_node(cfg, cohort_config_find_key("device_indexes"));
      g_autofree char *shown = node_text(node);
      return cross_error(error,
                         "%s: key \"device_indexes\": %s is not allowed (%d %s); allowed: %s", s,
                         shown, v, v < 0 ? "is negative" : "appears twice",
                         cohort_config_find_key("device_indexes")->allowed);
    }
  }
  if (cfg->data_format == COHORT_DATA_TEXT && cfg->vocab_size != 256)
    return cross_error(error,
                       "%s: key \"vocab_size\": %d is not allowed with \"data_format\": \"text\"; "
                       "allowed: 256 (one token per byte), or data_format \"tokens\"",
                       s, cfg->vocab_size);
  return TRUE;
}

gboolean cohort_config_check_supported(const CohortConfig *cfg, const char *source, GError **error)
{
  /* Whether a GPU is there is the trainer's run-time check (cohort_device_select). */
  if (cfg->device == COHORT_DEVICE_CUDA && !COHORT_HAVE_CUDA) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED,
                "%s: key \"device\": \"cuda\" is not supported: this build has no CUDA path; "
                "use \"cpu\" or \"auto\"",
                src(source));
    return FALSE;
  }
  return TRUE;
}

/* ---- text form of values, --set ---- */

char *cohort_config_get(const CohortConfig *cfg, const char *key)
{
  const CohortConfigKey *k = cohort_config_find_key(key);
  if (!k)
    return NULL;
  switch (k->type) {
  case COHORT_KEY_INT:
    return g_strdup_printf("%d", *CFIELD(cfg, k, int));
  case COHORT_KEY_INT64:
    return g_strdup_printf("%" G_GINT64_FORMAT, *CFIELD(cfg, k, gint64));
  case COHORT_KEY_DOUBLE: {
    GString *out = g_string_new(NULL);
    append_double(out, *CFIELD(cfg, k, double));
    return g_string_free(out, FALSE);
  }
  case COHORT_KEY_BOOL:
    return g_strdup(*CFIELD(cfg, k, gboolean) ? "true" : "false");
  case COHORT_KEY_STRING: {
    const char *s = *CFIELD(cfg, k, char *);
    return g_strdup(s ? s : "");
  }
  case COHORT_KEY_CHOICE: {
    int v = *CFIELD(cfg, k, int);
    if (v < 0 || (guint)v >= g_strv_length((char **)k->choices))
      return g_strdup_printf("%d", v);
    return g_strdup(k->choices[v]);
  }
  case COHORT_KEY_INT_LIST: {
    const GArray *list = *CFIELD(cfg, k, GArray *);
    GString *out = g_string_new(NULL);
    for (guint i = 0; list && i < list->len; i++)
      g_string_append_printf(out, "%s%d", i ? "," : "", g_array_index(list, int, i));
    return g_string_free(out, FALSE);
  }
  }
  return NULL;
}

static gboolean set_one(CohortConfig *cfg, const char *key, const char *value, const char *source,
                        gboolean cross_check, GError **error)
{
  const CohortConfigKey *k = cohort_config_find_key(key);
  if (!k) {
    if (g_strcmp0(key, "version") == 0)
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"version\" cannot be set; Cohort always writes version %d", src(source),
                  COHORT_CONFIG_VERSION);
    else
      unknown_key_error(source, key ? key : "", error);
    return FALSE;
  }
  g_autoptr(JsonNode) node = text_to_node(k, value ? value : "");
  /* A list's parsed form would not look like what was typed. */
  const char *typed = k->type == COHORT_KEY_INT_LIST ? value : NULL;
  if (!check_typed(k, node, typed, source, error))
    return FALSE;
  g_autoptr(CohortConfig) edited = cohort_config_copy(cfg);
  store_node(edited, k, node);
  if (cross_check && !cohort_config_validate(edited, source, error))
    return FALSE;
  /* Swap so that the caller's pointer stays valid and the old fields are freed with `edited`. */
  CohortConfig old = *cfg;
  *cfg = *edited;
  *edited = old;
  return TRUE;
}

gboolean cohort_config_set(CohortConfig *cfg, const char *key, const char *value,
                           const char *source, GError **error)
{
  return set_one(cfg, key, value, source, TRUE, error);
}

static gboolean split_assignment(const char *assignment, char **key, const char **value,
                                 const char *source, GError **error)
{
  const char *eq = assignment ? strchr(assignment, '=') : NULL;
  if (!eq) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: \"%s\" is not an assignment; allowed: key=value, like learning_rate=3e-4",
                src(source), assignment ? assignment : "");
    return FALSE;
  }
  *key = g_strstrip(g_strndup(assignment, (gsize)(eq - assignment)));
  *value = eq + 1;
  return TRUE;
}

gboolean cohort_config_apply_assignments(CohortConfig *cfg, const char *const *assignments,
                                         const char *source, GError **error)
{
  g_autoptr(CohortConfig) edited = cohort_config_copy(cfg);
  for (guint i = 0; assignments && assignments[i]; i++) {
    g_autofree char *key = NULL;
    const char *value = NULL;
    if (!split_assignment(assignments[i], &key, &value, source, error) ||
        !set_one(edited, key, value, source, FALSE, error))
      return FALSE;
  }
  if (!cohort_config_validate(edited, source, error))
    return FALSE;
  CohortConfig old = *cfg;
  *cfg = *edited;
  *edited = old;
  return TRUE;
}

gboolean cohort_config_set_assignment(CohortConfig *cfg, const char *assignment, const char *source,
                                      GError **error)
{
  g_autofree char *key = NULL;
  const char *value = NULL;
  return split_assignment(assignment, &key, &value, source, error) &&
         cohort_config_set(cfg, key, value, source, error);
}

/* ---- JSON out ---- */

static void append_value(GString *out, const CohortConfig *cfg, const CohortConfigKey *key,
                         gboolean pretty)
{
  switch (key->type) {
  case COHORT_KEY_STRING:
    cohort_json_append_string(out, *CFIELD(cfg, key, char *));
    break;
  case COHORT_KEY_CHOICE: {
    g_autofree char *text = cohort_config_get(cfg, key->name);
    cohort_json_append_string(out, text);
    break;
  }
  case COHORT_KEY_INT_LIST: {
    const GArray *list = *CFIELD(cfg, key, GArray *);
    g_string_append_c(out, '[');
    for (guint i = 0; list && i < list->len; i++)
      g_string_append_printf(out, "%s%d", i ? (pretty ? ", " : ",") : "",
                             g_array_index(list, int, i));
    g_string_append_c(out, ']');
    break;
  }
  case COHORT_KEY_DOUBLE:
    append_double(out, *CFIELD(cfg, key, double));
    break;
  default: {
    g_autofree char *text = cohort_config_get(cfg, key->name);
    g_string_append(out, text);
  }
  }
}

char *cohort_config_to_json(const CohortConfig *cfg, gboolean pretty)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  const char *sep = pretty ? ",\n  " : ",";
  const char *colon = pretty ? ": " : ":";
  GString *out = g_string_new(pretty ? "{\n  " : "{");
  g_string_append_printf(out, "\"version\"%s%d", colon, COHORT_CONFIG_VERSION);
  for (guint i = 0; i < n; i++) {
    g_string_append(out, sep);
    cohort_json_append_string(out, keys[i].name);
    g_string_append(out, colon);
    append_value(out, cfg, &keys[i], pretty);
  }
  g_string_append(out, pretty ? "\n}" : "}");
  return g_string_free(out, FALSE);
}

char *cohort_config_hash(const CohortConfig *cfg)
{
  g_autofree char *json = cohort_config_to_json(cfg, FALSE);
  return g_compute_checksum_for_string(G_CHECKSUM_SHA256, json, -1);
}

GStrv cohort_config_diff(const CohortConfig *a, const CohortConfig *b)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  g_autoptr(GStrvBuilder) names = g_strv_builder_new();
  for (guint i = 0; i < n; i++) {
    /* Text forms are exact (doubles print their shortest round-trip spelling). */
    g_autofree char *va = cohort_config_get(a, keys[i].name);
    g_autofree char *vb = cohort_config_get(b, keys[i].name);
    if (strcmp(va, vb) != 0)
      g_strv_builder_add(names, keys[i].name);
  }
  return g_strv_builder_end(names);
}

/* ---- versions ---- */

typedef gboolean (*Migration)(JsonObject *obj, const char *source, GError **error);

/* Version 0 is the seeds' spelling: three keys had shorter names. */
static gboolean migrate_0_to_1(JsonObject *obj, const char *source, GError **error)
{
  for (guint i = 0; i < G_N_ELEMENTS(v0_renames); i++) {
    const Rename *r = &v0_renames[i];
    JsonNode *old = json_object_get_member(obj, r->old_name);
    if (!old)
      continue;
    if (json_object_has_member(obj, r->new_name)) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"%s\" is the version 0 name of \"%s\", and both are given; "
                  "allowed: only one of them",
                  src(source), r->old_name, r->new_name);
      return FALSE;
    }
    json_object_set_member(obj, r->new_name, json_node_copy(old));
    json_object_remove_member(obj, r->old_name);
  }
  return TRUE;
}

/* migrations[v] turns a version-v object into version v + 1. */
static const Migration migrations[] = {migrate_0_to_1};
G_STATIC_ASSERT(G_N_ELEMENTS(migrations) == COHORT_CONFIG_VERSION);

static gboolean migrate(JsonObject *obj, const char *source, GError **error)
{
  const char *s = src(source);
  JsonNode *vn = json_object_get_member(obj, "version");
  if (!vn) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION,
                "%s: no \"version\" key; add \"version\": %d as the first key", s,
                COHORT_CONFIG_VERSION);
    return FALSE;
  }
  if (!is_int_node(vn) || json_node_get_int(vn) < 0) {
    g_autofree char *shown = node_text(vn);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION,
                "%s: key \"version\": %s is not allowed; allowed: an integer from 0 to %d", s,
                shown, COHORT_CONFIG_VERSION);
    return FALSE;
  }
  gint64 version = json_node_get_int(vn);
  if (version > COHORT_CONFIG_VERSION) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION,
                "%s: \"version\" %" G_GINT64_FORMAT
                " is newer than this build's version %d; use a newer Cohort to read it",
                s, version, COHORT_CONFIG_VERSION);
    return FALSE;
  }
  for (gint64 v = version; v < COHORT_CONFIG_VERSION; v++)
    if (!migrations[v](obj, source, error))
      return FALSE;
  return TRUE;
}

/* ---- JSON in ---- */

/* json-glib keeps the last of repeated members without a word; its per-member signal lets us
 * refuse them instead, since a silently dropped value is as bad as an unknown key. */
typedef struct {
  GHashTable *seen; /* "object pointer/name" */
  char *repeated;
} RepeatCheck;

static void on_member(JsonParser *parser, JsonObject *obj, const char *name, gpointer data)
{
  RepeatCheck *check = data;
  (void)parser;
  if (!g_hash_table_add(check->seen, g_strdup_printf("%p/%s", (void *)obj, name)) &&
      !check->repeated)
    check->repeated = g_strdup(name);
}

CohortConfig *cohort_config_load_data(const char *json, gssize length, const char *source,
                                      GError **error)
{
  const char *s = src(source);
  g_autoptr(JsonParser) parser = json_parser_new();
  g_autoptr(GError) parse_error = NULL;
  g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  RepeatCheck check = {seen, NULL};
  g_signal_connect(parser, "object-member", G_CALLBACK(on_member), &check);
  gboolean parsed = json_parser_load_from_data(parser, json, length, &parse_error);
  g_autofree char *repeated = check.repeated;
  if (!parsed) {
    const char *msg = parse_error->message;
    /* json-glib names the input "<data>"; the source already says which file it is. */
    if (g_str_has_prefix(msg, "<data>:"))
      msg += strlen("<data>:");
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_PARSE, "%s: not valid JSON: %s", s,
                msg);
    return NULL;
  }
  JsonNode *root = json_parser_get_root(parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_PARSE,
                "%s: not a TrainConfig: the top level must be one JSON object { ... }", s);
    return NULL;
  }
  if (repeated) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"%s\" is given more than once; allowed: each key once", s, repeated);
    return NULL;
  }
  JsonObject *obj = json_node_get_object(root);
  if (!migrate(obj, source, error))
    return NULL;

  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GList) names = json_object_get_members(obj);
  for (GList *l = names; l; l = l->next) {
    const char *name = l->data;
    if (strcmp(name, "version") == 0)
      continue;
    const CohortConfigKey *key = cohort_config_find_key(name);
    if (!key) {
      unknown_key_error(source, name, error);
      return NULL;
    }
    JsonNode *node = json_object_get_member(obj, name);
    if (!check_node(key, node, source, error))
      return NULL;
    store_node(cfg, key, node);
  }
  if (!cohort_config_validate(cfg, source, error))
    return NULL;
  return g_steal_pointer(&cfg);
}

static char *read_config_file(const char *path, gsize *length, GError **error)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO, "%s: cannot read: %s", path,
                g_strerror(e));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO,
                "%s: cannot read: it is a folder, not a config file", path);
    return NULL;
  }
  g_autoptr(GByteArray) data = g_byte_array_new();
  guint8 chunk[65536];
  for (;;) {
    ssize_t got = read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      int e = errno;
      close(fd);
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO, "%s: cannot read: %s", path,
                  g_strerror(e));
      return NULL;
    }
    if (got == 0)
      break;
    if (data->len + (gsize)got > MAX_CONFIG_BYTES) {
      close(fd);
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO,
                  "%s: cannot read: larger than %d MiB, which is not a config file", path,
                  MAX_CONFIG_BYTES >> 20);
      return NULL;
    }
    g_byte_array_append(data, chunk, (guint)got);
  }
  close(fd);
  *length = data->len;
  g_byte_array_append(data, (const guint8 *)"", 1);
  return (char *)g_byte_array_free(g_steal_pointer(&data), FALSE);
}

CohortConfig *cohort_config_load_file(const char *path, GError **error)
{
  gsize length = 0;
  g_autofree char *data = read_config_file(path, &length, error);
  if (!data)
    return NULL;
  return cohort_config_load_data(data, (gssize)length, path, error);
}

/* ---- atomic save ---- */

static gboolean save_error(GError **error, const char *path, const char *what, int e)
{
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO, "%s: cannot write: %s%s%s", path,
              what, e ? ": " : "", e ? g_strerror(e) : "");
  return FALSE;
}

static gboolean write_all(int fd, const char *data, gsize len)
{
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return FALSE;
    data += n;
    len -= (gsize)n;
  }
  return TRUE;
}

gboolean cohort_config_save_file(const CohortConfig *cfg, const char *path, GError **error)
{
  if (g_file_test(path, G_FILE_TEST_IS_DIR))
    return save_error(error, path, "it is a folder, not a file", 0);

  g_autofree char *json = cohort_config_to_json(cfg, TRUE);
  g_autofree char *text = g_strconcat(json, "\n", NULL);
  g_autofree char *dir = g_path_get_dirname(path);
  g_autofree char *base = g_path_get_basename(path);
  g_autofree char *tmp = g_strdup_printf("%s/.%s.XXXXXX", dir, base);

  int fd = g_mkstemp_full(tmp, O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    return save_error(error, path, "cannot create a temporary file in the same folder", errno);
  if (!write_all(fd, text, strlen(text)) || fsync(fd) != 0) {
    int e = errno;
    close(fd);
    unlink(tmp);
    return save_error(error, path, "writing the temporary file failed", e);
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    return save_error(error, path, "writing the temporary file failed", e);
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return save_error(error, path, "cannot replace the file", e);
  }
  /* The rename is durable only once the folder's entry is on disk. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return TRUE;
}
