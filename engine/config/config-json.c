/* TrainConfig as JSON: written with "version" first, read strictly (engine/base/json-read.h) with
 * every key checked, migrated from older versions, and saved durably (engine/base/fileio.h). */
#include "engine/config/config-private.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/fileio.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"

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
    config_append_double(out, *CFIELD(cfg, key, double));
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

/* ---- JSON in ---- */

CohortConfig *cohort_config_load_data(const char *json, gssize length, const char *source,
                                      GError **error)
{
  const char *s = config_src(source);
  g_autoptr(GError) parse_error = NULL;
  /* Strict JSON: a repeated key is refused there, since a silently dropped value is as bad as
   * an unknown key. */
  g_autoptr(JsonNode) root = cohort_json_parse_strict(json, length, s, 0, &parse_error);
  if (!root) {
    gboolean repeated =
        g_error_matches(parse_error, COHORT_JSON_ERROR, COHORT_JSON_ERROR_DUPLICATE_KEY);
    g_set_error_literal(error, COHORT_CONFIG_ERROR,
                        repeated ? COHORT_CONFIG_ERROR_INVALID : COHORT_CONFIG_ERROR_PARSE,
                        parse_error->message);
    return NULL;
  }
  if (!JSON_NODE_HOLDS_OBJECT(root)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_PARSE,
                "%s: not a TrainConfig: the top level must be one JSON object { ... }", s);
    return NULL;
  }
  JsonObject *obj = json_node_get_object(root);
  if (!config_migrate(obj, source, error))
    return NULL;

  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GList) names = json_object_get_members(obj);
  for (GList *l = names; l; l = l->next) {
    const char *name = l->data;
    if (strcmp(name, "version") == 0)
      continue;
    const CohortConfigKey *key = cohort_config_find_key(name);
    if (!key) {
      config_unknown_key_error(source, name, error);
      return NULL;
    }
    JsonNode *node = json_object_get_member(obj, name);
    if (!config_check_node(key, node, source, error))
      return NULL;
    config_store_node(cfg, key, node);
  }
  if (!cohort_config_validate(cfg, source, error))
    return NULL;
  return g_steal_pointer(&cfg);
}

/* Through the one regular-file reader: a FIFO or a device named as a config (a teacher
 * folder's cohort-config.json) is refused instead of blocking or reading without end. */
static char *read_config_file(const char *path, gsize *length, GError **error)
{
  g_autoptr(GError) local = NULL;
  char *data = cohort_file_read_regular(path, MAX_CONFIG_BYTES, "a config file", length, &local);
  if (!data)
    g_set_error_literal(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO, local->message);
  return data;
}

CohortConfig *cohort_config_load_file(const char *path, GError **error)
{
  gsize length = 0;
  g_autofree char *data = read_config_file(path, &length, error);
  if (!data)
    return NULL;
  return cohort_config_load_data(data, (gssize)length, path, error);
}

/* ---- durable save ---- */

gboolean cohort_config_save_file(const CohortConfig *cfg, const char *path, GError **error)
{
  if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO,
                "%s: cannot write: it is a folder, not a file", path);
    return FALSE;
  }
  g_autofree char *json = cohort_config_to_json(cfg, TRUE);
  g_autofree char *text = g_strconcat(json, "\n", NULL);
  g_autoptr(GError) local = NULL;
  if (!cohort_write_file_atomic(path, text, strlen(text), &local)) {
    g_set_error_literal(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO, local->message);
    return FALSE;
  }
  return TRUE;
}
