/* Strict JSON: an RFC 8259 checker that runs before json-glib. It walks the text once with an
 * explicit stack (no recursion, so nesting cannot overflow the C stack) and keeps, for each
 * open object, the set of its keys. */
#include "engine/base/json-read.h"
#include "engine/base/error.h"
#include "engine/base/json-write.h"

#include <math.h>
#include <string.h>

/* clang-format off */
G_DEFINE_QUARK(cohort-json-error-quark, cohort_json_error)
/* clang-format on */

/* How much of a refused key or number a message shows. */
#define SHOWN_CHARS 60

typedef struct {
  gboolean object;
  GHashTable *keys; /* decoded names seen so far (objects only, made on the first key) */
} Frame;

typedef struct {
  const char *text, *p, *end;
  const char *source;
  guint max_depth;
  GArray *frames; /* of Frame: the open arrays and objects, innermost last */
  GString *key;   /* the key being read, unescaped */
  GError **error;
} Scan;

static void frame_clear(gpointer data)
{
  Frame *f = data;
  g_clear_pointer(&f->keys, g_hash_table_unref);
}

/* 1-based line and column (in characters) of `at`. */
static void position(const Scan *s, const char *at, guint *line, guint *column)
{
  *line = 1;
  *column = 1;
  for (const char *c = s->text; c < at; c++) {
    if (*c == '\n') {
      (*line)++;
      *column = 1;
    } else if (((guchar)*c & 0xC0) != 0x80) {
      (*column)++;
    }
  }
}

/* A reason the text is not JSON, prefixed with the source and the line and column of `at`. */
static gboolean fail(Scan *s, const char *at, CohortJsonError code, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);

static gboolean fail(Scan *s, const char *at, CohortJsonError code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(s->error, COHORT_JSON_ERROR, code, fmt, ap);
  va_end(ap);
  guint line, column;
  position(s, at, &line, &column);
  g_prefix_error(s->error, "%s: not valid JSON: %u:%u: ", s->source, line, column);
  return FALSE;
}

/* What stands at `at`, for messages: 'x', a byte in hex, or the end of the text. */
static char *describe(const Scan *s, const char *at)
{
  if (at >= s->end)
    return g_strdup("the end of the text");
  guchar c = (guchar)*at;
  if (c >= 0x21 && c < 0x7F)
    return g_strdup_printf("'%c'", c);
  if (c >= 0x80) {
    /* The text was checked to be UTF-8, so this is a whole character. */
    const char *next = g_utf8_next_char(at);
    return g_strdup_printf("'%.*s'", (int)(next - at), at);
  }
  return g_strdup_printf("byte 0x%02X", c);
}

/* Text of `len` bytes at `at`, cut to SHOWN_CHARS characters, as a JSON string literal. */
static char *shown(const char *at, gsize len)
{
  const char *cut = at + len;
  glong chars = g_utf8_strlen(at, (gssize)len);
  if (chars > SHOWN_CHARS)
    cut = g_utf8_offset_to_pointer(at, SHOWN_CHARS);
  g_autofree char *part = g_strndup(at, (gsize)(cut - at));
  g_autoptr(GString) out = g_string_new(NULL);
  cohort_json_append_string(out, part);
  if (cut < at + len)
    g_string_insert(out, out->len - 1, "...");
  return g_string_free(g_steal_pointer(&out), FALSE);
}

static void skip_ws(Scan *s)
{
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
    s->p++;
}

static int hex4(const char *p, const char *end)
{
  if (end - p < 4)
    return -1;
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int d = g_ascii_xdigit_value(p[i]);
    if (d < 0)
      return -1;
    v = v * 16 + d;
  }
  return v;
}

