/* The dit family's text layout, diffusers' PixArtTransformer2DModel (docs/t2i-design.md):
 *   x0   = pos_embed.proj(patchify(x_t)) + pos_embed
 *   emb  = timestep_embedder(1000·t)                 (linear_1, SiLU, linear_2)
 *   temb = adaln_single.linear(SiLU(emb))            [B, 6C], shared by every block
 *   ctx  = caption_projection(text)                  (linear_1, GELU-tanh, linear_2)
 *   x    = transformer_blocks.N(x, temb, ctx, klen)  (engine/models/pixart-block.h)
 *   shift, scale = scale_shift_table + emb
 *   v    = unpatchify(proj_out(LN(x) · (1 + scale) + shift))
 * forward, backward and PixArt's initialisation, over the backend table. */
#include "engine/models/dit-private.h"

#include <math.h>
#include <string.h>

#include "engine/model/rng.h"

#define linear      cohort_dit_linear
#define linear_back cohort_dit_linear_back

/* Table indices: head tensor p, block l's tensor p, final tensor p. */
static inline guint head_i(int p)
{
  return (guint)p;
}
static inline guint block_i(const Dit *d, int l, int p)
{
  (void)d;
  return DX_HEAD_COUNT + (guint)l * PB_COUNT + (guint)p;
}
static inline guint final_i(const Dit *d, int p)
{
  return DX_HEAD_COUNT + (guint)d->shape.n_layer * PB_COUNT + (guint)p;
}

/* Block l's weights in `base` (the model's vector), running the model's adapters. */
static void block_weights(Dit *d, int l, float *base, CohortPixartWeights *w)
{
  for (int p = 0; p < PB_COUNT; p++)
    w->t[p] = base ? base + d->base.tensors[block_i(d, l, p)].offset : NULL;
  w->lora = &d->base;
  w->first = block_i(d, l, 0);
}

static void block_grads(Dit *d, int l, CohortPixartWeights *g)
{
  for (int p = 0; p < PB_COUNT; p++)
    g->t[p] = cohort_model_grad(&d->base, block_i(d, l, p));
  g->lora = NULL;
}

/* PixArt's initialize_weights: Xavier-uniform linears (the patch embedding viewed as one), zero
 * biases, N(0, 0.02) for the timestep MLP, adaln_single.linear and the caption projection,
 * zeros for each cross-attention's output and proj_out (so text and blocks start quiet), and
 * the scale_shift_tables N(0, 1/C). */
void cohort_dit_text_init_tensor(Dit *d, guint64 seed, guint i, float *dst)
{
  const CohortTensorInfo *t = &d->base.tensors[i];
  guint64 s = cohort_rng_tensor_seed(seed, i);
  memset(dst, 0, t->numel * sizeof(float));
  if (g_str_has_suffix(t->name, "scale_shift_table")) {
    cohort_dit_fill_normal(dst, t->numel, 1.0 / sqrt(d->shape.hidden), s);
    return;
  }
  if (t->ndim < 2 || g_str_has_suffix(t->name, "attn2.to_out.0.weight") ||
      g_str_has_prefix(t->name, "proj_out"))
    return; /* zeros */
  if (g_str_has_prefix(t->name, "adaln_single") || g_str_has_prefix(t->name, "caption_")) {
    cohort_dit_fill_normal(dst, t->numel, 0.02, s);
    return;
  }
  int fan_out = t->shape[0];
  int fan_in = (int)(t->numel / (size_t)fan_out);
  cohort_rng_fill_uniform(dst, t->numel, sqrt(6.0 / (fan_in + fan_out)), s);
}

/* The embedders (layer -1): x0, emb, temb and ctx. */
static void text_embed(Dit *d, int B, int M)
{
  const CohortBackend *be = d->base.be;
  const CohortDitShape *s = &d->shape;
  CohortDitTextActs *a = &d->tacts;
  int C = s->hidden, T = d->T, N = B * T, K = d->k_patch, D = s->text_dim;
  linear(d, a->x0, a->tokens_in, head_i(DX_X_W), N, K, C);
  be->add_bias(a->x0, d->base.buffer_data, B, T * C); /* + pos_embed, per image */
  be->timestep_embedding(a->tfreq, a->t, B, DIT_FREQ_DIM, 10000.0f);
  linear(d, a->th, a->tfreq, head_i(DX_T1_W), B, DIT_FREQ_DIM, C);
  be->silu_forward(a->ths, a->th, (size_t)B * C);
  linear(d, a->emb, a->ths, head_i(DX_T2_W), B, C, C);
  be->silu_forward(a->semb, a->emb, (size_t)B * C);
  linear(d, a->temb, a->semb, head_i(DX_ADA_W), B, C, 6 * C);
  linear(d, a->cap1, a->text, head_i(DX_CAP1_W), B * M, D, C);
  be->gelu_forward(a->capg, a->cap1, (size_t)B * M * C);
  linear(d, a->ctx, a->capg, head_i(DX_CAP2_W), B * M, C, C);
}

