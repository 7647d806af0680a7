/* Added tokens (tokenizer.json's added_tokens), found in text before anything else touches it,
 * leftmost first and longest at a place (the tokenizers library's Aho-Corasick tries match
 * the same way): lstrip and rstrip widen a match over the white space beside it. Tokens are
 * grouped by their first byte, longest first, so a text is scanned once. */
#include "data/tok-pipeline.h"

#include <string.h>

struct TokAddedSet {
  GArray *tokens;         /* TokAdded */
  GArray *by_byte[256];   /* indices into tokens, longest content first */
  guint64 first_bytes[4]; /* bitmap of the bytes a token starts with */
  gsize max_len;
  gboolean touches_space;
};

gboolean tok_is_white_space(gunichar c)
{
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680)
    return TRUE;
  if (c < 0x2000)
    return FALSE;
  return (c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

TokAddedSet *tok_added_set_new(void)
{
  TokAddedSet *s = g_new0(TokAddedSet, 1);
  s->tokens = g_array_new(FALSE, FALSE, sizeof(TokAdded));
  return s;
}

void tok_added_set_free(TokAddedSet *s)
{
  if (!s)
    return;
  for (guint i = 0; i < s->tokens->len; i++)
    g_bytes_unref(g_array_index(s->tokens, TokAdded, i).content);
  g_array_unref(s->tokens);
  for (int b = 0; b < 256; b++)
    if (s->by_byte[b])
      g_array_unref(s->by_byte[b]);
  g_free(s);
}

/* Whether s[0..n) holds a character that is white space. */
static gboolean has_space(const guint8 *p, gsize n)
{
  const char *s = (const char *)p;
  if (!g_utf8_validate_len(s, n, NULL))
    return TRUE; /* not UTF-8: say yes, the careful answer */
  for (const char *q = s; q < s + n; q = g_utf8_next_char(q))
    if (tok_is_white_space(g_utf8_get_char(q)))
      return TRUE;
  return FALSE;
}

void tok_added_set_add(TokAddedSet *s, const TokAdded *a)
{
  gsize n;
  const guint8 *p = g_bytes_get_data(a->content, &n);
  g_return_if_fail(n > 0);
  TokAdded copy = *a;
  copy.content = g_bytes_ref(a->content);
  g_array_append_val(s->tokens, copy);
  guint index = s->tokens->len - 1;
  GArray **list = &s->by_byte[p[0]];
  if (!*list)
    *list = g_array_new(FALSE, FALSE, sizeof(guint));
  /* Longest first; among equal lengths, the earlier token first. */
  guint at = 0;
  while (at < (*list)->len) {
    const TokAdded *o = &g_array_index(s->tokens, TokAdded, g_array_index(*list, guint, at));
    if (g_bytes_get_size(o->content) < n)
      break;
    at++;
  }
  g_array_insert_val(*list, at, index);
  s->first_bytes[p[0] >> 6] |= 1ull << (p[0] & 63);
  s->max_len = MAX(s->max_len, n);
  if (a->lstrip || a->rstrip || has_space(p, n))
    s->touches_space = TRUE;
}

guint tok_added_set_size(const TokAddedSet *s)
{
  return s ? s->tokens->len : 0;
}

gsize tok_added_set_max_len(const TokAddedSet *s)
{
  return s ? s->max_len : 0;
}

gboolean tok_added_set_touches_space(const TokAddedSet *s)
{
  return s && s->touches_space;
}

/* The character that ends at s[end] (end > 0) starts where? Returns its start, or end - 1 for
 * a byte that is not part of a valid character. */
static gsize char_before(const guint8 *s, gsize end, gunichar *c)
{
  gsize start = end - 1;
  while (start > 0 && end - start < 4 && (s[start] & 0xC0) == 0x80)
    start--;
  const char *p = (const char *)s + start;
  gunichar u = g_utf8_get_char_validated(p, (gssize)(end - start));
  if (u == (gunichar)-1 || u == (gunichar)-2 || g_utf8_next_char(p) != (const char *)s + end) {
    *c = 0xFFFFFFFF;
    return end - 1;
  }
  *c = u;
  return start;
}

/* The first added token at or after `from`: its index, start and length, or -1. */
static int find_at(const TokAddedSet *set, const guint8 *s, gsize len, gsize from, gsize *at)
{
  for (gsize i = from; i < len; i++) {
    guint8 b = s[i];
    if (!(set->first_bytes[b >> 6] & (1ull << (b & 63))))
      continue;
    const GArray *list = set->by_byte[b];
    for (guint k = 0; k < list->len; k++) {
      guint idx = g_array_index(list, guint, k);
      gsize n;
      const guint8 *p = g_bytes_get_data(g_array_index(set->tokens, TokAdded, idx).content, &n);
      if (n <= len - i && memcmp(s + i, p, n) == 0) {
        *at = i;
        return (int)idx;
      }
    }
  }
  return -1;
}

gboolean tok_added_next(const TokAddedSet *set, const guint8 *s, gsize len, gsize from, gsize floor,
                        gboolean special, gsize *start, gsize *end, const TokAdded **hit)
{
  if (!set || set->tokens->len == 0)
    return FALSE;
  for (gsize i = from; i < len;) {
    gsize at;
    int idx = find_at(set, s, len, i, &at);
    if (idx < 0)
      return FALSE;
    const TokAdded *a = &g_array_index(set->tokens, TokAdded, idx);
    gsize stop = at + g_bytes_get_size(a->content);
    if (a->special && !special) {
      /* Skipped as the tokenizers library skips it (encode_special_tokens): the search goes
       * on after it, so nothing inside it matches either. */
      i = stop;
      continue;
    }
    gsize a0 = at, b0 = stop;
    if (a->lstrip) {
      while (a0 > floor) {
        gunichar c;
        gsize p = char_before(s, a0, &c);
        if (c == 0xFFFFFFFF || !tok_is_white_space(c) || p < floor)
          break;
        a0 = p;
      }
    }
    if (a->rstrip) {
      while (b0 < len) {
        gunichar c = g_utf8_get_char_validated((const char *)s + b0, (gssize)(len - b0));
        if (c == (gunichar)-1 || c == (gunichar)-2 || !tok_is_white_space(c))
          break;
        b0 = (gsize)(g_utf8_next_char((const char *)s + b0) - (const char *)s);
      }
    }
    *start = a0;
    *end = b0;
    *hit = a;
    return TRUE;
  }
  return FALSE;
}
