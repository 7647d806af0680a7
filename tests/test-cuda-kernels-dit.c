/* The CUDA backend's DiT ops against the CPU backend's (tests/test-layers-dit.c checks those
 * against finite differences and PyTorch): non-causal attention, LayerNorm without affine
 * parameters, modulate, the gated residual, SiLU, timestep features, label rows, patchify and
 * unpatchify, the per-sample MSE and axpby, fp32, with the tolerance stated at each check
 * (|cuda - cpu| <= atol + rtol * |cpu|). Skipped, with the runtime's reason, without a CUDA
 * device. */
#include "cuda-check.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"

#include <glib.h>
#include <math.h>
#include <string.h>

static void test_attention_non_causal(void)
{
  if (!need_gpu())
    return;
  cuda_check_attention(2, 45, 48, 3, 121, 0);   /* head size 16, T not a multiple of the tiles */
  cuda_check_attention(1, 100, 128, 2, 122, 0); /* head size 64, four key tiles, the last partial */
  cuda_check_attention(1, 33, 128, 1, 123, 0);  /* head size 128, the largest */
  cuda_check_attention(2, 9, 60, 2, 124, 0);    /* head size 30: lanes past the head idle */
  cuda_check_attention(1, 1, 32, 4, 125, 0);    /* one position */
  cuda_check_attention(4, 64, 72, 6, 126, 0);   /* DiT-like: 64 patches, head size 12 */
}

static void test_layernorm_no_affine(void)
{
  if (!need_gpu())
    return;
  enum { N = 70, C = 100 };
  g_autoptr(GRand) r = g_rand_new_with_seed(113);
  size_t nc = (size_t)N * C;
  float *x = rand_floats(r, nc, -2, 3), *w = rand_floats(r, C, 0.5, 1.5);
  float *dout = rand_floats(r, nc, -1, 1), *dinp = rand_floats(r, nc, -1, 1);
  float *dw = rand_floats(r, C, -1, 1);
  for (int k = 0; k < C; k++) /* a row of variance ~1e-6: eps 1e-6 matters */
    x[k] = 1e-3f * x[C + k];
  float *c_x = on_cpu(x, nc * 4), *g_x = on_gpu(x, nc * 4);
  float *c_w = on_cpu(w, C * 4), *g_w = on_gpu(w, C * 4);
  float *c_out = cpu->alloc(nc * 4), *c_mean = cpu->alloc(N * 4), *c_rstd = cpu->alloc(N * 4);
  float *g_out = gpu->alloc(nc * 4), *g_mean = gpu->alloc(N * 4), *g_rstd = gpu->alloc(N * 4);
  cpu->layernorm_forward(c_out, c_mean, c_rstd, c_x, NULL, NULL, N, C, 1e-6f);
  gpu->layernorm_forward(g_out, g_mean, g_rstd, g_x, NULL, NULL, N, C, 1e-6f);
  expect_close("layernorm_forward (no affine) out", c_out, g_out, nc, 1e-5, 1e-5);
  expect_close("layernorm_forward (no affine) rstd", c_rstd, g_rstd, N, 1e-6, 1e-5);
  gpu->upload(g_mean, c_mean, N * 4);
  gpu->upload(g_rstd, c_rstd, N * 4);
  float *c_dout = on_cpu(dout, nc * 4), *g_dout = on_gpu(dout, nc * 4);
  float *c_dinp = on_cpu(dinp, nc * 4), *g_dinp = on_gpu(dinp, nc * 4);
  cpu->layernorm_backward(c_dinp, NULL, NULL, c_dout, c_x, NULL, c_mean, c_rstd, N, C);
  gpu->layernorm_backward(g_dinp, NULL, NULL, g_dout, g_x, NULL, g_mean, g_rstd, N, C);
  /* the small row has rstd ~600, which scales the rounding of the row sums (~1e-7 each) */
  expect_close("layernorm_backward (no affine) dinp", c_dinp, g_dinp, nc, 1e-3, 1e-4);
  /* a weight without a bias: dw accumulates, db is skipped */
  float *c_dw = on_cpu(dw, C * 4), *g_dw = on_gpu(dw, C * 4);
  cpu->layernorm_forward(c_out, c_mean, c_rstd, c_x, c_w, NULL, N, C, 1e-6f);
  gpu->layernorm_forward(g_out, g_mean, g_rstd, g_x, g_w, NULL, N, C, 1e-6f);
  expect_close("layernorm_forward (weight only) out", c_out, g_out, nc, 1e-5, 1e-5);
  gpu->upload(g_mean, c_mean, N * 4);
  gpu->upload(g_rstd, c_rstd, N * 4);
  cpu->layernorm_backward(c_dinp, c_dw, NULL, c_dout, c_x, c_w, c_mean, c_rstd, N, C);
  gpu->layernorm_backward(g_dinp, g_dw, NULL, g_dout, g_x, g_w, g_mean, g_rstd, N, C);
  expect_close("layernorm_backward (weight only) dinp", c_dinp, g_dinp, nc, 1e-3, 1e-4);
  expect_close("layernorm_backward (weight only) dw", c_dw, g_dw, C, 1e-5, 1e-4);
  float *cb[] = {c_x, c_w, c_out, c_mean, c_rstd, c_dout, c_dinp, c_dw};
  float *gb[] = {g_x, g_w, g_out, g_mean, g_rstd, g_dout, g_dinp, g_dw};
  for (size_t i = 0; i < G_N_ELEMENTS(cb); i++)
    cpu->free(cb[i]), gpu->free(gb[i]);
  g_free(x), g_free(w), g_free(dout), g_free(dinp), g_free(dw);
}

