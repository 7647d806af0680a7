/* The registry of model families: the list, lookup by name, the factory, the config rules
 * that need to know the families (data formats, distillation), and a model's size before it is
 * made (the description over the shape the class builds). */
#include "engine/models/registry.h"

#include <string.h>

#include "engine/base/error.h"
#include "engine/config/model-families.h"
#include "engine/families/family.h"

/* The classes of the families engine/config/model-families.h declares, in its order: each
 * family `x` defines cohort_x_class. tests/test-registry.c checks each class's name. */
#define FAMILY_CLASS_DECL(name, label) extern const CohortModelClass cohort_##name##_class;
COHORT_MODEL_FAMILIES(FAMILY_CLASS_DECL)
#undef FAMILY_CLASS_DECL

#define FAMILY_CLASS(name, label) &cohort_##name##_class,
static const CohortModelClass *const classes[] = {COHORT_MODEL_FAMILIES(FAMILY_CLASS) NULL};
#undef FAMILY_CLASS

const CohortModelClass *const *cohort_model_classes(void)
{
  return classes;
}

const CohortModelClass *cohort_model_class_find(const char *name)
{
  for (guint i = 0; name && classes[i]; i++)
    if (strcmp(classes[i]->name, name) == 0)
      return classes[i];
  return NULL;
}

const CohortModelClass *cohort_model_class_for(const CohortConfig *cfg, const char *source,
                                               GError **error)
{
  const CohortModelClass *k = cohort_model_class_find(cfg->model);
  if (!k) {
    g_autoptr(GString) names = g_string_new(NULL);
    for (guint i = 0; classes[i]; i++)
      g_string_append_printf(names, "%s\"%s\"", i ? ", " : "", classes[i]->name);
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"model\": \"%s\" is not a model this build trains; allowed: %s",
                source ? source : "config", cfg->model ? cfg->model : "", names->str);
  }
  return k;
}

gboolean cohort_model_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  const CohortModelClass *k = cohort_model_class_for(cfg, source, error);
  if (!k)
    return FALSE;
  gboolean ok = FALSE;
  for (guint i = 0; i < k->n_formats; i++)
    ok = ok || k->formats[i] == cfg->data_format;
  if (!ok) {
    g_autofree char *fmt = cohort_config_get(cfg, "data_format");
    g_autoptr(GString) allowed = g_string_new(NULL);
    for (guint i = 0; i < k->n_formats; i++) {
      g_autoptr(CohortConfig) probe = cohort_config_copy(cfg);
      probe->data_format = k->formats[i];
      g_autofree char *name = cohort_config_get(probe, "data_format");
      g_string_append_printf(allowed, "%s\"%s\"", i ? ", " : "", name);
    }
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"data_format\": \"%s\" cannot train model \"%s\"; allowed: %s",
                source ? source : "config", fmt, k->name, allowed->str);
    return FALSE;
  }
  return cohort_family_check_config(cfg, source, error) &&
         (!k->check_config || k->check_config(cfg, source, error));
}

/* cfg with the shape keys the class builds the model with (runtime_shape): a shallow copy whose
 * strings are borrowed, never freed. NULL class: none. */
static const CohortModelClass *built_shape(const CohortConfig *cfg, CohortConfig *shape)
{
  const CohortModelClass *k = cohort_model_class_find(cfg->model);
  *shape = *cfg;
  if (k && k->runtime_shape)
    k->runtime_shape(cfg, shape);
  return k;
}

gint64 cohort_model_count_params(const CohortConfig *cfg)
{
  CohortConfig shape;
  return built_shape(cfg, &shape) ? cohort_family_count_params(&shape) : 0;
}

CohortTensorInfo *cohort_model_param_table(const CohortConfig *cfg, guint *n_tensors,
                                           size_t *n_floats)
{
  CohortConfig shape;
  *n_tensors = 0;
  *n_floats = 0;
  return built_shape(cfg, &shape) ? cohort_family_param_table(&shape, n_tensors, n_floats) : NULL;
}

size_t cohort_model_act_bytes(const CohortConfig *cfg, int max_batch)
{
  CohortConfig shape;
  return built_shape(cfg, &shape) ? cohort_family_act_bytes(&shape, max_batch) : 0;
}

void cohort_model_gemm_operands(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b)
{
  CohortConfig shape;
  *a = *b = 0;
  if (built_shape(cfg, &shape))
    cohort_family_gemm_operands(&shape, max_batch, a, b);
}

CohortModel *cohort_model_new(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                              GError **error)
{
  const CohortModelClass *k = cohort_model_class_for(cfg, NULL, error);
  if (!k)
    return NULL;
  /* Laid out for the config's fine-tuning keys by cohort_model_alloc_tables (not a frozen
   * model's: a teacher learns nothing). */
  /* A family runs the fine-tuning layout only once its backward skips frozen gradients
   * (frozen_layout); lora also needs adapters (lora_targets, refused in the layout). */
  if (cfg->finetune != COHORT_FINETUNE_FULL && !k->frozen_layout) {
    g_autofree char *mode = cohort_config_get(cfg, "finetune");
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "key \"finetune\": \"%s\" is not available for model \"%s\" in this version; "
                "allowed: full",
                mode, k->name);
    return NULL;
  }
  cohort_model_set_creating_finetune(cfg);
  CohortModel *m = k->create(be, cfg, max_batch, error);
  cohort_model_set_creating_finetune(NULL);
  return m;
}

CohortModel *cohort_model_new_frozen(const CohortBackend *be, const CohortConfig *cfg,
                                     int max_batch, GError **error)
{
  cohort_model_set_creating_frozen(TRUE);
  CohortModel *m = cohort_model_new(be, cfg, max_batch, error);
  cohort_model_set_creating_frozen(FALSE);
  if (m)
    m->frozen = TRUE;
  return m;
}

gboolean cohort_distill_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *src = source ? source : "config";
  gboolean teacher = cfg->teacher_from && *cfg->teacher_from;
  if (cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS && !teacher)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"student_init\": \"teacher_layers\" is not allowed with "
                       "\"teacher_from\": \"\"; allowed: \"random\", or name a teacher folder",
                       src);
  if (cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS && cfg->init_from && *cfg->init_from)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"student_init\": \"teacher_layers\" is not allowed with "
                       "\"init_from\": \"%s\" (both choose the first weights); allowed: "
                       "\"random\", or init_from \"\"",
                       src, cfg->init_from);
  if (!teacher)
    return TRUE;
  const CohortModelClass *k = cohort_model_class_find(cfg->model);
  if (k && !k->distill_new)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"teacher_from\": model \"%s\" cannot be distilled in this "
                       "build; allowed: \"\"",
                       src, k->name);
  if (k && !k->copies_blocks && cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"student_init\": \"teacher_layers\" is not allowed for model "
                       "\"%s\" (its blocks change shape with depth); allowed: \"random\"",
                       src, k->name);
  return TRUE;
}
