/* The chat-template lexer. Before tokens are cut, the template is prepared as transformers'
 * renderer (Jinja2 with trim_blocks and lstrip_blocks) and @huggingface/jinja prepare it: a
 * single trailing newline goes; spaces and tabs before a {% or {# tag that begins a line go;
 * the newline after a %} or #} goes; the transformers-only {% generation %} tags go. Then
 * text and tags are cut, and {%- -%} {{- -}} {#- -#} strip the white space beside them. Line
 * numbers in messages are those of the template as written. */
#include "data/jinja-private.h"

#include <string.h>

typedef struct {
  GString *text;
  GArray *at; /* guint32: each byte's offset in the template as written */
} Mapped;

static void mapped_add(Mapped *m, char c, guint32 at)
{
  g_string_append_c(m->text, c);
  g_array_append_val(m->at, at);
}

/* JavaScript's \s: what @huggingface/jinja strips as white space. */
static gsize js_space(const char *s, gsize len, gsize i)
{
  guint8 c = (guint8)s[i];
  if (c == ' ' || (c >= 0x09 && c <= 0x0D))
    return 1;
  if (c < 0x80)
    return 0;
  gunichar u = g_utf8_get_char_validated(s + i, (gssize)(len - i));
  if (u == (gunichar)-1 || u == (gunichar)-2)
    return 0;
  gboolean sp = u == 0xA0 || u == 0x1680 || (u >= 0x2000 && u <= 0x200A) || u == 0x2028 ||
                u == 0x2029 || u == 0x202F || u == 0x205F || u == 0x3000 || u == 0xFEFF;
  return sp ? (gsize)g_unichar_to_utf8(u, NULL) : 0;
}

/* Where a line begins for a multi-line JavaScript regex: after \n, \r, U+2028, U+2029. */
static gboolean line_start(const char *s, gsize i)
{
  if (i == 0)
    return TRUE;
  if (s[i - 1] == '\n' || s[i - 1] == '\r')
    return TRUE;
  return i >= 3 && (guint8)s[i - 3] == 0xE2 && (guint8)s[i - 2] == 0x80 &&
         ((guint8)s[i - 1] == 0xA8 || (guint8)s[i - 1] == 0xA9);
}

/* lstrip_blocks, then trim_blocks, each over the whole text as the reference does it. */
static void pass_blocks(Mapped *in, Mapped *out, gboolean lstrip)
{
  const char *s = in->text->str;
  gsize n = in->text->len;
  const guint32 *at = (const guint32 *)in->at->data;
  for (gsize i = 0; i < n;) {
    if (lstrip && line_start(s, i)) {
      gsize j = i;
      while (j < n && (s[j] == ' ' || s[j] == '\t'))
        j++;
      if (j + 1 < n && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-') &&
          j > i) {
        i = j;
        continue;
      }
    }
    mapped_add(out, s[i], at[i]);
    if (!lstrip && i + 2 < n && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' &&
        s[i + 2] == '\n') {
      mapped_add(out, s[i + 1], at[i + 1]);
      i += 3;
      continue;
    }
    i++;
  }
}

/* {% generation %} and {% endgeneration %} (transformers' assistant masks) are dropped, with
 * the white space around them unless the tag strips it. */
static gboolean generation_tag(const char *s, gsize n, gsize i, gsize *end, gboolean *l,
                               gboolean *r)
{
  if (i + 2 > n || s[i] != '{' || s[i + 1] != '%')
    return FALSE;
  gsize j = i + 2;
  *l = j < n && s[j] == '-';
  j += *l;
  while (j < n && js_space(s, n, j))
    j += js_space(s, n, j);
  if (j + 3 <= n && strncmp(s + j, "end", 3) == 0)
    j += 3;
  if (j + 10 > n || strncmp(s + j, "generation", 10) != 0)
    return FALSE;
  j += 10;
  while (j < n && js_space(s, n, j))
    j += js_space(s, n, j);
  *r = j < n && s[j] == '-';
  j += *r;
  if (j + 2 > n || s[j] != '%' || s[j + 1] != '}')
    return FALSE;
  *end = j + 2;
  return TRUE;
}

