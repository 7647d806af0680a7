/* What the fine-tuning keys of a config match in its model, from the config alone: the
 * family's parameter table (engine/families/family.h) matched with the engine's own functions
 * (engine/config/finetune-patterns.h). The window shows it live under lora_targets and
 * trainable and in its summary; tests/test-families.c holds it equal to the engine's
 * fine-tuning plan. */
#pragma once

#include "engine/config/config.h"
#include "engine/config/finetune-patterns.h"

G_BEGIN_DECLS

typedef struct {
  gint64 base_params;      /* the model's parameters, adapters not counted */
  guint n_targets;         /* lora_targets (or the default): the weights that get an adapter */
  gint64 adapter_params;   /* their adapters' parameters, lora_rank · (in + out) each */
  guint n_trainable;       /* trainable: the base tensors it names */
  gint64 trainable_base;   /* their parameters */
  gint64 params;           /* everything: base, plus the adapters with finetune lora */
  gint64 learning;         /* what learns in the config's finetune mode */
  char *targets_nothing;   /* the first lora_targets pattern that names no layer, or NULL */
  char *targets_refused;   /* the first layer lora_targets names that takes no adapter, or NULL */
  char *trainable_nothing; /* the first trainable pattern that names nothing, or NULL */
} CohortFinetuneCount;

/* Fills `out` for `cfg`, whatever its finetune mode (the counts of lora_targets and trainable
 * are those the keys would give with finetune lora and frozen); FALSE when there is no
 * parameter table (see cohort_family_param_table). Clear with cohort_finetune_count_clear. */
gboolean cohort_finetune_count(const CohortConfig *cfg, CohortFinetuneCount *out);
void cohort_finetune_count_clear(CohortFinetuneCount *c);

G_END_DECLS
