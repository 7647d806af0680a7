/* Where text may be cut so that its parts, each encoded on its own (a continuing part with
 * COHORT_ENCODE_CONTINUES), give the ids of the whole: threads and ranks share documents this
 * way. The rule is decided once per tokenizer from its pipeline, and only where the reason
 * is known to hold:
 *   - GPT-2's split, or a Split by GPT-2's, Llama 3's or Qwen2's pattern: before a space
 *     between two printable ASCII characters, and after a newline between two non-spaces
 *     (each begins a piece whatever follows);
 *   - Metaspace that splits: before such a space (it becomes the replacement character, which
 *     begins a piece);
 *   - no split at all (Llama 2's pipeline: the whole section is one word): before such a
 *     space, when no token of the vocabulary holds the character a space becomes after
 *     another character (so no merge crosses it) and ignore_merges is off.
 * Normalizers must keep to one character at a time (Unicode forms, Lowercase, Prepend, a
 * one-character Replace), and added tokens must neither strip nor hold white space. Anything
 * else: documents are not cut (tokenize-job.c then cuts a long run where it must and says so). */
#include "data/tok-encoder.h"

#include <string.h>

static const char *const known_patterns[] = {
    /* GPT-2 */
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    /* Llama 3 (and GPT-4's cl100k) */
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    /* Qwen2, Qwen3 */
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

static gboolean known_split(const TokPre *p)
{
  if (p->kind != TOK_PRE_SPLIT || !p->regex || p->invert || p->behavior != TOK_SPLIT_ISOLATED)
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS(known_patterns); i++)
    if (strcmp(tok_regex_pattern(p->regex), known_patterns[i]) == 0)
      return TRUE;
  return FALSE;
}

/* Whether the normalizers work one character at a time; *space gets what a space becomes. */
static gboolean local_normalizers(const CohortTokenizer *t, const char **space)
{
  for (guint i = 0; i < t->normalizers->len; i++) {
    const TokNorm *n = t->normalizers->pdata[i];
    if (n->kind == TOK_NORM_STRIP || (n->kind == TOK_NORM_REPLACE && !n->text))
      return FALSE;
    if (n->kind == TOK_NORM_REPLACE) {
      if (g_utf8_strlen(n->text, -1) != 1)
        return FALSE;
      if (strcmp(n->text, *space) == 0)
        *space = n->content;
    }
  }
  return TRUE;
}

/* Whether no model token holds `sep` after another character, and `sep` is a token of its
 * own (so it never falls back to bytes or the unknown token). */
static gboolean separator_safe(const CohortTokenizer *t, const gboolean *in_model, const char *sep)
{
  gsize k = strlen(sep);
  if (k == 0 || k > 4)
    return FALSE;
  if (t->byte_level ? k != 1 || t->byte_id[(guint8)sep[0]] < 0
                    : !g_hash_table_contains(t->char_ids, GUINT_TO_POINTER(g_utf8_get_char(sep))))
    return FALSE;
  for (int id = 0; id < t->n_ids; id++) {
    if (!in_model[id])
      continue;
    const guint8 *p = t->blob + t->spans[id].offset;
    gsize n = t->spans[id].len;
    for (gsize i = k; i + k <= n; i++)
      if (memcmp(p + i, sep, k) == 0 && memcmp(p + i - k, sep, k) != 0)
        return FALSE;
  }
  return TRUE;
}

void tok_decide_cuts(CohortTokenizer *t, const gboolean *in_model)
{
  t->cut_rule = TOK_CUT_NONE;
  const char *space = " ";
  gboolean local = local_normalizers(t, &space);
  gboolean splits = FALSE, splits_newline = FALSE, unknown = FALSE;
  for (guint i = 0; i < t->pretoks->len; i++) {
    const TokPre *p = t->pretoks->pdata[i];
    if (known_split(p) || (p->kind == TOK_PRE_BYTELEVEL && p->use_regex)) {
      splits = splits_newline = TRUE;
    } else if (p->kind == TOK_PRE_METASPACE) {
      if (strcmp(space, " ") != 0)
        unknown = TRUE; /* a normalizer replaced spaces already */
      space = p->replacement;
      splits |= p->split;
    } else if (p->kind != TOK_PRE_DIGITS && p->kind != TOK_PRE_BYTELEVEL) {
      unknown = TRUE;
    }
  }
  /* Inside a word: before the separator, when no merge can cross it. */
  if (separator_safe(t, in_model, space))
    t->word_cut = g_strdup(space);
  if (!local || unknown || tok_added_set_touches_space(t->added_raw) ||
      tok_added_set_touches_space(t->added_norm))
    return;
  if (splits)
    t->cut_rule = splits_newline ? TOK_CUT_SPACE_NEWLINE : TOK_CUT_SPACE;
  else if (t->word_cut && !t->ignore_merges)
    t->cut_rule = TOK_CUT_SPACE;
}

gsize cohort_tokenizer_safe_cut(const CohortTokenizer *t, const char *text, gsize len, gsize want)
{
  int rule = t ? (int)t->cut_rule : TOK_CUT_SPACE_NEWLINE;
  if (rule == TOK_CUT_NONE)
    return len;
  bpe_split_init();
  const guint8 *s = (const guint8 *)text;
  for (gsize p = MAX(want, 2); p + 1 < len; p++)
    if (bpe_cut_at(rule, s, len, p))
      return p;
  return len;
}

gsize cohort_tokenizer_safe_cut_before(const CohortTokenizer *t, const char *text, gsize len,
                                       gsize want, gsize floor)
{
  int rule = t ? (int)t->cut_rule : TOK_CUT_SPACE_NEWLINE;
  if (rule == TOK_CUT_NONE)
    return floor;
  bpe_split_init();
  const guint8 *s = (const guint8 *)text;
  for (gsize p = MIN(want, len); p > floor; p--)
    if (bpe_cut_at(rule, s, len, p))
      return p;
  return floor;
}

gboolean cohort_tokenizer_cuts_documents(const CohortTokenizer *t)
{
  return !t || t->cut_rule != TOK_CUT_NONE;
}
