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
/* Bump whenever decoding or fitting would give other bytes: old caches then stop matching. */
#define CACHE_VERSION 1
#define CACHE_ORDER   0x01020304u
#define META_TYPE     "(suuasa(sxxtis))"

typedef struct {
  char magic[8];
  guint32 version;
  guint32 byte_order;
  guint64 meta_size;
  guint64 pixel_offset;
  guint64 pixel_size;
  guint32 crc; /* CRC-32 of the meta bytes, then of the pixel bytes */
  guint32 reserved;
} CacheHeader;
G_STATIC_ASSERT(sizeof(CacheHeader) == 48);

typedef struct {
  const char *rel, *bad; /* bad is NULL for a good entry */
  gint64 size, mtime_ns;
  guint64 inode;
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

/* zlib's CRC-32, continued from `crc` (0 to start); zlib returns 0 for a NULL buffer. */
static guint32 crc_of(guint32 crc, const guint8 *data, gsize len)
{
  return len > 0 ? (guint32)crc32_z(crc, data, len) : crc;
}

/* Reads the index out of the (already type-checked) meta variant. */
static gboolean read_index(CohortImageCache *c, GVariant *classes, GVariant *entries)
{
  c->classes = g_ptr_array_new();
  for (gsize i = 0; i < g_variant_n_children(classes); i++) {
    const char *name;
    g_variant_get_child(classes, i, "&s", &name);
    g_ptr_array_add(c->classes, (gpointer)name);
  }
  c->entries = g_array_new(FALSE, FALSE, sizeof(CachedEntry));
  c->by_rel = g_hash_table_new(g_str_hash, g_str_equal);
  gsize slot = 0;
  for (gsize i = 0; i < g_variant_n_children(entries); i++) {
    CachedEntry e;
    gint32 label;
    g_variant_get_child(entries, i, "(&sxxti&s)", &e.rel, &e.size, &e.mtime_ns, &e.inode, &label,
                        &e.bad);
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
      h.byte_order != CACHE_ORDER || h.meta_size > len - sizeof h ||
      h.pixel_offset < sizeof h + h.meta_size || h.pixel_offset > len ||
      h.pixel_size != len - h.pixel_offset)
    return NULL;
  const guint8 *meta = data + sizeof h;
  guint32 crc = crc_of(0, meta, h.meta_size);
  if (crc_of(crc, data + h.pixel_offset, h.pixel_size) != h.crc)
    return NULL;

  /* Untrusted bytes: GVariant checks them as it reads (no crash on any input). */
  c->meta = g_variant_ref_sink(
      g_variant_new_from_data(G_VARIANT_TYPE(META_TYPE), meta, h.meta_size, FALSE, NULL, NULL));
  const char *stored_folder;
  guint32 stored_size, stored_channels;
  g_autoptr(GVariant) classes = NULL, entries = NULL;
  g_variant_get(c->meta, "(&suu@as@a(sxxtis))", &stored_folder, &stored_size, &stored_channels,
                &classes, &entries);
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
  if (ce->size != e->size || ce->mtime_ns != e->mtime_ns || ce->inode != e->inode ||
      ce->label != e->label)
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

static GVariant *build_meta(const char *folder, int size, int channels,
                            const CohortImageListing *listing)
{
  g_autofree char *abs = g_canonicalize_filename(folder, NULL);
  GVariantBuilder classes, entries;
  g_variant_builder_init(&classes, G_VARIANT_TYPE("as"));
  for (guint i = 0; i < listing->classes->len; i++)
    g_variant_builder_add(&classes, "s", (const char *)listing->classes->pdata[i]);
  g_variant_builder_init(&entries, G_VARIANT_TYPE("a(sxxtis)"));
  for (guint i = 0; i < listing->entries->len; i++) {
    const CohortImageEntry *e = &g_array_index(listing->entries, CohortImageEntry, i);
    g_variant_builder_add(&entries, "(sxxtis)", e->rel, e->size, e->mtime_ns, e->inode,
                          (gint32)e->label, e->bad ? e->bad : "");
  }
  return g_variant_ref_sink(
      g_variant_new("(suuasa(sxxtis))", abs, (guint32)size, (guint32)channels, &classes, &entries));
}

static gboolean write_all(int fd, const void *buf, gsize len)
{
  const guint8 *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return FALSE;
    p += n;
    len -= (gsize)n;
  }
  return TRUE;
}

/* The rename is durable only once the folder's entry is on disk too. */
static void sync_folder(const char *path)
{
  g_autofree char *dir = g_path_get_dirname(path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

gboolean cohort_image_cache_write(const char *path, const char *folder, int size, int channels,
                                  const CohortImageListing *listing, const guint8 *pixels,
                                  GError **error)
{
  gsize n_good = 0;
  for (guint i = 0; i < listing->entries->len; i++)
    n_good += g_array_index(listing->entries, CohortImageEntry, i).bad == NULL;
  g_autoptr(GVariant) meta = build_meta(folder, size, channels, listing);
  const guint8 *meta_data = g_variant_get_data(meta);
  CacheHeader h = {.version = CACHE_VERSION, .byte_order = CACHE_ORDER};
  memcpy(h.magic, CACHE_MAGIC, 8);
  h.meta_size = g_variant_get_size(meta);
  h.pixel_offset = (sizeof h + h.meta_size + 63) / 64 * 64;
  h.pixel_size = n_good * size * size * channels;
  h.crc = crc_of(crc_of(0, meta_data, h.meta_size), pixels, h.pixel_size);
  static const guint8 zeros[64];

  g_autofree char *dir = g_path_get_dirname(path);
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    int err = errno;
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot create the image cache folder: %s", dir, g_strerror(err));
    return FALSE;
  }
  g_autofree char *tmp = g_strdup_printf("%s.tmp-XXXXXX", path);
  int fd = g_mkstemp(tmp);
  gboolean ok = fd >= 0 && write_all(fd, &h, sizeof h) && write_all(fd, meta_data, h.meta_size) &&
                write_all(fd, zeros, h.pixel_offset - sizeof h - h.meta_size) &&
                write_all(fd, pixels, h.pixel_size) && fsync(fd) == 0;
  int err = errno;
  if (fd >= 0 && close(fd) != 0 && ok) {
    ok = FALSE;
    err = errno;
  }
  if (ok && g_rename(tmp, path) != 0) {
    ok = FALSE;
    err = errno;
  }
  if (!ok) {
    if (fd >= 0)
      g_unlink(tmp);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: cannot write the image cache: %s", path, g_strerror(err));
    return FALSE;
  }
  sync_folder(path);
  return TRUE;
}
