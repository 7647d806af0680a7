/* A model's tensor groups in one .safetensors file, written and read in pieces (see
 * group-file.h). */
#include "engine/model/group-file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/fileio.h"
#include "engine/model/model-io.h"

struct CohortGroupFile {
  char *path;
  GBytes *prefix;
  GPtrArray *names;
  GArray *entries; /* of CohortStEntry, data NULL: the whole file's */
  guint n_groups;
  guint64 *group_at;  /* each group's first byte in the file */
  guint64 buffers_at; /* the buffers' */
  guint64 size;
  const CohortModel *model;
};

static gboolean io_failed(GError **error, const char *path, const char *what, int e)
{
  g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot %s: %s", path, what,
              g_strerror(e));
  return FALSE;
}

static guint64 entry_bytes(const CohortStEntry *e)
{
  guint64 numel = 1;
  for (int d = 0; d < e->ndim; d++)
    numel *= (guint64)e->shape[d];
  return numel * (e->int64 ? 8 : 4);
}

CohortGroupFile *cohort_group_file_new(const CohortModel *m, const char *const *prefixes,
                                       GHashTable *metadata, const char *path, GError **error)
{
  g_return_val_if_fail(prefixes && prefixes[0] && !prefixes[0][0], NULL);
  /* A group is one byte range only when the table's tensors lie back to back. */
  for (guint i = 0; i < m->n_tensors; i++) {
    size_t before = i ? m->tensors[i - 1].offset + m->tensors[i - 1].numel : 0;
    if (m->tensors[i].offset != before) {
      g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                  "%s: the %s model's tensor \"%s\" does not follow the one before it", path,
                  m->klass->name, m->tensors[i].name);
      return NULL;
    }
  }
  g_autoptr(CohortGroupFile) gf = g_new0(CohortGroupFile, 1);
  gf->path = g_strdup(path);
  gf->model = m;
  gf->names = g_ptr_array_new_with_free_func(g_free);
  gf->entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  while (prefixes[gf->n_groups])
    gf->n_groups++;
  gf->group_at = g_new0(guint64, gf->n_groups);
  /* The entries the whole-model writers make, in their order, with no data. */
  guint *first = g_new(guint, gf->n_groups + 1);
  for (guint g = 0; g < gf->n_groups; g++) {
    first[g] = gf->entries->len;
    cohort_tensor_st_entries(m->tensors, m->n_tensors, NULL, prefixes[g], gf->names, gf->entries);
    if (g == 0)
      cohort_tensor_st_entries(m->buffers, m->n_buffers, NULL, "", gf->names, gf->entries);
  }
  first[gf->n_groups] = gf->entries->len;
  g_autoptr(GHashTable) meta = g_hash_table_new(g_str_hash, g_str_equal);
  if (metadata) {
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, metadata);
    while (g_hash_table_iter_next(&it, &k, &v))
      g_hash_table_insert(meta, k, v);
  }
  if (!g_hash_table_contains(meta, "format"))
    g_hash_table_insert(meta, "format", "pt");
  CohortStEntry *e = (CohortStEntry *)gf->entries->data;
  gf->prefix = cohort_safetensors_prefix(path, e, gf->entries->len, meta, error);
  if (!gf->prefix) {
    g_free(first);
    return NULL;
  }
  guint64 at = g_bytes_get_size(gf->prefix);
  for (guint g = 0, i = 0; i < gf->entries->len; i++) {
    while (g < gf->n_groups && first[g] == i)
      gf->group_at[g++] = at;
    if (i == (guint)m->n_tensors)
      gf->buffers_at = at;
    at += entry_bytes(&e[i]);
  }
  gf->size = at;
  g_free(first);
  return g_steal_pointer(&gf);
}

