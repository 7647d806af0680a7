/* Text generation for `sample` events: autoregressive top-k sampling from the model. */
#pragma once

#include <glib.h>
#include "gpt.h"

G_BEGIN_DECLS

/* One step of a small, serialisable RNG (splitmix64): the sampler's state lives in
 * checkpoints so samples after a resume are the ones a run without a stop would give. */
guint64 cohort_rng_next(guint64 *state);
/* Uniform in [0, 1). */
double cohort_rng_uniform(guint64 *state);

/* Continues `prompt` (token ids) by `n_new` tokens, sampling from the softmax of the last
 * position restricted to the `top_k` most likely tokens (0 = all) at `temperature`. The
 * context is the last seq_len tokens. Returns prompt + continuation; *n_out its length. */
int *cohort_generate(CohortGpt *gpt, const int *prompt, int n_prompt, int n_new, int top_k,
                     double temperature, guint64 *rng_state, int *n_out);

/* Byte-level decoding: token ids as bytes, invalid UTF-8 replaced by U+FFFD. */
char *cohort_bytes_to_utf8(const int *tokens, int n);

G_END_DECLS
