/* Rows of the op harness: activations and element-wise arithmetic (adaLN's modulate and gated
 * residual on the [B, 6C] modulation matrix included). See tests/backend-ops.h. */
#include "backend-ops.h"

/* ---- gelu and silu: p = {n, lo, hi, e}: inputs in [lo, hi), rtol 10^-e. The same
 * per-element formula on both sides, where exp, division and FMA contraction may differ in an
 * ulp. Past |x| = 6 the inputs also hold -200 and 200, where exp overflows unshifted. ---- */

static float *act_input(OpCase *c)
{
  float *x = op_in(c, "x", P0, P1, P2);
  if (P2 > 6)
    x[0] = -200.0f, x[1] = 200.0f;
  return x;
}

static void act_forward_setup(OpCase *c)
{
  act_input(c);
  op_out(c, "out", P0, 1e-6, pow(10, -P3));
}

static void act_backward_setup(OpCase *c)
{
  act_input(c);
  op_in(c, "dout", P0, -1, 1);
  op_out(c, "dinp", P0, 1e-6, pow(10, -P3));
}

/* dinp == dout: the op reads and writes the same buffer */
static void act_inplace_setup(OpCase *c)
{
  act_input(c);
  op_acc(c, "dout-dinp", P0, -1, 1, 1e-6, pow(10, -P3));
}

static void relu_setup(OpCase *c)
{
  op_in(c, "x", P0, -1, 1);
  op_out(c, "out", P0, 0, 0);
}

static void relu_backward_setup(OpCase *c)
{
  op_in(c, "x", P0, -1, 1);
  op_in(c, "dout", P0, -1, 1);
  op_out(c, "dinp", P0, 0, 0);
}

static void relu_inplace_setup(OpCase *c)
{
  op_in(c, "x", P0, -1, 1);
  op_acc(c, "dout-dinp", P0, -1, 1, 0, 0);
}

#define ACT_RUNS(op)                                                                               \
  static double op##_forward_run(const CohortBackend *be, OpCase *c, void *const *d)               \
  {                                                                                                \
    be->op##_forward(d[1], d[0], P0);                                                              \
    return NAN;                                                                                    \
  }                                                                                                \
  static double op##_backward_run(const CohortBackend *be, OpCase *c, void *const *d)              \
  {                                                                                                \
    be->op##_backward(d[2], d[0], d[1], P0);                                                       \
    return NAN;                                                                                    \
  }                                                                                                \
  static double op##_inplace_run(const CohortBackend *be, OpCase *c, void *const *d)               \
  {                                                                                                \
    be->op##_backward(d[1], d[0], d[1], P0);                                                       \
    return NAN;                                                                                    \
  }

ACT_RUNS(gelu)
ACT_RUNS(silu)
ACT_RUNS(relu)

/* ---- SwiGLU: p = {n, in_place}: silu(gate) * up; the backward writes dgate over dout when
 * in_place ---- */

static void swiglu_setup(OpCase *c)
{
  op_in(c, "gate", P0, -12, 12);
  op_in(c, "up", P0, -2, 2);
  op_out(c, "out", P0, 1e-6, 1e-6);
}

static double swiglu_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->swiglu_forward(d[2], d[0], d[1], P0);
  return NAN;
}

static void swiglu_backward_setup(OpCase *c)
{
  op_in(c, "gate", P0, -12, 12);
  op_in(c, "up", P0, -2, 2);
  if (P1)
    op_acc(c, "dout-then-dgate", P0, -1, 1, 1e-6, 1e-6);
  else {
    op_in(c, "dout", P0, -1, 1);
    op_out(c, "dgate", P0, 1e-6, 1e-6);
  }
  op_out(c, "dup", P0, 1e-6, 1e-6);
}

static double swiglu_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  if (P1)
    be->swiglu_backward(d[2], d[3], d[2], d[0], d[1], P0);
  else
    be->swiglu_backward(d[3], d[4], d[2], d[0], d[1], P0);
  return NAN;
}

