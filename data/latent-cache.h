/* The latent cache: a VAE's latents of images, on disk in one journal file per cache folder,
 * each record found by a 32-byte key (the caller's: data/latent-set.h keys by the image file's
 * content, the VAE's content, the size and the augmentation), so an image is encoded once,
 * whatever its name, and a changed image or VAE is simply another key.
 *
 * File: a 32-byte header (magic "COHLATC1", version, byte order, the floats per record), then
 * records of [key (32 bytes), CRC-32 of key and values (4), values (floats × 4 bytes)] appended
 * as they are made. A killed run leaves at most a torn last record: opening reads records up to
 * the first one that is short or fails its CRC and cuts the file there, so caching resumes with
 * everything that was written before. Records are fsync'ed in groups (every 64, and on
 * cohort_latent_cache_sync), so a power cut loses at most the last group. A header of another
 * record size (another VAE's latent shape) or version starts the file afresh. Compaction
 * rewrites the file with only the records still wanted, through a temporary file renamed into
 * place. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define COHORT_LATENT_KEY_BYTES 32

typedef struct CohortLatentCache CohortLatentCache;

/* Opens (creating the folder and file when missing) the journal at `path` for records of
 * `floats` values. Errors name the file (it cannot be created, read or cut). */
CohortLatentCache *cohort_latent_cache_open(const char *path, gsize floats, GError **error);
void cohort_latent_cache_free(CohortLatentCache *cache);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortLatentCache, cohort_latent_cache_free)

/* Records in the cache (valid ones, counting a key written twice once). */
guint cohort_latent_cache_count(const CohortLatentCache *cache);
/* Records that were found intact when it was opened. */
guint cohort_latent_cache_count_at_open(const CohortLatentCache *cache);
/* Bytes cut from a torn end when it was opened (0 for a clean file). */
guint64 cohort_latent_cache_cut_bytes(const CohortLatentCache *cache);

/* The values stored under `key`, or NULL. Valid until the cache is freed or compacted. */
const float *cohort_latent_cache_lookup(const CohortLatentCache *cache, const guint8 *key);
/* Appends a record (a key already present is replaced in memory; the newer record wins when the
 * file is read again). Errors name the file. */
gboolean cohort_latent_cache_append(CohortLatentCache *cache, const guint8 *key,
                                    const float *values, GError **error);
/* Flushes appended records to disk (fsync). */
gboolean cohort_latent_cache_sync(CohortLatentCache *cache, GError **error);
/* Rewrites the file with only the records whose keys are in `keep` (a set of 32-byte keys as
 * GBytes), when at least a quarter of the file is other records; otherwise nothing. */
gboolean cohort_latent_cache_compact(CohortLatentCache *cache, GHashTable *keep, GError **error);

G_END_DECLS
