/* Pre-tokenizers of tokenizer.json, run as the tokenizers library runs a Sequence (each step
 * splits every piece the step before made), one piece at a time down to the model, so no list
 * of pieces is ever held: Split (a PCRE2 pattern or a string; the behaviours removed,
 * isolated, merged_with_previous, merged_with_next, contiguous; invert), ByteLevel (a prefix
 * space, and GPT-2's split as its own regex: data/bpe-split.c), Metaspace (spaces become the
 * replacement character, prepended always or first, split before it) and Digits. Bytes that
 * are not UTF-8 are pieces of their own where a pattern splits (Rust's strings cannot hold
 * them; PCRE2 must not see them). */
#include "data/tok-encoder.h"

#include <string.h>

void tok_pre_free(gpointer p)
{
  TokPre *s = p;
  if (!s)
    return;
  tok_regex_free(s->regex);
  g_free(s->literal);
  g_free(s);
}

void tok_step_free(gpointer p)
{
  TokStep *st = p;
  g_byte_array_unref(st->buf);
  g_array_unref(st->segs);
  g_free(st);
}

static void seg(GArray *segs, gsize a, gsize b, gboolean match)
{
  TokSeg x = {a, b, match};
  g_array_append_val(segs, x);
}

/* The matches of a Split's pattern in s[0..n), with the text between them, in order (the
 * library's find_matches, before invert). */
static gboolean find_matches(CohortEncoder *e, const TokPre *p, const guint8 *s, gsize n,
                             GArray *segs)
{
  gsize prev = 0;
  if (p->literal) {
    gsize k = strlen(p->literal);
    for (const guint8 *hit; prev < n && (hit = memmem(s + prev, n - prev, p->literal, k));) {
      gsize a = (gsize)(hit - s);
      if (a > prev)
        seg(segs, prev, a, FALSE);
      seg(segs, a, a + k, TRUE);
      prev = a + k;
    }
  } else {
    for (gsize run = 0; run < n;) {
      /* Valid UTF-8 runs are matched; a byte outside them is text between matches. */
      const gchar *bad = NULL;
      g_utf8_validate_len((const gchar *)s + run, n - run, &bad);
      gsize stop = (gsize)((const guint8 *)bad - s), from = run, a, b;
      for (int rc; from <= stop &&
                   (rc = tok_regex_next(p->regex, e->matcher, s + run, stop - run, from - run, &a,
                                        &b, e->error ? NULL : &e->error));) {
        if (rc < 0)
          return FALSE;
        a += run, b += run;
        if (a > prev)
          seg(segs, prev, a, FALSE);
        seg(segs, a, b, TRUE);
        prev = b;
        from = b > a ? b
                     : (b < stop ? (gsize)(g_utf8_next_char((const char *)s + b) - (const char *)s)
                                 : stop + 1);
      }
      if (stop < n) {
        if (stop > prev)
          seg(segs, prev, stop, FALSE);
        seg(segs, stop, stop + 1, FALSE);
        prev = stop + 1;
      }
      run = stop + 1;
    }
  }
  if (prev < n)
    seg(segs, prev, n, FALSE);
  return TRUE;
}

/* Digits: each character that is a number (Rust's char::is_numeric: Nd, Nl, No) is a match. */
static void digit_matches(const guint8 *s, gsize n, GArray *segs)
{
  for (gsize i = 0; i < n;) {
    gunichar c = g_utf8_get_char_validated((const char *)s + i, (gssize)(n - i));
    gsize len = 1;
    gboolean num = FALSE;
    if (c != (gunichar)-1 && c != (gunichar)-2) {
      len = (gsize)(g_utf8_next_char((const char *)s + i) - ((const char *)s + i));
      GUnicodeType k = g_unichar_type(c);
      num = k == G_UNICODE_DECIMAL_NUMBER || k == G_UNICODE_LETTER_NUMBER ||
            k == G_UNICODE_OTHER_NUMBER;
    }
    seg(segs, i, i + len, num);
    i += len;
  }
}

/* Joins segments as a behaviour says (the library's NormalizedString::split); marks the kept
 * pieces with match = TRUE, the removed ones FALSE. */
static void apply_behavior(GArray *segs, TokSplitBehavior how)
{
  TokSeg *v = (TokSeg *)segs->data;
  guint n = segs->len, w = 0;
  switch (how) {
  case TOK_SPLIT_REMOVED:
    for (guint i = 0; i < n; i++)
      if (!v[i].match)
        v[w++] = (TokSeg){v[i].start, v[i].end, TRUE};
    break;
  case TOK_SPLIT_ISOLATED:
    for (guint i = 0; i < n; i++)
      v[w++] = (TokSeg){v[i].start, v[i].end, TRUE};
    break;
  case TOK_SPLIT_CONTIGUOUS:
    for (guint i = 0; i < n; i++) {
      if (v[i].match && w > 0 && i > 0 && v[i - 1].match)
        v[w - 1].end = v[i].end;
      else
        v[w++] = (TokSeg){v[i].start, v[i].end, TRUE};
    }
    break;
  case TOK_SPLIT_MERGED_WITH_PREVIOUS: {
    gboolean previous = FALSE;
    for (guint i = 0; i < n; i++) {
      gboolean m = v[i].match;
      if (m && !previous && w > 0)
        v[w - 1].end = v[i].end;
      else
        v[w++] = (TokSeg){v[i].start, v[i].end, TRUE};
      previous = m;
    }
    break;
  }
  case TOK_SPLIT_MERGED_WITH_NEXT: {
    /* From the end: a match joins the piece after it. */
    gboolean previous = FALSE;
    guint top = n; /* the kept pieces are built down from the end of the array */
    for (guint i = n; i-- > 0;) {
      gboolean m = v[i].match;
      if (m && !previous && top < n)
        v[top].start = v[i].start;
      else
        v[--top] = (TokSeg){v[i].start, v[i].end, TRUE};
      previous = m;
    }
    memmove(v, v + top, (n - top) * sizeof *v);
    w = n - top;
    break;
  }
  }
  g_array_set_size(segs, w);
}

