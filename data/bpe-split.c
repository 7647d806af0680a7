/* The GPT-2 pre-tokenizer: the regular expression
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matched by hand, leftmost alternative first, as Python's `regex` (GPT-2's encoder.py) and
 * tiktoken match it. \p{L} and \p{N} are GLib's general categories (g_unichar_type); \s is
 * Unicode's White_Space property: U+0009..U+000D, U+0085 and the separators Zs, Zl, Zp.
 * (JavaScript's \s differs in two characters: it lacks U+0085 and adds U+FEFF; docs/data.md.)
 * A byte that does not begin a valid UTF-8 character is one character of its own, neither
 * letter, number nor space, so any byte string splits and every byte lands in one piece. */
#include "data/bpe-private.h"

#include <string.h>

typedef enum { CL_LETTER, CL_NUMBER, CL_SPACE, CL_OTHER } CharClass;

static CharClass class_of(gunichar c)
{
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85)
    return CL_SPACE;
  switch (g_unichar_type(c)) {
  case G_UNICODE_UPPERCASE_LETTER:
  case G_UNICODE_LOWERCASE_LETTER:
  case G_UNICODE_TITLECASE_LETTER:
  case G_UNICODE_MODIFIER_LETTER:
  case G_UNICODE_OTHER_LETTER:
    return CL_LETTER;
  case G_UNICODE_DECIMAL_NUMBER:
  case G_UNICODE_LETTER_NUMBER:
  case G_UNICODE_OTHER_NUMBER:
    return CL_NUMBER;
  case G_UNICODE_SPACE_SEPARATOR:
  case G_UNICODE_LINE_SEPARATOR:
  case G_UNICODE_PARAGRAPH_SEPARATOR:
    return CL_SPACE;
  default:
    return CL_OTHER;
  }
}

/* The classes of the 128 ASCII characters, from class_of (filled once). */
static guint8 ascii_class[128];

static void init_ascii(void)
{
  static gsize done = 0;
  if (g_once_init_enter(&done)) {
    for (gunichar c = 0; c < 128; c++)
      ascii_class[c] = (guint8)class_of(c);
    g_once_init_leave(&done, 1);
  }
}

static inline gboolean cont(guint8 b)
{
  return (b & 0xC0) == 0x80;
}

/* Decodes the character at text[i] (i < len): its code point and length, or length 1 and
 * G_MAXUINT32 for a byte that does not begin a valid, complete, shortest-form character. */
