/* init_from for ResNets: torchvision's and timm's ResNet state dicts (their names are the
 * same: conv1, bn1, layer1.0.conv1 … fc), as .safetensors or as a torch.save .pth/.pt, and
 * Cohort's own exports, which use those names too.
 *
 * Everything loads strictly, by name and shape, except the classifier: where the file's fc has
 * another number of classes (ImageNet's 1000 against the user's few), fc keeps the family's
 * initialisation and a note for the log says so with both sizes; that is transfer learning's
 * usual start. A "module." prefix on every name (a DistributedDataParallel model saved whole)
 * is dropped. num_batches_tracked, which files saved before PyTorch 0.4.1 (torchvision's
 * first ImageNet weights) lack, starts at 0 there, as BatchNorm's own loading does. */
#include "engine/models/resnet-private.h"

#include <string.h>

#include "engine/model/weights-file.h"

static gboolean import_error(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static gboolean import_error(GError **error, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error_literal(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID, msg);
  return FALSE;
}

static const char *variant_title(CohortResnetVariant v)
{
  static const char *const names[] = {"CIFAR ResNet", "resnet18", "resnet34", "resnet50",
                                      "resnet101"};
  return names[v];
}

/* The prefix every name of the file carries ("module." or ""). */
static const char *common_prefix(const CohortWeightsFile *f)
{
  const char *const *names = cohort_weights_file_names(f);
  if (!names[0])
    return "";
  for (const char *const *n = names; *n; n++)
    if (!g_str_has_prefix(*n, "module."))
      return "";
  return "module.";
}

static gboolean same_shape(const CohortTensorInfo *t, int ndim, const int64_t *shape)
{
  if (ndim != t->ndim)
    return FALSE;
  for (int d = 0; d < ndim; d++)
    if (shape[d] != t->shape[d])
      return FALSE;
  return TRUE;
}

static char *dims_text(int ndim, const int64_t *shape)
{
  gint64 s[8];
  for (int d = 0; d < ndim; d++)
    s[d] = shape[d];
  return cohort_tensor_dims_string(ndim, s);
}

/* Reads tensor `t` (named prefix + t->name) into dst, or says why not. A missing
 * num_batches_tracked reads as 0. */
static gboolean read_one(CohortWeightsFile *f, const char *path, const char *prefix,
                         const CohortTensorInfo *t, const char *model, float *dst, GError **error)
{
  g_autofree char *name = g_strconcat(prefix, t->name, NULL);
  int64_t shape[8];
  int nd = cohort_weights_file_shape(f, name, shape);
  if (nd < 0 && g_str_has_suffix(t->name, ".num_batches_tracked")) {
    dst[0] = 0.0f;
    return TRUE;
  }
  if (nd < 0)
    return import_error(error,
                        "init_from %s: tensor \"%s\" of a %s is missing; allowed: a torchvision "
                        "or timm %s state dict (is the file for another model?)",
                        path, name, model, model);
  if (!same_shape(t, nd, shape)) {
    int64_t want[4];
    for (int d = 0; d < t->ndim; d++)
      want[d] = t->shape[d];
    g_autofree char *got = dims_text(nd, shape), *exp = dims_text(t->ndim, want);
    return import_error(error,
                        "init_from %s: tensor \"%s\" has shape %s, a %s has %s (is the file for "
                        "another model?)",
                        path, name, got, model, exp);
  }
  int64_t shp[4];
  for (int d = 0; d < t->ndim; d++)
    shp[d] = t->shape[d];
  return cohort_weights_file_read_f32(f, name, t->ndim, shp, dst, error);
}

/* The file's classifier: TRUE to load it (read_one then checks it as any tensor); FALSE to
 * keep the initialisation, noted, where the file has another number of classes. */
static gboolean take_fc(CohortWeightsFile *f, const char *prefix, Resnet *r, GPtrArray *notes)
{
  g_autofree char *w = g_strconcat(prefix, "fc.weight", NULL);
  int64_t shape[8];
  int nd = cohort_weights_file_shape(f, w, shape);
  int K = r->shape.num_classes;
  if (nd == 2 && shape[1] == r->net.feat && shape[0] != K) {
    if (notes)
      g_ptr_array_add(notes, g_strdup_printf("fc has %" G_GINT64_FORMAT
                                             " classes in the file and %d in this model: fc "
                                             "re-initialised, every other tensor loaded",
                                             shape[0], K));
    return FALSE;
  }
  return TRUE;
}

/* Every name in the file must be one of the model's (fc's whatever its class count). */
static gboolean no_strangers(const CohortModel *m, CohortWeightsFile *f, const char *path,
                             const char *prefix, const char *model, GError **error)
{
  for (const char *const *n = cohort_weights_file_names(f); *n; n++) {
    const char *name = *n + strlen(prefix);
    if (cohort_model_find_tensor(m, name) || cohort_model_find_buffer(m, name))
      continue;
    return import_error(error,
                        "init_from %s: tensor \"%s\" is not part of a %s (is the file for another "
                        "model, such as timm's resnet-d variants or a wider ResNet?)",
                        path, *n, model);
  }
  return TRUE;
}

gboolean cohort_resnet_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error)
{
  Resnet *r = resnet_of(m);
  g_autoptr(CohortWeightsFile) f = cohort_weights_file_open(path, error);
  if (!f)
    return FALSE;
  const char *prefix = common_prefix(f);
  const char *model = variant_title(r->shape.variant);
  if (!no_strangers(m, f, path, prefix, model, error))
    return FALSE;
  gboolean load_fc = take_fc(f, prefix, r, notes);
  g_autofree float *params = g_try_new(float, m->n_params);
  g_autofree float *bufs = g_try_new(float, MAX(m->n_buffer_floats, 1));
  if (!params || !bufs)
    return import_error(error, "init_from %s: out of memory for %zu parameters", path, m->n_params);
  cohort_model_download_params(m, params); /* the initialisation, which fc may keep */
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    if (!load_fc && g_str_has_prefix(t->name, "fc."))
      continue;
    if (!read_one(f, path, prefix, t, model, params + t->offset, error))
      return FALSE;
  }
  for (guint i = 0; i < m->n_buffers; i++)
    if (!read_one(f, path, prefix, &m->buffers[i], model, bufs + m->buffers[i].offset, error))
      return FALSE;
  cohort_model_upload_params(m, params);
  cohort_model_upload_buffers(m, bufs);
  return TRUE;
}
