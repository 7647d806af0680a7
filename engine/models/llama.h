/* The Llama family's decoder, the block of today's open language models: Hugging Face's
 * LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM, which differ only
 * in a few switches. A token embedding, n_layer blocks of
 *
 *   h = x + o_proj(attention(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))),
 *                            v_proj(rms(x))))
 *   y = h + down_proj(silu(gate_proj(rms(h))) * up_proj(rms(h)))
 *
 * (RMSNorm, rotary embeddings in the rotate-half layout, grouped-query causal attention, a SwiGLU
 * MLP; q/k/v biases for Qwen2, per-head q/k RMSNorms for Qwen3), a final RMSNorm and an output
 * head tied to the embedding or separate.
 *
 * Parameters and gradients live in one buffer each with Hugging Face's names
 * ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", …, "model.norm.weight",
 * "lm_head.weight"), each linear weight stored [out, in] as nn.Linear's, laid out layer by layer
 * in forward order so reverse layer order is decreasing offsets (the DDP reducer's buckets). */
#pragma once

#include <glib.h>

#include "engine/families/llama.h"
#include "engine/model/model.h"

G_BEGIN_DECLS

typedef struct CohortBackend CohortBackend;

/* The "llama" family's class. */
extern const CohortModelClass cohort_llama_class;

/* FALSE with an error naming the field as config.json does, its value and what is allowed when
 * `shape` cannot be built (cohort_family_llama_check_shape). */
gboolean cohort_llama_check_shape(const CohortLlamaShape *shape, GError **error);

/* Allocates the model on backend `be` for micro-batches of up to max_batch sequences of up to
 * shape->seq_len tokens, laid out for the fine-tuning config the registry set on this thread (if
 * any). Parameters are zero until init_weights or a load. NULL with an error when the shape is
 * invalid or memory is short. */
CohortModel *cohort_llama_new_on(const CohortBackend *be, const CohortLlamaShape *shape,
                                 int max_batch, GError **error);

/* TRUE when `m` is a model of the "llama" family. */
gboolean cohort_is_llama(const CohortModel *m);
const CohortLlamaShape *cohort_llama_shape(const CohortModel *m);

/* Forward over `inputs` [B, T] (token ids below vocab_size, B <= max_batch, T <= seq_len).
 * With `targets` [B, T] returns the mean cross-entropy over the positions whose target counts
 * (a negative target counts in no loss: COHORT_TARGET_IGNORED) and keeps what backward needs;
 * with targets NULL returns 0 and only computes the logits. */
float cohort_llama_forward(CohortModel *m, const int *inputs, const int *targets, int B, int T);
/* The same with the sum of the counted positions' losses divided by loss_norm when it is > 0
 * (engine/model/batch.h). */
float cohort_llama_forward_norm(CohortModel *m, const int *inputs, const int *targets, int B, int T,
                                double loss_norm);
/* The hidden states of one sequence `inputs` [T] (ids below vocab_size, T <= seq_len) without
 * the head: the last block's output, or with `with_final_norm` that through model.norm, as
 * Hugging Face's last hidden_states entry is. [T, hidden] in backend memory, valid until the
 * next forward. What a frozen text encoder reads (engine/models/text-encoder.c): no logits. */
const float *cohort_llama_hidden(CohortModel *m, const int *inputs, int T,
                                 gboolean with_final_norm);
/* Logits [B, T, vocab_size] of the last forward, in backend memory. */
const float *cohort_llama_logits(const CohortModel *m);

/* The rotary frequencies inv_freq[i], i < head_dim / 2, of `rope` in double: theta^(-2i/hd),
 * then rope_scaling's change (Hugging Face's modeling_rope_utils). */
void cohort_rope_inv_freq(const CohortRope *rope, int head_dim, double *inv_freq);
/* cos and sin [positions, head_dim / 2] of position p times inv_freq[i], computed in double and
 * rounded once: the tables rope_forward reads. */
void cohort_rope_tables(const CohortRope *rope, int head_dim, int positions, float *cos,
                        float *sin);

/* Multiply-adds of one forward+backward per token at context T (6 per weight, plus
 * attention's two products), for FLOP/s. */
double cohort_llama_flops_per_token(const CohortLlamaShape *shape, int T);

G_END_DECLS
