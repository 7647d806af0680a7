/* The decoded-image cache (internal to data/): one file per (folder, image_size, channels)
 * under a per-rank cache folder, holding the fitted uint8 [C, size, size] pixels of every
 * image and an index of the source files (path below the folder, size, mtime in ns, inode,
 * class, and why it was bad if it was), so that reopening an unchanged folder decodes
 * nothing and a changed one decodes only its changed files.
 *
 * File: a 48-byte header (magic "COHIMGC1", version, byte order, sizes, CRC-32 of everything
 * after the header), the index as a serialised GVariant, zero padding to a 64-byte boundary,
 * then the pixels of the good images in index order. A file whose header, length, CRC,
 * index or parameters do not check out is never trusted: it counts as no cache. Files are
 * written to a temporary name, fsync'ed and renamed over, so a crash leaves the old cache
 * or the new one, never half of one. */
#pragma once

#include <glib.h>
#include "data/image-folder.h"

G_BEGIN_DECLS

typedef struct CohortImageCache CohortImageCache;

/* The cache file for `folder` (made absolute) at `size` and `channels` in `cache_dir`:
 * cache_dir/images-<16 hex digits of SHA-256 of the three>.bin. */
char *cohort_image_cache_path(const char *cache_dir, const char *folder, int size, int channels);

/* Maps and checks the cache file; NULL when it is missing, damaged or made for another
 * folder, size or channel count. */
CohortImageCache *cohort_image_cache_load(const char *path, const char *folder, int size,
                                          int channels);
void cohort_image_cache_free(CohortImageCache *cache);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortImageCache, cohort_image_cache_free)

/* What the cache knows of `entry` when its path, size, mtime and inode are unchanged: TRUE,
 * with *pixels set to its fitted pixels, or *bad to why it could not be decoded. FALSE when
 * the file is new or changed. */
gboolean cohort_image_cache_lookup(const CohortImageCache *cache, const CohortImageEntry *entry,
                                   const guint8 **pixels, const char **bad);

/* TRUE when the cache lists exactly `listing` (same classes, same entries in the same order,
 * unchanged): then its pixels, in listing order of the good entries, can be used as they
 * are. */
gboolean cohort_image_cache_covers(const CohortImageCache *cache,
                                   const CohortImageListing *listing);

/* The pixels of the good entries, in order, and their number. */
const guint8 *cohort_image_cache_pixels(const CohortImageCache *cache, gsize *n_images);

/* Writes a cache for `listing` (bad entries carry their reason) whose good entries have
 * `pixels` (in order, size * size * channels bytes each). Errors name the cache file. */
gboolean cohort_image_cache_write(const char *path, const char *folder, int size, int channels,
                                  const CohortImageListing *listing, const guint8 *pixels,
                                  GError **error);

G_END_DECLS