/* adaLN shapes: T and C no multiple of the kernels' 8 x 32 tiles; vectors in [B, 6C]. */
enum { AB = 3, AT = 70, AC = 100, ALD = 6 * AC, SHIFT = 3 * AC, SCALE = 4 * AC, GATE = 5 * AC };

static void test_modulate(void)
{
  if (!need_gpu())
    return;
  g_autoptr(GRand) r = g_rand_new_with_seed(131);
  size_t n = (size_t)AB * AT * AC, nm = (size_t)AB * ALD;
  float *x = rand_floats(r, n, -2, 2), *mod = rand_floats(r, nm, -1, 1);
  float *dout = rand_floats(r, n, -1, 1), *dx = rand_floats(r, n, -1, 1);
  float *dmod = rand_floats(r, nm, -1, 1);
  float *c_x = on_cpu(x, n * 4), *g_x = on_gpu(x, n * 4);
  float *c_mod = on_cpu(mod, nm * 4), *g_mod = on_gpu(mod, nm * 4);
  float *c_out = cpu->alloc(n * 4), *g_out = gpu->alloc(n * 4);
  cpu->modulate_forward(c_out, c_x, c_mod + SHIFT, c_mod + SCALE, AB, AT, AC, ALD);
  gpu->modulate_forward(g_out, g_x, g_mod + SHIFT, g_mod + SCALE, AB, AT, AC, ALD);
  expect_close("modulate_forward", c_out, g_out, n, 1e-6, 1e-6); /* fma or not */
  float *c_dout = on_cpu(dout, n * 4), *g_dout = on_gpu(dout, n * 4);
  float *c_dx = on_cpu(dx, n * 4), *g_dx = on_gpu(dx, n * 4);
  float *c_dmod = on_cpu(dmod, nm * 4), *g_dmod = on_gpu(dmod, nm * 4);
  cpu->modulate_backward(c_dx, c_dmod + SHIFT, c_dmod + SCALE, c_dout, c_x, c_mod + SCALE, AB, AT,
                         AC, ALD);
  gpu->modulate_backward(g_dx, g_dmod + SHIFT, g_dmod + SCALE, g_dout, g_x, g_mod + SCALE, AB, AT,
                         AC, ALD);
  expect_close("modulate_backward dx (accumulates)", c_dx, g_dx, n, 1e-6, 1e-6);
  /* sums of 70 tokens in another order (partial sums up to ~10, ulp 1e-6); the other
   * columns of [B, 6C] must stay as they were */
  expect_close("modulate_backward dshift, dscale (accumulate)", c_dmod, g_dmod, nm, 1e-4, 1e-5);
  cpu->free(c_x), cpu->free(c_mod), cpu->free(c_out), cpu->free(c_dout), cpu->free(c_dx);
  cpu->free(c_dmod), gpu->free(g_x), gpu->free(g_mod), gpu->free(g_out), gpu->free(g_dout);
  gpu->free(g_dx), gpu->free(g_dmod);
  g_free(x), g_free(mod), g_free(dout), g_free(dx), g_free(dmod);
}

