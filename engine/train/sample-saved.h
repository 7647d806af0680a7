/* Samples from a saved model without training: `cohort-train --sample PATH`. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#include "engine/config/config.h"
#include "engine/model/model.h"

/* Loads a saved model: `path` is a checkpoint folder (state.json + model.safetensors; its EMA
 * weights when it has them) or a model folder as the final export leaves it
 * (cohort-config.json + model-ema.safetensors when present, else model.safetensors). `sets`
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
 * weights when it has them) or a model folder as the final export leaves it
 * (cohort-config.json + model-ema.safetensors or model.safetensors, classes.json). `sets`
 * ("key=value", NULL-terminated, may be NULL) override sampling keys (sample_steps,
 * cfg_scale, seed, sample_prompt, …). Image models write the grid to `output` (NULL:
 * sample-step-N.png in the current folder). Returns the sample event's fields ("image" or
 * "text"); errors name the file. */
JsonObject *cohort_sample_saved(const char *path, const char *const *sets, const char *output,
                                GError **error);

G_END_DECLS
