/* The parts of a Hugging Face tokenizer.json pipeline that sit around the BPE model
 * (internal to data/): regular expressions through PCRE2, normalizers, pre-tokenizers, added
 * tokens, post-processors and decoders, as the tokenizers library defines them. The
 * tokenizer holds them (data/bpe-private.h); each encoder (data/tok-encode.c) runs them. */
#pragma once

#include <glib.h>

/* ---- regular expressions (data/tok-regex.c) ---- */

/* A compiled pattern (UTF-8, Unicode properties, PCRE2's JIT where it has one), shared by
 * every thread; matching needs a TokMatcher per thread. */
typedef struct TokRegex TokRegex;
typedef struct TokMatcher TokMatcher;

/* Work one match may do before it is stopped (PCRE2's match limit; backtracking counts). */
#define TOK_REGEX_MATCH_LIMIT 10000000u
/* Patterns longer than this are refused. */
#define TOK_REGEX_MAX_PATTERN 4096

/* Compiles `pattern` and tries it on test texts, so a pattern that backtracks without end is
 * refused at load, naming `where` (the field) in `source` (the file). */
TokRegex *tok_regex_new(const char *pattern, const char *source, const char *where, GError **error);
void tok_regex_free(TokRegex *r);
const char *tok_regex_pattern(const TokRegex *r);

TokMatcher *tok_matcher_new(void);
void tok_matcher_free(TokMatcher *m);

/* The first match in s[0..len) at or after `from`: 1 with [*start, *end), 0 when there is
 * none, -1 with an error (the match limit, naming the pattern and the offset). */
int tok_regex_next(const TokRegex *r, TokMatcher *m, const guint8 *s, gsize len, gsize from,
                   gsize *start, gsize *end, GError **error);

/* ---- normalizers (data/tok-normalize.c) ---- */

typedef enum {
  TOK_NORM_NFC,
  TOK_NORM_NFKC,
  TOK_NORM_NFD,
  TOK_NORM_NFKD,
  TOK_NORM_LOWERCASE,
  TOK_NORM_PREPEND,
  TOK_NORM_REPLACE,
  TOK_NORM_STRIP,
} TokNormKind;

typedef struct {
  TokNormKind kind;
  char *text;           /* Prepend's string, Replace's String pattern (NULL for a Regex one) */
  char *content;        /* Replace's replacement */
  TokRegex *regex;      /* Replace's Regex pattern */
  gboolean left, right; /* Strip */
} TokNorm;

void tok_norm_free(gpointer p);

/* Applies the normalizers to s[0..len) into `out` (emptied first). Bytes that are not UTF-8
 * pass unchanged, each a character of its own. `skip_prepend` leaves Prepend out (a text that
 * continues a section). */
gboolean tok_normalize(GPtrArray *norms, TokMatcher *m, const guint8 *s, gsize len,
                       gboolean skip_prepend, GByteArray *out, GError **error);

/* ---- pre-tokenizers (data/tok-pretok.c runs them) ---- */

typedef enum { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE, TOK_PRE_DIGITS } TokPreKind;

/* Split's behaviours (what becomes of a match). */
typedef enum {
  TOK_SPLIT_REMOVED,
  TOK_SPLIT_ISOLATED,
  TOK_SPLIT_MERGED_WITH_PREVIOUS,
  TOK_SPLIT_MERGED_WITH_NEXT,
  TOK_SPLIT_CONTIGUOUS,
} TokSplitBehavior;

typedef enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } TokPrependScheme;

typedef struct {
  TokPreKind kind;
  /* Split */
  TokRegex *regex;
  char *literal; /* a String pattern */
  TokSplitBehavior behavior;
  gboolean invert;
  /* ByteLevel */
  gboolean add_prefix_space, use_regex;
  /* Metaspace */
  char replacement[8]; /* one character, UTF-8 */
  TokPrependScheme prepend_scheme;
  gboolean split;
  /* Digits */
  gboolean individual_digits;
} TokPre;

void tok_pre_free(gpointer p);

/* ---- added tokens (data/tok-added.c) ---- */

typedef struct {
  GBytes *content; /* what is matched (normalized when `normalized`) */
  gint32 id;
  gboolean special, lstrip, rstrip, normalized;
} TokAdded;

/* Added tokens matched leftmost-longest, as the tokenizers library's tries do. */
typedef struct TokAddedSet TokAddedSet;
TokAddedSet *tok_added_set_new(void);
void tok_added_set_free(TokAddedSet *s);
void tok_added_set_add(TokAddedSet *s, const TokAdded *a);
guint tok_added_set_size(const TokAddedSet *s);
/* The longest content of the set, in bytes. */
gsize tok_added_set_max_len(const TokAddedSet *s);
/* Whether some token of the set has lstrip or rstrip, or a content holding white space. */
gboolean tok_added_set_touches_space(const TokAddedSet *s);

/* The next added token in s[from..len): TRUE with its [*start, *end) (widened over white
 * space by lstrip/rstrip, never before `floor`) and its entry; special tokens are skipped
 * unless `special`. */
gboolean tok_added_next(const TokAddedSet *set, const guint8 *s, gsize len, gsize from, gsize floor,
                        gboolean special, gsize *start, gsize *end, const TokAdded **hit);

/* Unicode's White_Space (what Rust's char::is_whitespace tests). */
gboolean tok_is_white_space(gunichar c);

/* ---- decoders (data/tok-decode.c) ---- */

typedef enum {
  TOK_DEC_BYTELEVEL,
  TOK_DEC_METASPACE,
  TOK_DEC_REPLACE,
  TOK_DEC_BYTEFALLBACK,
  TOK_DEC_FUSE,
  TOK_DEC_STRIP,
} TokDecKind;

typedef struct {
  TokDecKind kind;
  char *pattern, *content; /* Replace (a String pattern); Strip's content character */
  char replacement[8];     /* Metaspace */
  TokPrependScheme prepend_scheme;
  guint start, stop; /* Strip */
} TokDec;

void tok_dec_free(gpointer p);

/* ---- post-processors: what add_special_tokens puts around a sequence ---- */

typedef struct {
  GArray *prefix, *suffix; /* gint32 ids */
} TokPost;