static void test_gated_residual(void)
{
  if (!need_gpu())
    return;
  g_autoptr(GRand) r = g_rand_new_with_seed(141);
  size_t n = (size_t)AB * AT * AC, nm = (size_t)AB * ALD;
  float *x = rand_floats(r, n, -1, 1), *mod = rand_floats(r, nm, -1, 1);
  float *y = rand_floats(r, n, -2, 2), *dout = rand_floats(r, n, -1, 1);
  float *dx = rand_floats(r, n, -1, 1), *dmod = rand_floats(r, nm, -1, 1);
  float *junk = rand_floats(r, n, 1e3, 1e4);
  float *c_x = on_cpu(x, n * 4), *g_x = on_gpu(x, n * 4);
  float *c_mod = on_cpu(mod, nm * 4), *g_mod = on_gpu(mod, nm * 4);
  float *c_y = on_cpu(y, n * 4), *g_y = on_gpu(y, n * 4);
  float *c_out = cpu->alloc(n * 4), *g_out = gpu->alloc(n * 4);
  cpu->gated_residual_forward(c_out, c_x, c_mod + GATE, c_y, AB, AT, AC, ALD);
  gpu->gated_residual_forward(g_out, g_x, g_mod + GATE, g_y, AB, AT, AC, ALD);
  expect_close("gated_residual_forward", c_out, g_out, n, 1e-6, 1e-6);
  gpu->gated_residual_forward(g_x, g_x, g_mod + GATE, g_y, AB, AT, AC, ALD); /* in place */
  expect_close("gated_residual_forward in place", c_out, g_x, n, 1e-6, 1e-6);
  float *c_dout = on_cpu(dout, n * 4), *g_dout = on_gpu(dout, n * 4);
  float *c_dx = on_cpu(dx, n * 4), *g_dx = on_gpu(dx, n * 4);
  float *c_dy = cpu->alloc(n * 4), *g_dy = on_gpu(junk, n * 4);
  float *c_dmod = on_cpu(dmod, nm * 4), *g_dmod = on_gpu(dmod, nm * 4);
  cpu->gated_residual_backward(c_dx, c_dy, c_dmod + GATE, c_dout, c_mod + GATE, c_y, AB, AT, AC,
                               ALD);
  gpu->gated_residual_backward(g_dx, g_dy, g_dmod + GATE, g_dout, g_mod + GATE, g_y, AB, AT, AC,
                               ALD);
  expect_close("gated_residual_backward dx (accumulates)", c_dx, g_dx, n, 0, 0); /* one add */
  expect_close("gated_residual_backward dy (overwrites)", c_dy, g_dy, n, 0, 0);  /* one mul */
  expect_close("gated_residual_backward dgate (accumulates)", c_dmod, g_dmod, nm, 1e-4, 1e-5);
  /* dx NULL */
  gpu->upload(g_dy, junk, n * 4);
  cpu->gated_residual_backward(NULL, c_dy, c_dmod + GATE, c_dout, c_mod + GATE, c_y, AB, AT, AC,
                               ALD);
  gpu->gated_residual_backward(NULL, g_dy, g_dmod + GATE, g_dout, g_mod + GATE, g_y, AB, AT, AC,
                               ALD);
  expect_close("gated_residual_backward (dx NULL) dy", c_dy, g_dy, n, 0, 0);
  expect_close("gated_residual_backward (dx NULL) dgate", c_dmod, g_dmod, nm, 1e-4, 1e-5);
  float *cb[] = {c_x, c_mod, c_y, c_out, c_dout, c_dx, c_dy, c_dmod};
  float *gb[] = {g_x, g_mod, g_y, g_out, g_dout, g_dx, g_dy, g_dmod};
  for (size_t i = 0; i < G_N_ELEMENTS(cb); i++)
    cpu->free(cb[i]), gpu->free(gb[i]);
  g_free(x), g_free(mod), g_free(y), g_free(dout), g_free(dx), g_free(dmod), g_free(junk);
}

