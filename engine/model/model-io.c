/* Model tensors in and out of .safetensors through the tables. */
#include "engine/model/model-io.h"

#include <string.h>

#include "engine/model/frozen-store.h"

void cohort_tensor_st_entries(const CohortTensorInfo *tensors, guint n, const float *buffer,
                              const char *prefix, GPtrArray *names, GArray *entries)
{
  for (guint i = 0; i < n; i++) {
    char *name = g_strconcat(prefix ? prefix : "", tensors[i].name, NULL);
    g_ptr_array_add(names, name);
    CohortStEntry e = {.name = name,
                       .data = buffer ? buffer + tensors[i].offset : NULL,
                       .ndim = tensors[i].ndim,
                       .int64 = tensors[i].int64};
    for (int d = 0; d < tensors[i].ndim; d++)
      e.shape[d] = tensors[i].shape[d];
    g_array_append_val(entries, e);
  }
}

gboolean cohort_tensor_check(const CohortTensorInfo *tensors, guint n, const CohortStFile *f,
                             const char *path, const char *prefix, GError **error)
{
  for (guint i = 0; i < n; i++) {
    const CohortTensorInfo *t = &tensors[i];
    g_autofree char *name = g_strconcat(prefix ? prefix : "", t->name, NULL);
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, name, shape);
    if (nd < 0) {
      g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_MISSING,
                  "%s: tensor \"%s\" is missing; the file is of another model", path, name);
      return FALSE;
    }
    gboolean same = nd == t->ndim;
    for (int d = 0; same && d < nd; d++)
      same = shape[d] == t->shape[d];
    if (!same) {
      gint64 want[COHORT_TENSOR_MAX_DIMS], found[8];
      for (int d = 0; d < t->ndim; d++)
        want[d] = t->shape[d];
      for (int d = 0; d < nd && d < 8; d++)
        found[d] = shape[d];
      g_autofree char *fs = cohort_tensor_dims_string(MIN(nd, 8), found);
      g_autofree char *ws = cohort_tensor_dims_string(t->ndim, want);
      g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                  "%s: tensor \"%s\" has shape %s, the model expects %s; the file is of another "
                  "model shape",
                  path, name, fs, ws);
      return FALSE;
    }
  }
  return TRUE;
}

gboolean cohort_tensor_read(const CohortTensorInfo *tensors, guint n, const CohortStFile *f,
                            const char *prefix, float *dst, GError **error)
{
  for (guint i = 0; i < n; i++) {
    g_autofree char *name = g_strconcat(prefix ? prefix : "", tensors[i].name, NULL);
    int64_t shape[COHORT_TENSOR_MAX_DIMS];
    for (int d = 0; d < tensors[i].ndim; d++)
      shape[d] = tensors[i].shape[d];
    if (!cohort_safetensors_read_f32(f, name, tensors[i].ndim, shape, dst + tensors[i].offset,
                                     error))
      return FALSE;
  }
  return TRUE;
}

/* Whether tensor `t` is the position table `rows_name` with more rows in `f` than in the
 * table (the other dimensions equal); *shape gets the file's. */
static gboolean longer_rows(const CohortTensorInfo *t, const CohortStFile *f, const char *name,
                            const char *rows_name, int64_t shape[8])
{
  int nd = cohort_safetensors_shape(f, name, shape);
  gboolean longer = rows_name && strcmp(t->name, rows_name) == 0 && nd == t->ndim && nd >= 1 &&
                    shape[0] > t->shape[0];
  for (int d = 1; longer && d < nd; d++)
    longer = shape[d] == t->shape[d];
  return longer;
}

gboolean cohort_tensor_read_rows_prefix(const CohortTensorInfo *tensors, guint n,
                                        const CohortStFile *f, const char *prefix,
                                        const char *rows_name, float *dst, GError **error)
{
  for (guint i = 0; i < n; i++) {
    const CohortTensorInfo *t = &tensors[i];
    g_autofree char *name = g_strconcat(prefix ? prefix : "", t->name, NULL);
    int64_t shape[8];
    if (longer_rows(t, f, name, rows_name, shape)) {
      if (!cohort_safetensors_read_f32_range(f, name, t->ndim, shape, 0, t->numel, dst + t->offset,
                                             error))
        return FALSE;
    } else if (!cohort_tensor_read(t, 1, f, prefix, dst, error)) {
      return FALSE;
    }
  }
  return TRUE;
}

gboolean cohort_model_save(const CohortModel *m, const float *params_or_NULL, const char *path,
                           GHashTable *metadata, GError **error)
{
  g_autofree float *params_copy = NULL, *buffers_copy = NULL;
  const float *params = params_or_NULL ? params_or_NULL : cohort_model_params_host(m, &params_copy);
  const float *buffers = cohort_model_buffers_host(m, &buffers_copy);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  cohort_tensor_st_entries(m->tensors, m->n_tensors, params, "", names, entries);
  /* frozen_dtype bf16: the stored tensors' places are empty; their bits are written widened,
   * unless the caller gives the whole vector (a merge). On a GPU the writer reads host copies. */
  g_autoptr(GPtrArray) bit_copies = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; !params_or_NULL && i < m->n_tensors; i++) {
    uint16_t *tmp = NULL;
    g_array_index(entries, CohortStEntry, i).bf16 = cohort_frozen_store_bits_host(m, i, &tmp);
    if (tmp)
      g_ptr_array_add(bit_copies, tmp);
  }
  cohort_tensor_st_entries(m->buffers, m->n_buffers, buffers, "", names, entries);

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
  return cohort_safetensors_write(path, (CohortStEntry *)entries->data, entries->len, meta, error);
}

gboolean cohort_model_load(CohortModel *m, const char *path, GError **error)
{
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, error);
  if (!f)
    return FALSE;
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    if (cohort_model_find_tensor(m, *name) || cohort_model_find_buffer(m, *name))
      continue;
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_SHAPE,
                "%s: tensor \"%s\" is not part of this %s model; the file is for a differently "
                "shaped model",
                path, *name, m->klass->name);
    return FALSE;
  }
  for (guint i = 0; i < m->n_tensors; i++) {
    int64_t shape[8];
    const CohortTensorInfo *t = &m->tensors[i];
    if (!longer_rows(t, f, t->name, m->klass->position_table, shape) &&
        !cohort_tensor_check(t, 1, f, path, "", error))
      return FALSE;
  }
  if (!cohort_tensor_check(m->buffers, m->n_buffers, f, path, "", error))
    return FALSE;
  g_autofree float *params = g_try_new(float, MAX(m->n_params, 1));
  g_autofree float *buffers = g_try_new(float, MAX(m->n_buffer_floats, 1));
  if (!params || !buffers) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_IO,
                "%s: out of memory for %zu parameters", path, m->n_params);
    return FALSE;
  }
  if (!cohort_tensor_read_rows_prefix(m->tensors, m->n_tensors, f, "", m->klass->position_table,
                                      params, error) ||
      !cohort_tensor_read(m->buffers, m->n_buffers, f, "", buffers, error))
    return FALSE;
  cohort_model_upload_params(m, params);
  cohort_model_upload_buffers(m, buffers);
  return TRUE;
}

gboolean cohort_model_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error)
{
  if (m->klass->import_weights)
    return m->klass->import_weights(m, path, notes, error);
  return cohort_model_load(m, path, error);
}