static inline gunichar decode_at(const guint8 *s, gsize len, gsize i, gsize *n)
{
  guint8 b = s[i];
  gsize left = len - i;
  *n = 1;
  if (b < 0x80)
    return b;
  if (b >= 0xC2 && b <= 0xDF) {
    if (left >= 2 && cont(s[i + 1])) {
      *n = 2;
      return (gunichar)(b & 0x1F) << 6 | (s[i + 1] & 0x3F);
    }
  } else if (b >= 0xE0 && b <= 0xEF) {
    guint8 lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    if (left >= 3 && s[i + 1] >= lo && s[i + 1] <= hi && cont(s[i + 2])) {
      *n = 3;
      return (gunichar)(b & 0x0F) << 12 | (gunichar)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
    }
  } else if (b >= 0xF0 && b <= 0xF4) {
    guint8 lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    if (left >= 4 && s[i + 1] >= lo && s[i + 1] <= hi && cont(s[i + 2]) && cont(s[i + 3])) {
      *n = 4;
      return (gunichar)(b & 0x07) << 18 | (gunichar)(s[i + 1] & 0x3F) << 12 |
             (gunichar)(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
    }
  }
  return G_MAXUINT32;
}

/* The class of the character at text[i] and its length. */
static inline CharClass class_at(const guint8 *s, gsize len, gsize i, gsize *n)
{
  if (s[i] < 0x80) {
    *n = 1;
    return (CharClass)ascii_class[s[i]];
  }
  gunichar c = decode_at(s, len, i, n);
  return c == G_MAXUINT32 ? CL_OTHER : class_of(c);
}

/* The end of the run of characters of class `k` that starts at i. */
static inline gsize run_end(const guint8 *s, gsize len, gsize i, CharClass k)
{
  while (i < len) {
    gsize n;
    if (class_at(s, len, i, &n) != k)
      break;
    i += n;
  }
  return i;
}

/* 's 't 're 've 'm 'll 'd at text[i] (which is an apostrophe): the contraction's length, or
 * 0. Case matters, as in GPT-2's pattern. */
static inline gsize contraction(const guint8 *s, gsize len, gsize i)
{
  if (i + 1 >= len)
    return 0;
  guint8 a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd')
    return 2;
  if (i + 2 >= len)
    return 0;
  guint8 b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
    return 3;
  return 0;
}

gsize bpe_piece_end(const guint8 *s, gsize len, gsize i)
{
  if (s[i] == '\'') {
    gsize c = contraction(s, len, i);
    if (c)
      return i + c;
  }
  gsize n;
  CharClass k = class_at(s, len, i, &n);
  if (s[i] == ' ' && i + 1 < len) {
    /* " ?X+": the space joins a run of letters, numbers or other characters after it. */
    gsize m;
    CharClass next = class_at(s, len, i + 1, &m);
    if (next != CL_SPACE)
      return run_end(s, len, i + 1 + m, next);
  }
  if (k != CL_SPACE)
    return run_end(s, len, i + n, k);
  /* \s+(?!\S) takes the run but its last space when something follows (that space then
   * begins the next piece); a single space before something is \s+ alone. */
  gsize end = run_end(s, len, i + n, CL_SPACE);
  if (end == len || end == i + n)
    return end;
  /* Back off one character: find where the last one starts (UTF-8 of a space is valid, so
   * its first byte is the last one that is not a continuation byte). */
  gsize last = end - 1;
  while (last > i && cont(s[last]))
    last--;
  return last;
}

GArray *cohort_bpe_split(const char *text, gsize len)
{
  init_ascii();
  GArray *ends = g_array_new(FALSE, FALSE, sizeof(gsize));
  const guint8 *s = (const guint8 *)text;
  for (gsize i = 0; i < len;) {
    i = bpe_piece_end(s, len, i);
    g_array_append_val(ends, i);
  }
  return ends;
}

static inline gboolean printable_ascii(guint8 b)
{
  return b > 0x20 && b < 0x7F;
}

/* Whether the character that ends just before s[p] is not a space (its class is looked up
 * from its first byte, at most three bytes back). */
static gboolean nonspace_before(const guint8 *s, gsize len, gsize p)
{
  gsize start = p - 1;
  while (start > 0 && p - start < 4 && cont(s[start]))
    start--;
  gsize n;
  CharClass k = class_at(s, len, start, &n);
  /* A start that does not decode to a character ending at p is invalid bytes: "other". */
  return start + n != p || k != CL_SPACE;
}

gboolean bpe_cut_at(int rule, const guint8 *s, gsize len, gsize p)
{
  if (p < 2 || p + 1 >= len)
    return FALSE;
  /* "x y": the piece before ends at the space, which begins the next piece. */
  if (s[p] == ' ' && printable_ascii(s[p - 1]) && printable_ascii(s[p + 1]))
    return TRUE;
  /* "x\ny" (text without spaces, such as Chinese or Japanese): the newline is a piece of its
   * own (or ends the piece of punctuation before it), and the next piece begins after it. */
  if (rule == 2 && s[p - 1] == '\n' && s[p] != '\n' && nonspace_before(s, len, p - 1)) {
    gsize n;
    if (class_at(s, len, p, &n) != CL_SPACE)
      return TRUE;
  }
  return FALSE;
}

gsize cohort_bpe_safe_cut(const char *text, gsize len, gsize want)
{
  init_ascii();
  const guint8 *s = (const guint8 *)text;
  for (gsize p = MAX(want, 2); p + 1 < len; p++)
    if (bpe_cut_at(2, s, len, p))
      return p;
  return len;
}

void bpe_split_init(void)
{
  init_ascii();
}

gboolean cohort_text_is_utf8(const char *text, gsize len)
{
  const guint8 *s = (const guint8 *)text;
  for (gsize i = 0; i < len;) {
    /* ASCII eight bytes at a time: most text is. */
    if (i + 8 <= len) {
      guint64 w;
      memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    gsize n;
    if (decode_at(s, len, i, &n) == G_MAXUINT32)
      return FALSE;
    i += n;
  }
  return TRUE;
}
