/* Running the VAE's ops: forward through a graph, backward through it in reverse, and encode and
 * decode on host images and latents. Everything is NCHW; attention keeps queries, keys and
 * values as [C, T] per example (T = H·W positions), so its products are plain GEMMs:
 * scores S = Qᵀ K [T, T], out = V Pᵀ [C, T]. */
#include "engine/models/vae-private.h"

#include <math.h>
#include <string.h>

static float *param(const CohortVae *v, int i)
{
  return v->params + vae_param(v, i)->offset;
}

static float *grad(const CohortVae *v, int i)
{
  return v->grads + vae_param(v, i)->offset;
}

static void conv_forward(CohortVae *v, VaeGraph *g, const VaeOp *op, int B)
{
  const CohortBackend *be = v->be;
  const VaeTensor *x = vae_tensor(g, op->in), *y = vae_tensor(g, op->out);
  int HWo = y->H * y->W;
  if (op->K == 1 && op->stride == 1 && op->pad == 0) {
    /* a 1x1 convolution (or a Linear per position) is one GEMM per example */
    for (int b = 0; b < B; b++)
      be->gemm(0, 0, y->C, HWo, x->C, 1.0f, param(v, op->w), x->C, x->data + (size_t)b * x->C * HWo,
               HWo, 0.0f, y->data + (size_t)b * y->C * HWo, HWo);
  } else {
    be->conv2d_forward(y->data, x->data, param(v, op->w), B, x->C, x->H, x->W, y->C, op->K,
                       op->stride, op->pad);
  }
  be->channel_bias_forward(y->data, param(v, op->b), B, y->C, HWo);
}

/* Scaled dot-product attention of one head over all C channels. Forward only: blocks of query
 * rows at a time, so the scores never need [T, T] memory. Training: all of an example's rows,
 * the probabilities kept in op->probs for backward. */
static void sdpa_forward(CohortVae *v, VaeGraph *g, const VaeOp *op, int B)
{
  const CohortBackend *be = v->be;
  const VaeTensor *q = vae_tensor(g, op->in), *k = vae_tensor(g, op->in2);
  const VaeTensor *val = vae_tensor(g, op->in3), *o = vae_tensor(g, op->out);
  int C = q->C, T = q->H * q->W;
  float scale = 1.0f / sqrtf((float)C);
  int rows = op->probs >= 0 ? T : (int)MIN((size_t)T, v->scratch_floats / (size_t)T);
  for (int b = 0; b < B; b++) {
    size_t off = (size_t)b * C * T;
    float *S = op->probs >= 0 ? vae_tensor(g, op->probs)->data + (size_t)b * T * T : v->scratch;
    for (int r0 = 0; r0 < T; r0 += rows) {
      int n = MIN(rows, T - r0);
      /* S [n, T] = Q[:, r0:r0+n]^T K */
      be->gemm(1, 0, n, T, C, 1.0f, q->data + off + r0, T, k->data + off, T, 0.0f, S, T);
      be->softmax_forward(S, S, n, T, scale);
      /* out[:, r0:r0+n] = V S^T */
      be->gemm(0, 1, C, n, T, 1.0f, val->data + off, T, S, T, 0.0f, o->data + off + r0, T);
    }
  }
}

void cohort_vae_graph_forward(CohortVae *v, VaeGraph *g, int B)
{
  const CohortBackend *be = v->be;
  int G = v->cfg.norm_num_groups;
  for (guint i = 0; i < g->ops->len; i++) {
    const VaeOp *op = vae_op(g, (int)i);
    const VaeTensor *x = vae_tensor(g, op->in), *y = vae_tensor(g, op->out);
    size_t n = vae_numel(y, B);
    switch (op->kind) {
    case VOP_CONV:
      conv_forward(v, g, op, B);
      break;
    case VOP_PAD:
      be->pad2d_forward(y->data, x->data, B, x->C, x->H, x->W, 0, 1, 0, 1);
      break;
    case VOP_GN: {
      float *mean = g->stats + op->stat * B;
      be->group_norm_forward(y->data, mean, mean + (size_t)B * G, x->data, param(v, op->w),
                             param(v, op->b), B, x->C, x->H * x->W, G, VAE_GN_EPS);
      break;
    }
    case VOP_SILU:
      be->silu_forward(y->data, x->data, n);
      break;
    case VOP_ADD:
      be->residual_forward(y->data, x->data, vae_tensor(g, op->in2)->data, n);
      break;
    case VOP_UP:
      be->upsample_nearest_forward(y->data, x->data, B, x->C, x->H, x->W, 2);
      break;
    case VOP_SDPA:
      sdpa_forward(v, g, op, B);
      break;
    }
  }
}

