/* The table of descriptions, what is read from it for a config, and the table builder. */
#include "engine/families/family.h"

#include "engine/config/model-families.h"

/* The descriptions of the families engine/config/model-families.h declares, in its order. */
#define FAMILY_DESC_DECL(name, label) extern const CohortFamilyDesc cohort_family_##name;
COHORT_MODEL_FAMILIES(FAMILY_DESC_DECL)
#undef FAMILY_DESC_DECL

#define FAMILY_DESC(name, label) &cohort_family_##name,
static const CohortFamilyDesc *const descs[] = {COHORT_MODEL_FAMILIES(FAMILY_DESC) NULL};
#undef FAMILY_DESC

const CohortFamilyDesc *const *cohort_family_descs(guint *n_families)
{
  *n_families = G_N_ELEMENTS(descs) - 1;
  return descs;
}

const CohortFamilyDesc *cohort_family_desc(const char *name)
{
  for (guint i = 0; name && descs[i]; i++)
    if (g_str_equal(descs[i]->name, name))
      return descs[i];
  return NULL;
}

void cohort_family_table_free(CohortTensorInfo *t, guint n)
{
  for (guint i = 0; t && i < n; i++)
    g_free((char *)t[i].name);
  g_free(t);
}

void cohort_family_tables_clear(CohortFamilyTables *t)
{
  cohort_family_table_free(t->params, t->n_params);
  cohort_family_table_free(t->buffers, t->n_buffers);
  *t = (CohortFamilyTables){0};
}

/* The config as a model looks before its data is read: a shallow copy (its strings are
 * borrowed, so it is never freed) with num_classes 0 — from the data — counted as 1. */
static CohortConfig before_data(const CohortConfig *cfg)
{
  CohortConfig c = *cfg;
  c.num_classes = MAX(c.num_classes, 1);
  return c;
}

gboolean cohort_family_tables_of(const CohortConfig *cfg, CohortFamilyTables *out)
{
  *out = (CohortFamilyTables){0};
  const CohortFamilyDesc *f = cohort_family_desc(cfg->model);
  if (!f)
    return FALSE;
  CohortConfig c = before_data(cfg);
  return f->tables(&c, out);
}

CohortTensorInfo *cohort_family_param_table(const CohortConfig *cfg, guint *n_tensors,
                                            size_t *n_floats)
{
  CohortFamilyTables t;
  *n_tensors = 0;
  *n_floats = 0;
  if (!cohort_family_tables_of(cfg, &t))
    return NULL;
  *n_tensors = t.n_params;
  *n_floats = t.param_floats;
  CohortTensorInfo *params = g_steal_pointer(&t.params);
  t.n_params = 0;
  cohort_family_tables_clear(&t);
  return params;
}

gint64 cohort_family_count_params(const CohortConfig *cfg)
{
  CohortFamilyTables t;
  if (!cohort_family_tables_of(cfg, &t))
    return 0;
  gint64 n = (gint64)t.param_floats;
  cohort_family_tables_clear(&t);
  return n;
}

size_t cohort_family_act_bytes(const CohortConfig *cfg, int max_batch)
{
  const CohortFamilyDesc *f = cohort_family_desc(cfg->model);
  if (!f)
    return 0;
  CohortConfig c = before_data(cfg);
  return f->act_bytes(&c, max_batch, FALSE);
}

void cohort_family_gemm_operands(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b)
{
  *a = *b = 0;
  const CohortFamilyDesc *f = cohort_family_desc(cfg->model);
  if (!f || !f->gemm_operands)
    return;
  CohortConfig c = before_data(cfg);
  f->gemm_operands(&c, max_batch, a, b);
}

const char *cohort_family_desc_lora_targets(const CohortFamilyDesc *f, const CohortConfig *cfg)
{
  if (!f)
    return NULL;
  return f->lora_targets_of ? f->lora_targets_of(cfg) : f->lora_targets;
}

const char *cohort_family_lora_targets(const CohortConfig *cfg)
{
  return cohort_family_desc_lora_targets(cohort_family_desc(cfg->model), cfg);
}

gboolean cohort_family_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  const CohortFamilyDesc *f = cohort_family_desc(cfg->model);
  if (f && cfg->activation_checkpointing && !f->activation_checkpointing) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"activation_checkpointing\": true is not available for model \"%s\" "
                "in this version (its blocks are not recomputed in backward); allowed: false",
                source ? source : "config", f->name);
    return FALSE;
  }
  return !f || !f->check_config || f->check_config(cfg, source, error);
}

void cohort_table_builder_init(CohortTableBuilder *b)
{
  *b = (CohortTableBuilder){.params = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo)),
                            .buffers = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo))};
}

CohortTensorInfo *cohort_table_add(GArray *arr, char *name, int ndim, const int *shape, int layer,
                                   size_t *offset)
{
  CohortTensorInfo t = {.name = name, .ndim = ndim, .layer = layer, .offset = *offset, .numel = 1};
  for (int d = 0; d < ndim; d++) {
    t.shape[d] = shape[d];
    t.numel *= (size_t)shape[d];
  }
  /* Matrices, embeddings and convolution kernels decay; biases and norms do not. */
  t.decay = ndim >= 2;
  *offset += t.numel;
  g_array_append_val(arr, t);
  return &g_array_index(arr, CohortTensorInfo, arr->len - 1);
}

void cohort_table_builder_finish(CohortTableBuilder *b, CohortFamilyTables *out)
{
  out->n_params = b->params->len;
  out->param_floats = b->param_floats;
  out->params = (CohortTensorInfo *)g_array_free(b->params, FALSE);
  out->n_buffers = b->buffers->len;
  out->buffer_floats = b->buffer_floats;
  out->buffers = (CohortTensorInfo *)g_array_free(b->buffers, FALSE);
  *b = (CohortTableBuilder){0};
}

void cohort_table_builder_clear(CohortTableBuilder *b)
{
  CohortFamilyTables t;
  if (!b->params)
    return;
  cohort_table_builder_finish(b, &t);
  cohort_family_tables_clear(&t);
}
