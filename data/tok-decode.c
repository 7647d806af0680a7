/* Decoding: ids to the bytes of their text. Byte-level tokenizers (GPT-2's files, and a
 * tokenizer.json whose decoder is ByteLevel) concatenate each id's bytes. Other tokenizers run
 * their decoders as the tokenizers library does, over the list of token strings: Replace (a
 * string), ByteFallback (runs of <0xXX> tokens become their bytes), Fuse (everything into one
 * string), Strip (a character off each string's start and end), Metaspace (the replacement
 * character becomes a space, and in the first token disappears); no decoder joins the tokens
 * with spaces. Where the library would replace bytes that are not UTF-8 with U+FFFD, the bytes
 * are kept as they are, so decoding gives back the text's bytes. */
#include "data/bpe-private.h"

#include <string.h>

void tok_dec_free(gpointer p)
{
  TokDec *d = p;
  if (!d)
    return;
  g_free(d->pattern);
  g_free(d->content);
  g_free(d);
}

/* A list of strings in one buffer. */
typedef struct {
  GByteArray *bytes;
  GArray *spans; /* BpeSpan */
} Strings;

static void strings_add(Strings *l, const guint8 *p, gsize n)
{
  BpeSpan s = {.offset = l->bytes->len, .len = (guint32)n};
  g_byte_array_append(l->bytes, p, (guint)n);
  g_array_append_val(l->spans, s);
}

static void strings_clear(Strings *l)
{
  g_byte_array_set_size(l->bytes, 0);
  g_array_set_size(l->spans, 0);
}

static const guint8 *strings_get(const Strings *l, guint i, gsize *n)
{
  const BpeSpan *s = &g_array_index(l->spans, BpeSpan, i);
  *n = s->len;
  return l->bytes->data + s->offset;
}

/* "<0xXX>": its byte, or -1. */
static int fallback_byte(const guint8 *p, gsize n)
{
  if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>' || !g_ascii_isxdigit(p[3]) ||
      !g_ascii_isxdigit(p[4]))
    return -1;
  return g_ascii_xdigit_value(p[3]) * 16 + g_ascii_xdigit_value(p[4]);
}

static void replace_all(const guint8 *p, gsize n, const char *pat, const char *with, Strings *out)
{
  gsize k = strlen(pat), w = strlen(with), at = 0;
  GByteArray *b = out->bytes;
  guint start = b->len;
  for (const guint8 *hit; at < n && (hit = memmem(p + at, n - at, pat, k));) {
    g_byte_array_append(b, p + at, (guint)(hit - (p + at)));
    g_byte_array_append(b, (const guint8 *)with, (guint)w);
    at = (gsize)(hit - p) + k;
  }
  g_byte_array_append(b, p + at, (guint)(n - at));
  BpeSpan s = {.offset = start, .len = b->len - start};
  g_array_append_val(out->spans, s);
}

/* One decoder from `in` to `out`; `first`: in's first string is the first token decoded. */
static void decode_step(const TokDec *d, const Strings *in, gboolean first, Strings *out)
{
  guint n = in->spans->len;
  if (d->kind == TOK_DEC_FUSE) {
    strings_add(out, in->bytes->data, in->bytes->len);
    return;
  }
  if (d->kind == TOK_DEC_BYTEFALLBACK) {
    GByteArray *run = g_byte_array_new();
    for (guint i = 0; i < n; i++) {
      gsize len;
      const guint8 *p = strings_get(in, i, &len);
      int b = fallback_byte(p, len);
      if (b >= 0) {
        guint8 c = (guint8)b;
        g_byte_array_append(run, &c, 1);
        continue;
      }
      if (run->len) {
        strings_add(out, run->data, run->len);
        g_byte_array_set_size(run, 0);
      }
      strings_add(out, p, len);
    }
    if (run->len)
      strings_add(out, run->data, run->len);
    g_byte_array_unref(run);
    return;
  }
  for (guint i = 0; i < n; i++) {
    gsize len;
    const guint8 *p = strings_get(in, i, &len);
    if (d->kind == TOK_DEC_REPLACE) {
      replace_all(p, len, d->pattern, d->content, out);
    } else if (d->kind == TOK_DEC_METASPACE) {
      gboolean drop = first && i == 0 && d->prepend_scheme != TOK_PREPEND_NEVER;
      replace_all(p, len, d->replacement, drop ? "" : " ", out);
    } else if (d->kind == TOK_DEC_STRIP) {
      gsize k = strlen(d->content), a = 0, b = len;
      for (guint j = 0; j < d->start && a + k <= b && memcmp(p + a, d->content, k) == 0; j++)
        a += k;
      for (guint j = 0; j < d->stop && b >= a + k && memcmp(p + b - k, d->content, k) == 0; j++)
        b -= k;
      strings_add(out, p + a, b - a);
    }
  }
}

static gboolean check_ids(const CohortTokenizer *t, const int *ids, gsize n, GError **error)
{
  for (gsize i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->n_ids) {
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_ID,
                  "token %d at position %" G_GSIZE_FORMAT
                  " is not an id of this tokenizer (allowed: 0 to %d)",
                  ids[i], i, t->n_ids - 1);
      return FALSE;
    }
  }
  return TRUE;
}

gboolean cohort_tokenizer_decode_part(const CohortTokenizer *t, const int *ids, gsize n,
                                      gboolean first, GByteArray *out, GError **error)
{
  if (!check_ids(t, ids, n, error))
    return FALSE;
  if (t->bytes_decode) {
    for (gsize i = 0; i < n; i++) {
      const BpeSpan *s = &t->spans[ids[i]];
      g_byte_array_append(out, t->blob + s->offset, s->len);
    }
    return TRUE;
  }
  Strings a = {g_byte_array_new(), g_array_new(FALSE, FALSE, sizeof(BpeSpan))};
  Strings b = {g_byte_array_new(), g_array_new(FALSE, FALSE, sizeof(BpeSpan))};
  for (gsize i = 0; i < n; i++) {
    const BpeSpan *s = &t->spans[ids[i]];
    strings_add(&a, t->blob + s->offset, s->len);
  }
  for (guint k = 0; t->decoders && k < t->decoders->len; k++) {
    strings_clear(&b);
    decode_step(t->decoders->pdata[k], &a, first, &b);
    Strings x = a;
    a = b;
    b = x;
  }
  gboolean join = !t->decoders || t->decoders->len == 0;
  for (guint i = 0; i < a.spans->len; i++) {
    gsize len;
    const guint8 *p = strings_get(&a, i, &len);
    if (join && (i > 0 || !first) && out->len > 0)
      g_byte_array_append(out, (const guint8 *)" ", 1);
    g_byte_array_append(out, p, (guint)len);
  }
  g_byte_array_unref(a.bytes);
  g_array_unref(a.spans);
  g_byte_array_unref(b.bytes);
  g_array_unref(b.spans);
  return TRUE;
}

gboolean cohort_tokenizer_decode(const CohortTokenizer *t, const int *ids, gsize n, GByteArray *out,
                                 GError **error)
{
  return cohort_tokenizer_decode_part(t, ids, n, TRUE, out, error);
}
