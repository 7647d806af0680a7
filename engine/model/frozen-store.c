/* The frozen base in bfloat16 (see frozen-store.h). */
#include "engine/model/frozen-store.h"

#include <string.h>

#include "engine/base/error.h"
#include "kernels/backend.h"

struct CohortFrozenStore {
  uint16_t *bits; /* backend memory, n_bits values: the stored tensors one after another */
  size_t n_bits;
  size_t *at;   /* per parameter tensor: where its bits start, or G_MAXSIZE when not stored */
  int layer_lo; /* layers layer_lo … layer_lo + n_layers − 1 */
  guint n_layers;
  int *users; /* per layer: begins without their end yet */
};

gboolean cohort_frozen_store_wanted(const CohortConfig *cfg, gboolean can_reserve,
                                    const char *be_name, GError **error)
{
  if (!cfg || cfg->finetune == COHORT_FINETUNE_FULL || cfg->frozen_dtype != COHORT_FROZEN_BF16)
    return FALSE;
  if (!can_reserve)
    cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "key \"frozen_dtype\": \"bf16\" needs address ranges that give memory back per "
                "layer, which the %s backend does not have; allowed: fp32, or bf16 on cpu or "
                "cuda",
                be_name);
  return TRUE;
}

static gboolean stored(const CohortTensorInfo *t)
{
  return t->frozen && t->ndim >= 2;
}

gboolean cohort_frozen_store_take(CohortModel *m, GError **error)
{
  g_return_val_if_fail(m->params_range && !m->frozen_store, FALSE);
  const CohortBackend *be = m->be;
  g_autofree size_t *at = g_new(size_t, MAX(m->n_tensors, 1));
  size_t n_bits = 0;
  int lo = 0, hi = 0;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    at[i] = stored(t) ? n_bits : G_MAXSIZE;
    n_bits += stored(t) ? t->numel : 0;
    lo = i ? MIN(lo, t->layer) : t->layer;
    hi = i ? MAX(hi, t->layer) : t->layer;
  }
  uint16_t *bits = be->alloc(MAX(n_bits, 1) * sizeof(uint16_t));
  if (!bits)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "frozen_dtype bf16: out of %s memory for %zu bf16 values of the frozen "
                       "base; allowed: a smaller model",
                       be->name, n_bits);
  /* One tensor at a time, each given back as soon as it is rounded: the base never needs
   * more than its fp32 size and one tensor's bf16 copy at once. */
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    if (at[i] == G_MAXSIZE)
      continue;
    be->to_bf16(bits + at[i], m->params + t->offset, t->numel);
    be->decommit(m->params + t->offset, t->numel * sizeof(float));
  }
  CohortFrozenStore *s = g_new0(CohortFrozenStore, 1);
  s->bits = bits;
  s->n_bits = n_bits;
  s->at = g_steal_pointer(&at);
  s->layer_lo = lo;
  s->n_layers = (guint)(hi - lo + 1);
  s->users = g_new0(int, s->n_layers);
  m->frozen_store = s;
  return TRUE;
}

void cohort_frozen_store_layer(CohortModel *m, int layer, CohortLayerUse use, gboolean begin)
{
  CohortFrozenStore *s = m->frozen_store;
  if (!s || use == COHORT_LAYER_GRADS || layer < s->layer_lo ||
      layer >= s->layer_lo + (int)s->n_layers)
    return;
  int *users = &s->users[layer - s->layer_lo];
  if (begin ? (*users)++ > 0 : (*users == 0 || --*users > 0))
    return;
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    if (s->at[i] == G_MAXSIZE || t->layer != layer)
      continue;
    /* A failed commit is recorded by the backend (on a GPU the run then ends with it). */
    if (begin && m->be->commit(m->params + t->offset, t->numel * sizeof(float)) == 0)
      m->be->from_bf16(m->params + t->offset, s->bits + s->at[i], t->numel, 1.0f);
    else if (!begin)
      m->be->decommit(m->params + t->offset, t->numel * sizeof(float));
  }
}

const uint16_t *cohort_frozen_store_bits(const CohortModel *m, guint i)
{
  const CohortFrozenStore *s = m->frozen_store;
  return s && i < m->n_tensors && s->at[i] != G_MAXSIZE ? s->bits + s->at[i] : NULL;
}

const uint16_t *cohort_frozen_store_bits_host(const CohortModel *m, guint i, uint16_t **tmp)
{
  *tmp = NULL;
  const uint16_t *bits = cohort_frozen_store_bits(m, i);
  if (!bits || m->be == cohort_backend_cpu())
    return bits;
  size_t n = m->tensors[i].numel;
  *tmp = g_new(uint16_t, MAX(n, 1));
  m->be->download(*tmp, bits, n * sizeof(uint16_t));
  return *tmp;
}

void cohort_frozen_store_widen_into(const CohortModel *m, float *params)
{
  /* params is host memory: on a GPU the bits come down first and widen on the CPU */
  for (guint i = 0; m->frozen_store && i < m->n_tensors; i++) {
    g_autofree uint16_t *tmp = NULL;
    const uint16_t *bits = cohort_frozen_store_bits_host(m, i, &tmp);
    if (bits)
      cohort_backend_cpu()->from_bf16(params + m->tensors[i].offset, bits, m->tensors[i].numel,
                                      1.0f);
  }
}

void cohort_frozen_store_round(CohortModel *m)
{
  for (guint i = 0; i < m->n_tensors; i++) {
    const CohortTensorInfo *t = &m->tensors[i];
    if (!stored(t))
      continue;
    uint16_t *bits = m->be->alloc(t->numel * sizeof(uint16_t));
    g_assert(bits != NULL);
    m->be->to_bf16(bits, m->params + t->offset, t->numel);
    m->be->from_bf16(m->params + t->offset, bits, t->numel, 1.0f);
    m->be->free(bits);
  }
}

size_t cohort_frozen_store_floats(const CohortModel *m)
{
  return m->frozen_store ? m->frozen_store->n_bits : 0;
}

size_t cohort_frozen_store_bytes(const CohortModel *m)
{
  return cohort_frozen_store_floats(m) * sizeof(uint16_t);
}

void cohort_frozen_store_free(const CohortBackend *be, CohortFrozenStore *s)
{
  if (!s)
    return;
  if (be)
    be->free(s->bits);
  g_free(s->at);
  g_free(s->users);
  g_free(s);
}
