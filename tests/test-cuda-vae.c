/* The VAE on the CUDA backend against the same VAE on the CPU (tests/test-vae.c checks the CPU
 * against PyTorch): diffusers' initialisation from one seed on both, then the posterior's
 * moments of a batch, the decoded images of latents, and a training step's loss and parameter
 * gradients, |cuda − cpu| <= 1e-4 · the largest |cpu| value of each output (sums taken in
 * another order through several layers). Skipped, with the runtime's reason, without a CUDA
 * device. */
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"
#include "engine/models/vae.h"

#include <glib.h>
#include <math.h>

static int n_devices;

static const CohortVaeConfig cfg = {
    .in_channels = 3,
    .out_channels = 3,
    .n_blocks = 3,
    .block_out_channels = {32, 32, 64},
    .layers_per_block = 2,
    .latent_channels = 4,
    .norm_num_groups = 32,
    .scaling_factor = 0.18215,
    .use_quant_conv = TRUE,
    .use_post_quant_conv = TRUE,
    .mid_block_add_attention = TRUE,
    .sample_size = 32,
};

static void expect_rel(const char *what, const float *gpu, const float *cpu, size_t n)
{
  double mx = 0, worst = 0;
  for (size_t i = 0; i < n; i++)
    mx = fmax(mx, fabs(cpu[i]));
  for (size_t i = 0; i < n; i++)
    worst = fmax(worst, fabs(gpu[i] - cpu[i]));
  g_test_message("%s: %zu values, largest |cuda - cpu| %.2e of the largest %.3g", what, n, worst,
                 mx);
  g_assert_cmpfloat(worst, <=, 1e-4 * mx);
}

static float *rand_floats(size_t n, guint32 seed)
{
  GRand *r = g_rand_new_with_seed(seed);
  float *x = g_new(float, n);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)g_rand_double_range(r, -1, 1);
  g_rand_free(r);
  return x;
}

static void test_encode_decode(void)
{
  if (n_devices == 0) {
    g_test_skip(cohort_cuda_probe_error() ? cohort_cuda_probe_error() : "no CUDA device");
    return;
  }
  enum { B = 2, S = 32, s = 8, D = 3 * S * S, L = 4 * s * s };
  CohortVaeUse use = COHORT_VAE_ENCODE | COHORT_VAE_DECODE;
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) c = cohort_vae_new(cohort_backend_cpu(), &cfg, use, B, S, 3, &error);
  g_autoptr(CohortVae) g = cohort_vae_new(cohort_backend_cuda(), &cfg, use, B, S, 3, &error);
  g_assert_no_error(error);
  g_autofree float *img = rand_floats(B * D, 1), *z = rand_floats(B * L, 2);
  float mc[B * 2 * L], mg[B * 2 * L];
  g_autofree float *dc = g_new(float, B *D), *dg = g_new(float, B *D);
  cohort_vae_encode_moments(c, img, B, mc);
  cohort_vae_encode_moments(g, img, B, mg);
  g_assert_null(cohort_cuda_last_error());
  expect_rel("encode moments", mg, mc, B * 2 * L);
  cohort_vae_decode_raw(c, z, B, dc);
  cohort_vae_decode_raw(g, z, B, dg);
  g_assert_null(cohort_cuda_last_error());
  expect_rel("decode", dg, dc, B * D);
}

static void test_train_step(void)
{
  if (n_devices == 0) {
    g_test_skip(cohort_cuda_probe_error() ? cohort_cuda_probe_error() : "no CUDA device");
    return;
  }
  enum { B = 2, S = 32, s = 8, D = 3 * S * S, L = 4 * s * s };
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortVae) c =
      cohort_vae_new(cohort_backend_cpu(), &cfg, COHORT_VAE_TRAIN, B, S, 4, &error);
  g_autoptr(CohortVae) g =
      cohort_vae_new(cohort_backend_cuda(), &cfg, COHORT_VAE_TRAIN, B, S, 4, &error);
  g_assert_no_error(error);
  g_autofree float *img = rand_floats(B * D, 5), *eps = rand_floats(B * L, 6);
  float lc = cohort_vae_train_forward(c, img, eps, B, 0.01f, NULL, NULL);
  float lg = cohort_vae_train_forward(g, img, eps, B, 0.01f, NULL, NULL);
  g_test_message("loss: cpu %.8g, cuda %.8g", lc, lg);
  g_assert_cmpfloat(fabs(lc - lg), <=, 1e-4 * fabs(lc));
  size_t n = cohort_vae_n_params(c);
  cohort_backend_cpu()->zero(cohort_vae_grads(c), n * 4);
  cohort_backend_cuda()->zero(cohort_vae_grads(g), n * 4);
  cohort_vae_train_backward(c);
  cohort_vae_train_backward(g);
  g_autofree float *gc = g_new(float, n), *gg = g_new(float, n);
  cohort_backend_cpu()->download(gc, cohort_vae_grads(c), n * 4);
  cohort_backend_cuda()->download(gg, cohort_vae_grads(g), n * 4);
  g_assert_null(cohort_cuda_last_error());
  for (guint t = 0; t < cohort_vae_n_tensors(c); t++) {
    size_t off, numel;
    g_assert_true(cohort_vae_find_param(c, cohort_vae_tensor_name(c, t), &off, &numel));
    double mx = 0, worst = 0;
    for (size_t i = off; i < off + numel; i++) {
      mx = fmax(mx, fabs(gc[i]));
      worst = fmax(worst, fabs(gg[i] - gc[i]));
    }
    if (worst > 1e-3 * mx + 1e-7)
      g_error("%s: gradient |cuda - cpu| %.3g of the largest %.3g", cohort_vae_tensor_name(c, t),
              worst, mx);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cohort_backend_cpu()->set_threads(1);
  n_devices = cohort_cuda_device_count();
  if (n_devices > 0 && cohort_cuda_set_device(0) != 0)
    g_error("cannot use CUDA device 0: %s", cohort_cuda_last_error());
  g_test_add_func("/cuda-vae/encode-decode", test_encode_decode);
  g_test_add_func("/cuda-vae/train-step", test_train_step);
  return g_test_run();
}