static void pass_generation(Mapped *in, Mapped *out)
{
  const char *s = in->text->str;
  gsize n = in->text->len;
  const guint32 *at = (const guint32 *)in->at->data;
  for (gsize i = 0; i < n;) {
    /* A run of white space followed by a generation tag. */
    gsize j = i;
    while (j < n && js_space(s, n, j))
      j += js_space(s, n, j);
    gsize end;
    gboolean l, r;
    if (!generation_tag(s, n, j, &end, &l, &r)) {
      gsize k = j > i ? j : i + 1;
      for (; i < k; i++)
        mapped_add(out, s[i], at[i]);
      continue;
    }
    for (gsize k = i; !l && k < j; k++)
      mapped_add(out, s[k], at[k]);
    gsize after = end;
    while (after < n && js_space(s, n, after))
      after += js_space(s, n, after);
    for (gsize k = end; !r && k < after; k++)
      mapped_add(out, s[k], at[k]);
    i = after;
  }
}

typedef struct {
  const char *s;
  gsize n, i;
  const guint32 *at;
  const guint32 *line_starts; /* offsets in the template as written */
  guint n_lines;
  GArray *toks;
  JjArena *arena;
  JjErrors *e;
  int curly;
} Lex;

static int line_of(Lex *x, gsize i)
{
  guint32 off = i < x->n ? x->at[i] : (x->n ? x->at[x->n - 1] : 0);
  guint lo = 0, hi = x->n_lines;
  while (hi - lo > 1) {
    guint mid = (lo + hi) / 2;
    if (x->line_starts[mid] <= off)
      lo = mid;
    else
      hi = mid;
  }
  return (int)lo + 1;
}

static void push(Lex *x, JjTokType type, const char *text, gsize len, gsize at)
{
  JjTok t = {type, jj_strndup(x->arena, text, len), len, line_of(x, at)};
  g_array_append_val(x->toks, t);
}

static JjTok *last(Lex *x)
{
  return x->toks->len ? &g_array_index(x->toks, JjTok, x->toks->len - 1) : NULL;
}

/* {%- {{- {#-: the text before loses its trailing white space (JavaScript's trimEnd). */
static void strip_before(Lex *x)
{
  JjTok *t = last(x);
  if (!t || t->type != JT_TEXT)
    return;
  gsize n = t->len;
  while (n > 0) {
    gsize k = n - 1;
    while (k > 0 && ((guint8)t->text[k] & 0xC0) == 0x80)
      k--;
    if (js_space(t->text, n, k) != n - k)
      break;
    n = k;
  }
  if (n == 0) {
    g_array_set_size(x->toks, x->toks->len - 1);
    return;
  }
  ((char *)t->text)[n] = 0;
  t->len = n;
}

static void skip_space(Lex *x)
{
  while (x->i < x->n && js_space(x->s, x->n, x->i))
    x->i += js_space(x->s, x->n, x->i);
}

static gboolean lex_string(Lex *x)
{
  char quote = x->s[x->i];
  gsize start = x->i++;
  GString *v = g_string_new(NULL);
  while (x->i < x->n && x->s[x->i] != quote) {
    char c = x->s[x->i++];
    if (c != '\\') {
      g_string_append_c(v, c);
      continue;
    }
    if (x->i >= x->n)
      break;
    char e = x->s[x->i++];
    const char *map = strchr("ntrbfv'\"\\", e);
    static const char out[] = "\n\t\r\b\f\v'\"\\";
    if (map && e) {
      g_string_append_c(v, out[map - "ntrbfv'\"\\"]);
    } else if (e == 'x' || e == 'u') {
      gsize k = e == 'x' ? 2 : 4;
      guint32 cp = 0;
      for (gsize j = 0; j < k; j++) {
        if (x->i >= x->n || !g_ascii_isxdigit(x->s[x->i])) {
          g_string_free(v, TRUE);
          return jj_fail(x->e, line_of(x, start), "a string's \\%c escape needs %u hex digits", e,
                         (guint)k);
        }
        cp = cp * 16 + (guint32)g_ascii_xdigit_value(x->s[x->i++]);
      }
      if (cp >= 0xD800 && cp <= 0xDFFF) {
        g_string_free(v, TRUE);
        return jj_fail(x->e, line_of(x, start),
                       "a string escapes the surrogate U+%04X, which "
                       "Cohort's renderer cannot hold",
                       cp);
      }
      g_string_append_unichar(v, cp);
    } else {
      g_string_free(v, TRUE);
      return jj_fail(x->e, line_of(x, start), "a string has the unknown escape \\%c", e);
    }
  }
  if (x->i >= x->n) {
    g_string_free(v, TRUE);
    return jj_fail(x->e, line_of(x, start), "a string is not closed");
  }
  x->i++;
  push(x, JT_STRING, v->str, v->len, start);
  g_string_free(v, TRUE);
  return TRUE;
}

