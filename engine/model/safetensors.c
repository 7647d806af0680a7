/* .safetensors reading and writing. The file is memory-mapped; every number in the header is
 * checked against the mapped size before any tensor is touched. */
#include "engine/model/safetensors.h"

#include "engine/base/fileio.h"
#include "engine/base/phase.h"
#include "engine/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "engine/base/json-read.h"

/* Headers above this are refused before parsing: real ones are kilobytes to a few MB. */
#define MAX_HEADER_SIZE (100u * 1024u * 1024u)
#define MAX_DIMS        8

/* clang-format off */
G_DEFINE_QUARK(cohort-safetensors-error-quark, cohort_safetensors_error)
/* clang-format on */

typedef enum {
  DT_F32,
  DT_F16,
  DT_BF16,
  DT_I64,
  DT_OTHER, /* a valid safetensors dtype that does not convert to F32 */
} Dtype;

typedef struct {
  char *name;
  Dtype dtype;
  char *dtype_name;
  int ndim;
  int64_t shape[MAX_DIMS];
  guint64 begin, end; /* into the data section */
} TensorDesc;

struct CohortStFile {
  char *path;
  GMappedFile *map;
  const guint8 *data; /* the data section */
  guint64 data_size;
  GHashTable *tensors; /* name -> TensorDesc* */
  char **names;        /* by data offset */
  GHashTable *metadata;
};

static void tensor_desc_free(gpointer p)
{
  TensorDesc *t = p;
  g_free(t->name);
  g_free(t->dtype_name);
  g_free(t);
}

void cohort_safetensors_close(CohortStFile *f)
{
  if (!f)
    return;
  g_free(f->path);
  g_clear_pointer(&f->map, g_mapped_file_unref);
  g_clear_pointer(&f->tensors, g_hash_table_unref);
  g_free(f->names);
  g_clear_pointer(&f->metadata, g_hash_table_unref);
  g_free(f);
}

static gboolean parse_dtype(const char *s, Dtype *dt, gsize *elem_size)
{
  static const struct {
    const char *name;
    Dtype dt;
    gsize size;
  } table[] = {
      {"F32", DT_F32, 4},    {"F16", DT_F16, 2},       {"BF16", DT_BF16, 2},
      {"F64", DT_OTHER, 8},  {"I64", DT_I64, 8},       {"U64", DT_OTHER, 8},
      {"I32", DT_OTHER, 4},  {"U32", DT_OTHER, 4},     {"I16", DT_OTHER, 2},
      {"U16", DT_OTHER, 2},  {"I8", DT_OTHER, 1},      {"U8", DT_OTHER, 1},
      {"BOOL", DT_OTHER, 1}, {"F8_E4M3", DT_OTHER, 1}, {"F8_E5M2", DT_OTHER, 1},
  };
  for (gsize i = 0; i < G_N_ELEMENTS(table); i++) {
    if (strcmp(s, table[i].name) == 0) {
      *dt = table[i].dt;
      *elem_size = table[i].size;
      return TRUE;
    }
  }
  return FALSE;
}

static char *shape_string(int ndim, const int64_t *shape)
{
  GString *s = g_string_new("[");
  for (int i = 0; i < ndim; i++)
    g_string_append_printf(s, "%s%" G_GINT64_FORMAT, i ? ", " : "", shape[i]);
  g_string_append_c(s, ']');
  return g_string_free(s, FALSE);
}

/* A non-negative integer JSON node, or FALSE. */
static gboolean node_uint(JsonNode *node, guint64 *out)
{
  if (!JSON_NODE_HOLDS_VALUE(node) || json_node_get_value_type(node) != G_TYPE_INT64)
    return FALSE;
  gint64 v = json_node_get_int(node);
  if (v < 0)
    return FALSE;
  *out = (guint64)v;
  return TRUE;
}

/* A header that breaks the format: the message prefixed with the file. */
static gboolean bad(GError **error, const char *path, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean bad(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT, fmt, ap);
  va_end(ap);
  g_prefix_error(error, "%s: ", path);
  return FALSE;
}

