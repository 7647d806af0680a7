/* The GPT's forward and backward, per layer by hand over the backend table: token and position
 * embedding, pre-LayerNorm blocks of causal self-attention and a GELU MLP, final LayerNorm, tied
 * head, cross-entropy. */
#include "engine/models/gpt-private.h"

#include "engine/model/lora.h"

#include <math.h>

/* Ids in the vocabulary; targets may also be COHORT_TARGET_IGNORED (-1). */
static gboolean tokens_valid(const int *tok, size_t n, int vocab, int lowest)
{
  for (size_t i = 0; i < n; i++)
    if (tok[i] < lowest || tok[i] >= vocab)
      return FALSE;
  return TRUE;
}

/* y [N, out] (beta 0: overwritten, 1: added to) += x [N, in] @ w [in, out] + b with block l's
 * weight p (HF Conv1D layout) and its bias p + 1, and the weight's LoRA adapter if any. */
static void linear_forward(Gpt *gpt, float *y, float beta, const float *x, int l, int p, int N,
                           int in, int out)
{
  const CohortBackend *be = gpt->base.be;
  float *P = gpt->base.params;
  be->gemm(0, 0, N, out, in, 1.0f, x, in, gpt_bp(gpt, P, l, p), out, beta, y, out);
  be->add_bias(y, gpt_bp(gpt, P, l, p + 1), N, out);
  cohort_lora_forward(&gpt->base, cohort_family_gpt_index(l, p), y, x, N);
}

/* dx = dy @ w^T (overwrites), dw += x^T @ dy, db += colsum(dy) (frozen ones skipped), and the
 * adapter's gradients and share of dx. */
static void linear_backward(Gpt *gpt, float *dx, const float *dy, const float *x, int l, int p,
                            int N, int in, int out)
{
  const CohortBackend *be = gpt->base.be;
  float *dw = gpt_bg(gpt, l, p), *db = gpt_bg(gpt, l, p + 1);
  be->gemm(0, 1, N, in, out, 1.0f, dy, out, gpt_bp(gpt, gpt->base.params, l, p), out, 0.0f, dx, in);
  if (dw)
    be->gemm(1, 0, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, out);
  if (db)
    be->bias_backward(db, dy, N, out);
  cohort_lora_backward(&gpt->base, cohort_family_gpt_index(l, p), dx, dy, x, N);
}

/* Block l on its input `res` (the previous block's output, or the embedding) into its
 * activations; the caller holds the layer (its parameters). */
static void block_forward(Gpt *gpt, int l, const float *res, int B, int T)
{
  const CohortBackend *be = gpt->base.be;
  const CohortGptShape *s = &gpt->shape;
  int C = s->n_embd, NH = s->n_head, N = B * T;
  float *p = gpt->base.params;
  CohortGptBlockActs *a = &gpt->acts.blocks[l];
  be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, res, gpt_bp(gpt, p, l, GPT_LN1_W),
                        gpt_bp(gpt, p, l, GPT_LN1_B), N, C, GPT_LN_EPS);
  linear_forward(gpt, a->qkv, 0.0f, a->ln1, l, GPT_ATTN_W, N, C, 3 * C);
  be->attention_forward(a->atty, a->att_lse, a->qkv, B, T, C, NH, 1);
  /* res2 = res + atty @ Wproj + bproj: the GEMM accumulates onto a copy of the residual */
  be->copy(a->res2, res, (size_t)N * C * sizeof(float));
  linear_forward(gpt, a->res2, 1.0f, a->atty, l, GPT_ATTN_PROJ_W, N, C, C);
  be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, gpt_bp(gpt, p, l, GPT_LN2_W),
                        gpt_bp(gpt, p, l, GPT_LN2_B), N, C, GPT_LN_EPS);
  linear_forward(gpt, a->fch, 0.0f, a->ln2, l, GPT_FC_W, N, C, 4 * C);
  be->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
  be->copy(a->res3, a->res2, (size_t)N * C * sizeof(float));
  linear_forward(gpt, a->res3, 1.0f, a->fch_gelu, l, GPT_FC_PROJ_W, N, 4 * C, C);
  gpt->acts_block = l;
}