static void test_silu(void)
{
  if (!need_gpu())
    return;
  enum { N = 10007 };
  g_autoptr(GRand) r = g_rand_new_with_seed(151);
  float *x = rand_floats(r, N, -12, 12), *g = rand_floats(r, N, -1, 1);
  x[0] = -200.0f, x[1] = 200.0f;
  float *c_x = on_cpu(x, N * 4), *g_x = on_gpu(x, N * 4);
  float *c_g = on_cpu(g, N * 4), *g_g = on_gpu(g, N * 4);
  float *c_y = cpu->alloc(N * 4), *g_y = gpu->alloc(N * 4);
  /* the same formula on both sides; division and fma may differ in an ulp */
  cpu->silu_forward(c_y, c_x, N);
  gpu->silu_forward(g_y, g_x, N);
  expect_close("silu_forward", c_y, g_y, N, 1e-6, 1e-6);
  cpu->silu_backward(c_y, c_x, c_g, N);
  gpu->silu_backward(g_y, g_x, g_g, N);
  expect_close("silu_backward", c_y, g_y, N, 1e-6, 1e-6);
  cpu->silu_backward(c_g, c_x, c_g, N); /* in place */
  gpu->silu_backward(g_g, g_x, g_g, N);
  expect_close("silu_backward in place", c_g, g_g, N, 1e-6, 1e-6);
  cpu->free(c_x), cpu->free(c_g), cpu->free(c_y), gpu->free(g_x), gpu->free(g_g), gpu->free(g_y);
  g_free(x), g_free(g);
}

static void test_timestep_embedding(void)
{
  if (!need_gpu())
    return;
  g_autoptr(GRand) r = g_rand_new_with_seed(161);
  int B = 64, dims[] = {256, 7};
  float *t = rand_floats(r, B, 0, 1000);
  t[0] = 0.0f, t[1] = 999.0f;
  float *c_t = on_cpu(t, B * 4), *g_t = on_gpu(t, B * 4);
  for (size_t k = 0; k < G_N_ELEMENTS(dims); k++) {
    float *c_out = cpu->alloc((size_t)B * dims[k] * 4),
          *g_out = gpu->alloc((size_t)B * dims[k] * 4);
    cpu->timestep_embedding(c_out, c_t, B, dims[k], 10000.0f);
    gpu->timestep_embedding(g_out, g_t, B, dims[k], 10000.0f);
    /* both in double, rounded once to float */
    expect_close("timestep_embedding", c_out, g_out, (size_t)B * dims[k], 1e-7, 0);
    cpu->free(c_out), gpu->free(g_out);
  }
  cpu->free(c_t), gpu->free(g_t), g_free(t);
}

static void test_rows(void)
{
  if (!need_gpu())
    return;
  enum { B = 200, V = 11, C = 300 }; /* few labels: rows repeat */
  g_autoptr(GRand) r = g_rand_new_with_seed(171);
  int *rows = rand_ints(r, B, V);
  float *table = rand_floats(r, V * C, -1, 1), *dout = rand_floats(r, B * C, -1, 1);
  int *c_rows = on_cpu(rows, B * 4), *g_rows = on_gpu(rows, B * 4);
  float *c_table = on_cpu(table, V * C * 4), *g_table = on_gpu(table, V * C * 4);
  float *c_out = cpu->alloc(B * C * 4), *g_out = gpu->alloc(B * C * 4);
  cpu->rows_gather(c_out, c_table, c_rows, B, C);
  gpu->rows_gather(g_out, g_table, g_rows, B, C);
  expect_close("rows_gather", c_out, g_out, B * C, 0, 0);
  /* accumulates into the table; both add a row's samples in order of b: the same bits */
  float *c_dout = on_cpu(dout, B * C * 4), *g_dout = on_gpu(dout, B * C * 4);
  cpu->rows_scatter_add(c_table, c_dout, c_rows, B, C);
  gpu->rows_scatter_add(g_table, g_dout, g_rows, B, C);
  expect_close("rows_scatter_add", c_table, g_table, V * C, 0, 0);
  cpu->free(c_rows), cpu->free(c_table), cpu->free(c_out), cpu->free(c_dout);
  gpu->free(g_rows), gpu->free(g_table), gpu->free(g_out), gpu->free(g_dout);
  g_free(rows), g_free(table), g_free(dout);
}