static gboolean parse_tensor(CohortStFile *f, const char *name, JsonNode *node, GError **error)
{
  const char *path = f->path;
  if (!JSON_NODE_HOLDS_OBJECT(node))
    return bad(error, path, "header entry \"%s\" is not an object", name);
  JsonObject *o = json_node_get_object(node);
  JsonNode *dtype_node = json_object_get_member(o, "dtype");
  JsonNode *shape_node = json_object_get_member(o, "shape");
  JsonNode *offsets_node = json_object_get_member(o, "data_offsets");
  if (!dtype_node || !shape_node || !offsets_node)
    return bad(error, path, "tensor \"%s\" lacks dtype, shape or data_offsets", name);
  if (!JSON_NODE_HOLDS_VALUE(dtype_node) || json_node_get_value_type(dtype_node) != G_TYPE_STRING)
    return bad(error, path, "tensor \"%s\": dtype is not a string", name);

  TensorDesc *t = g_new0(TensorDesc, 1);
  t->name = g_strdup(name);
  t->dtype_name = g_strdup(json_node_get_string(dtype_node));
  /* Owned by the table from here on, so every error path below frees it. */
  g_hash_table_replace(f->tensors, t->name, t);

  gsize elem_size = 0;
  if (!parse_dtype(t->dtype_name, &t->dtype, &elem_size))
    return bad(error, path,
               "tensor \"%s\": unknown dtype \"%s\" (allowed: F32, F16, BF16, F64, I64, U64, "
               "I32, U32, I16, U16, I8, U8, BOOL, F8_E4M3, F8_E5M2)",
               name, t->dtype_name);

  if (!JSON_NODE_HOLDS_ARRAY(shape_node))
    return bad(error, path, "tensor \"%s\": shape is not an array", name);
  JsonArray *shape = json_node_get_array(shape_node);
  guint nd = json_array_get_length(shape);
  if (nd > MAX_DIMS)
    return bad(error, path, "tensor \"%s\": %u dimensions (at most %d are read)", name, nd,
               MAX_DIMS);
  t->ndim = (int)nd;
  guint64 numel = 1;
  gboolean overflow = FALSE;
  for (guint i = 0; i < nd; i++) {
    guint64 d;
    if (!node_uint(json_array_get_element(shape, i), &d))
      return bad(error, path, "tensor \"%s\": shape[%u] is not a non-negative integer", name, i);
    t->shape[i] = (int64_t)d;
    if (d != 0 && numel > G_MAXUINT64 / d)
      overflow = TRUE;
    numel *= d;
  }

  if (!JSON_NODE_HOLDS_ARRAY(offsets_node) ||
      json_array_get_length(json_node_get_array(offsets_node)) != 2)
    return bad(error, path, "tensor \"%s\": data_offsets is not [begin, end]", name);
  JsonArray *offs = json_node_get_array(offsets_node);
  if (!node_uint(json_array_get_element(offs, 0), &t->begin) ||
      !node_uint(json_array_get_element(offs, 1), &t->end))
    return bad(error, path, "tensor \"%s\": data_offsets are not non-negative integers", name);
  if (t->begin > t->end || t->end > f->data_size)
    return bad(error, path,
               "tensor \"%s\": data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
               "] are outside the %" G_GUINT64_FORMAT "-byte data section (truncated file?)",
               name, t->begin, t->end, f->data_size);
  if (overflow || numel > G_MAXUINT64 / elem_size) {
    g_autofree char *s = shape_string(t->ndim, t->shape);
    return bad(error, path, "tensor \"%s\": shape %s is too large", name, s);
  }
  if (numel * elem_size != t->end - t->begin) {
    g_autofree char *s = shape_string(t->ndim, t->shape);
    return bad(error, path,
               "tensor \"%s\": %s %s is %" G_GUINT64_FORMAT
               " bytes but its data_offsets span %" G_GUINT64_FORMAT,
               name, t->dtype_name, s, numel * elem_size, t->end - t->begin);
  }
  return TRUE;
}

