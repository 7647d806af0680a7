/* The tokenizer's tables, shared by the files of data/bpe-*.c (internal to data/). */
#pragma once

#include "data/tokenizer.h"

/* One token's bytes, in CohortTokenizer.blob. */
typedef struct {
  guint32 offset, len;
} BpeSpan;

/* Merges as an open-addressing table: key (left id << 32 | right id) → rank and merged id. */
#define BPE_NO_KEY G_MAXUINT64
typedef struct {
  guint64 key;
  guint32 rank, merged;
} BpeMerge;

struct CohortTokenizer {
  int n_ids;
  guint8 *blob;
  BpeSpan *spans; /* [n_ids] */
  gint32 byte_id[256];
  BpeMerge *merges; /* [merge_mask + 1] */
  guint32 merge_mask;
  guint32 n_merges;
  /* Special (added) tokens, longest first, so that the longest match wins. */
  GPtrArray *special_text; /* of GBytes */
  GArray *special_id;      /* of gint32 */
  int eot;
  char *sha256;
  char **files;
  const char *kind;
  GPtrArray *exports; /* of BpeFile: what cohort_tokenizer_export writes */
};

/* A file the tokenizer was read from (or found beside it), as read. */
typedef struct {
  char *name; /* the name Hugging Face gives it: tokenizer.json, vocab.json, … */
  GBytes *bytes;
} BpeFile;

/* The merge of ids (a, b), or NULL when there is none. */
static inline const BpeMerge *bpe_merge_find(const CohortTokenizer *t, guint32 a, guint32 b)
{
  guint64 key = (guint64)a << 32 | b;
  guint64 h = key * 0x9E3779B97F4A7C15ull;
  for (guint32 i = (guint32)(h >> 32) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
    const BpeMerge *m = &t->merges[i];
    if (m->key == key)
      return m;
    if (m->key == BPE_NO_KEY)
      return NULL;
  }
}

/* Builds the tables from a vocabulary (token bytes by id, all ids 0..n-1 present) and merges
 * given as pairs of ids in rank order (a later copy of a pair replaces an earlier one, as
 * GPT-2's, Hugging Face's and the JavaScript encoder's dictionaries do); `merged` is the id of
 * each merge's result. Errors name `source`. Takes `blob` and `spans`. */
gboolean bpe_tables_build(CohortTokenizer *t, const char *source, GError **error);
void bpe_merges_insert(CohortTokenizer *t, guint32 a, guint32 b, guint32 rank, guint32 merged);
void bpe_merges_alloc(CohortTokenizer *t, guint32 n_merges);

/* The length of the piece starting at text[i] (i < len), by the GPT-2 split. */
gsize bpe_piece_end(const guint8 *text, gsize len, gsize i);

/* GPT-2's map from bytes to printable characters (the alphabet of vocab.json's keys):
 * bpe_byte_char[b] is the code point of byte b; bpe_char_byte returns the byte of a code
 * point of that alphabet, or -1. */
extern const gunichar *bpe_byte_chars(void);
int bpe_char_byte(gunichar c);

/* Sets up the ASCII class table of the pre-tokenizer (once; thread-safe). */
void bpe_split_init(void);

/* ---- loading (data/bpe-build.c, data/bpe-load*.c) ---- */

#include <json-glib/json-glib.h>

/* A tokenizer under construction: tokens by id (bytes, or NULL for an id not yet given), ids
 * by bytes, and the special tokens. Errors name `source`. */
typedef struct {
  const char *source;
  GPtrArray *tokens; /* of GBytes, index = id */
  GHashTable *ids;   /* GBytes → id + 1 */
  GPtrArray *special_text;
  GArray *special_id;
  GError **error;
} Build;

void bpe_build_init(Build *b, const char *source, GError **error);
void bpe_build_clear(Build *b);
/* Sets the error "SOURCE: message" (COHORT_TOKENIZER_ERROR_FORMAT); returns FALSE. */
gboolean bpe_fail(Build *b, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* A string for messages: at most 40 characters, escaped. */
char *bpe_shown(const char *s);
/* Gives `id` the token `bytes`; `where` names the field in messages. */
gboolean bpe_add_token(Build *b, const char *where, gint64 id, GBytes *bytes);
/* The vocabulary object {"token": id, …} in GPT-2's byte characters. */
gboolean bpe_read_vocab(Build *b, JsonNode *node, const char *field);
/* "left right" (one space, two non-empty parts) cut in place. */
gboolean bpe_split_merge(char *line, char **left, char **right);
/* The merge of `left` and `right` (byte characters) at `rank`. */
gboolean bpe_add_merge(Build *b, CohortTokenizer *t, const char *left, const char *right,
                       guint32 rank, const char *where);
/* Moves the tokens into `t` (ids must be 0..n-1 each once), finds <|endoftext|>, keeps the
 * special tokens, and builds the byte table. */
gboolean bpe_finish(Build *b, CohortTokenizer *t);
/* tokenizer.json's root object (data/bpe-load-json.c). */
gboolean bpe_read_tokenizer_json(Build *b, CohortTokenizer *t, JsonNode *root);
