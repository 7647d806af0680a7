/* The CUDA backend's VAE ops (GroupNorm, nearest up-sampling, zero padding, channel bias, the
 * softmax of rows) against the CPU backend's (tests/test-layers-vae.c checks those against
 * finite differences and PyTorch): |cuda - cpu| <= atol + rtol · |cpu| with the tolerances at
 * each check. Backward passes must accumulate onto what the gradient held. Skipped, with the
 * runtime's reason, without a CUDA device. */
#include "cuda-check.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"

#include <glib.h>
#include <math.h>

static void gn_case(int B, int C, int HW, int G, gboolean affine, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  size_t n = (size_t)B * C * HW, s = (size_t)B * G;
  float *x = rand_floats(r, n, -2, 3), *w = rand_floats(r, C, -1, 1), *b = rand_floats(r, C, -1, 1);
  float *dy = rand_floats(r, n, -1, 1), *start = rand_floats(r, n, -1, 1);
  float *c_x = on_cpu(x, n * 4), *g_x = on_gpu(x, n * 4);
  float *c_w = affine ? on_cpu(w, C * 4) : NULL, *g_w = affine ? on_gpu(w, C * 4) : NULL;
  float *c_b = affine ? on_cpu(b, C * 4) : NULL, *g_b = affine ? on_gpu(b, C * 4) : NULL;
  float *c_dy = on_cpu(dy, n * 4), *g_dy = on_gpu(dy, n * 4);
  float *c_y = cpu->alloc(n * 4), *g_y = gpu->alloc(n * 4);
  float *c_m = cpu->alloc(s * 4), *g_m = gpu->alloc(s * 4);
  float *c_r = cpu->alloc(s * 4), *g_r = gpu->alloc(s * 4);
  float *c_dx = on_cpu(start, n * 4), *g_dx = on_gpu(start, n * 4);
  float *c_dw = on_cpu(w, C * 4), *g_dw = on_gpu(w, C * 4);
  float *c_db = on_cpu(b, C * 4), *g_db = on_gpu(b, C * 4);
  g_autofree char *shape = g_strdup_printf("B=%d C=%d HW=%d G=%d", B, C, HW, G);
  g_autofree char *w1 = g_strdup_printf("group_norm_forward y %s", shape);
  g_autofree char *w2 = g_strdup_printf("group_norm_forward rstd %s", shape);
  g_autofree char *w3 = g_strdup_printf("group_norm_backward dx %s", shape);
  g_autofree char *w4 = g_strdup_printf("group_norm_backward dw %s", shape);
  g_autofree char *w5 = g_strdup_printf("group_norm_backward db %s", shape);
  cpu->group_norm_forward(c_y, c_m, c_r, c_x, c_w, c_b, B, C, HW, G, 1e-6f);
  gpu->group_norm_forward(g_y, g_m, g_r, g_x, g_w, g_b, B, C, HW, G, 1e-6f);
  /* statistics in double on both sides */
  expect_close(w1, c_y, g_y, n, 1e-6, 1e-5);
  expect_close(w2, c_r, g_r, s, 1e-7, 1e-6);
  gpu->upload(g_m, c_m, s * 4);
  gpu->upload(g_r, c_r, s * 4);
  cpu->group_norm_backward(c_dx, affine ? c_dw : NULL, affine ? c_db : NULL, c_dy, c_x, c_w, c_m,
                           c_r, B, C, HW, G);
  gpu->group_norm_backward(g_dx, affine ? g_dw : NULL, affine ? g_db : NULL, g_dy, g_x, g_w, g_m,
                           g_r, B, C, HW, G);
  expect_close(w3, c_dx, g_dx, n, 1e-5, 1e-4);
  expect_close(w4, c_dw, g_dw, C, 1e-5, 1e-5);
  expect_close(w5, c_db, g_db, C, 1e-5, 1e-5);
  float *cb[] = {c_x, c_w, c_b, c_dy, c_y, c_m, c_r, c_dx, c_dw, c_db};
  float *gb[] = {g_x, g_w, g_b, g_dy, g_y, g_m, g_r, g_dx, g_dw, g_db};
  for (size_t i = 0; i < G_N_ELEMENTS(cb); i++)
    cpu->free(cb[i]), gpu->free(gb[i]);
  g_free(x), g_free(w), g_free(b), g_free(dy), g_free(start);
}

static void test_group_norm(void)
{
  if (!need_gpu())
    return;
  gn_case(2, 64, 37, 32, TRUE, 401);
  gn_case(3, 8, 5, 8, FALSE, 402);
  gn_case(1, 128, 4096, 32, TRUE, 403); /* SD's VAE at 64x64: many values per block */
}

