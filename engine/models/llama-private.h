/* The Llama family's model struct, shared by its files (llama.c: set-up from the family's
 * description, initialisation, the class; llama-forward.c: forward and backward; llama-rope.c:
 * the rotary tables). Its tables and activations are laid out by engine/families/llama.h. */
#pragma once

#include "engine/models/llama.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

/* The family's model: the shared base first, so a CohortModel * is a Llama *. */
typedef struct {
  CohortModel base;
  CohortLlamaShape shape;
  int slot[LB_COUNT]; /* each block tensor's place among its block's, or -1 */
  int per_block;      /* tensors per block */

  /* activations (backend memory), laid out by the description (cohort_family_llama_layout) */
  void *act_mem;
  CohortLlamaActs acts;
  float *host_losses;

  int last_B, last_T;
  gboolean have_targets;
  size_t counted;  /* the last forward's targets that count (not ignored) */
  double loss_div; /* what its loss sum was divided by (engine/model/batch.h's loss_norm) */
  /* A frozen model (a distillation teacher): no backward scratch, and every block writes the
   * same activation buffers (a block reads its input before it overwrites them). */
  gboolean forward_only;
  /* activation_checkpointing (COHORT_ACTS_CHECKPOINT): the blocks share one set of buffers,
   * which holds block acts_block's activations (-1: none); backward recomputes each block
   * into it from the block's kept input before going through it. */
  gboolean checkpoint;
  int acts_block;
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

/* A key/value cache of one sequence (llama-generate.c): each layer's rotated keys and its values
 * of the positions so far, [seq_len, NKV * hd] each, in one allocation of backend memory. */
typedef struct {
  float *mem; /* layer l's keys at 2 l S floats, its values at (2 l + 1) S; S = seq_len NKV hd */
  int len;    /* positions held: 0 .. len - 1 */
} CohortLlamaKv;

static inline float *cohort_llama_kv_keys(const CohortLlamaKv *kv, const Llama *m, int l)
{
  const CohortLlamaShape *s = &m->shape;
  return kv->mem + (size_t)2 * l * s->seq_len * s->n_kv_head * s->head_dim;
}

static inline float *cohort_llama_kv_values(const CohortLlamaKv *kv, const Llama *m, int l)
{
  const CohortLlamaShape *s = &m->shape;
  return kv->mem + (size_t)(2 * l + 1) * s->seq_len * s->n_kv_head * s->head_dim;
}

/* llama-forward.c: the network on the tokens already in m->tokens (backend memory). */
void cohort_llama_net_forward(Llama *m, int B, int T);
/* The same for one sequence's next T tokens after the kv->len in the cache (kv->len + T <=
 * seq_len): their keys and values join the cache (kv->len grows by T), and the logits of the last
 * of them are row 0 of m->acts.logits. */
void cohort_llama_net_forward_cached(Llama *m, CohortLlamaKv *kv, int T);
/* The backward of the logits families' interface (CohortModelOps.backward_logits). */
void cohort_llama_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                  CohortLogitsGradFunc add, gpointer user_data);

G_END_DECLS
