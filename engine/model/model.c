/* What every model family shares: tables, memory, host copies. The families and their
 * registry live in engine/models/. */
#include "engine/model/model.h"

#include <math.h>
#include <string.h>

#include "kernels/backend.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-model-error-quark, cohort_model_error)
/* clang-format on */

/* Set on this thread while the registry's cohort_model_new_frozen runs a family's create, so
 * that cohort_model_alloc_tables, which every family calls, leaves out the gradients: no family
 * needs a second create for teachers. */
static GPrivate creating_frozen;

void cohort_model_set_creating_frozen(gboolean frozen)
{
  g_private_set(&creating_frozen, frozen ? GINT_TO_POINTER(1) : NULL);
}

gboolean cohort_model_creating_frozen(void)
{
  return g_private_get(&creating_frozen) != NULL;
}

static void free_table(CohortTensorInfo *t, guint n)
{
  for (guint i = 0; i < n; i++)
    g_free((char *)t[i].name);
  g_free(t);
}

void cohort_model_free(CohortModel *m)
{
  if (!m)
    return;
  const CohortBackend *be = m->be;
  float *params = m->params, *grads = m->grads, *buffers = m->buffer_data;
  CohortTensorInfo *tensors = m->tensors, *bufs = m->buffers;
  guint n_tensors = m->n_tensors, n_bufs = m->n_buffers;
  g_free(m->import_note);
  /* The family frees its own struct, which embeds the base: keep what the base owns first. */
  m->ops->finalize(m);
  if (be) {
    be->free(params);
    be->free(grads);
    be->free(buffers);
  }
  free_table(tensors, n_tensors);
  free_table(bufs, n_bufs);
}

gboolean cohort_model_alloc_tables(CohortModel *m, GError **error)
{
  gboolean frozen = cohort_model_creating_frozen();
  m->params = m->be->alloc(MAX(m->n_params, 1) * sizeof(float));
  if (!frozen)
    m->grads = m->be->alloc(MAX(m->n_params, 1) * sizeof(float));
  if (m->n_buffer_floats > 0)
    m->buffer_data = m->be->alloc(m->n_buffer_floats * sizeof(float));
  if (!m->params || (!frozen && !m->grads) || (m->n_buffer_floats > 0 && !m->buffer_data)) {
    g_set_error(error, cohort_model_error_quark(), 0,
                "%s model: out of %s memory for %zu parameters; allowed: a smaller model",
                m->klass->name, m->be->name, m->n_params);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_model_on_host(const CohortModel *m)
{
  return m->be == cohort_backend_cpu();
}

size_t cohort_model_memory_bytes(const CohortModel *m)
{
  size_t floats = m->n_params + m->n_buffer_floats + (m->grads ? m->n_params : 0);
  return floats * sizeof(float) + m->act_bytes;
}

void cohort_model_zero_grad(CohortModel *m)
{
  if (m->grads)
    m->be->zero(m->grads, m->n_params * sizeof(float));
}

void cohort_model_set_grad_ready_func(CohortModel *m, CohortGradReadyFunc func, gpointer user_data)
{
  m->grad_ready = func;
  m->grad_ready_data = user_data;
}

gboolean cohort_model_set_comm(CohortModel *m, const CohortModelComm *comm, GError **error)
{
  m->comm = NULL;
  if (comm && m->ops->set_comm && !m->ops->set_comm(m, comm, error))
    return FALSE;
  m->comm = comm;
  return TRUE;
}

void cohort_model_grad_ready(CohortModel *m, size_t offset, size_t count)
{
  if (m->grad_ready)
    m->grad_ready(offset, count, m->grad_ready_data);
}

const CohortTensorInfo *cohort_tensor_find(const CohortTensorInfo *tensors, guint n,
                                           const char *name)
{
  for (guint i = 0; i < n; i++)
    if (strcmp(tensors[i].name, name) == 0)
      return &tensors[i];
  return NULL;
}

char *cohort_tensor_dims_string(int ndim, const gint64 *shape)
{
  GString *str = g_string_new("[");
  for (int d = 0; d < ndim; d++)
    g_string_append_printf(str, "%s%" G_GINT64_FORMAT, d ? ", " : "", shape[d]);
  g_string_append_c(str, ']');
  return g_string_free(str, FALSE);
}

const CohortTensorInfo *cohort_model_find_tensor(const CohortModel *m, const char *name)
{
  return cohort_tensor_find(m->tensors, m->n_tensors, name);
}

const CohortTensorInfo *cohort_model_find_buffer(const CohortModel *m, const char *name)
{
  return cohort_tensor_find(m->buffers, m->n_buffers, name);
}

static const float *host_view(const CohortModel *m, const float *buf, size_t n, float **tmp)
{
  *tmp = NULL;
  if (!buf || cohort_model_on_host(m))
    return buf;
  *tmp = g_new(float, MAX(n, 1));
  m->be->download(*tmp, buf, n * sizeof(float));
  return *tmp;
}

const float *cohort_model_params_host(const CohortModel *m, float **tmp)
{
  return host_view(m, m->params, m->n_params, tmp);
}

const float *cohort_model_buffers_host(const CohortModel *m, float **tmp)
{
  return host_view(m, m->buffer_data, m->n_buffer_floats, tmp);
}

void cohort_model_download_params(const CohortModel *m, float *host)
{
  m->be->download(host, m->params, m->n_params * sizeof(float));
}

void cohort_model_upload_params(CohortModel *m, const float *host)
{
  m->be->upload(m->params, host, m->n_params * sizeof(float));
}

void cohort_model_upload_buffers(CohortModel *m, const float *host)
{
  if (m->n_buffer_floats > 0)
    m->be->upload(m->buffer_data, host, m->n_buffer_floats * sizeof(float));
}

void cohort_model_metric_values(const CohortModel *m, const double *sums, double *values)
{
  for (guint i = 0; i < m->n_metrics; i++) {
    double den = sums[m->metrics[i].denominator];
    values[i] = den != 0 ? sums[m->metrics[i].numerator] / den : 0;
  }
}

static const CohortTensorInfo *first_non_finite(const CohortTensorInfo *t, guint n,
                                                const float *data)
{
  for (guint i = 0; data && i < n; i++)
    for (size_t k = 0; k < t[i].numel; k++)
      if (!isfinite(data[t[i].offset + k]))
        return &t[i];
  return NULL;
}

gboolean cohort_model_check_finite(const CohortModel *m, const char *source, GError **error)
{
  g_autofree float *ptmp = NULL, *btmp = NULL;
  const CohortTensorInfo *bad =
      first_non_finite(m->tensors, m->n_tensors, cohort_model_params_host(m, &ptmp));
  if (!bad)
    bad = first_non_finite(m->buffers, m->n_buffers, cohort_model_buffers_host(m, &btmp));
  if (bad) {
    g_set_error(error, cohort_model_error_quark(), 1,
                "%s: tensor \"%s\" holds a NaN or an infinity; training from it cannot give "
                "finite results",
                source, bad->name);
    return FALSE;
  }
  return TRUE;
}
