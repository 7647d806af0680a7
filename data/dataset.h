/* Training data as one stream of token ids: byte-level text (a UTF-8 file, or a folder whose
 * .txt files are read in name order and joined) or llm.c token shards (.bin: 256 int32
 * header, magic 20240520 version 1 with uint16 tokens or magic 20240801 version 7 with uint32
 * tokens, token count, then the tokens; a file, or a folder of .bin files in name order).
 * Examples are windows of seq_len + 1 tokens: window i starts at token i * seq_len, so there
 * are (n_tokens - 1) / seq_len of them. */
#pragma once

#include <glib.h>
#include <string.h>

#include "data/format.h"

G_BEGIN_DECLS

#define COHORT_DATA_ERROR (cohort_data_error_quark())
GQuark cohort_data_error_quark(void);
typedef enum {
  COHORT_DATA_ERROR_IO,        /* missing, unreadable */
  COHORT_DATA_ERROR_FORMAT,    /* bad magic/version/size, not UTF-8 where text is required */
  COHORT_DATA_ERROR_TOO_SMALL, /* fewer tokens than one window */
  COHORT_DATA_ERROR_VOCAB,     /* a token id >= vocab_size */
  COHORT_DATA_ERROR_TOO_LARGE, /* decoded images that fit neither in memory nor on the disk */
} CohortDataError;

typedef struct CohortDataset CohortDataset;

/* Opens `path` (already resolved, see cohort_resolve_path): a regular file, or a folder whose
 * regular files with the format's suffix are read (a FIFO, device or socket is refused, never
 * opened). Checks every token against vocab_size and that at least one window of seq_len + 1
 * tokens exists. Errors name the file and what is wrong. */
CohortDataset *cohort_dataset_open(const char *path, CohortDataFormat format, int vocab_size,
                                   int seq_len, GError **error);
/* Like cohort_dataset_open, with a prepared-data index in `index_dir` (NULL = none): the
 * content scan (UTF-8, token ids below vocab_size) of files the index lists with the same
 * fingerprint (path, inode, size, mtime and ctime in nanoseconds, a hash of sampled blocks;
 * see index_entry_key), format and vocab is skipped; after scanning any file, the index is
 * rewritten (atomically). Header and size checks always run, and every window is range
 * checked as it is read. This is how rank 0 prepares data for the others when
 * distributed_data_loading is off. *n_scanned (may be NULL) gets the number of files scanned. */
CohortDataset *cohort_dataset_open_prepared(const char *path, CohortDataFormat format,
                                            int vocab_size, int seq_len, const char *index_dir,
                                            guint *n_scanned, GError **error);
void cohort_dataset_free(CohortDataset *ds);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortDataset, cohort_dataset_free)

gsize cohort_dataset_num_tokens(const CohortDataset *ds);
gsize cohort_dataset_num_windows(const CohortDataset *ds);
int cohort_dataset_seq_len(const CohortDataset *ds);

/* Copies window `index`: inputs[t] = tok[i*T + t], targets[t] = tok[i*T + t + 1]. Every
 * token is checked against vocab_size first, so no out-of-range id ever reaches a model even
 * when a file changed after it was opened (files are memory-mapped): then it fails with
 * COHORT_DATA_ERROR_VOCAB naming the file, the token's position and byte offset, and leaves
 * inputs and targets untouched. */
gboolean cohort_dataset_window(const CohortDataset *ds, gsize index, int *inputs, int *targets,
                               GError **error);

/* llm.c's token shard: a header of 256 little-endian int32 (magic, version, token count, the
 * rest unused) and the tokens, little-endian: uint16 under magic 20240520 version 1 (its
 * GPT-2 shards), uint32 under magic 20240801 version 7 (its Llama 3 shards, for vocabularies
 * above 65,536 ids). */
#define COHORT_SHARD_MAGIC        20240520
#define COHORT_SHARD_VERSION      1
#define COHORT_SHARD32_MAGIC      20240801
#define COHORT_SHARD32_VERSION    7
#define COHORT_SHARD_HEADER_BYTES (256 * sizeof(gint32))

/* Bytes per token of the shards for a vocabulary of `vocab_size` ids: 2 or 4. */
int cohort_shard_width(int vocab_size);

/* Checks a shard's header and size against each other; *n_tokens gets the count. Errors
 * (COHORT_DATA_ERROR_FORMAT) name `path` and what is wrong. */
gboolean cohort_token_shard_check(const guint8 *bytes, gsize size, const char *path,
                                  gsize *n_tokens, GError **error);
/* The same, with *width (may be NULL) the bytes per token (2 or 4). */
gboolean cohort_token_shard_check_width(const guint8 *bytes, gsize size, const char *path,
                                        gsize *n_tokens, int *width, GError **error);
/* Token i of a shard's body (`width` bytes each, little-endian). */
static inline guint32 cohort_shard_token(const guint8 *body, int width, gsize i)
{
  if (width == 2) {
    guint16 v;
    memcpy(&v, body + 2 * i, 2);
    return GUINT16_FROM_LE(v);
  }
  guint32 v;
  memcpy(&v, body + 4 * i, 4);
  return GUINT32_FROM_LE(v);
}

/* Byte-level text: the prompt's bytes as token ids (vocab 256); decoding is the identity. */
int *cohort_text_encode(const char *text, int *n_tokens);

G_END_DECLS
