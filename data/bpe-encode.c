/* Encoding: the GPT-2 split into pieces, then byte-pair merges within each piece in rank
 * order, as GPT-2's bpe(): take the adjacent pair of lowest rank, merge every occurrence of it
 * from left to right, repeat until no pair has a rank. Short pieces do exactly that on an
 * array; long ones (a run of a million spaces is one piece) use a heap of pairs so the work
 * stays n log n, merging one rank's occurrences as a batch in position order, which gives the
 * same result. Each encoder caches the ids of the pieces it has seen. */
#include "data/bpe-private.h"

#include <string.h>

/* Pieces up to this many bytes merge on an array (quadratic, fast when short). */
#define SHORT_PIECE 64
/* Pieces up to this many bytes are cached. */
#define CACHE_MAX_PIECE 128
#define CACHE_SLOTS     (1u << 16)
#define CACHE_MAX_USED  (CACHE_SLOTS / 4 * 3)
#define CACHE_MAX_BYTES (8u << 20)

typedef struct {
  guint64 hash;
  guint32 key_off, val_off;
  guint16 key_len, val_len; /* key_len 0: empty slot */
} CacheSlot;

struct CohortEncoder {
  const CohortTokenizer *t;
  CacheSlot *slots;
  guint32 used;
  GByteArray *keys; /* the cached pieces' bytes */
  GArray *vals;     /* their ids (gint32) */
  GArray *work;     /* guint32 ids being merged */
  /* long pieces: a doubly linked list over positions and a heap of (rank << 32 | position) */
  GArray *prev, *next, *heap, *changed;
};

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

static void encode_piece(CohortEncoder *e, const guint8 *p, gsize n, GArray *out)
{
  const CohortTokenizer *t = e->t;
  if (n == 1) {
    g_array_append_val(out, t->byte_id[p[0]]);
    return;
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
  g_array_set_size(e->work, (guint)n);
  guint32 *ids = (guint32 *)e->work->data;
  for (gsize i = 0; i < n; i++)
    ids[i] = (guint32)t->byte_id[p[i]];
  guint m = n <= SHORT_PIECE ? merge_short(t, ids, (guint)n) : merge_long(e, ids, (guint)n);
  g_array_append_vals(out, ids, m);
  if (slot) {
    if (e->used >= CACHE_MAX_USED || e->keys->len + n > CACHE_MAX_BYTES) {
      cache_clear(e);
      slot = cache_slot(e, p, n, h);
    }
    cache_put(e, slot, p, n, h, ids, m);
  }
}

static void encode_plain(CohortEncoder *e, const guint8 *s, gsize len, GArray *ids)
{
  for (gsize i = 0; i < len;) {
    gsize end = bpe_piece_end(s, len, i);
    encode_piece(e, s + i, end - i, ids);
    i = end;
  }
}

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

void cohort_encoder_encode(CohortEncoder *e, const char *text, gsize len, gboolean allow_special,
                           GArray *ids)
{
  const guint8 *s = (const guint8 *)text;
  if (!allow_special || e->t->special_text->len == 0) {
    encode_plain(e, s, len, ids);
    return;
  }
  for (gsize i = 0; i < len;) {
    gsize at;
    int k = next_special(e->t, s, len, i, &at);
    encode_plain(e, s + i, at - i, ids);
    if (k < 0)
      break;
    g_array_append_val(ids, g_array_index(e->t->special_id, gint32, k));
    i = at + g_bytes_get_size(e->t->special_text->pdata[k]);
  }
}

int *cohort_tokenizer_encode(const CohortTokenizer *t, const char *text, gsize len,
                             gboolean allow_special, gsize *n)
{
  g_autoptr(CohortEncoder) e = cohort_encoder_new(t);
  GArray *ids = g_array_new(FALSE, FALSE, sizeof(gint32));
  cohort_encoder_encode(e, text, len, allow_special, ids);
  *n = ids->len;
  return (int *)g_array_free(ids, FALSE);
}
