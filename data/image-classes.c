/* The class mapping saved with a model: {"classes": [...]} in index order. */
#include "data/images.h"

#include <string.h>
#include <json-glib/json-glib.h>

#include "engine/base/fileio.h"
#include "engine/base/json-read.h"
#include "engine/base/json-write.h"

/* A class mapping lists a few thousand names at most: anything larger is not one. */
#define MAX_CLASSES_BYTES (16u << 20)

gboolean cohort_image_classes_write(const char *const *classes, const char *path, GError **error)
{
  /* Names that are not UTF-8 (folder names from another system) are escaped, so the file is
   * always JSON that Cohort and every other reader takes (engine/base/json-write.h). */
  g_autoptr(GString) text = g_string_new("{\n  \"classes\": [");
  for (guint i = 0; classes && classes[i]; i++) {
    g_string_append(text, i ? ",\n    " : "\n    ");
    cohort_json_append_string(text, classes[i]);
  }
  g_string_append(text, classes && classes[0] ? "\n  ]\n}\n" : "]\n}\n");
  g_autoptr(GError) local = NULL;
  if (!cohort_write_file_atomic(path, text->str, text->len, &local)) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot write the class mapping: %s", path, local->message);
    return FALSE;
  }
  return TRUE;
}

static gboolean bad_mapping(const char *path, const char *what, GError **error)
{
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
              "%s: not a class mapping: %s (expected {\"classes\": [\"name\", ...]})", path, what);
  return FALSE;
}

GStrv cohort_image_classes_read(const char *path, GError **error)
{
  g_autoptr(GError) local = NULL;
  gsize len = 0;
  g_autofree char *text =
      cohort_file_read_regular(path, MAX_CLASSES_BYTES, "a class mapping", &len, &local);
  if (!text) {
    g_set_error_literal(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, local->message);
    return NULL;
  }
  /* The one strict, depth-limited reader: json-glib alone recurses once per level. */
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, path, 0, &local);
  if (!root) {
    g_set_error_literal(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT, local->message);
    return NULL;
  }
  JsonObject *o = JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
  JsonNode *member = o ? json_object_get_member(o, "classes") : NULL;
  if (!member || !JSON_NODE_HOLDS_ARRAY(member)) {
    bad_mapping(path, "no \"classes\" array", error);
    return NULL;
  }
  JsonArray *arr = json_node_get_array(member);
  guint n = json_array_get_length(arr);
  g_autoptr(GHashTable) seen = g_hash_table_new(g_str_hash, g_str_equal);
  g_auto(GStrv) names = g_new0(char *, n + 1);
  for (guint i = 0; i < n; i++) {
    JsonNode *item = json_array_get_element(arr, i);
    if (!JSON_NODE_HOLDS_VALUE(item) || json_node_get_value_type(item) != G_TYPE_STRING ||
        !*json_node_get_string(item)) {
      g_autofree char *what = g_strdup_printf("entry %u is not a non-empty string", i);
      bad_mapping(path, what, error);
      return NULL;
    }
    names[i] = g_strdup(json_node_get_string(item));
    if (!g_hash_table_add(seen, names[i])) {
      g_autofree char *what = g_strdup_printf("class \"%s\" appears twice", names[i]);
      bad_mapping(path, what, error);
      return NULL;
    }
  }
  return g_steal_pointer(&names);
}
