/* Byte-level BPE as GPT-2 defines it: a Hugging Face tokenizer.json (model BPE with the
 * ByteLevel pre-tokenizer) or GPT-2's vocab.json + merges.txt, the GPT-2 pre-tokenizer split
 * (contractions, letters, numbers, other, whitespace runs; Unicode categories from GLib),
 * merges by rank, special tokens recognised only where asked, and decoding. Any byte string
 * encodes (invalid UTF-8 included: each byte that is not part of a valid character counts as
 * an "other" character) and decodes back to itself. docs/data.md explains the details.
 *
 * A loaded tokenizer never changes, so several threads may encode with it at once, each
 * through its own CohortEncoder (which holds a cache of the pieces it has seen). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define COHORT_TOKENIZER_ERROR (cohort_tokenizer_error_quark())
GQuark cohort_tokenizer_error_quark(void);
typedef enum {
  COHORT_TOKENIZER_ERROR_IO,     /* missing, unreadable, not a regular file, too large */
  COHORT_TOKENIZER_ERROR_FORMAT, /* not a tokenizer Cohort can use, named with the reason */
  COHORT_TOKENIZER_ERROR_ID,     /* a token id outside the vocabulary (decoding) */
} CohortTokenizerError;

/* Limits on files from strangers: GPT-2's tokenizer.json is 1.4 MB with 50,257 tokens. */
#define COHORT_TOKENIZER_MAX_FILE   (256u << 20)
#define COHORT_TOKENIZER_MAX_TOKENS (1 << 22)

typedef struct CohortTokenizer CohortTokenizer;

/* The tokenizer files at `path`: a vocab.json or merges.txt (the two side by side), any other
 * file (read as a tokenizer.json), or a folder holding tokenizer.json or vocab.json and
 * merges.txt (tokenizer.json first). Sets *json, or *vocab and *merges (new strings), and
 * returns TRUE; FALSE with an error naming the path and what it lacks. Looks only at names
 * and kinds of files. */
gboolean cohort_tokenizer_find(const char *path, char **json, char **vocab, char **merges,
                               GError **error);

/* TRUE when the folder `dir` holds tokenizer files (what cohort_tokenizer_find accepts);
 * *what (may be NULL) gets "tokenizer.json" or "vocab.json + merges.txt". */
gboolean cohort_tokenizer_in_folder(const char *dir, const char **what);

/* Loads the tokenizer at `path` (see cohort_tokenizer_find). Refused, with one line naming the
 * file, the field and what is allowed: files that are not regular, larger than
 * COHORT_TOKENIZER_MAX_FILE or not strict JSON; a model other than BPE; a pre-tokenizer other
 * than ByteLevel (with add_prefix_space false and the GPT-2 split); a normalizer; BPE options
 * that change the algorithm (dropout, subword prefixes, byte fallback, ignore_merges); token
 * ids that are not 0..N-1 each once or more than COHORT_TOKENIZER_MAX_TOKENS; a vocabulary
 * lacking one of the 256 byte tokens; a merge whose parts or result are not tokens. */
CohortTokenizer *cohort_tokenizer_load(const char *path, GError **error);
void cohort_tokenizer_free(CohortTokenizer *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTokenizer, cohort_tokenizer_free)

/* Number of ids (the largest id + 1); what the model's vocab_size must be. */
int cohort_tokenizer_vocab_size(const CohortTokenizer *t);
/* The id of "<|endoftext|>", or -1 when the tokenizer has none. */
int cohort_tokenizer_eot(const CohortTokenizer *t);
/* SHA-256 (hex) of the tokenizer's files, in the order cohort_tokenizer_files lists them. */
const char *cohort_tokenizer_sha256(const CohortTokenizer *t);
/* The files it was read from (absolute paths), NULL-terminated. */
const char *const *cohort_tokenizer_files(const CohortTokenizer *t);
/* "tokenizer.json" or "vocab.json + merges.txt". */
const char *cohort_tokenizer_kind(const CohortTokenizer *t);

/* Writes the tokenizer's files, as they were when loaded, into `dir` under their own names
 * (tokenizer.json, or vocab.json and merges.txt), and tokenizer_config.json and
 * special_tokens_map.json when they were beside them; each atomically. */
gboolean cohort_tokenizer_export(const CohortTokenizer *t, const char *dir, GError **error);

/* The bytes token `id` decodes to (*len of them); NULL for an id outside the vocabulary. */
const guint8 *cohort_tokenizer_token_bytes(const CohortTokenizer *t, int id, gsize *len);

/* Appends the bytes of ids[0..n) to `out`; FALSE with COHORT_TOKENIZER_ERROR_ID naming the
 * first id outside the vocabulary and its position (nothing is appended then). */
gboolean cohort_tokenizer_decode(const CohortTokenizer *t, const int *ids, gsize n, GByteArray *out,
                                 GError **error);

/* One thread's encoder: the tokenizer, a cache of pieces seen (bounded, cleared when full)
 * and scratch memory. */
typedef struct CohortEncoder CohortEncoder;
CohortEncoder *cohort_encoder_new(const CohortTokenizer *t);
void cohort_encoder_free(CohortEncoder *e);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortEncoder, cohort_encoder_free)

/* Appends the ids of text[0..len) (any bytes) to `ids` (a GArray of gint32). With
 * `allow_special`, the tokenizer's special tokens ("<|endoftext|>", added tokens) written in
 * the text become their ids; otherwise they are text like any other. */
void cohort_encoder_encode(CohortEncoder *e, const char *text, gsize len, gboolean allow_special,
                           GArray *ids);

/* cohort_encoder_encode with a temporary encoder; returns a new array of *n ids. */
int *cohort_tokenizer_encode(const CohortTokenizer *t, const char *text, gsize len,
                             gboolean allow_special, gsize *n);

/* The pieces the GPT-2 pre-tokenizer cuts text[0..len) into, as the end offset of each piece
 * (ascending, the last is len); for tests and for cutting documents between pieces. */
GArray *cohort_bpe_split(const char *text, gsize len);

/* A position near `want` in text[from..len) where the text can be cut into two parts that
 * encode, each on its own, to the ids of the whole: a space between two printable ASCII
 * characters (the piece before it ends there, and the space begins the next piece whatever
 * follows). Returns the first such position at or after `want`, or len when there is none. */
gsize cohort_bpe_safe_cut(const char *text, gsize len, gsize want);

/* Whether text[0..len) is UTF-8 (NUL bytes included, which are characters like any other). */
gboolean cohort_text_is_utf8(const char *text, gsize len);

G_END_DECLS
