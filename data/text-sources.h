/* Text to tokenize, as documents: every file is mapped, and the files are read in order as one
 * range of bytes. A .jsonl file holds one document per line (its "text" field); any other
 * file is one document. Parts of the range (a rank's share, a thread's chunk) are cut where
 * the tokens of the parts, put together, are the tokens of the whole: at file and line
 * boundaries, and inside a document where the tokenizer allows (cohort_tokenizer_safe_cut);
 * a run longer than COHORT_TEXT_MAX_RUN without such a place is cut anyway, at places that
 * depend on the text alone, so ranks and threads still cut alike. */
#pragma once

#include <glib.h>

#include "data/tokenizer.h"

G_BEGIN_DECLS

/* A .jsonl line longer than this is refused (its JSON would be parsed whole). */
#define COHORT_TEXT_MAX_LINE (64u << 20)
/* A text file is cut at least this often (in bytes), where the tokenizer allows no cut if it
 * must: the memory of one piece of work stays bounded (CohortTextChunk.forced). */
#define COHORT_TEXT_MAX_RUN (8u << 20)

typedef struct CohortTextSources CohortTextSources;

/* The files of `paths` (NULL-terminated; each a file, a folder whose .txt and .jsonl files are
 * taken in name order, or a glob pattern), in that order, mapped. Errors name the path. */
CohortTextSources *cohort_text_sources_open(const char *const *paths, GError **error);
void cohort_text_sources_free(CohortTextSources *s);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTextSources, cohort_text_sources_free)

/* Bytes of all files together. */
guint64 cohort_text_sources_size(const CohortTextSources *s);
guint cohort_text_sources_n_files(const CohortTextSources *s);
const char *cohort_text_sources_path(const CohortTextSources *s, guint i);

/* SHA-256 (hex) over every file's fingerprint (data/file-list.h: path, identity, times,
 * sampled content) in order: what a cache of the tokens is known by. */
char *cohort_text_sources_fingerprint(const CohortTextSources *s);

/* The byte offset where part k of n begins (k = n: the end): near k/n of the size, moved
 * forward to a place where the range may be cut, by tokenizer `tok`'s rule (NULL: GPT-2's
 * split). */
guint64 cohort_text_sources_cut(const CohortTextSources *s, const CohortTokenizer *tok, guint k,
                                guint n);

/* One piece of work: bytes [begin, end) of file `file`. A .jsonl piece holds whole lines; a
 * text piece starts its document when begin is 0 (else it continues it: encode it with
 * COHORT_ENCODE_CONTINUES). `forced`: it ends where the tokenizer allows no cut, after
 * COHORT_TEXT_MAX_RUN bytes without one (the ids there may differ from one pass's). */
typedef struct {
  guint file;
  gboolean jsonl;
  gsize begin, end;
  const char *data; /* the file's bytes */
  gboolean forced;
} CohortTextChunk;

/* The chunks of range [begin, end) (cut with cohort_text_sources_cut and the same tokenizer),
 * each about `chunk_bytes` long, in order: *pos (start it at begin) advances; FALSE when the
 * range is done. */
gboolean cohort_text_sources_next_chunk(const CohortTextSources *s, const CohortTokenizer *tok,
                                        guint64 end, gsize chunk_bytes, guint64 *pos,
                                        CohortTextChunk *chunk);

G_END_DECLS
