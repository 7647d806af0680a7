/* The tokenizer's tables, shared by the files of data/bpe-*.c (internal to data/). */
#pragma once

#include "data/tokenizer.h"
#include "data/tok-pipeline.h"

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

/* How a document may be cut between threads and ranks so that its parts, encoded on their
 * own, give the ids of the whole (data/tok-cut.c). */
typedef enum {
  TOK_CUT_NONE,          /* nowhere: a document is one piece of work */
  TOK_CUT_SPACE,         /* before a space between two printable ASCII characters */
  TOK_CUT_SPACE_NEWLINE, /* that, or after a newline between two non-spaces (GPT-2's rule) */
} TokCutRule;

struct CohortTokenizer {
  int n_ids;
  /* Each id's text: for byte-level tokenizers the bytes it decodes to, else the vocabulary's
   * string (or an added token's content). */
  guint8 *blob;
  BpeSpan *spans; /* [n_ids] */
  gint32 byte_id[256];
  BpeMerge *merges; /* [merge_mask + 1] */
  guint32 merge_mask;
  guint32 n_merges;
  /* Special (added) tokens of GPT-2's files, longest first, so that the longest match wins. */
  GPtrArray *special_text; /* of GBytes */
  GArray *special_id;      /* of gint32 */
  int eot;
  char *sha256;
  char **files;
  const char *kind;
  GPtrArray *exports; /* of BpeFile: what cohort_tokenizer_export writes */

  /* ---- a Hugging Face pipeline (tokenizer.json); data/tok-pipeline.h ---- */
  gboolean pipeline;   /* FALSE: GPT-2's path (bpe_piece_end, merges as GPT-2's bpe()) */
  gboolean byte_level; /* the model sees bytes (ByteLevel pre-tokenizer) */
  gboolean gpt2_split; /* ByteLevel's own regex: bpe_piece_end */
  gboolean ignore_merges, byte_fallback, fuse_unk;
  gint32 unk_id;          /* -1: none */
  gint32 byte_token[256]; /* byte fallback's <0xXX> tokens, -1 where missing */
  GHashTable *char_ids;   /* gunichar → id + 1, for models that see characters */
  guint32 *word_table;    /* the model's vocabulary by its text (ignore_merges): ids + 1 */
  guint32 word_mask;
  GPtrArray *normalizers; /* TokNorm */
  GPtrArray *pretoks;     /* TokPre */
  GPtrArray *decoders;    /* TokDec; empty: the tokens joined by spaces */
  gboolean bytes_decode;  /* decoding is the concatenation of spans (ByteLevel, GPT-2) */
  TokAddedSet *added_raw, *added_norm;
  TokPost post;
  char *word_cut; /* a character where a long word may be cut, or NULL */
  TokCutRule cut_rule;
  /* tokenizer_config.json (data/tok-config.c) */
  char *bos_token, *eos_token, *chat_template;
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

/* The model vocabulary's id whose text (spans) is p[0..n), or -1; bpe_word_table_build makes
 * the table from the ids [0, n_model) (data/bpe-vocab.c). */
gint32 bpe_word_find(const CohortTokenizer *t, const guint8 *p, gsize n);
void bpe_word_table_build(CohortTokenizer *t, const gboolean *in_model);
guint64 bpe_hash_bytes(const guint8 *p, gsize n);

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

/* Whether text may be cut at s[p] under cut rule `rule` (TokCutRule: 1 the space rule, 2 also
 * the newline rule); bpe_split_init first. */
gboolean bpe_cut_at(int rule, const guint8 *s, gsize len, gsize p);

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
  gboolean raw;         /* vocabulary keys are the tokens' text (not GPT-2's byte characters) */
  GByteArray *in_model; /* 1 for the ids of the model's vocabulary */
  GArray *added;        /* TokAdded of tokenizer.json's added_tokens */
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
/* bpe_finish without the byte table. */
gboolean bpe_finish_tokens(Build *b, CohortTokenizer *t);
/* tokenizer.json's root object (data/bpe-load-json.c). */
gboolean bpe_read_tokenizer_json(Build *b, CohortTokenizer *t, JsonNode *root);
/* A vocabulary key as the tokens' bytes (GPT-2's byte characters decoded, or the text itself
 * when b->raw); NULL when it is not made of byte characters. */
GBytes *bpe_key_bytes(Build *b, const char *key);
/* Finishes a tokenizer.json: the tables the pipeline needs, the added tokens, the cut rules
 * (data/tok-setup.c). */
gboolean tok_finish(Build *b, CohortTokenizer *t);
/* tokenizer_config.json (and chat_template.jinja) in `dir`, when there (data/tok-config.c). */
gboolean tok_read_config(CohortTokenizer *t, const char *dir, GError **error);
/* Where a document may be cut (data/tok-cut.c), decided from the pipeline. */
void tok_decide_cuts(CohortTokenizer *t, const gboolean *in_model);