float cohort_gpt_forward(CohortGpt *m, const int *inputs, const int *targets, int B, int T)
{
  return cohort_gpt_forward_norm(m, inputs, targets, B, T, 0);
}

float cohort_gpt_forward_norm(CohortGpt *m, const int *inputs, const int *targets, int B, int T,
                              double loss_norm)
{
  Gpt *gpt = gpt_of(m);
  const CohortGptShape *s = &gpt->shape;
  g_return_val_if_fail(B >= 1 && B <= gpt->base.max_batch, NAN);
  g_return_val_if_fail(T >= 1 && T <= s->seq_len, NAN);
  size_t n_tok = (size_t)B * T;
  g_return_val_if_fail(tokens_valid(inputs, n_tok, s->vocab_size, 0), NAN);
  g_return_val_if_fail(!targets || tokens_valid(targets, n_tok, s->vocab_size, -1), NAN);

  const CohortBackend *be = gpt->base.be;
  int C = s->n_embd, V = s->vocab_size, N = B * T;
  float *p = gpt->base.params;
  be->upload(gpt->acts.tokens, inputs, n_tok * sizeof(int));
  /* Each layer's parameters between layer_begin and layer_end (ZeRO stage 3 gathers them):
   * the embeddings (layer -1), the blocks, ln_f (layer n_layer), the tied head (-1 again). */
  const float *wte = p + gpt->base.tensors[0].offset;
  cohort_model_layer_begin(m, -1, COHORT_LAYER_FORWARD);
  be->embedding_forward(gpt->acts.encoded, gpt->acts.tokens, wte, p + gpt->base.tensors[1].offset,
                        B, T, C);
  cohort_model_layer_end(m, -1, COHORT_LAYER_FORWARD);

  const float *res = gpt->acts.encoded;
  for (int l = 0; l < s->n_layer; l++) {
    cohort_model_layer_begin(m, l, COHORT_LAYER_FORWARD);
    block_forward(gpt, l, res, B, T);
    cohort_model_layer_end(m, l, COHORT_LAYER_FORWARD);
    res = gpt->acts.blocks[l].res3;
  }
  guint lnf = gpt->base.n_tensors - 2; /* ln_f.weight, then ln_f.bias */
  cohort_model_layer_begin(m, s->n_layer, COHORT_LAYER_FORWARD);
  be->layernorm_forward(gpt->acts.lnf, gpt->acts.lnf_mean, gpt->acts.lnf_rstd, res,
                        p + gpt->base.tensors[lnf].offset, p + gpt->base.tensors[lnf + 1].offset, N,
                        C, GPT_LN_EPS);
  cohort_model_layer_end(m, s->n_layer, COHORT_LAYER_FORWARD);
  /* tied head: logits = lnf @ wte^T */
  cohort_model_layer_begin(m, -1, COHORT_LAYER_FORWARD);
  be->gemm(0, 1, N, V, C, 1.0f, gpt->acts.lnf, C, wte, C, 0.0f, gpt->acts.logits, V);
  cohort_model_layer_end(m, -1, COHORT_LAYER_FORWARD);

  gpt->last_B = B;
  gpt->last_T = T;
  gpt->have_targets = targets != NULL;
  if (!targets)
    return 0.0f;
  be->upload(gpt->acts.targets, targets, n_tok * sizeof(int));
  be->crossentropy_forward(gpt->acts.losses, gpt->acts.lse, gpt->acts.logits, gpt->acts.targets, N,
                           V);
  gpt->loss_div = cohort_batch_loss_div(targets, n_tok, loss_norm, &gpt->counted);
  return cohort_model_loss_over(&gpt->base, gpt->acts.losses, n_tok, gpt->loss_div,
                                gpt->host_losses);
}

