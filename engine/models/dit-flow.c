/* The rectified-flow objective: for a clean image x₀ and noise ε, x_t = (1 − t)·x₀ + t·ε and
 * the network regresses the velocity v = ε − x₀ (mean squared error), as Wan 2.x and SD3
 * train. The timestep feeds the embedding as 1000·t (SD3's convention).
 *
 * Randomness per example is keyed by (seed, epoch, example index, purpose) (data/example-rng.h):
 *  - t: uniform, or logit-normal (sigmoid of N(0, 1), the default), then the optional shift
 *    t ← s·t / (1 + (s − 1)·t) that moves mass toward noisier timesteps for larger images;
 *  - ε: N(0, 1) per pixel;
 *  - the label is replaced by the "no label" row with probability cfg_dropout, which is what
 *    lets sampling use classifier-free guidance.
 * Evaluation (batch epoch −1) uses a fixed grid of 8 timesteps (by example index), fixed noise
 * and no label dropout, so validation curves of different runs compare. */
#include "engine/models/dit-private.h"

#include <math.h>
#include <string.h>

#include "data/example-rng.h"

/* The evaluation grid of timesteps: t = (k + 0.5) / EVAL_T_GRID for example index k mod it. */
#define EVAL_T_GRID 8
/* The epoch number evaluation noise is keyed by: no training epoch reaches it. */
#define EVAL_EPOCH G_MAXUINT64

static double normal(CohortExampleRng *rng)
{
  /* Box-Muller; 1 - u keeps the logarithm's argument in (0, 1]. */
  double u1 = 1.0 - cohort_example_rng_uniform(rng);
  double u2 = cohort_example_rng_uniform(rng);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * G_PI * u2);
}

static double draw_t(const Dit *d, guint64 epoch, guint64 index)
{
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, d->seed, epoch, index, COHORT_RNG_STREAM_TIMESTEP);
  double t = d->timestep_logit_normal ? 1.0 / (1.0 + exp(-normal(&rng)))
                                      : cohort_example_rng_uniform(&rng);
  double s = d->timestep_shift;
  return s * t / (1.0 + (s - 1.0) * t);
}

static void draw_noise(const Dit *d, guint64 epoch, guint64 index, float *eps, size_t n)
{
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, d->seed, epoch, index, COHORT_RNG_STREAM_NOISE);
  for (size_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - cohort_example_rng_uniform(&rng);
    double u2 = cohort_example_rng_uniform(&rng);
    double r = sqrt(-2.0 * log(u1));
    eps[i] = (float)(r * cos(2.0 * G_PI * u2));
    if (i + 1 < n)
      eps[i + 1] = (float)(r * sin(2.0 * G_PI * u2));
  }
}

static int draw_label(const Dit *d, guint64 epoch, guint64 index, int label, gboolean eval)
{
  int null_label = d->shape.num_classes;
  if (label < 0 || label >= d->shape.num_classes)
    return null_label; /* unconditional data, or a class the model does not have */
  if (eval || d->cfg_dropout <= 0)
    return label;
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, d->seed, epoch, index, COHORT_RNG_STREAM_LABEL_DROP);
  return cohort_example_rng_uniform(&rng) < d->cfg_dropout ? null_label : label;
}

void cohort_dit_prepare(Dit *d, const CohortBatch *b)
{
  int B = b->B;
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  gboolean eval = b->epoch < 0;
  guint64 epoch = eval ? EVAL_EPOCH : (guint64)b->epoch;
  for (int i = 0; i < B; i++) {
    guint64 idx = b->example_ids[i];
    double t = eval ? (double)(idx % EVAL_T_GRID) / EVAL_T_GRID + 0.5 / EVAL_T_GRID
                    : draw_t(d, epoch, idx);
    float *xt = d->host_img + i * D, *tg = d->host_target + i * D;
    const float *x0 = b->images + i * D;
    draw_noise(d, epoch, idx, tg, D); /* ε, into the target's place first */
    for (size_t k = 0; k < D; k++) {
      float e = tg[k];
      xt[k] = (float)((1.0 - t) * x0[k] + t * e);
      tg[k] = e - x0[k];
    }
    d->host_t[i] = (float)t;
    d->host_labels[i] = draw_label(d, epoch, idx, b->labels[i], eval);
  }
}

void cohort_dit_run(Dit *d, const float *x_t, const float *t, const int *labels, int B)
{
  const CohortBackend *be = d->base.be;
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  g_autofree float *t1000 = g_new(float, B);
  for (int i = 0; i < B; i++) {
    t1000[i] = 1000.0f * t[i];
    g_return_if_fail(labels[i] >= 0 && labels[i] <= d->shape.num_classes);
  }
  be->upload(d->acts.img, x_t, B * D * sizeof(float));
  be->upload(d->acts.t, t1000, (size_t)B * sizeof(float));
  be->upload(d->acts.labels, labels, (size_t)B * sizeof(int));
  cohort_dit_net_forward(d, B);
}

