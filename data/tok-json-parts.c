/* tokenizer.json's normalizer, pre_tokenizer, post_processor and decoder, read into the
 * tokenizer's pipeline (data/tok-pipeline.h). What Cohort does not implement is refused by
 * name, never approximated: another type, a setting that would change the result. */
#include "data/tok-json.h"

#include <string.h>

#define MAX_STEPS 64

const char *tok_json_string(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string(n);
}

int tok_json_bool(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || JSON_NODE_HOLDS_NULL(n))
    return -1;
  if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_BOOLEAN)
    return -2;
  return json_node_get_boolean(n);
}

JsonObject *tok_json_object(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  return n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

gboolean tok_json_is_null(JsonObject *o, const char *key)
{
  JsonNode *n = json_object_get_member(o, key);
  return !n || JSON_NODE_HOLDS_NULL(n);
}

gboolean tok_json_only(Build *b, JsonObject *o, const char *where, const char *const *allowed)
{
  JsonObjectIter it;
  const char *key;
  JsonNode *value;
  json_object_iter_init(&it, o);
  while (json_object_iter_next(&it, &key, &value)) {
    gboolean ok = FALSE;
    for (guint i = 0; allowed[i] && !ok; i++)
      ok = strcmp(key, allowed[i]) == 0;
    if (!ok) {
      g_autofree char *list = g_strjoinv(", ", (char **)allowed);
      g_autofree char *k = bpe_shown(key);
      return bpe_fail(b, "%s has the member \"%s\", which Cohort does not know; allowed: %s", where,
                      k, list);
    }
  }
  return TRUE;
}

/* A boolean option: its value, or `dflt` when missing; -1 (with an error) for another type. */
static int option(Build *b, JsonObject *o, const char *where, const char *key, gboolean dflt)
{
  int v = tok_json_bool(o, key);
  if (v == -2) {
    bpe_fail(b, "%s.%s is not true or false", where, key);
    return -1;
  }
  return v < 0 ? dflt : v;
}

/* The type of a component object at `where`. */
static const char *type_of(Build *b, JsonNode *node, const char *where, JsonObject **obj)
{
  if (!node || !JSON_NODE_HOLDS_OBJECT(node)) {
    bpe_fail(b, "%s is not an object with a \"type\"", where);
    return NULL;
  }
  *obj = json_node_get_object(node);
  const char *type = tok_json_string(*obj, "type");
  if (!type)
    bpe_fail(b, "%s has no string \"type\"", where);
  return type;
}

/* A pattern {"String": "…"} or {"Regex": "…"}: sets *literal or *regex. */
static gboolean read_pattern(Build *b, JsonObject *o, const char *where, char **literal,
                             TokRegex **regex, gboolean regex_allowed)
{
  g_autofree char *at = g_strdup_printf("%s.pattern", where);
  JsonObject *p = tok_json_object(o, "pattern");
  const char *s = p ? tok_json_string(p, "String") : NULL;
  const char *r = p ? tok_json_string(p, "Regex") : NULL;
  if (!p || json_object_get_size(p) != 1 || (!s && !r))
    return bpe_fail(b, "%s is not {\"String\": \"…\"} or {\"Regex\": \"…\"}", at);
  if (s) {
    if (!*s)
      return bpe_fail(b, "%s.String is empty; allowed: a non-empty string", at);
    *literal = g_strdup(s);
    return TRUE;
  }
  if (!regex_allowed)
    return bpe_fail(b,
                    "%s is a Regex; allowed here: a String (Cohort's decoders replace "
                    "strings only)",
                    at);
  g_autofree char *rwhere = g_strdup_printf("%s.Regex", at);
  *regex = tok_regex_new(r, b->source, rwhere, b->error);
  return *regex != NULL;
}

/* One character, as Metaspace's replacement and Strip's content are. */
static gboolean one_char(Build *b, JsonObject *o, const char *where, const char *key, char *out)
{
  const char *s = tok_json_string(o, key);
  if (!s || !*s || g_utf8_strlen(s, -1) != 1)
    return bpe_fail(b, "%s.%s is not one character", where, key);
  g_strlcpy(out, s, 8);
  return TRUE;
}

static gboolean read_norm_one(Build *b, CohortTokenizer *t, JsonNode *node, const char *where,
                              guint depth)
{
  JsonObject *o;
  const char *type = type_of(b, node, where, &o);
  if (!type)
    return FALSE;
  static const char *const only_type[] = {"type", NULL};
  struct {
    const char *name;
    TokNormKind kind;
  } forms[] = {{"NFC", TOK_NORM_NFC},
               {"NFKC", TOK_NORM_NFKC},
               {"NFD", TOK_NORM_NFD},
               {"NFKD", TOK_NORM_NFKD},
               {"Lowercase", TOK_NORM_LOWERCASE}};
  for (guint i = 0; i < G_N_ELEMENTS(forms); i++) {
    if (strcmp(type, forms[i].name) == 0) {
      if (!tok_json_only(b, o, where, only_type))
        return FALSE;
      TokNorm *n = g_new0(TokNorm, 1);
      n->kind = forms[i].kind;
      g_ptr_array_add(t->normalizers, n);
      return TRUE;
    }
  }
  if (strcmp(type, "Sequence") == 0) {
    static const char *const keys[] = {"type", "normalizers", NULL};
    JsonNode *list = json_object_get_member(o, "normalizers");
    if (!tok_json_only(b, o, where, keys))
      return FALSE;
    if (!list || !JSON_NODE_HOLDS_ARRAY(list))
      return bpe_fail(b, "%s.normalizers is not an array", where);
    JsonArray *a = json_node_get_array(list);
    if (depth > 4 || json_array_get_length(a) > MAX_STEPS)
      return bpe_fail(b,
                      "%s: nested or long beyond what Cohort reads (at most %d steps, 4 "
                      "levels)",
                      where, MAX_STEPS);
    for (guint i = 0; i < json_array_get_length(a); i++) {
      g_autofree char *w = g_strdup_printf("%s.normalizers[%u]", where, i);
      if (!read_norm_one(b, t, json_array_get_element(a, i), w, depth + 1))
        return FALSE;
    }
    return TRUE;
  }
  TokNorm *n = g_new0(TokNorm, 1);
  g_ptr_array_add(t->normalizers, n);
  if (strcmp(type, "Prepend") == 0) {
    static const char *const keys[] = {"type", "prepend", NULL};
    const char *p = tok_json_string(o, "prepend");
    n->kind = TOK_NORM_PREPEND;
    if (!tok_json_only(b, o, where, keys))
      return FALSE;
    if (!p)
      return bpe_fail(b, "%s.prepend is not a string", where);
    n->text = g_strdup(p);
    return TRUE;
  }
  if (strcmp(type, "Replace") == 0) {
    static const char *const keys[] = {"type", "pattern", "content", NULL};
    const char *c = tok_json_string(o, "content");
    n->kind = TOK_NORM_REPLACE;
    if (!tok_json_only(b, o, where, keys))
      return FALSE;
    if (!c)
      return bpe_fail(b, "%s.content is not a string", where);
    n->content = g_strdup(c);
    return read_pattern(b, o, where, &n->text, &n->regex, TRUE);
  }
  if (strcmp(type, "Strip") == 0) {
    static const char *const keys[] = {"type", "strip_left", "strip_right", NULL};
    n->kind = TOK_NORM_STRIP;
    if (!tok_json_only(b, o, where, keys))
      return FALSE;
    int l = option(b, o, where, "strip_left", FALSE), r = option(b, o, where, "strip_right", FALSE);
    n->left = l > 0, n->right = r > 0;
    return l >= 0 && r >= 0;
  }
  g_autofree char *ty = bpe_shown(type);
  return bpe_fail(b,
                  "%s.type \"%s\" is not a normalizer Cohort implements; allowed: NFC, NFKC, NFD, "
                  "NFKD, Lowercase, Prepend, Replace, Strip, Sequence",
                  where, ty);
}

gboolean tok_read_normalizer(Build *b, CohortTokenizer *t, JsonNode *node)
{
  if (!node || JSON_NODE_HOLDS_NULL(node))
    return TRUE;
  return read_norm_one(b, t, node, "normalizer", 0);
}

static gboolean read_behavior(Build *b, JsonObject *o, const char *where, TokPre *p)
{
  static const struct {
    const char *name;
    TokSplitBehavior value;
  } names[] = {{"Removed", TOK_SPLIT_REMOVED},
               {"Isolated", TOK_SPLIT_ISOLATED},
               {"MergedWithPrevious", TOK_SPLIT_MERGED_WITH_PREVIOUS},
               {"MergedWithNext", TOK_SPLIT_MERGED_WITH_NEXT},
               {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
  const char *s = tok_json_string(o, "behavior");
  for (guint i = 0; s && i < G_N_ELEMENTS(names); i++) {
    if (g_ascii_strcasecmp(s, names[i].name) == 0) {
      p->behavior = names[i].value;
      return TRUE;
    }
  }
  return bpe_fail(b,
                  "%s.behavior is not one of Removed, Isolated, MergedWithPrevious, "
                  "MergedWithNext, Contiguous",
                  where);
}

static gboolean read_prepend_scheme(Build *b, JsonObject *o, const char *where,
                                    TokPrependScheme *scheme)
{
  const char *s = tok_json_string(o, "prepend_scheme");
  int add = tok_json_bool(o, "add_prefix_space");
  *scheme = TOK_PREPEND_ALWAYS;
  if (s && strcmp(s, "first") == 0)
    *scheme = TOK_PREPEND_FIRST;
  else if (s && strcmp(s, "never") == 0)
    *scheme = TOK_PREPEND_NEVER;
  else if (s && strcmp(s, "always") != 0)
    return bpe_fail(b, "%s.prepend_scheme is not \"always\", \"first\" or \"never\"", where);
  else if (!s && !tok_json_is_null(o, "prepend_scheme"))
    return bpe_fail(b, "%s.prepend_scheme is not a string", where);
  if (add == 0) {
    /* An older file's add_prefix_space false: the library reads it as "never" (and refuses
     * it beside another scheme). */
    if (s && *scheme != TOK_PREPEND_NEVER)
      return bpe_fail(b, "%s.add_prefix_space false contradicts prepend_scheme \"%s\"", where, s);
    *scheme = TOK_PREPEND_NEVER;
  }
  return add != -2;
}

static gboolean read_pre_one(Build *b, CohortTokenizer *t, JsonNode *node, const char *where,
                             guint depth);

static gboolean read_pre_sequence(Build *b, CohortTokenizer *t, JsonObject *o, const char *where,
                                  guint depth)
{
  static const char *const keys[] = {"type", "pretokenizers", NULL};
  JsonNode *list = json_object_get_member(o, "pretokenizers");
  if (!tok_json_only(b, o, where, keys))
    return FALSE;
  if (!list || !JSON_NODE_HOLDS_ARRAY(list))
    return bpe_fail(b, "%s.pretokenizers is not an array", where);
  JsonArray *a = json_node_get_array(list);
  if (depth > 4 || json_array_get_length(a) > MAX_STEPS)
    return bpe_fail(b, "%s: nested or long beyond what Cohort reads (at most %d steps, 4 levels)",
                    where, MAX_STEPS);
  for (guint i = 0; i < json_array_get_length(a); i++) {
    g_autofree char *w = g_strdup_printf("%s.pretokenizers[%u]", where, i);
    if (!read_pre_one(b, t, json_array_get_element(a, i), w, depth + 1))
      return FALSE;
  }
  return TRUE;
}

static gboolean read_pre_one(Build *b, CohortTokenizer *t, JsonNode *node, const char *where,
                             guint depth)
{
  JsonObject *o;
  const char *type = type_of(b, node, where, &o);
  if (!type)
    return FALSE;
  if (strcmp(type, "Sequence") == 0)
    return read_pre_sequence(b, t, o, where, depth);
  TokPre *p = g_new0(TokPre, 1);
  g_ptr_array_add(t->pretoks, p);
  if (strcmp(type, "Split") == 0) {
    static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
    p->kind = TOK_PRE_SPLIT;
    int inv = option(b, o, where, "invert", FALSE);
    p->invert = inv > 0;
    return tok_json_only(b, o, where, keys) && inv >= 0 && read_behavior(b, o, where, p) &&
           read_pattern(b, o, where, &p->literal, &p->regex, TRUE);
  }
  if (strcmp(type, "ByteLevel") == 0) {
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex",
                                       NULL};
    p->kind = TOK_PRE_BYTELEVEL;
    int add = option(b, o, where, "add_prefix_space", TRUE);
    int re = option(b, o, where, "use_regex", TRUE);
    p->add_prefix_space = add > 0, p->use_regex = re > 0;
    return tok_json_only(b, o, where, keys) && add >= 0 && re >= 0 &&
           option(b, o, where, "trim_offsets", TRUE) >= 0;
  }
  if (strcmp(type, "Metaspace") == 0) {
    static const char *const keys[] = {
        "type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep", NULL};
    p->kind = TOK_PRE_METASPACE;
    int split = option(b, o, where, "split", TRUE);
    p->split = split > 0;
    return tok_json_only(b, o, where, keys) && split >= 0 &&
           one_char(b, o, where, "replacement", p->replacement) &&
           read_prepend_scheme(b, o, where, &p->prepend_scheme);
  }
  if (strcmp(type, "Digits") == 0) {
    static const char *const keys[] = {"type", "individual_digits", NULL};
    p->kind = TOK_PRE_DIGITS;
    int ind = option(b, o, where, "individual_digits", FALSE);
    p->individual_digits = ind > 0;
    return tok_json_only(b, o, where, keys) && ind >= 0;
  }
  g_autofree char *ty = bpe_shown(type);
  return bpe_fail(b,
                  "%s.type \"%s\" is not a pre-tokenizer Cohort implements; allowed: Split, "
                  "ByteLevel, Metaspace, Digits, Sequence",
                  where, ty);
}

gboolean tok_read_pre_tokenizer(Build *b, CohortTokenizer *t, JsonNode *node)
{
  if (!node || JSON_NODE_HOLDS_NULL(node))
    return TRUE;
  if (!read_pre_one(b, t, node, "pre_tokenizer", 0))
    return FALSE;
  /* ByteLevel turns text into its byte characters: only the model may come after it. */
  for (guint i = 0; i < t->pretoks->len; i++) {
    const TokPre *p = t->pretoks->pdata[i];
    if (p->kind == TOK_PRE_BYTELEVEL && i + 1 < t->pretoks->len)
      return bpe_fail(b,
                      "pre_tokenizer: ByteLevel is step %u of %u; allowed: ByteLevel as the "
                      "last pre-tokenizer (what comes after it would see byte characters)",
                      i + 1, t->pretoks->len);
    if (p->kind == TOK_PRE_BYTELEVEL)
      t->byte_level = TRUE;
  }
  return TRUE;
}

static gboolean read_dec_one(Build *b, CohortTokenizer *t, JsonNode *node, const char *where,
                             guint depth)
{
  JsonObject *o;
  const char *type = type_of(b, node, where, &o);
  if (!type)
    return FALSE;
  if (strcmp(type, "Sequence") == 0) {
    static const char *const keys[] = {"type", "decoders", NULL};
    JsonNode *list = json_object_get_member(o, "decoders");
    if (!tok_json_only(b, o, where, keys))
      return FALSE;
    if (!list || !JSON_NODE_HOLDS_ARRAY(list))
      return bpe_fail(b, "%s.decoders is not an array", where);
    JsonArray *a = json_node_get_array(list);
    if (depth > 4 || json_array_get_length(a) > MAX_STEPS)
      return bpe_fail(b, "%s: nested or long beyond what Cohort reads", where);
    for (guint i = 0; i < json_array_get_length(a); i++) {
      g_autofree char *w = g_strdup_printf("%s.decoders[%u]", where, i);
      if (!read_dec_one(b, t, json_array_get_element(a, i), w, depth + 1))
        return FALSE;
    }
    return TRUE;
  }
  TokDec *d = g_new0(TokDec, 1);
  g_ptr_array_add(t->decoders, d);
  static const char *const only_type[] = {"type", NULL};
  if (strcmp(type, "ByteLevel") == 0) {
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex",
                                       NULL};
    d->kind = TOK_DEC_BYTELEVEL;
    return tok_json_only(b, o, where, keys);
  }
  if (strcmp(type, "ByteFallback") == 0 || strcmp(type, "Fuse") == 0) {
    d->kind = type[0] == 'B' ? TOK_DEC_BYTEFALLBACK : TOK_DEC_FUSE;
    return tok_json_only(b, o, where, only_type);
  }
  if (strcmp(type, "Replace") == 0) {
    static const char *const keys[] = {"type", "pattern", "content", NULL};
    const char *c = tok_json_string(o, "content");
    d->kind = TOK_DEC_REPLACE;
    if (!tok_json_only(b, o, where, keys))
      return FALSE;
    if (!c)
      return bpe_fail(b, "%s.content is not a string", where);
    d->content = g_strdup(c);
    return read_pattern(b, o, where, &d->pattern, NULL, FALSE);
  }
  if (strcmp(type, "Strip") == 0) {
    static const char *const keys[] = {"type", "content", "start", "stop", NULL};
    d->kind = TOK_DEC_STRIP;
    d->content = g_malloc0(8);
    JsonNode *s = json_object_get_member(o, "start"), *e = json_object_get_member(o, "stop");
    if (!tok_json_only(b, o, where, keys) || !one_char(b, o, where, "content", d->content))
      return FALSE;
    if (!s || !e || json_node_get_value_type(s) != G_TYPE_INT64 ||
        json_node_get_value_type(e) != G_TYPE_INT64 || json_node_get_int(s) < 0 ||
        json_node_get_int(e) < 0 || json_node_get_int(s) > 1024 || json_node_get_int(e) > 1024)
      return bpe_fail(b, "%s.start and .stop are not whole numbers from 0 to 1024", where);
    d->start = (guint)json_node_get_int(s), d->stop = (guint)json_node_get_int(e);
    return TRUE;
  }
  if (strcmp(type, "Metaspace") == 0) {
    static const char *const keys[] = {
        "type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep", NULL};
    d->kind = TOK_DEC_METASPACE;
    return tok_json_only(b, o, where, keys) &&
           one_char(b, o, where, "replacement", d->replacement) &&
           read_prepend_scheme(b, o, where, &d->prepend_scheme) &&
           option(b, o, where, "split", TRUE) >= 0;
  }
  g_autofree char *ty = bpe_shown(type);
  return bpe_fail(b,
                  "%s.type \"%s\" is not a decoder Cohort implements; allowed: ByteLevel, "
                  "Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence",
                  where, ty);
}

gboolean tok_read_decoder(Build *b, CohortTokenizer *t, JsonNode *node)
{
  if (!node || JSON_NODE_HOLDS_NULL(node)) {
    /* GPT-2's files and a byte-level tokenizer.json without a decoder decode to their bytes
     * (the library would join the byte characters with spaces). */
    t->bytes_decode = t->byte_level;
    return TRUE;
  }
  if (!read_dec_one(b, t, node, "decoder", 0))
    return FALSE;
  gboolean has_byte_level = FALSE;
  for (guint i = 0; i < t->decoders->len; i++)
    has_byte_level |= ((TokDec *)t->decoders->pdata[i])->kind == TOK_DEC_BYTELEVEL;
  if (has_byte_level && (t->decoders->len != 1 || !t->byte_level))
    return bpe_fail(b,
                    "decoder: ByteLevel %s; allowed: ByteLevel alone, with a ByteLevel "
                    "pre-tokenizer",
                    t->byte_level ? "with other decoders" : "without a ByteLevel pre-tokenizer");
  if (t->byte_level && !has_byte_level)
    return bpe_fail(b, "decoder: a byte-level tokenizer (ByteLevel pre-tokenizer) needs the "
                       "ByteLevel decoder; allowed: {\"type\": \"ByteLevel\"} or null");
  t->bytes_decode = has_byte_level;
  return TRUE;
}
