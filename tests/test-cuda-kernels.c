/* The CUDA backend against the CPU backend: every op of the table on random inputs, fp32,
 * with the tolerance stated at each check (|cuda - cpu| <= atol + rtol * |cpu|). Without a
 * CUDA device every case that needs one is skipped with the runtime's reason; the probe cases
 * run everywhere and check that nothing fails hard without a GPU. */
#include "cuda-check.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"

#include <glib.h>
#include <math.h>
#include <string.h>

static void test_probe(void)
{
  /* Runs everywhere: the count never fails, and a bad device index is an error, not a crash. */
  int n = cohort_cuda_device_count();
  g_assert_cmpint(n, >=, 0);
  if (n == 0)
    g_assert_nonnull(cohort_cuda_probe_error());
  else
    g_assert_null(cohort_cuda_probe_error());
  g_assert_cmpint(cohort_cuda_set_device(n), ==, -1);
  g_assert_nonnull(cohort_cuda_last_error());
  g_assert_nonnull(strstr(cohort_cuda_last_error(), "does not exist"));
  cohort_cuda_clear_error();
  g_assert_null(cohort_cuda_last_error());
  CohortCudaDeviceInfo info;
  g_assert_cmpint(cohort_cuda_device_info(-1, &info), ==, -1);
  cohort_cuda_clear_error();
  g_assert_cmpint(cohort_cuda_can_access_peer(0, 0), ==, 0);
  g_assert_cmpstr(cohort_backend_cuda()->name, ==, "cuda");
}

static void test_no_device_alloc(void)
{
  if (n_devices > 0) {
    g_test_skip("a CUDA device is present: this case checks the behaviour without one");
    return;
  }
  /* Without a device the table still answers: no memory, and the reason is recorded. */
  void *p = gpu->alloc(1024);
  g_assert_null(p);
  g_assert_nonnull(cohort_cuda_last_error());
  g_assert_cmpint(cohort_cuda_synchronize(), ==, -1);
  cohort_cuda_clear_error();
}

static void test_device_info(void)
{
  if (!need_gpu())
    return;
  CohortCudaDeviceInfo info;
  g_assert_cmpint(cohort_cuda_device_info(0, &info), ==, 0);
  g_assert_cmpuint(strlen(info.name), >, 0);
  g_assert_cmpuint(info.total_bytes, >, 0);
  g_assert_cmpint(info.cc_major, >=, 8); /* the build targets sm_80 and newer */
  size_t free_b = 0, total_b = 0;
  g_assert_cmpint(cohort_cuda_memory(&free_b, &total_b), ==, 0);
  g_assert_cmpuint(free_b, <=, total_b);
  g_assert_cmpint(cohort_cuda_get_device(), ==, 0);
  g_test_message("device 0: %s, %.1f GiB, compute %d.%d, %d SMs", info.name,
                 info.total_bytes / 1073741824.0, info.cc_major, info.cc_minor, info.sm_count);
}

static const char *const mode_names[] = {"fp32", "tf32", "bf16", "fp16"};

/* One GEMM of each transpose combination, with row strides wider than the rows, in GEMM mode
 * `mode` on both backends (the CPU computes tf32 as fp32, and bf16/fp16 as fp32 products of
 * the rounded operands). */