/* The mean over the batch of the per-example squared errors of the last forward. */
static float mean_loss(Dit *d, int B)
{
  const CohortBackend *be = d->base.be;
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  float *losses = d->text ? d->tacts.losses : d->acts.losses;
  be->mse_forward(losses, d->text ? d->tacts.pred : d->acts.pred,
                  d->text ? d->tacts.target : d->acts.target, B, (int)D);
  return cohort_model_mean_loss(&d->base, losses, (size_t)B, d->host_losses);
}

/* The batch's text packed to its longest caption (at least one token, so shapes are never
 * empty) in d->host_text [B, M, D]; returns M. */
static int pack_text(Dit *d, const CohortBatch *b)
{
  int M = 1, D = d->shape.text_dim;
  g_return_val_if_fail(b->text && b->text_dim == D && b->M <= d->shape.text_tokens, 0);
  for (int i = 0; i < b->B; i++)
    M = MAX(M, b->text_len[i]);
  for (int i = 0; i < b->B; i++) {
    memcpy(d->host_text + (size_t)i * M * D, b->text + (size_t)i * b->M * D,
           (size_t)M * D * sizeof(float));
    d->host_klen[i] = b->text_len[i];
  }
  return M;
}

float cohort_dit_text_forward_given(CohortModel *m, const float *x_t, const float *t,
                                    const float *text, const int *klen, int M, const float *target,
                                    int B)
{
  Dit *d = dit_of(m);
  g_return_val_if_fail(d->text && B >= 1 && B <= m->max_batch, NAN);
  g_return_val_if_fail(M >= 1 && M <= d->shape.text_tokens, NAN);
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  cohort_dit_text_run(d, x_t, t, text, klen, B, M);
  m->be->upload(d->tacts.target, target, B * D * sizeof(float));
  d->last_B = B;
  d->have_targets = TRUE;
  return mean_loss(d, B);
}

/* The text layout's objective on a CohortBatch (its images and captions' embeddings). */
static float text_forward_batch(Dit *d, const CohortBatch *batch)
{
  cohort_dit_prepare(d, batch);
  int M = pack_text(d, batch);
  return cohort_dit_text_forward_given(&d->base, d->host_img, d->host_t, d->host_text, d->host_klen,
                                       M, d->host_target, batch->B);
}

float cohort_dit_forward_given(CohortModel *m, const float *x_t, const float *t, const int *labels,
                               const float *target, int B)
{
  Dit *d = dit_of(m);
  g_return_val_if_fail(B >= 1 && B <= m->max_batch, NAN);
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  cohort_dit_run(d, x_t, t, labels, B);
  m->be->upload(d->acts.target, target, B * D * sizeof(float));
  d->last_B = B;
  d->have_targets = TRUE;
  return mean_loss(d, B);
}

float cohort_dit_forward_batch(CohortModel *m, const CohortBatch *batch, CohortForwardMode mode)
{
  (void)mode; /* no layer behaves differently in evaluation */
  Dit *d = dit_of(m);
  g_return_val_if_fail(batch->B >= 1 && batch->B <= m->max_batch, NAN);
  if (d->text)
    return text_forward_batch(d, batch);
  cohort_dit_prepare(d, batch);
  return cohort_dit_forward_given(m, d->host_img, d->host_t, d->host_labels, d->host_target,
                                  batch->B);
}

void cohort_dit_backward(CohortModel *m, float grad_scale)
{
  Dit *d = dit_of(m);
  g_return_if_fail(d->have_targets && m->grads);
  int B = d->last_B;
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  /* d(mean over the batch of per-example means) */
  if (d->text) {
    m->be->mse_backward(d->tacts.dimg, d->tacts.pred, d->tacts.target, B, (int)D,
                        grad_scale / (float)B);
    cohort_dit_text_net_backward(d, B, d->last_M);
    return;
  }
  m->be->mse_backward(d->acts.dimg, d->acts.pred, d->acts.target, B, (int)D, grad_scale / (float)B);
  cohort_dit_net_backward(d, B);
}

void cohort_dit_eval_batch(CohortModel *m, const CohortBatch *batch, double *sums)
{
  Dit *d = dit_of(m);
  float loss;
  if (d->text) {
    loss = text_forward_batch(d, batch);
  } else {
    cohort_dit_prepare(d, batch);
    loss = cohort_dit_forward_given(m, d->host_img, d->host_t, d->host_labels, d->host_target,
                                    batch->B);
  }
  d->have_targets = FALSE;
  sums[0] += (double)loss * batch->B;
  sums[1] += batch->B;
}

void cohort_dit_velocity(CohortModel *m, const float *x_t, const float *t, const int *labels, int B,
                         float *v)
{
  Dit *d = dit_of(m);
  g_return_if_fail(B >= 1 && B <= m->max_batch);
  size_t D = (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
  cohort_dit_run(d, x_t, t, labels, B);
  d->have_targets = FALSE;
  m->be->download(v, d->acts.pred, B * D * sizeof(float));
}
