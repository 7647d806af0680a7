/* The classifier's objective: cross-entropy over the classes, averaged over the batch, and
 * top-1 accuracy; evaluation runs the network with the running statistics (eval mode). */
#include "engine/models/resnet-private.h"

#include <math.h>

/* The network and the rows' losses (r->net.losses, backend memory) on a host batch; the number
 * of rows whose prediction is right into *correct when given. FALSE on a bad batch. */
static gboolean run(CohortModel *m, const float *images, const int *labels, int B,
                    CohortForwardMode mode, int *correct)
{
  Resnet *r = resnet_of(m);
  const CohortBackend *be = m->be;
  const CohortResnetShape *s = &r->shape;
  int K = s->num_classes;
  g_return_val_if_fail(B >= 1 && B <= m->max_batch, FALSE);
  for (int i = 0; i < B; i++)
    g_return_val_if_fail(labels[i] >= 0 && labels[i] < K, FALSE);
  size_t HW = (size_t)s->image_size * s->image_size, C = (size_t)s->channels, D = C * HW;
  /* NCHW to the network's NHWC, on the host, where the batch already is */
  for (int b = 0; b < B; b++)
    for (size_t pix = 0; pix < HW; pix++)
      for (size_t c = 0; c < C; c++)
        r->host_img[(b * HW + pix) * C + c] = images[(b * C + c) * HW + pix];
  be->upload(r->net.img, r->host_img, B * D * sizeof(float));
  be->upload(r->net.labels, labels, (size_t)B * sizeof(int));
  cohort_resnet_net_forward(r, B, mode);
  be->crossentropy_forward(r->net.losses, r->net.lse, r->net.logits, r->net.labels, B, K);
  if (correct)
    *correct = be->accuracy_count(r->net.logits, r->net.labels, B, K);
  r->last_B = B;
  r->have_train = mode == COHORT_FORWARD_TRAIN;
  return TRUE;
}

float cohort_resnet_forward_given(CohortModel *m, const float *images, const int *labels, int B,
                                  CohortForwardMode mode, int *correct)
{
  if (!run(m, images, labels, B, mode, correct))
    return NAN;
  return cohort_model_mean_loss(m, resnet_of(m)->net.losses, (size_t)B, resnet_of(m)->host_losses);
}

void cohort_resnet_logits(const CohortModel *m, float *out)
{
  const Resnet *r = resnet_of(m);
  m->be->download(out, r->net.logits, (size_t)r->last_B * r->shape.num_classes * sizeof(float));
}

float cohort_resnet_forward_batch(CohortModel *m, const CohortBatch *batch, CohortForwardMode mode)
{
  return cohort_resnet_forward_given(m, batch->images, batch->labels, batch->B, mode, NULL);
}

const float *cohort_resnet_logits_op(const CohortModel *m, int *rows, int *classes)
{
  const Resnet *r = resnet_of(m);
  *rows = r->last_B;
  *classes = r->shape.num_classes;
  return r->net.logits;
}

void cohort_resnet_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                   CohortLogitsGradFunc add, gpointer user_data)
{
  Resnet *r = resnet_of(m);
  g_return_if_fail(r->have_train && !m->frozen);
  int B = r->last_B, K = r->shape.num_classes;
  /* d(mean over the batch) / d(loss of a row) = 1/B */
  m->be->crossentropy_backward(r->net.dlogits, r->net.logits, r->net.lse, r->net.labels, B, K,
                               task_weight * grad_scale / (float)B);
  if (add)
    add(r->net.dlogits, r->net.logits, B, K, user_data);
  cohort_resnet_net_backward(r, B);
}

void cohort_resnet_backward(CohortModel *m, float grad_scale)
{
  cohort_resnet_backward_logits(m, grad_scale, 1.0f, NULL, NULL);
}

void cohort_resnet_eval_batch(CohortModel *m, const CohortBatch *batch, double *sums)
{
  int correct = 0;
  Resnet *r = resnet_of(m);
  if (run(m, batch->images, batch->labels, batch->B, COHORT_FORWARD_EVAL, &correct))
    sums[0] += cohort_model_loss_sum(m, r->net.losses, (size_t)batch->B, r->host_losses);
  else
    sums[0] = NAN;
  sums[1] += correct;
  sums[2] += batch->B;
}

/* NHWC activation [B, side, side, C] (backend memory) to NCHW signs appended to `out`. */
static void append_sides(const Resnet *r, GByteArray *out, const float *act, int B, int C, int side)
{
  size_t HW = (size_t)side * side, n = (size_t)B * HW * C;
  g_autofree float *host = g_new(float, n);
  r->base.be->download(host, act, n * sizeof(float));
  guint at = out->len;
  g_byte_array_set_size(out, at + (guint)n);
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++)
      for (size_t p = 0; p < HW; p++)
        out->data[at + ((size_t)b * C + c) * HW + p] = host[((size_t)b * HW + p) * C + c] > 0;
}

guint8 *cohort_resnet_relu_sides(const CohortModel *m, size_t *n)
{
  const Resnet *r = resnet_of(m);
  int B = r->last_B;
  GByteArray *out = g_byte_array_new();
  append_sides(r, out, r->net.stem_out, B, r->net.stem.c_out, r->net.stem.h_out);
  for (int i = 0; i < r->net.n_blocks; i++) {
    const ResnetBlock *b = &r->net.blocks[i];
    for (int u = 0; u + 1 < b->n_units; u++)
      append_sides(r, out, b->hidden[u], B, b->unit[u].c_out, b->unit[u].h_out);
    const ResnetConvBn *last = &b->unit[b->n_units - 1];
    append_sides(r, out, b->out, B, last->c_out, last->h_out);
  }
  *n = out->len;
  return g_byte_array_free(out, FALSE);
}