static void patch_case(int B, int C, int H, int W, int p, guint32 seed)
{
  g_autoptr(GRand) r = g_rand_new_with_seed(seed);
  size_t n = (size_t)B * C * H * W;
  float *a = rand_floats(r, n, -1, 1), *junk = rand_floats(r, n, 1e3, 1e4);
  float *c_a = on_cpu(a, n * 4), *g_a = on_gpu(a, n * 4);
  float *c_b = cpu->alloc(n * 4), *g_b = on_gpu(junk, n * 4);
  /* permutations: exact */
  cpu->patchify(c_b, c_a, B, C, H, W, p);
  gpu->patchify(g_b, g_a, B, C, H, W, p);
  expect_close("patchify", c_b, g_b, n, 0, 0);
  cpu->patchify_backward(c_b, c_a, B, C, H, W, p);
  gpu->patchify_backward(g_b, g_a, B, C, H, W, p);
  expect_close("patchify_backward", c_b, g_b, n, 0, 0);
  cpu->unpatchify(c_b, c_a, B, C, H, W, p);
  gpu->unpatchify(g_b, g_a, B, C, H, W, p);
  expect_close("unpatchify", c_b, g_b, n, 0, 0);
  cpu->unpatchify_backward(c_b, c_a, B, C, H, W, p);
  gpu->unpatchify_backward(g_b, g_a, B, C, H, W, p);
  expect_close("unpatchify_backward", c_b, g_b, n, 0, 0);
  cpu->free(c_a), cpu->free(c_b), gpu->free(g_a), gpu->free(g_b), g_free(a), g_free(junk);
}

static void test_patch(void)
{
  if (!need_gpu())
    return;
  patch_case(2, 4, 32, 32, 2, 181); /* DiT-S/2 on 32 x 32 latents */
  patch_case(3, 3, 12, 20, 4, 182); /* not square */
  patch_case(1, 1, 5, 5, 1, 183);   /* p = 1: one pixel per token */
  /* a height that is no multiple of p is an error, not a bad write */
  float *a = gpu->alloc(4 * 6 * 8), *b = gpu->alloc(4 * 6 * 8);
  gpu->patchify(b, a, 1, 1, 6, 8, 4);
  const char *e = cohort_cuda_last_error();
  g_assert_nonnull(e);
  g_assert_nonnull(strstr(e, "H=6"));
  cohort_cuda_clear_error();
  gpu->free(a), gpu->free(b);
}

static void test_mse_axpby(void)
{
  if (!need_gpu())
    return;
  enum { B = 5, D = 3 * 32 * 32 + 7 };
  g_autoptr(GRand) r = g_rand_new_with_seed(191);
  size_t n = (size_t)B * D;
  float *p = rand_floats(r, n, -2, 2), *q = rand_floats(r, n, -2, 2);
  float *c_p = on_cpu(p, n * 4), *g_p = on_gpu(p, n * 4);
  float *c_q = on_cpu(q, n * 4), *g_q = on_gpu(q, n * 4);
  float *c_l = cpu->alloc(B * 4), *g_l = gpu->alloc(B * 4);
  float *c_d = cpu->alloc(n * 4), *g_d = gpu->alloc(n * 4);
  cpu->mse_forward(c_l, c_p, c_q, B, D);
  gpu->mse_forward(g_l, g_p, g_q, B, D);
  expect_close("mse_forward", c_l, g_l, B, 0, 1e-5);      /* sums of 3079 squares, other order */
  cpu->mse_backward(c_d, c_p, c_q, B, D, 0.2f * 1024.0f); /* 1/B times a loss scale */
  gpu->mse_backward(g_d, g_p, g_q, B, D, 0.2f * 1024.0f);
  expect_close("mse_backward", c_d, g_d, n, 0, 0); /* the same two roundings */
  cpu->axpby(c_d, 0.3f, c_p, -1.7f, c_q, n);
  gpu->axpby(g_d, 0.3f, g_p, -1.7f, g_q, n);
  expect_close("axpby", c_d, g_d, n, 1e-6, 1e-6);
  cpu->axpby(c_p, 1.0f, c_p, 0.05f, c_q, n); /* an Euler step in place */
  gpu->axpby(g_p, 1.0f, g_p, 0.05f, g_q, n);
  expect_close("axpby in place", c_p, g_p, n, 1e-6, 1e-6);
  cpu->free(c_p), cpu->free(c_q), cpu->free(c_l), cpu->free(c_d);
  gpu->free(g_p), gpu->free(g_q), gpu->free(g_l), gpu->free(g_d);
  g_free(p), g_free(q);
}

