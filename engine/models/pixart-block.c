/* The PixArt-α block, forward and backward over the backend table; see pixart-block.h. */
#include "engine/models/pixart-block.h"

#include <glib.h>

#include "engine/model/lora.h"

#define PIXART_LN_EPS 1e-6f /* PixArt's norm_eps */

/* y [rows, out] = x [rows, in] @ W^T + b, with tensor p (weight) and p + 1 (bias). */
static void linear(const CohortBackend *be, const CohortPixartShape *s,
                   const CohortPixartWeights *w, int p, float *y, const float *x, int rows)
{
  int dims[2];
  cohort_pixart_block_dims(s, p, dims);
  int out = dims[0], in = dims[1];
  be->gemm(0, 1, rows, out, in, 1.0f, x, in, w->t[p], in, 0.0f, y, out);
  be->add_bias(y, w->t[p + 1], rows, out);
  if (w->lora)
    cohort_lora_forward(w->lora, w->first + (guint)p, y, x, rows);
}

/* dx = dy @ W (beta 0 overwrites, 1 adds; dx NULL skips it), dW += dy^T @ x and db += the
 * column sums of dy, where the gradients are given. */
static void linear_back(const CohortBackend *be, const CohortPixartShape *s,
                        const CohortPixartWeights *w, const CohortPixartWeights *g, int p,
                        float *dx, float beta, const float *dy, const float *x, int rows)
{
  int dims[2];
  cohort_pixart_block_dims(s, p, dims);
  int out = dims[0], in = dims[1];
  if (dx)
    be->gemm(0, 0, rows, in, out, 1.0f, dy, out, w->t[p], in, beta, dx, in);
  if (g->t[p])
    be->gemm(1, 0, out, in, rows, 1.0f, dy, out, x, in, 1.0f, g->t[p], in);
  if (g->t[p + 1])
    be->bias_backward(g->t[p + 1], dy, rows, out);
  /* after the base's dx (which beta 0 overwrites): the adapter adds its share */
  if (w->lora)
    cohort_lora_backward(w->lora, w->first + (guint)p, dx, dy, x, rows);
}

void cohort_pixart_block_forward(const CohortBackend *be, const CohortPixartShape *s,
                                 const CohortPixartWeights *w, CohortPixartActs *a, const float *x,
                                 const float *temb, const float *ctx, const int *klen, int B, int N,
                                 int M)
{
  int C = s->hidden, NH = s->n_head, hd = C / NH, BN = B * N, ld = 6 * C;
  /* adaLN-single: the shared timestep modulation plus this block's table, chunk(6) */
  be->copy(a->mod, temb, sizeof(float) * B * 6 * C);
  be->add_bias(a->mod, w->t[PB_TABLE], B, 6 * C);
  const float *shift1 = a->mod, *scale1 = a->mod + C, *gate1 = a->mod + 2 * C;
  const float *shift2 = a->mod + 3 * C, *scale2 = a->mod + 4 * C, *gate2 = a->mod + 5 * C;

  be->layernorm_forward(a->h1, a->mean1, a->rstd1, x, NULL, NULL, BN, C, PIXART_LN_EPS);
  be->modulate_forward(a->m1, a->h1, shift1, scale1, B, N, C, ld);
  linear(be, s, w, PB_Q1_W, a->q1, a->m1, BN);
  linear(be, s, w, PB_K1_W, a->k1, a->m1, BN);
  linear(be, s, w, PB_V1_W, a->v1, a->m1, BN);
  be->attention_gqa_forward(a->att1, a->lse1, a->q1, a->k1, a->v1, B, N, NH, NH, hd, 0);
  linear(be, s, w, PB_O1_W, a->a1, a->att1, BN);
  be->gated_residual_forward(a->x1, x, gate1, a->a1, B, N, C, ld);

  linear(be, s, w, PB_Q2_W, a->q2, a->x1, BN);
  linear(be, s, w, PB_K2_W, a->k2, ctx, B * M);
  linear(be, s, w, PB_V2_W, a->v2, ctx, B * M);
  be->cross_attention_forward(a->att2, a->lse2, a->q2, a->k2, a->v2, klen, B, N, M, NH, hd);
  linear(be, s, w, PB_O2_W, a->a2, a->att2, BN);
  be->residual_forward(a->x2, a->x1, a->a2, (size_t)BN * C);

  be->layernorm_forward(a->h2, a->mean2, a->rstd2, a->x2, NULL, NULL, BN, C, PIXART_LN_EPS);
  be->modulate_forward(a->m2, a->h2, shift2, scale2, B, N, C, ld);
  linear(be, s, w, PB_FF1_W, a->f, a->m2, BN);
  be->gelu_forward(a->g, a->f, (size_t)BN * s->ff_inner);
  linear(be, s, w, PB_FF2_W, a->o, a->g, BN);
  be->gated_residual_forward(a->out, a->x2, gate2, a->o, B, N, C, ld);
}

