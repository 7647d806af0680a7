/* The decoded-image cache (internal to data/): one file per (folder, image_size, channels)
 * under a per-rank cache folder, holding the fitted uint8 [C, size, size] pixels of every
 * image and an index of the source files (path below the folder, size, mtime and ctime in ns,
 * device, inode, the sampled content hash of data/fingerprint.h, class, and why it was bad if
 * it was), so that reopening an unchanged folder decodes nothing and a changed one decodes
 * only its changed files. Names are kept as bytes (a file system's names need not be UTF-8).
 *
 * File (version 2): a 48-byte header (magic "COHIMGC1", version, byte order, sizes, CRC-32 of
 * the pixels then the index), zero padding to byte 64, the pixels of the good images in index
 * order, then, from the next 8-byte boundary, the index as a serialised GVariant. Pixels
 * first, so a set larger than memory is written image by image as it is decoded
 * (CohortImageCacheWriter) and then used where it lies (the file is mapped). A file whose
 * header, length, CRC, index or parameters do not check out is never trusted: it counts as
 * no cache. Files are written to a temporary name, fsync'ed and renamed over, so a crash
 * leaves the old cache or the new one, never half of one. */
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

/* What the cache knows of `entry` when its path, size, times, device, inode and content hash
 * are unchanged: TRUE,
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

/* Writing a cache while the images are decoded: _new creates "<path>.tmp-XXXXXX" (and the
 * folder), _add appends the pixels of the next good image, _finish writes the index for
 * `listing` (whose good entries are the images added, in order; bad ones carry their reason),
 * syncs and renames the file into place, and frees the writer; _abort removes it instead.
 * Errors name the cache file. */
typedef struct CohortImageCacheWriter CohortImageCacheWriter;
CohortImageCacheWriter *cohort_image_cache_writer_new(const char *path, GError **error);
void cohort_image_cache_writer_add(CohortImageCacheWriter *w, const guint8 *pixels, gsize n);
gboolean cohort_image_cache_writer_finish(CohortImageCacheWriter *w, const char *folder, int size,
                                          int channels, const CohortImageListing *listing,
                                          GError **error);
void cohort_image_cache_writer_abort(CohortImageCacheWriter *w);

G_END_DECLS
