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
 * A folder is a Hugging Face LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or
 * Qwen3ForCausalLM folder (config.json, model.safetensors or its shards, tokenizer.json or
 * vocab.json + merges.txt), read as the llama family reads init_from; its width is hidden_size.
 * A caption is tokenized as Hugging Face's tokenizer(caption, truncation=True,
 * max_length=max_text_tokens): no chat template, special tokens written in it recognised, the
 * post-processor's tokens added (Llama 3's <|begin_of_text|>, none for Qwen) and kept when a
 * long caption is cut.
 *
 * The layer read is text_encoder_layer as Hugging Face counts hidden_states (k: the output of
 * block k; -1 the last block's; -2 the one before, the default): only the blocks up to it are
 * built, loaded and run. For a folder, -1 (its last block) is read after the final norm
 * (model.norm), as hidden_states[-1] is; every other layer is the raw block output. The
 * built-in encoder reads raw block outputs at every layer, -1 included. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

typedef struct CohortTextEncoder CohortTextEncoder;

/* The encoder cfg->text_encoder names ("builtin", or a folder resolved by cohort_resolve_path),
 * on backend `be`, for captions of up to cfg->max_text_tokens tokens. Errors name the key
 * (text_encoder or text_encoder_layer), its value and what is allowed: a missing folder, one
 * without config.json, tokenizer or weights, a config.json of another architecture, a layer the
 * model lacks, a tokenizer larger than the model's vocabulary. */
CohortTextEncoder *cohort_text_encoder_open(const CohortBackend *be, const CohortConfig *cfg,
                                            GError **error);
void cohort_text_encoder_free(CohortTextEncoder *e);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTextEncoder, cohort_text_encoder_free)

/* The width D of its hidden states. */
int cohort_text_encoder_width(const CohortTextEncoder *e);
/* What identifies its embeddings, for caches: two encoders with the same fingerprint give the
 * same embeddings. The built-in's names its version, the layer and max_text_tokens; a folder's
 * the architecture, the layer, max_text_tokens and one SHA-256 over the contents of
 * config.json, the weights files (model.safetensors, or the index and every shard) and the
 * tokenizer's files: a changed weight is a new fingerprint, a moved folder is not. */
const char *cohort_text_encoder_fingerprint(const CohortTextEncoder *e);

/* The hidden states of `text` (UTF-8): *len (0 .. max_text_tokens) rows of D floats in a new
 * host array *out (NULL when *len is 0; g_free). The empty caption has no token for the
 * built-in, and the post-processor's alone for a folder. FALSE with an error (and *len 0) only
 * when the folder's tokenizer cannot encode the text (a regular expression at its match
 * limit). */
gboolean cohort_text_encoder_encode(CohortTextEncoder *e, const char *text, float **out, int *len,
                                    GError **error);

G_END_DECLS
