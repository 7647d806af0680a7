/* Regular expressions of tokenizer.json (Split pre-tokenizers, Replace normalizers) through
 * PCRE2 (Debian's libpcre2-8): UTF-8 with Unicode properties (\p{L}, \p{N}, and \s as Unicode's
 * White_Space, as the tokenizers library's Oniguruma has them), JIT-compiled where PCRE2 can,
 * and every match bounded by a match limit and a heap limit, so a pattern that backtracks
 * without end ends in an error instead of a hang. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tok-pipeline.h"

#include <pcre2.h>
#include <string.h>

#include "data/tokenizer.h"

struct TokRegex {
  char *pattern;
  pcre2_code *code;
  pcre2_match_context *context;
  gboolean jit;
};

struct TokMatcher {
  pcre2_match_data *data;
};

/* Memory one interpreted match may use for backtracking, in KiB. */
#define HEAP_LIMIT_KIB (64u << 10)

static gboolean regex_error(GError **error, const char *source, const char *where,
                            const char *pattern, const char *fmt, ...) G_GNUC_PRINTF(5, 6);
static gboolean regex_error(GError **error, const char *source, const char *where,
                            const char *pattern, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_autofree char *cut = g_utf8_substring(pattern, 0, MIN(g_utf8_strlen(pattern, -1), 60));
  g_autofree char *shown = g_strescape(cut, NULL);
  g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
              "%s: %s: the regular expression \"%s%s\" %s", source, where, shown,
              strlen(cut) < strlen(pattern) ? "…" : "", msg);
  return FALSE;
}

void tok_regex_free(TokRegex *r)
{
  if (!r)
    return;
  pcre2_code_free(r->code);
  pcre2_match_context_free(r->context);
  g_free(r->pattern);
  g_free(r);
}

const char *tok_regex_pattern(const TokRegex *r)
{
  return r->pattern;
}

TokMatcher *tok_matcher_new(void)
{
  TokMatcher *m = g_new0(TokMatcher, 1);
  /* One pair: the whole match is all a split needs (a smaller ovector than the pattern's
   * groups still records it). */
  m->data = pcre2_match_data_create(1, NULL);
  return m;
}

void tok_matcher_free(TokMatcher *m)
{
  if (!m)
    return;
  pcre2_match_data_free(m->data);
  g_free(m);
}

/* Texts a pattern must get through at load: runs of one class, alternations of classes, the
 * shapes that make nested quantifiers backtrack. */
static const char *const probes[] = {
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
    "                                        x",
    "1111111111111111111111111111111111111111a",
    "a a a a a a a a a a a a a a a a a a a a a a a a !",
    "ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ?",
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n x",
    "....................................... .",
    "Hello, world! It's 2024: naïve café, 日本語テキスト, ½ ① 🙂\r\n\tend",
};

static gboolean probe(TokRegex *r, const char *source, const char *where, GError **error)
{
  g_autoptr(GError) local = NULL;
  TokMatcher *m = tok_matcher_new();
  gboolean ok = TRUE;
  for (guint i = 0; ok && i < G_N_ELEMENTS(probes); i++) {
    const guint8 *s = (const guint8 *)probes[i];
    gsize len = strlen(probes[i]), at = 0, a, b;
    for (int rc; at <= len && (rc = tok_regex_next(r, m, s, len, at, &a, &b, &local)) != 0;) {
      if (rc < 0) {
        ok = regex_error(error, source, where, r->pattern,
                         "reached PCRE2's match limit on a %" G_GSIZE_FORMAT
                         "-byte test text (it backtracks without end); allowed: a pattern that "
                         "matches in linear time, as tokenizers' patterns do",
                         len);
        break;
      }
      at = b > a ? b : b + 1;
    }
  }
  tok_matcher_free(m);
  return ok;
}

TokRegex *tok_regex_new(const char *pattern, const char *source, const char *where, GError **error)
{
  gsize n = strlen(pattern);
  if (n == 0 || n > TOK_REGEX_MAX_PATTERN) {
    regex_error(error, source, where, pattern,
                "is %" G_GSIZE_FORMAT " bytes; allowed: 1 to %u bytes", n, TOK_REGEX_MAX_PATTERN);
    return NULL;
  }
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
  /* Deeply nested parentheses cost stack while compiling. */
  pcre2_set_parens_nest_limit(cc, 64);
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, n, PCRE2_UTF | PCRE2_UCP, &code, &offset, cc);
  pcre2_compile_context_free(cc);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    regex_error(error, source, where, pattern,
                "is not one PCRE2 reads: %s at byte %" G_GSIZE_FORMAT, (const char *)msg,
                (gsize)offset);
    return NULL;
  }
  TokRegex *r = g_new0(TokRegex, 1);
  r->pattern = g_strdup(pattern);
  r->code = re;
  r->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  r->context = pcre2_match_context_create(NULL);
  pcre2_set_match_limit(r->context, TOK_REGEX_MATCH_LIMIT);
  pcre2_set_heap_limit(r->context, HEAP_LIMIT_KIB);
  if (!probe(r, source, where, error)) {
    tok_regex_free(r);
    return NULL;
  }
  return r;
}

int tok_regex_next(const TokRegex *r, TokMatcher *m, const guint8 *s, gsize len, gsize from,
                   gsize *start, gsize *end, GError **error)
{
  if (from > len)
    return 0;
  /* Text that is not UTF-8 is matched as it is: PCRE2 is told not to check, and the callers
   * hand it only valid UTF-8 (invalid bytes are pieces of their own, see tok-pretok.c). */
  guint32 opts = PCRE2_NO_UTF_CHECK;
  /* The JIT's own entry skips the checks of pcre2_match: most matches are a few bytes. */
  int rc = r->jit ? pcre2_jit_match(r->code, s, len, from, 0, m->data, r->context)
                  : pcre2_match(r->code, s, len, from, opts, m->data, r->context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(r->code, s, len, from, opts | PCRE2_NO_JIT, m->data, r->context);
  if (rc == PCRE2_ERROR_NOMATCH)
    return 0;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    g_autofree char *cut = g_utf8_substring(r->pattern, 0, MIN(g_utf8_strlen(r->pattern, -1), 60));
    g_autofree char *shown = g_strescape(cut, NULL);
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_REGEX,
                "the tokenizer's regular expression \"%s\" failed at byte %" G_GSIZE_FORMAT
                " of a piece of text: %s (PCRE2's limits: %u steps, %u MiB)",
                shown, from, (const char *)msg, TOK_REGEX_MATCH_LIMIT, HEAP_LIMIT_KIB >> 10);
    return -1;
  }
  const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->data);
  *start = ov[0];
  *end = ov[1];
  return 1;
}
