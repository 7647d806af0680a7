/* What every model family shares: tables, memory, host copies. The families and their
 * registry live in engine/models/. */
#include "engine/model/model.h"

#include <math.h>
#include <string.h>

#include "engine/base/error.h"

#include "engine/model/finetune.h"
#include "engine/model/frozen-store.h"
#include "engine/model/lora.h"
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

/* The config whose fine-tuning keys the models created on this thread follow. */
static GPrivate creating_finetune;

void cohort_model_set_creating_finetune(const CohortConfig *cfg)
{
  g_private_set(&creating_finetune, (gpointer)cfg);
}

/* ZeRO's stage while the trainer creates its model (cohort_model_set_creating_sharded). */
static GPrivate creating_sharded;

void cohort_model_set_creating_sharded(int stage)
{
  g_private_set(&creating_sharded, GINT_TO_POINTER(stage));
}

void cohort_tensor_table_free(CohortTensorInfo *t, guint n)
{
  for (guint i = 0; t && i < n; i++)
    g_free((char *)t[i].name);
  g_free(t);
}

static void free_table(CohortTensorInfo *t, guint n)
{
  cohort_tensor_table_free(t, n);
}

void cohort_model_free(CohortModel *m)
{
  if (!m)
    return;
  const CohortBackend *be = m->be;
  float *params = m->params, *grads = m->grads, *buffers = m->buffer_data;
  CohortTensorInfo *tensors = m->tensors, *bufs = m->buffers, *train = m->train;
  guint n_tensors = m->n_tensors, n_bufs = m->n_buffers;
  CohortLora *lora = m->lora;
  size_t *moved_from = m->moved_from;
  size_t grad_bytes = MAX(m->n_trainable, 1) * sizeof(float);
  cohort_model_free_losses(m);
  gboolean params_reserved = m->params_reserved || m->params_range;
  gboolean grads_reserved = m->grads_reserved;
  CohortFrozenStore *store = m->frozen_store;
  size_t bytes = MAX(m->n_params, 1) * sizeof(float);
  /* The family frees its own struct, which embeds the base: keep what the base owns first. */
  m->ops->finalize(m);
  if (be) {
    if (params_reserved)
      be->unreserve(params, bytes);
    else
      be->free(params);
    if (grads_reserved)
      be->unreserve(grads, grad_bytes);
    else
      be->free(grads);
    be->free(buffers);
  }
  cohort_lora_free(be, lora);
  cohort_frozen_store_free(be, store);
  free_table(tensors, n_tensors);
  free_table(bufs, n_bufs);
  g_free(train);
  g_free(moved_from);
}

/* The layout of the fine-tuning config set on this thread, if any (finetune.h): the tensors
 * move, the adapters and the train table are made. Without one the train table is the
 * parameter table. */
static gboolean lay_out(CohortModel *m, gboolean frozen, GError **error)
{
  const CohortConfig *cfg = frozen ? NULL : g_private_get(&creating_finetune);
  m->finetune = cfg ? cfg->finetune : COHORT_FINETUNE_FULL;
  if (m->finetune == COHORT_FINETUNE_FULL) {
    m->n_trainable = m->n_params;
    m->n_train = m->n_tensors;
    m->train = g_memdup2(m->tensors, MAX(m->n_tensors, 1) * sizeof(CohortTensorInfo));
    return TRUE;
  }
  g_autoptr(CohortFinetunePlan) plan = cohort_finetune_plan_new(
      cfg, m->klass->name, cohort_family_desc_lora_targets(m->klass->family, cfg), m->tensors,
      m->n_tensors, error);
  if (!plan)
    return FALSE;
  if (plan->n_adapters > 0 && m->lora_rows == 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "key \"finetune\": model \"%s\" cannot run LoRA adapters; allowed: "
                       "full, frozen",
                       m->klass->name);
  CohortFinetuneLayout layout;
  cohort_finetune_layout(plan, m->tensors, m->n_tensors, &layout);
  m->n_params = layout.n_params;
  m->n_trainable = layout.n_trainable;
  m->train = g_steal_pointer(&layout.train);
  m->n_train = layout.n_train;
  m->moved_from = g_steal_pointer(&layout.moved_from);
  if (plan->n_adapters > 0 && !(m->lora = cohort_lora_new(m, plan, &layout, m->lora_rows, error))) {
    cohort_finetune_layout_clear(&layout);
    return FALSE;
  }
  /* The train table borrows the adapters' names, which the adapters now own. */
  cohort_finetune_layout_clear(&layout);
  return TRUE;
}

