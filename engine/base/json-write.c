#include "engine/base/json-write.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cohort_json_append_double(GString *out, double value)
{
  if (!isfinite(value)) {
    g_string_append(out, "null");
    return;
  }
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  for (int digits = 15; digits <= 17; digits++) {
    g_ascii_formatd(buf, sizeof buf,
                    digits == 15   ? "%.15g"
                    : digits == 16 ? "%.16g"
                                   : "%.17g",
                    value);
    if (g_ascii_strtod(buf, NULL) == value)
      break;
  }
  g_string_append(out, buf);
}

char *cohort_utf8_escape(const char *bytes)
{
  if (bytes == NULL)
    return NULL;
  GString *out = g_string_new(NULL);
  const char *p = bytes, *end = bytes + strlen(bytes);
  while (p < end) {
    const char *bad = NULL;
    if (g_utf8_validate(p, end - p, &bad)) {
      g_string_append_len(out, p, end - p);
      break;
    }
    g_string_append_len(out, p, bad - p);
    g_string_append_printf(out, "\\x%02x", (guchar)*bad);
    p = bad + 1;
  }
  return g_string_free(out, FALSE);
}

void cohort_json_append_string(GString *out, const char *text)
{
  g_autofree char *escaped = NULL;
  if (text && !g_utf8_validate(text, -1, NULL))
    text = escaped = cohort_utf8_escape(text);
  g_string_append_c(out, '"');
  for (const unsigned char *c = (const unsigned char *)text; c && *c; c++) {
    switch (*c) {
    case '"':
      g_string_append(out, "\\\"");
      break;
    case '\\':
      g_string_append(out, "\\\\");
      break;
    case '\n':
      g_string_append(out, "\\n");
      break;
    case '\r':
      g_string_append(out, "\\r");
      break;
    case '\t':
      g_string_append(out, "\\t");
      break;
    default:
      if (*c < 0x20)
        g_string_append_printf(out, "\\u%04x", *c);
      else
        g_string_append_c(out, (char)*c);
    }
  }
  g_string_append_c(out, '"');
}

static void indent(GString *out, gboolean pretty, int depth)
{
  if (!pretty)
    return;
  g_string_append_c(out, '\n');
  for (int i = 0; i < depth; i++)
    g_string_append(out, "  ");
}

static void append_node(GString *out, JsonNode *node, gboolean pretty, int depth)
{
  switch (json_node_get_node_type(node)) {
  case JSON_NODE_NULL:
    g_string_append(out, "null");
    return;
  case JSON_NODE_VALUE:
    switch (json_node_get_value_type(node)) {
    case G_TYPE_INT64:
      g_string_append_printf(out, "%" G_GINT64_FORMAT, json_node_get_int(node));
      return;
    case G_TYPE_DOUBLE:
      cohort_json_append_double(out, json_node_get_double(node));
      return;
    case G_TYPE_BOOLEAN:
      g_string_append(out, json_node_get_boolean(node) ? "true" : "false");
      return;
    default:
      cohort_json_append_string(out, json_node_get_string(node));
      return;
    }
  case JSON_NODE_ARRAY: {
    JsonArray *a = json_node_get_array(node);
    guint n = json_array_get_length(a);
    g_string_append_c(out, '[');
    for (guint i = 0; i < n; i++) {
      if (i)
        g_string_append(out, pretty ? "," : ",");
      indent(out, pretty, depth + 1);
      append_node(out, json_array_get_element(a, i), pretty, depth + 1);
    }
    if (n)
      indent(out, pretty, depth);
    g_string_append_c(out, ']');
    return;
  }
  case JSON_NODE_OBJECT: {
    JsonObject *o = json_node_get_object(node);
    /* Members in insertion order, so events read in the order they were built. */
    GList *members = json_object_get_members(o);
    g_string_append_c(out, '{');
    for (GList *l = members; l; l = l->next) {
      if (l != members)
        g_string_append_c(out, ',');
      indent(out, pretty, depth + 1);
      cohort_json_append_string(out, l->data);
      g_string_append(out, pretty ? ": " : ":");
      append_node(out, json_object_get_member(o, l->data), pretty, depth + 1);
    }
    if (members)
      indent(out, pretty, depth);
    g_list_free(members);
    g_string_append_c(out, '}');
    return;
  }
  }
}

char *cohort_json_to_string(JsonNode *node, gboolean pretty)
{
  GString *out = g_string_new(NULL);
  append_node(out, node, pretty, 0);
  return g_string_free(out, FALSE);
}
