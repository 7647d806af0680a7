/* The BPE model on one word (a piece of the pre-tokenizers). GPT-2's files merge as GPT-2's
 * bpe(): take the adjacent pair of lowest rank, merge every occurrence of it from left to
 * right, repeat until no pair has a rank. A tokenizer.json merges as the tokenizers library
 * does: one merge at a time, the lowest (rank, position) first. The two agree on every merge
 * list a trainer makes (a pair made by a merge can only rank after it); they differ only on
 * hand-made lists whose later ranks make tokens earlier ranks use. Short words do that on an
 * array; long ones (a run of a million spaces is one piece) use a heap of pairs so the work
 * stays n log n. Words start as one token per byte (byte-level tokenizers) or per character
 * (others; with byte_fallback a character outside the vocabulary becomes its <0xXX> tokens,
 * else the unknown token, fused with its neighbours under fuse_unk). Each encoder caches the
 * ids of the words it has seen. */
#include "data/tok-encoder.h"

#include <string.h>

/* Pieces up to this many bytes merge on an array (quadratic, fast when short). */
#define SHORT_PIECE 64
/* Pieces up to this many bytes are cached. */
#define CACHE_MAX_PIECE 128
#define CACHE_SLOTS     (1u << 16)
#define CACHE_MAX_USED  (CACHE_SLOTS / 4 * 3)
#define CACHE_MAX_BYTES (8u << 20)

CohortEncoder *cohort_encoder_new(const CohortTokenizer *t)
{
  CohortEncoder *e = g_new0(CohortEncoder, 1);
  e->t = t;
  e->slots = g_new0(CacheSlot, CACHE_SLOTS);
  e->keys = g_byte_array_new();
  e->vals = g_array_new(FALSE, FALSE, sizeof(gint32));
  e->work = g_array_new(FALSE, FALSE, sizeof(guint32));
  e->prev = g_array_new(FALSE, FALSE, sizeof(gint32));
  e->next = g_array_new(FALSE, FALSE, sizeof(gint32));
  e->heap = g_array_new(FALSE, FALSE, sizeof(guint64));
  e->changed = g_array_new(FALSE, FALSE, sizeof(guint32));
  e->matcher = tok_matcher_new();
  e->norm = g_byte_array_new();
  e->scratch = g_ptr_array_new_with_free_func(tok_step_free);
  for (guint i = 0; t->pretoks && i < t->pretoks->len; i++) {
    TokStep *st = g_new0(TokStep, 1);
    st->buf = g_byte_array_new();
    st->segs = g_array_new(FALSE, FALSE, sizeof(TokSeg));
    g_ptr_array_add(e->scratch, st);
  }
  return e;
}

void cohort_encoder_free(CohortEncoder *e)
{
  if (!e)
    return;
  g_free(e->slots);
  g_byte_array_unref(e->keys);
  g_array_unref(e->vals);
  g_array_unref(e->work);
  g_array_unref(e->prev);
  g_array_unref(e->next);
  g_array_unref(e->heap);
  g_array_unref(e->changed);
  tok_matcher_free(e->matcher);
  if (e->norm)
    g_byte_array_unref(e->norm);
  if (e->scratch)
    g_ptr_array_unref(e->scratch);
  g_clear_error(&e->error);
  g_free(e);
}

static inline guint64 mix(guint64 x)
{
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}

static guint64 hash_bytes(const guint8 *p, gsize n)
{
  guint64 h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    guint64 w;
    memcpy(&w, p, 8);
    h = mix(h ^ w) * 0x9E3779B97F4A7C15ull;
    p += 8;
    n -= 8;
  }
  guint64 w = 0;
  memcpy(&w, p, n);
  return mix(h ^ w ^ 0xFF51AFD7ED558CCDull);
}

static void cache_clear(CohortEncoder *e)
{
  memset(e->slots, 0, sizeof(CacheSlot) * CACHE_SLOTS);
  e->used = 0;
  g_byte_array_set_size(e->keys, 0);
  g_array_set_size(e->vals, 0);
}

/* The slot of piece p[0..n): the one holding it, or the empty one where it would go. */
static CacheSlot *cache_slot(CohortEncoder *e, const guint8 *p, gsize n, guint64 h)
{
  for (guint32 i = (guint32)h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
    CacheSlot *s = &e->slots[i];
    if (s->key_len == 0)
      return s;
    if (s->hash == h && s->key_len == n && memcmp(e->keys->data + s->key_off, p, n) == 0)
      return s;
  }
}

