/* The classifier's objective: cross-entropy over the classes, averaged over the batch, and
 * top-1 accuracy; evaluation runs the network with the running statistics (eval mode). */
#include "engine/models/resnet-private.h"

#include <math.h>

/* The network and the rows' losses (r->losses, backend memory) on a host batch; the number
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
  size_t D = (size_t)s->channels * s->image_size * s->image_size;
  be->upload(r->img, images, B * D * sizeof(float));
  be->upload(r->labels, labels, (size_t)B * sizeof(int));
  cohort_resnet_net_forward(r, B, mode);
  be->crossentropy_forward(r->losses, r->lse, r->logits, r->labels, B, K);
  if (correct)
    *correct = be->accuracy_count(r->logits, r->labels, B, K);
  r->last_B = B;
  r->have_train = mode == COHORT_FORWARD_TRAIN;
  return TRUE;
}

float cohort_resnet_forward_given(CohortModel *m, const float *images, const int *labels, int B,
                                  CohortForwardMode mode, int *correct)
{
  if (!run(m, images, labels, B, mode, correct))
    return NAN;
  return cohort_model_mean_loss(m, resnet_of(m)->losses, (size_t)B, resnet_of(m)->host_losses);
}

void cohort_resnet_logits(const CohortModel *m, float *out)
{
  const Resnet *r = resnet_of(m);
  m->be->download(out, r->logits, (size_t)r->last_B * r->shape.num_classes * sizeof(float));
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
  return r->logits;
}

void cohort_resnet_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                   CohortLogitsGradFunc add, gpointer user_data)
{
  Resnet *r = resnet_of(m);
  g_return_if_fail(r->have_train && !m->frozen);
  int B = r->last_B, K = r->shape.num_classes;
  /* d(mean over the batch) / d(loss of a row) = 1/B */
  m->be->crossentropy_backward(r->dlogits, r->logits, r->lse, r->labels, B, K,
                               task_weight * grad_scale / (float)B);
  if (add)
    add(r->dlogits, r->logits, B, K, user_data);
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
    sums[0] += cohort_model_loss_sum(m, r->losses, (size_t)batch->B, r->host_losses);
  else
    sums[0] = NAN;
  sums[1] += correct;
  sums[2] += batch->B;
}
