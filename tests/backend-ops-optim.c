/* Rows of the op harness: the optimizers (three steps each), EMA and the sum of squares that
 * gradient clipping needs. See tests/backend-ops.h. */
#include "backend-ops.h"

enum { STEPS = 3 };

/* ---- AdamW: p = {n}; params, m, v, then a gradient per step ---- */

static void adamw_setup(OpCase *c)
{
  op_acc(c, "params", P0, -1, 1, 1e-6, 1e-5);
  op_acc(c, "m", P0, -0.1, 0.1, 1e-7, 1e-5);
  op_acc(c, "v", P0, 0, 0.01, 1e-9, 1e-5);
  op_in(c, "grads", (size_t)STEPS * P0, -1, 1);
}

static double adamw_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  const float *g = d[3];
  for (int t = 1; t <= STEPS; t++) {
    float bc1 = 1.0f - powf(0.9f, t), bc2 = 1.0f - powf(0.95f, t);
    be->adamw_update(d[0], g + (size_t)(t - 1) * P0, d[1], d[2], P0, 1e-3f, 0.9f, 0.95f, 1e-8f,
                     0.1f, bc1, bc2);
  }
  return NAN;
}

/* ---- SGD: p = {n, momentum %, dampening %, weight decay in 1e-4, nesterov} ---- */

static void sgd_setup(OpCase *c)
{
  /* the same formula per element; contraction into FMAs may differ */
  op_acc(c, "params", P0, -1, 1, 1e-6, 1e-6);
  op_acc(c, "momentum_buf", P0, 1e3, 1e4, 1e-6, 1e-6); /* junk: the first step sets it */
  op_in(c, "grads", (size_t)STEPS * P0, -1, 1);
}

static double sgd_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  const float *g = d[2];
  float momentum = P1 / 100.0f;
  for (int s = 0; s < STEPS; s++)
    be->sgd_update(d[0], g + (size_t)s * P0, momentum != 0.0f ? d[1] : NULL, P0, 0.1f, momentum,
                   P2 / 100.0f, P3 * 1e-4f, P4, s == 0);
  return NAN;
}

static void ema_setup(OpCase *c)
{
  op_acc(c, "ema", P0, -1, 1, 1e-6, 1e-5);
  op_in(c, "params", P0, -1, 1);
}

static double ema_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->ema_update(d[0], d[1], P0, 0.99f);
  return NAN;
}

/* ---- sum of squares: p = {n}; one spare value, so that n = 0 still has a buffer. The squares
 * are exact in double; only the order of the additions differs. ---- */

static void sum_squares_setup(OpCase *c)
{
  op_in(c, "x", (size_t)P0 + 1, -3, 3);
  op_scalar(c, 1e-12);
}

static double sum_squares_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  return be->sum_squares(d[0], P0);
}

static const OpRow rows[] = {
    {"adamw_update", "n10007-3-steps", {10007}, adamw_setup, adamw_run},
    {"sgd_update", "n10007-momentum", {10007, 90, 0, 5, 0}, sgd_setup, sgd_run},
    {"sgd_update", "n10007-nesterov", {10007, 90, 0, 5, 1}, sgd_setup, sgd_run},
    {"sgd_update", "n10007-dampening", {10007, 80, 30, 0, 0}, sgd_setup, sgd_run},
    {"sgd_update", "n10007-plain", {10007, 0, 0, 100, 0}, sgd_setup, sgd_run}, /* no buffer */
    {"ema_update", "n10007", {10007}, ema_setup, ema_run},
    {"sum_squares", "n0", {0}, sum_squares_setup, sum_squares_run},
    {"sum_squares", "n1", {1}, sum_squares_setup, sum_squares_run},
    {"sum_squares", "n5", {5}, sum_squares_setup, sum_squares_run},
    {"sum_squares", "n1000", {1000}, sum_squares_setup, sum_squares_run},
    {"sum_squares", "n1000003", {1000003}, sum_squares_setup, sum_squares_run},
};

OP_ROWS(ops_rows_optim, rows);
