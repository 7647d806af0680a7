/* Training a VAE: the reparameterised posterior sample, the reconstruction (mean squared error)
 * and KL terms, and backward through decoder and encoder. The posterior's few values per
 * example go through host memory, where the sampling and the KL term are computed in double. */
#include "engine/models/vae-private.h"

#include <math.h>

static float clamp_lv(float lv)
{
  return lv < VAE_LOGVAR_MIN ? VAE_LOGVAR_MIN : lv > VAE_LOGVAR_MAX ? VAE_LOGVAR_MAX : lv;
}

float cohort_vae_train_forward(CohortVae *v, const float *images, const float *eps, int B,
                               float kl_weight, double *rec, double *kl)
{
  g_return_val_if_fail(v->use & COHORT_VAE_TRAIN, NAN);
  g_return_val_if_fail(B >= 1 && B <= v->max_batch, NAN);
  const CohortBackend *be = v->be;
  VaeGraph *enc = &v->enc, *dec = &v->dec;
  VaeTensor *x = vae_tensor(enc, enc->input), *m = vae_tensor(enc, enc->output);
  VaeTensor *zin = vae_tensor(dec, dec->input), *y = vae_tensor(dec, dec->output);
  size_t D = (size_t)x->C * x->H * x->W, per = (size_t)zin->C * zin->H * zin->W;
  be->upload(x->data, images, D * B * sizeof(float));
  be->upload(v->target, images, D * B * sizeof(float));
  cohort_vae_graph_forward(v, enc, B);
  be->download(v->h_moments, m->data, 2 * per * B * sizeof(float));
  g_autofree float *z = g_new(float, per *B);
  double kl_sum = 0;
  for (int b = 0; b < B; b++)
    for (size_t i = 0; i < per; i++) {
      float mu = v->h_moments[2 * b * per + i], lv = clamp_lv(v->h_moments[(2 * b + 1) * per + i]);
      double e = eps[b * per + i];
      v->h_eps[b * per + i] = (float)e;
      z[b * per + i] = (float)(mu + exp(0.5 * lv) * e);
      kl_sum += 0.5 * ((double)mu * mu + exp(lv) - 1.0 - lv);
    }
  be->upload(zin->data, z, per * B * sizeof(float));
  cohort_vae_graph_forward(v, dec, B);
  be->mse_forward(v->losses, y->data, v->target, B, (int)D);
  g_autofree float *losses = g_new(float, B);
  be->download(losses, v->losses, (size_t)B * sizeof(float));
  double r = 0;
  for (int b = 0; b < B; b++)
    r += losses[b];
  r /= B;
  double k = kl_sum / ((double)per * B);
  if (rec)
    *rec = r;
  if (kl)
    *kl = k;
  v->last_B = B;
  v->kl_weight = kl_weight;
  return (float)(r + kl_weight * k);
}

void cohort_vae_train_backward(CohortVae *v)
{
  g_return_if_fail(v->use & COHORT_VAE_TRAIN);
  g_return_if_fail(v->last_B > 0);
  const CohortBackend *be = v->be;
  int B = v->last_B;
  VaeGraph *enc = &v->enc, *dec = &v->dec;
  VaeTensor *m = vae_tensor(enc, enc->output);
  VaeTensor *zin = vae_tensor(dec, dec->input), *y = vae_tensor(dec, dec->output);
  size_t D = (size_t)y->C * y->H * y->W, per = (size_t)zin->C * zin->H * zin->W;
  be->mse_backward(y->grad, y->data, v->target, B, (int)D, 1.0f / (float)B);
  cohort_vae_graph_backward(v, dec, B, TRUE);
  g_autofree float *dz = g_new(float, per *B);
  be->download(dz, zin->grad, per * B * sizeof(float));
  double kw = v->kl_weight / ((double)per * B);
  for (int b = 0; b < B; b++)
    for (size_t i = 0; i < per; i++) {
      float mu = v->h_moments[2 * b * per + i], raw = v->h_moments[(2 * b + 1) * per + i];
      float lv = clamp_lv(raw);
      double g = dz[b * per + i];
      /* clamp's gradient is zero outside its range, as torch.clamp's */
      double inside = raw >= VAE_LOGVAR_MIN && raw <= VAE_LOGVAR_MAX ? 1.0 : 0.0;
      v->h_dmoments[2 * b * per + i] = (float)(g + kw * mu);
      v->h_dmoments[(2 * b + 1) * per + i] =
          (float)(inside *
                  (g * 0.5 * exp(0.5 * lv) * v->h_eps[b * per + i] + kw * 0.5 * (exp(lv) - 1.0)));
    }
  be->upload(m->grad, v->h_dmoments, 2 * per * B * sizeof(float));
  cohort_vae_graph_backward(v, enc, B, FALSE);
}