/* Runs step + 1 on every non-empty piece of a step's segments over s. */
static gboolean each_piece(CohortEncoder *e, guint step, const guint8 *s, GArray *segs,
                           gboolean at_start, GArray *out)
{
  for (guint i = 0; i < segs->len; i++) {
    const TokSeg *g = &g_array_index(segs, TokSeg, i);
    if (g->match && g->end > g->start &&
        !tok_pretokenize(e, step + 1, s + g->start, g->end - g->start, at_start && g->start == 0,
                         out))
      return FALSE;
  }
  return TRUE;
}

static gboolean split_step(CohortEncoder *e, guint step, const TokPre *p, const guint8 *s, gsize n,
                           gboolean at_start, GArray *out)
{
  TokStep *st = e->scratch->pdata[step];
  g_array_set_size(st->segs, 0);
  if (p->kind == TOK_PRE_DIGITS) {
    digit_matches(s, n, st->segs);
    apply_behavior(st->segs, p->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS);
  } else {
    if (!find_matches(e, p, s, n, st->segs))
      return FALSE;
    if (p->invert)
      for (guint i = 0; i < st->segs->len; i++)
        g_array_index(st->segs, TokSeg, i).match ^= TRUE;
    apply_behavior(st->segs, p->behavior);
  }
  /* The pieces go to the next steps, which use their own scratch, never this step's. */
  return each_piece(e, step, s, st->segs, at_start, out);
}

static gboolean metaspace_step(CohortEncoder *e, guint step, const TokPre *p, const guint8 *s,
                               gsize n, gboolean at_start, GArray *out)
{
  TokStep *st = e->scratch->pdata[step];
  GByteArray *b = st->buf;
  gsize k = strlen(p->replacement);
  g_byte_array_set_size(b, 0);
  gboolean starts = n > 0 && (n >= k ? memcmp(s, p->replacement, k) == 0 : FALSE);
  if (!(n > 0 && s[0] == ' ') && !starts &&
      (p->prepend_scheme == TOK_PREPEND_ALWAYS ||
       (p->prepend_scheme == TOK_PREPEND_FIRST && at_start)))
    g_byte_array_append(b, (const guint8 *)p->replacement, (guint)k);
  for (gsize i = 0; i < n; i++) {
    if (s[i] == ' ')
      g_byte_array_append(b, (const guint8 *)p->replacement, (guint)k);
    else
      g_byte_array_append(b, s + i, 1);
  }
  const guint8 *t = b->data;
  gsize len = b->len;
  if (!p->split)
    return tok_pretokenize(e, step + 1, t, len, at_start, out);
  GArray *segs = st->segs;
  g_array_set_size(segs, 0);
  gsize prev = 0;
  for (const guint8 *hit; prev < len && (hit = memmem(t + prev, len - prev, p->replacement, k));) {
    gsize a = (gsize)(hit - t);
    if (a > prev)
      seg(segs, prev, a, FALSE);
    seg(segs, a, a + k, TRUE);
    prev = a + k;
  }
  if (prev < len)
    seg(segs, prev, len, FALSE);
  apply_behavior(segs, TOK_SPLIT_MERGED_WITH_NEXT);
  return each_piece(e, step, t, segs, at_start, out);
}

static gboolean bytelevel_step(CohortEncoder *e, guint step, const TokPre *p, const guint8 *s,
                               gsize n, gboolean at_start, GArray *out)
{
  TokStep *st = e->scratch->pdata[step];
  if (p->add_prefix_space && !(n > 0 && s[0] == ' ')) {
    g_byte_array_set_size(st->buf, 0);
    g_byte_array_append(st->buf, (const guint8 *)" ", 1);
    g_byte_array_append(st->buf, s, (guint)n);
    /* The prefixed text lives in this step's buffer while later steps split it. */
    TokPre plain = *p;
    plain.add_prefix_space = FALSE;
    return bytelevel_step(e, step, &plain, st->buf->data, st->buf->len, at_start, out);
  }
  if (!p->use_regex)
    return tok_pretokenize(e, step + 1, s, n, at_start, out);
  for (gsize i = 0; i < n;) {
    gsize end = bpe_piece_end(s, n, i);
    if (!tok_pretokenize(e, step + 1, s + i, end - i, at_start && i == 0, out))
      return FALSE;
    i = end;
  }
  return TRUE;
}

gboolean tok_pretokenize(CohortEncoder *e, guint step, const guint8 *s, gsize n, gboolean at_start,
                         GArray *out)
{
  const CohortTokenizer *t = e->t;
  if (n == 0)
    return TRUE;
  if (!t->pretoks || step >= t->pretoks->len) {
    bpe_encode_word(e, s, n, out);
    return TRUE;
  }
  const TokPre *p = t->pretoks->pdata[step];
  switch (p->kind) {
  case TOK_PRE_SPLIT:
  case TOK_PRE_DIGITS:
    return split_step(e, step, p, s, n, at_start, out);
  case TOK_PRE_METASPACE:
    return metaspace_step(e, step, p, s, n, at_start, out);
  case TOK_PRE_BYTELEVEL:
    return bytelevel_step(e, step, p, s, n, at_start, out);
  }
  return TRUE;
}
