/* The ResNet network, forward and backward, written per layer over the backend table, with
 * BatchNorm split into its statistics, normalisation and the backward's two reductions so that
 * SyncBatchNorm can combine ranks between the steps, as torch.nn.SyncBatchNorm does:
 *
 *  forward   bn_stats → all-gather every rank's [mean, m2, count] → bn_combine_stats (Chan's
 *            formula, in rank order, so every rank gets the same bits) → normalise with the
 *            global statistics → running statistics from the global mean and the unbiased
 *            global variance;
 *  backward  the two per-channel sums → the weight and bias gradients from this rank's own
 *            sums (the DDP average then makes them the global ones) → all-reduce of the sums →
 *            the input gradient with the global sums and count.
 *
 * The collectives come in the same order on every rank (layer by layer), which is what lets
 * the trainer queue them behind the DDP reducer's buckets on one communication thread. */
#include "engine/models/resnet-private.h"

#include "engine/model/lora.h"

static gboolean syncing(const Resnet *r, CohortForwardMode mode)
{
  return mode == COHORT_FORWARD_TRAIN && r->base.comm && r->base.comm->world_size > 1;
}

/* u->stat holds this rank's mean and m2: replaces them with the global batch's and sets
 * u->count to the values per channel over all ranks. */
static void combine_ranks(Resnet *r, ResnetConvBn *u, int B)
{
  const CohortBackend *be = r->base.be;
  const CohortModelComm *comm = r->base.comm;
  int C = u->c_out, R = comm->world_size;
  size_t row = 2 * (size_t)C + 1;
  float count = (float)((double)B * u->h_out * u->h_out);
  be->upload(u->stat + 2 * C, &count, sizeof count);
  comm->all_gather(comm->data, u->stat, row, r->gather);
  be->bn_combine_stats(u->stat, u->stat + C, r->gather, R, C);
  be->download(r->gather_host, r->gather, (size_t)R * row * sizeof(float));
  double total = 0;
  for (int k = 0; k < R; k++)
    total += r->gather_host[(size_t)k * row + 2 * C];
  u->count = total;
}

/* y = BN(conv(x)); TRAIN also updates the running statistics (the counters are advanced once
 * per forward by the caller), unless freeze_bn_stats: then BatchNorm is in eval mode in
 * training too (PyTorch's bn.eval()), normalising with the running statistics, which stay.
 * Activations are NHWC, so BatchNorm runs over B·H·W rows of C channels (HW = 1 in the
 * backend's terms). */
static void conv_bn_forward(Resnet *r, ResnetConvBn *u, const float *x, float *y, int B,
                            CohortForwardMode mode)
{
  const CohortBackend *be = r->base.be;
  float *p = r->base.params, *buf = r->base.buffer_data;
  int C = u->c_out, rows = B * u->h_out * u->h_out;
  const float *w = cohort_lora_conv_kernel(&r->base, u->w_index, p + u->w_off);
  be->conv2d_nhwc_forward(u->conv_out, x, w, B, u->c_in, u->h_in, u->h_in, C, u->k, u->stride,
                          u->pad);
  if (mode == COHORT_FORWARD_EVAL || r->freeze_bn_stats) {
    be->bn_rstd(u->rstd, buf + u->var_off, 1.0, RESNET_BN_EPS, C);
    be->bn_forward(y, u->conv_out, buf + u->mean_off, u->rstd, p + u->g_off, p + u->b_off, rows, C,
                   1);
    return;
  }
  be->bn_stats(u->conv_out, rows, C, 1, u->stat, u->stat + C);
  u->count = (double)rows;
  if (syncing(r, mode))
    combine_ranks(r, u, B);
  be->bn_rstd(u->rstd, u->stat + C, 1.0 / u->count, RESNET_BN_EPS, C);
  be->bn_forward(y, u->conv_out, u->stat, u->rstd, p + u->g_off, p + u->b_off, rows, C, 1);
  be->bn_running_update(buf + u->mean_off, buf + u->var_off, u->stat, u->stat + C, u->count,
                        r->bn_momentum, C);
}

/* From dy = d(BN output): the BatchNorm and convolution gradients, and d(conv input) written
 * to dx (added to it when `accumulate`; dx NULL: the image needs none). r->net.dconv is scratch. */
