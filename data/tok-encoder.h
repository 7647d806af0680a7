/* One thread's encoder (internal to data/): the piece cache and the scratch memory of the
 * model (data/bpe-encode.c), the pre-tokenizers (data/tok-pretok.c) and the pipeline
 * (data/tok-encode.c). */
#pragma once

#include "data/bpe-private.h"

/* Words (pieces the model sees) longer than this many bytes are cut before the merges, where
 * the tokenizer allows without changing ids (TokenizerJSON's word_cut), else anywhere at a
 * character boundary (counted in pieces_cut): the merges' memory stays bounded. */
#define COHORT_TOKENIZER_MAX_WORD (1u << 20)

/* Scratch memory of one pre-tokenizer step (its output text and its segments). */
typedef struct {
  GByteArray *buf;
  GArray *segs; /* TokSeg */
} TokStep;

typedef struct {
  gsize start, end;
  gboolean match;
} TokSeg;

void tok_step_free(gpointer p);

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
  /* the pipeline */
  TokMatcher *matcher;
  GByteArray *norm;   /* a section, normalized */
  GPtrArray *scratch; /* TokStep per pre-tokenizer step */
  guint64 pieces_cut; /* words cut where the tokenizer does not allow it */
  GError *error;      /* the first failure of a pre-tokenizer's regular expression */
};

/* The model on one word (model-space bytes: raw bytes for byte-level tokenizers, UTF-8
 * otherwise): ids appended to `out`. Words longer than COHORT_TOKENIZER_MAX_WORD are cut. */
void bpe_encode_word(CohortEncoder *e, const guint8 *p, gsize n, GArray *out);

/* The pre-tokenizers from step `step` on, then the model, on s[0..n); `at_start`: the piece
 * begins the whole input (Metaspace's prepend_scheme "first"). FALSE when a regular
 * expression failed (e->error set). */
gboolean tok_pretokenize(CohortEncoder *e, guint step, const guint8 *s, gsize n, gboolean at_start,
                         GArray *out);
