/* Hugging Face's tokenizer.json, as the tokenizers library defines it: the BPE model (with
 * byte_fallback, ignore_merges, fuse_unk, an unknown token), added_tokens, and the pipeline
 * around the model (data/tok-json-parts.c, data/tok-json-post.c). Anything Cohort does not
 * implement is refused by name. */
#include "data/tok-json.h"

#include <string.h>

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

/* The model's options; the vocabulary and merges are read after the pre-tokenizer (which says
 * how to read the keys). */
static const char *const model_keys[] = {"type",
                                         "dropout",
                                         "unk_token",
                                         "continuing_subword_prefix",
                                         "end_of_word_suffix",
                                         "fuse_unk",
                                         "byte_fallback",
                                         "ignore_merges",
                                         "vocab",
                                         "merges",
                                         NULL};

static gboolean check_model(Build *b, CohortTokenizer *t, JsonObject *model)
{
  const char *type = tok_json_string(model, "type");
  if (type && strcmp(type, "BPE") != 0) {
    g_autofree char *ty = bpe_shown(type);
    return bpe_fail(b, "model.type \"%s\" is not a model Cohort implements; allowed: \"BPE\"", ty);
  }
  JsonNode *drop = json_object_get_member(model, "dropout");
  if (drop && !JSON_NODE_HOLDS_NULL(drop) &&
      !(JSON_NODE_HOLDS_VALUE(drop) && json_node_get_value_type(drop) == G_TYPE_DOUBLE &&
        json_node_get_double(drop) == 0.0))
    return bpe_fail(b, "model.dropout is set; allowed: null or 0 (BPE dropout is for training "
                       "a tokenizer, not for encoding data)");
  static const char *const unset[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (guint i = 0; i < G_N_ELEMENTS(unset); i++) {
    const char *s = tok_json_string(model, unset[i]);
    if (!tok_json_is_null(model, unset[i]) && !(s && !*s))
      return bpe_fail(b,
                      "model.%s is set; allowed: null or \"\" (Cohort's BPE has no subword "
                      "prefixes or suffixes)",
                      unset[i]);
  }
  static const char *const flags[] = {"fuse_unk", "byte_fallback", "ignore_merges"};
  int v[3];
  for (guint i = 0; i < 3; i++) {
    v[i] = tok_json_bool(model, flags[i]);
    if (v[i] == -2)
      return bpe_fail(b, "model.%s is not true or false", flags[i]);
  }
  t->fuse_unk = v[0] > 0, t->byte_fallback = v[1] > 0, t->ignore_merges = v[2] > 0;
  if (!tok_json_is_null(model, "unk_token") && !tok_json_string(model, "unk_token"))
    return bpe_fail(b, "model.unk_token is not a string or null");
  return TRUE;
}

/* added_tokens: [{"id": N, "content": "…", "special", "lstrip", "rstrip", "normalized",
 * "single_word"}]: tokens found in text before the pipeline runs. */
static gboolean read_added(Build *b, JsonNode *node)
{
  static const char *const keys[] = {"id",     "content",    "single_word", "lstrip",
                                     "rstrip", "normalized", "special",     NULL};
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
    const char *content = o ? tok_json_string(o, "content") : NULL;
    g_autofree char *where = g_strdup_printf("added_tokens[%u]", i);
    if (!idn || !JSON_NODE_HOLDS_VALUE(idn) || json_node_get_value_type(idn) != G_TYPE_INT64 ||
        !content || !*content)
      return bpe_fail(b,
                      "added_tokens[%u] is not an object with an integer \"id\" and a "
                      "non-empty \"content\"",
                      i);
    int flag[5];
    static const char *const names[] = {"single_word", "lstrip", "rstrip", "normalized", "special"};
    for (int k = 0; k < 5; k++) {
      flag[k] = tok_json_bool(o, names[k]);
      if (flag[k] == -2)
        return bpe_fail(b, "%s.%s is not true or false", where, names[k]);
    }
    if (flag[0] > 0)
      return bpe_fail(b,
                      "%s.single_word is true; allowed: false (Cohort does not implement "
                      "single-word added tokens)",
                      where);
    gint64 id = json_node_get_int(idn);
    g_autoptr(GBytes) bytes = g_bytes_new(content, strlen(content));
    GBytes *have = id >= 0 && id < b->tokens->len ? b->tokens->pdata[id] : NULL;
    if (have && !g_bytes_equal(have, bytes)) {
      g_autofree char *k = bpe_shown(content);
      return bpe_fail(b,
                      "%s: id %" G_GINT64_FORMAT " is another token in model.vocab than "
                      "\"%s\"; allowed: an id of its own, or the vocabulary's id of the same "
                      "text",
                      where, id, k);
    }
    if (!tok_json_only(b, o, where, keys) || (!have && !bpe_add_token(b, where, id, bytes)))
      return FALSE;
    /* Special tokens match as written; others as the library's default says (normalized
     * unless special). */
    gboolean special = flag[4] > 0;
    TokAdded added = {.content = g_bytes_ref(bytes),
                      .id = (gint32)id,
                      .special = special,
                      .lstrip = flag[1] > 0,
                      .rstrip = flag[2] > 0,
                      .normalized = flag[3] < 0 ? !special : flag[3] > 0};
    g_array_append_val(b->added, added);
    g_ptr_array_add(b->special_text, g_bytes_ref(bytes));
    gint32 id32 = (gint32)id;
    g_array_append_val(b->special_id, id32);
  }
  return TRUE;
}

