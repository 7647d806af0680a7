/* Writing llm.c token shards (data/dataset.h has the format): tokens are collected in a
 * temporary file beside the output, then cut into shards, each written to a temporary name
 * and renamed (engine/base/fileio.h), so a kill leaves no half-written shard. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A shard's header counts its tokens in an int32. */
#define COHORT_SHARD_MAX_TOKENS G_MAXINT32

typedef struct CohortShardWriter CohortShardWriter;

/* A writer for the shards of `out` ("DIR/NAME.bin"), for ids below `vocab_size`: llm.c's
 * uint16 shards for vocabularies of up to 65,536 ids, its uint32 shards (magic 20240801,
 * version 7) above. Refused: a name that does not end in .bin, an existing path that is not a
 * regular file (/dev/null, a FIFO). The tokens are collected in an unnamed temporary file, so
 * an interrupted run leaves nothing behind. */
CohortShardWriter *cohort_shard_writer_new(const char *out, int vocab_size, GError **error);
/* Closes the temporary file. */
void cohort_shard_writer_free(CohortShardWriter *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortShardWriter, cohort_shard_writer_free)

/* Appends ids (each in [0, vocab_size)). */
gboolean cohort_shard_writer_add(CohortShardWriter *w, const gint32 *ids, gsize n, GError **error);
guint64 cohort_shard_writer_count(const CohortShardWriter *w);

/* Writes the shards: the first round(val_fraction × count) tokens to NAME_val.bin, the rest
 * to NAME.bin, or with shard_tokens > 0 to NAME_000000.bin, NAME_000001.bin, … of at most
 * shard_tokens each (the validation tokens likewise to NAME_val_000000.bin, …). `written`
 * (may be NULL) gets the paths. A shard above COHORT_SHARD_MAX_TOKENS is refused, naming
 * --shard-tokens. */
gboolean cohort_shard_writer_finish(CohortShardWriter *w, guint64 shard_tokens, double val_fraction,
                                    GPtrArray *written, GError **error);

G_END_DECLS