/* One escape after a backslash at s->p; appends the character to `out` (may be NULL). */
static gboolean scan_escape(Scan *s, GString *out)
{
  const char *at = s->p;
  static const char plain[] = "\"\\/bfnrt", meaning[] = "\"\\/\b\f\n\r\t";
  if (s->p + 1 >= s->end)
    return fail(s, at, COHORT_JSON_ERROR_SYNTAX, "the text ends inside an escape");
  const char *m = s->p[1] ? strchr(plain, s->p[1]) : NULL;
  if (m) {
    if (out)
      g_string_append_c(out, meaning[m - plain]);
    s->p += 2;
    return TRUE;
  }
  if (s->p[1] != 'u') {
    g_autofree char *what = describe(s, s->p + 1);
    return fail(s, at, COHORT_JSON_ERROR_SYNTAX,
                "unknown escape \\ followed by %s; allowed: \\\" \\\\ \\/ \\b \\f \\n \\r \\t "
                "\\uXXXX",
                what);
  }
  int u = hex4(s->p + 2, s->end);
  if (u < 0)
    return fail(s, at, COHORT_JSON_ERROR_SYNTAX, "\\u must be followed by four hex digits");
  s->p += 6;
  if (u == 0)
    return fail(s, at, COHORT_JSON_ERROR_SYNTAX,
                "\\u0000 (a NUL character) is not allowed in strings: the text would end there");
  gunichar c = (gunichar)u;
  if (u >= 0xDC00 && u <= 0xDFFF)
    return fail(s, at, COHORT_JSON_ERROR_SYNTAX,
                "\\u%04X is a lone low surrogate; allowed: a high surrogate \\uD800-\\uDBFF "
                "followed by a low one",
                (guint)u);
  if (u >= 0xD800 && u <= 0xDBFF) {
    int lo = s->p + 1 < s->end && s->p[0] == '\\' && s->p[1] == 'u' ? hex4(s->p + 2, s->end) : -1;
    if (lo < 0xDC00 || lo > 0xDFFF)
      return fail(s, at, COHORT_JSON_ERROR_SYNTAX,
                  "\\u%04X is a high surrogate without the low surrogate \\uDC00-\\uDFFF after it",
                  (guint)u);
    c = 0x10000 + (((gunichar)u - 0xD800) << 10) + ((gunichar)lo - 0xDC00);
    s->p += 6;
  }
  if (out)
    g_string_append_unichar(out, c);
  return TRUE;
}

/* A string at s->p (on its opening quote); its unescaped text goes to `out` (may be NULL). */
static gboolean scan_string(Scan *s, GString *out)
{
  const char *start = s->p++;
  for (;;) {
    if (s->p >= s->end)
      return fail(s, start, COHORT_JSON_ERROR_SYNTAX, "this string is never closed");
    guchar c = (guchar)*s->p;
    if (c == '"') {
      s->p++;
      return TRUE;
    }
    if (c < 0x20)
      return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX,
                  "a raw control character (byte 0x%02X) in a string; write it escaped, like "
                  "\\n or \\u%04X",
                  c, c);
    if (c == '\\') {
      if (!scan_escape(s, out))
        return FALSE;
      continue;
    }
    const char *run = s->p;
    while (s->p < s->end && *s->p != '"' && *s->p != '\\' && (guchar)*s->p >= 0x20)
      s->p++;
    if (out)
      g_string_append_len(out, run, s->p - run);
  }
}

static gboolean scan_digits(Scan *s, const char *what_after)
{
  if (s->p >= s->end || !g_ascii_isdigit(*s->p)) {
    g_autofree char *found = describe(s, s->p);
    return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX, "a digit must follow %s, not %s", what_after,
                found);
  }
  while (s->p < s->end && g_ascii_isdigit(*s->p))
    s->p++;
  return TRUE;
}

/* A number at s->p: RFC 8259's grammar, then its value must fit (int64 or finite double). */
static gboolean scan_number(Scan *s)
{
  const char *start = s->p;
  if (*s->p == '-')
    s->p++;
  if (s->p < s->end && *s->p == '0') {
    s->p++;
    if (s->p < s->end && (*s->p == 'x' || *s->p == 'X'))
      return fail(s, start, COHORT_JSON_ERROR_SYNTAX, "hexadecimal numbers are not allowed");
    if (s->p < s->end && g_ascii_isdigit(*s->p))
      return fail(s, start, COHORT_JSON_ERROR_SYNTAX,
                  "a number with a leading zero is not allowed (write 1, not 01)");
  } else if (!scan_digits(s, "'-'")) {
    return FALSE;
  }
  gboolean integral = TRUE;
  if (s->p < s->end && *s->p == '.') {
    integral = FALSE;
    s->p++;
    if (!scan_digits(s, "the decimal point"))
      return FALSE;
  }
  if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
    integral = FALSE;
    s->p++;
    if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
      s->p++;
    if (!scan_digits(s, "the exponent's 'e'"))
      return FALSE;
  }
  g_autofree char *text = g_strndup(start, (gsize)(s->p - start));
  if (integral && !g_ascii_string_to_signed(text, 10, G_MININT64, G_MAXINT64, NULL, NULL)) {
    g_autofree char *num = shown(start, (gsize)(s->p - start));
    return fail(s, start, COHORT_JSON_ERROR_SYNTAX,
                "the integer %s is outside the 64-bit range (-9223372036854775808 to "
                "9223372036854775807)",
                num);
  }
  if (!integral && isinf(g_ascii_strtod(text, NULL))) {
    g_autofree char *num = shown(start, (gsize)(s->p - start));
    return fail(s, start, COHORT_JSON_ERROR_SYNTAX,
                "the number %s is too large (beyond the range of a double)", num);
  }
  return TRUE;
}