static gint compare_begin(gconstpointer a, gconstpointer b)
{
  const TensorDesc *x = *(TensorDesc *const *)a, *y = *(TensorDesc *const *)b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

/* The tensors, sorted by offset, must tile the data section exactly: no gap, no overlap, no
 * byte left over. A header length off by one (every tensor shifted a byte) fails here. */
static gboolean check_tiling(CohortStFile *f, GPtrArray *sorted, GError **error)
{
  guint64 covered = 0;
  for (guint i = 0; i < sorted->len; i++) {
    TensorDesc *t = sorted->pdata[i];
    if (t->begin < covered)
      return bad(error, f->path, "tensors \"%s\" and \"%s\" overlap in the data section",
                 ((TensorDesc *)sorted->pdata[i - 1])->name, t->name);
    if (t->begin > covered)
      return bad(error, f->path,
                 "tensor \"%s\" starts at byte %" G_GUINT64_FORMAT
                 " of the data section but the tensors before it end at byte %" G_GUINT64_FORMAT
                 "; allowed: tensors packed without gaps",
                 t->name, t->begin, covered);
    covered = t->end;
  }
  if (covered != f->data_size)
    return bad(error, f->path,
               "the tensors cover %" G_GUINT64_FORMAT " bytes but the data section after the "
               "header has %" G_GUINT64_FORMAT
               " (a wrong header length, a truncated file or trailing bytes)",
               covered, f->data_size);
  return TRUE;
}

static gboolean parse_header(CohortStFile *f, const char *json, gsize len, GError **error)
{
  g_autoptr(GError) local = NULL;
  g_autofree char *source = g_strdup_printf("%s: header", f->path);
  g_autoptr(JsonNode) root = cohort_json_parse_strict(json, (gssize)len, source, 0, &local);
  if (!root) {
    g_set_error_literal(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT,
                        local->message);
    return FALSE;
  }
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return bad(error, f->path, "the header is not a JSON object");
  JsonObject *obj = json_node_get_object(root);

  g_autoptr(GList) members = json_object_get_members(obj);
  for (GList *l = members; l; l = l->next) {
    const char *name = l->data;
    JsonNode *node = json_object_get_member(obj, name);
    if (strcmp(name, "__metadata__") == 0) {
      if (!JSON_NODE_HOLDS_OBJECT(node))
        return bad(error, f->path, "__metadata__ is not an object");
      JsonObject *m = json_node_get_object(node);
      g_autoptr(GList) keys = json_object_get_members(m);
      for (GList *k = keys; k; k = k->next) {
        JsonNode *v = json_object_get_member(m, k->data);
        if (!JSON_NODE_HOLDS_VALUE(v) || json_node_get_value_type(v) != G_TYPE_STRING)
          return bad(error, f->path, "__metadata__ value of \"%s\" is not a string",
                     (const char *)k->data);
        g_hash_table_replace(f->metadata, g_strdup(k->data), g_strdup(json_node_get_string(v)));
      }
      continue;
    }
    if (!parse_tensor(f, name, node, error))
      return FALSE;
  }

  /* Sorting by offset gives the file order of names, and lets the tiling be checked. */
  guint n = g_hash_table_size(f->tensors);
  g_autoptr(GPtrArray) sorted = g_ptr_array_sized_new(n);
  GHashTableIter it;
  gpointer value;
  g_hash_table_iter_init(&it, f->tensors);
  while (g_hash_table_iter_next(&it, NULL, &value))
    g_ptr_array_add(sorted, value);
  g_ptr_array_sort(sorted, compare_begin);
  f->names = g_new0(char *, n + 1);
  for (guint i = 0; i < n; i++)
    f->names[i] = ((TensorDesc *)sorted->pdata[i])->name;
  return check_tiling(f, sorted, error);
}

/* Maps `path` when it is a regular file; a FIFO or device would block or never end. */
static GMappedFile *map_regular(const char *path, GError **error)
{
  g_autoptr(GError) local = NULL;
  GMappedFile *map = cohort_file_map_regular(path, COHORT_FILE_ANY_SIZE, NULL, &local);
  if (!map)
    g_set_error_literal(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                        local->message);
  return map;
}

/* What a file that is not safetensors (whose header would start with "{" after its length)
 * is, when its first bytes say: the formats users give instead. NULL when they do not. */
static const char *foreign_format(const guint8 *b, guint64 size)
{
  if (size >= 4 && b[0] == 'P' && b[1] == 'K' &&
      ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6)))
    return "a ZIP archive (PyTorch's torch.save format, as in .pt, .pth and pytorch_model.bin "
           "files); allowed here: safetensors (convert it with safetensors.torch.save_file)";
  if (size >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
    return "a Python pickle (PyTorch's legacy torch.save format, before 1.6 or with "
           "_use_new_zipfile_serialization=False, or a pickle.dump), which Cohort does not read; "
           "allowed: safetensors, or where PyTorch files are taken a torch.save ZIP archive "
           "(re-save it with PyTorch 1.6 or later)";
  return NULL;
}

