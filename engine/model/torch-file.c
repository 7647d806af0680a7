/* PyTorch weight files: the archive's records, the state dict, and strided reads converted to
 * float32 (torch-file.h). */
#include "engine/model/torch-file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model/torch-pickle.h"
#include "engine/model/zip-stored.h"
#include "kernels/math-inline.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-torch-file-error-quark, cohort_torch_file_error)
/* clang-format on */

struct CohortTorchFile {
  char *label;
  GMappedFile *map;
  CohortZip *zip;
  CohortTorchPickle *pickle;
  char *prefix; /* the archive's folder, "archive" */
  GPtrArray *names;
  GHashTable *byname; /* name → CohortTorchTensor */
};

static gboolean fail(GError **error, int code, const char *label, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);

static gboolean fail(GError **error, int code, const char *label, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, COHORT_TORCH_FILE_ERROR, code, "%s: %s", label, msg);
  return FALSE;
}

/* The legacy format starts with its magic number pickled on its own: PROTO 2, LONG1. (A lone
 * 0x80 is not enough: a safetensors header of 128 bytes starts with it too.) */
static gboolean legacy(const guint8 *head, gsize len)
{
  return len >= 3 && head[0] == 0x80 && head[1] == 0x02 && head[2] == 0x8a;
}

gboolean cohort_torch_file_sniff(const guint8 *head, gsize len)
{
  return (len >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) ||
         (len >= 4 && memcmp(head, "PK\x05\x06", 4) == 0) || legacy(head, len);
}

void cohort_torch_file_close(CohortTorchFile *f)
{
  if (!f)
    return;
  cohort_zip_free(f->zip);
  cohort_torch_pickle_free(f->pickle);
  if (f->map)
    g_mapped_file_unref(f->map);
  if (f->names)
    g_ptr_array_free(f->names, TRUE);
  if (f->byname)
    g_hash_table_destroy(f->byname);
  g_free(f->prefix);
  g_free(f->label);
  g_free(f);
}

/* The archive's folder: the one "<prefix>/data.pkl" record. */
static gboolean find_prefix(CohortTorchFile *f, GError **error)
{
  for (guint i = 0; i < cohort_zip_count(f->zip); i++) {
    const char *name = cohort_zip_entry(f->zip, i)->name;
    const char *slash = strchr(name, '/');
    if (slash && slash != name && strcmp(slash, "/data.pkl") == 0) {
      if (f->prefix)
        return fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, f->label,
                    "two pickles (%s/data.pkl and %s); a torch.save file has one", f->prefix, name);
      f->prefix = g_strndup(name, (gsize)(slash - name));
    }
  }
  if (!f->prefix)
    return fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, f->label,
                "a ZIP archive without a data.pkl record: not a file written by torch.save");
  return TRUE;
}

static const CohortZipEntry *record(CohortTorchFile *f, const char *rest)
{
  g_autofree char *name = g_strconcat(f->prefix, "/", rest, NULL);
  return cohort_zip_find(f->zip, name);
}

static gboolean read_archive(CohortTorchFile *f, GError **error)
{
  const CohortZipEntry *order = record(f, "byteorder");
  g_autoptr(GError) local = NULL;
  if (order) {
    const guint8 *b = cohort_zip_data(f->zip, order, &local);
    if (!b)
      return fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, f->label, "%s", local->message);
    if (order->size != 6 || memcmp(b, "little", 6) != 0)
      return fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, f->label,
                  "saved on a big-endian machine; allowed: little-endian files");
  }
  const CohortZipEntry *pkl = record(f, "data.pkl");
  const guint8 *bytes = cohort_zip_data(f->zip, pkl, &local);
  if (bytes)
    f->pickle = cohort_torch_pickle_load(bytes, pkl->size, &local);
  if (!f->pickle) {
    gboolean refused =
        g_error_matches(local, COHORT_TORCH_PICKLE_ERROR, COHORT_TORCH_PICKLE_ERROR_REFUSED);
    return fail(error, refused ? COHORT_TORCH_FILE_ERROR_REFUSED : COHORT_TORCH_FILE_ERROR_FORMAT,
                f->label, "%s", local->message);
  }
  f->names = g_ptr_array_new();
  f->byname = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < f->pickle->tensors->len; i++) {
    CohortTorchTensor *t = &g_array_index(f->pickle->tensors, CohortTorchTensor, i);
    g_ptr_array_add(f->names, t->name);
    g_hash_table_insert(f->byname, t->name, t);
  }
  g_ptr_array_add(f->names, NULL);
  return TRUE;
}