/* What a value cannot start with, in words; NULL when nothing more specific fits. */
static const char *bad_value_start(const Scan *s)
{
  const char *p = s->p;
  gsize left = (gsize)(s->end - p);
  if (*p == '/')
    return "comments are not allowed";
  if (*p == '\'')
    return "strings must be in double quotes, not single quotes";
  if (*p == '+')
    return "a number cannot start with '+'";
  if (*p == '.')
    return "a number needs a digit before the decimal point";
  if ((left >= 3 && g_ascii_strncasecmp(p, "nan", 3) == 0) ||
      (left >= 3 && g_ascii_strncasecmp(p, "inf", 3) == 0) ||
      (left >= 4 && g_ascii_strncasecmp(p, "-inf", 4) == 0))
    return "NaN and Infinity are not JSON numbers";
  return NULL;
}

/* A string, number or literal at s->p. */
static gboolean scan_scalar(Scan *s)
{
  static const char *const literals[] = {"true", "false", "null"};
  if (s->p >= s->end)
    return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX, "the text ends where a value is expected");
  const char *why = bad_value_start(s);
  if (why)
    return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX, "%s", why);
  if (*s->p == '"')
    return scan_string(s, NULL);
  if (*s->p == '-' || g_ascii_isdigit(*s->p))
    return scan_number(s);
  for (guint i = 0; i < G_N_ELEMENTS(literals); i++) {
    gsize n = strlen(literals[i]);
    if ((gsize)(s->end - s->p) >= n && memcmp(s->p, literals[i], n) == 0) {
      s->p += n;
      return TRUE;
    }
  }
  g_autofree char *found = describe(s, s->p);
  return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX,
              "%s where a value (object, array, string, number, true, false or null) is expected",
              found);
}

/* A member name and its colon, at s->p inside the innermost (object) frame. */
static gboolean scan_key(Scan *s)
{
  const char *at = s->p;
  if (s->p >= s->end || *s->p != '"') {
    g_autofree char *found = describe(s, s->p);
    if (s->p < s->end && *s->p == '\'')
      return fail(s, at, COHORT_JSON_ERROR_SYNTAX, "keys must be in double quotes, not single");
    if (s->p < s->end && *s->p == '/')
      return fail(s, at, COHORT_JSON_ERROR_SYNTAX, "comments are not allowed");
    return fail(s, at, COHORT_JSON_ERROR_SYNTAX, "%s where a key in double quotes is expected",
                found);
  }
  g_string_truncate(s->key, 0);
  if (!scan_string(s, s->key))
    return FALSE;
  Frame *f = &g_array_index(s->frames, Frame, s->frames->len - 1);
  if (!f->keys)
    f->keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  if (!g_hash_table_add(f->keys, g_strndup(s->key->str, s->key->len))) {
    guint line, column;
    position(s, at, &line, &column);
    g_autofree char *name = shown(s->key->str, s->key->len);
    g_set_error(s->error, COHORT_JSON_ERROR, COHORT_JSON_ERROR_DUPLICATE_KEY,
                "%s: key %s is given more than once (at %u:%u); allowed: each key once", s->source,
                name, line, column);
    return FALSE;
  }
  skip_ws(s);
  if (s->p >= s->end || *s->p != ':') {
    g_autofree char *found = describe(s, s->p);
    return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX, "%s where ':' after the key is expected", found);
  }
  s->p++;
  return TRUE;
}

static gboolean open_container(Scan *s, gboolean object)
{
  if (s->frames->len >= s->max_depth)
    return fail(s, s->p, COHORT_JSON_ERROR_DEPTH,
                "arrays and objects nested deeper than %u levels; allowed: at most %u",
                s->max_depth, s->max_depth);
  Frame f = {object, NULL};
  g_array_append_val(s->frames, f);
  s->p++;
  return TRUE;
}