gboolean bpe_read_tokenizer_json(Build *b, CohortTokenizer *t, JsonNode *root)
{
  static const char *const keys[] = {
      "version",       "truncation", "padding",        "added_tokens", "normalizer",
      "pre_tokenizer", "model",      "post_processor", "decoder",      NULL};
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return bpe_fail(b, "not a JSON object; allowed: a Hugging Face tokenizer.json");
  JsonObject *o = json_node_get_object(root);
  JsonObject *model = tok_json_object(o, "model");
  if (!model)
    return bpe_fail(b, "has no \"model\" object; allowed: a Hugging Face tokenizer.json");
  t->pipeline = TRUE;
  t->normalizers = g_ptr_array_new_with_free_func(tok_norm_free);
  t->pretoks = g_ptr_array_new_with_free_func(tok_pre_free);
  t->decoders = g_ptr_array_new_with_free_func(tok_dec_free);
  if (!check_model(b, t, model) ||
      !tok_read_normalizer(b, t, json_object_get_member(o, "normalizer")) ||
      !tok_read_pre_tokenizer(b, t, json_object_get_member(o, "pre_tokenizer")) ||
      !tok_read_decoder(b, t, json_object_get_member(o, "decoder")))
    return FALSE;
  b->raw = !t->byte_level;
  if (t->byte_level && t->byte_fallback)
    return bpe_fail(b, "model.byte_fallback is true with a ByteLevel pre-tokenizer; allowed: "
                       "one or the other (byte-level tokens already cover every byte)");
  if (!bpe_read_vocab(b, json_object_get_member(model, "vocab"), "model.vocab") ||
      !read_added(b, json_object_get_member(o, "added_tokens")) ||
      !read_merges_json(b, t, json_object_get_member(model, "merges")) ||
      !tok_read_post_processor(b, t, json_object_get_member(o, "post_processor")) ||
      /* Members Cohort does not know, after the known ones had their say. */
      !tok_json_only(b, model, "model", model_keys) || !tok_json_only(b, o, "tokenizer.json", keys))
    return FALSE;
  const char *unk = tok_json_string(model, "unk_token");
  t->unk_id = -1;
  if (unk) {
    g_autoptr(GBytes) key = bpe_key_bytes(b, unk);
    gpointer v = key ? g_hash_table_lookup(b->ids, key) : NULL;
    if (!v) {
      g_autofree char *k = bpe_shown(unk);
      return bpe_fail(b, "model.unk_token \"%s\" is not a token of model.vocab", k);
    }
    t->unk_id = GPOINTER_TO_INT(v) - 1;
  }
  return TRUE;
}
