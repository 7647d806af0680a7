/* Tokenized text in a cache folder: the tokens of a text source, made once and reused while the
 * source files and the tokenizer are unchanged. The folder is named by a SHA-256 of the
 * tokenizer's files and the sources' fingerprints (data/file-list.h), and holds llm.c shards
 * (part-KKKKK_NNNNNN.bin: the tokens of part K of the text, in order) and, once every part is
 * there, manifest.json listing them. A folder without a manifest that names exactly its .bin
 * files, with the sizes their headers give, is never used: it is emptied and made again. */
#pragma once

#include <glib.h>

#include "data/text-sources.h"
#include "data/tokenize-job.h"
#include "data/tokenizer.h"

G_BEGIN_DECLS

/* cache_dir/tokens-<16 hex digits>. */
char *cohort_token_cache_folder(const char *cache_dir, const CohortTextSources *src,
                                const CohortTokenizer *tok);

/* TRUE when the folder holds a complete, consistent set; *n_tokens (may be NULL) gets the
 * number of tokens. */
gboolean cohort_token_cache_ready(const char *folder, guint64 *n_tokens);

/* Makes the folder, empty (anything in it is removed). */
gboolean cohort_token_cache_clear(const char *folder, GError **error);

/* Tokenizes part k of n of the sources (cohort_text_sources_cut) into the folder on `threads`
 * threads (0: one per processor), reporting through `progress`. */
gboolean cohort_token_cache_write_part(const char *folder, const CohortTextSources *src,
                                       const CohortTokenizer *tok, guint k, guint n, int threads,
                                       CohortTokenizeProgressFunc progress, gpointer user_data,
                                       CohortTokenizeProgress *done, GPtrArray *not_utf8,
                                       GError **error);

/* The .bin files of part k in the folder (names, sorted), or of every part (k = G_MAXUINT). */
GPtrArray *cohort_token_cache_part_files(const char *folder, guint k, GError **error);

/* Writes manifest.json for the .bin files now in the folder: the set is complete. */
gboolean cohort_token_cache_seal(const char *folder, GError **error);

/* Removes the token caches in `cache_dir` that `keep` (NULL-terminated folders) does not
 * name: caches of earlier versions of the data or another tokenizer. Only Cohort's own
 * folders are touched: named tokens-<16 hex digits>, holding nothing but regular files named
 * as a cache names them (part-*.bin, manifest.json and their temporary files); anything else
 * there stays. `removed` (may be NULL) gets the paths removed. */
gboolean cohort_token_cache_prune(const char *cache_dir, const char *const *keep,
                                  GPtrArray *removed, GError **error);

G_END_DECLS
