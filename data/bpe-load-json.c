/* Hugging Face's tokenizer.json: the parts Cohort reads (model, added_tokens) and the
 * settings it checks, refusing every one that would make its encoding differ from GPT-2's
 * byte-level BPE. */
#include "data/bpe-private.h"

#include <string.h>

/* The member's string value, or NULL when it is missing, null or not a string. */
static const char *member_string(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string(n);
}

static gboolean is_null(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  return !n || JSON_NODE_HOLDS_NULL(n);
}

/* A boolean member: 1 true, 0 false, -1 missing or not a boolean. */
static int member_bool(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_BOOLEAN)
    return -1;
  return json_node_get_boolean(n);
}

/* An object member, or NULL. */
static JsonObject *member_object(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  return n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

/* Null, missing, or an empty string: the BPE options GPT-2 leaves unset. */
static gboolean unset_string(JsonObject *o, const char *key)
{
  const char *s = member_string(o, key);
  return is_null(o, key) || (s && !*s);
}

/* tokenizer.json's model.merges: strings "left right" or pairs ["left", "right"]. */
static gboolean read_merges_json(Build *b, CohortTokenizer *t, JsonNode *node)
{
  if (!node || !JSON_NODE_HOLDS_ARRAY(node))
    return bpe_fail(b, "model.merges is not an array");
  JsonArray *a = json_node_get_array(node);
  guint n = json_array_get_length(a);
  if (n > COHORT_TOKENIZER_MAX_TOKENS)
    return bpe_fail(b, "model.merges has %u merges; allowed: at most %d", n,
                    COHORT_TOKENIZER_MAX_TOKENS);
  bpe_merges_alloc(t, n);
  for (guint i = 0; i < n; i++) {
    JsonNode *m = json_array_get_element(a, i);
    g_autofree char *where = g_strdup_printf("model.merges[%u]", i);
    g_autofree char *copy = NULL;
    const char *left = NULL, *right = NULL;
    char *l, *r;
    if (JSON_NODE_HOLDS_VALUE(m) && json_node_get_value_type(m) == G_TYPE_STRING) {
      copy = g_strdup(json_node_get_string(m));
      if (bpe_split_merge(copy, &l, &r))
        left = l, right = r;
    } else if (JSON_NODE_HOLDS_ARRAY(m) && json_array_get_length(json_node_get_array(m)) == 2) {
      JsonArray *pair = json_node_get_array(m);
      JsonNode *x = json_array_get_element(pair, 0), *y = json_array_get_element(pair, 1);
      if (JSON_NODE_HOLDS_VALUE(x) && json_node_get_value_type(x) == G_TYPE_STRING &&
          JSON_NODE_HOLDS_VALUE(y) && json_node_get_value_type(y) == G_TYPE_STRING)
        left = json_node_get_string(x), right = json_node_get_string(y);
    }
    if (!left || !*left || !*right)
      return bpe_fail(b, "%s is not a merge; allowed: \"left right\" or [\"left\", \"right\"]",
                      where);
    if (!bpe_add_merge(b, t, left, right, i, where))
      return FALSE;
  }
  return TRUE;
}

static gboolean check_model(Build *b, JsonObject *model)
{
  const char *type = member_string(model, "type");
  if (type && strcmp(type, "BPE") != 0)
    return bpe_fail(b, "model.type \"%s\" is not allowed; allowed: \"BPE\" (byte-level BPE)", type);
  if (!is_null(model, "dropout"))
    return bpe_fail(b, "model.dropout is set; allowed: null (BPE dropout is for training a "
                       "tokenizer, not for encoding data)");
  static const char *const unset[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (guint i = 0; i < G_N_ELEMENTS(unset); i++)
    if (!unset_string(model, unset[i]))
      return bpe_fail(b, "model.%s is set; allowed: null or \"\" (GPT-2's byte-level BPE)",
                      unset[i]);
  static const char *const off[] = {"byte_fallback", "ignore_merges"};
  for (guint i = 0; i < G_N_ELEMENTS(off); i++)
    if (!is_null(model, off[i]) && member_bool(model, off[i]) != 0)
      return bpe_fail(b, "model.%s is not false; allowed: false (GPT-2's byte-level BPE)", off[i]);
  return TRUE;
}

/* The normalizer, pre-tokenizer and decoder GPT-2 has: none, ByteLevel (no prefix space, the
 * GPT-2 split) and ByteLevel. */
static gboolean check_pipeline(Build *b, JsonObject *root)
{
  if (!is_null(root, "normalizer"))
    return bpe_fail(b, "normalizer is set; allowed: null (GPT-2 encodes text as it is)");
  JsonObject *pre = member_object(root, "pre_tokenizer");
  const char *type = pre ? member_string(pre, "type") : NULL;
  if (!type || strcmp(type, "ByteLevel") != 0)
    return bpe_fail(b,
                    "pre_tokenizer is %s%s%s; allowed: {\"type\": \"ByteLevel\", "
                    "\"add_prefix_space\": false} (GPT-2's split)",
                    type ? "\"" : "", type ? type : "not a ByteLevel pre-tokenizer",
                    type ? "\"" : "");
  if (member_bool(pre, "add_prefix_space") != 0)
    return bpe_fail(b, "pre_tokenizer.add_prefix_space is not false; allowed: false (a prefix "
                       "space would not decode back to the text)");
  if (!is_null(pre, "use_regex") && member_bool(pre, "use_regex") != 1)
    return bpe_fail(b, "pre_tokenizer.use_regex is not true; allowed: true (GPT-2's split)");
  JsonObject *dec = member_object(root, "decoder");
  const char *dtype = dec ? member_string(dec, "type") : NULL;
  if (!is_null(root, "decoder") && (!dtype || strcmp(dtype, "ByteLevel") != 0))
    return bpe_fail(b, "decoder is %s; allowed: null or {\"type\": \"ByteLevel\"}",
                    dtype ? dtype : "not an object with a type");
  return TRUE;
}

/* added_tokens: [{"id": N, "content": "…", …}]: tokens written as text, recognised in text
 * only where special tokens are asked for. */
static gboolean read_added(Build *b, JsonNode *node)
{
  if (!node || JSON_NODE_HOLDS_NULL(node))
    return TRUE;
  if (!JSON_NODE_HOLDS_ARRAY(node))
    return bpe_fail(b, "added_tokens is not an array");
  JsonArray *a = json_node_get_array(node);
  guint n = json_array_get_length(a);
  if (n > COHORT_TOKENIZER_MAX_TOKENS)
    return bpe_fail(b, "added_tokens has %u tokens; allowed: at most %d", n,
                    COHORT_TOKENIZER_MAX_TOKENS);
  for (guint i = 0; i < n; i++) {
    JsonNode *e = json_array_get_element(a, i);
    JsonObject *o = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
    JsonNode *idn = o ? json_object_get_member(o, "id") : NULL;
    const char *content = o ? member_string(o, "content") : NULL;
    if (!idn || !JSON_NODE_HOLDS_VALUE(idn) || json_node_get_value_type(idn) != G_TYPE_INT64 ||
        !content || !*content)
      return bpe_fail(b,
                      "added_tokens[%u] is not an object with an integer \"id\" and a "
                      "non-empty \"content\"",
                      i);
    gint64 id = json_node_get_int(idn);
    g_autoptr(GBytes) bytes = g_bytes_new(content, strlen(content));
    g_autofree char *where = g_strdup_printf("added_tokens[%u]", i);
    GBytes *have = id >= 0 && id < b->tokens->len ? b->tokens->pdata[id] : NULL;
    if (have && !g_bytes_equal(have, bytes)) {
      g_autofree char *k = bpe_shown(content);
      return bpe_fail(b,
                      "%s: id %" G_GINT64_FORMAT " is another token in model.vocab than "
                      "\"%s\"; allowed: an id of its own, or the vocabulary's id of the same "
                      "text",
                      where, id, k);
    }
    if (!have && !bpe_add_token(b, where, id, bytes))
      return FALSE;
    g_ptr_array_add(b->special_text, g_bytes_ref(bytes));
    gint32 id32 = (gint32)id;
    g_array_append_val(b->special_id, id32);
  }
  return TRUE;
}

gboolean bpe_read_tokenizer_json(Build *b, CohortTokenizer *t, JsonNode *root)
{
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return bpe_fail(b, "not a JSON object; allowed: a Hugging Face tokenizer.json");
  JsonObject *o = json_node_get_object(root);
  JsonObject *model = member_object(o, "model");
  if (!model)
    return bpe_fail(b, "has no \"model\" object; allowed: a Hugging Face tokenizer.json");
  if (!check_model(b, model) || !check_pipeline(b, o))
    return FALSE;
  return bpe_read_vocab(b, json_object_get_member(model, "vocab"), "model.vocab") &&
         read_added(b, json_object_get_member(o, "added_tokens")) &&
         read_merges_json(b, t, json_object_get_member(model, "merges"));
}
