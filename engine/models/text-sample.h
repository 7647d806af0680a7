/* Text samples of the language-model families (gpt, llama): sample_prompt to ids (through the
 * tokenizer, rendered by its chat template with sample_chat), the family's generation, and the
 * `sample` event's fields. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "engine/model/model.h"
#include "engine/models/token-pick.h"

G_BEGIN_DECLS

/* Continues prompt[0..n_prompt) by up to n_new tokens picked by `pick`, drawing from `rng`;
 * stops early after the token `stop` (-1: never). Returns prompt + continuation and its
 * length in *n_out (always at least one token: an empty prompt starts from token 0). */
typedef int *(*CohortGenerateFunc)(CohortModel *m, const int *prompt, int n_prompt, int n_new,
                                   const CohortTokenPick *pick, int stop, guint64 *rng, int *n_out,
                                   GError **error);

/* The ids of cfg->sample_prompt. Through `tok`: special tokens written in the prompt count as
 * themselves; with sample_chat and a tokenizer that has a chat template, the prompt is rendered
 * as one user message followed by the generation prompt, and encoded as the template wrote it
 * (as transformers' apply_chat_template); otherwise the tokenizer's post-processor adds its
 * tokens (Llama's <s>, as Hugging Face's tokenizer(prompt)), and an empty prompt becomes the
 * document separator (cohort_tokenizer_eot). Without a tokenizer: the prompt's bytes.
 * *stop gets the token that ends a chat turn (the tokenizer's eos_token) when the prompt was
 * rendered as a chat, else -1. */
int *cohort_text_sample_prompt(const CohortConfig *cfg, const CohortTokenizer *tok, int *n,
                               int *stop, GError **error);

/* A family's `sample` op through `generate`: continues sample_prompt by sample_tokens tokens
 * picked as sample_temperature, sample_top_k and sample_top_p say, and sets "prompt", "text"
 * (for text: the tokenizer's decoding, or the bytes; invalid UTF-8 becomes U+FFFD) and
 * "tokens" (the ids, with a tokenizer or for token shards, which carry none). */
gboolean cohort_text_sample(CohortModel *m, const CohortSampleRequest *req,
                            CohortGenerateFunc generate, JsonObject *fields, GError **error);

/* Byte-level decoding: token ids as bytes, invalid UTF-8 replaced by U+FFFD. */
char *cohort_bytes_to_utf8(const int *tokens, int n);

G_END_DECLS