static void gemm_case(int ta, int tb, CohortGemmMode mode)
{
  enum { M = 37, N = 29, K = 53, PAD = 3 };
  g_autoptr(GRand) r = g_rand_new_with_seed(100 + 2 * ta + tb);
  int a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + PAD;
  int b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + PAD;
  int ldc = N + PAD;
  size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)M * ldc;
  float *a = rand_floats(r, na, -1, 1), *b = rand_floats(r, nb, -1, 1);
  float *c = rand_floats(r, nc, -1, 1);
  float *ca = on_cpu(a, na * 4), *cb = on_cpu(b, nb * 4), *cc = on_cpu(c, nc * 4);
  float *ga = on_gpu(a, na * 4), *gb = on_gpu(b, nb * 4), *gc = on_gpu(c, nc * 4);
  cpu->set_gemm_mode(mode);
  gpu->set_gemm_mode(mode);
  g_assert_cmpint(gpu->get_gemm_mode(), ==, mode);
  cpu->gemm(ta, tb, M, N, K, 0.7f, ca, lda, cb, ldb, 0.3f, cc, ldc);
  gpu->gemm(ta, tb, M, N, K, 0.7f, ga, lda, gb, ldb, 0.3f, gc, ldc);
  cpu->set_gemm_mode(COHORT_GEMM_FP32);
  gpu->set_gemm_mode(COHORT_GEMM_FP32);
  g_autofree char *what = g_strdup_printf("gemm ta=%d tb=%d %s", ta, tb, mode_names[mode]);
  /* fp32: sums of 53 products of values in [-1, 1]. TF32 keeps 10 mantissa bits of each
   * operand, and the CPU has none. bf16/fp16: both backends multiply the same rounded
   * operands exactly and add in fp32, so only the order of the sums differs. */
  if (mode == COHORT_GEMM_TF32)
    expect_close(what, cc, gc, nc, 2e-2, 1e-2);
  else
    expect_close(what, cc, gc, nc, 2e-5, 1e-5);
  cpu->free(ca), cpu->free(cb), cpu->free(cc);
  gpu->free(ga), gpu->free(gb), gpu->free(gc);
  g_free(a), g_free(b), g_free(c);
}

static void test_gemm_mode(gconstpointer data)
{
  if (!need_gpu())
    return;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      gemm_case(ta, tb, (CohortGemmMode)GPOINTER_TO_INT(data));
}

/* fp16's range on the GPU as on the CPU: an operand past 65504 gives inf. */
static void test_gemm_fp16_overflow(void)
{
  if (!need_gpu())
    return;
  float a[2] = {70000.0f, 1.0f}, b[2] = {1.0f, 1.0f}, c = 0;
  float *ga = on_gpu(a, sizeof a), *gb = on_gpu(b, sizeof b), *gc = on_gpu(&c, sizeof c);
  gpu->set_gemm_mode(COHORT_GEMM_FP16);
  gpu->gemm(0, 0, 1, 1, 2, 1.0f, ga, 2, gb, 1, 0.0f, gc, 1);
  gpu->set_gemm_mode(COHORT_GEMM_FP32);
  gpu->download(&c, gc, sizeof c);
  assert_no_cuda_error("gemm fp16 overflow");
  g_assert_true(isinf(c));
  gpu->free(ga), gpu->free(gb), gpu->free(gc);
}

/* The bf16 conversions of the gradient all-reduce: the same bits as the CPU's. */
static void test_bf16_conversions(void)
{
  if (!need_gpu())
    return;
  const size_t n = 1000003;
  g_autoptr(GRand) r = g_rand_new_with_seed(77);
  g_autofree float *x = rand_floats(r, n, -3e4, 3e4);
  x[0] = INFINITY, x[1] = -0.0f, x[2] = 1e-40f, x[3] = 3.3961776e38f;
  g_autofree guint16 *want_h = g_new(guint16, n);
  g_autofree guint16 *got_h = g_new(guint16, n);
  g_autofree float *want_f = g_new(float, n);
  cpu->to_bf16(want_h, x, n);
  cpu->from_bf16(want_f, want_h, n, 0.25f);
  float *gx = on_gpu(x, n * sizeof(float));
  guint16 *gh = gpu->alloc(n * sizeof(guint16));
  float *gf = gpu->alloc(n * sizeof(float));
  gpu->to_bf16(gh, gx, n);
  gpu->from_bf16(gf, gh, n, 0.25f);
  gpu->download(got_h, gh, n * sizeof(guint16));
  assert_no_cuda_error("to_bf16");
  g_assert_cmpmem(got_h, n * sizeof(guint16), want_h, n * sizeof(guint16));
  expect_close("from_bf16", want_f, gf, n, 0, 0);
  gpu->free(gx), gpu->free(gh), gpu->free(gf);
}

