/* Normalizers of tokenizer.json, each applied in turn to the whole text of a section (the text
 * between two added tokens), as the tokenizers library applies a Sequence: Unicode forms
 * through GLib (g_utf8_normalize: NFC, NFKC, NFD, NFKD), Lowercase as Rust's to_lowercase (one
 * character at a time from GLib's tables, with U+0130 and the final sigma as Unicode's special
 * casing has them, whatever the locale), Prepend (to a non-empty text), Replace (a string or a
 * PCRE2 pattern, every match left to right), Strip (Unicode white space). Bytes that are not
 * UTF-8 (which Rust's strings cannot hold) pass through unchanged, each splitting the text
 * around it, so any bytes still encode and decode back. */
#include "data/tok-pipeline.h"

#include <string.h>

#include "data/tokenizer.h"

void tok_norm_free(gpointer p)
{
  TokNorm *n = p;
  if (!n)
    return;
  g_free(n->text);
  g_free(n->content);
  tok_regex_free(n->regex);
  g_free(n);
}

/* The length of the valid UTF-8 run at s[0..len) (stops before the first invalid byte). */
static gsize valid_run(const guint8 *s, gsize len)
{
  const gchar *end = NULL;
  g_utf8_validate_len((const gchar *)s, len, &end);
  return (gsize)((const guint8 *)end - s);
}

static void append_unichar(GByteArray *out, gunichar c)
{
  char buf[6];
  int n = g_unichar_to_utf8(c, buf);
  g_byte_array_append(out, (const guint8 *)buf, (guint)n);
}

/* Cased and case-ignorable, as Unicode's Final_Sigma condition uses them (from GLib's
 * general categories). */
static gboolean is_cased(gunichar c)
{
  return g_unichar_isupper(c) || g_unichar_islower(c) || g_unichar_istitle(c);
}

static gboolean is_case_ignorable(gunichar c)
{
  switch (g_unichar_type(c)) {
  case G_UNICODE_NON_SPACING_MARK:
  case G_UNICODE_ENCLOSING_MARK:
  case G_UNICODE_FORMAT:
  case G_UNICODE_MODIFIER_LETTER:
  case G_UNICODE_MODIFIER_SYMBOL:
    return TRUE;
  default:
    return c == '\'' || c == '.' || c == ':' || c == 0x00B7 || c == 0x2019;
  }
}

/* Whether the capital sigma at s[at] ends a word: a cased letter before it and none after
 * (skipping case-ignorable characters), as Rust's to_lowercase decides. */
static gboolean final_sigma(const char *s, gsize len, gsize at, gsize next)
{
  gboolean before = FALSE;
  for (const char *p = s + at; p > s;) {
    p = g_utf8_prev_char(p);
    gunichar c = g_utf8_get_char(p);
    if (is_case_ignorable(c))
      continue;
    before = is_cased(c);
    break;
  }
  if (!before)
    return FALSE;
  for (const char *p = s + next; p < s + len; p = g_utf8_next_char(p)) {
    gunichar c = g_utf8_get_char(p);
    if (is_case_ignorable(c))
      continue;
    return !is_cased(c);
  }
  return TRUE;
}

static void lowercase_run(const char *s, gsize len, GByteArray *out)
{
  for (gsize i = 0; i < len;) {
    gunichar c = g_utf8_get_char(s + i);
    gsize next = (gsize)(g_utf8_next_char(s + i) - s);
    if (c == 0x0130) {
      append_unichar(out, 'i');
      append_unichar(out, 0x0307);
    } else if (c == 0x03A3) {
      append_unichar(out, final_sigma(s, len, i, next) ? 0x03C2 : 0x03C3);
    } else {
      append_unichar(out, g_unichar_tolower(c));
    }
    i = next;
  }
}

static gboolean replace_run(const TokNorm *n, TokMatcher *m, const guint8 *s, gsize len,
                            GByteArray *out, GError **error)
{
  gsize clen = strlen(n->content);
  if (!n->regex) {
    gsize plen = strlen(n->text), at = 0;
    for (const guint8 *hit; at < len && (hit = memmem(s + at, len - at, n->text, plen));) {
      g_byte_array_append(out, s + at, (guint)(hit - (s + at)));
      g_byte_array_append(out, (const guint8 *)n->content, (guint)clen);
      at = (gsize)(hit - s) + plen;
    }
    g_byte_array_append(out, s + at, (guint)(len - at));
    return TRUE;
  }
  gsize at = 0, from = 0, a, b;
  for (int rc; from <= len && (rc = tok_regex_next(n->regex, m, s, len, from, &a, &b, error));) {
    if (rc < 0)
      return FALSE;
    if (b == a) { /* an empty match replaces nothing; go on after the next character */
      from = a < len ? (gsize)(g_utf8_next_char((const char *)s + a) - (const char *)s) : len + 1;
      continue;
    }
    g_byte_array_append(out, s + at, (guint)(a - at));
    g_byte_array_append(out, (const guint8 *)n->content, (guint)clen);
    at = from = b;
  }
  g_byte_array_append(out, s + at, (guint)(len - at));
  return TRUE;
}

