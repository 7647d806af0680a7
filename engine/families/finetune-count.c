/* What the fine-tuning keys match, from the config alone (see finetune-count.h). */
#include "engine/families/finetune-count.h"

#include "engine/families/family.h"

static void count_targets(const CohortConfig *cfg, const CohortTensorInfo *t, guint n,
                          CohortFinetuneCount *out)
{
  const char *def = cohort_family_lora_targets(cfg);
  gboolean own = cfg->lora_targets && *cfg->lora_targets;
  g_auto(GStrv) patterns = cohort_finetune_patterns(own ? cfg->lora_targets : def);
  g_autofree gboolean *hit = g_new0(gboolean, MAX(n, 1));
  CohortTargetMatch m;
  cohort_finetune_match_targets((const char *const *)patterns, t, n, hit, &m);
  if (m.nothing >= 0)
    out->targets_nothing = g_strdup(patterns[m.nothing]);
  out->targets_refused = m.refused_module;
  for (guint i = 0; i < n; i++)
    if (hit[i]) {
      out->n_targets++;
      out->adapter_params +=
          (gint64)cfg->lora_rank * (t[i].shape[0] + (gint64)(t[i].numel / t[i].shape[0]));
    }
}

static void count_trainable(const CohortConfig *cfg, const CohortTensorInfo *t, guint n,
                            CohortFinetuneCount *out)
{
  g_auto(GStrv) patterns = cohort_finetune_patterns(cfg->trainable);
  g_autofree gboolean *hit = g_new0(gboolean, MAX(n, 1));
  int nothing = cohort_finetune_match_trainable((const char *const *)patterns, t, n, hit);
  if (nothing >= 0)
    out->trainable_nothing = g_strdup(patterns[nothing]);
  for (guint i = 0; i < n; i++)
    if (hit[i]) {
      out->n_trainable++;
      out->trainable_base += (gint64)t[i].numel;
    }
}

gboolean cohort_finetune_count(const CohortConfig *cfg, CohortFinetuneCount *out)
{
  *out = (CohortFinetuneCount){0};
  guint n = 0;
  size_t floats = 0;
  CohortTensorInfo *t = cohort_family_param_table(cfg, &n, &floats);
  if (!t)
    return FALSE;
  out->base_params = (gint64)floats;
  if (cohort_family_lora_targets(cfg))
    count_targets(cfg, t, n, out);
  count_trainable(cfg, t, n, out);
  cohort_family_table_free(t, n);
  gboolean lora = cfg->finetune == COHORT_FINETUNE_LORA;
  out->params = out->base_params + (lora ? out->adapter_params : 0);
  switch (cfg->finetune) {
  case COHORT_FINETUNE_LORA:
    out->learning = out->adapter_params + out->trainable_base;
    break;
  case COHORT_FINETUNE_FROZEN:
    out->learning = out->trainable_base;
    break;
  default:
    out->learning = out->base_params;
    break;
  }
  return TRUE;
}

void cohort_finetune_count_clear(CohortFinetuneCount *c)
{
  g_clear_pointer(&c->targets_nothing, g_free);
  g_clear_pointer(&c->targets_refused, g_free);
  g_clear_pointer(&c->trainable_nothing, g_free);
}