CohortTorchFile *cohort_torch_file_open_bytes(const guint8 *data, gsize size, const char *label,
                                              GError **error)
{
  g_autoptr(CohortTorchFile) f = g_new0(CohortTorchFile, 1);
  f->label = g_strdup(label);
  if (legacy(data, size)) {
    fail(error, COHORT_TORCH_FILE_ERROR_LEGACY, label,
         "PyTorch's legacy format (before 1.6, or _use_new_zipfile_serialization=False), which "
         "only Python's unrestricted unpickler reads; if you trust the file, re-save it with "
         "PyTorch 1.6 or later: python3 -c \"import torch; torch.save(torch.load('%s'), "
         "'new.pth')\"",
         label);
    return NULL;
  }
  g_autoptr(GError) local = NULL;
  f->zip = cohort_zip_open(data, size, &local);
  if (!f->zip) {
    fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, label, "not a PyTorch weights file: %s",
         local->message);
    return NULL;
  }
  if (!find_prefix(f, error) || !read_archive(f, error))
    return NULL;
  return g_steal_pointer(&f);
}

static GMappedFile *map_regular(const char *path, GError **error)
{
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    fail(error, COHORT_TORCH_FILE_ERROR_IO, path, "cannot read: %s", g_strerror(e));
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    fail(error, COHORT_TORCH_FILE_ERROR_IO, path, "cannot read: it is %s, not a regular file",
         S_ISDIR(st.st_mode) ? "a folder" : "a device, socket or pipe");
    return NULL;
  }
  g_autoptr(GError) local = NULL;
  GMappedFile *map = g_mapped_file_new_from_fd(fd, FALSE, &local);
  close(fd);
  if (!map)
    fail(error, COHORT_TORCH_FILE_ERROR_IO, path, "cannot read: %s", local->message);
  return map;
}

CohortTorchFile *cohort_torch_file_open(const char *path, GError **error)
{
  GMappedFile *map = map_regular(path, error);
  if (!map)
    return NULL;
  const guint8 *data = (const guint8 *)g_mapped_file_get_contents(map);
  CohortTorchFile *f = cohort_torch_file_open_bytes(data ? data : (const guint8 *)"",
                                                    g_mapped_file_get_length(map), path, error);
  if (!f) {
    g_mapped_file_unref(map);
    return NULL;
  }
  f->map = map;
  return f;
}

const char *const *cohort_torch_file_names(const CohortTorchFile *f)
{
  return (const char *const *)f->names->pdata;
}

const char *cohort_torch_file_dict_path(const CohortTorchFile *f)
{
  return f->pickle->dict_path;
}

int cohort_torch_file_shape(const CohortTorchFile *f, const char *name, int64_t shape[8])
{
  const CohortTorchTensor *t = g_hash_table_lookup(f->byname, name);
  if (!t)
    return -1;
  for (int d = 0; d < t->ndim; d++)
    shape[d] = t->shape[d];
  return t->ndim;
}

static float element(const guint8 *p, CohortTorchDtype dtype)
{
  switch (dtype) {
  case COHORT_TORCH_F32: {
    guint32 u;
    memcpy(&u, p, 4);
    return cohort_f32_from_bits(GUINT32_FROM_LE(u));
  }
  case COHORT_TORCH_F64: {
    guint64 u;
    double d;
    memcpy(&u, p, 8);
    u = GUINT64_FROM_LE(u);
    memcpy(&d, &u, 8);
    return (float)d;
  }
  case COHORT_TORCH_F16: {
    guint16 h = (guint16)(p[0] | p[1] << 8);
    guint32 sign = (guint32)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
    if (exp == 31) /* inf, NaN */
      return cohort_f32_from_bits(sign | 0x7f800000u | man << 13);
    if (exp == 0) /* zero, subnormal: man * 2^-24 */
      return (sign ? -1.0f : 1.0f) * (float)man * 0x1p-24f;
    return cohort_f32_from_bits(sign | (exp + 112) << 23 | man << 13);
  }
  case COHORT_TORCH_BF16:
    return cohort_bf16_to_f32((guint16)(p[0] | p[1] << 8));
  case COHORT_TORCH_I64: {
    guint64 u;
    memcpy(&u, p, 8);
    return (float)(gint64)GUINT64_FROM_LE(u);
  }
  case COHORT_TORCH_I32:
    return (float)(gint32)(p[0] | p[1] << 8 | p[2] << 16 | (guint32)p[3] << 24);
  case COHORT_TORCH_I16:
    return (float)(gint16)(p[0] | p[1] << 8);
  case COHORT_TORCH_I8:
    return (float)(gint8)p[0];
  default: /* U8, BOOL */
    return (float)p[0];
  }
}

