/* Rows of the op harness: LayerNorm (affine, without parameters, weight only) and the steps of
 * BatchNorm2d that SyncBatchNorm combines across ranks. Each step starts from statistics the
 * CPU computed on the host, so each op is compared on its own. See tests/backend-ops.h. */
#include "backend-ops.h"

/* ---- LayerNorm: p = {N, C, affine}: affine 2 = weight and bias (GPT-2, eps 1e-5), 1 = weight
 * only, 0 = none (DiT, eps 1e-6, with a first row of variance ~1e-6 where eps matters) ---- */

#define LN_AFFINE (P2)
#define LN_EPS    (P2 == 2 ? 1e-5f : 1e-6f)

/* x, w, b: buffers 0, 1, 2 */
static void ln_inputs(OpCase *c)
{
  float *x = op_in(c, "x", (size_t)P0 * P1, -2, 3);
  if (LN_AFFINE < 2)
    for (int k = 0; k < P1; k++)
      x[k] = 1e-3f * x[P1 + k];
  op_in(c, "w", P1, 0.5, 1.5);
  op_in(c, "b", P1, -0.5, 0.5);
}

static float *ln_w(OpCase *c, void *const *d)
{
  return LN_AFFINE >= 1 ? d[1] : NULL;
}

static float *ln_b(OpCase *c, void *const *d)
{
  return LN_AFFINE == 2 ? d[2] : NULL;
}

static void ln_forward_setup(OpCase *c)
{
  ln_inputs(c);
  op_out(c, "out", (size_t)P0 * P1, 1e-5, 1e-5);
  op_out(c, "mean", P0, 1e-6, 1e-5);
  op_out(c, "rstd", P0, 1e-6, 1e-5);
}

static double ln_forward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->layernorm_forward(d[3], d[4], d[5], d[0], ln_w(c, d), ln_b(c, d), P0, P1, LN_EPS);
  return NAN;
}

static void ln_backward_setup(OpCase *c)
{
  ln_inputs(c);
  size_t n = (size_t)P0 * P1;
  op_in(c, "dout", n, -1, 1);
  float *mean = op_in(c, "mean", P0, 0, 1), *rstd = op_in(c, "rstd", P0, 0, 1);
  g_autofree float *out = g_new(float, n);
  const float *w = LN_AFFINE >= 1 ? c->b[1].host : NULL, *b = LN_AFFINE == 2 ? c->b[2].host : NULL;
  op_cpu()->layernorm_forward(out, mean, rstd, c->b[0].host, w, b, P0, P1, LN_EPS);
  /* the small row has rstd ~600, which scales the rounding of its row sums (~1e-7 each) */
  op_acc(c, "dinp", n, -1, 1, LN_AFFINE == 2 ? 1e-5 : 1e-3, 1e-4);
  op_acc(c, "dw", P1, -1, 1, 1e-5, 1e-4);
  op_acc(c, "db", P1, -1, 1, 1e-5, 1e-5);
}

static double ln_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  /* without affine parameters dw and db are not passed: they must stay as they were */
  be->layernorm_backward(d[6], LN_AFFINE >= 1 ? d[7] : NULL, LN_AFFINE == 2 ? d[8] : NULL, d[3],
                         d[0], ln_w(c, d), d[4], d[5], P0, P1);
  return NAN;
}

/* ---- RMSNorm: p = {N, C, weight}: eps 1e-6 (Qwen's; Llama's is 1e-5), a first row of tiny
 * values where eps matters; weight 0: no scale ---- */

static void rms_inputs(OpCase *c)
{
  float *x = op_in(c, "x", (size_t)P0 * P1, -2, 3);
  for (int k = 0; k < P1; k++)
    x[k] = 1e-3f * x[P1 + k];
  op_in(c, "w", P1, 0.5, 1.5);
}

static void rms_forward_setup(OpCase *c)
{
  rms_inputs(c);
  op_out(c, "out", (size_t)P0 * P1, 1e-5, 1e-5);
  op_out(c, "rstd", P0, 1e-6, 1e-5);
}

static double rms_forward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->rmsnorm_forward(d[2], d[3], d[0], P2 ? d[1] : NULL, P0, P1, 1e-6f);
  return NAN;
}

static void rms_backward_setup(OpCase *c)
{
  rms_inputs(c);
  size_t n = (size_t)P0 * P1;
  op_in(c, "dout", n, -1, 1);
  float *rstd = op_in(c, "rstd", P0, 0, 1);
  g_autofree float *out = g_new(float, n);
  op_cpu()->rmsnorm_forward(out, rstd, c->b[0].host, P2 ? c->b[1].host : NULL, P0, P1, 1e-6f);
  /* the small row's rstd (~600) scales the rounding of its sums, as in LayerNorm's rows */
  op_acc(c, "dinp", n, -1, 1, 1e-3, 1e-4);
  op_acc(c, "dw", P1, -1, 1, 1e-5, 1e-4);
}