static void test_bias(void)
{
  if (!need_gpu())
    return;
  enum { N = 300, COLS = 77 }; /* several row chunks, a partial column stripe */
  g_autoptr(GRand) r = g_rand_new_with_seed(7);
  float *out = rand_floats(r, N * COLS, -1, 1), *bias = rand_floats(r, COLS, -1, 1);
  float *dout = rand_floats(r, N * COLS, -1, 1), *db = rand_floats(r, COLS, -1, 1);
  float *c_out = on_cpu(out, sizeof(float) * N * COLS),
        *g_out = on_gpu(out, sizeof(float) * N * COLS);
  float *c_bias = on_cpu(bias, sizeof(float) * COLS), *g_bias = on_gpu(bias, sizeof(float) * COLS);
  float *c_dout = on_cpu(dout, sizeof(float) * N * COLS);
  float *g_dout = on_gpu(dout, sizeof(float) * N * COLS);
  float *c_db = on_cpu(db, sizeof(float) * COLS), *g_db = on_gpu(db, sizeof(float) * COLS);
  cpu->add_bias(c_out, c_bias, N, COLS);
  gpu->add_bias(g_out, g_bias, N, COLS);
  expect_close("add_bias", c_out, g_out, N * COLS, 0, 0); /* one add per element: exact */
  cpu->bias_backward(c_db, c_dout, N, COLS);
  gpu->bias_backward(g_db, g_dout, N, COLS);
  expect_close("bias_backward (accumulates)", c_db, g_db, COLS, 1e-5, 1e-5);
  cpu->free(c_out), cpu->free(c_bias), cpu->free(c_dout), cpu->free(c_db);
  gpu->free(g_out), gpu->free(g_bias), gpu->free(g_dout), gpu->free(g_db);
  g_free(out), g_free(bias), g_free(dout), g_free(db);
}

static void test_embedding(void)
{
  if (!need_gpu())
    return;
  enum { B = 3, T = 17, C = 40, V = 11 }; /* a small vocabulary: tokens repeat */
  g_autoptr(GRand) r = g_rand_new_with_seed(11);
  int *tok = rand_ints(r, B * T, V);
  float *wte = rand_floats(r, V * C, -1, 1), *wpe = rand_floats(r, T * C, -1, 1);
  float *dout = rand_floats(r, B * T * C, -1, 1);
  int *c_tok = on_cpu(tok, sizeof(int) * B * T), *g_tok = on_gpu(tok, sizeof(int) * B * T);
  float *c_wte = on_cpu(wte, sizeof(float) * V * C), *g_wte = on_gpu(wte, sizeof(float) * V * C);
  float *c_wpe = on_cpu(wpe, sizeof(float) * T * C), *g_wpe = on_gpu(wpe, sizeof(float) * T * C);
  float *c_out = cpu->alloc(sizeof(float) * B * T * C),
        *g_out = gpu->alloc(sizeof(float) * B * T * C);
  cpu->embedding_forward(c_out, c_tok, c_wte, c_wpe, B, T, C);
  gpu->embedding_forward(g_out, g_tok, g_wte, g_wpe, B, T, C);
  expect_close("embedding_forward", c_out, g_out, B * T * C, 0, 0); /* one add: exact */
  /* backward accumulates into the (random) tables; both sum positions in the same order */
  float *c_dout = on_cpu(dout, sizeof(float) * B * T * C);
  float *g_dout = on_gpu(dout, sizeof(float) * B * T * C);
  cpu->embedding_backward(c_wte, c_wpe, c_dout, c_tok, B, T, C);
  gpu->embedding_backward(g_wte, g_wpe, g_dout, g_tok, B, T, C);
  expect_close("embedding_backward dwte", c_wte, g_wte, V * C, 1e-6, 1e-6);
  expect_close("embedding_backward dwpe", c_wpe, g_wpe, T * C, 1e-6, 1e-6);
  cpu->free(c_tok), cpu->free(c_wte), cpu->free(c_wpe), cpu->free(c_out), cpu->free(c_dout);
  gpu->free(g_tok), gpu->free(g_wte), gpu->free(g_wpe), gpu->free(g_out), gpu->free(g_dout);
  g_free(tok), g_free(wte), g_free(wpe), g_free(dout);
}

