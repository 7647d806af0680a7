/* Samples from a saved model without training: `cohort-train --sample PATH`. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#include "engine/config/config.h"
#include "engine/model/model.h"

/* The context a plain Hugging Face folder of the llama family gets when it is sampled or scored
 * (--sample FOLDER): its max_position_embeddings, at most this many tokens (a Qwen3's 40960
 * would size a key/value cache and logits for nothing); --set seq_len=N changes it. A GPT-2
 * folder keeps its n_positions (its position table). */
#define COHORT_HF_SAMPLE_SEQ_LEN 1024

/* Loads a saved model: `path` is a checkpoint folder (state.json + model.safetensors; its EMA
 * weights when it has them), a model folder as the final export leaves it
 * (cohort-config.json + model-ema.safetensors when present, else model.safetensors), or a plain
 * Hugging Face folder of the gpt or llama family (config.json, model.safetensors or its shards
 * and index, the tokenizer's files: imported as init_from would be). `sets`
 * override keys. The model is built for micro-batches of max_batch on the config's device.
 * *cfg_out (may be NULL) gets the config, *step (may be NULL) the checkpoint's step (0 for a
 * folder). Errors name the file. */
CohortModel *cohort_model_load_saved(const char *path, const char *const *sets, int max_batch,
                                     CohortConfig **cfg_out, gint64 *step, GError **error);

/* The config of the saved model at `path` (as cohort_model_load_saved reads it) with `sets`
 * applied, not yet checked. */
CohortConfig *cohort_saved_config(const char *path, const char *const *sets, GError **error);

/* The tokenizer the saved model at `path` (config `cfg`) was trained with: the files an export
 * put beside the weights, else the one the config names; *tok stays NULL for byte-level text or
 * token shards without one. FALSE with an error when it cannot be read or its vocabulary is not
 * the model's. */
gboolean cohort_saved_tokenizer(const char *path, const CohortConfig *cfg, CohortTokenizer **tok,
                                GError **error);

/* Draws a sample from `path`: a checkpoint folder (state.json + model.safetensors; its EMA
 * weights when it has them), a model folder as the final export leaves it
 * (cohort-config.json + model-ema.safetensors or model.safetensors, classes.json) or a plain
 * Hugging Face folder (as cohort_model_load_saved). `sets`
 * ("key=value", NULL-terminated, may be NULL) override sampling keys (sample_steps,
 * cfg_scale, seed, sample_prompt, …). Image models write the grid to `output` (NULL:
 * sample-step-N.png in the current folder). Returns the sample event's fields ("image" or
 * "text"); errors name the file. */
JsonObject *cohort_sample_saved(const char *path, const char *const *sets, const char *output,
                                GError **error);

G_END_DECLS
