/* The latent cache's journal file; see latent-cache.h. */
#include "data/latent-cache.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <glib/gstdio.h>

#include "data/dataset.h"
#include "engine/base/fileio.h"

#define MAGIC   "COHLATC1"
#define VERSION 1
#define ORDER   0x01020304u
/* Records between fsyncs. */
#define SYNC_EVERY 64
/* No latent of any VAE Cohort reads is near this; a header claiming more is not a cache. */
#define MAX_FLOATS ((guint64)1 << 26)

typedef struct {
  char magic[8];
  guint32 version;
  guint32 byte_order;
  guint64 floats;
  guint64 reserved;
} Header;
G_STATIC_ASSERT(sizeof(Header) == 32);

struct CohortLatentCache {
  char *path;
  int fd;
  gsize floats;
  GHashTable *records; /* GBytes key → float values (owned) */
  guint at_open;
  guint64 cut;
  guint unsynced;
};

static gsize record_bytes(gsize floats)
{
  return COHORT_LATENT_KEY_BYTES + 4 + floats * sizeof(float);
}

static guint32 record_crc(const guint8 *key, const float *values, gsize floats)
{
  guint32 crc = (guint32)crc32_z(0, key, COHORT_LATENT_KEY_BYTES);
  return (guint32)crc32_z(crc, (const guint8 *)values, floats * sizeof(float));
}

static gboolean io_error(GError **error, const char *path, const char *what)
{
  int e = errno;
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot %s the latent cache: %s",
              path, what, g_strerror(e));
  return FALSE;
}

static void put(CohortLatentCache *c, const guint8 *key, float *values)
{
  g_hash_table_replace(c->records, g_bytes_new(key, COHORT_LATENT_KEY_BYTES), values);
}

/* Reads the records of an open file positioned after its header; returns the offset just after
 * the last intact record. */
static guint64 read_records(CohortLatentCache *c, guint64 size)
{
  gsize rb = record_bytes(c->floats);
  g_autofree guint8 *buf = g_malloc(rb);
  guint64 off = sizeof(Header);
  while (off + rb <= size) {
    if (pread(c->fd, buf, rb, (off_t)off) != (ssize_t)rb)
      break;
    guint32 crc;
    memcpy(&crc, buf + COHORT_LATENT_KEY_BYTES, 4);
    float *values = g_new(float, c->floats);
    memcpy(values, buf + COHORT_LATENT_KEY_BYTES + 4, c->floats * sizeof(float));
    if (record_crc(buf, values, c->floats) != crc) {
      g_free(values);
      break;
    }
    put(c, buf, values);
    off += rb;
  }
  return off;
}

static gboolean write_header(int fd, gsize floats)
{
  Header h = {.version = VERSION, .byte_order = ORDER, .floats = floats};
  memcpy(h.magic, MAGIC, 8);
  return ftruncate(fd, 0) == 0 && pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
}

CohortLatentCache *cohort_latent_cache_open(const char *path, gsize floats, GError **error)
{
  g_return_val_if_fail(floats > 0 && floats <= MAX_FLOATS, NULL);
  g_autofree char *dir = g_path_get_dirname(path);
  if (g_mkdir_with_parents(dir, 0755) != 0)
    return io_error(error, dir, "create the folder of"), NULL;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_error(error, path, "open"), NULL;
  CohortLatentCache *c = g_new0(CohortLatentCache, 1);
  c->path = g_strdup(path);
  c->fd = fd;
  c->floats = floats;
  c->records =
      g_hash_table_new_full(g_bytes_hash, g_bytes_equal, (GDestroyNotify)g_bytes_unref, g_free);
  struct stat st;
  Header h;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    cohort_latent_cache_free(c);
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: the latent cache is not a regular file", path);
    return NULL;
  }
  gboolean ours = (guint64)st.st_size >= sizeof h && pread(fd, &h, sizeof h, 0) == sizeof h &&
                  memcmp(h.magic, MAGIC, 8) == 0 && h.version == VERSION && h.byte_order == ORDER &&
                  h.floats == floats && h.reserved == 0;
  guint64 end = sizeof h;
  if (ours)
    end = read_records(c, (guint64)st.st_size);
  else if (!write_header(fd, floats)) {
    io_error(error, path, "start");
    cohort_latent_cache_free(c);
    return NULL;
  }
  /* A torn last record from a killed run is cut off: appends continue from the good end. */
  if (ours && end < (guint64)st.st_size) {
    c->cut = (guint64)st.st_size - end;
    if (ftruncate(fd, (off_t)end) != 0) {
      io_error(error, path, "cut the torn end of");
      cohort_latent_cache_free(c);
      return NULL;
    }
  }
  c->at_open = g_hash_table_size(c->records);
  return c;
}

