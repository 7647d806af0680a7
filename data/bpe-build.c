/* Building a tokenizer from what its files say: tokens by id, merges by rank, special tokens;
 * every refusal names the file and the field. */
#include "data/bpe-private.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SPECIAL_EOT "<|endoftext|>"

gboolean bpe_fail(Build *b, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(b->error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT, "%s: %s", b->source,
              msg);
  return FALSE;
}

/* A vocab.json key (GPT-2's byte characters) as bytes; NULL when a character is not one. */
static GBytes *key_bytes_gpt2(const char *key)
{
  gsize n = strlen(key);
  g_autofree guint8 *out = g_new(guint8, n + 1);
  gsize k = 0;
  for (const char *p = key; *p; p = g_utf8_next_char(p)) {
    int b = bpe_char_byte(g_utf8_get_char(p));
    if (b < 0)
      return NULL;
    out[k++] = (guint8)b;
  }
  return g_bytes_new(out, k);
}

GBytes *bpe_key_bytes(Build *b, const char *key)
{
  return b->raw ? g_bytes_new(key, strlen(key)) : key_bytes_gpt2(key);
}

/* A key for messages: at most 40 characters, escaped as JSON would. */
char *bpe_shown(const char *s)
{
  g_autofree char *cut = g_utf8_substring(s, 0, MIN(g_utf8_strlen(s, -1), 40));
  return g_strescape(cut, NULL);
}

gboolean bpe_add_token(Build *b, const char *where, gint64 id, GBytes *bytes)
{
  if (id < 0 || id >= COHORT_TOKENIZER_MAX_TOKENS)
    return bpe_fail(b, "%s: id %" G_GINT64_FORMAT " is not allowed; allowed: 0 to %d", where, id,
                    COHORT_TOKENIZER_MAX_TOKENS - 1);
  if ((guint)id >= b->tokens->len)
    g_ptr_array_set_size(b->tokens, (guint)id + 1);
  if (b->tokens->pdata[id])
    return bpe_fail(b, "%s: id %" G_GINT64_FORMAT " is given to two tokens; allowed: each id once",
                    where, id);
  b->tokens->pdata[id] = g_bytes_ref(bytes);
  if (!g_hash_table_contains(b->ids, bytes))
    g_hash_table_insert(b->ids, g_bytes_ref(bytes), GINT_TO_POINTER((int)id + 1));
  return TRUE;
}

/* The vocabulary object { "token": id, … } of vocab.json or tokenizer.json's model.vocab. */
gboolean bpe_read_vocab(Build *b, JsonNode *node, const char *field)
{
  if (!node || !JSON_NODE_HOLDS_OBJECT(node))
    return bpe_fail(b, "%s is not a JSON object of tokens and ids", field);
  JsonObject *o = json_node_get_object(node);
  if (json_object_get_size(o) > COHORT_TOKENIZER_MAX_TOKENS)
    return bpe_fail(b, "%s has %u tokens; allowed: at most %d", field, json_object_get_size(o),
                    COHORT_TOKENIZER_MAX_TOKENS);
  JsonObjectIter it;
  const char *key;
  JsonNode *value;
  json_object_iter_init(&it, o);
  while (json_object_iter_next(&it, &key, &value)) {
    g_autofree char *k = bpe_shown(key);
    if (!JSON_NODE_HOLDS_VALUE(value) || json_node_get_value_type(value) != G_TYPE_INT64)
      return bpe_fail(b, "%s: token \"%s\" has no integer id", field, k);
    g_autoptr(GBytes) bytes = bpe_key_bytes(b, key);
    if (!bytes || g_bytes_get_size(bytes) == 0)
      return bpe_fail(b,
                      b->raw ? "%s: token \"%s\" is empty; allowed: tokens of one character or "
                               "more"
                             : "%s: token \"%s\" is not made of GPT-2's byte characters; "
                               "allowed: a byte-level BPE vocabulary",
                      field, k);
    g_autofree char *where = g_strdup_printf("%s: token \"%s\"", field, k);
    gint64 id = json_node_get_int(value);
    if (!bpe_add_token(b, where, id, bytes))
      return FALSE;
    if ((guint64)id >= b->in_model->len)
      g_byte_array_set_size(b->in_model, (guint)id + 1);
    b->in_model->data[id] = 1;
  }
  return TRUE;
}

/* The id of a merge part given in byte characters, or -1 (with an error). */
static gint64 part_id(Build *b, const char *part, const char *where)
{
  g_autoptr(GBytes) bytes = bpe_key_bytes(b, part);
  gpointer v = bytes ? g_hash_table_lookup(b->ids, bytes) : NULL;
  if (!v) {
    g_autofree char *k = bpe_shown(part);
    bpe_fail(b, "%s: \"%s\" is not a token of the vocabulary", where, k);
    return -1;
  }
  return GPOINTER_TO_INT(v) - 1;
}

/* One merge (left and right in byte characters) of rank `rank`. */
gboolean bpe_add_merge(Build *b, CohortTokenizer *t, const char *left, const char *right,
                       guint32 rank, const char *where)
{
  gint64 a = part_id(b, left, where), c = a < 0 ? -1 : part_id(b, right, where);
  if (a < 0 || c < 0)
    return FALSE;
  g_autofree char *joined = g_strconcat(left, right, NULL);
  g_autoptr(GBytes) bytes = bpe_key_bytes(b, joined);
  gpointer v = g_hash_table_lookup(b->ids, bytes);
  if (!v) {
    g_autofree char *k = bpe_shown(joined);
    return bpe_fail(b, "%s: the merge makes \"%s\", which is not a token of the vocabulary", where,
                    k);
  }
  bpe_merges_insert(t, (guint32)a, (guint32)c, rank, (guint32)(GPOINTER_TO_INT(v) - 1));
  return TRUE;
}

