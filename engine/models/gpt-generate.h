/* Text samples from a GPT: autoregressive sampling for `sample` events. */
#pragma once

#include <glib.h>

#include "engine/models/gpt.h"
#include "engine/models/text-sample.h"
#include "engine/model/rng.h"

G_BEGIN_DECLS

/* Continues `prompt` (token ids) by up to `n_new` tokens, each picked by `pick` from the last
 * position's logits, stopping after the token `stop` (-1: never). The context is the last
 * seq_len tokens, the forward recomputed over it for every token. Returns prompt +
 * continuation; *n_out its length. */
int *cohort_generate(CohortGpt *gpt, const int *prompt, int n_prompt, int n_new,
                     const CohortTokenPick *pick, int stop, guint64 *rng_state, int *n_out);

/* The family's sample routine (CohortModelOps.sample): continues cfg->sample_prompt by
 * cfg->sample_tokens tokens (engine/models/text-sample.h); "text" for byte-level text,
 * "tokens" (the ids) for token shards, since those carry no tokenizer. */
gboolean cohort_gpt_sample(CohortModel *m, const CohortSampleRequest *req, JsonObject *fields,
                           GError **error);

G_END_DECLS
