/* The CUDA backend's kl_div_forward / kl_div_backward against the CPU backend's
 * (tests/test-layers-kl.c checks those against finite differences and PyTorch), at
 * temperatures 1 and 4, the byte-level vocabulary, a large one with logits spread over ±80,
 * and more rows than one grid holds: |cuda - cpu| <= atol + rtol · |cpu| with the tolerances
 * at each check. Backward must accumulate onto what dstudent held. Skipped, with the runtime's
 * reason, without a CUDA device. */
#include "cuda-check.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"

#include <glib.h>
#include <math.h>

static void kl_case(int N, int V, float tau, double spread, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  size_t n = (size_t)N * V;
  float *s = rand_floats(r, n, -spread, spread), *t = rand_floats(r, n, -spread, spread);
  float *start = rand_floats(r, n, -1, 1);
  float *c_s = on_cpu(s, n * 4), *g_s = on_gpu(s, n * 4);
  float *c_t = on_cpu(t, n * 4), *g_t = on_gpu(t, n * 4);
  float *c_d = on_cpu(start, n * 4), *g_d = on_gpu(start, n * 4);
  float *c_l = cpu->alloc((size_t)N * 4), *g_l = gpu->alloc((size_t)N * 4);
  float *c_lse = cpu->alloc((size_t)N * 8), *g_lse = gpu->alloc((size_t)N * 8);
  g_autofree char *shape = g_strdup_printf("N=%d V=%d tau=%g spread=%g", N, V, tau, spread);
  g_autofree char *w1 = g_strdup_printf("kl_div_forward losses %s", shape);
  g_autofree char *w2 = g_strdup_printf("kl_div_forward lse %s", shape);
  g_autofree char *w3 = g_strdup_printf("kl_div_backward dstudent %s", shape);
  cpu->kl_div_forward(c_l, c_lse, c_s, c_t, N, V, tau);
  gpu->kl_div_forward(g_l, g_lse, g_s, g_t, N, V, tau);
  /* double sums on both sides: the difference is the exponentials' rounding */
  expect_close(w1, c_l, g_l, N, 1e-6, 1e-5);
  expect_close(w2, c_lse, g_lse, 2 * (size_t)N, 1e-6, 1e-6);
  gpu->upload(g_lse, c_lse, (size_t)N * 8);
  cpu->kl_div_backward(c_d, c_s, c_t, c_lse, N, V, tau, 0.37f);
  gpu->kl_div_backward(g_d, g_s, g_t, g_lse, N, V, tau, 0.37f);
  expect_close(w3, c_d, g_d, n, 1e-7, 1e-6);
  float *cb[] = {c_s, c_t, c_d, c_l, c_lse}, *gb[] = {g_s, g_t, g_d, g_l, g_lse};
  for (size_t i = 0; i < G_N_ELEMENTS(cb); i++)
    cpu->free(cb[i]), gpu->free(gb[i]);
  g_free(s), g_free(t), g_free(start);
}

static void test_kl_div(void)
{
  if (!need_gpu())
    return;
  kl_case(7, 50, 1.0f, 3.0, 301);
  kl_case(7, 50, 4.0f, 3.0, 302);
  kl_case(64, 256, 2.0f, 5.0, 303);  /* the byte-level GPT's vocabulary */
  kl_case(3, 5000, 1.0f, 80.0, 304); /* many values per thread; exp(80) overflows unshifted */
  kl_case(70000, 3, 4.0f, 2.0, 305); /* more rows than blocks in the grid */
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
  g_test_add_func("/cuda-kl/kl-div", test_kl_div);
  return g_test_run();
}
