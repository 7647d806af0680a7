/* Encoding a text. GPT-2's files: the GPT-2 split, then merges; special tokens only where
 * asked. A tokenizer.json: the tokenizers library's pipeline, in its order: added tokens found
 * in the raw text (special ones only where asked), each section between them normalized, then
 * the added tokens whose content is normalized found in it, then the pre-tokenizers and the
 * model on each piece; the post-processor's tokens around the whole when asked. */
#include "data/tok-encoder.h"

#include <string.h>

/* The first special token in s[from..len): its index in t->special_text and start, or -1. */
static int next_special(const CohortTokenizer *t, const guint8 *s, gsize len, gsize from, gsize *at)
{
  int found = -1;
  gsize best = len;
  for (guint k = 0; k < t->special_text->len; k++) {
    gsize n;
    const guint8 *sp = g_bytes_get_data(t->special_text->pdata[k], &n);
    if (n == 0 || n > len - from)
      continue;
    const guint8 *hit = memmem(s + from, len - from, sp, n);
    /* Strictly earlier only: the list is longest first, so a tie keeps the longer one. */
    if (hit && (gsize)(hit - s) < best) {
      best = (gsize)(hit - s);
      found = (int)k;
    }
  }
  *at = best;
  return found;
}

static void encode_gpt2_plain(CohortEncoder *e, const guint8 *s, gsize len, GArray *ids)
{
  for (gsize i = 0; i < len;) {
    gsize end = bpe_piece_end(s, len, i);
    bpe_encode_word(e, s + i, end - i, ids);
    i = end;
  }
}

static void encode_gpt2(CohortEncoder *e, const guint8 *s, gsize len, gboolean special, GArray *ids)
{
  if (!special || e->t->special_text->len == 0) {
    encode_gpt2_plain(e, s, len, ids);
    return;
  }
  for (gsize i = 0; i < len;) {
    gsize at;
    int k = next_special(e->t, s, len, i, &at);
    encode_gpt2_plain(e, s + i, at - i, ids);
    if (k < 0)
      break;
    g_array_append_val(ids, g_array_index(e->t->special_id, gint32, k));
    i = at + g_bytes_get_size(e->t->special_text->pdata[k]);
  }
}

/* A section (text between added tokens): normalized, split by the normalized added tokens,
 * pre-tokenized and merged. */
static gboolean encode_section(CohortEncoder *e, const guint8 *s, gsize n, gboolean at_start,
                               gboolean skip_prepend, gboolean special, GArray *ids)
{
  const CohortTokenizer *t = e->t;
  if (n == 0)
    return TRUE;
  if (t->normalizers && t->normalizers->len > 0) {
    if (!tok_normalize(t->normalizers, e->matcher, s, n, skip_prepend, e->norm, &e->error))
      return FALSE;
    s = e->norm->data;
    n = e->norm->len;
  }
  if (tok_added_set_size(t->added_norm) == 0)
    return tok_pretokenize(e, 0, s, n, at_start, ids);
  for (gsize i = 0; i <= n;) {
    gsize a = n, b = n;
    const TokAdded *hit = NULL;
    gboolean found = tok_added_next(t->added_norm, s, n, i, i, special, &a, &b, &hit);
    if (!tok_pretokenize(e, 0, s + i, a - i, at_start && i == 0, ids))
      return FALSE;
    if (!found)
      break;
    g_array_append_val(ids, hit->id);
    i = b;
  }
  return TRUE;
}

static gboolean encode_pipeline(CohortEncoder *e, const guint8 *s, gsize len, guint flags,
                                GArray *ids)
{
  const CohortTokenizer *t = e->t;
  gboolean special = (flags & COHORT_ENCODE_SPECIAL) != 0;
  gboolean cont = (flags & COHORT_ENCODE_CONTINUES) != 0;
  if (flags & COHORT_ENCODE_ADD_SPECIAL)
    g_array_append_vals(ids, t->post.prefix->data, t->post.prefix->len);
  for (gsize i = 0; i <= len;) {
    gsize a = len, b = len;
    const TokAdded *hit = NULL;
    gboolean found = tok_added_next(t->added_raw, s, len, i, i, special, &a, &b, &hit);
    if (!encode_section(e, s + i, a - i, i == 0 && !cont, i == 0 && cont, special, ids))
      return FALSE;
    if (!found)
      break;
    g_array_append_val(ids, hit->id);
    i = b;
  }
  if (flags & COHORT_ENCODE_ADD_SPECIAL)
    g_array_append_vals(ids, t->post.suffix->data, t->post.suffix->len);
  return TRUE;
}

gboolean cohort_encoder_encode(CohortEncoder *e, const char *text, gsize len, guint flags,
                               GArray *ids, GError **error)
{
  const guint8 *s = (const guint8 *)text;
  if (!e->t->pipeline) {
    encode_gpt2(e, s, len, (flags & COHORT_ENCODE_SPECIAL) != 0, ids);
    return TRUE;
  }
  guint before = ids->len;
  if (encode_pipeline(e, s, len, flags, ids))
    return TRUE;
  g_array_set_size(ids, before);
  if (e->error)
    g_propagate_error(error, g_steal_pointer(&e->error));
  else
    g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_REGEX, "encoding failed");
  return FALSE;
}

guint64 cohort_encoder_pieces_cut(const CohortEncoder *e)
{
  return e->pieces_cut;
}

int *cohort_tokenizer_encode(const CohortTokenizer *t, const char *text, gsize len, guint flags,
                             gsize *n, GError **error)
{
  g_autoptr(CohortEncoder) e = cohort_encoder_new(t);
  g_autoptr(GArray) ids = g_array_new(FALSE, FALSE, sizeof(gint32));
  *n = 0;
  if (!cohort_encoder_encode(e, text, len, flags, ids, error))
    return NULL;
  *n = ids->len;
  if (ids->len == 0)
    return g_new0(int, 1); /* never NULL on success */
  return (int *)g_array_free(g_steal_pointer(&ids), FALSE);
}
