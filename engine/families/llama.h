/* The "llama" family's description (engine/families/family.h): the decoder of Hugging Face's
 * LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM, its shape from the
 * config (or a config.json), its tensors with Hugging Face's names and layouts, and where its
 * activations go. The model itself is engine/models/llama*.c. */
#pragma once

#include "engine/families/family.h"

G_BEGIN_DECLS

/* The "llama" family's description. */
extern const CohortFamilyDesc cohort_family_llama;

/* The config's `architecture` (its choices in this order): config.json's architectures[0]. */
typedef enum {
  COHORT_LLAMA_ARCH_LLAMA,   /* LlamaForCausalLM: attention_bias on q, k, v and o */
  COHORT_LLAMA_ARCH_MISTRAL, /* MistralForCausalLM: no biases */
  COHORT_LLAMA_ARCH_QWEN2,   /* Qwen2ForCausalLM: q, k, v biases always, none on o */
  COHORT_LLAMA_ARCH_QWEN3,   /* Qwen3ForCausalLM: per-head q/k RMSNorm; attention_bias on all */
  COHORT_LLAMA_ARCH_COUNT
} CohortLlamaArch;

/* Hugging Face's class names, indexed by CohortLlamaArch. */
extern const char *const cohort_family_llama_archs[COHORT_LLAMA_ARCH_COUNT + 1];

/* rope_scaling's types this family computes (Hugging Face's rope_type). */
typedef enum {
  COHORT_ROPE_DEFAULT, /* no rope_scaling */
  COHORT_ROPE_LINEAR,  /* every frequency divided by factor */
  COHORT_ROPE_LLAMA3,  /* Llama 3.1's: low frequencies divided, high ones kept, a ramp between */
} CohortRopeType;

/* The rotary embedding's frequencies: rope_theta and rope_scaling. */
typedef struct {
  CohortRopeType type;
  double theta;               /* rope_theta */
  double factor;              /* linear, llama3 */
  double low_freq_factor;     /* llama3 */
  double high_freq_factor;    /* llama3 */
  int original_max_positions; /* llama3: original_max_position_embeddings */
} CohortRope;

typedef struct {
  int n_layer;      /* num_hidden_layers */
  int hidden;       /* hidden_size */
  int intermediate; /* intermediate_size */
  int n_head;       /* num_attention_heads */
  int n_kv_head;    /* num_key_value_heads, dividing n_head */
  int head_dim;     /* head_dim (even), which need not be hidden / n_head */
  int vocab_size;
  int seq_len;    /* the longest window: positions the rotary tables cover */
  double rms_eps; /* rms_norm_eps */
  CohortRope rope;
  gboolean qkv_bias; /* biases on q_proj, k_proj, v_proj (Qwen2; attention_bias) */
  gboolean o_bias;   /* a bias on o_proj (attention_bias of Llama and Qwen3) */
  gboolean qk_norm;  /* Qwen3's per-head RMSNorm of queries and keys */
  gboolean tied;     /* tie_word_embeddings: the head is the embedding */
} CohortLlamaShape;

/* The tensors a block may have, in forward order; which of them a shape has is
 * cohort_family_llama_slots (-1: absent). */
enum {
  LB_IN_NORM,   /* input_layernorm.weight */
  LB_Q_W,       /* self_attn.q_proj.weight [NH·hd, C] */
  LB_Q_B,       /* self_attn.q_proj.bias (qkv_bias) */
  LB_K_W,       /* self_attn.k_proj.weight [NKV·hd, C] */
  LB_K_B,       /* self_attn.k_proj.bias (qkv_bias) */
  LB_V_W,       /* self_attn.v_proj.weight [NKV·hd, C] */
  LB_V_B,       /* self_attn.v_proj.bias (qkv_bias) */
  LB_Q_NORM,    /* self_attn.q_norm.weight [hd] (qk_norm) */
  LB_K_NORM,    /* self_attn.k_norm.weight [hd] (qk_norm) */
  LB_O_W,       /* self_attn.o_proj.weight [C, NH·hd] */
  LB_O_B,       /* self_attn.o_proj.bias (o_bias) */
  LB_POST_NORM, /* post_attention_layernorm.weight */
  LB_GATE_W,    /* mlp.gate_proj.weight [I, C] */
  LB_UP_W,      /* mlp.up_proj.weight [I, C] */
  LB_DOWN_W,    /* mlp.down_proj.weight [C, I] */
  LB_COUNT
};

