/* A model's parameters from its config alone: the names, shapes and LoRA kinds of the tensors
 * a family builds (the same table as its class's param_table in engine/models, which
 * tests/test-param-table.c compares), the name patterns of the fine-tuning keys (`lora_targets`,
 * `trainable`), and what they match. The window sits below the families and links none of
 * them, yet shows live what the patterns match and how many parameters learn; the engine's
 * fine-tuning plan (engine/model/finetune.h) matches names with the same functions. */
#pragma once

#include <glib.h>

#include "engine/base/tensor.h"
#include "engine/config/config.h"

G_BEGIN_DECLS

/* The parameter table of the model `cfg` describes (family `model`, its shape keys; a
 * num_classes of 0 counts as 1, the data's classes being unknown here; the DiT's image keys as
 * set, before any vae_from latents), in the family's order with its offsets; names owned
 * (free with cohort_config_param_table_free). NULL when the family is unknown or the shape is
 * none the family builds (a ResNet depth that is not 6n+2, a patch that does not divide the
 * image). */
CohortTensorInfo *cohort_config_param_table(const CohortConfig *cfg, guint *n_tensors,
                                            gint64 *n_params);
void cohort_config_param_table_free(CohortTensorInfo *t, guint n);

/* The layers a family adapts when lora_targets is "" (comma-separated; each family's class
 * has the same list, which tests/test-param-table.c checks); NULL: the family takes none. */
const char *cohort_config_lora_default_targets(const char *family);

/* The patterns of a comma-separated list (lora_targets, trainable), trimmed, empty ones
 * dropped; NULL-terminated (g_strfreev). */
GStrv cohort_finetune_patterns(const char *list);

/* Whether `pattern` names the layer `module` (a weight's name without ".weight") as PEFT's
 * target_modules do: the name itself, its end after a dot ("c_attn" names
 * "h.0.attn.c_attn"), or a pattern with * and ? over the whole name ("h.*.mlp.c_fc"). */
gboolean cohort_finetune_names_module(const char *pattern, const char *module);
/* Whether `pattern` names parameter `name`: the name itself, a pattern with * and ? over it
 * ("fc.*", "*.bias"), or its layer as cohort_finetune_names_module ("fc" names fc.weight and
 * fc.bias). */
gboolean cohort_finetune_names_param(const char *pattern, const char *name);

/* What a list of lora_targets patterns names in a parameter table: the engine refuses the
 * first problem, the window counts what the good patterns name and shows the problems. */
typedef struct {
  int nothing;          /* the index of the first pattern that names no layer, or -1 */
  int refused;          /* the index of the first pattern naming a layer that takes no adapter,
                           or -1 */
  char *refused_module; /* that layer (owned), or NULL */
} CohortTargetMatch;

/* Sets hit[i] (n entries, cleared first) for each weight of `t` that `patterns` name and that
 * can take an adapter, and fills `m` (clear with g_free of refused_module). Matching goes on
 * past a problem. */
void cohort_finetune_match_targets(const char *const *patterns, const CohortTensorInfo *t, guint n,
                                   gboolean *hit, CohortTargetMatch *m);
/* Sets hit[i] (n entries, cleared first) for each parameter that a `trainable` pattern names;
 * returns the index of the first pattern that names none, or -1. */
int cohort_finetune_match_trainable(const char *const *patterns, const CohortTensorInfo *t, guint n,
                                    gboolean *hit);

/* What the fine-tuning keys of a config match in its model. */
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
 * parameter table (see cohort_config_param_table). Clear with cohort_finetune_count_clear. */
gboolean cohort_finetune_count(const CohortConfig *cfg, CohortFinetuneCount *out);
void cohort_finetune_count_clear(CohortFinetuneCount *c);

G_END_DECLS