/* The backward of the logits families' interface: the cross-entropy's gradient scaled by
 * task_weight, another loss's added by `add` (distillation's KL term), then the network. Frozen
 * tensors get no gradient, and backward ends where nothing below learns. */
void cohort_gpt_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                CohortLogitsGradFunc add, gpointer user_data)
{
  Gpt *gpt = gpt_of(m);
  g_return_if_fail(gpt->have_targets && m->grads);
  const CohortGptShape *s = &gpt->shape;
  const CohortBackend *be = gpt->base.be;
  int B = gpt->last_B, T = gpt->last_T;
  int C = s->n_embd, V = s->vocab_size, NH = s->n_head, N = B * T, L = s->n_layer;
  float *p = gpt->base.params;
  const float *wte = p + m->tensors[0].offset;
  float *dwte = cohort_model_grad(m, 0);

  be->crossentropy_backward(gpt->acts.dlogits, gpt->acts.logits, gpt->acts.lse, gpt->acts.targets,
                            N, V, (float)(grad_scale * task_weight / gpt->loss_div));
  if (add)
    add(gpt->acts.dlogits, gpt->acts.logits, N, V, user_data);
  /* tied head: dlnf = dlogits @ wte, dwte += dlogits^T @ lnf */
  cohort_model_layer_begin(m, -1, COHORT_LAYER_BACKWARD);
  be->gemm(0, 0, N, C, V, 1.0f, gpt->acts.dlogits, V, wte, C, 0.0f, gpt->acts.dln, C);
  if (dwte)
    be->gemm(1, 0, V, C, N, 1.0f, gpt->acts.dlogits, V, gpt->acts.lnf, C, 1.0f, dwte, C);
  cohort_model_layer_end(m, -1, COHORT_LAYER_BACKWARD);

  guint lnf = m->n_tensors - 2; /* ln_f.weight, then ln_f.bias */
  const float *last = L > 0 ? gpt->acts.blocks[L - 1].res3 : gpt->acts.encoded;
  be->zero(gpt->acts.dres, (size_t)N * C * sizeof(float));
  cohort_model_layer_begin(m, L, COHORT_LAYER_BACKWARD);
  be->layernorm_backward(gpt->acts.dres, cohort_model_grad(m, lnf), cohort_model_grad(m, lnf + 1),
                         gpt->acts.dln, last, p + m->tensors[lnf].offset, gpt->acts.lnf_mean,
                         gpt->acts.lnf_rstd, N, C);
  cohort_model_layer_end(m, L, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, L);

  for (int l = L - 1; l >= 0 && cohort_model_learns_up_to(m, l); l--) {
    CohortGptBlockActs *a = &gpt->acts.blocks[l];
    const float *res = l > 0 ? gpt->acts.blocks[l - 1].res3 : gpt->acts.encoded;
    cohort_model_layer_begin(m, l, COHORT_LAYER_BACKWARD);
    /* activation_checkpointing: the block's activations again, from its kept input, with the
     * same parameters (held by this layer's hook) and the same LoRA dropout masks (drawn
     * from each example's key), so they are the forward's bits */
    if (gpt->checkpoint && gpt->acts_block != l)
      block_forward(gpt, l, res, B, T);
    /* MLP: res3 = res2 + gelu(ln2 @ Wfc + bfc) @ Wproj + bproj */
    linear_backward(gpt, gpt->acts.dfch, gpt->acts.dres, a->fch_gelu, l, GPT_FC_PROJ_W, N, 4 * C,
                    C);
    be->gelu_backward(gpt->acts.dfch, a->fch, gpt->acts.dfch, (size_t)N * 4 * C);
    linear_backward(gpt, gpt->acts.dln, gpt->acts.dfch, a->ln2, l, GPT_FC_W, N, C, 4 * C);
    be->layernorm_backward(gpt->acts.dres, gpt_bg(gpt, l, GPT_LN2_W), gpt_bg(gpt, l, GPT_LN2_B),
                           gpt->acts.dln, a->res2, gpt_bp(gpt, p, l, GPT_LN2_W), a->ln2_mean,
                           a->ln2_rstd, N, C);
    /* attention: res2 = res + attn(ln1(res)) @ Wproj + bproj */
    linear_backward(gpt, gpt->acts.datty, gpt->acts.dres, a->atty, l, GPT_ATTN_PROJ_W, N, C, C);
    be->attention_backward(gpt->acts.dqkv, gpt->acts.datty, a->qkv, a->atty, a->att_lse, B, T, C,
                           NH, 1);
    linear_backward(gpt, gpt->acts.dln, gpt->acts.dqkv, a->ln1, l, GPT_ATTN_W, N, C, 3 * C);
    be->layernorm_backward(gpt->acts.dres, gpt_bg(gpt, l, GPT_LN1_W), gpt_bg(gpt, l, GPT_LN1_B),
                           gpt->acts.dln, res, gpt_bp(gpt, p, l, GPT_LN1_W), a->ln1_mean,
                           a->ln1_rstd, N, C);
    cohort_model_layer_end(m, l, COHORT_LAYER_BACKWARD);
    cohort_model_layer_grads_ready(m, l);
  }
  if (!cohort_model_learns_up_to(m, -1))
    return;
  cohort_model_layer_begin(m, -1, COHORT_LAYER_GRADS);
  be->embedding_backward(dwte, cohort_model_grad(m, 1), gpt->acts.dres, gpt->acts.tokens, B, T, C);
  cohort_model_layer_end(m, -1, COHORT_LAYER_GRADS);
  cohort_model_layer_grads_ready(m, -1);
}