/* Up-sampling, padding and channel bias, forward and (accumulating) backward. */
static void resample_case(int B, int C, int H, int W, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  size_t n = (size_t)B * C * H * W, nu = n * 4, np = (size_t)B * C * (H + 1) * (W + 3);
  float *x = rand_floats(r, n, -1, 1), *du = rand_floats(r, nu, -1, 1);
  float *dp = rand_floats(r, np, -1, 1), *start = rand_floats(r, n, -1, 1);
  float *bias = rand_floats(r, C, -1, 1), *dbs = rand_floats(r, C, -1, 1);
  float *c_x = on_cpu(x, n * 4), *g_x = on_gpu(x, n * 4);
  float *c_du = on_cpu(du, nu * 4), *g_du = on_gpu(du, nu * 4);
  float *c_dp = on_cpu(dp, np * 4), *g_dp = on_gpu(dp, np * 4);
  float *c_u = cpu->alloc(nu * 4), *g_u = gpu->alloc(nu * 4);
  float *c_p = cpu->alloc(np * 4), *g_p = gpu->alloc(np * 4);
  float *c_d = on_cpu(start, n * 4), *g_d = on_gpu(start, n * 4);
  float *c_bias = on_cpu(bias, C * 4), *g_bias = on_gpu(bias, C * 4);
  float *c_db = on_cpu(dbs, C * 4), *g_db = on_gpu(dbs, C * 4);
  cpu->upsample_nearest_forward(c_u, c_x, B, C, H, W, 2);
  gpu->upsample_nearest_forward(g_u, g_x, B, C, H, W, 2);
  expect_close("upsample_nearest_forward", c_u, g_u, nu, 0, 0);
  cpu->upsample_nearest_backward(c_d, c_du, B, C, H, W, 2);
  gpu->upsample_nearest_backward(g_d, g_du, B, C, H, W, 2);
  expect_close("upsample_nearest_backward", c_d, g_d, n, 1e-6, 1e-6);
  cpu->pad2d_forward(c_p, c_x, B, C, H, W, 0, 1, 2, 1);
  gpu->pad2d_forward(g_p, g_x, B, C, H, W, 0, 1, 2, 1);
  expect_close("pad2d_forward", c_p, g_p, np, 0, 0);
  cpu->pad2d_backward(c_d, c_dp, B, C, H, W, 0, 1, 2, 1);
  gpu->pad2d_backward(g_d, g_dp, B, C, H, W, 0, 1, 2, 1);
  expect_close("pad2d_backward", c_d, g_d, n, 1e-6, 1e-6);
  cpu->channel_bias_forward(c_x, c_bias, B, C, H * W);
  gpu->channel_bias_forward(g_x, g_bias, B, C, H * W);
  expect_close("channel_bias_forward", c_x, g_x, n, 0, 0);
  cpu->channel_bias_backward(c_db, c_x, B, C, H * W);
  gpu->channel_bias_backward(g_db, g_x, B, C, H * W);
  expect_close("channel_bias_backward", c_db, g_db, C, 1e-5, 1e-6);
  float *cb[] = {c_x, c_du, c_dp, c_u, c_p, c_d, c_bias, c_db};
  float *gb[] = {g_x, g_du, g_dp, g_u, g_p, g_d, g_bias, g_db};
  for (size_t i = 0; i < G_N_ELEMENTS(cb); i++)
    cpu->free(cb[i]), gpu->free(gb[i]);
  g_free(x), g_free(du), g_free(dp), g_free(start), g_free(bias), g_free(dbs);
}

static void test_resample(void)
{
  if (!need_gpu())
    return;
  resample_case(2, 3, 5, 7, 411);
  resample_case(1, 128, 64, 64, 412);
}

static void softmax_case(int N, int V, float scale, double spread, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  size_t n = (size_t)N * V;
  float *x = rand_floats(r, n, -spread, spread), *dy = rand_floats(r, n, -1, 1);
  float *c_x = on_cpu(x, n * 4), *g_x = on_gpu(x, n * 4);
  float *c_dy = on_cpu(dy, n * 4), *g_dy = on_gpu(dy, n * 4);
  float *c_y = cpu->alloc(n * 4), *g_y = gpu->alloc(n * 4);
  g_autofree char *w1 = g_strdup_printf("softmax_forward N=%d V=%d", N, V);
  g_autofree char *w2 = g_strdup_printf("softmax_backward N=%d V=%d (in place)", N, V);
  cpu->softmax_forward(c_y, c_x, N, V, scale);
  gpu->softmax_forward(g_y, g_x, N, V, scale);
  expect_close(w1, c_y, g_y, n, 1e-7, 1e-5);
  gpu->upload(g_y, c_y, n * 4);
  cpu->softmax_backward(c_dy, c_y, c_dy, N, V, scale);
  gpu->softmax_backward(g_dy, g_y, g_dy, N, V, scale);
  expect_close(w2, c_dy, g_dy, n, 1e-7, 1e-5);
  cpu->free(c_x), cpu->free(c_dy), cpu->free(c_y);
  gpu->free(g_x), gpu->free(g_dy), gpu->free(g_y);
  g_free(x), g_free(dy);
}

static void test_softmax(void)
{
  if (!need_gpu())
    return;
  softmax_case(7, 33, 0.5f, 4.0, 421);
  softmax_case(1024, 1024, 1.0f / sqrtf(512.0f), 30.0, 422); /* SD's VAE mid-block at 256 px */
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  cpu = cohort_backend_cpu();
  gpu = cohort_backend_cuda();
  cpu->set_threads(1);
  n_devices = cohort_cuda_device_count();
  if (n_devices > 0 && cohort_cuda_set_device(0) != 0)
    g_error("cannot use CUDA device 0: %s", cohort_cuda_last_error());
  g_test_add_func("/cuda-vae/group-norm", test_group_norm);
  g_test_add_func("/cuda-vae/resample", test_resample);
  g_test_add_func("/cuda-vae/softmax", test_softmax);
  return g_test_run();
}
