/* adapter_config.json's keys beyond peft_type, r and lora_alpha (lora-peft.c), for
 * cohort_lora_load (lora-io.c). */
#pragma once

#include <json-glib/json-glib.h>

#include "engine/model/model.h"

G_BEGIN_DECLS

/* use_rslora must be the run's lora_rslora; use_dora, lora_bias, use_qalora false; bias
 * "none"; modules_to_save, layers_to_transform, layer_replication, trainable_token_indices and
 * target_parameters null; alpha_pattern and rank_pattern without entries that differ from
 * lora_alpha and r; target_modules (less exclude_modules, by PEFT's matching rule) must select
 * exactly the layers the run adapts, and each of its entries must name a layer. Errors name
 * `path`, the field and its value, and what is allowed. */
gboolean cohort_lora_check_peft_config(const CohortModel *m, JsonObject *o, const char *path,
                                       GError **error);

G_END_DECLS