static void test_layernorm(void)
{
  if (!need_gpu())
    return;
  enum { N = 70, C = 100 };
  g_autoptr(GRand) r = g_rand_new_with_seed(13);
  size_t nc = (size_t)N * C;
  float *x = rand_floats(r, nc, -2, 3), *w = rand_floats(r, C, 0.5, 1.5);
  float *b = rand_floats(r, C, -0.5, 0.5), *dout = rand_floats(r, nc, -1, 1);
  float *dinp = rand_floats(r, nc, -1, 1), *dw = rand_floats(r, C, -1, 1);
  float *db = rand_floats(r, C, -1, 1);
  float *c_x = on_cpu(x, nc * 4), *c_w = on_cpu(w, C * 4), *c_b = on_cpu(b, C * 4);
  float *g_x = on_gpu(x, nc * 4), *g_w = on_gpu(w, C * 4), *g_b = on_gpu(b, C * 4);
  float *c_out = cpu->alloc(nc * 4), *c_mean = cpu->alloc(N * 4), *c_rstd = cpu->alloc(N * 4);
  float *g_out = gpu->alloc(nc * 4), *g_mean = gpu->alloc(N * 4), *g_rstd = gpu->alloc(N * 4);
  cpu->layernorm_forward(c_out, c_mean, c_rstd, c_x, c_w, c_b, N, C, 1e-5f);
  gpu->layernorm_forward(g_out, g_mean, g_rstd, g_x, g_w, g_b, N, C, 1e-5f);
  expect_close("layernorm_forward out", c_out, g_out, nc, 1e-5, 1e-5);
  expect_close("layernorm_forward mean", c_mean, g_mean, N, 1e-6, 1e-5);
  expect_close("layernorm_forward rstd", c_rstd, g_rstd, N, 1e-6, 1e-5);
  float *c_dout = on_cpu(dout, nc * 4), *g_dout = on_gpu(dout, nc * 4);
  float *c_dinp = on_cpu(dinp, nc * 4), *g_dinp = on_gpu(dinp, nc * 4);
  float *c_dw = on_cpu(dw, C * 4), *g_dw = on_gpu(dw, C * 4);
  float *c_db = on_cpu(db, C * 4), *g_db = on_gpu(db, C * 4);
  /* both from the CPU's mean and rstd, so the backward is compared on its own */
  gpu->upload(g_mean, c_mean, N * 4);
  gpu->upload(g_rstd, c_rstd, N * 4);
  cpu->layernorm_backward(c_dinp, c_dw, c_db, c_dout, c_x, c_w, c_mean, c_rstd, N, C);
  gpu->layernorm_backward(g_dinp, g_dw, g_db, g_dout, g_x, g_w, g_mean, g_rstd, N, C);
  expect_close("layernorm_backward dinp", c_dinp, g_dinp, nc, 1e-5, 1e-4);
  expect_close("layernorm_backward dw", c_dw, g_dw, C, 1e-5, 1e-4);
  expect_close("layernorm_backward db", c_db, g_db, C, 1e-5, 1e-5);
  float *cbufs[] = {c_x, c_w, c_b, c_out, c_mean, c_rstd, c_dout, c_dinp, c_dw, c_db};
  float *gbufs[] = {g_x, g_w, g_b, g_out, g_mean, g_rstd, g_dout, g_dinp, g_dw, g_db};
  for (size_t i = 0; i < G_N_ELEMENTS(cbufs); i++) {
    cpu->free(cbufs[i]);
    gpu->free(gbufs[i]);
  }
  g_free(x), g_free(w), g_free(b), g_free(dout), g_free(dinp), g_free(dw), g_free(db);
}

static void test_attention(void)
{
  if (!need_gpu())
    return;
  cuda_check_attention(2, 45, 48, 3, 21, 1);  /* head size 16, T not a multiple of the tiles */
  cuda_check_attention(1, 70, 128, 2, 22, 1); /* head size 64 (GPT-2's) */
  cuda_check_attention(1, 33, 128, 1, 23, 1); /* head size 128, the largest */
  cuda_check_attention(2, 9, 60, 2, 24, 1);   /* head size 30: lanes past the head idle */
  cuda_check_attention(1, 1, 32, 4, 25, 1);   /* one position */
}