static void cache_put(CohortEncoder *e, CacheSlot *s, const guint8 *p, gsize n, guint64 h,
                      const guint32 *ids, guint m)
{
  *s = (CacheSlot){.hash = h,
                   .key_off = e->keys->len,
                   .val_off = e->vals->len,
                   .key_len = (guint16)n,
                   .val_len = (guint16)m};
  g_byte_array_append(e->keys, p, (guint)n);
  g_array_append_vals(e->vals, ids, m);
  e->used++;
}

/* GPT-2's loop on an array: the lowest-ranked pair, all its occurrences left to right. */
static guint merge_short(const CohortTokenizer *t, guint32 *ids, guint m)
{
  while (m > 1) {
    guint32 best = G_MAXUINT32, merged = 0;
    guint at = 0;
    for (guint i = 0; i + 1 < m; i++) {
      const BpeMerge *g = bpe_merge_find(t, ids[i], ids[i + 1]);
      if (g && g->rank < best) {
        best = g->rank;
        merged = g->merged;
        at = i;
      }
    }
    if (best == G_MAXUINT32)
      break;
    guint32 a = ids[at], b = ids[at + 1];
    guint w = at;
    for (guint i = at; i < m;) {
      if (i + 1 < m && ids[i] == a && ids[i + 1] == b) {
        ids[w++] = merged;
        i += 2;
      } else {
        ids[w++] = ids[i++];
      }
    }
    m = w;
  }
  return m;
}

static void heap_push(GArray *heap, guint64 v)
{
  g_array_append_val(heap, v);
  guint64 *h = (guint64 *)heap->data;
  for (guint i = heap->len - 1; i > 0;) {
    guint p = (i - 1) / 2;
    if (h[p] <= h[i])
      break;
    guint64 x = h[p];
    h[p] = h[i];
    h[i] = x;
    i = p;
  }
}

static guint64 heap_pop(GArray *heap)
{
  guint64 *h = (guint64 *)heap->data;
  guint64 top = h[0];
  h[0] = h[heap->len - 1];
  g_array_set_size(heap, heap->len - 1);
  guint n = heap->len;
  for (guint i = 0;;) {
    guint l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && h[l] < h[m])
      m = l;
    if (r < n && h[r] < h[m])
      m = r;
    if (m == i)
      break;
    guint64 x = h[m];
    h[m] = h[i];
    h[i] = x;
    i = m;
  }
  return top;
}

/* Pushes the pair starting at position p (when it has a next and a rank). */
static void push_pair(CohortEncoder *e, const guint32 *ids, const gint32 *next, gint32 p)
{
  if (p < 0 || next[p] < 0)
    return;
  const BpeMerge *g = bpe_merge_find(e->t, ids[p], ids[next[p]]);
  if (g)
    heap_push(e->heap, (guint64)g->rank << 32 | (guint32)p);
}

/* The same merges as merge_short for a long piece, n log n: positions keep their index in a
 * linked list; each round takes every heap entry of the lowest rank in position order and
 * merges those still valid, then adds the pairs the merges made. */
static guint merge_long(CohortEncoder *e, guint32 *ids, guint m)
{
  g_array_set_size(e->prev, m);
  g_array_set_size(e->next, m);
  g_array_set_size(e->heap, 0);
  gint32 *prev = (gint32 *)e->prev->data, *next = (gint32 *)e->next->data;
  for (guint i = 0; i < m; i++) {
    prev[i] = (gint32)i - 1;
    next[i] = i + 1 < m ? (gint32)i + 1 : -1;
  }
  for (guint i = 0; i + 1 < m; i++)
    push_pair(e, ids, next, (gint32)i);
  while (e->heap->len > 0) {
    guint32 rank = (guint32)(g_array_index(e->heap, guint64, 0) >> 32);
    const BpeMerge *g = NULL;
    g_array_set_size(e->changed, 0);
    while (e->heap->len > 0 && (guint32)(g_array_index(e->heap, guint64, 0) >> 32) == rank) {
      gint32 p = (gint32)(guint32)heap_pop(e->heap);
      gint32 q = next[p];
      /* prev[p] == -2 marks a position merged into its left neighbour. */
      if (prev[p] == -2 || q < 0)
        continue;
      const BpeMerge *h = bpe_merge_find(e->t, ids[p], ids[q]);
      if (!h || h->rank != rank || (g && h != g))
        continue;
      g = h;
      ids[p] = h->merged;
      next[p] = next[q];
      if (next[q] >= 0)
        prev[next[q]] = p;
      prev[q] = -2;
      g_array_append_val(e->changed, p);
    }
    for (guint k = 0; k < e->changed->len; k++) {
      gint32 p = g_array_index(e->changed, gint32, k);
      push_pair(e, ids, next, prev[p]);
      push_pair(e, ids, next, p);
    }
  }
  guint w = 0;
  for (gint32 p = 0; p >= 0; p = next[p])
    ids[w++] = ids[p];
  return w;
}