/* After a value inside the innermost frame: ',' and the next item, or the closing bracket.
 * Sets *state to what comes next. */
enum { WANT_VALUE, WANT_KEY, AFTER_VALUE };

static gboolean after_item(Scan *s, int *state)
{
  gboolean object = g_array_index(s->frames, Frame, s->frames->len - 1).object;
  char close = object ? '}' : ']';
  if (s->p < s->end && *s->p == close) {
    s->p++;
    g_array_set_size(s->frames, s->frames->len - 1);
    *state = AFTER_VALUE;
    return TRUE;
  }
  if (s->p < s->end && *s->p == ',') {
    const char *comma = s->p++;
    skip_ws(s);
    if (s->p < s->end && (*s->p == '}' || *s->p == ']'))
      return fail(s, comma, COHORT_JSON_ERROR_SYNTAX, "a comma before '%c' is not allowed", *s->p);
    *state = object ? WANT_KEY : WANT_VALUE;
    return TRUE;
  }
  g_autofree char *found = describe(s, s->p);
  return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX, "%s where ',' or '%c' is expected", found, close);
}

static gboolean scan_text(Scan *s)
{
  int state = WANT_VALUE;
  for (;;) {
    skip_ws(s);
    if (state == WANT_KEY) {
      if (!scan_key(s))
        return FALSE;
      state = WANT_VALUE;
    } else if (state == WANT_VALUE) {
      if (s->p < s->end && (*s->p == '{' || *s->p == '[')) {
        gboolean object = *s->p == '{';
        if (!open_container(s, object))
          return FALSE;
        skip_ws(s);
        if (s->p < s->end && *s->p == (object ? '}' : ']')) {
          s->p++;
          g_array_set_size(s->frames, s->frames->len - 1);
          state = AFTER_VALUE;
        } else {
          state = object ? WANT_KEY : WANT_VALUE;
        }
      } else {
        if (!scan_scalar(s))
          return FALSE;
        state = AFTER_VALUE;
      }
    } else if (s->frames->len > 0) {
      if (!after_item(s, &state))
        return FALSE;
    } else if (s->p < s->end) {
      g_autofree char *found = describe(s, s->p);
      return fail(s, s->p, COHORT_JSON_ERROR_SYNTAX,
                  "%s after the end of the value; allowed: one value, then only whitespace", found);
    } else {
      return TRUE;
    }
  }
}

static gboolean check_strict(Scan *s)
{
  const char *bad = NULL;
  gsize len = (gsize)(s->end - s->text);
  if (len >= 3 && memcmp(s->text, "\xEF\xBB\xBF", 3) == 0)
    return fail(s, s->text, COHORT_JSON_ERROR_SYNTAX,
                "a byte order mark (BOM) is not allowed; the text must start with the value");
  if (!g_utf8_validate_len(s->text, len, &bad)) {
    if (*bad == '\0')
      return fail(s, bad, COHORT_JSON_ERROR_SYNTAX, "a NUL byte is not allowed");
    return fail(s, bad, COHORT_JSON_ERROR_SYNTAX, "byte 0x%02X is not UTF-8", (guchar)*bad);
  }
  return scan_text(s);
}

JsonNode *cohort_json_parse_strict(const char *text, gssize len, const char *source,
                                   guint max_depth, GError **error)
{
  g_return_val_if_fail(text != NULL, NULL);
  gsize n = len < 0 ? strlen(text) : (gsize)len;
  g_autoptr(GArray) frames = g_array_new(FALSE, FALSE, sizeof(Frame));
  g_array_set_clear_func(frames, frame_clear);
  g_autoptr(GString) key = g_string_new(NULL);
  Scan s = {
      .text = text,
      .p = text,
      .end = text + n,
      .source = source && *source ? source : "JSON",
      .max_depth = max_depth ? max_depth : COHORT_JSON_MAX_DEPTH,
      .frames = frames,
      .key = key,
      .error = error,
  };
  if (!check_strict(&s))
    return NULL;

  g_autoptr(JsonParser) parser = json_parser_new();
  g_autoptr(GError) local = NULL;
  if (!json_parser_load_from_data(parser, text, (gssize)n, &local)) {
    /* Not expected once the check passed; reported rather than trusted. */
    g_set_error(error, COHORT_JSON_ERROR, COHORT_JSON_ERROR_SYNTAX, "%s: not valid JSON: %s",
                s.source, local->message);
    return NULL;
  }
  return json_parser_steal_root(parser);
}