CohortStFile *cohort_safetensors_open(const char *path, GError **error)
{
  g_autoptr(CohortStFile) f = g_new0(CohortStFile, 1);
  f->path = g_strdup(path);
  f->tensors = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, tensor_desc_free);
  f->metadata = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);

  f->map = map_regular(path, error);
  if (!f->map)
    return NULL;
  const guint8 *bytes = (const guint8 *)g_mapped_file_get_contents(f->map);
  guint64 size = g_mapped_file_get_length(f->map);
  if (size < 8) {
    bad(error, path, "%" G_GUINT64_FORMAT " bytes is too short for a safetensors file", size);
    return NULL;
  }
  const char *other = size > 8 && bytes[8] == '{' ? NULL : foreign_format(bytes, size);
  if (other) {
    bad(error, path, "not a safetensors file: it is %s", other);
    return NULL;
  }
  guint64 header_len;
  memcpy(&header_len, bytes, 8);
  header_len = GUINT64_FROM_LE(header_len);
  if (header_len > size - 8) {
    bad(error, path,
        "the header length %" G_GUINT64_FORMAT " is larger than the %" G_GUINT64_FORMAT
        " bytes that follow it (truncated or not a safetensors file)",
        header_len, size - 8);
    return NULL;
  }
  if (header_len > MAX_HEADER_SIZE || header_len < 2) {
    bad(error, path, "the header length %" G_GUINT64_FORMAT " is outside 2 to %u bytes", header_len,
        MAX_HEADER_SIZE);
    return NULL;
  }
  f->data = bytes + 8 + header_len;
  f->data_size = size - 8 - header_len;
  if (!parse_header(f, (const char *)bytes + 8, header_len, error))
    return NULL;
  return g_steal_pointer(&f);
}

gboolean cohort_safetensors_has(const CohortStFile *f, const char *name)
{
  return g_hash_table_contains(f->tensors, name);
}

const char *const *cohort_safetensors_names(const CohortStFile *f)
{
  return (const char *const *)f->names;
}

int cohort_safetensors_shape(const CohortStFile *f, const char *name, int64_t shape[8])
{
  const TensorDesc *t = g_hash_table_lookup(f->tensors, name);
  if (!t)
    return -1;
  memcpy(shape, t->shape, sizeof(int64_t) * (gsize)t->ndim);
  return t->ndim;
}

const char *cohort_safetensors_metadata(const CohortStFile *f, const char *key)
{
  return g_hash_table_lookup(f->metadata, key);
}

GHashTable *cohort_safetensors_metadata_all(const CohortStFile *f)
{
  return f->metadata;
}

static float f32_from_bits(guint32 bits)
{
  float v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

/* IEEE half to float, subnormals, infinities and NaN included. */
static float f16_to_f32(guint16 h)
{
  guint32 sign = (guint32)(h & 0x8000u) << 16;
  guint32 exp = (h >> 10) & 0x1fu;
  guint32 mant = h & 0x3ffu;
  if (exp == 0x1f)
    return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    /* zero or subnormal: mant * 2^-24, exact in float */
    float v = (float)mant * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

gboolean cohort_safetensors_read_f32_range(const CohortStFile *f, const char *name, int ndim,
                                           const int64_t *shape, guint64 first, guint64 count,
                                           float *dst, GError **error)
{
  const TensorDesc *t = g_hash_table_lookup(f->tensors, name);
  if (!t) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_MISSING,
                "%s: tensor \"%s\" is missing", f->path, name);
    return FALSE;
  }
  gboolean same = t->ndim == ndim;
  guint64 numel = 1;
  for (int i = 0; same && i < ndim; i++) {
    same = t->shape[i] == shape[i];
    numel *= (guint64)shape[i];
  }
  if (!same) {
    g_autofree char *want = shape_string(ndim, shape);
    g_autofree char *found = shape_string(t->ndim, t->shape);
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                "%s: tensor \"%s\" has shape %s, expected %s", f->path, name, found, want);
    return FALSE;
  }
  g_return_val_if_fail(first <= numel && count <= numel - first, FALSE);
  const guint8 *src = f->data + t->begin;
  switch (t->dtype) {
  case DT_F32:
    for (guint64 i = 0; i < count; i++) {
      guint32 b;
      memcpy(&b, src + 4 * (first + i), 4);
      dst[i] = f32_from_bits(GUINT32_FROM_LE(b));
    }
    return TRUE;
  case DT_F16:
    for (guint64 i = 0; i < count; i++) {
      guint16 b;
      memcpy(&b, src + 2 * (first + i), 2);
      dst[i] = f16_to_f32(GUINT16_FROM_LE(b));
    }
    return TRUE;
  case DT_BF16:
    for (guint64 i = 0; i < count; i++) {
      guint16 b;
      memcpy(&b, src + 2 * (first + i), 2);
      dst[i] = f32_from_bits((guint32)GUINT16_FROM_LE(b) << 16);
    }
    return TRUE;
  case DT_I64:
    for (guint64 i = 0; i < count; i++) {
      guint64 b;
      memcpy(&b, src + 8 * (first + i), 8);
      dst[i] = (float)(gint64)GUINT64_FROM_LE(b);
    }
    return TRUE;
  case DT_OTHER:
    break;
  }
  g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_DTYPE,
              "%s: tensor \"%s\" has dtype %s; only F32, F16, BF16 and I64 are read as float32",
              f->path, name, t->dtype_name);
  return FALSE;
}

