/* Training a VAE from images in memory: AdamW over the whole parameter buffer, a warm-up and a
 * cosine schedule, seeded order and noise; then the latent scale measured on the data. Used by
 * `cohort-vae train` (the build trains the built-in set's VAE with it). */
#include "engine/models/vae-private.h"

#include <math.h>
#include <string.h>

#include "data/example-rng.h"
#include "engine/base/error.h"

#define LOG_EVERY 25

static void shuffle(guint64 *order, gsize n, guint64 seed, guint64 epoch)
{
  for (gsize i = 0; i < n; i++)
    order[i] = i;
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, seed, epoch, 0, COHORT_RNG_STREAM_AUGMENT);
  for (gsize i = n - 1; i > 0; i--) {
    gsize j = cohort_example_rng_next(&rng) % (i + 1);
    guint64 t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

static void noise(float *eps, size_t n, guint64 seed, guint64 step, guint64 index)
{
  CohortExampleRng rng;
  cohort_example_rng_init(&rng, seed, step, index, COHORT_RNG_STREAM_NOISE);
  for (size_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - cohort_example_rng_uniform(&rng), u2 = cohort_example_rng_uniform(&rng);
    double r = sqrt(-2.0 * log(u1));
    eps[i] = (float)(r * cos(2 * G_PI * u2));
    if (i + 1 < n)
      eps[i + 1] = (float)(r * sin(2 * G_PI * u2));
  }
}

static double lr_at(const CohortVaeFitOptions *o, int step)
{
  if (step < o->warmup)
    return o->lr * (step + 1) / o->warmup;
  double p = (double)(step - o->warmup) / MAX(o->steps - o->warmup, 1);
  return o->lr * (0.1 + 0.9 * 0.5 * (1.0 + cos(G_PI * p)));
}

/* 1 / the standard deviation of the posterior means of up to 1024 images. */
static double measure_scale(CohortVae *v, const float *images, gsize n)
{
  int B = v->max_batch;
  size_t D = (size_t)v->cfg.in_channels * v->image_size * v->image_size;
  size_t per = (size_t)v->cfg.latent_channels * v->latent_size * v->latent_size;
  gsize take = MIN(n, 1024);
  g_autofree float *mom = g_new(float, 2 * per * B);
  double s = 0, q = 0, count = 0;
  for (gsize i = 0; i < take; i += (gsize)B) {
    int b = (int)MIN((gsize)B, take - i);
    cohort_vae_encode_moments(v, images + i * D, b, mom);
    for (int k = 0; k < b; k++)
      for (size_t j = 0; j < per; j++) {
        double m = mom[2 * k * per + j];
        s += m;
        q += m * m;
        count++;
      }
  }
  double mean = s / count, var = q / count - mean * mean;
  return var > 0 ? 1.0 / sqrt(var) : 1.0;
}

gboolean cohort_vae_fit(CohortVae *v, const float *images, gsize n, const CohortVaeFitOptions *o,
                        CohortVaeFitLog log, gpointer user_data, GError **error)
{
  g_return_val_if_fail(v->use & COHORT_VAE_TRAIN, FALSE);
  const CohortBackend *be = v->be;
  int B = MIN(o->batch, v->max_batch);
  if (n < (gsize)B || B < 1)
    return cohort_fail(error, COHORT_VAE_ERROR, 0,
                       "VAE training: %zu images for batches of %d; allowed: at least one batch",
                       (size_t)n, B);
  size_t D = (size_t)v->cfg.in_channels * v->image_size * v->image_size;
  size_t per = (size_t)v->cfg.latent_channels * v->latent_size * v->latent_size;
  size_t P = v->n_params;
  float *m = be->alloc(P * sizeof(float)), *s2 = be->alloc(P * sizeof(float));
  g_autofree float *batch = g_new(float, D *B), *eps = g_new(float, per *B);
  g_autofree guint64 *order = g_new(guint64, n);
  gsize per_epoch = n / (gsize)B, epoch = G_MAXSIZE;
  gint64 t0 = g_get_monotonic_time();
  double sums[3] = {0};
  gboolean ok = m && s2;
  if (!ok)
    cohort_fail(error, COHORT_VAE_ERROR, 1, "VAE training: out of %s memory for AdamW", be->name);
  for (int step = 0; ok && step < o->steps; step++) {
    if ((gsize)step / per_epoch != epoch) {
      epoch = (gsize)step / per_epoch;
      shuffle(order, n, o->seed, epoch);
    }
    gsize first = ((gsize)step % per_epoch) * (gsize)B;
    for (int b = 0; b < B; b++) {
      guint64 idx = order[first + (gsize)b];
      memcpy(batch + b * D, images + idx * D, D * sizeof(float));
      noise(eps + b * per, per, o->seed, (guint64)step, idx);
    }
    double rec, kl;
    float loss = cohort_vae_train_forward(v, batch, eps, B, (float)o->kl_weight, &rec, &kl);
    if (!isfinite(loss)) {
      ok = FALSE;
      cohort_fail(error, COHORT_VAE_ERROR, 0, "VAE training: the loss is %g at step %d", loss,
                  step + 1);
      break;
    }
    be->zero(v->grads, P * sizeof(float));
    cohort_vae_train_backward(v);
    int t = step + 1;
    be->adamw_update(v->params, v->grads, m, s2, P, (float)lr_at(o, step), 0.9f, 0.999f, 1e-8f,
                     0.0f, (float)(1.0 - pow(0.9, t)), (float)(1.0 - pow(0.999, t)));
    sums[0] += loss, sums[1] += rec, sums[2] += kl;
    if (log && (t % LOG_EVERY == 0 || t == o->steps)) {
      int k = t % LOG_EVERY ? t % LOG_EVERY : LOG_EVERY;
      double secs = (g_get_monotonic_time() - t0) / 1e6;
      log(t, sums[0] / k, sums[1] / k, sums[2] / k, t * B / MAX(secs, 1e-9), user_data);
      sums[0] = sums[1] = sums[2] = 0;
    }
  }
  be->free(m);
  be->free(s2);
  if (!ok)
    return FALSE;
  g_clear_pointer(&v->sha256, g_free);
  v->cfg.scaling_factor = measure_scale(v, images, n);
  v->cfg.shift_factor = 0;
  return TRUE;
}
