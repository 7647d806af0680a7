/* tokenizer.json's post_processor: the tokens add_special_tokens puts before and after a
 * sequence (TemplateProcessing's single template, RobertaProcessing's and BertProcessing's
 * cls and sep, a Sequence of them; ByteLevel adds none). Pairs of sequences are not encoded by
 * Cohort, so the pair template is only checked for its shape. */
#include "data/tok-json.h"

#include <string.h>

#define MAX_TEMPLATE 64

static gboolean valid_id(Build *b, gint64 id, const char *where)
{
  if (id < 0 || id >= (gint64)b->tokens->len || !b->tokens->pdata[id])
    return bpe_fail(b, "%s: id %" G_GINT64_FORMAT " is not a token of the vocabulary", where, id);
  return TRUE;
}

/* special_tokens[name].ids, appended to `into`. */
static gboolean template_special(Build *b, JsonObject *specials, const char *name,
                                 const char *where, GArray *into)
{
  JsonObject *s = specials ? tok_json_object(specials, name) : NULL;
  JsonNode *ids = s ? json_object_get_member(s, "ids") : NULL;
  g_autofree char *k = bpe_shown(name);
  if (!ids || !JSON_NODE_HOLDS_ARRAY(ids))
    return bpe_fail(b, "%s names \"%s\", which special_tokens does not give with \"ids\"", where,
                    k);
  JsonArray *a = json_node_get_array(ids);
  if (json_array_get_length(a) > MAX_TEMPLATE)
    return bpe_fail(b, "%s: \"%s\" has more than %d ids", where, k, MAX_TEMPLATE);
  for (guint i = 0; i < json_array_get_length(a); i++) {
    JsonNode *n = json_array_get_element(a, i);
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64)
      return bpe_fail(b, "%s: special_tokens \"%s\" ids[%u] is not a whole number", where, k, i);
    gint32 id = (gint32)json_node_get_int(n);
    if (!valid_id(b, json_node_get_int(n), where))
      return FALSE;
    g_array_append_val(into, id);
  }
  return TRUE;
}

static gboolean read_template(Build *b, JsonObject *o, const char *where, TokPost *post)
{
  static const char *const keys[] = {"type", "single", "pair", "special_tokens", NULL};
  if (!tok_json_only(b, o, where, keys))
    return FALSE;
  JsonNode *single = json_object_get_member(o, "single");
  JsonNode *pair = json_object_get_member(o, "pair");
  JsonObject *specials = tok_json_object(o, "special_tokens");
  if (!single || !JSON_NODE_HOLDS_ARRAY(single) || (pair && !JSON_NODE_HOLDS_ARRAY(pair)))
    return bpe_fail(b, "%s.single (and .pair) is not an array", where);
  JsonArray *a = json_node_get_array(single);
  if (json_array_get_length(a) > MAX_TEMPLATE)
    return bpe_fail(b, "%s.single has more than %d pieces", where, MAX_TEMPLATE);
  g_autoptr(GArray) before = g_array_new(FALSE, FALSE, sizeof(gint32));
  g_autoptr(GArray) after = g_array_new(FALSE, FALSE, sizeof(gint32));
  guint sequences = 0;
  for (guint i = 0; i < json_array_get_length(a); i++) {
    g_autofree char *w = g_strdup_printf("%s.single[%u]", where, i);
    JsonNode *n = json_array_get_element(a, i);
    JsonObject *item = JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
    JsonObject *sp = item ? tok_json_object(item, "SpecialToken") : NULL;
    JsonObject *seq = item ? tok_json_object(item, "Sequence") : NULL;
    const char *id = sp ? tok_json_string(sp, "id") : seq ? tok_json_string(seq, "id") : NULL;
    if (!id || json_object_get_size(item) != 1)
      return bpe_fail(b,
                      "%s is not {\"SpecialToken\": {\"id\": …}} or {\"Sequence\": {\"id\": "
                      "\"A\"}}",
                      w);
    if (seq) {
      if (strcmp(id, "A") != 0 || sequences++ > 0)
        return bpe_fail(b,
                        "%s: a single sequence's template holds sequence \"A\" once; "
                        "allowed: one {\"Sequence\": {\"id\": \"A\"}}",
                        w);
      continue;
    }
    if (!template_special(b, specials, id, w, sequences ? after : before))
      return FALSE;
  }
  if (sequences != 1)
    return bpe_fail(b, "%s.single has no {\"Sequence\": {\"id\": \"A\"}}", where);
  g_array_prepend_vals(post->prefix, before->data, before->len);
  g_array_append_vals(post->suffix, after->data, after->len);
  return TRUE;
}

