/* The frozen text encoder of a text-conditioned DiT (text_encoder, docs/t2i-design.md): a
 * caption in, the hidden states of one layer of a Llama-family model out, one row per token.
 *
 * "builtin" is a small encoder Cohort makes itself, so text-to-image trains with nothing
 * downloaded: a LlamaForCausalLM of 5 blocks, width COHORT_TEXT_BUILTIN_WIDTH (64), 4 heads,
 * SwiGLU width 128, RoPE θ 10000, over the caption's UTF-8 bytes (token id = byte value, no
 * special tokens), with weights drawn from a fixed seed (uniform with standard deviation
 * 1/√fan_in for matrices, unit-variance token embeddings, norms 1): every build makes the same
 * encoder, so embeddings and their cache agree across machines. Its features are random but
 * fixed and mix each byte with the ones before it (causal attention, rotary positions); the
 * DiT's caption_projection learns what to read from them.
 *
 * The layer read is text_encoder_layer as Hugging Face counts hidden_states (k: the output of
 * block k; -1 the last block's; -2 the one before, the default): only the blocks up to it are
 * built and run. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

typedef struct CohortTextEncoder CohortTextEncoder;

/* The encoder cfg->text_encoder names, on backend `be`, for captions of up to
 * cfg->max_text_tokens tokens. Errors name the key, its value and what is allowed (a folder is
 * not read yet: only "builtin"). */
CohortTextEncoder *cohort_text_encoder_open(const CohortBackend *be, const CohortConfig *cfg,
                                            GError **error);
void cohort_text_encoder_free(CohortTextEncoder *e);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTextEncoder, cohort_text_encoder_free)

/* The width D of its hidden states. */
int cohort_text_encoder_width(const CohortTextEncoder *e);
/* What identifies its embeddings (encoder, weights' origin, layer, max_text_tokens), for
 * caches: two encoders with the same fingerprint give the same embeddings. */
const char *cohort_text_encoder_fingerprint(const CohortTextEncoder *e);

/* The hidden states of `text` (UTF-8): *len (0 .. max_text_tokens) rows of D floats in a new
 * host array *out (NULL when *len is 0; g_free). The empty caption has no token. */
void cohort_text_encoder_encode(CohortTextEncoder *e, const char *text, float **out, int *len);

G_END_DECLS
