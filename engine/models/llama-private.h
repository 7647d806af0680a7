/* The Llama family's model struct, shared by its files (llama.c: tables, activations and set-up;
 * llama-forward.c: forward and backward; llama-rope.c: the rotary tables). */
#pragma once

#include "engine/models/llama.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

/* The tensors a block may have, in forward order; which of them a shape has is
 * Llama.slot[] (-1: absent). */
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
} LlamaBlockActs;

/* The family's model: the shared base first, so a CohortModel * is a Llama *. */
typedef struct {
  CohortModel base;
  CohortLlamaShape shape;
  int slot[LB_COUNT]; /* each block tensor's place among its block's, or -1 */
  int per_block;      /* tensors per block */

  /* rotary tables [seq_len, head_dim / 2] (backend memory) */
  float *rope_cos, *rope_sin;

  /* activations (backend memory) */
  void *act_mem;
  int *tokens, *targets;
  float *embedded; /* [N, C]: the first block's input */
  LlamaBlockActs *blocks;
  float *h;           /* [N, I]: silu(gate)·up, recomputed in backward */
  float *lnf, *rstdf; /* the final norm */
  float *logits, *lse, *losses;
  float *host_losses;
  /* backward scratch */
  float *dres, *dln, *dq, *dk, *dv, *datt, *dk_pre, *dgate, *dup, *dlogits;

  int last_B, last_T;
  gboolean have_targets;
  /* A frozen model (a distillation teacher): no backward scratch, and every block writes the
   * same activation buffers (a block reads its input before it overwrites them). */
  gboolean forward_only;
} Llama;

static inline Llama *llama_of(const CohortModel *m)
{
  return (Llama *)m;
}

/* Table index of block l's tensor p (which the shape must have). */
static inline guint llama_bi(const Llama *m, int l, int p)
{
  return 1 + (guint)l * (guint)m->per_block + (guint)m->slot[p];
}

/* Parameter pointer of block l's tensor p, or NULL when the shape has no such tensor. */
static inline float *llama_bp(const Llama *m, int l, int p)
{
  return m->slot[p] < 0 ? NULL : m->base.params + m->base.tensors[llama_bi(m, l, p)].offset;
}

/* Table index of model.norm.weight; lm_head.weight follows it when the head is not tied. */
static inline guint llama_norm_index(const Llama *m)
{
  return 1 + (guint)m->shape.n_layer * (guint)m->per_block;
}

/* llama-forward.c: the network on the tokens already in m->tokens (backend memory). */
void cohort_llama_net_forward(Llama *m, int B, int T);
/* The backward of the logits families' interface (CohortModelOps.backward_logits). */
void cohort_llama_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                  CohortLogitsGradFunc add, gpointer user_data);

G_END_DECLS
