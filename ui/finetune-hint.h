/* What the window says about fine-tuning from the config alone (engine/families/finetune-count.h):
 * under lora_targets and trainable, what their patterns match in the configured model, live
 * as they are typed and as the model's keys change; in the run summary, how many of the
 * model's parameters learn. */
#pragma once

#include "engine/config/config.h"

G_BEGIN_DECLS

/* A translated line for key `key` (lora_targets or trainable) of `cfg`: "Matches 48 layers:
 * 1.18 M adapter parameters", or the pattern that matches nothing; NULL for another key, a
 * key the finetune mode does not use, or a model with no parameter table (a shape its family
 * does not build). *refused: whether the line says why a run would be refused. */
char *cohort_finetune_hint(const CohortConfig *cfg, const char *key, gboolean *refused);

/* "1.18 M of 125.6 M parameters learn (0.94 %)", translated, in every finetune mode (the
 * adapters count with lora); NULL when the model has no parameter table. */
char *cohort_finetune_learning(const CohortConfig *cfg);

G_END_DECLS