void cohort_pixart_block_backward(const CohortBackend *be, const CohortPixartShape *s,
                                  const CohortPixartWeights *w, const CohortPixartWeights *grads,
                                  CohortPixartActs *a, const float *x, const float *ctx,
                                  const int *klen, int B, int N, int M, float *dres, float *dtemb,
                                  float *dctx)
{
  int C = s->hidden, NH = s->n_head, hd = C / NH, BN = B * N, ld = 6 * C;
  size_t nc = sizeof(float) * BN * C;
  const float *scale1 = a->mod + C, *gate1 = a->mod + 2 * C;
  const float *scale2 = a->mod + 4 * C, *gate2 = a->mod + 5 * C;
  float *dm = a->dmod;
  be->zero(dm, sizeof(float) * B * 6 * C);

  /* MLP: out = x2 + gate2 · ff(modulate(LN(x2))); dres carries on as d(x2) */
  be->gated_residual_backward(NULL, a->da, dm + 5 * C, dres, gate2, a->o, B, N, C, ld);
  linear_back(be, s, w, grads, PB_FF2_W, a->dbig, 0.0f, a->da, a->g, BN);
  be->gelu_backward(a->dbig, a->f, a->dbig, (size_t)BN * s->ff_inner);
  linear_back(be, s, w, grads, PB_FF1_W, a->dm, 0.0f, a->dbig, a->m2, BN);
  be->zero(a->dh, nc);
  be->modulate_backward(a->dh, dm + 3 * C, dm + 4 * C, a->dm, a->h2, scale2, B, N, C, ld);
  be->layernorm_backward(dres, NULL, NULL, a->dh, a->x2, NULL, a->mean2, a->rstd2, BN, C);

  /* cross-attention: x2 = x1 + to_out(attn(to_q(x1), to_k(ctx), to_v(ctx))); d(a2) = d(x2) */
  linear_back(be, s, w, grads, PB_O2_W, a->datt, 0.0f, dres, a->att2, BN);
  be->cross_attention_backward(a->dq, a->dk, a->dv, a->datt, a->q2, a->k2, a->v2, a->att2, a->lse2,
                               klen, B, N, M, NH, hd);
  linear_back(be, s, w, grads, PB_Q2_W, dres, 1.0f, a->dq, a->x1, BN);
  linear_back(be, s, w, grads, PB_K2_W, dctx, 1.0f, a->dk, ctx, B * M);
  linear_back(be, s, w, grads, PB_V2_W, dctx, 1.0f, a->dv, ctx, B * M);

  /* self-attention: x1 = x + gate1 · to_out(attn(q, k, v of modulate(LN(x)))) */
  be->gated_residual_backward(NULL, a->da, dm + 2 * C, dres, gate1, a->a1, B, N, C, ld);
  linear_back(be, s, w, grads, PB_O1_W, a->datt, 0.0f, a->da, a->att1, BN);
  be->attention_gqa_backward(a->dq, a->dk, a->dv, a->datt, a->q1, a->k1, a->v1, a->att1, a->lse1, B,
                             N, NH, NH, hd, 0);
  linear_back(be, s, w, grads, PB_Q1_W, a->dm, 0.0f, a->dq, a->m1, BN);
  linear_back(be, s, w, grads, PB_K1_W, a->dm, 1.0f, a->dk, a->m1, BN);
  linear_back(be, s, w, grads, PB_V1_W, a->dm, 1.0f, a->dv, a->m1, BN);
  be->zero(a->dh, nc);
  be->modulate_backward(a->dh, dm, dm + C, a->dm, a->h1, scale1, B, N, C, ld);
  be->layernorm_backward(dres, NULL, NULL, a->dh, x, NULL, a->mean1, a->rstd1, BN, C);

  /* the modulation: mod = temb + table (broadcast over the batch) */
  if (grads->t[PB_TABLE])
    be->bias_backward(grads->t[PB_TABLE], dm, B, 6 * C);
  if (dtemb)
    be->axpby(dtemb, 1.0f, dtemb, 1.0f, dm, (size_t)B * 6 * C);
}