/* ---- backward (training) ---- */

static void conv_backward(CohortVae *v, VaeGraph *g, const VaeOp *op, int B, gboolean need_dx)
{
  const CohortBackend *be = v->be;
  const VaeTensor *x = vae_tensor(g, op->in), *y = vae_tensor(g, op->out);
  int HWo = y->H * y->W;
  be->channel_bias_backward(grad(v, op->b), y->grad, B, y->C, HWo);
  if (op->K == 1 && op->stride == 1 && op->pad == 0) {
    for (int b = 0; b < B; b++) {
      const float *dy = y->grad + (size_t)b * y->C * HWo;
      be->gemm(0, 1, y->C, x->C, HWo, 1.0f, dy, HWo, x->data + (size_t)b * x->C * HWo, HWo, 1.0f,
               grad(v, op->w), x->C);
      if (need_dx)
        be->gemm(1, 0, x->C, HWo, y->C, 1.0f, param(v, op->w), x->C, dy, HWo, 1.0f,
                 x->grad + (size_t)b * x->C * HWo, HWo);
    }
    return;
  }
  be->conv2d_backward(need_dx ? x->grad : NULL, grad(v, op->w), y->grad, x->data, param(v, op->w),
                      B, x->C, x->H, x->W, y->C, op->K, op->stride, op->pad);
}

static void sdpa_backward(CohortVae *v, VaeGraph *g, const VaeOp *op, int B)
{
  const CohortBackend *be = v->be;
  const VaeTensor *q = vae_tensor(g, op->in), *k = vae_tensor(g, op->in2);
  const VaeTensor *val = vae_tensor(g, op->in3), *o = vae_tensor(g, op->out);
  int C = q->C, T = q->H * q->W;
  float scale = 1.0f / sqrtf((float)C);
  for (int b = 0; b < B; b++) {
    size_t off = (size_t)b * C * T;
    const float *P = vae_tensor(g, op->probs)->data + (size_t)b * T * T;
    const float *dO = o->grad + off;
    float *dS = v->scratch;
    /* dV += dO P; dP = dO^T V; dS = softmax'(dP); dQ += K dS^T; dK += Q dS */
    be->gemm(0, 0, C, T, T, 1.0f, dO, T, P, T, 1.0f, val->grad + off, T);
    be->gemm(1, 0, T, T, C, 1.0f, dO, T, val->data + off, T, 0.0f, dS, T);
    be->softmax_backward(dS, P, dS, T, T, scale);
    be->gemm(0, 1, C, T, T, 1.0f, k->data + off, T, dS, T, 1.0f, q->grad + off, T);
    be->gemm(0, 0, C, T, T, 1.0f, q->data + off, T, dS, T, 1.0f, k->grad + off, T);
  }
}