/* "left right": exactly two non-empty parts around one space. */
gboolean bpe_split_merge(char *line, char **left, char **right)
{
  char *sp = strchr(line, ' ');
  if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
    return FALSE;
  *sp = 0;
  *left = line;
  *right = sp + 1;
  return TRUE;
}

typedef struct {
  gsize len;
  guint index;
} SpecialOrder;

static int longer_first(const void *pa, const void *pb)
{
  const SpecialOrder *a = pa, *b = pb;
  if (a->len != b->len)
    return a->len > b->len ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

/* The special tokens, longest first, so that where two start at the same place the longer
 * one is taken. */
static void keep_specials(Build *b, CohortTokenizer *t)
{
  guint n = b->special_text->len;
  g_autofree SpecialOrder *order = g_new(SpecialOrder, MAX(n, 1));
  for (guint i = 0; i < n; i++)
    order[i] = (SpecialOrder){g_bytes_get_size(b->special_text->pdata[i]), i};
  qsort(order, n, sizeof *order, longer_first);
  t->special_text = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
  t->special_id = g_array_new(FALSE, FALSE, sizeof(gint32));
  for (guint i = 0; i < n; i++) {
    g_ptr_array_add(t->special_text, g_bytes_ref(b->special_text->pdata[order[i].index]));
    g_array_append_val(t->special_id, g_array_index(b->special_id, gint32, order[i].index));
  }
}

/* Ids 0..n-1 each given, into the tokenizer's blob and spans; specials longest first. */
gboolean bpe_finish_tokens(Build *b, CohortTokenizer *t)
{
  t->n_ids = (int)b->tokens->len;
  gsize total = 0;
  for (int id = 0; id < t->n_ids; id++) {
    GBytes *bytes = b->tokens->pdata[id];
    if (!bytes)
      return bpe_fail(b, "no token has id %d; allowed: ids 0 to %d each given once", id,
                      t->n_ids - 1);
    total += g_bytes_get_size(bytes);
  }
  if (t->n_ids == 0)
    return bpe_fail(b, "the vocabulary is empty");
  t->blob = g_malloc(MAX(total, 1));
  t->spans = g_new(BpeSpan, t->n_ids);
  gsize at = 0;
  for (int id = 0; id < t->n_ids; id++) {
    gsize n;
    const guint8 *p = g_bytes_get_data(b->tokens->pdata[id], &n);
    memcpy(t->blob + at, p, n);
    t->spans[id] = (BpeSpan){.offset = (guint32)at, .len = (guint32)n};
    at += n;
  }
  t->eot = -1;
  g_autoptr(GBytes) eot = g_bytes_new_static(SPECIAL_EOT, strlen(SPECIAL_EOT));
  gpointer v = g_hash_table_lookup(b->ids, eot);
  if (v)
    t->eot = GPOINTER_TO_INT(v) - 1;
  for (guint i = 0; i < b->special_text->len; i++)
    if (g_bytes_equal(b->special_text->pdata[i], eot))
      t->eot = g_array_index(b->special_id, gint32, i);
  /* GPT-2's vocab.json names no special tokens; Hugging Face's GPT2Tokenizer makes
   * <|endoftext|> one. */
  if (b->special_text->len == 0 && t->eot >= 0) {
    g_ptr_array_add(b->special_text, g_bytes_ref(eot));
    g_array_append_val(b->special_id, t->eot);
  }
  keep_specials(b, t);
  return TRUE;
}

gboolean bpe_finish(Build *b, CohortTokenizer *t)
{
  t->byte_level = TRUE;
  t->bytes_decode = TRUE;
  /* GPT-2's split: a document may be cut before a space between printable ASCII characters
   * and after a newline between two non-spaces. */
  t->cut_rule = TOK_CUT_SPACE_NEWLINE;
  return bpe_finish_tokens(b, t) && bpe_tables_build(t, b->source, b->error);
}

void bpe_build_clear(Build *b)
{
  g_clear_pointer(&b->tokens, g_ptr_array_unref);
  g_clear_pointer(&b->ids, g_hash_table_unref);
  g_clear_pointer(&b->special_text, g_ptr_array_unref);
  g_clear_pointer(&b->special_id, g_array_unref);
  g_clear_pointer(&b->in_model, g_byte_array_unref);
  if (b->added) {
    for (guint i = 0; i < b->added->len; i++)
      g_bytes_unref(g_array_index(b->added, TokAdded, i).content);
    g_clear_pointer(&b->added, g_array_unref);
  }
}

void bpe_build_init(Build *b, const char *source, GError **error)
{
  b->source = source;
  b->tokens = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
  b->ids = g_hash_table_new_full(g_bytes_hash, g_bytes_equal, (GDestroyNotify)g_bytes_unref, NULL);
  b->special_text = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref);
  b->special_id = g_array_new(FALSE, FALSE, sizeof(gint32));
  b->error = error;
  b->in_model = g_byte_array_new();
  b->added = g_array_new(FALSE, FALSE, sizeof(TokAdded));
}
