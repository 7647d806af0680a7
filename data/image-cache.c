/* The decoded-image cache file; see image-cache.h. */
#include "data/image-cache.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <glib/gstdio.h>
#include "data/dataset.h"
#include "engine/base/fileio.h"

#define CACHE_MAGIC "COHIMGC1"
/* Bump whenever decoding, fitting or the layout would give other bytes: old caches then stop
 * matching. 2: pixels before the index, names as bytes, ctime, device and content hash. */
#define CACHE_VERSION 2
#define CACHE_ORDER   0x01020304u
#define PIXEL_OFFSET  64
#define ENTRY_TYPE    "(ayxxxttiayay)"
#define META_TYPE     "(ayuuaaya" ENTRY_TYPE ")"

typedef struct {
  char magic[8];
  guint32 version;
  guint32 byte_order;
  guint64 meta_size;
  guint64 pixel_offset;
  guint64 pixel_size;
  guint32 crc; /* CRC-32 of the pixel bytes, then of the meta bytes */
  guint32 reserved;
} CacheHeader;
G_STATIC_ASSERT(sizeof(CacheHeader) == 48);

/* The index starts at the first 8-byte boundary after the pixels (GVariant wants it aligned). */
static guint64 meta_offset(guint64 pixel_offset, guint64 pixel_size)
{
  return (pixel_offset + pixel_size + 7) / 8 * 8;
}

typedef struct {
  const char *rel, *bad, *fingerprint; /* bad is NULL for a good entry */
  gint64 size, mtime_ns, ctime_ns;
  guint64 device, inode;
  int label;
  gssize slot; /* pixel slot of a good entry, -1 for a bad one */
} CachedEntry;

struct CohortImageCache {
  GMappedFile *map;
  GVariant *meta;
  GPtrArray *classes; /* const char * into meta */
  GArray *entries;    /* of CachedEntry */
  GHashTable *by_rel; /* rel → entry index + 1 */
  const guint8 *pixels;
  gsize n_images, image_bytes;
};

char *cohort_image_cache_path(const char *cache_dir, const char *folder, int size, int channels)
{
  g_autofree char *abs = g_canonicalize_filename(folder, NULL);
  g_autofree char *params = g_strdup_printf("%d %d", size, channels);
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  g_checksum_update(sum, (const guchar *)abs, (gssize)strlen(abs) + 1); /* NUL: separator */
  g_checksum_update(sum, (const guchar *)params, -1);
  g_autofree char *name = g_strdup_printf("images-%.16s.bin", g_checksum_get_string(sum));
  return g_build_filename(cache_dir, name, NULL);
}

void cohort_image_cache_free(CohortImageCache *cache)
{
  if (!cache)
    return;
  g_clear_pointer(&cache->by_rel, g_hash_table_unref);
  g_clear_pointer(&cache->entries, g_array_unref);
  g_clear_pointer(&cache->classes, g_ptr_array_unref);
  g_clear_pointer(&cache->meta, g_variant_unref);
  g_clear_pointer(&cache->map, g_mapped_file_unref);
  g_free(cache);
}

/* zlib's CRC-32, continued from `crc` (0 to start), in pieces zlib's lengths can hold. */
static guint32 crc_of(guint32 crc, const guint8 *data, gsize len)
{
  while (len > 0) {
    gsize n = MIN(len, (gsize)1 << 30);
    crc = (guint32)crc32_z(crc, data, n);
    data += n;
    len -= n;
  }
  return crc;
}

/* Reads the index out of the (already type-checked) meta variant. */
static gboolean read_index(CohortImageCache *c, GVariant *classes, GVariant *entries)
{
  c->classes = g_ptr_array_new();
  for (gsize i = 0; i < g_variant_n_children(classes); i++) {
    const char *name;
    g_variant_get_child(classes, i, "^&ay", &name);
    g_ptr_array_add(c->classes, (gpointer)name);
  }
  c->entries = g_array_new(FALSE, FALSE, sizeof(CachedEntry));
  c->by_rel = g_hash_table_new(g_str_hash, g_str_equal);
  gsize slot = 0;
  for (gsize i = 0; i < g_variant_n_children(entries); i++) {
    CachedEntry e;
    gint32 label;
    g_variant_get_child(entries, i, "(^&ayxxxtti^&ay^&ay)", &e.rel, &e.size, &e.mtime_ns,
                        &e.ctime_ns, &e.device, &e.inode, &label, &e.fingerprint, &e.bad);
    e.label = label;
    if (!*e.bad)
      e.bad = NULL;
    e.slot = e.bad ? -1 : (gssize)slot++;
    if (label < -1 || label >= (int)c->classes->len || g_hash_table_contains(c->by_rel, e.rel))
      return FALSE;
    g_array_append_val(c->entries, e);
    g_hash_table_insert(c->by_rel, (gpointer)e.rel, GSIZE_TO_POINTER(i + 1));
  }
  c->n_images = slot;
  return TRUE;
}

