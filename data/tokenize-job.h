/* Tokenizing a range of text sources on several threads, in order: each document becomes
 * the tokenizer's document token (<|endoftext|>, else its bos_token) followed by its tokens
 * (llm.c's data scripts do the same), and the ids reach
 * a sink in the order of the text whatever thread encoded them. Documents with no bytes are
 * left out. A file that is not UTF-8 is still tokenized (bytes are bytes) and reported. */
#pragma once

#include <glib.h>

#include "data/text-sources.h"
#include "data/tokenizer.h"

G_BEGIN_DECLS

typedef struct {
  guint64 bytes_done, bytes_total; /* of the job's range */
  guint64 tokens, documents;
  /* Places where text had to be cut although the tokenizer allows no cut there (a run of
   * COHORT_TEXT_MAX_RUN bytes, or a word of COHORT_TOKENIZER_MAX_WORD, without one): the ids
   * around them may differ from the tokenizers library's. */
  guint64 cuts;
  double elapsed_s;
  double cpu_s; /* the process's CPU time (all threads) since the job began */
} CohortTokenizeProgress;

/* Receives the next ids, in order; FALSE with an error stops the job. */
typedef gboolean (*CohortTokenSink)(const gint32 *ids, gsize n, gpointer user_data, GError **error);
/* Called on the caller's thread after each chunk (about a MiB of text). */
typedef void (*CohortTokenizeProgressFunc)(const CohortTokenizeProgress *p, gpointer user_data);

typedef struct {
  const CohortTokenizer *tokenizer; /* needs a document token (cohort_tokenizer_eot) */
  int threads;                      /* 0: one per processor */
  guint64 begin, end;               /* cut with cohort_text_sources_cut */
  CohortTokenSink sink;
  CohortTokenizeProgressFunc progress; /* may be NULL */
  gpointer user_data;
  GPtrArray *cut_files; /* may be NULL: gets the paths (new strings) of files cut so, once */
} CohortTokenizeJob;

/* Runs the job. *done (may be NULL) gets the final counts; `not_utf8` (may be NULL) gets the
 * paths (new strings) of the files with bytes that are not UTF-8, each once. Errors: a .jsonl
 * line that is not a JSON object with a string "text", or longer than COHORT_TEXT_MAX_LINE,
 * named by file and line; a tokenizer without <|endoftext|>; the sink's. */
gboolean cohort_tokenize_run(const CohortTextSources *src, const CohortTokenizeJob *job,
                             CohortTokenizeProgress *done, GPtrArray *not_utf8, GError **error);

G_END_DECLS