/* ---- plain element-wise: p = {n} ---- */

static void residual_setup(OpCase *c)
{
  op_in(c, "a", P0, -2, 2);
  op_in(c, "b", P0, -2, 2);
  op_out(c, "out", P0, 0, 0); /* one add: exact */
}

static double residual_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->residual_forward(d[2], d[0], d[1], P0);
  return NAN;
}

static double axpby_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->axpby(d[2], 0.3f, d[0], -1.7f, d[1], P0);
  return NAN;
}

static void axpby_setup(OpCase *c)
{
  op_in(c, "x", P0, -2, 2);
  op_in(c, "y", P0, -2, 2);
  op_out(c, "out", P0, 1e-6, 1e-6);
}

/* an Euler step in place: out == x */
static void axpby_inplace_setup(OpCase *c)
{
  op_acc(c, "x-out", P0, -2, 2, 1e-6, 1e-6);
  op_in(c, "y", P0, -2, 2);
}

static double axpby_inplace_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->axpby(d[0], 1.0f, d[0], 0.05f, d[1], P0);
  return NAN;
}

static void scale_setup(OpCase *c)
{
  op_acc(c, "values", P0, -1, 1, 1e-6, 1e-5);
}

static double scale_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->scale(d[0], P0, 0.37f);
  return NAN;
}

/* ---- dropout: p = {rows, rows per key, cols}; the keys are 64-bit words, drawn as two ints
 * each. The same hash and one multiply on both sides: the same bits. ---- */

static void dropout_setup(OpCase *c)
{
  op_in(c, "inp", (size_t)P0 * P2, -2, 2);
  op_in_int(c, "keys", 2 * (size_t)((P0 + P1 - 1) / P1), G_MAXINT);
  op_out(c, "out", (size_t)P0 * P2, 0, 0);
}

static double dropout_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->dropout(d[2], d[0], d[1], P0, P1, P2, 0x5a17, 0.3f);
  return NAN;
}

/* ---- adaLN: p = {B, T, C}; the per-example vectors are column slices of [B, 6C] (row stride
 * 6C): shift at 3C, scale at 4C, gate at 5C. T and C are no multiples of the 8 x 32 tiles. ---- */

#define LD    (6 * P2)
#define NTOK  ((size_t)P0 * P1 * P2)
#define NMOD  ((size_t)P0 * LD)
#define SHIFT (3 * P2)
#define SCALE (4 * P2)
#define GATE  (5 * P2)

static void modulate_setup(OpCase *c)
{
  op_in(c, "x", NTOK, -2, 2);
  op_in(c, "mod", NMOD, -1, 1);
  op_out(c, "out", NTOK, 1e-6, 1e-6); /* fma or not */
}

static double modulate_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  float *mod = d[1];
  be->modulate_forward(d[2], d[0], mod + SHIFT, mod + SCALE, P0, P1, P2, LD);
  return NAN;
}

static void modulate_backward_setup(OpCase *c)
{
  op_in(c, "x", NTOK, -2, 2);
  op_in(c, "mod", NMOD, -1, 1);
  op_in(c, "dout", NTOK, -1, 1);
  op_acc(c, "dx", NTOK, -1, 1, 1e-6, 1e-6);
  /* sums of T tokens in another order (partial sums up to ~10, ulp 1e-6); the columns of
   * [B, 6C] outside dshift and dscale must stay as they were */
  op_acc(c, "dmod", NMOD, -1, 1, 1e-4, 1e-5);
}

static double modulate_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  float *mod = d[1], *dmod = d[4];
  be->modulate_backward(d[3], dmod + SHIFT, dmod + SCALE, d[2], d[0], mod + SCALE, P0, P1, P2, LD);
  return NAN;
}

static void gated_setup(OpCase *c)
{
  op_in(c, "x", NTOK, -1, 1);
  op_in(c, "mod", NMOD, -1, 1);
  op_in(c, "y", NTOK, -2, 2);
  op_out(c, "out", NTOK, 1e-6, 1e-6);
}

