/* The DiT network, forward and backward, written per layer over the backend table. The batch
 * (x_t, the embedding's timestep 1000·t, labels) is already in backend memory. */
#include "engine/models/dit-private.h"

#include "engine/model/lora.h"

#define linear      cohort_dit_linear
#define linear_back cohort_dit_linear_back

void cohort_dit_linear(Dit *d, float *y, const float *x, guint w, int N, int in, int out)
{
  CohortModel *m = &d->base;
  const CohortBackend *be = m->be;
  be->gemm(0, 1, N, out, in, 1.0f, x, in, m->params + m->tensors[w].offset, in, 0.0f, y, out);
  be->add_bias(y, m->params + m->tensors[w + 1].offset, N, out);
  cohort_lora_forward(m, w, y, x, N);
}

void cohort_dit_linear_back(Dit *d, float *dx, float beta, const float *dy, const float *x, guint w,
                            int N, int in, int out)
{
  CohortModel *m = &d->base;
  const CohortBackend *be = m->be;
  float *dw = cohort_model_grad(m, w), *db = cohort_model_grad(m, w + 1);
  if (dx)
    be->gemm(0, 0, N, in, out, 1.0f, dy, out, m->params + m->tensors[w].offset, in, beta, dx, in);
  if (dw)
    be->gemm(1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (db)
    be->bias_backward(db, dy, N, out);
  cohort_lora_backward(m, w, dx, dy, x, N);
}

/* c = t_embedder(t) + y_embedder(labels); sc = SiLU(c), which every adaLN reads. */
static void conditioning(Dit *d, int B)
{
  const CohortBackend *be = d->base.be;
  float *p = d->base.params;
  int C = d->shape.hidden;
  be->timestep_embedding(d->acts.tfreq, d->acts.t, B, DIT_FREQ_DIM, 10000.0f);
  linear(d, d->acts.th, d->acts.tfreq, DT_T0_W, B, DIT_FREQ_DIM, C);
  be->silu_forward(d->acts.ths, d->acts.th, (size_t)B * C);
  linear(d, d->acts.temb, d->acts.ths, DT_T2_W, B, C, C);
  be->rows_gather(d->acts.c, dit_hp(d, p, DT_Y_TABLE), d->acts.labels, B, C);
  be->axpby(d->acts.c, 1.0f, d->acts.c, 1.0f, d->acts.temb, (size_t)B * C);
  be->silu_forward(d->acts.sc, d->acts.c, (size_t)B * C);
}

static void block_forward(Dit *d, int l, const float *x, int B)
{
  const CohortBackend *be = d->base.be;
  CohortDitBlockActs *a = &d->acts.blocks[l];
  int C = d->shape.hidden, T = d->T, N = B * T, NH = d->shape.n_head, ld = 6 * C;
  linear(d, a->mod, d->acts.sc, dit_bi(d, l, DB_ADA_W), B, C, 6 * C);
  /* chunk(6): shift, scale, gate of attention, then of the MLP */
  const float *shift1 = a->mod, *scale1 = a->mod + C, *gate1 = a->mod + 2 * C;
  const float *shift2 = a->mod + 3 * C, *scale2 = a->mod + 4 * C, *gate2 = a->mod + 5 * C;

  be->layernorm_forward(a->h1, a->mean1, a->rstd1, x, NULL, NULL, N, C, DIT_LN_EPS);
  be->modulate_forward(a->m1, a->h1, shift1, scale1, B, T, C, ld);
  linear(d, a->qkv, a->m1, dit_bi(d, l, DB_QKV_W), N, C, 3 * C);
  be->attention_forward(a->att, a->lse, a->qkv, B, T, C, NH, 0);
  linear(d, a->a, a->att, dit_bi(d, l, DB_PROJ_W), N, C, C);
  be->gated_residual_forward(a->x1, x, gate1, a->a, B, T, C, ld);

  be->layernorm_forward(a->h2, a->mean2, a->rstd2, a->x1, NULL, NULL, N, C, DIT_LN_EPS);
  be->modulate_forward(a->m2, a->h2, shift2, scale2, B, T, C, ld);
  linear(d, a->f, a->m2, dit_bi(d, l, DB_FC1_W), N, C, 4 * C);
  be->gelu_forward(a->g, a->f, (size_t)N * 4 * C);
  linear(d, a->o, a->g, dit_bi(d, l, DB_FC2_W), N, 4 * C, C);
  be->gated_residual_forward(a->x_out, a->x1, gate2, a->o, B, T, C, ld);
  d->acts_block = l;
}

void cohort_dit_net_forward(Dit *d, int B)
{
  const CohortBackend *be = d->base.be;
  const CohortDitShape *s = &d->shape;
  int C = s->hidden, T = d->T, N = B * T, K = d->k_patch, H = s->image_size;
  CohortModel *m = &d->base;
  be->patchify(d->acts.tokens_in, d->acts.img, B, s->channels, H, H, s->patch);
  /* Each layer's parameters between layer_begin and layer_end (ZeRO stage 3 gathers them):
   * the embedders (layer -1), the blocks, the final layer (layer n_layer). */
  cohort_model_layer_begin(m, -1, COHORT_LAYER_FORWARD);
  linear(d, d->acts.x0, d->acts.tokens_in, DT_X_W, N, K, C);
  be->add_bias(d->acts.x0, d->base.buffer_data, B, T * C); /* + pos_embed, per image */
  conditioning(d, B);
  cohort_model_layer_end(m, -1, COHORT_LAYER_FORWARD);
  const float *x = d->acts.x0;
  for (int l = 0; l < s->n_layer; l++) {
    cohort_model_layer_begin(m, l, COHORT_LAYER_FORWARD);
    block_forward(d, l, x, B);
    cohort_model_layer_end(m, l, COHORT_LAYER_FORWARD);
    x = d->acts.blocks[l].x_out;
  }
  cohort_model_layer_begin(m, s->n_layer, COHORT_LAYER_FORWARD);
  /* final layer: chunk(2) of its modulation is shift, then scale */
  linear(d, d->acts.fmod, d->acts.sc, dit_fi(d, DF_ADA_W), B, C, 2 * C);
  be->layernorm_forward(d->acts.fh, d->acts.fmean, d->acts.frstd, x, NULL, NULL, N, C, DIT_LN_EPS);
  be->modulate_forward(d->acts.fm, d->acts.fh, d->acts.fmod, d->acts.fmod + C, B, T, C, 2 * C);
  linear(d, d->acts.fout, d->acts.fm, dit_fi(d, DF_LIN_W), N, C, K);
  cohort_model_layer_end(m, s->n_layer, COHORT_LAYER_FORWARD);
  be->unpatchify(d->acts.pred, d->acts.fout, B, s->channels, H, H, s->patch);
}

/* d->acts.dres holds d(block output); on return it holds d(block input), and the block's weight
 * gradients and d(sc) (into d->acts.dsc) are accumulated. */
static void block_backward(Dit *d, int l, const float *x, int B)
{
  const CohortBackend *be = d->base.be;
  CohortDitBlockActs *a = &d->acts.blocks[l];
  int C = d->shape.hidden, T = d->T, N = B * T, NH = d->shape.n_head, ld = 6 * C;
  size_t nc = (size_t)N * C * sizeof(float);
  const float *scale1 = a->mod + C, *gate1 = a->mod + 2 * C;
  const float *scale2 = a->mod + 4 * C, *gate2 = a->mod + 5 * C;
  float *dm = d->acts.dmod;
  be->zero(dm, (size_t)B * 6 * C * sizeof(float));

  /* MLP branch: x_out = x1 + gate2 · fc2(gelu(fc1(modulate(LN(x1))))) */
  be->gated_residual_backward(NULL, d->acts.da, dm + 5 * C, d->acts.dres, gate2, a->o, B, T, C, ld);
  linear_back(d, d->acts.dbig, 0.0f, d->acts.da, a->g, dit_bi(d, l, DB_FC2_W), N, 4 * C, C);
  be->gelu_backward(d->acts.dbig, a->f, d->acts.dbig, (size_t)N * 4 * C);
  linear_back(d, d->acts.dm, 0.0f, d->acts.dbig, a->m2, dit_bi(d, l, DB_FC1_W), N, C, 4 * C);
  be->zero(d->acts.dh, nc);
  be->modulate_backward(d->acts.dh, dm + 3 * C, dm + 4 * C, d->acts.dm, a->h2, scale2, B, T, C, ld);
  be->layernorm_backward(d->acts.dres, NULL, NULL, d->acts.dh, a->x1, NULL, a->mean2, a->rstd2, N,
                         C);

  /* attention branch: x1 = x + gate1 · proj(attn(qkv(modulate(LN(x))))) */
  be->gated_residual_backward(NULL, d->acts.da, dm + 2 * C, d->acts.dres, gate1, a->a, B, T, C, ld);
  linear_back(d, d->acts.datt, 0.0f, d->acts.da, a->att, dit_bi(d, l, DB_PROJ_W), N, C, C);
  be->attention_backward(d->acts.dqkv, d->acts.datt, a->qkv, a->att, a->lse, B, T, C, NH, 0);
  linear_back(d, d->acts.dm, 0.0f, d->acts.dqkv, a->m1, dit_bi(d, l, DB_QKV_W), N, C, 3 * C);
  be->zero(d->acts.dh, nc);
  be->modulate_backward(d->acts.dh, dm, dm + C, d->acts.dm, a->h1, scale1, B, T, C, ld);
  be->layernorm_backward(d->acts.dres, NULL, NULL, d->acts.dh, x, NULL, a->mean1, a->rstd1, N, C);

  /* the block's modulation: mod = sc @ W^T + b; d(sc) accumulates over blocks */
  linear_back(d, d->acts.dsc, 1.0f, dm, d->acts.sc, dit_bi(d, l, DB_ADA_W), B, C, 6 * C);
}

static void final_backward(Dit *d, int B)
{
  const CohortBackend *be = d->base.be;
  const CohortDitShape *s = &d->shape;
  int C = s->hidden, T = d->T, N = B * T, K = d->k_patch, H = s->image_size;
  be->unpatchify_backward(d->acts.dtok, d->acts.dimg, B, s->channels, H, H, s->patch);
  linear_back(d, d->acts.dm, 0.0f, d->acts.dtok, d->acts.fm, dit_fi(d, DF_LIN_W), N, C, K);
  be->zero(d->acts.dh, (size_t)N * C * sizeof(float));
  be->zero(d->acts.dmod, (size_t)B * 2 * C * sizeof(float));
  be->modulate_backward(d->acts.dh, d->acts.dmod, d->acts.dmod + C, d->acts.dm, d->acts.fh,
                        d->acts.fmod + C, B, T, C, 2 * C);
  be->zero(d->acts.dres, (size_t)N * C * sizeof(float));
  be->layernorm_backward(d->acts.dres, NULL, NULL, d->acts.dh, d->xL, NULL, d->acts.fmean,
                         d->acts.frstd, N, C);
  /* d(sc) starts here: the final layer's modulation is its first reader in backward */
  linear_back(d, d->acts.dsc, 0.0f, d->acts.dmod, d->acts.sc, dit_fi(d, DF_ADA_W), B, C, 2 * C);
}

/* The embedders: d(sc) → d(c) → the timestep MLP and the label table; d(x0) → the patch
 * embedding (the input image needs no gradient; pos_embed is fixed). */
static void embedders_backward(Dit *d, int B)
{
  const CohortBackend *be = d->base.be;
  int C = d->shape.hidden, N = B * d->T, K = d->k_patch;
  be->silu_backward(d->acts.dc, d->acts.c, d->acts.dsc, (size_t)B * C);
  float *dtable = cohort_model_grad(&d->base, DT_Y_TABLE);
  if (dtable)
    be->rows_scatter_add(dtable, d->acts.dc, d->acts.labels, B, C);
  linear_back(d, d->acts.dtmp, 0.0f, d->acts.dc, d->acts.ths, DT_T2_W, B, C, C);
  be->silu_backward(d->acts.dtmp, d->acts.th, d->acts.dtmp, (size_t)B * C);
  linear_back(d, NULL, 0.0f, d->acts.dtmp, d->acts.tfreq, DT_T0_W, B, DIT_FREQ_DIM, C);
  linear_back(d, NULL, 0.0f, d->acts.dres, d->acts.tokens_in, DT_X_W, N, K, C);
}

void cohort_dit_net_backward(Dit *d, int B)
{
  CohortModel *m = &d->base;
  int L = d->shape.n_layer;
  cohort_model_layer_begin(m, L, COHORT_LAYER_BACKWARD);
  final_backward(d, B);
  cohort_model_layer_end(m, L, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, L);
  /* finetune: backward ends below the lowest layer that learns */
  for (int l = L - 1; l >= 0 && cohort_model_learns_up_to(m, l); l--) {
    const float *x = l > 0 ? d->acts.blocks[l - 1].x_out : d->acts.x0;
    cohort_model_layer_begin(m, l, COHORT_LAYER_BACKWARD);
    /* activation_checkpointing: the block's activations again from its kept input (the
     * conditioning sc and each example's noise and timestep are kept, not drawn again) */
    if (d->checkpoint && d->acts_block != l)
      block_forward(d, l, x, B);
    block_backward(d, l, x, B);
    cohort_model_layer_end(m, l, COHORT_LAYER_BACKWARD);
    cohort_model_layer_grads_ready(m, l);
  }
  if (!cohort_model_learns_up_to(m, -1))
    return;
  cohort_model_layer_begin(m, -1, COHORT_LAYER_BACKWARD);
  embedders_backward(d, B);
  cohort_model_layer_end(m, -1, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, -1);
}