void cohort_gpt_backward(CohortGpt *m, float grad_scale)
{
  cohort_gpt_backward_logits(m, grad_scale, 1.0f, NULL, NULL);
}

const float *cohort_gpt_logits_op(const CohortModel *m, int *rows, int *classes)
{
  const Gpt *gpt = gpt_of(m);
  *rows = gpt->last_B * gpt->last_T;
  *classes = gpt->shape.vocab_size;
  return gpt->acts.logits;
}

double cohort_gpt_flops_per_token(const CohortGpt *m, int T)
{
  const CohortGptShape *s = &gpt_of(m)->shape;
  /* 6 per weight multiply-add (forward 2, backward 4) over every matrix the token passes
   * through (the blocks and the tied head; the embedding lookup is no multiply), plus
   * attention's QK^T and AV: 2 products of T/2 keys on average (causal) x C, times 6. */
  double C = s->n_embd;
  double matmul = s->n_layer * 12.0 * C * C + (double)s->vocab_size * C;
  double attn = s->n_layer * 2.0 * C * (T / 2.0);
  return 6.0 * (matmul + attn);
}

/* ---- the model interface ---- */

float cohort_gpt_forward_batch(CohortModel *m, const CohortBatch *b, CohortForwardMode mode)
{
  (void)mode; /* the GPT has no layer that behaves differently in evaluation */
  return cohort_gpt_forward_norm(m, b->inputs, b->targets, b->B, b->T, b->loss_norm);
}

void cohort_gpt_backward_op(CohortModel *m, float grad_scale)
{
  cohort_gpt_backward(m, grad_scale);
}

void cohort_gpt_eval_batch(CohortModel *m, const CohortBatch *b, double *sums)
{
  float loss = cohort_gpt_forward(m, b->inputs, b->targets, b->B, b->T);
  /* the mean over the counted targets (every one, but for chat data's) */
  double counted = (double)gpt_of(m)->counted;
  sums[0] += (double)loss * counted;
  sums[1] += counted;
}

double cohort_gpt_flops_per_example(const CohortModel *m)
{
  int T = gpt_of(m)->shape.seq_len;
  return cohort_gpt_flops_per_token(m, T) * T;
}