/* A Unicode form of a valid UTF-8 run, where ASCII passes unchanged (it is in every form):
 * only the stretches around other characters go through GLib. A stretch starts one character
 * before the first non-ASCII byte (that character may compose with what follows) and ends
 * before an ASCII character followed by another (no composition or reordering crosses two
 * ASCII characters). */
static void unicode_form(const guint8 *s, gsize len, GNormalizeMode mode, GByteArray *out)
{
  gsize i = 0;
  while (i < len) {
    gsize j = i;
    while (j < len && s[j] < 0x80)
      j++;
    if (j == len) {
      g_byte_array_append(out, s + i, (guint)(len - i));
      return;
    }
    gsize a = j > i ? j - 1 : j; /* the ASCII character before may be a base */
    g_byte_array_append(out, s + i, (guint)(a - i));
    gsize b = j;
    while (b < len && !(s[b] < 0x80 && (b + 1 == len || s[b + 1] < 0x80)))
      b++;
    g_autofree char *norm = g_utf8_normalize((const char *)s + a, (gssize)(b - a), mode);
    g_byte_array_append(out, (const guint8 *)norm, (guint)strlen(norm));
    i = b;
  }
}

/* One normalizer over a valid UTF-8 run. */
static gboolean norm_run(const TokNorm *n, TokMatcher *m, const guint8 *s, gsize len,
                         GByteArray *out, GError **error)
{
  static const GNormalizeMode modes[] = {
      [TOK_NORM_NFC] = G_NORMALIZE_NFC,
      [TOK_NORM_NFKC] = G_NORMALIZE_NFKC,
      [TOK_NORM_NFD] = G_NORMALIZE_NFD,
      [TOK_NORM_NFKD] = G_NORMALIZE_NFKD,
  };
  switch (n->kind) {
  case TOK_NORM_NFC:
  case TOK_NORM_NFKC:
  case TOK_NORM_NFD:
  case TOK_NORM_NFKD:
    unicode_form(s, len, modes[n->kind], out);
    return TRUE;
  case TOK_NORM_LOWERCASE:
    lowercase_run((const char *)s, len, out);
    return TRUE;
  case TOK_NORM_REPLACE:
    return replace_run(n, m, s, len, out, error);
  default:
    g_byte_array_append(out, s, (guint)len);
    return TRUE;
  }
}

/* Strip: white space off the start and/or the end (invalid bytes are not white space). */
static void strip(const TokNorm *n, const guint8 *s, gsize len, GByteArray *out)
{
  gsize a = 0, b = len;
  while (n->left && a < len) {
    gsize v = valid_run(s + a, len - a);
    if (v == 0 || !tok_is_white_space(g_utf8_get_char((const char *)s + a)))
      break;
    a = (gsize)(g_utf8_next_char((const char *)s + a) - (const char *)s);
  }
  while (n->right && b > a) {
    gsize p = b - 1;
    while (p > a && (s[p] & 0xC0) == 0x80)
      p--;
    if (valid_run(s + p, b - p) != b - p ||
        !tok_is_white_space(g_utf8_get_char((const char *)s + p)))
      break;
    b = p;
  }
  g_byte_array_append(out, s + a, (guint)(b - a));
}

static gboolean apply_one(const TokNorm *n, TokMatcher *m, const guint8 *s, gsize len,
                          GByteArray *out, GError **error)
{
  if (n->kind == TOK_NORM_PREPEND) {
    if (len > 0)
      g_byte_array_append(out, (const guint8 *)n->text, (guint)strlen(n->text));
    g_byte_array_append(out, s, (guint)len);
    return TRUE;
  }
  if (n->kind == TOK_NORM_STRIP) {
    strip(n, s, len, out);
    return TRUE;
  }
  for (gsize i = 0; i < len;) {
    gsize v = valid_run(s + i, len - i);
    if (v == 0) {
      g_byte_array_append(out, s + i, 1);
      i++;
      continue;
    }
    if (!norm_run(n, m, s + i, v, out, error))
      return FALSE;
    i += v;
  }
  return TRUE;
}

gboolean tok_normalize(GPtrArray *norms, TokMatcher *m, const guint8 *s, gsize len,
                       gboolean skip_prepend, GByteArray *out, GError **error)
{
  g_byte_array_set_size(out, 0);
  g_byte_array_append(out, s, (guint)len);
  if (!norms || norms->len == 0)
    return TRUE;
  g_autoptr(GByteArray) tmp = g_byte_array_sized_new((guint)len + 16);
  for (guint k = 0; k < norms->len; k++) {
    const TokNorm *n = norms->pdata[k];
    if (n->kind == TOK_NORM_PREPEND && skip_prepend)
      continue;
    g_byte_array_set_size(tmp, 0);
    if (!apply_one(n, m, out->data, out->len, tmp, error))
      return FALSE;
    g_byte_array_set_size(out, 0);
    g_byte_array_append(out, tmp->data, tmp->len);
  }
  return TRUE;
}
