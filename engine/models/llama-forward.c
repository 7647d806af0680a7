/* The Llama network, forward and backward, written per layer over the backend table; the tokens
 * are already in backend memory. Each layer's parameters are used between
 * cohort_model_layer_begin and _end (ZeRO stage 3 gathers them there): the embedding (layer
 * -1), the blocks, the final norm with a separate head (layer n_layer), the tied head (-1
 * again). */
#include "engine/models/llama-private.h"

#include "engine/model/lora.h"

/* y [N, out] = x [N, in] @ W^T (+ b) with block l's weight `wp` (nn.Linear's [out, in]) and its
 * bias `bp` when the shape has one, plus the weight's LoRA adapter; beta 1 adds onto y (the
 * residual stream), 0 overwrites it. */
static void linear(Llama *m, float *y, float beta, const float *x, int l, int wp, int bp, int N,
                   int in, int out)
{
  CohortModel *base = &m->base;
  const CohortBackend *be = base->be;
  be->gemm(0, 1, N, out, in, 1.0f, x, in, llama_bp(m, l, wp), in, beta, y, out);
  if (bp >= 0 && m->slot[bp] >= 0)
    be->add_bias(y, llama_bp(m, l, bp), N, out);
  cohort_lora_forward(base, llama_bi(m, l, wp), y, x, N);
}

/* dx = dy @ W (beta 0 overwrites, 1 adds), dW += dy^T @ x, db += colsum(dy) (frozen ones
 * skipped), and the adapter's gradients and share of dx. */