/* RobertaProcessing / BertProcessing: {"cls": ["<s>", 0], "sep": ["</s>", 2]}. */
static gboolean read_cls_sep(Build *b, JsonObject *o, const char *where, TokPost *post)
{
  gint32 ids[2];
  const char *names[] = {"cls", "sep"};
  for (int i = 0; i < 2; i++) {
    JsonNode *n = json_object_get_member(o, names[i]);
    JsonArray *a = n && JSON_NODE_HOLDS_ARRAY(n) ? json_node_get_array(n) : NULL;
    JsonNode *id = a && json_array_get_length(a) == 2 ? json_array_get_element(a, 1) : NULL;
    if (!id || !JSON_NODE_HOLDS_VALUE(id) || json_node_get_value_type(id) != G_TYPE_INT64)
      return bpe_fail(b, "%s.%s is not [\"token\", id]", where, names[i]);
    g_autofree char *w = g_strdup_printf("%s.%s", where, names[i]);
    if (!valid_id(b, json_node_get_int(id), w))
      return FALSE;
    ids[i] = (gint32)json_node_get_int(id);
  }
  g_array_prepend_val(post->prefix, ids[0]);
  g_array_append_val(post->suffix, ids[1]);
  return TRUE;
}

static gboolean read_post_one(Build *b, JsonNode *node, const char *where, TokPost *post,
                              guint depth)
{
  JsonObject *o = node && JSON_NODE_HOLDS_OBJECT(node) ? json_node_get_object(node) : NULL;
  const char *type = o ? tok_json_string(o, "type") : NULL;
  if (!type)
    return bpe_fail(b, "%s is not an object with a \"type\"", where);
  if (strcmp(type, "TemplateProcessing") == 0)
    return read_template(b, o, where, post);
  if (strcmp(type, "ByteLevel") == 0) {
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex",
                                       NULL};
    return tok_json_only(b, o, where, keys);
  }
  if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
    static const char *const keys[] = {"type", "cls", "sep", "trim_offsets", "add_prefix_space",
                                       NULL};
    return tok_json_only(b, o, where, keys) && read_cls_sep(b, o, where, post);
  }
  if (strcmp(type, "Sequence") == 0) {
    static const char *const keys[] = {"type", "processors", NULL};
    JsonNode *list = json_object_get_member(o, "processors");
    if (!tok_json_only(b, o, where, keys))
      return FALSE;
    if (!list || !JSON_NODE_HOLDS_ARRAY(list) || depth > 4 ||
        json_array_get_length(json_node_get_array(list)) > MAX_TEMPLATE)
      return bpe_fail(b, "%s.processors is not an array of at most %d processors", where,
                      MAX_TEMPLATE);
    JsonArray *a = json_node_get_array(list);
    /* Each processor wraps what the ones before made. */
    for (guint i = 0; i < json_array_get_length(a); i++) {
      g_autofree char *w = g_strdup_printf("%s.processors[%u]", where, i);
      if (!read_post_one(b, json_array_get_element(a, i), w, post, depth + 1))
        return FALSE;
    }
    return TRUE;
  }
  g_autofree char *ty = bpe_shown(type);
  return bpe_fail(b,
                  "%s.type \"%s\" is not a post-processor Cohort implements; allowed: "
                  "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence",
                  where, ty);
}

gboolean tok_read_post_processor(Build *b, CohortTokenizer *t, JsonNode *node)
{
  t->post.prefix = g_array_new(FALSE, FALSE, sizeof(gint32));
  t->post.suffix = g_array_new(FALSE, FALSE, sizeof(gint32));
  if (!node || JSON_NODE_HOLDS_NULL(node))
    return TRUE;
  return read_post_one(b, node, "post_processor", &t->post, 0);
}