static double gated_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  float *mod = d[1];
  be->gated_residual_forward(d[3], d[0], mod + GATE, d[2], P0, P1, P2, LD);
  return NAN;
}

static void gated_inplace_setup(OpCase *c)
{
  op_acc(c, "x-out", NTOK, -1, 1, 1e-6, 1e-6);
  op_in(c, "mod", NMOD, -1, 1);
  op_in(c, "y", NTOK, -2, 2);
}

static double gated_inplace_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  float *mod = d[1];
  be->gated_residual_forward(d[0], d[0], mod + GATE, d[2], P0, P1, P2, LD);
  return NAN;
}

static void gated_backward_setup(OpCase *c)
{
  op_in(c, "mod", NMOD, -1, 1);
  op_in(c, "y", NTOK, -2, 2);
  op_in(c, "dout", NTOK, -1, 1);
  op_out(c, "dy", NTOK, 0, 0);                /* one product: exact */
  op_acc(c, "dmod", NMOD, -1, 1, 1e-4, 1e-5); /* dgate: sums over tokens */
  op_acc(c, "dx", NTOK, -1, 1, 0, 0);         /* one add: exact */
}

static double gated_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  float *mod = d[0], *dmod = d[4];
  be->gated_residual_backward(P3 ? d[5] : NULL, d[3], dmod + GATE, d[2], mod + GATE, d[1], P0, P1,
                              P2, LD);
  return NAN;
}

#define ACT(op, lo, hi, e)                                                                         \
  {#op "_forward", "n10007", {10007, lo, hi, e}, act_forward_setup, op##_forward_run},             \
      {#op "_backward", "n10007", {10007, lo, hi, e}, act_backward_setup, op##_backward_run},      \
  {                                                                                                \
#op "_backward", "n10007-in-place", {10007, lo, hi, e }, act_inplace_setup, op##_inplace_run   \
  }

static const OpRow rows[] = {
    ACT(gelu, -6, 6, 5),
    ACT(silu, -12, 12, 6),
    {"swiglu_forward", "n10007", {10007}, swiglu_setup, swiglu_run},
    {"swiglu_backward", "n10007", {10007, 0}, swiglu_backward_setup, swiglu_backward_run},
    {"swiglu_backward", "n10007-in-place", {10007, 1}, swiglu_backward_setup, swiglu_backward_run},
    {"relu_forward", "n10007", {10007}, relu_setup, relu_forward_run},
    {"relu_backward", "n10007", {10007}, relu_backward_setup, relu_backward_run},
    {"relu_backward", "n10007-in-place", {10007}, relu_inplace_setup, relu_inplace_run},
    {"residual_forward", "n10007", {10007}, residual_setup, residual_run},
    {"axpby", "n15400", {15400}, axpby_setup, axpby_run},
    {"axpby", "n15400-in-place", {15400}, axpby_inplace_setup, axpby_inplace_run},
    {"scale", "n10007", {10007}, scale_setup, scale_run},
    {"dropout", "rows60-per-key7-cols33", {60, 7, 33}, dropout_setup, dropout_run},
    {"modulate_forward", "B3-T70-C100", {3, 70, 100}, modulate_setup, modulate_run},
    {"modulate_backward",
     "B3-T70-C100",
     {3, 70, 100},
     modulate_backward_setup,
     modulate_backward_run},
    {"gated_residual_forward", "B3-T70-C100", {3, 70, 100}, gated_setup, gated_run},
    {"gated_residual_forward",
     "B3-T70-C100-in-place",
     {3, 70, 100},
     gated_inplace_setup,
     gated_inplace_run},
    {"gated_residual_backward",
     "B3-T70-C100",
     {3, 70, 100, 1},
     gated_backward_setup,
     gated_backward_run},
    {"gated_residual_backward",
     "B3-T70-C100-no-dx",
     {3, 70, 100, 0},
     gated_backward_setup,
     gated_backward_run},
};

OP_ROWS(ops_rows_pointwise, rows);