static double rms_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  /* a frozen weight (P2 == 0 here) gets no gradient: dw must stay as it was */
  be->rmsnorm_backward(d[4], P2 ? d[5] : NULL, d[2], d[0], d[1], d[3], P0, P1);
  return NAN;
}

/* ---- BatchNorm2d: p = {B, C, HW} over x [B, C, HW] ---- */

#define BN_N     ((size_t)P0 * P1 * P2)
#define BN_COUNT ((double)P0 * P2)

/* x (0), mean (1), m2 (2), rstd (3): this rank's statistics, from the CPU */
static void bn_stats_inputs(OpCase *c)
{
  float *x = op_in(c, "x", BN_N, -1, 4);
  float *mean = op_in(c, "mean", P1, 0, 1), *m2 = op_in(c, "m2", P1, 0, 1);
  float *rstd = op_in(c, "rstd", P1, 0, 1);
  op_cpu()->bn_stats(x, P0, P1, P2, mean, m2);
  op_cpu()->bn_rstd(rstd, m2, 1.0 / BN_COUNT, 1e-5f, P1);
}

static void bn_stats_setup(OpCase *c)
{
  op_in(c, "x", BN_N, -1, 4);
  /* both reduce in double and round once: a few float ulps at most */
  op_out(c, "mean", P1, 1e-6, 1e-6);
  op_out(c, "m2", P1, 0, 1e-6);
}

static double bn_stats_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_stats(d[0], P0, P1, P2, d[1], d[2]);
  return NAN;
}

static void bn_rstd_setup(OpCase *c)
{
  bn_stats_inputs(c);
  op_out(c, "rstd-out", P1, 0, 1e-6);
}

static double bn_rstd_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_rstd(d[4], d[2], 1.0 / BN_COUNT, 1e-5f, P1);
  return NAN;
}

static void bn_forward_setup(OpCase *c)
{
  bn_stats_inputs(c);
  op_in(c, "weight", P1, 0.5, 1.5);
  op_in(c, "bias", P1, -0.5, 0.5);
  op_out(c, "y", BN_N, 1e-6, 1e-6);
}

static double bn_forward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_forward(d[6], d[0], d[1], d[3], d[4], d[5], P0, P1, P2);
  return NAN;
}

static void bn_running_setup(OpCase *c)
{
  bn_stats_inputs(c);
  op_acc(c, "running_mean", P1, -1, 1, 1e-7, 1e-6);
  op_acc(c, "running_var", P1, 0.5, 2, 1e-7, 1e-6);
}

static double bn_running_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_running_update(d[4], d[5], d[1], d[2], BN_COUNT, 0.1f, P1);
  return NAN;
}

static void bn_reduce_setup(OpCase *c)
{
  bn_stats_inputs(c);
  op_in(c, "dy", BN_N, -1, 1);
  /* sums of terms of both signs, in double on both sides */
  op_out(c, "sum_dy", P1, 1e-5, 1e-6);
  op_out(c, "sum_dy_xhat", P1, 1e-5, 1e-6);
}

static double bn_reduce_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_backward_reduce(d[4], d[0], d[1], d[3], P0, P1, P2, d[5], d[6]);
  return NAN;
}

static void bn_dx_setup(OpCase *c)
{
  bn_stats_inputs(c);
  float *dy = op_in(c, "dy", BN_N, -1, 1);
  op_in(c, "weight", P1, 0.5, 1.5);
  float *s1 = op_in(c, "sum_dy", P1, 0, 1), *s2 = op_in(c, "sum_dy_xhat", P1, 0, 1);
  op_cpu()->bn_backward_reduce(dy, c->b[0].host, c->b[1].host, c->b[3].host, P0, P1, P2, s1, s2);
  op_acc(c, "dx", BN_N, -1, 1, 1e-6, 1e-5);
}

static double bn_dx_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_backward_dx(d[8], 1, d[4], d[0], d[1], d[3], d[5], d[6], d[7], BN_COUNT, P0, P1, P2);
  return NAN;
}

/* accumulate 0: dx written over (its random start must not show) */
static double bn_dx_over_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_backward_dx(d[8], 0, d[4], d[0], d[1], d[3], d[5], d[6], d[7], BN_COUNT, P0, P1, P2);
  return NAN;
}

static void bn_params_setup(OpCase *c)
{
  op_in(c, "sum_dy", P1, -1, 1);
  op_in(c, "sum_dy_xhat", P1, -1, 1);
  op_acc(c, "dweight", P1, -1, 1, 0, 0); /* one add each: exact */
  op_acc(c, "dbias", P1, -1, 1, 0, 0);
}

