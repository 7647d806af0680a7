/* Rows of the op harness: the ops the VAE of latent diffusion adds (GroupNorm, the softmax of
 * rows, a convolution's channel bias, nearest up-sampling, zero padding). See
 * tests/backend-ops.h; their CPU versions are checked against finite differences and float64
 * PyTorch in test-layers-vae. */
#include "backend-ops.h"

/* ---- GroupNorm: p = {B, C, HW, G} ---- */
#define GN_N ((size_t)P0 * P1 * P2)

static void gn_setup(OpCase *c)
{
  op_in(c, "x", GN_N, -2, 3);
  op_in(c, "w", (size_t)P1, 0.5, 1.5);
  op_in(c, "b", (size_t)P1, -1, 1);
  op_out(c, "y", GN_N, 1e-5, 1e-5);
  op_out(c, "mean", (size_t)P0 * P3, 1e-6, 1e-6);
  op_out(c, "rstd", (size_t)P0 * P3, 1e-5, 1e-5);
}

static double gn_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->group_norm_forward(d[3], d[4], d[5], d[0], d[1], d[2], P0, P1, P2, P3, 1e-6f);
  return NAN;
}

/* the forward's statistics come from the CPU on the host inputs */
static void gn_backward_setup(OpCase *c)
{
  float *x = op_in(c, "x", GN_N, -2, 3);
  float *w = op_in(c, "w", (size_t)P1, 0.5, 1.5);
  op_in(c, "dy", GN_N, -1, 1);
  float *mean = op_in(c, "mean", (size_t)P0 * P3, 0, 0);
  float *rstd = op_in(c, "rstd", (size_t)P0 * P3, 0, 0);
  g_autofree float *y = g_new(float, GN_N);
  op_cpu()->group_norm_forward(y, mean, rstd, x, w, NULL, P0, P1, P2, P3, 1e-6f);
  op_acc(c, "dx", GN_N, -1, 1, 1e-5, 1e-5);
  op_acc(c, "dw", (size_t)P1, -1, 1, 1e-4, 1e-5);
  op_acc(c, "db", (size_t)P1, -1, 1, 1e-4, 1e-5);
}

static double gn_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->group_norm_backward(d[5], d[6], d[7], d[2], d[0], d[1], d[3], d[4], P0, P1, P2, P3);
  return NAN;
}

/* ---- softmax of rows: p = {N, V}, scale 1/8 ---- */

static void softmax_setup(OpCase *c)
{
  op_in(c, "x", (size_t)P0 * P1, -8, 8);
  op_out(c, "y", (size_t)P0 * P1, 1e-7, 1e-5);
}

static double softmax_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->softmax_forward(d[1], d[0], P0, P1, 0.125f);
  return NAN;
}

static void softmax_backward_setup(OpCase *c)
{
  float *x = op_in(c, "x", (size_t)P0 * P1, -8, 8);
  float *y = op_in(c, "y", (size_t)P0 * P1, 0, 0);
  op_cpu()->softmax_forward(y, x, P0, P1, 0.125f);
  op_in(c, "dy", (size_t)P0 * P1, -1, 1);
  op_out(c, "dx", (size_t)P0 * P1, 1e-7, 1e-5);
}

static double softmax_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->softmax_backward(d[3], d[1], d[2], P0, P1, 0.125f);
  return NAN;
}

/* ---- a convolution's channel bias: p = {B, C, HW} ---- */

static void bias_setup(OpCase *c)
{
  op_in(c, "bias", (size_t)P1, -1, 1);
  op_acc(c, "out", (size_t)P0 * P1 * P2, -1, 1, 1e-6, 1e-6);
}

static double bias_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->channel_bias_forward(d[1], d[0], P0, P1, P2);
  return NAN;
}

static void bias_backward_setup(OpCase *c)
{
  op_in(c, "dout", (size_t)P0 * P1 * P2, -1, 1);
  op_acc(c, "dbias", (size_t)P1, -1, 1, 1e-5, 1e-5);
}

static double bias_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->channel_bias_backward(d[1], d[0], P0, P1, P2);
  return NAN;
}

/* ---- nearest up-sampling: p = {B, C, H, W, f} ---- */
#define UP_IN  ((size_t)P0 * P1 * P2 * P3)
#define UP_OUT (UP_IN * P4 * P4)

static void up_setup(OpCase *c)
{
  op_in(c, "x", UP_IN, -1, 1);
  op_out(c, "y", UP_OUT, 0, 0);
}

static double up_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->upsample_nearest_forward(d[1], d[0], P0, P1, P2, P3, P4);
  return NAN;
}

static void up_backward_setup(OpCase *c)
{
  op_in(c, "dy", UP_OUT, -1, 1);
  op_acc(c, "dx", UP_IN, -1, 1, 1e-6, 1e-6);
}

static double up_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->upsample_nearest_backward(d[1], d[0], P0, P1, P2, P3, P4);
  return NAN;
}

/* ---- zero padding: p = {B, C, H, W, top, bottom, left, right} ---- */
#define PAD_IN  ((size_t)P0 * P1 * P2 * P3)
#define PAD_OUT ((size_t)P0 * P1 * (P2 + P4 + P5) * (P3 + P6 + P7))

static void pad_setup(OpCase *c)
{
  op_in(c, "x", PAD_IN, -1, 1);
  op_out(c, "y", PAD_OUT, 0, 0);
}

static double pad_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->pad2d_forward(d[1], d[0], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

static void pad_backward_setup(OpCase *c)
{
  op_in(c, "dy", PAD_OUT, -1, 1);
  op_acc(c, "dx", PAD_IN, -1, 1, 0, 0);
}

static double pad_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->pad2d_backward(d[1], d[0], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

static const OpRow rows[] = {
    {"group_norm_forward", "B2-C8-HW25-G4", {2, 8, 25, 4}, gn_setup, gn_run},
    {"group_norm_forward", "B1-C32-HW64-G32", {1, 32, 64, 32}, gn_setup, gn_run},
    {"group_norm_backward", "B2-C8-HW25-G4", {2, 8, 25, 4}, gn_backward_setup, gn_backward_run},
    {"softmax_forward", "N7-V33", {7, 33}, softmax_setup, softmax_run},
    {"softmax_backward", "N7-V33", {7, 33}, softmax_backward_setup, softmax_backward_run},
    {"channel_bias_forward", "B3-C5-HW17", {3, 5, 17}, bias_setup, bias_run},
    {"channel_bias_backward", "B3-C5-HW17", {3, 5, 17}, bias_backward_setup, bias_backward_run},
    {"upsample_nearest_forward", "B2-C3-5x4-f2", {2, 3, 5, 4, 2}, up_setup, up_run},
    {"upsample_nearest_backward",
     "B2-C3-5x4-f2",
     {2, 3, 5, 4, 2},
     up_backward_setup,
     up_backward_run},
    {"pad2d_forward", "B2-C3-5x4-0101", {2, 3, 5, 4, 0, 1, 0, 1}, pad_setup, pad_run},
    {"pad2d_backward",
     "B2-C3-5x4-0101",
     {2, 3, 5, 4, 0, 1, 0, 1},
     pad_backward_setup,
     pad_backward_run},
};

OP_ROWS(ops_rows_vae, rows);