CohortImageCache *cohort_image_cache_load(const char *path, const char *folder, int size,
                                          int channels)
{
  g_autoptr(CohortImageCache) c = g_new0(CohortImageCache, 1);
  c->map = cohort_file_map_regular(path, COHORT_FILE_ANY_SIZE, NULL, NULL);
  if (!c->map)
    return NULL;
  const guint8 *data = (const guint8 *)g_mapped_file_get_contents(c->map);
  gsize len = g_mapped_file_get_length(c->map);
  CacheHeader h;
  if (len < sizeof h)
    return NULL;
  memcpy(&h, data, sizeof h);
  if (memcmp(h.magic, CACHE_MAGIC, 8) != 0 || h.version != CACHE_VERSION ||
      h.byte_order != CACHE_ORDER || h.pixel_offset != PIXEL_OFFSET || h.pixel_size > len ||
      h.meta_size > len || meta_offset(h.pixel_offset, h.pixel_size) + h.meta_size != len)
    return NULL;
  const guint8 *meta = data + meta_offset(h.pixel_offset, h.pixel_size);
  if (crc_of(crc_of(0, data + h.pixel_offset, h.pixel_size), meta, h.meta_size) != h.crc)
    return NULL;

  /* Untrusted bytes: GVariant checks them as it reads (no crash on any input). */
  c->meta = g_variant_ref_sink(
      g_variant_new_from_data(G_VARIANT_TYPE(META_TYPE), meta, h.meta_size, FALSE, NULL, NULL));
  const char *stored_folder;
  guint32 stored_size, stored_channels;
  g_autoptr(GVariant) classes = NULL, entries = NULL;
  g_variant_get(c->meta, "(^&ayuu@aay@a" ENTRY_TYPE ")", &stored_folder, &stored_size,
                &stored_channels, &classes, &entries);
  g_autofree char *abs = g_canonicalize_filename(folder, NULL);
  if (strcmp(stored_folder, abs) != 0 || stored_size != (guint32)size ||
      stored_channels != (guint32)channels || !read_index(c, classes, entries))
    return NULL;
  c->image_bytes = (gsize)size * size * channels;
  if (h.pixel_size != c->n_images * c->image_bytes)
    return NULL;
  c->pixels = data + h.pixel_offset;
  return g_steal_pointer(&c);
}

static const CachedEntry *find(const CohortImageCache *c, const CohortImageEntry *e)
{
  gsize i = GPOINTER_TO_SIZE(g_hash_table_lookup(c->by_rel, e->rel));
  if (i == 0)
    return NULL;
  const CachedEntry *ce = &g_array_index(c->entries, CachedEntry, i - 1);
  if (ce->size != e->size || ce->mtime_ns != e->mtime_ns || ce->ctime_ns != e->ctime_ns ||
      ce->device != e->device || ce->inode != e->inode || ce->label != e->label ||
      strcmp(ce->fingerprint, e->fingerprint) != 0)
    return NULL;
  return ce;
}

gboolean cohort_image_cache_lookup(const CohortImageCache *cache, const CohortImageEntry *entry,
                                   const guint8 **pixels, const char **bad)
{
  const CachedEntry *ce = find(cache, entry);
  if (!ce)
    return FALSE;
  *pixels = ce->bad ? NULL : cache->pixels + (gsize)ce->slot * cache->image_bytes;
  *bad = ce->bad;
  return TRUE;
}

gboolean cohort_image_cache_covers(const CohortImageCache *cache, const CohortImageListing *listing)
{
  if (cache->classes->len != listing->classes->len || cache->entries->len != listing->entries->len)
    return FALSE;
  for (guint i = 0; i < cache->classes->len; i++)
    if (strcmp(cache->classes->pdata[i], listing->classes->pdata[i]) != 0)
      return FALSE;
  for (guint i = 0; i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    const CachedEntry *ce = find(cache, e);
    /* In the same place, and bad during the scan only if the cache has it bad too. */
    if (!ce || ce != &g_array_index(cache->entries, CachedEntry, i) || (e->bad && !ce->bad))
      return FALSE;
  }
  return TRUE;
}

const guint8 *cohort_image_cache_pixels(const CohortImageCache *cache, gsize *n_images)
{
  *n_images = cache->n_images;
  return cache->pixels;
}

