/* Finishing a tokenizer.json once its parts are read: the tokens' text (a byte-level
 * tokenizer's ids decode to bytes), the tables the model looks characters and bytes up in,
 * the added tokens' matchers (a normalized added token is matched by its normalized text, as
 * the library does), the unknown token, and where text may be cut (data/tok-cut.c). */
#include "data/tok-encoder.h"

#include <string.h>

/* What the library's ByteLevel decoder makes of an added token's text: its byte characters
 * decoded when every character is one, else the text as it is. */
static GBytes *byte_level_text(GBytes *content)
{
  gsize n;
  const char *s = g_bytes_get_data(content, &n);
  g_autoptr(GByteArray) out = g_byte_array_new();
  for (const char *p = s; p < s + n; p = g_utf8_next_char(p)) {
    int b = bpe_char_byte(g_utf8_get_char(p));
    if (b < 0)
      return g_bytes_ref(content);
    guint8 c = (guint8)b;
    g_byte_array_append(out, &c, 1);
  }
  return g_byte_array_free_to_bytes(g_steal_pointer(&out));
}

/* Characters and <0xXX> tokens of a model that sees characters. */
static void char_tables(CohortTokenizer *t, const gboolean *in_model)
{
  t->char_ids = g_hash_table_new(NULL, NULL);
  for (int b = 0; b < 256; b++)
    t->byte_token[b] = -1;
  for (int id = 0; id < t->n_ids; id++) {
    if (!in_model[id])
      continue;
    const char *p = (const char *)t->blob + t->spans[id].offset;
    gsize n = t->spans[id].len;
    if (n > 0 && g_utf8_validate_len(p, n, NULL) && g_utf8_next_char(p) == p + n) {
      gunichar c = g_utf8_get_char(p);
      if (!g_hash_table_contains(t->char_ids, GUINT_TO_POINTER(c)))
        g_hash_table_insert(t->char_ids, GUINT_TO_POINTER(c), GINT_TO_POINTER(id + 1));
    }
    if (n == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' && g_ascii_isxdigit(p[3]) &&
        g_ascii_isxdigit(p[4]) && !g_ascii_islower(p[3]) && !g_ascii_islower(p[4]))
      t->byte_token[g_ascii_xdigit_value(p[3]) * 16 + g_ascii_xdigit_value(p[4])] = id;
  }
}

static gboolean build_added(Build *b, CohortTokenizer *t)
{
  t->added_raw = tok_added_set_new();
  t->added_norm = tok_added_set_new();
  g_autoptr(GByteArray) norm = g_byte_array_new();
  TokMatcher *m = tok_matcher_new();
  gboolean ok = TRUE;
  for (guint i = 0; ok && i < b->added->len; i++) {
    TokAdded a = g_array_index(b->added, TokAdded, i);
    if (!a.normalized) {
      tok_added_set_add(t->added_raw, &a);
      continue;
    }
    gsize n;
    const guint8 *p = g_bytes_get_data(a.content, &n);
    ok = tok_normalize(t->normalizers, m, p, n, FALSE, norm, b->error);
    if (ok && norm->len == 0)
      ok = bpe_fail(b, "added_tokens[%u] normalizes to nothing; allowed: a token with text", i);
    if (!ok)
      break;
    g_autoptr(GBytes) text = g_bytes_new(norm->data, norm->len);
    a.content = text;
    tok_added_set_add(t->added_norm, &a);
  }
  tok_matcher_free(m);
  return ok;
}

gboolean tok_finish(Build *b, CohortTokenizer *t)
{
  guint n_before = b->tokens->len;
  g_autofree gboolean *in_model = g_new0(gboolean, MAX(n_before, 1));
  for (guint i = 0; i < n_before && i < b->in_model->len; i++)
    in_model[i] = b->in_model->data[i] != 0;
  /* A byte-level tokenizer's added tokens decode as the library's ByteLevel decoder has it. */
  for (guint i = 0; t->byte_level && i < b->added->len; i++) {
    gint32 id = g_array_index(b->added, TokAdded, i).id;
    if (in_model[id])
      continue;
    GBytes *text = byte_level_text(b->tokens->pdata[id]);
    g_bytes_unref(b->tokens->pdata[id]);
    b->tokens->pdata[id] = text;
  }
  if (!bpe_finish_tokens(b, t))
    return FALSE;
  if (t->byte_level) {
    if (!bpe_tables_build(t, b->source, b->error))
      return FALSE;
  } else {
    char_tables(t, in_model);
    for (int c = 0; c < 256; c++)
      t->byte_id[c] = -1;
  }
  if (t->ignore_merges)
    bpe_word_table_build(t, in_model);
  if (!build_added(b, t))
    return FALSE;
  t->gpt2_split = t->byte_level && t->pretoks->len > 0 &&
                  ((TokPre *)t->pretoks->pdata[t->pretoks->len - 1])->use_regex;
  tok_decide_cuts(t, in_model);
  return TRUE;
}