void cohort_vae_graph_backward(CohortVae *v, VaeGraph *g, int B, gboolean input_grad)
{
  const CohortBackend *be = v->be;
  int G = v->cfg.norm_num_groups;
  for (guint i = 0; i < g->tensors->len; i++) {
    const VaeTensor *t = vae_tensor(g, (int)i);
    if ((int)i != g->output)
      be->zero(t->grad, vae_numel(t, B) * sizeof(float));
  }
  for (int i = (int)g->ops->len - 1; i >= 0; i--) {
    const VaeOp *op = vae_op(g, i);
    const VaeTensor *x = vae_tensor(g, op->in), *y = vae_tensor(g, op->out);
    size_t n = vae_numel(y, B);
    gboolean need_dx = input_grad || op->in != g->input;
    switch (op->kind) {
    case VOP_CONV:
      conv_backward(v, g, op, B, need_dx);
      break;
    case VOP_PAD:
      be->pad2d_backward(x->grad, y->grad, B, x->C, x->H, x->W, 0, 1, 0, 1);
      break;
    case VOP_GN: {
      const float *mean = g->stats + op->stat * B;
      be->group_norm_backward(x->grad, grad(v, op->w), grad(v, op->b), y->grad, x->data,
                              param(v, op->w), mean, mean + (size_t)B * G, B, x->C, x->H * x->W, G);
      break;
    }
    case VOP_SILU:
      /* silu_backward overwrites: through scratch, then added */
      be->silu_backward(v->scratch, x->data, y->grad, n);
      be->axpby(x->grad, 1.0f, x->grad, 1.0f, v->scratch, n);
      break;
    case VOP_ADD:
      be->axpby(x->grad, 1.0f, x->grad, 1.0f, y->grad, n);
      be->axpby(vae_tensor(g, op->in2)->grad, 1.0f, vae_tensor(g, op->in2)->grad, 1.0f, y->grad, n);
      break;
    case VOP_UP:
      be->upsample_nearest_backward(x->grad, y->grad, B, x->C, x->H, x->W, 2);
      break;
    case VOP_SDPA:
      sdpa_backward(v, g, op, B);
      break;
    }
  }
}

/* ---- encode and decode ---- */

static void check_batch(const CohortVae *v, const VaeGraph *g, int B)
{
  g_return_if_fail(g->allocated);
  g_return_if_fail(B >= 1 && B <= v->max_batch);
}

void cohort_vae_encode_moments(CohortVae *v, const float *images, int B, float *moments)
{
  VaeGraph *g = &v->enc;
  check_batch(v, g, B);
  VaeTensor *in = vae_tensor(g, g->input), *out = vae_tensor(g, g->output);
  v->be->upload(in->data, images, vae_numel(in, B) * sizeof(float));
  cohort_vae_graph_forward(v, g, B);
  v->be->download(moments, out->data, vae_numel(out, B) * sizeof(float));
}

void cohort_vae_encode(CohortVae *v, const float *images, int B, float *latents)
{
  int L = v->cfg.latent_channels;
  size_t hw = (size_t)v->latent_size * v->latent_size, per = (size_t)L * hw;
  g_autofree float *moments = g_new(float, 2 * per * B);
  cohort_vae_encode_moments(v, images, B, moments);
  double s = v->cfg.scaling_factor, sh = v->cfg.shift_factor;
  for (int b = 0; b < B; b++)
    for (size_t i = 0; i < per; i++) /* the mean is the first L channels */
      latents[b * per + i] = (float)(((double)moments[2 * b * per + i] - sh) * s);
}

void cohort_vae_decode_raw(CohortVae *v, const float *z, int B, float *images)
{
  VaeGraph *g = &v->dec;
  check_batch(v, g, B);
  VaeTensor *in = vae_tensor(g, g->input), *out = vae_tensor(g, g->output);
  v->be->upload(in->data, z, vae_numel(in, B) * sizeof(float));
  cohort_vae_graph_forward(v, g, B);
  v->be->download(images, out->data, vae_numel(out, B) * sizeof(float));
}

void cohort_vae_decode(CohortVae *v, const float *latents, int B, float *images)
{
  size_t n = (size_t)B * v->cfg.latent_channels * v->latent_size * v->latent_size;
  g_autofree float *z = g_new(float, n);
  double s = v->cfg.scaling_factor, sh = v->cfg.shift_factor;
  for (size_t i = 0; i < n; i++)
    z[i] = (float)((double)latents[i] / s + sh);
  cohort_vae_decode_raw(v, z, B, images);
}
