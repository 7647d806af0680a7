/* The class mapping saved with a model: {"classes": [...]} in index order. */
#include "data/images.h"

#include <string.h>
#include <json-glib/json-glib.h>

gboolean cohort_image_classes_write(const char *const *classes, const char *path, GError **error)
{
  g_autoptr(JsonBuilder) b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "classes");
  json_builder_begin_array(b);
  for (guint i = 0; classes && classes[i]; i++)
    json_builder_add_string_value(b, classes[i]);
  json_builder_end_array(b);
  json_builder_end_object(b);
  g_autoptr(JsonGenerator) gen = json_generator_new();
  g_autoptr(JsonNode) root = json_builder_get_root(b);
  json_generator_set_root(gen, root);
  json_generator_set_pretty(gen, TRUE);
  gsize len;
  g_autofree char *text = json_generator_to_data(gen, &len);
  g_autofree char *with_newline = g_strconcat(text, "\n", NULL);
  g_autoptr(GError) local = NULL;
  if (!g_file_set_contents_full(path, with_newline, (gssize)len + 1,
                                G_FILE_SET_CONTENTS_CONSISTENT | G_FILE_SET_CONTENTS_DURABLE, 0644,
                                &local)) {
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
  g_autoptr(JsonParser) parser = json_parser_new();
  g_autoptr(GError) local = NULL;
  if (!json_parser_load_from_file(parser, path, &local)) {
    g_set_error(error, COHORT_DATA_ERROR,
                local->domain == G_FILE_ERROR ? COHORT_DATA_ERROR_IO : COHORT_DATA_ERROR_FORMAT,
                "%s: cannot read the class mapping: %s", path, local->message);
    return NULL;
  }
  JsonNode *root = json_parser_get_root(parser);
  JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
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
