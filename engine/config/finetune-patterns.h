/* The name patterns of the fine-tuning keys (`lora_targets`, `trainable`) and what they match
 * in a parameter table. The engine's fine-tuning plan (engine/model/finetune.h) and the window's
 * count (engine/families/finetune-count.h) match names with these same functions. */
#pragma once

#include <glib.h>

#include "engine/base/tensor.h"

G_BEGIN_DECLS

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

G_END_DECLS