static void test_attention_too_wide(void)
{
  if (!need_gpu())
    return;
  enum { B = 1, T = 4, C = 260, NH = 1 }; /* head size 260 > 128: an error, not a crash */
  float *qkv = gpu->alloc(sizeof(float) * B * T * 3 * C);
  float *out = gpu->alloc(sizeof(float) * B * T * C), *lse = gpu->alloc(sizeof(float) * T);
  assert_no_cuda_error("alloc");
  gpu->attention_forward(out, lse, qkv, B, T, C, NH, 1);
  const char *e = cohort_cuda_last_error();
  g_assert_nonnull(e);
  g_assert_nonnull(strstr(e, "head size 260"));
  cohort_cuda_clear_error();
  gpu->free(qkv), gpu->free(out), gpu->free(lse);
}

static void test_gelu_residual(void)
{
  if (!need_gpu())
    return;
  enum { N = 10007 };
  g_autoptr(GRand) r = g_rand_new_with_seed(31);
  float *x = rand_floats(r, N, -6, 6), *g = rand_floats(r, N, -1, 1);
  float *c_x = on_cpu(x, N * 4), *g_x = on_gpu(x, N * 4);
  float *c_g = on_cpu(g, N * 4), *g_g = on_gpu(g, N * 4);
  float *c_y = cpu->alloc(N * 4), *g_y = gpu->alloc(N * 4);
  /* the same per-element formula on both sides; only exp and division may differ in ulps */
  cpu->gelu_forward(c_y, c_x, N);
  gpu->gelu_forward(g_y, g_x, N);
  expect_close("gelu_forward", c_y, g_y, N, 1e-6, 1e-5);
  cpu->gelu_backward(c_y, c_x, c_g, N);
  gpu->gelu_backward(g_y, g_x, g_g, N);
  expect_close("gelu_backward", c_y, g_y, N, 1e-6, 1e-5);
  cpu->gelu_backward(c_g, c_x, c_g, N); /* in place: dinp == dout */
  gpu->gelu_backward(g_g, g_x, g_g, N);
  expect_close("gelu_backward in place", c_g, g_g, N, 1e-6, 1e-5);
  cpu->residual_forward(c_y, c_x, c_g, N);
  gpu->upload(g_g, c_g, N * 4); /* residual inputs identical, so the sum is exact */
  gpu->residual_forward(g_y, g_x, g_g, N);
  expect_close("residual_forward", c_y, g_y, N, 0, 0);
  cpu->free(c_x), cpu->free(c_g), cpu->free(c_y);
  gpu->free(g_x), gpu->free(g_g), gpu->free(g_y);
  g_free(x), g_free(g);
}

static void test_crossentropy(void)
{
  if (!need_gpu())
    return;
  enum { N = 13, V = 1000 }; /* V wider than a block */
  g_autoptr(GRand) r = g_rand_new_with_seed(41);
  float *x = rand_floats(r, N * V, -5, 5);
  int *t = rand_ints(r, N, V);
  float *c_x = on_cpu(x, N * V * 4), *g_x = on_gpu(x, N * V * 4);
  int *c_t = on_cpu(t, N * 4), *g_t = on_gpu(t, N * 4);
  float *c_loss = cpu->alloc(N * 4), *g_loss = gpu->alloc(N * 4);
  float *c_lse = cpu->alloc(N * 4), *g_lse = gpu->alloc(N * 4);
  float *c_d = cpu->alloc(N * V * 4), *g_d = gpu->alloc(N * V * 4);
  cpu->crossentropy_forward(c_loss, c_lse, c_x, c_t, N, V);
  gpu->crossentropy_forward(g_loss, g_lse, g_x, g_t, N, V);
  expect_close("crossentropy_forward losses", c_loss, g_loss, N, 1e-5, 1e-5);
  expect_close("crossentropy_forward lse", c_lse, g_lse, N, 1e-5, 1e-5);
  gpu->upload(g_lse, c_lse, N * 4);
  cpu->crossentropy_backward(c_d, c_x, c_lse, c_t, N, V, 1.0f / N);
  gpu->crossentropy_backward(g_d, g_x, g_lse, g_t, N, V, 1.0f / N);
  expect_close("crossentropy_backward", c_d, g_d, N * V, 1e-7, 1e-5);
  cpu->free(c_x), cpu->free(c_t), cpu->free(c_loss), cpu->free(c_lse), cpu->free(c_d);
  gpu->free(g_x), gpu->free(g_t), gpu->free(g_loss), gpu->free(g_lse), gpu->free(g_d);
  g_free(x), g_free(t);
}