gboolean cohort_safetensors_read_f32(const CohortStFile *f, const char *name, int ndim,
                                     const int64_t *shape, float *dst, GError **error)
{
  guint64 numel = 1;
  for (int i = 0; i < ndim; i++)
    numel *= shape[i] > 0 ? (guint64)shape[i] : 0;
  return cohort_safetensors_read_f32_range(f, name, ndim, shape, 0, numel, dst, error);
}

/* ---- writing ---- */

static int compare_keys(const void *a, const void *b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static char *build_header(const CohortStEntry *entries, guint n, GHashTable *metadata)
{
  g_autoptr(JsonBuilder) b = json_builder_new();
  json_builder_begin_object(b);
  if (metadata && g_hash_table_size(metadata) > 0) {
    /* Sorted keys keep the file byte-identical for equal input. */
    g_autofree gpointer *keys = g_hash_table_get_keys_as_array(metadata, NULL);
    guint nk = g_hash_table_size(metadata);
    qsort(keys, nk, sizeof(gpointer), compare_keys);
    json_builder_set_member_name(b, "__metadata__");
    json_builder_begin_object(b);
    for (guint i = 0; i < nk; i++) {
      json_builder_set_member_name(b, keys[i]);
      json_builder_add_string_value(b, g_hash_table_lookup(metadata, keys[i]));
    }
    json_builder_end_object(b);
  }
  guint64 offset = 0;
  for (guint i = 0; i < n; i++) {
    guint64 numel = 1;
    json_builder_set_member_name(b, entries[i].name);
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "dtype");
    json_builder_add_string_value(b, entries[i].int64 ? "I64" : "F32");
    json_builder_set_member_name(b, "shape");
    json_builder_begin_array(b);
    for (int d = 0; d < entries[i].ndim; d++) {
      json_builder_add_int_value(b, entries[i].shape[d]);
      numel *= (guint64)entries[i].shape[d];
    }
    json_builder_end_array(b);
    json_builder_set_member_name(b, "data_offsets");
    json_builder_begin_array(b);
    json_builder_add_int_value(b, (gint64)offset);
    offset += numel * (entries[i].int64 ? 8 : 4);
    json_builder_add_int_value(b, (gint64)offset);
    json_builder_end_array(b);
    json_builder_end_object(b);
  }
  json_builder_end_object(b);
  g_autoptr(JsonGenerator) gen = json_generator_new();
  g_autoptr(JsonNode) root = json_builder_get_root(b);
  json_generator_set_root(gen, root);
  return json_generator_to_data(gen, NULL);
}

/* A counter's values as little-endian int64. */
static gboolean write_i64(int fd, const float *data, gsize numel)
{
  guint64 buf[512];
  for (gsize i = 0; i < numel; i += G_N_ELEMENTS(buf)) {
    gsize m = MIN(G_N_ELEMENTS(buf), numel - i);
    for (gsize k = 0; k < m; k++)
      buf[k] = GUINT64_TO_LE((guint64)(gint64)llrintf(data[i + k]));
    if (!cohort_write_all(fd, buf, m * 8))
      return FALSE;
  }
  return TRUE;
}

