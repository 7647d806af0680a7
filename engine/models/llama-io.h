/* The llama family's Hugging Face folders: config.json in and out (llama-hf.c) and the weights,
 * one model.safetensors or shards with their index, in f32, bf16 or f16 (llama-io.c). */
#pragma once

#include <glib.h>

#include "engine/models/llama.h"

G_BEGIN_DECLS

/* Reads a Hugging Face config.json of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or
 * Qwen3ForCausalLM into the shape keys of `cfg` (model "llama", architecture, n_layer, n_embd,
 * n_head, num_key_value_heads, head_dim, intermediate_size, vocab_size, rms_norm_eps,
 * rope_theta, rope_scaling and its factors, attention_bias, tie_word_embeddings; seq_len is the
 * run's). A config this family cannot reproduce is refused naming the file and the key: another
 * architecture, an activation other than silu, mlp_bias, a sliding window in use, a mixture of
 * experts, a rope_scaling type other than linear and llama3, sizes out of range or heads that do
 * not divide. *max_positions (may be NULL) gets max_position_embeddings (0 when absent). */
gboolean cohort_llama_read_hf_config(const char *path, CohortConfig *cfg, int *max_positions,
                                     GError **error);

/* config.json of model `m` in Hugging Face's form for cfg's architecture, started from
 * init_from's config.json when it has one (its other keys kept). g_free. */
char *cohort_llama_hf_config_text(const CohortModel *m, const CohortConfig *cfg);

/* The shape differences between the model of `cfg` and a folder's (`folder`, read by
 * cohort_llama_read_hf_config over a copy of cfg): NULL when they build the same model, else
 * "key=value key=value …", the settings that would describe the folder's model (g_free). */
char *cohort_llama_shape_mismatch(const CohortConfig *cfg, const CohortConfig *folder);

/* The class's export_extra: config.json beside the exported weights in Hugging Face's form for
 * the architecture (started from init_from's config.json when it has one, so its token ids and
 * other keys are kept), the weights cut into shards with their index above max_shard_size_mb,
 * and the base folder's tokenizer and generation files copied when it has them. */
gboolean cohort_llama_export_extra(const CohortModel *m, const CohortConfig *cfg, const char *dir,
                                   GError **error);

/* The class's import_weights: a folder (its config.json must describe the model; the message
 * lists the settings that would), an index file or one .safetensors file, with Hugging Face's
 * names; rotary inv_freq buffers are ignored and a tied model's lm_head.weight must equal the
 * embedding. Any other tensor, a missing one or a wrong shape is an error naming the file and the
 * tensor; the parameters are unchanged on error. */
gboolean cohort_llama_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error);
/* The class's import_file: the folder's model.safetensors or its index. */
char *cohort_llama_import_file(const char *path);

G_END_DECLS