void cohort_group_file_free(CohortGroupFile *gf)
{
  if (!gf)
    return;
  g_free(gf->path);
  g_clear_pointer(&gf->prefix, g_bytes_unref);
  g_clear_pointer(&gf->names, g_ptr_array_unref);
  g_clear_pointer(&gf->entries, g_array_unref);
  g_free(gf->group_at);
  g_free(gf);
}

static gboolean pwrite_all(int fd, const void *buf, size_t len, guint64 at)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t w = pwrite(fd, p, len, (off_t)at);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return FALSE;
    p += w;
    len -= (size_t)w;
    at += (guint64)w;
  }
  return TRUE;
}

gboolean cohort_group_file_create(const CohortGroupFile *gf, const float *buffers, GError **error)
{
  int fd = open(gf->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_failed(error, gf->path, "create", errno);
  gsize psize = 0;
  const void *prefix = g_bytes_get_data(gf->prefix, &psize);
  gboolean ok = ftruncate(fd, (off_t)gf->size) == 0 && pwrite_all(fd, prefix, psize, 0) &&
                lseek(fd, (off_t)gf->buffers_at, SEEK_SET) == (off_t)gf->buffers_at;
  const CohortModel *m = gf->model;
  const CohortStEntry *e = (const CohortStEntry *)gf->entries->data;
  for (guint i = 0; ok && i < m->n_buffers; i++) {
    CohortStEntry b = e[m->n_tensors + i];
    b.data = buffers + m->buffers[i].offset;
    ok = cohort_safetensors_write_entry(fd, &b);
  }
  int err = errno;
  if (!ok) {
    close(fd);
    return io_failed(error, gf->path, "write", err);
  }
  return cohort_group_file_close(gf, fd, error);
}

int cohort_group_file_open(const CohortGroupFile *gf, GError **error)
{
  int fd = open(gf->path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    io_failed(error, gf->path,
              "open for writing (every rank writes its shard into the file rank 0 "
              "created: the folder must be one every rank sees)",
              errno);
  return fd;
}

gboolean cohort_group_file_write(const CohortGroupFile *gf, int fd, guint group, size_t offset,
                                 size_t count, const float *src, GError **error)
{
  g_return_val_if_fail(group < gf->n_groups && offset + count <= gf->model->n_params, FALSE);
  guint64 at = gf->group_at[group] + 4 * (guint64)offset;
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
  gboolean ok = pwrite_all(fd, src, count * sizeof(float), at);
#else
  gboolean ok = TRUE;
  guint32 buf[4096];
  for (size_t i = 0; ok && i < count; i += G_N_ELEMENTS(buf)) {
    size_t n = MIN(G_N_ELEMENTS(buf), count - i);
    for (size_t k = 0; k < n; k++) {
      guint32 bits;
      memcpy(&bits, src + i + k, 4);
      buf[k] = GUINT32_TO_LE(bits);
    }
    ok = pwrite_all(fd, buf, n * 4, at + 4 * (guint64)i);
  }
#endif
  return ok || io_failed(error, gf->path, "write", errno);
}

gboolean cohort_group_file_close(const CohortGroupFile *gf, int fd, GError **error)
{
  gboolean ok = fsync(fd) == 0;
  int err = errno;
  if (close(fd) != 0 && ok) {
    ok = FALSE;
    err = errno;
  }
  return ok || io_failed(error, gf->path, "write", err);
}

gboolean cohort_group_file_read(const CohortModel *m, const CohortStFile *f, const char *prefix,
                                size_t offset, size_t count, float *dst, GError **error)
{
  size_t end = offset + count;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    size_t lo = MAX(offset, t->offset), hi = MIN(end, t->offset + t->numel);
    if (lo >= hi)
      continue;
    g_autofree char *name = g_strconcat(prefix, t->name, NULL);
    int64_t shape[COHORT_TENSOR_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
      shape[d] = t->shape[d];
    if (!cohort_safetensors_read_f32_range(f, name, t->ndim, shape, lo - t->offset, hi - lo,
                                           dst + (lo - offset), error))
      return FALSE;
  }
  return TRUE;
}