static void conv_bn_backward(Resnet *r, ResnetConvBn *u, const float *x, const float *dy, float *dx,
                             int accumulate, int B)
{
  const CohortBackend *be = r->base.be;
  const CohortModelComm *comm = r->base.comm;
  CohortModel *m = &r->base;
  float *p = m->params;
  int C = u->c_out, rows = B * u->h_out * u->h_out;
  float *sum_dy = r->net.sums, *sum_dy_xhat = r->net.sums + C;
  /* freeze_bn_stats: the statistics are the running ones, constants of the step */
  const float *mean = r->freeze_bn_stats ? r->base.buffer_data + u->mean_off : u->stat;
  be->bn_backward_reduce(dy, u->conv_out, mean, u->rstd, rows, C, 1, sum_dy, sum_dy_xhat);
  /* The parameters' gradients from this rank's sums, before they are reduced in place. */
  be->bn_backward_params(cohort_model_grad_at(m, u->g_off), cohort_model_grad_at(m, u->b_off),
                         sum_dy, sum_dy_xhat, C);
  if (r->freeze_bn_stats) /* eval mode: dx = weight · rstd · dy, no term through the batch */
    be->zero(r->net.sums, 2 * (size_t)C * sizeof(float));
  else if (syncing(r, COHORT_FORWARD_TRAIN))
    comm->all_reduce_sum(comm->data, r->net.sums, 2 * (size_t)C);
  be->bn_backward_dx(r->net.dconv, 0, dy, u->conv_out, mean, u->rstd, p + u->g_off, sum_dy,
                     sum_dy_xhat, r->freeze_bn_stats ? 1.0 : u->count, rows, C, 1);
  float *dw = cohort_model_grad_at(m, u->w_off);
  const float *w = cohort_lora_conv_kernel(m, u->w_index, p + u->w_off);
  be->conv2d_nhwc_backward(dx, accumulate, cohort_lora_conv_grad(m, u->w_index, dw), r->net.dconv,
                           x, w, B, u->c_in, u->h_in, u->h_in, C, u->k, u->stride, u->pad);
  cohort_lora_conv_grads(m, u->w_index, dw);
}

static size_t unit_numel(const ResnetConvBn *u, int B)
{
  return (size_t)B * u->c_out * u->h_out * u->h_out;
}

/* The units in turn (BN then ReLU on all but the last), the shortcut, the sum, ReLU. */
static void block_forward(Resnet *r, ResnetBlock *b, const float *x, int B, CohortForwardMode mode)
{
  const CohortBackend *be = r->base.be;
  const float *in = x;
  for (int u = 0; u + 1 < b->n_units; u++) {
    conv_bn_forward(r, &b->unit[u], in, b->hidden[u], B, mode);
    be->relu_forward(b->hidden[u], b->hidden[u], unit_numel(&b->unit[u], B));
    in = b->hidden[u];
  }
  ResnetConvBn *last = &b->unit[b->n_units - 1];
  size_t n = unit_numel(last, B);
  conv_bn_forward(r, last, in, b->out, B, mode);
  const float *shortcut = x;
  if (b->has_down) {
    conv_bn_forward(r, &b->down, x, r->net.dconv, B, mode); /* dconv is free until backward */
    shortcut = r->net.dconv;
  }
  be->residual_forward(b->out, b->out, shortcut, n);
  be->relu_forward(b->out, b->out, n);
}

/* activation_checkpointing: what the block's backward reads, again from its input x: each
 * unit's convolution output and the hidden activations. BatchNorm normalises with the batch
 * statistics (or, with freeze_bn_stats, the running ones) that the forward saved in each
 * unit, so the recompute has the forward's bits, issues no SyncBatchNorm collective and
 * leaves the running statistics alone. The block's output is kept, so the last unit and the
 * shortcut need only their convolutions. */
