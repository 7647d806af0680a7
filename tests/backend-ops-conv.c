/* Rows of the op harness: convolution (im2col + GEMM, fp32 and bf16; channels last through
 * oneDNN/cuDNN), max-pooling and global average pooling. See tests/backend-ops.h. */
#include "backend-ops.h"

/* p = {B, C_in, H, W, C_out, K, stride, pad} */
#define HO ((P2 + 2 * P7 - P5) / P6 + 1)
#define WO ((P3 + 2 * P7 - P5) / P6 + 1)
#define NX ((size_t)P0 * P1 * P2 * P3)
#define NW ((size_t)P4 * P1 * P5 * P5)
#define NY ((size_t)P0 * P4 * HO * WO)

static void conv_setup(OpCase *c)
{
  op_in(c, "x", NX, -1, 1);
  op_in(c, "w", NW, -1, 1);
  /* sums of up to C*K*K products of values in [-1, 1], in another order (bf16: exact products
   * of the same rounded operands) */
  op_out(c, "y", NY, 1e-4, 1e-5);
}

static double conv_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->conv2d_forward(d[2], d[0], d[1], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

static double conv_bf16_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->set_gemm_mode(COHORT_GEMM_BF16);
  conv_run(be, c, d);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  return NAN;
}

/* dinp and dweight accumulate into random values */
static void conv_backward_setup(OpCase *c)
{
  op_in(c, "x", NX, -1, 1);
  op_in(c, "w", NW, -1, 1);
  op_in(c, "dy", NY, -1, 1);
  op_acc(c, "dx", NX, -1, 1, 1e-4, 1e-5);
  /* dweight sums B*Ho*Wo products (131072 in the largest case): float rounding grows with
   * the number of terms, ~1e-8 of it per term on both sides, so 1e-7 per term */
  op_acc(c, "dw", NW, -1, 1, fmax(1e-4, 1e-7 * P0 * HO * WO), 1e-5);
}

static double conv_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->conv2d_backward(d[3], d[4], d[2], d[0], d[1], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

/* the first layer: no input gradient, the same dweight (dx must stay as it was) */
static double conv_backward_no_dinp_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->conv2d_backward(NULL, d[4], d[2], d[0], d[1], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

/* a frozen kernel: the input gradient only (dw must stay as it was) */
static double conv_backward_no_dweight_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->conv2d_backward(d[3], NULL, d[2], d[0], d[1], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

/* ---- global average pooling: p = {B, C, HW} ---- */

static void pool_setup(OpCase *c)
{
  op_in(c, "x", (size_t)P0 * P1 * P2, -1, 2);
  op_out(c, "out", (size_t)P0 * P1, 1e-6, 1e-6);
}

static double pool_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->avgpool_global_forward(d[1], d[0], P0, P1, P2);
  return NAN;
}

static void pool_backward_setup(OpCase *c)
{
  op_in(c, "dout", (size_t)P0 * P1, -1, 1);
  op_acc(c, "dx", (size_t)P0 * P1 * P2, -1, 1, 0, 0);
}

static double pool_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->avgpool_global_backward(d[1], d[0], P0, P1, P2);
  return NAN;
}

/* ---- channels last (NHWC): the same shapes and tolerances as above ---- */

static void conv_nhwc_setup(OpCase *c)
{
  op_in(c, "x", NX, -1, 1);
  op_in(c, "w", NW, -1, 1);
  op_out(c, "y", NY, 1e-4, 1e-5);
}

static double conv_nhwc_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->conv2d_nhwc_forward(d[2], d[0], d[1], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

/* dx overwritten (accumulate 0: junk first) or accumulated (1), dw accumulated */
static void conv_nhwc_backward_setup(OpCase *c)
{
  op_in(c, "x", NX, -1, 1);
  op_in(c, "w", NW, -1, 1);
  op_in(c, "dy", NY, -1, 1);
  op_acc(c, "dx", NX, -1, 1, 1e-4, 1e-5);
  op_acc(c, "dw", NW, -1, 1, fmax(1e-4, 1e-7 * P0 * HO * WO), 1e-5);
}

static double conv_nhwc_backward_acc_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->conv2d_nhwc_backward(d[3], 1, d[4], d[2], d[0], d[1], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

static double conv_nhwc_backward_set_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->conv2d_nhwc_backward(d[3], 0, d[4], d[2], d[0], d[1], P0, P1, P2, P3, P4, P5, P6, P7);
  return NAN;
}

/* max-pooling: p = {B, C, H, W, K, stride, pad}; distinct random values, so no ties */
#define PO_H ((P2 + 2 * P6 - P4) / P5 + 1)
#define PO_W ((P3 + 2 * P6 - P4) / P5 + 1)

static void maxpool_setup(OpCase *c)
{
  op_in(c, "x", (size_t)P0 * P1 * P2 * P3, -1, 1);
  op_out(c, "out", (size_t)P0 * P1 * PO_H * PO_W, 0, 0);
}

static double maxpool_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->maxpool2d_nhwc_forward(d[1], d[0], P0, P1, P2, P3, P4, P5, P6);
  return NAN;
}

static void maxpool_backward_setup(OpCase *c)
{
  op_in(c, "x", (size_t)P0 * P1 * P2 * P3, -1, 1);
  op_in(c, "dout", (size_t)P0 * P1 * PO_H * PO_W, -1, 1);
  op_acc(c, "dx", (size_t)P0 * P1 * P2 * P3, -1, 1, 1e-6, 1e-6);
}

static double maxpool_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->maxpool2d_nhwc_backward(d[2], d[1], d[0], P0, P1, P2, P3, P4, P5, P6);
  return NAN;
}