void cohort_dit_text_net_forward(Dit *d, int B, int M)
{
  CohortModel *m = &d->base;
  const CohortBackend *be = m->be;
  const CohortDitShape *s = &d->shape;
  CohortDitTextActs *a = &d->tacts;
  int C = s->hidden, T = d->T, N = B * T, K = d->k_patch, H = s->image_size, L = s->n_layer;
  be->patchify(a->tokens_in, a->img, B, s->channels, H, H, s->patch);
  cohort_model_layer_begin(m, -1, COHORT_LAYER_FORWARD);
  text_embed(d, B, M);
  cohort_model_layer_end(m, -1, COHORT_LAYER_FORWARD);
  const float *x = a->x0;
  for (int l = 0; l < L; l++) {
    cohort_model_layer_begin(m, l, COHORT_LAYER_FORWARD);
    CohortPixartWeights w;
    block_weights(d, l, m->params, &w);
    cohort_pixart_block_forward(be, &d->pshape, &w, &d->pacts[l], x, a->temb, a->ctx, a->klen, B, T,
                                M);
    d->acts_block = l;
    cohort_model_layer_end(m, l, COHORT_LAYER_FORWARD);
    x = d->pacts[l].out;
  }
  cohort_model_layer_begin(m, L, COHORT_LAYER_FORWARD);
  /* shift, scale = scale_shift_table + emb (emb broadcast over the table's two rows) */
  for (int b = 0; b < B; b++) {
    be->copy(a->fmod + (size_t)b * 2 * C, a->emb + (size_t)b * C, C * sizeof(float));
    be->copy(a->fmod + (size_t)b * 2 * C + C, a->emb + (size_t)b * C, C * sizeof(float));
  }
  be->add_bias(a->fmod, m->params + m->tensors[final_i(d, DXF_TABLE)].offset, B, 2 * C);
  be->layernorm_forward(a->fh, a->fmean, a->frstd, x, NULL, NULL, N, C, DIT_LN_EPS);
  be->modulate_forward(a->fm, a->fh, a->fmod, a->fmod + C, B, T, C, 2 * C);
  linear(d, a->fout, a->fm, final_i(d, DXF_OUT_W), N, C, K);
  cohort_model_layer_end(m, L, COHORT_LAYER_FORWARD);
  be->unpatchify(a->pred, a->fout, B, s->channels, H, H, s->patch);
}

/* proj_out, norm_out and the final modulation: dres gets d(last block's output), demb the
 * table's share of d(emb). */
static void final_backward(Dit *d, int B)
{
  CohortModel *m = &d->base;
  const CohortBackend *be = m->be;
  const CohortDitShape *s = &d->shape;
  CohortDitTextActs *a = &d->tacts;
  int C = s->hidden, T = d->T, N = B * T, K = d->k_patch, H = s->image_size, L = s->n_layer;
  const float *xL = L > 0 ? d->pacts[L - 1].out : a->x0;
  be->unpatchify_backward(a->dtok, a->dimg, B, s->channels, H, H, s->patch);
  linear_back(d, a->dm, 0.0f, a->dtok, a->fm, final_i(d, DXF_OUT_W), N, C, K);
  be->zero(a->dh, (size_t)N * C * sizeof(float));
  be->zero(a->dfmod, (size_t)B * 2 * C * sizeof(float));
  be->modulate_backward(a->dh, a->dfmod, a->dfmod + C, a->dm, a->fh, a->fmod + C, B, T, C, 2 * C);
  be->zero(a->dres, (size_t)N * C * sizeof(float));
  be->layernorm_backward(a->dres, NULL, NULL, a->dh, xL, NULL, a->fmean, a->frstd, N, C);
  float *dtable = cohort_model_grad(m, final_i(d, DXF_TABLE));
  if (dtable)
    be->bias_backward(dtable, a->dfmod, B, 2 * C);
  /* d(emb) = the sum of the two rows' gradients, per example */
  be->zero(a->demb, (size_t)B * C * sizeof(float));
  for (int b = 0; b < B; b++)
    be->bias_backward(a->demb + (size_t)b * C, a->dfmod + (size_t)b * 2 * C, 2, C);
}