static double bn_params_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_backward_params(d[2], d[3], d[0], d[1], P1);
  return NAN;
}

/* a frozen weight (p[2] 0) or bias (p[2] 1): that gradient stays as it was */
static double bn_params_frozen_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_backward_params(P2 == 0 ? NULL : d[2], P2 == 1 ? NULL : d[3], d[0], d[1], P1);
  return NAN;
}

/* Chan's combination: p = {R, C}; rank rows [mean C, m2 C, count], an empty rank between */
static void bn_combine_setup(OpCase *c)
{
  int R = P0, C = P1;
  float *rows = op_in(c, "ranks", (size_t)R * (2 * C + 1), 0, 1);
  for (int k = 0; k < R; k++) {
    float *row = rows + (size_t)k * (2 * C + 1);
    op_fill(c, row, C, -2, 5);
    op_fill(c, row + C, C, 1, 100);
    row[2 * C] = (float)(k == 1 ? 0 : 96 * (k + 1));
  }
  op_out(c, "mean", C, 1e-7, 1e-7);
  op_out(c, "m2", C, 0, 1e-7);
}

static double bn_combine_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bn_combine_stats(d[1], d[2], d[0], P0, P1);
  return NAN;
}

/* one chunk per channel; eight; chunks that split rows; 1x1 maps */
#define BN_SHAPES(op, setup, run)                                                                  \
  {op, "B5-C7-HW33", {5, 7, 33}, setup, run}, {op, "B16-C3-HW1024", {16, 3, 1024}, setup, run},    \
      {op, "B128-C2-HW64", {128, 2, 64}, setup, run},                                              \
  {                                                                                                \
    op, "B3-C4-HW1", {3, 4, 1}, setup, run                                                         \
  }

static const OpRow rows[] = {
    {"layernorm_forward", "N70-C100", {70, 100, 2}, ln_forward_setup, ln_forward_run},
    {"layernorm_forward", "N70-C100-no-affine", {70, 100, 0}, ln_forward_setup, ln_forward_run},
    {"layernorm_forward", "N70-C100-weight-only", {70, 100, 1}, ln_forward_setup, ln_forward_run},
    {"layernorm_backward", "N70-C100", {70, 100, 2}, ln_backward_setup, ln_backward_run},
    {"layernorm_backward", "N70-C100-no-affine", {70, 100, 0}, ln_backward_setup, ln_backward_run},
    {"layernorm_backward",
     "N70-C100-weight-only",
     {70, 100, 1},
     ln_backward_setup,
     ln_backward_run},
    {"rmsnorm_forward", "N70-C100", {70, 100, 1}, rms_forward_setup, rms_forward_run},
    {"rmsnorm_forward", "N70-C100-no-weight", {70, 100, 0}, rms_forward_setup, rms_forward_run},
    /* Qwen3's q/k norms: many rows of a head's width */
    {"rmsnorm_forward", "N300-C64", {300, 64, 1}, rms_forward_setup, rms_forward_run},
    {"rmsnorm_backward", "N70-C100", {70, 100, 1}, rms_backward_setup, rms_backward_run},
    {"rmsnorm_backward", "N70-C100-no-dw", {70, 100, 0}, rms_backward_setup, rms_backward_run},
    {"rmsnorm_backward", "N300-C64", {300, 64, 1}, rms_backward_setup, rms_backward_run},
    BN_SHAPES("bn_stats", bn_stats_setup, bn_stats_run),
    BN_SHAPES("bn_rstd", bn_rstd_setup, bn_rstd_run),
    BN_SHAPES("bn_forward", bn_forward_setup, bn_forward_run),
    BN_SHAPES("bn_running_update", bn_running_setup, bn_running_run),
    BN_SHAPES("bn_backward_reduce", bn_reduce_setup, bn_reduce_run),
    BN_SHAPES("bn_backward_dx", bn_dx_setup, bn_dx_run),
    {"bn_backward_dx", "B5-C7-HW33-over", {5, 7, 33}, bn_dx_setup, bn_dx_over_run},
    {"bn_backward_dx", "B3-C4-HW1-over", {3, 4, 1}, bn_dx_setup, bn_dx_over_run},
    {"bn_backward_params", "C7", {1, 7, 1}, bn_params_setup, bn_params_run},
    {"bn_backward_params", "C7-no-dweight", {1, 7, 0}, bn_params_setup, bn_params_frozen_run},
    {"bn_backward_params", "C7-no-dbias", {1, 7, 1}, bn_params_setup, bn_params_frozen_run},
    {"bn_combine_stats", "R3-C5", {3, 5}, bn_combine_setup, bn_combine_run},
};

OP_ROWS(ops_rows_norms, rows);