/* Names are bytestrings: a file system's names need not be UTF-8 (GVariant's strings must). */
static GVariant *build_meta(const char *folder, int size, int channels,
                            const CohortImageListing *listing)
{
  g_autofree char *abs = g_canonicalize_filename(folder, NULL);
  GVariantBuilder classes, entries;
  g_variant_builder_init(&classes, G_VARIANT_TYPE("aay"));
  for (guint i = 0; i < listing->classes->len; i++)
    g_variant_builder_add(&classes, "^ay", (const char *)listing->classes->pdata[i]);
  g_variant_builder_init(&entries, G_VARIANT_TYPE("a" ENTRY_TYPE));
  for (guint i = 0; i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    g_variant_builder_add(&entries, "(^ayxxxtti^ay^ay)", e->rel, e->size, e->mtime_ns, e->ctime_ns,
                          e->device, e->inode, (gint32)e->label, e->fingerprint,
                          e->bad ? e->bad : "");
  }
  return g_variant_ref_sink(g_variant_new("(^ayuu@aay@a" ENTRY_TYPE ")", abs, (guint32)size,
                                          (guint32)channels, g_variant_builder_end(&classes),
                                          g_variant_builder_end(&entries)));
}

struct CohortImageCacheWriter {
  char *path, *tmp;
  int fd;
  guint32 crc;
  guint64 pixel_size;
  int err; /* the first write error (errno), 0 = none */
};

CohortImageCacheWriter *cohort_image_cache_writer_new(const char *path, GError **error)
{
  g_autofree char *dir = g_path_get_dirname(path);
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    int err = errno;
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot create the image cache folder: %s", dir, g_strerror(err));
    return NULL;
  }
  CohortImageCacheWriter *w = g_new0(CohortImageCacheWriter, 1);
  w->path = g_strdup(path);
  w->tmp = g_strdup_printf("%s.tmp-XXXXXX", path);
  w->fd = g_mkstemp(w->tmp);
  static const guint8 zeros[PIXEL_OFFSET];
  if (w->fd < 0 || !cohort_write_all(w->fd, zeros, sizeof zeros)) {
    int err = errno;
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot write the image cache: %s", path, g_strerror(err));
    cohort_image_cache_writer_abort(w);
    return NULL;
  }
  return w;
}

void cohort_image_cache_writer_add(CohortImageCacheWriter *w, const guint8 *pixels, gsize n)
{
  if (w->err == 0 && !cohort_write_all(w->fd, pixels, n))
    w->err = errno;
  w->crc = crc_of(w->crc, pixels, n);
  w->pixel_size += n;
}

void cohort_image_cache_writer_abort(CohortImageCacheWriter *w)
{
  if (!w)
    return;
  if (w->fd >= 0) {
    close(w->fd);
    g_unlink(w->tmp);
  }
  g_free(w->path);
  g_free(w->tmp);
  g_free(w);
}

gboolean cohort_image_cache_writer_finish(CohortImageCacheWriter *w, const char *folder, int size,
                                          int channels, const CohortImageListing *listing,
                                          GError **error)
{
  g_autoptr(GVariant) meta = build_meta(folder, size, channels, listing);
  CacheHeader h = {.version = CACHE_VERSION, .byte_order = CACHE_ORDER};
  memcpy(h.magic, CACHE_MAGIC, 8);
  h.meta_size = g_variant_get_size(meta);
  h.pixel_offset = PIXEL_OFFSET;
  h.pixel_size = w->pixel_size;
  h.crc = crc_of(w->crc, g_variant_get_data(meta), h.meta_size);
  static const guint8 zeros[8];
  gsize pad = meta_offset(h.pixel_offset, h.pixel_size) - h.pixel_offset - h.pixel_size;
  gboolean ok = w->err == 0 && cohort_write_all(w->fd, zeros, pad) &&
                cohort_write_all(w->fd, g_variant_get_data(meta), h.meta_size) &&
                pwrite(w->fd, &h, sizeof h, 0) == (ssize_t)sizeof h && fsync(w->fd) == 0;
  int err = w->err ? w->err : errno;
  if (close(w->fd) != 0 && ok) {
    ok = FALSE;
    err = errno;
  }
  w->fd = -1;
  if (ok && g_rename(w->tmp, w->path) != 0) {
    ok = FALSE;
    err = errno;
  }
  if (!ok) {
    g_unlink(w->tmp);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot write the image cache: %s", w->path, g_strerror(err));
  } else {
    g_autofree char *dir = g_path_get_dirname(w->path);
    cohort_fsync_dir(dir);
  }
  cohort_image_cache_writer_abort(w);
  return ok;
}
