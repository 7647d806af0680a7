/* Scoring text with a saved language model: `cohort-train --sample PATH --perplexity FILE`. */
#pragma once

#include <glib.h>

#include "engine/model/model.h"

G_BEGIN_DECLS

/* The largest text --perplexity reads. */
#define COHORT_PERPLEXITY_MAX_FILE (1u << 30)

/* The mean next-token cross-entropy (nats) of ids[0..n) under `m` (a text family's model,
 * built for micro-batches of at least one sequence): windows of up to seq_len inputs, each
 * predicting the tokens after its inputs, that follow one another without overlap (window w
 * reads ids[w·seq_len .. (w+1)·seq_len) and predicts ids[w·seq_len + 1 .. (w+1)·seq_len + 1),
 * the last one shorter), so every token but the first is predicted once, from the tokens of its
 * window before it. *predicted gets n - 1. FALSE with an error when n < 2 or an id is outside
 * the model's vocabulary. */
gboolean cohort_perplexity_ids(CohortModel *m, int seq_len, int vocab_size, const int *ids, gsize n,
                               double *loss, gint64 *predicted, GError **error);

/* Reads `file` as text, encodes it with the saved model's tokenizer (its post-processor's tokens
 * added and special tokens written in the text recognised, as Hugging Face's tokenizer(text)
 * does), or as bytes for a byte-level model, and scores it (cohort_perplexity_ids). `path` and
 * `sets` as cohort_sample_saved's. Errors name the file: missing or not a regular file, empty,
 * of fewer than two tokens, a model that is not a text family's or that has no tokenizer (token
 * shards). */
gboolean cohort_perplexity_saved(const char *path, const char *const *sets, const char *file,
                                 double *loss, gint64 *predicted, GError **error);

G_END_DECLS
