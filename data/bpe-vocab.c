/* The tokenizer's tables: GPT-2's byte alphabet, the merge table, token bytes and decoding. */
#include "data/bpe-private.h"

#include <string.h>

/* clang-format off */
G_DEFINE_QUARK(cohort-tokenizer-error-quark, cohort_tokenizer_error)
/* clang-format on */

static gunichar byte_chars[256];
static gint16 char_bytes[512]; /* code points below 512 → byte, or -1 */

/* GPT-2's bytes_to_unicode: the printable bytes of Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ')
 * stand for themselves, the other 68 bytes for 256, 257, … in byte order, so every byte has
 * a printable character and vocab.json can be a JSON object of strings. */
static void init_alphabet(void)
{
  static gsize done = 0;
  if (!g_once_init_enter(&done))
    return;
  gunichar next = 256;
  for (int b = 0; b < 256; b++) {
    gboolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    byte_chars[b] = printable ? (gunichar)b : next++;
  }
  for (int c = 0; c < 512; c++)
    char_bytes[c] = -1;
  for (int b = 0; b < 256; b++)
    char_bytes[byte_chars[b]] = (gint16)b;
  g_once_init_leave(&done, 1);
}

const gunichar *bpe_byte_chars(void)
{
  init_alphabet();
  return byte_chars;
}

int bpe_char_byte(gunichar c)
{
  init_alphabet();
  return c < 512 ? char_bytes[c] : -1;
}

void bpe_merges_alloc(CohortTokenizer *t, guint32 n_merges)
{
  guint32 cap = 16;
  while (cap < 2 * (n_merges + 1))
    cap *= 2;
  t->merges = g_new(BpeMerge, cap);
  for (guint32 i = 0; i < cap; i++)
    t->merges[i].key = BPE_NO_KEY;
  t->merge_mask = cap - 1;
}

void bpe_merges_insert(CohortTokenizer *t, guint32 a, guint32 b, guint32 rank, guint32 merged)
{
  guint64 key = (guint64)a << 32 | b;
  guint64 h = key * 0x9E3779B97F4A7C15ull;
  for (guint32 i = (guint32)(h >> 32) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
    BpeMerge *m = &t->merges[i];
    if (m->key == BPE_NO_KEY)
      t->n_merges++;
    if (m->key == BPE_NO_KEY || m->key == key) {
      *m = (BpeMerge){.key = key, .rank = rank, .merged = merged};
      return;
    }
  }
}

gboolean bpe_tables_build(CohortTokenizer *t, const char *source, GError **error)
{
  for (int b = 0; b < 256; b++)
    t->byte_id[b] = -1;
  for (int id = 0; id < t->n_ids; id++) {
    if (t->spans[id].len == 1) {
      guint8 b = t->blob[t->spans[id].offset];
      /* A special token of one byte is not the byte's token. */
      if (t->byte_id[b] < 0)
        t->byte_id[b] = id;
    }
  }
  for (int b = 0; b < 256; b++) {
    if (t->byte_id[b] < 0) {
      g_set_error(error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT,
                  "%s: the vocabulary has no token for byte 0x%02x; byte-level BPE needs one for "
                  "each of the 256 bytes",
                  source, b);
      return FALSE;
    }
  }
  return TRUE;
}

void cohort_tokenizer_free(CohortTokenizer *t)
{
  if (!t)
    return;
  g_free(t->blob);
  g_free(t->spans);
  g_free(t->merges);
  if (t->special_text)
    g_ptr_array_unref(t->special_text);
  if (t->special_id)
    g_array_unref(t->special_id);
  g_free(t->sha256);
  g_strfreev(t->files);
  if (t->exports)
    g_ptr_array_unref(t->exports);
  if (t->char_ids)
    g_hash_table_unref(t->char_ids);
  g_free(t->word_table);
  if (t->normalizers)
    g_ptr_array_unref(t->normalizers);
  if (t->pretoks)
    g_ptr_array_unref(t->pretoks);
  if (t->decoders)
    g_ptr_array_unref(t->decoders);
  tok_added_set_free(t->added_raw);
  tok_added_set_free(t->added_norm);
  if (t->post.prefix)
    g_array_unref(t->post.prefix);
  if (t->post.suffix)
    g_array_unref(t->post.suffix);
  g_free(t->word_cut);
  g_free(t->bos_token);
  g_free(t->eos_token);
  g_free(t->chat_template);
  g_free(t);
}

int cohort_tokenizer_vocab_size(const CohortTokenizer *t)
{
  return t->n_ids;
}

int cohort_tokenizer_eot(const CohortTokenizer *t)
{
  return t->eot;
}

const char *cohort_tokenizer_sha256(const CohortTokenizer *t)
{
  return t->sha256;
}

const char *const *cohort_tokenizer_files(const CohortTokenizer *t)
{
  return (const char *const *)t->files;
}

const char *cohort_tokenizer_kind(const CohortTokenizer *t)
{
  return t->kind;
}

const guint8 *cohort_tokenizer_token_bytes(const CohortTokenizer *t, int id, gsize *len)
{
  if (id < 0 || id >= t->n_ids)
    return NULL;
  *len = t->spans[id].len;
  return t->blob + t->spans[id].offset;
}

guint64 bpe_hash_bytes(const guint8 *p, gsize n)
{
  guint64 h = 0xCBF29CE484222325ull ^ n;
  for (gsize i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001B3ull;
  return h ^ (h >> 29);
}

void bpe_word_table_build(CohortTokenizer *t, const gboolean *in_model)
{
  guint32 cap = 16;
  while (cap < 2 * (guint32)t->n_ids + 2)
    cap *= 2;
  t->word_table = g_new0(guint32, cap);
  t->word_mask = cap - 1;
  for (int id = 0; id < t->n_ids; id++) {
    if (!in_model[id])
      continue;
    const BpeSpan *s = &t->spans[id];
    guint64 h = bpe_hash_bytes(t->blob + s->offset, s->len);
    guint32 i = (guint32)h & t->word_mask;
    while (t->word_table[i])
      i = (i + 1) & t->word_mask;
    t->word_table[i] = (guint32)id + 1;
  }
}

gint32 bpe_word_find(const CohortTokenizer *t, const guint8 *p, gsize n)
{
  if (!t->word_table)
    return -1;
  guint64 h = bpe_hash_bytes(p, n);
  for (guint32 i = (guint32)h & t->word_mask; t->word_table[i]; i = (i + 1) & t->word_mask) {
    guint32 id = t->word_table[i] - 1;
    const BpeSpan *s = &t->spans[id];
    if (s->len == n && memcmp(t->blob + s->offset, p, n) == 0)
      return (gint32)id;
  }
  return -1;
}