/* The tokenizers library's loop on an array: the lowest (rank, position) pair, merged once. */
static guint merge_short_hf(const CohortTokenizer *t, guint32 *ids, guint m)
{
  while (m > 1) {
    guint32 best = G_MAXUINT32, merged = 0;
    guint at = 0;
    for (guint i = 0; i + 1 < m; i++) {
      const BpeMerge *g = bpe_merge_find(t, ids[i], ids[i + 1]);
      if (g && g->rank < best) {
        best = g->rank;
        merged = g->merged;
        at = i;
      }
    }
    if (best == G_MAXUINT32)
      break;
    ids[at] = merged;
    memmove(ids + at + 1, ids + at + 2, (m - at - 2) * sizeof *ids);
    m--;
  }
  return m;
}

/* The same for long words, n log n: positions keep their index in a linked list; the heap
 * gives the lowest (rank, position); an entry whose pair changed since is passed over. */
static guint merge_long_hf(CohortEncoder *e, guint32 *ids, guint m)
{
  g_array_set_size(e->prev, m);
  g_array_set_size(e->next, m);
  g_array_set_size(e->heap, 0);
  gint32 *prev = (gint32 *)e->prev->data, *next = (gint32 *)e->next->data;
  for (guint i = 0; i < m; i++) {
    prev[i] = (gint32)i - 1;
    next[i] = i + 1 < m ? (gint32)i + 1 : -1;
  }
  for (guint i = 0; i + 1 < m; i++)
    push_pair(e, ids, next, (gint32)i);
  while (e->heap->len > 0) {
    guint64 top = heap_pop(e->heap);
    guint32 rank = (guint32)(top >> 32);
    gint32 p = (gint32)(guint32)top, q = next[p];
    /* prev[p] == -2 marks a position merged into its left neighbour. */
    if (prev[p] == -2 || q < 0)
      continue;
    const BpeMerge *g = bpe_merge_find(e->t, ids[p], ids[q]);
    if (!g || g->rank != rank)
      continue;
    ids[p] = g->merged;
    next[p] = next[q];
    if (next[q] >= 0)
      prev[next[q]] = p;
    prev[q] = -2;
    push_pair(e, ids, next, prev[p]);
    push_pair(e, ids, next, p);
  }
  guint w = 0;
  for (gint32 p = 0; p >= 0; p = next[p])
    ids[w++] = ids[p];
  return w;
}

/* The character at s[i]: its code point and length, or G_MAXUINT32 and 1 for a byte that does
 * not begin a valid character. */
static gunichar char_at(const guint8 *s, gsize n, gsize i, gsize *len)
{
  gunichar c = g_utf8_get_char_validated((const char *)s + i, (gssize)(n - i));
  if (c == (gunichar)-1 || c == (gunichar)-2) {
    *len = 1;
    return G_MAXUINT32;
  }
  *len = (gsize)(g_utf8_next_char((const char *)s + i) - ((const char *)s + i));
  return c;
}

/* One symbol per character (the tokenizers library's merge_word): the character's token,
 * else its bytes' <0xXX> tokens (byte_fallback), else the unknown token (fused with the one
 * before under fuse_unk), else nothing. Returns the number of symbols in ids. */
static guint char_symbols(const CohortTokenizer *t, const guint8 *s, gsize n, guint32 *ids)
{
  guint m = 0;
  gboolean unk = FALSE; /* an unknown token waits (the library adds it with the next known) */
  for (gsize i = 0; i < n;) {
    gsize len;
    gunichar c = char_at(s, n, i, &len);
    gpointer v = c == G_MAXUINT32 ? NULL : g_hash_table_lookup(t->char_ids, GUINT_TO_POINTER(c));
    if (v) {
      if (unk)
        ids[m++] = (guint32)t->unk_id;
      unk = FALSE;
      ids[m++] = (guint32)(GPOINTER_TO_UINT(v) - 1);
    } else {
      gboolean bytes = t->byte_fallback;
      for (gsize k = 0; bytes && k < len; k++)
        bytes = t->byte_token[s[i + k]] >= 0;
      if (bytes) {
        for (gsize k = 0; k < len; k++)
          ids[m++] = (guint32)t->byte_token[s[i + k]];
      } else if (t->unk_id >= 0) {
        if (unk && !t->fuse_unk)
          ids[m++] = (guint32)t->unk_id;
        unk = TRUE;
      }
    }
    i += len;
  }
  if (unk)
    ids[m++] = (guint32)t->unk_id;
  return m;
}