void cohort_model_take_tables(CohortModel *m, CohortFamilyTables *t)
{
  m->tensors = t->params;
  m->n_tensors = t->n_params;
  m->n_params = t->param_floats;
  m->buffers = t->buffers;
  m->n_buffers = t->n_buffers;
  m->n_buffer_floats = t->buffer_floats;
  *t = (CohortFamilyTables){0};
}

gboolean cohort_model_alloc_tables(CohortModel *m, GError **error)
{
  gboolean frozen = cohort_model_creating_frozen();
  int stage = frozen ? 0 : GPOINTER_TO_INT(g_private_get(&creating_sharded));
  if (!lay_out(m, frozen, error))
    return FALSE;
  size_t bytes = MAX(m->n_params, 1) * sizeof(float);
  size_t grad_bytes = MAX(m->n_trainable, 1) * sizeof(float);
  if (stage >= 2 && !m->be->reserve) {
    g_set_error(error, cohort_model_error_quark(), 0,
                "%s model: zero_stage %d needs memory the %s backend cannot provide (address "
                "space filled one layer at a time); allowed here: zero_stage 0 or 1",
                m->klass->name, stage, m->be->name);
    return FALSE;
  }
  GError *refused = NULL;
  m->params_range = cohort_frozen_store_wanted(frozen ? NULL : g_private_get(&creating_finetune),
                                               m->be->reserve != NULL, m->be->name, &refused);
  if (refused) {
    g_propagate_error(error, refused);
    return FALSE;
  }
  m->params_reserved = stage >= 3;
  m->grads_reserved = stage >= 2;
  m->params = m->params_reserved || m->params_range ? m->be->reserve(bytes) : m->be->alloc(bytes);
  if (!frozen)
    m->grads = m->grads_reserved ? m->be->reserve(grad_bytes) : m->be->alloc(grad_bytes);
  if (m->n_buffer_floats > 0)
    m->buffer_data = m->be->alloc(m->n_buffer_floats * sizeof(float));
  /* A reserved parameter range has memory only where committed. The start writes it whole
   * (an initialisation, an import, a checkpoint), then lets go of what it keeps elsewhere:
   * except at ZeRO stage 3 with nothing frozen, which starts unit by unit in the shards (and
   * commits what it writes whole, cohort_model_commit_params). */
  gboolean whole = m->params_range || (m->params_reserved && m->finetune != COHORT_FINETUNE_FULL);
  if (!m->params || (!frozen && !m->grads) || (m->n_buffer_floats > 0 && !m->buffer_data) ||
      (whole && m->be->commit(m->params, bytes) != 0)) {
    const char *why = m->be->last_error ? m->be->last_error() : NULL;
    g_set_error(error, cohort_model_error_quark(), 0,
                "%s model: out of %s memory for %zu parameters%s%s; allowed: a smaller model",
                m->klass->name, m->be->name, m->n_params, why ? ": " : "", why ? why : "");
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_model_commit_params(CohortModel *m, size_t n, GError **error)
{
  if (!(m->params_reserved || m->params_range) || n == 0)
    return TRUE;
  if (m->be->commit(m->params, n * sizeof(float)) == 0)
    return TRUE;
  const char *why = m->be->last_error ? m->be->last_error() : NULL;
  g_set_error(error, cohort_model_error_quark(), 0,
              "%s model: out of %s memory for %zu of its parameters at once%s%s; allowed: a "
              "smaller model, or more ranks",
              m->klass->name, m->be->name, n, why ? ": " : "", why ? why : "");
  return FALSE;
}

gboolean cohort_model_commit_whole(CohortModel *m, GError **error)
{
  if (!cohort_model_commit_params(m, m->n_params, error))
    return FALSE;
  if (!m->grads_reserved || m->be->commit(m->grads, MAX(m->n_trainable, 1) * sizeof(float)) == 0)
    return TRUE;
  const char *why = m->be->last_error ? m->be->last_error() : NULL;
  g_set_error(error, cohort_model_error_quark(), 0,
              "%s model: out of %s memory for the gradients of %zu parameters%s%s", m->klass->name,
              m->be->name, m->n_trainable, why ? ": " : "", why ? why : "");
  return FALSE;
}

gboolean cohort_model_on_host(const CohortModel *m)
{
  return m->be == cohort_backend_cpu();
}

size_t cohort_model_memory_bytes(const CohortModel *m)
{
  /* Reserved ranges hold only the layers in use: ZeRO counts those. The frozen part of a
   * ZeRO-3 range, [n_trainable, n_params), is held whole for good; with frozen_dtype bf16
   * (never with ZeRO-3) the stored tensors count at 2 bytes a value. */
  size_t floats = (m->params_reserved ? m->n_params - m->n_trainable
                                      : m->n_params - cohort_frozen_store_floats(m)) +
                  m->n_buffer_floats + (m->grads && !m->grads_reserved ? m->n_trainable : 0);
  return floats * sizeof(float) + cohort_frozen_store_bytes(m) + m->act_bytes +
         (m->lora ? m->lora->scratch_bytes : 0);
}

size_t cohort_model_moved(const CohortModel *m, size_t offset)
{
  if (!m->moved_from)
    return offset;
  for (guint i = 0; i < m->n_tensors; i++) {
    size_t from = m->moved_from[i];
    if (offset >= from && offset < from + m->tensors[i].numel)
      return m->tensors[i].offset + (offset - from);
  }
  g_return_val_if_reached(offset);
}

float *cohort_model_grad(const CohortModel *m, guint i)
{
  g_return_val_if_fail(i < m->n_tensors, NULL);
  if (!m->grads || m->tensors[i].frozen)
    return NULL;
  return m->grads + m->tensors[i].offset;
}

float *cohort_model_grad_at(const CohortModel *m, size_t offset)
{
  /* what learns comes first: [0, n_trainable) */
  return m->grads && offset < m->n_trainable ? m->grads + offset : NULL;
}

void cohort_model_layer_grads_ready(CohortModel *m, int layer)
{
  size_t lo = 0, hi = 0;
  gboolean found = FALSE;
  for (guint k = 0; k < m->n_train; k++) {
    const CohortTensorInfo *t = &m->train[k];
    if (t->layer != layer)
      continue;
    lo = found ? MIN(lo, t->offset) : t->offset;
    hi = found ? MAX(hi, t->offset + t->numel) : t->offset + t->numel;
    found = TRUE;
  }
  if (found && hi > lo)
    cohort_model_grad_ready(m, lo, hi - lo);
}

gboolean cohort_model_learns_up_to(const CohortModel *m, int layer)
{
  for (guint k = 0; k < m->n_train; k++)
    if (m->train[k].layer <= layer)
      return TRUE;
  return FALSE;
}

void cohort_model_train_view(const CohortModel *m, CohortModel *view)
{
  *view = *m;
  view->tensors = m->train;
  view->n_tensors = m->n_train;
  view->n_params = m->n_trainable;
}

/* The family's initialisation one tensor at a time (what ZeRO stage 3 does), the same values
 * as its init_weights: families build the whole vector in host memory first, 4 bytes a
 * parameter more at start than the memory plan counts (a Qwen3-0.6B rank's peak doubled), and
 * with frozen_dtype bf16 the run's peak. In host memory each tensor is written in place, else
 * through one buffer of the largest tensor. */
static void init_by_tensor(CohortModel *m, guint64 seed)
{
  if (cohort_model_on_host(m) && !m->params_range) {
    for (guint i = 0; i < m->n_tensors; i++)
      m->ops->init_tensor(m, seed, i, m->params + m->tensors[i].offset);
    m->ops->init_buffers(m);
    return;
  }
  size_t largest = 1;
  for (guint i = 0; i < m->n_tensors; i++)
    largest = MAX(largest, m->tensors[i].numel);
  g_autofree float *host = g_new(float, largest);
  for (guint i = 0; i < m->n_tensors; i++) {
    m->ops->init_tensor(m, seed, i, host);
    m->be->upload(m->params + m->tensors[i].offset, host, m->tensors[i].numel * sizeof(float));
  }
  m->ops->init_buffers(m);
}

void cohort_model_init(CohortModel *m, guint64 seed)
{
  if (m->ops->init_tensor)
    init_by_tensor(m, seed);
  else
    m->ops->init_weights(m, seed);
  cohort_lora_init(m, seed);
}

void cohort_model_zero_grad(CohortModel *m)
{
  if (m->grads && !m->grads_reserved)
    m->be->zero(m->grads, m->n_trainable * sizeof(float));
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

void cohort_model_set_layer_hook(CohortModel *m, CohortLayerHookFunc func, gpointer user_data)
{
  m->layer_hook = func;
  m->layer_hook_data = user_data;
}

void cohort_model_layer_begin(CohortModel *m, int layer, CohortLayerUse use)
{
  cohort_frozen_store_layer(m, layer, use, TRUE);
  if (m->layer_hook)
    m->layer_hook(layer, use, TRUE, m->layer_hook_data);
}

void cohort_model_layer_end(CohortModel *m, int layer, CohortLayerUse use)
{
  if (m->layer_hook)
    m->layer_hook(layer, use, FALSE, m->layer_hook_data);
  cohort_frozen_store_layer(m, layer, use, FALSE);
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
  const CohortTensorInfo *t = cohort_tensor_find(m->tensors, m->n_tensors, name);
  if (!t && m->lora)
    t = cohort_tensor_find(m->lora->tensors, m->lora->n_tensors, name);
  return t;
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

/* frozen_dtype bf16: the stored tensors' places have no memory (they read zeros on the CPU;
 * on a GPU they may not be read at all): everything else (the adapters too, which are in no
 * tensor of the table), around them, into zeros. */
typedef struct {
  size_t offset, count;
} Span;

static int by_offset(gconstpointer a, gconstpointer b)
{
  size_t x = ((const Span *)a)->offset, y = ((const Span *)b)->offset;
  return x < y ? -1 : x > y;
}

static void download_unstored(const CohortModel *m, float *host, gboolean zeroed)
{
  if (!zeroed)
    memset(host, 0, m->n_params * sizeof(float));
  g_autoptr(GArray) stored = g_array_new(FALSE, FALSE, sizeof(Span));
  for (guint i = 0; i < m->n_tensors; i++)
    if (cohort_frozen_store_bits(m, i)) {
      Span span = {m->tensors[i].offset, m->tensors[i].numel};
      g_array_append_val(stored, span);
    }
  g_array_sort(stored, by_offset);
  size_t at = 0;
  for (guint k = 0; k <= stored->len; k++) {
    const Span *span = k < stored->len ? &g_array_index(stored, Span, k) : NULL;
    size_t end = span ? span->offset : m->n_params;
    if (end > at)
      m->be->download(host + at, m->params + at, (end - at) * sizeof(float));
    if (span)
      at = MAX(at, span->offset + span->count);
  }
}

const float *cohort_model_params_host(const CohortModel *m, float **tmp)
{
  if (!m->frozen_store)
    return host_view(m, m->params, m->n_params, tmp);
  /* calloc'ed: the stored tensors' zeros take no memory until written */
  *tmp = g_new0(float, MAX(m->n_params, 1));
  download_unstored(m, *tmp, TRUE);
  return *tmp;
}

const float *cohort_model_buffers_host(const CohortModel *m, float **tmp)
{
  return host_view(m, m->buffer_data, m->n_buffer_floats, tmp);
}

void cohort_model_download_params(const CohortModel *m, float *host)
{
  if (m->frozen_store)
    download_unstored(m, host, FALSE);
  else
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

const char *cohort_model_first_non_finite(const CohortModel *m)
{
  g_autofree float *ptmp = NULL, *btmp = NULL;
  const float *params = cohort_model_params_host(m, &ptmp);
  const CohortTensorInfo *bad = first_non_finite(m->tensors, m->n_tensors, params);
  if (!bad && m->lora)
    bad = first_non_finite(m->lora->tensors, m->lora->n_tensors, params);
  if (!bad)
    bad = first_non_finite(m->buffers, m->n_buffers, cohort_model_buffers_host(m, &btmp));
  return bad ? bad->name : NULL;
}

gboolean cohort_model_check_finite(const CohortModel *m, const char *source, GError **error)
{
  const char *bad = cohort_model_first_non_finite(m);
  if (bad) {
    g_set_error(error, cohort_model_error_quark(), 1,
                "%s: tensor \"%s\" holds a NaN or an infinity; training from it cannot give "
                "finite results",
                source, bad);
    return FALSE;
  }
  return TRUE;
}