static double pool_nhwc_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->avgpool_global_nhwc_forward(d[1], d[0], P0, P1, P2);
  return NAN;
}

static double pool_nhwc_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->avgpool_global_nhwc_backward(d[1], d[0], P0, P1, P2);
  return NAN;
}

#define CONV_NHWC(label, ...)                                                                      \
  {"conv2d_nhwc_forward", label, {__VA_ARGS__}, conv_nhwc_setup, conv_nhwc_run},                   \
      {"conv2d_nhwc_backward",                                                                     \
       label,                                                                                      \
       {__VA_ARGS__},                                                                              \
       conv_nhwc_backward_setup,                                                                   \
       conv_nhwc_backward_acc_run},                                                                \
  {                                                                                                \
    "conv2d_nhwc_backward", label "-set", {__VA_ARGS__}, conv_nhwc_backward_setup,                 \
        conv_nhwc_backward_set_run                                                                 \
  }

#define CONV(label, ...)                                                                           \
  {"conv2d_forward", label, {__VA_ARGS__}, conv_setup, conv_run},                                  \
  {                                                                                                \
    "conv2d_backward", label, {__VA_ARGS__}, conv_backward_setup, conv_backward_run                \
  }

static const OpRow rows[] = {
    CONV("B3-C3-32x32-O16-K3-S1-P1", 3, 3, 32, 32, 16, 3, 1, 1),   /* the ResNet stem */
    CONV("B4-C16-16x16-O32-K3-S2-P1", 4, 16, 16, 16, 32, 3, 2, 1), /* downsampling */
    CONV("B2-C4-7x5-O3-K3-S2-P1", 2, 4, 7, 5, 3, 3, 2, 1),         /* odd, unequal sides */
    CONV("B2-C8-9x9-O6-K1-S2-P0", 2, 8, 9, 9, 6, 1, 2, 0),         /* the 1x1 shortcut */
    CONV("B1-C2-2x3-O2-K5-S1-P2", 1, 2, 2, 3, 2, 5, 1, 2), /* a kernel wider than the input */
    CONV("B1-C5-6x6-O4-K3-S1-P0", 1, 5, 6, 6, 4, 3, 1, 0), /* one image: no regrouping */
    /* 576 * 16384 floats of columns per image: groups of 7 images, the last one alone */
    CONV("B8-C64-128x128-O8-K3-S1-P1", 8, 64, 128, 128, 8, 3, 1, 1),
    {"conv2d_backward",
     "B4-C16-16x16-O32-K3-S2-P1-no-dinp",
     {4, 16, 16, 16, 32, 3, 2, 1},
     conv_backward_setup,
     conv_backward_no_dinp_run},
    {"conv2d_backward",
     "B4-C16-16x16-O32-K3-S2-P1-no-dweight",
     {4, 16, 16, 16, 32, 3, 2, 1},
     conv_backward_setup,
     conv_backward_no_dweight_run},
    {"conv2d_forward",
     "B4-C16-16x16-O16-K3-S1-P1-bf16",
     {4, 16, 16, 16, 16, 3, 1, 1},
     conv_setup,
     conv_bf16_run},
    {"avgpool_global_forward", "B7-C9-HW49", {7, 9, 49}, pool_setup, pool_run},
    {"avgpool_global_backward", "B7-C9-HW49", {7, 9, 49}, pool_backward_setup, pool_backward_run},
    CONV_NHWC("B3-C3-32x32-O16-K7-S2-P3", 3, 3, 32, 32, 16, 7, 2, 3), /* torchvision's stem */
    CONV_NHWC("B2-C32-8x8-O32-K3-S1-P1", 2, 32, 8, 8, 32, 3, 1, 1),   /* where Winograd runs */
    CONV_NHWC("B2-C4-7x5-O3-K3-S2-P1", 2, 4, 7, 5, 3, 3, 2, 1),       /* odd, unequal sides */
    CONV_NHWC("B2-C8-9x9-O6-K1-S2-P0", 2, 8, 9, 9, 6, 1, 2, 0),       /* the 1x1 shortcut */
    /* the CIFAR ResNet's first shortcut at 64 px, width 4: oneDNN 2.6's backward weights wrote
     * past its buffers here (fuzz-folders' 1 x 16384 image at image_size 512 found it) */
    CONV_NHWC("B1-C4-64x64-O8-K1-S2-P0", 1, 4, 64, 64, 8, 1, 2, 0),
    {"maxpool2d_nhwc_forward",
     "B2-C5-9x8-K3-S2-P1",
     {2, 5, 9, 8, 3, 2, 1},
     maxpool_setup,
     maxpool_run},
    {"maxpool2d_nhwc_backward",
     "B2-C5-9x8-K3-S2-P1",
     {2, 5, 9, 8, 3, 2, 1},
     maxpool_backward_setup,
     maxpool_backward_run},
    {"avgpool_global_nhwc_forward", "B7-C9-HW49", {7, 9, 49}, pool_setup, pool_nhwc_run},
    {"avgpool_global_nhwc_backward",
     "B7-C9-HW49",
     {7, 9, 49},
     pool_backward_setup,
     pool_nhwc_backward_run},
};

OP_ROWS(ops_rows_conv, rows);