/* The DiT backwards that sum over tokens or samples give the same bits when run twice. */
static void test_deterministic(void)
{
  if (!need_gpu())
    return;
  enum { B = 4, T = 64, C = 96, NH = 4, LD = 6 * C };
  g_autoptr(GRand) r = g_rand_new_with_seed(201);
  size_t n = (size_t)B * T * C, nqkv = 3 * n, nm = (size_t)B * LD;
  float *qkv = rand_floats(r, nqkv, -1, 1), *dout = rand_floats(r, n, -1, 1);
  float *mod = rand_floats(r, nm, -1, 1);
  float *g_qkv = on_gpu(qkv, nqkv * 4), *g_dout = on_gpu(dout, n * 4), *g_mod = on_gpu(mod, nm * 4);
  float *g_out = gpu->alloc(n * 4), *g_lse = gpu->alloc(sizeof(float) * B * NH * T);
  float *g_dqkv = gpu->alloc(nqkv * 4), *g_dx = gpu->alloc(n * 4), *g_dmod = gpu->alloc(nm * 4);
  float *g_dy = gpu->alloc(n * 4);
  float *h[2][3];
  gpu->attention_forward(g_out, g_lse, g_qkv, B, T, C, NH, 0);
  for (int run = 0; run < 2; run++) {
    gpu->zero(g_dx, n * 4), gpu->zero(g_dmod, nm * 4);
    gpu->attention_backward(g_dqkv, g_dout, g_qkv, g_out, g_lse, B, T, C, NH, 0);
    gpu->modulate_backward(g_dx, g_dmod, g_dmod + C, g_dout, g_out, g_mod + C, B, T, C, LD);
    gpu->gated_residual_backward(g_dx, g_dy, g_dmod + 2 * C, g_dout, g_mod + 2 * C, g_qkv, B, T, C,
                                 LD);
    h[run][0] = g_new(float, nqkv), h[run][1] = g_new(float, n), h[run][2] = g_new(float, nm);
    gpu->download(h[run][0], g_dqkv, nqkv * 4);
    gpu->download(h[run][1], g_dx, n * 4);
    gpu->download(h[run][2], g_dmod, nm * 4);
  }
  assert_no_cuda_error("deterministic DiT backward");
  g_assert_true(memcmp(h[0][0], h[1][0], nqkv * 4) == 0);
  g_assert_true(memcmp(h[0][1], h[1][1], n * 4) == 0);
  g_assert_true(memcmp(h[0][2], h[1][2], nm * 4) == 0);
  for (int run = 0; run < 2; run++)
    g_free(h[run][0]), g_free(h[run][1]), g_free(h[run][2]);
  gpu->free(g_qkv), gpu->free(g_dout), gpu->free(g_mod), gpu->free(g_out), gpu->free(g_lse);
  gpu->free(g_dqkv), gpu->free(g_dx), gpu->free(g_dmod), gpu->free(g_dy);
  g_free(qkv), g_free(dout), g_free(mod);
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
  g_test_add_func("/cuda-dit/attention-non-causal", test_attention_non_causal);
  g_test_add_func("/cuda-dit/layernorm-no-affine", test_layernorm_no_affine);
  g_test_add_func("/cuda-dit/modulate", test_modulate);
  g_test_add_func("/cuda-dit/gated-residual", test_gated_residual);
  g_test_add_func("/cuda-dit/silu", test_silu);
  g_test_add_func("/cuda-dit/timestep-embedding", test_timestep_embedding);
  g_test_add_func("/cuda-dit/rows", test_rows);
  g_test_add_func("/cuda-dit/patch", test_patch);
  g_test_add_func("/cuda-dit/mse-axpby", test_mse_axpby);
  g_test_add_func("/cuda-dit/deterministic", test_deterministic);
  return g_test_run();
}