static void linear_back(Llama *m, float *dx, float beta, const float *dy, const float *x, int l,
                        int wp, int bp, int N, int in, int out)
{
  CohortModel *base = &m->base;
  const CohortBackend *be = base->be;
  guint wi = llama_bi(m, l, wp);
  float *dw = cohort_model_grad(base, wi);
  float *db = bp >= 0 && m->slot[bp] >= 0 ? cohort_model_grad(base, llama_bi(m, l, bp)) : NULL;
  be->gemm(0, 0, N, in, out, 1.0f, dy, out, llama_bp(m, l, wp), in, beta, dx, in);
  if (dw)
    be->gemm(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (db)
    be->bias_backward(db, dy, N, out);
  cohort_lora_backward(base, wi, dx, dy, x, N);
}

/* q or k of block l: projection (+ bias), the per-head norm when the shape has one, then the
 * rotation for positions pos0 .. pos0 + T - 1; `pre` keeps the projection for the norm's
 * backward. */
static void project_rotated(Llama *m, float *out, float *pre, float *rstd, const float *x, int l,
                            int wp, int bp, int np, int heads, int B, int T, int pos0)
{
  const CohortLlamaShape *s = &m->shape;
  const CohortBackend *be = m->base.be;
  int N = B * T, hd = s->head_dim;
  if (s->qk_norm) {
    linear(m, pre, 0.0f, x, l, wp, bp, N, s->hidden, heads * hd);
    be->rmsnorm_forward(out, rstd, pre, llama_bp(m, l, np), N * heads, hd, (float)s->rms_eps);
  } else {
    linear(m, out, 0.0f, x, l, wp, bp, N, s->hidden, heads * hd);
  }
  be->rope_forward(out, out, m->acts.rope_cos, m->acts.rope_sin, B, T, heads, hd, pos0);
}

/* Block l over x [B, T, C]. With a key/value cache (B = 1), the T positions follow the
 * kv->len cached ones: their keys and values join the cache and attention reads it. */
static void block_forward(Llama *m, int l, const float *x, int B, int T, CohortLlamaKv *kv)
{
  const CohortLlamaShape *s = &m->shape;
  const CohortBackend *be = m->base.be;
  CohortLlamaBlockActs *a = &m->acts.blocks[l];
  int N = B * T, C = s->hidden, I = s->intermediate, hd = s->head_dim;
  int NH = s->n_head, NKV = s->n_kv_head;
  float eps = (float)s->rms_eps;

  be->rmsnorm_forward(a->ln1, a->rstd1, x, llama_bp(m, l, LB_IN_NORM), N, C, eps);
  int pos0 = kv ? kv->len : 0;
  project_rotated(m, a->q, a->q_pre, a->q_rstd, a->ln1, l, LB_Q_W, LB_Q_B, LB_Q_NORM, NH, B, T,
                  pos0);
  project_rotated(m, a->k, a->k_pre, a->k_rstd, a->ln1, l, LB_K_W, LB_K_B, LB_K_NORM, NKV, B, T,
                  pos0);
  linear(m, a->v, 0.0f, a->ln1, l, LB_V_W, LB_V_B, N, C, NKV * hd);
  if (kv) {
    size_t row = (size_t)NKV * hd, bytes = (size_t)T * row * sizeof(float);
    float *kc = cohort_llama_kv_keys(kv, m, l), *vc = cohort_llama_kv_values(kv, m, l);
    be->copy(kc + (size_t)pos0 * row, a->k, bytes);
    be->copy(vc + (size_t)pos0 * row, a->v, bytes);
    be->attention_gqa_cached(a->att, a->q, kc, vc, T, pos0 + T, NH, NKV, hd);
  } else {
    be->attention_gqa_forward(a->att, a->lse, a->q, a->k, a->v, B, T, NH, NKV, hd, 1);
  }
  /* res_mid = x + o_proj(att): the GEMM adds onto a copy of the residual */
  be->copy(a->res_mid, x, (size_t)N * C * sizeof(float));
  linear(m, a->res_mid, 1.0f, a->att, l, LB_O_W, LB_O_B, N, NH * hd, C);

  be->rmsnorm_forward(a->ln2, a->rstd2, a->res_mid, llama_bp(m, l, LB_POST_NORM), N, C, eps);
  linear(m, a->gate, 0.0f, a->ln2, l, LB_GATE_W, -1, N, C, I);
  linear(m, a->up, 0.0f, a->ln2, l, LB_UP_W, -1, N, C, I);
  be->swiglu_forward(m->acts.h, a->gate, a->up, (size_t)N * I);
  be->copy(a->res_out, a->res_mid, (size_t)N * C * sizeof(float));
  linear(m, a->res_out, 1.0f, m->acts.h, l, LB_DOWN_W, -1, N, I, C);
  m->acts_block = l;
}

/* The head's weight: the embedding (tied, layer -1) or lm_head (layer n_layer). */
static const float *head_weight(const Llama *m)
{
  const CohortModel *base = &m->base;
  guint i = m->shape.tied ? 0 : llama_norm_index(m) + 1;
  return base->params + base->tensors[i].offset;
}

/* The embedding and the blocks on the tokens in m->acts.tokens; returns the last block's
 * output [B, T, C]. */
static const float *blocks_forward(Llama *m, int B, int T, CohortLlamaKv *kv)
{
  CohortModel *base = &m->base;
  const CohortBackend *be = base->be;
  cohort_model_layer_begin(base, -1, COHORT_LAYER_FORWARD);
  be->rows_gather(m->acts.embedded, base->params + base->tensors[0].offset, m->acts.tokens, B * T,
                  m->shape.hidden);
  cohort_model_layer_end(base, -1, COHORT_LAYER_FORWARD);
  const float *x = m->acts.embedded;
  for (int l = 0; l < m->shape.n_layer; l++) {
    cohort_model_layer_begin(base, l, COHORT_LAYER_FORWARD);
    block_forward(m, l, x, B, T, kv);
    cohort_model_layer_end(base, l, COHORT_LAYER_FORWARD);
    x = m->acts.blocks[l].res_out;
  }
  return x;
}

/* The final norm of x [N, C] into m->acts.lnf, between layer L's begin and end. */
static void final_norm(Llama *m, const float *x, int N)
{
  CohortModel *base = &m->base;
  const CohortLlamaShape *s = &m->shape;
  base->be->rmsnorm_forward(m->acts.lnf, m->acts.rstdf, x,
                            base->params + base->tensors[llama_norm_index(m)].offset, N, s->hidden,
                            (float)s->rms_eps);
}

/* The network on the tokens in m->acts.tokens; with a cache (B = 1) only the last position's
 * logits (row 0), else every position's. */
static void net_forward(Llama *m, int B, int T, CohortLlamaKv *kv)
{
  CohortModel *base = &m->base;
  const CohortBackend *be = base->be;
  const CohortLlamaShape *s = &m->shape;
  int N = B * T, C = s->hidden, V = s->vocab_size, L = s->n_layer;
  const float *x = blocks_forward(m, B, T, kv);
  if (kv) {
    kv->len += T;
    x += (size_t)(T - 1) * C; /* the head reads the last position alone */
    N = 1;
  }
  cohort_model_layer_begin(base, L, COHORT_LAYER_FORWARD);
  final_norm(m, x, N);
  if (s->tied) {
    cohort_model_layer_end(base, L, COHORT_LAYER_FORWARD);
    cohort_model_layer_begin(base, -1, COHORT_LAYER_FORWARD);
  }
  be->gemm(0, 1, N, V, C, 1.0f, m->acts.lnf, C, head_weight(m), C, 0.0f, m->acts.logits, V);
  cohort_model_layer_end(base, s->tied ? -1 : L, COHORT_LAYER_FORWARD);
}

void cohort_llama_net_forward(Llama *m, int B, int T)
{
  net_forward(m, B, T, NULL);
}

const float *cohort_llama_hidden(CohortModel *base, const int *inputs, int T,
                                 gboolean with_final_norm)
{
  Llama *m = llama_of(base);
  g_return_val_if_fail(cohort_is_llama(base), NULL);
  g_return_val_if_fail(T >= 1 && T <= m->shape.seq_len, NULL);
  for (int i = 0; i < T; i++)
    g_return_val_if_fail(inputs[i] >= 0 && inputs[i] < m->shape.vocab_size, NULL);
  base->be->upload(m->acts.tokens, inputs, (size_t)T * sizeof(int));
  const float *x = blocks_forward(m, 1, T, NULL);
  if (!with_final_norm)
    return x;
  cohort_model_layer_begin(base, m->shape.n_layer, COHORT_LAYER_FORWARD);
  final_norm(m, x, T);
  cohort_model_layer_end(base, m->shape.n_layer, COHORT_LAYER_FORWARD);
  return m->acts.lnf;
}

void cohort_llama_net_forward_cached(Llama *m, CohortLlamaKv *kv, int T)
{
  g_return_if_fail(T >= 1 && kv->len + T <= m->shape.seq_len);
  net_forward(m, 1, T, kv);
}

/* The gradient of q or k before the rotation and the norm, from d(attention input) in `d`
 * (rotated back in place): `d` itself without a norm, else `dpre` (overwritten). */
static float *unrotate(Llama *m, float *d, float *dpre, const float *pre, const float *rstd, int l,
                       int np, int heads, int B, int T)
{
  const CohortLlamaShape *s = &m->shape;
  const CohortBackend *be = m->base.be;
  int N = B * T, hd = s->head_dim;
  be->rope_backward(d, d, m->acts.rope_cos, m->acts.rope_sin, B, T, heads, hd, 0);
  if (!s->qk_norm)
    return d;
  be->zero(dpre, (size_t)N * heads * hd * sizeof(float));
  be->rmsnorm_backward(dpre, cohort_model_grad(&m->base, llama_bi(m, l, np)), d, pre,
                       llama_bp(m, l, np), rstd, N * heads, hd);
  return dpre;
}

/* m->acts.dres holds d(block output); on return d(block input), the block's gradients accumulated.
 */
static void block_backward(Llama *m, int l, const float *x, int B, int T)
{
  const CohortLlamaShape *s = &m->shape;
  const CohortBackend *be = m->base.be;
  CohortModel *base = &m->base;
  CohortLlamaBlockActs *a = &m->acts.blocks[l];
  int N = B * T, C = s->hidden, I = s->intermediate, hd = s->head_dim;
  int NH = s->n_head, NKV = s->n_kv_head;
  size_t nI = (size_t)N * I;

  /* MLP: res_out = res_mid + down(silu(gate(ln2)) * up(ln2)); h is recomputed, not kept */
  be->swiglu_forward(m->acts.h, a->gate, a->up, nI);
  linear_back(m, m->acts.dgate, 0.0f, m->acts.dres, m->acts.h, l, LB_DOWN_W, -1, N, I, C);
  be->swiglu_backward(m->acts.dgate, m->acts.dup, m->acts.dgate, a->gate, a->up, nI);
  linear_back(m, m->acts.dln, 0.0f, m->acts.dgate, a->ln2, l, LB_GATE_W, -1, N, C, I);
  linear_back(m, m->acts.dln, 1.0f, m->acts.dup, a->ln2, l, LB_UP_W, -1, N, C, I);
  be->rmsnorm_backward(m->acts.dres, cohort_model_grad(base, llama_bi(m, l, LB_POST_NORM)),
                       m->acts.dln, a->res_mid, llama_bp(m, l, LB_POST_NORM), a->rstd2, N, C);

  /* attention: res_mid = x + o_proj(attention(q, k, v)) */
  linear_back(m, m->acts.datt, 0.0f, m->acts.dres, a->att, l, LB_O_W, LB_O_B, N, NH * hd, C);
  be->attention_gqa_backward(m->acts.dq, m->acts.dk, m->acts.dv, m->acts.datt, a->q, a->k, a->v,
                             a->att, a->lse, B, T, NH, NKV, hd, 1);
  /* datt is free again: it takes the queries' gradient before their norm */
  float *dq = unrotate(m, m->acts.dq, m->acts.datt, a->q_pre, a->q_rstd, l, LB_Q_NORM, NH, B, T);
  float *dk = unrotate(m, m->acts.dk, m->acts.dk_pre, a->k_pre, a->k_rstd, l, LB_K_NORM, NKV, B, T);
  linear_back(m, m->acts.dln, 0.0f, dq, a->ln1, l, LB_Q_W, LB_Q_B, N, C, NH * hd);
  linear_back(m, m->acts.dln, 1.0f, dk, a->ln1, l, LB_K_W, LB_K_B, N, C, NKV * hd);
  linear_back(m, m->acts.dln, 1.0f, m->acts.dv, a->ln1, l, LB_V_W, LB_V_B, N, C, NKV * hd);
  be->rmsnorm_backward(m->acts.dres, cohort_model_grad(base, llama_bi(m, l, LB_IN_NORM)),
                       m->acts.dln, x, llama_bp(m, l, LB_IN_NORM), a->rstd1, N, C);
}

/* The head and the final norm: m->acts.dres gets d(last block's output) (overwritten). */
static void head_backward(Llama *m, int B, int T)
{
  CohortModel *base = &m->base;
  const CohortBackend *be = base->be;
  const CohortLlamaShape *s = &m->shape;
  int N = B * T, C = s->hidden, V = s->vocab_size, L = s->n_layer;
  guint norm = llama_norm_index(m), head = s->tied ? 0 : norm + 1;
  float *dhead = cohort_model_grad(base, head);
  cohort_model_layer_begin(base, s->tied ? -1 : L, COHORT_LAYER_BACKWARD);
  be->gemm(0, 0, N, C, V, 1.0f, m->acts.dlogits, V, head_weight(m), C, 0.0f, m->acts.dln, C);
  if (dhead)
    be->gemm(1, 0, V, C, N, 1.0f, m->acts.dlogits, V, m->acts.lnf, C, 1.0f, dhead, C);
  if (s->tied) {
    cohort_model_layer_end(base, -1, COHORT_LAYER_BACKWARD);
    cohort_model_layer_begin(base, L, COHORT_LAYER_BACKWARD);
  }
  const float *last = L > 0 ? m->acts.blocks[L - 1].res_out : m->acts.embedded;
  be->zero(m->acts.dres, (size_t)N * C * sizeof(float));
  be->rmsnorm_backward(m->acts.dres, cohort_model_grad(base, norm), m->acts.dln, last,
                       base->params + base->tensors[norm].offset, m->acts.rstdf, N, C);
  cohort_model_layer_end(base, L, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(base, L);
}

void cohort_llama_backward_logits(CohortModel *base, float grad_scale, float task_weight,
                                  CohortLogitsGradFunc add, gpointer user_data)
{
  Llama *m = llama_of(base);
  g_return_if_fail(m->have_targets && base->grads);
  const CohortBackend *be = base->be;
  const CohortLlamaShape *s = &m->shape;
  int B = m->last_B, T = m->last_T, N = B * T, C = s->hidden, V = s->vocab_size;
  be->crossentropy_backward(m->acts.dlogits, m->acts.logits, m->acts.lse, m->acts.targets, N, V,
                            (float)(grad_scale * task_weight / m->loss_div));
  if (add)
    add(m->acts.dlogits, m->acts.logits, N, V, user_data);
  head_backward(m, B, T);
  /* finetune: backward ends below the lowest layer that learns */
  for (int l = s->n_layer - 1; l >= 0 && cohort_model_learns_up_to(base, l); l--) {
    const float *x = l > 0 ? m->acts.blocks[l - 1].res_out : m->acts.embedded;
    cohort_model_layer_begin(base, l, COHORT_LAYER_BACKWARD);
    /* activation_checkpointing: the block's activations again, from its kept input, with the
     * same parameters (held by this layer's hook) and the same LoRA dropout masks (drawn from
     * each example's key), so they are the forward's bits; its output is rewritten with the
     * same bits */
    if (m->checkpoint && m->acts_block != l)
      block_forward(m, l, x, B, T, NULL);
    block_backward(m, l, x, B, T);
    cohort_model_layer_end(base, l, COHORT_LAYER_BACKWARD);
    cohort_model_layer_grads_ready(base, l);
  }
  float *demb = cohort_model_grad(base, 0);
  if (!cohort_model_learns_up_to(base, -1))
    return;
  cohort_model_layer_begin(base, -1, COHORT_LAYER_GRADS);
  if (demb)
    be->rows_scatter_add(demb, m->acts.dres, m->acts.tokens, N, C);
  cohort_model_layer_end(base, -1, COHORT_LAYER_GRADS);
  cohort_model_layer_grads_ready(base, -1);
}
