/* tokenizer_config.json beside a tokenizer (transformers' file): the parts Cohort reads are
 * bos_token and eos_token (a string, or an object with "content") and chat_template (a
 * string, or a list of {"name", "template"} of which "default" is taken); chat_template.jinja
 * beside it, newer transformers' place for the template, when the config has none. Strict
 * JSON, except that integers beyond 64 bits (model_max_length is often 10^30) are read as the
 * floating point numbers Python's json would not write but means. */
#include "data/bpe-private.h"

#include <string.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "engine/base/fileio.h"
#include "engine/base/json-read.h"

#define MAX_CONFIG (16u << 20)

/* A copy of JSON text where each integer of more than 18 digits gets ".0", so the strict
 * reader takes it as a double; strings are left alone. */
static char *widen_big_integers(const char *text, gsize len, gsize *out_len)
{
  GString *o = g_string_sized_new(len + 16);
  gboolean in_string = FALSE;
  for (gsize i = 0; i < len; i++) {
    char c = text[i];
    if (in_string) {
      g_string_append_c(o, c);
      if (c == '\\' && i + 1 < len)
        g_string_append_c(o, text[++i]);
      else if (c == '"')
        in_string = FALSE;
      continue;
    }
    if (c == '"') {
      in_string = TRUE;
      g_string_append_c(o, c);
      continue;
    }
    if ((c == '-' || g_ascii_isdigit(c)) && (i == 0 || !g_ascii_isalnum(text[i - 1]))) {
      gsize j = i + (c == '-');
      while (j < len && g_ascii_isdigit(text[j]))
        j++;
      gsize digits = j - i - (c == '-');
      gboolean integer = j >= len || (text[j] != '.' && text[j] != 'e' && text[j] != 'E');
      g_string_append_len(o, text + i, (gssize)(j - i));
      if (integer && digits > 18)
        g_string_append(o, ".0");
      i = j - 1;
      continue;
    }
    g_string_append_c(o, c);
  }
  *out_len = o->len;
  return g_string_free(o, FALSE);
}

/* bos_token / eos_token: a string, an AddedToken object ({"content": …}), or null. */
static gboolean token_member(JsonObject *o, const char *key, const char *path, char **out,
                             GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || JSON_NODE_HOLDS_NULL(n))
    return TRUE;
  if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    *out = g_strdup(json_node_get_string(n));
    return TRUE;
  }
  JsonObject *obj = JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
  JsonNode *c = obj ? json_object_get_member(obj, "content") : NULL;
  if (c && JSON_NODE_HOLDS_VALUE(c) && json_node_get_value_type(c) == G_TYPE_STRING) {
    *out = g_strdup(json_node_get_string(c));
    return TRUE;
  }
  g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
              "%s: %s is not a string or an object with a string \"content\"", path, key);
  return FALSE;
}

static gboolean chat_template_member(JsonObject *o, const char *path, char **out, GError **error)
{
  JsonNode *n = json_object_get_member(o, "chat_template");
  if (!n || JSON_NODE_HOLDS_NULL(n))
    return TRUE;
  if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    *out = g_strdup(json_node_get_string(n));
    return TRUE;
  }
  if (JSON_NODE_HOLDS_ARRAY(n)) {
    JsonArray *a = json_node_get_array(n);
    g_autoptr(GString) names = g_string_new(NULL);
    for (guint i = 0; i < json_array_get_length(a); i++) {
      JsonNode *e = json_array_get_element(a, i);
      JsonObject *t = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
      JsonNode *name = t ? json_object_get_member(t, "name") : NULL;
      JsonNode *tmpl = t ? json_object_get_member(t, "template") : NULL;
      if (!name || !tmpl || json_node_get_value_type(name) != G_TYPE_STRING ||
          json_node_get_value_type(tmpl) != G_TYPE_STRING) {
        g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                    "%s: chat_template[%u] is not {\"name\": …, \"template\": …}", path, i);
        return FALSE;
      }
      if (strcmp(json_node_get_string(name), "default") == 0) {
        *out = g_strdup(json_node_get_string(tmpl));
        return TRUE;
      }
      g_string_append_printf(names, "%s\"%s\"", names->len ? ", " : "", json_node_get_string(name));
    }
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                "%s: chat_template lists %s but no \"default\"; allowed: a template named "
                "\"default\"",
                path, names->len ? names->str : "no template");
    return FALSE;
  }
  g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
              "%s: chat_template is not a string or a list of named templates", path);
  return FALSE;
}

gboolean tok_read_config(CohortTokenizer *t, const char *dir, GError **error)
{
  g_autofree char *path = g_build_filename(dir, "tokenizer_config.json", NULL);
  GStatBuf st;
  if (g_lstat(path, &st) == 0) {
    gsize len = 0;
    g_autofree char *text =
        cohort_file_read_regular(path, MAX_CONFIG, "tokenizer configuration", &len, error);
    if (!text)
      return FALSE;
    gsize wlen = 0;
    g_autofree char *wide = widen_big_integers(text, len, &wlen);
    g_autoptr(JsonNode) root = cohort_json_parse_strict(wide, (gssize)wlen, path, 0, error);
    if (!root)
      return FALSE;
    if (!JSON_NODE_HOLDS_OBJECT(root)) {
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                  "%s: not a JSON object", path);
      return FALSE;
    }
    JsonObject *o = json_node_get_object(root);
    if (!token_member(o, "bos_token", path, &t->bos_token, error) ||
        !token_member(o, "eos_token", path, &t->eos_token, error) ||
        !chat_template_member(o, path, &t->chat_template, error))
      return FALSE;
  }
  g_autofree char *jinja = g_build_filename(dir, "chat_template.jinja", NULL);
  if (!t->chat_template && g_lstat(jinja, &st) == 0) {
    gsize len = 0;
    t->chat_template = cohort_file_read_regular(jinja, MAX_CONFIG, "chat template", &len, error);
    if (!t->chat_template)
      return FALSE;
    if (!g_utf8_validate(t->chat_template, (gssize)len, NULL) || strlen(t->chat_template) != len) {
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                  "%s: not UTF-8 text", jinja);
      return FALSE;
    }
  }
  return TRUE;
}

const char *cohort_tokenizer_chat_template(const CohortTokenizer *t)
{
  return t->chat_template;
}

const char *cohort_tokenizer_bos_token(const CohortTokenizer *t)
{
  return t->bos_token;
}

const char *cohort_tokenizer_eos_token(const CohortTokenizer *t)
{
  return t->eos_token;
}