static const char *const ops[] = {"{%", "%}", "{{", "}}", "(",  ")",  "{",  "}",  "[", "]",
                                  ",",  ".",  ":",  "|",  "<=", ">=", "==", "!=", "<", ">",
                                  "+",  "-",  "~",  "**", "*",  "//", "/",  "%",  "=", NULL};

/* One token inside a tag. */
static gboolean lex_inside(Lex *x)
{
  const char *s = x->s;
  gsize i = x->i;
  if (i + 3 <= x->n && (strncmp(s + i, "-%}", 3) == 0 || strncmp(s + i, "-}}", 3) == 0)) {
    push(x, s[i + 1] == '%' ? JT_CLOSE_STMT : JT_CLOSE_EXPR, s + i + 1, 2, i);
    x->i += 3;
    skip_space(x);
    return TRUE;
  }
  for (guint k = 0; ops[k]; k++) {
    gsize len = strlen(ops[k]);
    if (i + len > x->n || strncmp(s + i, ops[k], len) != 0)
      continue;
    if (k == 3 && x->curly > 0)
      continue; /* "}}" closes a dict literal inside an expression */
    JjTokType type = k == 0   ? JT_OPEN_STMT
                     : k == 1 ? JT_CLOSE_STMT
                     : k == 2 ? JT_OPEN_EXPR
                     : k == 3 ? JT_CLOSE_EXPR
                              : JT_OP;
    if (k == 6)
      x->curly++;
    else if (k == 7)
      x->curly--;
    else if (k == 2)
      x->curly = 0;
    push(x, type, s + i, len, i);
    x->i += len;
    return TRUE;
  }
  if (s[i] == '\'' || s[i] == '"')
    return lex_string(x);
  if (g_ascii_isdigit(s[i])) {
    gsize j = i;
    while (j < x->n && g_ascii_isdigit(s[j]))
      j++;
    JjTok *t = last(x);
    gboolean after_dot = t && t->type == JT_OP && strcmp(t->text, ".") == 0;
    gboolean frac = !after_dot && j + 1 < x->n && s[j] == '.' && g_ascii_isdigit(s[j + 1]);
    if (frac)
      for (j++; j < x->n && g_ascii_isdigit(s[j]); j++)
        ;
    push(x, frac ? JT_FLOAT : JT_INT, s + i, j - i, i);
    x->i = j;
    return TRUE;
  }
  if (g_ascii_isalnum(s[i]) || s[i] == '_') {
    gsize j = i;
    while (j < x->n && (g_ascii_isalnum(s[j]) || s[j] == '_'))
      j++;
    push(x, JT_NAME, s + i, j - i, i);
    x->i = j;
    return TRUE;
  }
  gunichar c = g_utf8_get_char_validated(s + i, (gssize)(x->n - i));
  char shown[8] = "?";
  if (c != (gunichar)-1 && c != (gunichar)-2)
    shown[g_unichar_to_utf8(c, shown)] = 0;
  return jj_fail(x->e, line_of(x, i), "the character '%s' has no meaning in a tag", shown);
}