static void block_recompute(Resnet *r, ResnetBlock *b, const float *x, int B)
{
  const CohortBackend *be = r->base.be;
  float *p = r->base.params;
  const float *in = x;
  for (int k = 0; k < b->n_units + b->has_down; k++) {
    gboolean down = k == b->n_units;
    ResnetConvBn *u = down ? &b->down : &b->unit[k];
    const float *w = cohort_lora_conv_kernel(&r->base, u->w_index, p + u->w_off);
    be->conv2d_nhwc_forward(u->conv_out, down ? x : in, w, B, u->c_in, u->h_in, u->h_in, u->c_out,
                            u->k, u->stride, u->pad);
    if (down || k + 1 == b->n_units)
      continue;
    const float *mean = r->freeze_bn_stats ? r->base.buffer_data + u->mean_off : u->stat;
    be->bn_forward(b->hidden[k], u->conv_out, mean, u->rstd, p + u->g_off, p + u->b_off,
                   B * u->h_out * u->h_out, u->c_out, 1);
    be->relu_forward(b->hidden[k], b->hidden[k], unit_numel(u, B));
    in = b->hidden[k];
  }
}

void cohort_resnet_net_forward(Resnet *r, int B, CohortForwardMode mode)
{
  const CohortBackend *be = r->base.be;
  const ResnetConvBn *s = &r->net.stem;
  float *p = r->base.params;
  int K = r->shape.num_classes, F = r->net.feat;
  if (mode == COHORT_FORWARD_TRAIN && !r->freeze_bn_stats) /* every num_batches_tracked += 1 */
    be->axpby(r->base.buffer_data + r->net.nbt_off, 1.0f, r->base.buffer_data + r->net.nbt_off,
              1.0f, r->net.ones, (size_t)r->net.n_bn);
  /* Each layer's parameters between layer_begin and layer_end (ZeRO stage 3 gathers them):
   * the stem (layer 0), block i (layer i + 1), the classifier (layer n_blocks + 1). */
  CohortModel *m = &r->base;
  cohort_model_layer_begin(m, 0, COHORT_LAYER_FORWARD);
  conv_bn_forward(r, &r->net.stem, r->net.img, r->net.stem_out, B, mode);
  cohort_model_layer_end(m, 0, COHORT_LAYER_FORWARD);
  be->relu_forward(r->net.stem_out, r->net.stem_out, unit_numel(s, B));
  const float *x = r->net.stem_out;
  if (r->net.has_pool) {
    be->maxpool2d_nhwc_forward(r->net.pool_out, r->net.stem_out, B, s->c_out, s->h_out, s->h_out, 3,
                               2, 1);
    x = r->net.pool_out;
  }
  for (int i = 0; i < r->net.n_blocks; i++) {
    cohort_model_layer_begin(m, i + 1, COHORT_LAYER_FORWARD);
    block_forward(r, &r->net.blocks[i], x, B, mode);
    cohort_model_layer_end(m, i + 1, COHORT_LAYER_FORWARD);
    r->acts_block = i;
    x = r->net.blocks[i].out;
  }
  be->avgpool_global_nhwc_forward(r->net.pooled, x, B, F, r->net.last_side * r->net.last_side);
  cohort_model_layer_begin(m, r->net.n_blocks + 1, COHORT_LAYER_FORWARD);
  be->gemm(0, 1, B, K, F, 1.0f, r->net.pooled, F, p + r->net.fc_w_off, F, 0.0f, r->net.logits, K);
  be->add_bias(r->net.logits, p + r->net.fc_b_off, B, K);
  cohort_lora_forward(m, r->net.fc_index, r->net.logits, r->net.pooled, B);
  cohort_model_layer_end(m, r->net.n_blocks + 1, COHORT_LAYER_FORWARD);
}

