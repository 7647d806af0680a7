/* LoRA adapters in and out of PEFT's folder format (docs/finetuning.md): adapter_config.json
 * and adapter_model.safetensors, whose tensors are named
 * "base_model.model.<prefix><layer>.lora_A.weight" ([r, in]) and "...lora_B.weight"
 * ([out, r]), <prefix> being the family's module path in the Hugging Face model PEFT wraps
 * ("transformer." for GPT2LMHeadModel). */
#pragma once

#include "engine/model/lora.h"

G_BEGIN_DECLS

/* Writes the adapters of `m` (finetune lora) into folder `dir` (created if needed), each file
 * atomically: adapter_model.safetensors from `params` (host, the model's vector) and
 * adapter_config.json naming `base` as base_model_name_or_path (with r, lora_alpha, use_rslora
 * and target_modules, what cohort_lora_load reads back). */
gboolean cohort_lora_export(const CohortModel *m, const float *params, const char *dir,
                            const char *base, GError **error);

/* Loads a PEFT adapter folder `dir` into the adapters of `m`, strictly: its r, lora_alpha and
 * use_rslora must be the config's (lora_rank, lora_alpha, lora_rslora), its target_modules
 * must select exactly the adapted layers, any other key that changes what an adapter computes
 * (use_dora, bias, modules_to_save, layers_to_transform, per-module alpha_pattern or
 * rank_pattern, ...) is refused by name (lora-peft.h), every adapter tensor must be present
 * with its shape and the file must hold nothing else. `dir` may also be a checkpoint folder of a
 * finetune lora run (state.json): its adapters as trained (not their EMA), its model.safetensors
 * checked against the sha256 state.json records, its lora_rank and lora_alpha the config's. Errors
 * name the file, the field or tensor, and what was expected; on error the model is unchanged. */
gboolean cohort_lora_load(CohortModel *m, const char *dir, GError **error);

G_END_DECLS