/* The embedders: d(temb) and the final layer's d(emb) into the timestep MLP, d(ctx) into the
 * caption projection (the encoder is frozen: no gradient goes further), d(x0) into the patch
 * embedding. */
static void embed_backward(Dit *d, int B, int M)
{
  const CohortBackend *be = d->base.be;
  const CohortDitShape *s = &d->shape;
  CohortDitTextActs *a = &d->tacts;
  int C = s->hidden, N = B * d->T, K = d->k_patch, D = s->text_dim;
  linear_back(d, a->dsemb, 0.0f, a->dtemb, a->semb, head_i(DX_ADA_W), B, C, 6 * C);
  be->silu_backward(a->dsemb, a->emb, a->dsemb, (size_t)B * C);
  be->axpby(a->demb, 1.0f, a->demb, 1.0f, a->dsemb, (size_t)B * C);
  linear_back(d, a->dtmp, 0.0f, a->demb, a->ths, head_i(DX_T2_W), B, C, C);
  be->silu_backward(a->dtmp, a->th, a->dtmp, (size_t)B * C);
  linear_back(d, NULL, 0.0f, a->dtmp, a->tfreq, head_i(DX_T1_W), B, DIT_FREQ_DIM, C);
  linear_back(d, a->dcap, 0.0f, a->dctx, a->capg, head_i(DX_CAP2_W), B * M, C, C);
  be->gelu_backward(a->dcap, a->cap1, a->dcap, (size_t)B * M * C);
  linear_back(d, NULL, 0.0f, a->dcap, a->text, head_i(DX_CAP1_W), B * M, D, C);
  linear_back(d, NULL, 0.0f, a->dres, a->tokens_in, head_i(DX_X_W), N, K, C);
}

void cohort_dit_text_net_backward(Dit *d, int B, int M)
{
  CohortModel *m = &d->base;
  const CohortBackend *be = m->be;
  CohortDitTextActs *a = &d->tacts;
  int C = d->shape.hidden, L = d->shape.n_layer;
  cohort_model_layer_begin(m, L, COHORT_LAYER_BACKWARD);
  final_backward(d, B);
  cohort_model_layer_end(m, L, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, L);
  be->zero(a->dtemb, (size_t)B * 6 * C * sizeof(float));
  be->zero(a->dctx, (size_t)B * M * C * sizeof(float));
  for (int l = L - 1; l >= 0 && cohort_model_learns_up_to(m, l); l--) {
    const float *x = l > 0 ? d->pacts[l - 1].out : a->x0;
    cohort_model_layer_begin(m, l, COHORT_LAYER_BACKWARD);
    CohortPixartWeights w, g;
    block_weights(d, l, m->params, &w);
    block_grads(d, l, &g);
    /* activation_checkpointing: the block's activations again from its kept input (temb, ctx
     * and each example's noise and timestep are kept, not drawn again; LoRA dropout draws the
     * same masks) */
    if (d->checkpoint && d->acts_block != l) {
      cohort_pixart_block_forward(be, &d->pshape, &w, &d->pacts[l], x, a->temb, a->ctx, a->klen, B,
                                  d->T, M);
      d->acts_block = l;
    }
    cohort_pixart_block_backward(be, &d->pshape, &w, &g, &d->pacts[l], x, a->ctx, a->klen, B, d->T,
                                 M, a->dres, a->dtemb, a->dctx);
    cohort_model_layer_end(m, l, COHORT_LAYER_BACKWARD);
    cohort_model_layer_grads_ready(m, l);
  }
  if (!cohort_model_learns_up_to(m, -1))
    return;
  cohort_model_layer_begin(m, -1, COHORT_LAYER_BACKWARD);
  embed_backward(d, B, M);
  cohort_model_layer_end(m, -1, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, -1);
}

void cohort_dit_text_run(Dit *d, const float *x_t, const float *t, const float *text,
                         const int *klen, int B, int M)
{
  const CohortBackend *be = d->base.be;
  size_t Dimg = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  g_autofree float *t1000 = g_new(float, B);
  for (int i = 0; i < B; i++)
    t1000[i] = 1000.0f * t[i];
  be->upload(d->tacts.img, x_t, B * Dimg * sizeof(float));
  be->upload(d->tacts.t, t1000, (size_t)B * sizeof(float));
  be->upload(d->tacts.text, text, (size_t)B * M * d->shape.text_dim * sizeof(float));
  be->upload(d->tacts.klen, klen, (size_t)B * sizeof(int));
  d->last_M = M;
  cohort_dit_text_net_forward(d, B, M);
}
