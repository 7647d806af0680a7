/* Text samples from a GPT: autoregressive top-k sampling for `sample` events. */
#pragma once

#include <glib.h>

#include "engine/models/gpt.h"
#include "engine/model/rng.h"

G_BEGIN_DECLS

/* Continues `prompt` (token ids) by `n_new` tokens, sampling from the softmax of the last
 * position restricted to the `top_k` most likely tokens (0 = all) at `temperature`. The
 * context is the last seq_len tokens. Returns prompt + continuation; *n_out its length. */
int *cohort_generate(CohortGpt *gpt, const int *prompt, int n_prompt, int n_new, int top_k,
                     double temperature, guint64 *rng_state, int *n_out);

/* Byte-level decoding: token ids as bytes, invalid UTF-8 replaced by U+FFFD. */
char *cohort_bytes_to_utf8(const int *tokens, int n);

/* The family's sample routine (CohortModelOps.sample): continues cfg->sample_prompt by
 * cfg->sample_tokens tokens; "text" for byte-level text, "tokens" (the ids) for token shards,
 * since those carry no tokenizer. */
gboolean cohort_gpt_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                           GError **error);

G_END_DECLS
