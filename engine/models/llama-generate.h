/* Generation from a Llama-family model with a key/value cache: the prompt goes through the
 * network once (a prefill), then each new token alone, its attention reading the keys and
 * values of the positions before it from the cache. */
#pragma once

#include <glib.h>

#include "engine/model/model.h"
#include "engine/models/token-pick.h"

G_BEGIN_DECLS

/* One sequence's cache on the model's backend: every layer's rotated keys and its values for
 * up to seq_len positions (2 · n_layer · seq_len · num_key_value_heads · head_dim floats). */
typedef struct CohortLlamaCache CohortLlamaCache;

/* NULL with an error when the backend has no memory for it. */
CohortLlamaCache *cohort_llama_cache_new(CohortModel *m, GError **error);
void cohort_llama_cache_free(CohortLlamaCache *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortLlamaCache, cohort_llama_cache_free)

/* Positions the cache holds. */
int cohort_llama_cache_len(const CohortLlamaCache *c);
/* Empties the cache: the next token is position 0 again. */
void cohort_llama_cache_clear(CohortLlamaCache *c);

/* Runs tokens[0..n) (ids below vocab_size, 1 <= n <= seq_len - len) at the cache's next
 * positions, adds their keys and values to it, and writes the logits of the last of them
 * (vocab_size floats, host memory) to `logits`. The model's activations are overwritten (no
 * backward follows). */
void cohort_llama_cache_feed(CohortLlamaCache *c, const int *tokens, int n, float *logits);

/* Called before each token is picked with the logits it is picked from and the window
 * they are the prediction after (window[0..n), positions 0..n - 1). */
typedef void (*CohortLlamaStepFunc)(const float *logits, const int *window, int n,
                                    gpointer user_data);

/* Continues prompt[0..n_prompt) by up to n_new tokens, each picked by `pick` from the logits of
 * the last position, stopping after the token `stop` (-1: never); `step` (may be NULL) sees
 * each step. An empty prompt starts from token 0. The context is what the cache holds: a prompt
 * longer than seq_len keeps its last seq_len tokens; when the cache is full, the last
 * max(seq_len / 2, 1) tokens are run again as a new prefill from position 0 and generation goes
 * on from there (a context shift, recomputed: no key is rotated twice). Returns prompt +
 * continuation, its length in *n_out; NULL with an error when the cache has no memory. */
int *cohort_llama_generate(CohortModel *m, const int *prompt, int n_prompt, int n_new,
                           const CohortTokenPick *pick, int stop, guint64 *rng,
                           CohortLlamaStepFunc step, gpointer user_data, int *n_out,
                           GError **error);

/* The family's sample routine (CohortModelOps.sample), through engine/models/text-sample.h. */
gboolean cohort_llama_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                             GError **error);

G_END_DECLS
