/* BPE tokenizers: GPT-2's vocab.json + merges.txt (byte-level BPE as GPT-2's encoder.py does
 * it: the GPT-2 split, merges by rank, special tokens recognised only where asked), and a
 * Hugging Face tokenizer.json as the tokenizers library defines it: the BPE model (byte_fallback,
 * ignore_merges, fuse_unk), normalizers, pre-tokenizers (Split through PCRE2, ByteLevel,
 * Metaspace, Digits), added tokens, post-processors and decoders (data/tok-pipeline.h). Any byte
 * string encodes (invalid UTF-8 included) and, with byte-level or byte-fallback tokenizers,
 * decodes back to itself. docs/data.md explains the details.
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
  COHORT_TOKENIZER_ERROR_REGEX,  /* a regular expression stopped at its match limit (encoding) */
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

/* Loads the tokenizer at `path` (see cohort_tokenizer_find), and tokenizer_config.json beside
 * it when there is one. Refused, with one line naming the file, the field and what is
 * allowed: files that are not regular, larger than COHORT_TOKENIZER_MAX_FILE or not strict
 * JSON; a model other than BPE; a component (normalizer, pre-tokenizer, post-processor,
 * decoder) or a member Cohort does not implement; BPE dropout, subword prefixes or suffixes;
 * a regular expression PCRE2 cannot compile or that backtracks without end on test texts;
 * token ids that are not 0..N-1 each once or more than COHORT_TOKENIZER_MAX_TOKENS; a
 * byte-level vocabulary lacking one of the 256 byte tokens; a merge whose parts or result are
 * not tokens. */
CohortTokenizer *cohort_tokenizer_load(const char *path, GError **error);
void cohort_tokenizer_free(CohortTokenizer *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTokenizer, cohort_tokenizer_free)

/* Number of ids (the largest id + 1); what the model's vocab_size must be. */
int cohort_tokenizer_vocab_size(const CohortTokenizer *t);
/* The token that begins each document: "<|endoftext|>" where the tokenizer has it (GPT-2,
 * Qwen), else tokenizer_config.json's bos_token (Llama 2's <s>, Llama 3's
 * <|begin_of_text|>); -1 when there is neither. */
int cohort_tokenizer_eot(const CohortTokenizer *t);
/* tokenizer_config.json's chat_template, bos_token and eos_token (NULL when not given). */
const char *cohort_tokenizer_chat_template(const CohortTokenizer *t);
const char *cohort_tokenizer_bos_token(const CohortTokenizer *t);
const char *cohort_tokenizer_eos_token(const CohortTokenizer *t);
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

/* The text of token `id` (*len bytes): for byte-level tokenizers the bytes it decodes to,
 * for others the vocabulary's string; NULL for an id outside the vocabulary. */
const guint8 *cohort_tokenizer_token_bytes(const CohortTokenizer *t, int id, gsize *len);

/* Appends the text of ids[0..n) to `out`, through the tokenizer's decoders (bytes that are
 * not UTF-8 are kept, where the library would write U+FFFD); FALSE with
 * COHORT_TOKENIZER_ERROR_ID naming the first id outside the vocabulary and its position
 * (nothing is appended then). */
gboolean cohort_tokenizer_decode(const CohortTokenizer *t, const int *ids, gsize n, GByteArray *out,
                                 GError **error);
/* The same for a part of a longer list: `first` says whether ids[0] is the list's first id
 * (the decoders that strip the first token's prefix look at it). */
gboolean cohort_tokenizer_decode_part(const CohortTokenizer *t, const int *ids, gsize n,
                                      gboolean first, GByteArray *out, GError **error);

/* One thread's encoder: the tokenizer, a cache of pieces seen (bounded, cleared when full)
 * and scratch memory. */
typedef struct CohortEncoder CohortEncoder;
CohortEncoder *cohort_encoder_new(const CohortTokenizer *t);
void cohort_encoder_free(CohortEncoder *e);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortEncoder, cohort_encoder_free)

typedef enum {
  /* Special tokens written in the text ("<|endoftext|>", added tokens marked special) become
   * their ids; otherwise they are text like any other. Added tokens that are not special are
   * always found, as the tokenizers library finds them. TRUE means this flag. */
  COHORT_ENCODE_SPECIAL = 1 << 0,
  /* The text continues a document cut where cohort_tokenizer_safe_cut allowed: it begins no
   * section (no Prepend, no "first" prefix). */
  COHORT_ENCODE_CONTINUES = 1 << 1,
  /* The post-processor's tokens around the text (add_special_tokens=True: Llama 2's <s>). */
  COHORT_ENCODE_ADD_SPECIAL = 1 << 2,
} CohortEncodeFlags;

/* Appends the ids of text[0..len) (any bytes) to `ids` (a GArray of gint32), with `flags`
 * (CohortEncodeFlags; TRUE is COHORT_ENCODE_SPECIAL). FALSE, with nothing appended, when a
 * regular expression of the tokenizer stops at its match limit
 * (COHORT_TOKENIZER_ERROR_REGEX); GPT-2's tokenizers never fail. */
gboolean cohort_encoder_encode(CohortEncoder *e, const char *text, gsize len, guint flags,
                               GArray *ids, GError **error);
/* Words the encoder had to cut where the tokenizer allows no cut (a run of more than 1 MiB
 * without one: its ids there differ from the library's). */
guint64 cohort_encoder_pieces_cut(const CohortEncoder *e);

/* cohort_encoder_encode with a temporary encoder; returns a new array of *n ids (NULL with
 * the error when encoding fails). */
int *cohort_tokenizer_encode(const CohortTokenizer *t, const char *text, gsize len, guint flags,
                             gsize *n, GError **error);

/* The pieces the GPT-2 pre-tokenizer cuts text[0..len) into, as the end offset of each piece
 * (ascending, the last is len); for tests and for cutting documents between pieces. */
GArray *cohort_bpe_split(const char *text, gsize len);

/* A position near `want` in text[from..len) where the text can be cut into two parts that
 * encode, each on its own, to the ids of the whole, by GPT-2's split: a space between two
 * printable ASCII characters (the piece before it ends there, and the space begins the next
 * piece whatever follows), or after a newline between two non-spaces. Returns the first such
 * position at or after `want`, or len when there is none. */
gsize cohort_bpe_safe_cut(const char *text, gsize len, gsize want);

/* The same for tokenizer `t` (NULL: GPT-2's rule), whose pipeline decides where a document
 * may be cut (data/tok-cut.c); the second part is encoded with COHORT_ENCODE_CONTINUES.
 * _before: the last such position at or before `want` and above `floor`, else floor. */
gsize cohort_tokenizer_safe_cut(const CohortTokenizer *t, const char *text, gsize len, gsize want);
gsize cohort_tokenizer_safe_cut_before(const CohortTokenizer *t, const char *text, gsize len,
                                       gsize want, gsize floor);
/* Whether the tokenizer has any place to cut a document. */
gboolean cohort_tokenizer_cuts_documents(const CohortTokenizer *t);

/* Whether text[0..len) is UTF-8 (NUL bytes included, which are characters like any other). */
gboolean cohort_text_is_utf8(const char *text, gsize len);

G_END_DECLS