/* One word (or a part of one, `whole` FALSE: ignore_merges looks at whole words only). */
static void encode_piece(CohortEncoder *e, const guint8 *p, gsize n, gboolean whole, GArray *out)
{
  const CohortTokenizer *t = e->t;
  if (n == 1 && t->byte_level) {
    g_array_append_val(out, t->byte_id[p[0]]);
    return;
  }
  if (t->ignore_merges && whole) {
    gint32 id = bpe_word_find(t, p, n);
    if (id >= 0) {
      g_array_append_val(out, id);
      return;
    }
  }
  guint64 h = 0;
  CacheSlot *slot = NULL;
  if (n <= CACHE_MAX_PIECE) {
    h = hash_bytes(p, n);
    slot = cache_slot(e, p, n, h);
    if (slot->key_len) {
      g_array_append_vals(out, &g_array_index(e->vals, gint32, slot->val_off), slot->val_len);
      return;
    }
  }
  /* A character may become up to four byte tokens; never more than n symbols in all. */
  g_array_set_size(e->work, (guint)n);
  guint32 *ids = (guint32 *)e->work->data;
  guint m = (guint)n;
  if (t->byte_level) {
    for (gsize i = 0; i < n; i++)
      ids[i] = (guint32)t->byte_id[p[i]];
  } else {
    m = char_symbols(t, p, n, ids);
  }
  if (!t->pipeline)
    m = m <= SHORT_PIECE ? merge_short(t, ids, m) : merge_long(e, ids, m);
  else
    m = m <= SHORT_PIECE ? merge_short_hf(t, ids, m) : merge_long_hf(e, ids, m);
  g_array_append_vals(out, ids, m);
  if (slot && m <= G_MAXUINT16) {
    if (e->used >= CACHE_MAX_USED || e->keys->len + n > CACHE_MAX_BYTES) {
      cache_clear(e);
      slot = cache_slot(e, p, n, h);
    }
    cache_put(e, slot, p, n, h, ids, m);
  }
}

/* A word without a safe place to cut for more than the limit: cut anyway at a character
 * boundary, and count it. */
static void encode_capped(CohortEncoder *e, const guint8 *p, gsize n, gboolean whole, GArray *out)
{
  while (n > COHORT_TOKENIZER_MAX_WORD) {
    gsize cut = COHORT_TOKENIZER_MAX_WORD;
    while (cut > 1 && (p[cut] & 0xC0) == 0x80)
      cut--;
    e->pieces_cut++;
    encode_piece(e, p, cut, FALSE, out);
    p += cut;
    n -= cut;
    whole = FALSE;
  }
  if (n > 0)
    encode_piece(e, p, n, whole, out);
}

void bpe_encode_word(CohortEncoder *e, const guint8 *p, gsize n, GArray *out)
{
  const CohortTokenizer *t = e->t;
  const char *sep = t->word_cut;
  if (!sep || n <= 1) {
    encode_capped(e, p, n, TRUE, out);
    return;
  }
  if (t->ignore_merges) {
    gint32 id = bpe_word_find(t, p, n);
    if (id >= 0) {
      g_array_append_val(out, id);
      return;
    }
  }
  /* No token holds the separator after another character (tok-cut.c checked), so no merge
   * crosses a place where it follows another character: the word's parts between such places
   * merge as the whole would, each on its own, short and cached (Llama 2's pipeline has no
   * pre-tokenizer: a whole section is one word). */
  gsize k = strlen(sep), start = 0;
  for (gsize i = k; i + k <= n; i++) {
    if (p[i] == (guint8)sep[0] && memcmp(p + i, sep, k) == 0 && memcmp(p + i - k, sep, k) != 0) {
      encode_capped(e, p + start, i - start, FALSE, out);
      start = i;
      i += k - 1;
    }
  }
  encode_capped(e, p + start, n - start, start == 0, out);
}