/* r->net.da holds d(block output); on return r->net.da holds d(block input) (the buffers swap). */
static void block_backward(Resnet *r, ResnetBlock *b, const float *x, int B)
{
  const CohortBackend *be = r->base.be;
  ResnetConvBn *last = &b->unit[b->n_units - 1];
  /* through the final ReLU: da is then the gradient of the sum, for both branches */
  be->relu_backward(r->net.da, b->out, r->net.da, unit_numel(last, B));
  /* the units from the last back to the second: dh[0] and dh[1] take turns */
  const float *dy = r->net.da;
  int t = 0;
  for (int u = b->n_units - 1; u >= 1; u--, t ^= 1) {
    conv_bn_backward(r, &b->unit[u], b->hidden[u - 1], dy, r->net.dh[t], 0, B);
    be->relu_backward(r->net.dh[t], b->hidden[u - 1], r->net.dh[t], unit_numel(&b->unit[u - 1], B));
    dy = r->net.dh[t];
  }
  /* d(block input): the shortcut's share, then the first unit's added to it. An identity
   * shortcut's share is da itself, so the first unit adds into da and nothing is copied. */
  if (b->has_down) {
    conv_bn_backward(r, &b->down, x, r->net.da, r->net.db, 0, B);
    conv_bn_backward(r, &b->unit[0], x, dy, r->net.db, 1, B);
    float *swap = r->net.da;
    r->net.da = r->net.db;
    r->net.db = swap;
  } else {
    conv_bn_backward(r, &b->unit[0], x, dy, r->net.da, 1, B);
  }
}

void cohort_resnet_net_backward(Resnet *r, int B)
{
  const CohortBackend *be = r->base.be;
  CohortModel *m = &r->base;
  float *p = m->params;
  float *dw = cohort_model_grad_at(m, r->net.fc_w_off),
        *db = cohort_model_grad_at(m, r->net.fc_b_off);
  int K = r->shape.num_classes, F = r->net.feat, HW = r->net.last_side * r->net.last_side;
  int L = r->net.n_blocks + 1; /* the classifier's layer; block i is layer i + 1, the stem 0 */
  /* the classifier: logits = pooled fc.weight^T + fc.bias */
  cohort_model_layer_begin(m, L, COHORT_LAYER_BACKWARD);
  if (dw)
    be->gemm(1, 0, K, F, B, 1.0f, r->net.dlogits, K, r->net.pooled, F, 1.0f, dw, F);
  if (db)
    be->bias_backward(db, r->net.dlogits, B, K);
  be->gemm(0, 0, B, F, K, 1.0f, r->net.dlogits, K, p + r->net.fc_w_off, F, 0.0f, r->net.dpooled, F);
  cohort_lora_backward(m, r->net.fc_index, r->net.dpooled, r->net.dlogits, r->net.pooled, B);
  cohort_model_layer_end(m, L, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, L);
  /* finetune frozen: nothing below learns (the classifier alone, for transfer learning) */
  if (!cohort_model_learns_up_to(m, L - 1))
    return;
  be->zero(r->net.da, (size_t)B * F * HW * sizeof(float));
  be->avgpool_global_nhwc_backward(r->net.da, r->net.dpooled, B, F, HW);
  for (int i = r->net.n_blocks - 1; i >= 0 && cohort_model_learns_up_to(m, i + 1); i--) {
    ResnetBlock *b = &r->net.blocks[i];
    const float *x = i > 0             ? r->net.blocks[i - 1].out
                     : r->net.has_pool ? r->net.pool_out
                                       : r->net.stem_out;
    cohort_model_layer_begin(m, i + 1, COHORT_LAYER_BACKWARD);
    if (r->checkpoint && r->acts_block != i) {
      block_recompute(r, b, x, B);
      r->acts_block = i;
    }
    block_backward(r, b, x, B);
    cohort_model_layer_end(m, i + 1, COHORT_LAYER_BACKWARD);
    cohort_model_layer_grads_ready(m, i + 1);
  }
  if (!cohort_model_learns_up_to(m, 0))
    return;
  const ResnetConvBn *s = &r->net.stem;
  size_t n = unit_numel(s, B);
  if (r->net.has_pool) { /* da holds d(pool output): route it to d(stem output) in db */
    be->zero(r->net.db, n * sizeof(float));
    be->maxpool2d_nhwc_backward(r->net.db, r->net.da, r->net.stem_out, B, s->c_out, s->h_out,
                                s->h_out, 3, 2, 1);
    float *swap = r->net.da;
    r->net.da = r->net.db;
    r->net.db = swap;
  }
  be->relu_backward(r->net.da, r->net.stem_out, r->net.da, n);
  cohort_model_layer_begin(m, 0, COHORT_LAYER_BACKWARD);
  conv_bn_backward(r, &r->net.stem, r->net.img, r->net.da, NULL, 0, B);
  cohort_model_layer_end(m, 0, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, 0);
}