/* The tensor's storage bytes, checked against the record's size. */
static const guint8 *storage_bytes(CohortTorchFile *f, const CohortTorchStorage *s, GError **error)
{
  guint size = cohort_torch_dtype_size(s->dtype);
  if (size == 0) {
    fail(error, COHORT_TORCH_FILE_ERROR_DTYPE, f->label,
         "storage \"%s\" is a %s (complex or quantized), which Cohort does not convert to float32",
         s->key, s->type_name);
    return NULL;
  }
  g_autofree char *rest = g_strconcat("data/", s->key, NULL);
  const CohortZipEntry *e = record(f, rest);
  if (!e) {
    fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, f->label,
         "the record %s/%s of a storage is missing", f->prefix, rest);
    return NULL;
  }
  if (s->numel > G_MAXUINT64 / size || e->size != s->numel * size) {
    fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, f->label,
         "storage \"%s\" should hold %" G_GUINT64_FORMAT
         " elements of %u bytes, its record has %" G_GUINT64_FORMAT " bytes",
         s->key, s->numel, size, e->size);
    return NULL;
  }
  g_autoptr(GError) local = NULL;
  const guint8 *p = cohort_zip_data(f->zip, e, &local);
  if (!p)
    fail(error, COHORT_TORCH_FILE_ERROR_FORMAT, f->label, "%s", local->message);
  return p;
}

gboolean cohort_torch_file_read_f32(CohortTorchFile *f, const char *name, int ndim,
                                    const int64_t *shape, float *dst, GError **error)
{
  const CohortTorchTensor *t = g_hash_table_lookup(f->byname, name);
  if (!t)
    return fail(error, COHORT_TORCH_FILE_ERROR_MISSING, f->label, "tensor \"%s\" is missing", name);
  gboolean same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++)
    same = t->shape[d] == shape[d];
  if (!same) {
    GString *want = g_string_new("["), *got = g_string_new("[");
    for (int d = 0; d < ndim; d++)
      g_string_append_printf(want, "%s%" G_GINT64_FORMAT, d ? ", " : "", (gint64)shape[d]);
    for (int d = 0; d < t->ndim; d++)
      g_string_append_printf(got, "%s%" G_GINT64_FORMAT, d ? ", " : "", t->shape[d]);
    fail(error, COHORT_TORCH_FILE_ERROR_SHAPE, f->label,
         "tensor \"%s\" has shape %s], expected %s]", name, got->str, want->str);
    g_string_free(want, TRUE);
    g_string_free(got, TRUE);
    return FALSE;
  }
  const CohortTorchStorage *s = &g_array_index(f->pickle->storages, CohortTorchStorage, t->storage);
  const guint8 *base = storage_bytes(f, s, error);
  if (!base)
    return FALSE;
  guint size = cohort_torch_dtype_size(s->dtype);
  /* Row-major over the shape, with an index per dimension: the view was checked to lie inside
   * the storage when the pickle was read. */
  guint64 numel = 1;
  for (int d = 0; d < ndim; d++)
    numel *= (guint64)shape[d];
  gint64 idx[8] = {0};
  for (guint64 i = 0; i < numel; i++) {
    gint64 at = t->offset;
    for (int d = 0; d < ndim; d++)
      at += idx[d] * t->stride[d];
    dst[i] = element(base + (guint64)at * size, s->dtype);
    for (int d = ndim - 1; d >= 0 && ++idx[d] == shape[d]; d--)
      idx[d] = 0;
  }
  return TRUE;
}
