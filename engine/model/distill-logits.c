/* Distillation of logits families (GPT, classifiers), Hinton et al.'s:
 *   alpha · tau² · mean_rows KL(softmax(teacher / tau) ‖ softmax(student / tau))
 *   + (1 − alpha) · cross-entropy(labels)
 * The tau² keeps the KL term's gradient of the order of the cross-entropy's as tau grows. The
 * family supplies its logits and a backward that lets the KL gradient join the cross-entropy's
 * at the logits (engine/model/model.h). */
#include "engine/model/distill.h"

#include <math.h>

#include "kernels/backend.h"

typedef struct {
  CohortDistill base;
  int capacity;   /* rows the buffers hold */
  float *kl;      /* [capacity] backend */
  float *lse;     /* [capacity, 2] backend */
  float *host_kl; /* [capacity] */
  const float *teacher_logits;
  int rows;
  float kl_scale; /* alpha tau² grad_scale / rows, for the backward in progress */
} LogitsDistill;

static void release(LogitsDistill *d)
{
  const CohortBackend *be = d->base.student->be;
  be->free(d->kl);
  be->free(d->lse);
  g_free(d->host_kl);
  d->kl = d->lse = d->host_kl = NULL;
  d->capacity = 0;
}

/* The row count is known after the first forward (B·T positions, B images); buffers are sized
 * then and kept, so later steps allocate nothing. */
static gboolean reserve(LogitsDistill *d, int rows)
{
  if (rows <= d->capacity)
    return TRUE;
  release(d);
  const CohortBackend *be = d->base.student->be;
  d->kl = be->alloc((size_t)rows * sizeof(float));
  d->lse = be->alloc((size_t)rows * 2 * sizeof(float));
  d->host_kl = g_try_new(float, rows);
  if (!d->kl || !d->lse || !d->host_kl) {
    release(d);
    return FALSE;
  }
  d->capacity = rows;
  return TRUE;
}

static float logits_forward(CohortDistill *base, const CohortBatch *batch, double *parts)
{
  LogitsDistill *d = (LogitsDistill *)base;
  CohortModel *s = base->student, *t = base->teacher;
  float task = s->ops->forward(s, batch, COHORT_FORWARD_TRAIN);
  t->ops->forward(t, batch, COHORT_FORWARD_EVAL);
  int rs, cs, rt, ct;
  const float *sl = s->ops->logits(s, &rs, &cs);
  const float *tl = t->ops->logits(t, &rt, &ct);
  g_return_val_if_fail(rs == rt && cs == ct, NAN);
  if (!reserve(d, rs))
    return NAN; /* the trainer stops on a loss that is not finite */
  double tau = base->settings.temperature;
  s->be->kl_div_forward(d->kl, d->lse, sl, tl, rs, cs, (float)tau);
  s->be->download(d->host_kl, d->kl, (size_t)rs * sizeof(float));
  double sum = 0;
  for (int i = 0; i < rs; i++)
    sum += d->host_kl[i];
  d->teacher_logits = tl;
  d->rows = rs;
  parts[COHORT_DISTILL_PART_TEACHER] = tau * tau * sum / rs;
  parts[COHORT_DISTILL_PART_TASK] = task;
  double a = base->settings.alpha;
  return (float)(a * parts[COHORT_DISTILL_PART_TEACHER] + (1 - a) * task);
}

static void add_kl_grad(float *dlogits, const float *logits, int rows, int classes, gpointer data)
{
  LogitsDistill *d = data;
  g_return_if_fail(rows == d->rows);
  d->base.student->be->kl_div_backward(dlogits, logits, d->teacher_logits, d->lse, rows, classes,
                                       (float)d->base.settings.temperature, d->kl_scale);
}

static void logits_backward(CohortDistill *base, float grad_scale)
{
  LogitsDistill *d = (LogitsDistill *)base;
  CohortModel *s = base->student;
  double a = base->settings.alpha, tau = base->settings.temperature;
  g_return_if_fail(d->rows > 0);
  d->kl_scale = (float)(a * tau * tau * grad_scale / d->rows);
  s->ops->backward_logits(s, grad_scale, (float)(1 - a), add_kl_grad, d);
}

static void logits_free(CohortDistill *base)
{
  LogitsDistill *d = (LogitsDistill *)base;
  release(d);
  g_free(d);
}

static const CohortDistillOps logits_ops = {
    .forward = logits_forward,
    .backward = logits_backward,
    .free = logits_free,
};

CohortDistill *cohort_logits_distill_new(CohortModel *student, CohortModel *teacher,
                                         const CohortDistillSettings *settings, GError **error)
{
  if (!student->ops->logits || !student->ops->backward_logits || !teacher->ops->logits) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "distillation: the %s family does not expose its logits", student->klass->name);
    return NULL;
  }
  LogitsDistill *d = g_new0(LogitsDistill, 1);
  d->base = (CohortDistill){
      .ops = &logits_ops, .student = student, .teacher = teacher, .settings = *settings};
  return &d->base;
}