/* bf16 bits widened to little-endian float32, a block at a time. */
static gboolean write_bf16(int fd, const uint16_t *bits, gsize numel)
{
  guint32 buf[4096];
  for (gsize i = 0; i < numel; i += G_N_ELEMENTS(buf)) {
    gsize m = MIN(G_N_ELEMENTS(buf), numel - i);
    for (gsize k = 0; k < m; k++)
      buf[k] = GUINT32_TO_LE((guint32)bits[i + k] << 16);
    if (!cohort_write_all(fd, buf, m * 4))
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_safetensors_write_entry(int fd, const CohortStEntry *e)
{
  gsize numel = 1;
  for (int d = 0; d < e->ndim; d++)
    numel *= (gsize)e->shape[d];
  if (e->bf16)
    return write_bf16(fd, e->bf16, numel);
  if (e->int64)
    return write_i64(fd, e->data, numel);
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
  return cohort_write_all(fd, e->data, numel * sizeof(float));
#else
  guint32 buf[4096];
  for (gsize i = 0; i < numel; i += G_N_ELEMENTS(buf)) {
    gsize m = MIN(G_N_ELEMENTS(buf), numel - i);
    for (gsize k = 0; k < m; k++) {
      guint32 bits;
      memcpy(&bits, e->data + i + k, 4);
      buf[k] = GUINT32_TO_LE(bits);
    }
    if (!cohort_write_all(fd, buf, m * 4))
      return FALSE;
  }
  return TRUE;
#endif
}

/* What cohort_write_atomic puts in the temporary file. */
typedef struct {
  const CohortStEntry *entries;
  guint n;
  const char *prefix; /* the length and the header padded to 8 bytes */
  gsize size;
} Contents;

static gboolean write_contents(int fd, gpointer data)
{
  const Contents *c = data;
  gboolean ok = cohort_write_all(fd, c->prefix, c->size);
  for (guint i = 0; ok && i < c->n; i++) {
    ok = cohort_safetensors_write_entry(fd, &c->entries[i]);
    cohort_phase_tick(); /* a long save keeps the ranks waiting for this one alive */
  }
  return ok;
}

GBytes *cohort_safetensors_prefix(const char *path, const CohortStEntry *entries, guint n,
                                  GHashTable *metadata, GError **error)
{
  g_autoptr(GHashTable) seen = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < n; i++) {
    if (entries[i].name && !g_hash_table_add(seen, (gpointer)entries[i].name)) {
      g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT,
                  "%s: tensor name \"%s\" is given twice", path, entries[i].name);
      return FALSE;
    }
    if (entries[i].ndim < 0 || entries[i].ndim > 4 || !entries[i].name ||
        strcmp(entries[i].name, "__metadata__") == 0) {
      g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT,
                  "%s: tensor %u (\"%s\") has %d dimensions or a reserved name", path, i,
                  entries[i].name ? entries[i].name : "(null)", entries[i].ndim);
      return FALSE;
    }
  }

  g_autofree char *json = build_header(entries, n, metadata);
  /* Spaces pad the header so the data section starts 8-byte aligned, as the format allows. */
  gsize json_len = strlen(json);
  gsize padded = (json_len + 7) & ~(gsize)7;
  guint8 *prefix = g_malloc(8 + padded);
  guint64 len_le = GUINT64_TO_LE((guint64)padded);
  memcpy(prefix, &len_le, 8);
  memcpy(prefix + 8, json, json_len);
  memset(prefix + 8 + json_len, ' ', padded - json_len);
  return g_bytes_new_take(prefix, 8 + padded);
}

gboolean cohort_safetensors_write(const char *path, const CohortStEntry *entries, guint n,
                                  GHashTable *metadata, GError **error)
{
  g_autoptr(GBytes) prefix = cohort_safetensors_prefix(path, entries, n, metadata, error);
  if (!prefix)
    return FALSE;
  gsize size = 0;
  const char *bytes = g_bytes_get_data(prefix, &size);
  Contents c = {entries, n, bytes, size};
  g_autoptr(GError) local = NULL;
  if (!cohort_write_atomic(path, write_contents, &c, &local)) {
    g_set_error_literal(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                        local->message);
    return FALSE;
  }
  return TRUE;
}