static void test_optim(void)
{
  if (!need_gpu())
    return;
  enum { N = 10007 };
  g_autoptr(GRand) r = g_rand_new_with_seed(51);
  float *p = rand_floats(r, N, -1, 1), *m = rand_floats(r, N, -0.1, 0.1);
  float *v = rand_floats(r, N, 0, 0.01), *e = rand_floats(r, N, -1, 1);
  float *c_p = on_cpu(p, N * 4), *c_m = on_cpu(m, N * 4), *c_v = on_cpu(v, N * 4);
  float *g_p = on_gpu(p, N * 4), *g_m = on_gpu(m, N * 4), *g_v = on_gpu(v, N * 4);
  float *c_e = on_cpu(e, N * 4), *g_e = on_gpu(e, N * 4);
  for (int step = 1; step <= 3; step++) {
    float *g = rand_floats(r, N, -1, 1);
    float *c_g = on_cpu(g, N * 4), *g_g = on_gpu(g, N * 4);
    float bc1 = 1.0f - powf(0.9f, step), bc2 = 1.0f - powf(0.95f, step);
    cpu->adamw_update(c_p, c_g, c_m, c_v, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2);
    gpu->adamw_update(g_p, g_g, g_m, g_v, N, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2);
    cpu->free(c_g), gpu->free(g_g), g_free(g);
  }
  expect_close("adamw_update params", c_p, g_p, N, 1e-6, 1e-5);
  expect_close("adamw_update m", c_m, g_m, N, 1e-7, 1e-5);
  expect_close("adamw_update v", c_v, g_v, N, 1e-9, 1e-5);
  cpu->scale(c_p, N, 0.37f);
  gpu->upload(g_p, c_p, 0); /* no-op of size 0 must not fail */
  gpu->scale(g_p, N, 0.37f);
  expect_close("scale", c_p, g_p, N, 1e-6, 1e-5);
  cpu->ema_update(c_e, c_p, N, 0.99f);
  gpu->upload(g_p, c_p, N * 4);
  gpu->ema_update(g_e, g_p, N, 0.99f);
  expect_close("ema_update", c_e, g_e, N, 1e-6, 1e-5);
  cpu->free(c_p), cpu->free(c_m), cpu->free(c_v), cpu->free(c_e);
  gpu->free(g_p), gpu->free(g_m), gpu->free(g_v), gpu->free(g_e);
  g_free(p), g_free(m), g_free(v), g_free(e);
}

static void test_sum_squares(void)
{
  if (!need_gpu())
    return;
  g_autoptr(GRand) r = g_rand_new_with_seed(61);
  size_t sizes[] = {0, 1, 5, 1000, 1000003};
  for (size_t k = 0; k < G_N_ELEMENTS(sizes); k++) {
    size_t n = sizes[k];
    float *x = rand_floats(r, n + 1, -3, 3); /* one spare, so that n = 0 still uploads */
    float *c_x = on_cpu(x, n * 4 + 4), *g_x = on_gpu(x, n * 4 + 4);
    double want = cpu->sum_squares(c_x, n);
    double got = gpu->sum_squares(g_x, n);
    double again = gpu->sum_squares(g_x, n);
    assert_no_cuda_error("sum_squares");
    /* the squares are exact in double; only the order of the additions differs */
    g_test_message("sum_squares n=%zu: cuda %.17g, cpu %.17g", n, got, want);
    g_assert_cmpfloat(fabs(got - want), <=, 1e-12 * want);
    g_assert_true(memcmp(&got, &again, sizeof got) == 0); /* repeatable to the bit */
    cpu->free(c_x), gpu->free(g_x), g_free(x);
  }
}