static gboolean lex_all(Lex *x)
{
  const char *s = x->s;
  while (x->i < x->n) {
    JjTok *t = last(x);
    gboolean outside = !t || t->type == JT_TEXT || t->type == JT_CLOSE_STMT ||
                       t->type == JT_CLOSE_EXPR || t->type == JT_COMMENT;
    if (outside && (!t || t->type != JT_TEXT)) {
      gsize j = x->i;
      while (j < x->n && !(s[j] == '{' && j + 1 < x->n &&
                           (s[j + 1] == '%' || s[j + 1] == '{' || s[j + 1] == '#')))
        j++;
      if (j > x->i) {
        push(x, JT_TEXT, s + x->i, j - x->i, x->i);
        x->i = j;
        continue;
      }
    }
    if (outside && x->i + 1 < x->n && s[x->i] == '{' && s[x->i + 1] == '#') {
      gsize start = x->i;
      x->i += 2;
      gboolean before = x->i < x->n && s[x->i] == '-';
      const char *close = g_strstr_len(s + x->i, (gssize)(x->n - x->i), "#}");
      if (!close)
        return jj_fail(x->e, line_of(x, start), "a comment {# is not closed with #}");
      gboolean after = close > s + x->i + before && close[-1] == '-';
      if (before)
        strip_before(x);
      push(x, JT_COMMENT, "", 0, start);
      x->i = (gsize)(close - s) + 2;
      if (after)
        skip_space(x);
      continue;
    }
    if (x->i + 3 <= x->n &&
        (strncmp(s + x->i, "{%-", 3) == 0 || strncmp(s + x->i, "{{-", 3) == 0)) {
      strip_before(x);
      push(x, s[x->i + 1] == '%' ? JT_OPEN_STMT : JT_OPEN_EXPR, s + x->i, 2, x->i);
      x->curly = 0;
      x->i += 3;
      continue;
    }
    skip_space(x);
    if (x->i >= x->n)
      break;
    if (!lex_inside(x))
      return FALSE;
  }
  return TRUE;
}

GArray *jj_lex(const char *src, gsize len, JjArena *arena, JjErrors *e)
{
  if (len > JJ_MAX_TEMPLATE) {
    jj_fail(e, 1, "the template is %" G_GSIZE_FORMAT " bytes; allowed: at most %u", len,
            JJ_MAX_TEMPLATE);
    return NULL;
  }
  Mapped a = {g_string_new(NULL), g_array_new(FALSE, FALSE, sizeof(guint32))};
  Mapped b = {g_string_new(NULL), g_array_new(FALSE, FALSE, sizeof(guint32))};
  gsize n = len > 0 && src[len - 1] == '\n' ? len - 1 : len;
  for (gsize i = 0; i < n; i++)
    mapped_add(&a, src[i], (guint32)i);
  pass_blocks(&a, &b, TRUE);
  g_string_truncate(a.text, 0);
  g_array_set_size(a.at, 0);
  pass_blocks(&b, &a, FALSE);
  g_string_truncate(b.text, 0);
  g_array_set_size(b.at, 0);
  pass_generation(&a, &b);
  g_autoptr(GArray) starts = g_array_new(FALSE, FALSE, sizeof(guint32));
  guint32 zero = 0;
  g_array_append_val(starts, zero);
  for (gsize i = 0; i < len; i++) {
    if (src[i] == '\n') {
      guint32 next = (guint32)i + 1;
      g_array_append_val(starts, next);
    }
  }
  Lex x = {.s = b.text->str,
           .n = b.text->len,
           .at = (const guint32 *)b.at->data,
           .line_starts = (const guint32 *)starts->data,
           .n_lines = starts->len,
           .toks = g_array_new(FALSE, FALSE, sizeof(JjTok)),
           .arena = arena,
           .e = e};
  gboolean ok = lex_all(&x);
  if (ok) {
    JjTok end = {JT_END, "", 0, line_of(&x, x.n)};
    g_array_append_val(x.toks, end);
  }
  g_string_free(a.text, TRUE);
  g_array_unref(a.at);
  g_string_free(b.text, TRUE);
  g_array_unref(b.at);
  if (!ok) {
    g_array_unref(x.toks);
    return NULL;
  }
  return x.toks;
}