void cohort_latent_cache_free(CohortLatentCache *c)
{
  if (!c)
    return;
  if (c->fd >= 0) {
    if (c->unsynced)
      fsync(c->fd);
    close(c->fd);
  }
  g_hash_table_unref(c->records);
  g_free(c->path);
  g_free(c);
}

guint cohort_latent_cache_count(const CohortLatentCache *c)
{
  return g_hash_table_size(c->records);
}

guint cohort_latent_cache_count_at_open(const CohortLatentCache *c)
{
  return c->at_open;
}

guint64 cohort_latent_cache_cut_bytes(const CohortLatentCache *c)
{
  return c->cut;
}

const float *cohort_latent_cache_lookup(const CohortLatentCache *c, const guint8 *key)
{
  g_autoptr(GBytes) k = g_bytes_new_static(key, COHORT_LATENT_KEY_BYTES);
  return g_hash_table_lookup(c->records, k);
}

gboolean cohort_latent_cache_append(CohortLatentCache *c, const guint8 *key, const float *values,
                                    GError **error)
{
  gsize rb = record_bytes(c->floats);
  g_autofree guint8 *buf = g_malloc(rb);
  guint32 crc = record_crc(key, values, c->floats);
  memcpy(buf, key, COHORT_LATENT_KEY_BYTES);
  memcpy(buf + COHORT_LATENT_KEY_BYTES, &crc, 4);
  memcpy(buf + COHORT_LATENT_KEY_BYTES + 4, values, c->floats * sizeof(float));
  off_t end = lseek(c->fd, 0, SEEK_END);
  if (end < 0 || !cohort_write_all(c->fd, buf, rb))
    return io_error(error, c->path, "append to");
  put(c, key, g_memdup2(values, c->floats * sizeof(float)));
  if (++c->unsynced >= SYNC_EVERY)
    return cohort_latent_cache_sync(c, error);
  return TRUE;
}

gboolean cohort_latent_cache_sync(CohortLatentCache *c, GError **error)
{
  if (c->unsynced && fsync(c->fd) != 0)
    return io_error(error, c->path, "flush");
  c->unsynced = 0;
  return TRUE;
}

typedef struct {
  CohortLatentCache *c;
  GHashTable *keep;
} Compact;

static gboolean write_kept(int fd, gpointer data)
{
  Compact *k = data;
  Header h = {.version = VERSION, .byte_order = ORDER, .floats = k->c->floats};
  memcpy(h.magic, MAGIC, 8);
  if (!cohort_write_all(fd, &h, sizeof h))
    return FALSE;
  gsize rb = record_bytes(k->c->floats);
  g_autofree guint8 *buf = g_malloc(rb);
  GHashTableIter it;
  gpointer key, val;
  g_hash_table_iter_init(&it, k->c->records);
  while (g_hash_table_iter_next(&it, &key, &val)) {
    if (!g_hash_table_contains(k->keep, key))
      continue;
    const guint8 *kb = g_bytes_get_data(key, NULL);
    guint32 crc = record_crc(kb, val, k->c->floats);
    memcpy(buf, kb, COHORT_LATENT_KEY_BYTES);
    memcpy(buf + COHORT_LATENT_KEY_BYTES, &crc, 4);
    memcpy(buf + COHORT_LATENT_KEY_BYTES + 4, val, k->c->floats * sizeof(float));
    if (!cohort_write_all(fd, buf, rb))
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_latent_cache_compact(CohortLatentCache *c, GHashTable *keep, GError **error)
{
  guint total = g_hash_table_size(c->records), kept = 0;
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init(&it, c->records);
  while (g_hash_table_iter_next(&it, &key, NULL))
    kept += g_hash_table_contains(keep, key);
  if (4 * (guint64)(total - kept) < total)
    return TRUE;
  if (!cohort_latent_cache_sync(c, error))
    return FALSE;
  Compact k = {c, keep};
  if (!cohort_write_atomic(c->path, write_kept, &k, error))
    return FALSE;
  g_hash_table_iter_init(&it, c->records);
  while (g_hash_table_iter_next(&it, &key, NULL))
    if (!g_hash_table_contains(keep, key))
      g_hash_table_iter_remove(&it);
  /* The old file is gone: appends go to the new one. */
  int fd = open(c->path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return io_error(error, c->path, "reopen");
  close(c->fd);
  c->fd = fd;
  return TRUE;
}