/* The backward ops that sum many terms give bit-identical results when run twice. */
static void test_deterministic(void)
{
  if (!need_gpu())
    return;
  enum { B = 2, T = 64, C = 128, NH = 2, N = B * T };
  g_autoptr(GRand) r = g_rand_new_with_seed(71);
  size_t nqkv = (size_t)N * 3 * C, nc = (size_t)N * C;
  float *qkv = rand_floats(r, nqkv, -1, 1), *dout = rand_floats(r, nc, -1, 1);
  float *g_qkv = on_gpu(qkv, nqkv * 4), *g_dout = on_gpu(dout, nc * 4);
  float *g_out = gpu->alloc(nc * 4), *g_lse = gpu->alloc(sizeof(float) * B * NH * T);
  float *g_dqkv = gpu->alloc(nqkv * 4), *g_db = gpu->alloc(nc * 4);
  float *first = g_new(float, nqkv), *second = g_new(float, nqkv);
  float *db1 = g_new(float, C), *db2 = g_new(float, C);
  gpu->attention_forward(g_out, g_lse, g_qkv, B, T, C, NH, 1);
  for (int run = 0; run < 2; run++) {
    gpu->zero(g_db, C * 4);
    gpu->attention_backward(g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, C, NH, 1);
    gpu->bias_backward(g_db, g_dout, N, C);
    gpu->download(run ? second : first, g_dqkv, nqkv * 4);
    gpu->download(run ? db2 : db1, g_db, C * 4);
  }
  assert_no_cuda_error("deterministic backward");
  g_assert_true(memcmp(first, second, nqkv * 4) == 0);
  g_assert_true(memcmp(db1, db2, C * 4) == 0);
  gpu->free(g_qkv), gpu->free(g_dout), gpu->free(g_out), gpu->free(g_lse);
  gpu->free(g_dqkv), gpu->free(g_db);
  g_free(qkv), g_free(dout), g_free(first), g_free(second), g_free(db1), g_free(db2);
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
  g_test_add_func("/cuda/probe", test_probe);
  g_test_add_func("/cuda/no-device-alloc", test_no_device_alloc);
  g_test_add_func("/cuda/device-info", test_device_info);
  g_test_add_data_func("/cuda/gemm", GINT_TO_POINTER(COHORT_GEMM_FP32), test_gemm_mode);
  g_test_add_data_func("/cuda/gemm-tf32", GINT_TO_POINTER(COHORT_GEMM_TF32), test_gemm_mode);
  g_test_add_data_func("/cuda/gemm-bf16", GINT_TO_POINTER(COHORT_GEMM_BF16), test_gemm_mode);
  g_test_add_data_func("/cuda/gemm-fp16", GINT_TO_POINTER(COHORT_GEMM_FP16), test_gemm_mode);
  g_test_add_func("/cuda/gemm-fp16-overflow", test_gemm_fp16_overflow);
  g_test_add_func("/cuda/bf16-conversions", test_bf16_conversions);
  g_test_add_func("/cuda/bias", test_bias);
  g_test_add_func("/cuda/embedding", test_embedding);
  g_test_add_func("/cuda/layernorm", test_layernorm);
  g_test_add_func("/cuda/attention", test_attention);
  g_test_add_func("/cuda/attention-too-wide", test_attention_too_wide);
  g_test_add_func("/cuda/gelu-residual", test_gelu_residual);
  g_test_add_func("/cuda/crossentropy", test_crossentropy);
  g_test_add_func("/cuda/optim", test_optim);
  g_test_add_func("/cuda/sum-squares", test_sum_squares);
  g_test_add_func("/cuda/deterministic", test_deterministic);
  return g_test_run();
}