/* What one block keeps from forward for backward, each [N, width] with N = B·T. */
typedef struct {
  float *ln1, *rstd1;     /* input_layernorm's output and 1/rms */
  float *q_pre, *k_pre;   /* the projections before the q/k norms (qk_norm only) */
  float *q_rstd, *k_rstd; /* their 1/rms per (position, head) (qk_norm only) */
  float *q, *k, *v;       /* attention's inputs, q and k rotated */
  float *att, *lse;       /* attention's output [N, NH·hd] and log-sum-exps [B, NH, T] */
  float *res_mid;         /* x + the attention branch */
  float *ln2, *rstd2;     /* post_attention_layernorm's */
  float *gate, *up;       /* the MLP's two projections [N, I] */
  float *res_out;         /* the block's output: the next block's input */
} CohortLlamaBlockActs;

/* A Llama's activations (backend memory) for max_batch sequences of seq_len tokens. */
typedef struct {
  float *rope_cos, *rope_sin; /* rotary tables [seq_len, head_dim / 2] */
  int *tokens, *targets;
  float *embedded;              /* [N, C]: the first block's input */
  CohortLlamaBlockActs *blocks; /* n_layer entries, allocated by the caller; NULL to count */
  float *h;                     /* [N, I]: silu(gate)·up, recomputed in backward */
  float *lnf, *rstdf;           /* the final norm */
  float *logits, *lse, *losses;
  /* backward scratch (NULL in a forward-only model) */
  float *dres, *dln, *dq, *dk, *dv, *datt, *dk_pre, *dgate, *dup, *dlogits;
} CohortLlamaActs;

/* The shape `cfg` describes (head_dim 0: n_embd / n_head; num_key_value_heads 0: n_head). */
CohortLlamaShape cohort_family_llama_shape(const CohortConfig *cfg);

/* Names of the shape's fields in messages: the config's keys or config.json's. */
typedef enum { COHORT_LLAMA_NAMES_CONFIG, COHORT_LLAMA_NAMES_HF } CohortLlamaNames;

/* FALSE with an error naming the field (as `names` spells it), its value and what is allowed
 * when `shape` cannot be built (sizes out of range, heads not dividing, an odd head_dim, a
 * rope scaling that makes no frequencies). The message starts with `source`. */
gboolean cohort_family_llama_check_shape(const CohortLlamaShape *shape, CohortLlamaNames names,
                                         const char *source, GError **error);

/* Which block tensors `s` has: slot[p] is tensor p's place among its block's, or -1; returns
 * the number of tensors per block. */
int cohort_family_llama_slots(const CohortLlamaShape *s, int slot[LB_COUNT]);

/* The tables of a Llama of shape `s`: model.embed_tokens.weight (layer -1), each block's
 * tensors (layer l), model.norm.weight and a separate lm_head.weight (layer n_layer). No
 * buffers: the rotary tables follow from the shape. */
void cohort_family_llama_tables(const CohortLlamaShape *s, CohortFamilyTables *out);

/* Lays the activations out from `base` (NULL: only counts) for max_batch sequences and returns
 * their bytes, keeping what `keep` says (family.h): a forward-only model (a distillation teacher)
 * has no backward scratch, and every block writes the same buffers (a block reads its input
 * before it overwrites them); with activation checkpointing the blocks share those buffers too
 * but each keeps its own output (res_out, the next block's input). */
size_t cohort_family_llama_layout(CohortLlamaActs *a, const CohortLlamaShape *s, int max_batch,
                                  CohortActKeep keep, char *base);

G_END_DECLS
