/* Rows of the op harness: matrix products, precision (bf16 conversions, the reducer's stream
 * variants included) and plain memory (zero, copy). See tests/backend-ops.h. */
#include "backend-ops.h"
#include "kernels/math-inline.h"

/* ---- gemm: p = {trans_a, trans_b, mode, M, N, K, pad}, row strides `pad` wider than the
 * rows, alpha 0.7, beta 0.3 (C is read too). ---- */

static void gemm_setup(OpCase *c)
{
  int ta = P0, tb = P1, M = P3, N = P4, K = P5, pad = P6;
  size_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  op_in(c, "A", a_rows * (a_cols + pad), -1, 1);
  op_in(c, "B", b_rows * (b_cols + pad), -1, 1);
  /* fp32: sums of K products of values in [-1, 1] in another order. TF32 keeps 10 mantissa
   * bits of each operand, the CPU all 23. bf16/fp16: both sides multiply the same rounded
   * operands exactly, but tensor cores add a block of products before rounding and may
   * truncate the aligned partial sums (about 2^-23 of the largest term per addition), and the
   * CPU's vdpbf16ps adds pairs before rounding: up to K of those errors (K = 53: ~1e-5 each
   * way at |C| ~ 3), so 1e-4 (a wrongly rounded operand moves C by ~|B| 2^-8 ~ 4e-3). */
  double atol = P2 == COHORT_GEMM_FP32 ? 2e-5 : P2 == COHORT_GEMM_TF32 ? 2e-2 : 1e-4;
  double rtol = P2 == COHORT_GEMM_FP32 ? 1e-5 : P2 == COHORT_GEMM_TF32 ? 1e-2 : 1e-4;
  op_acc(c, "C", (size_t)M * (N + pad), -1, 1, atol, rtol);
}

static double gemm_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  int ta = P0, tb = P1, M = P3, N = P4, K = P5, pad = P6;
  int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
  be->set_gemm_mode((CohortGemmMode)P2);
  be->gemm(ta, tb, M, N, K, 0.7f, d[0], lda, d[1], ldb, 0.3f, d[2], N + pad);
  be->set_gemm_mode(COHORT_GEMM_FP32);
  return NAN;
}

/* ---- bias: p = {N, cols}: several row chunks, a partial column stripe ---- */

static void add_bias_setup(OpCase *c)
{
  op_acc(c, "out", (size_t)P0 * P1, -1, 1, 0, 0); /* one add per element: exact */
  op_in(c, "bias", P1, -1, 1);
}

static double add_bias_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->add_bias(d[0], d[1], P0, P1);
  return NAN;
}

static void bias_backward_setup(OpCase *c)
{
  op_acc(c, "dbias", P1, -1, 1, 1e-5, 1e-5);
  op_in(c, "dout", (size_t)P0 * P1, -1, 1);
}

static double bias_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->bias_backward(d[0], d[1], P0, P1);
  return NAN;
}

/* ---- bf16: p = {n}; the same bits on both sides ---- */

static void to_bf16_setup(OpCase *c)
{
  float *x = op_in(c, "x", P0, -3e4, 3e4);
  x[0] = INFINITY, x[1] = -0.0f, x[2] = 1e-40f, x[3] = 3.3961776e38f; /* the last rounds to inf */
  op_u16(c, "bf16", P0, TRUE);
}

static double to_bf16_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->to_bf16(d[1], d[0], P0);
  return NAN;
}

/* The reducer's variant on a stream of its own; a backend without streams (the CPU) is
 * compared through to_bf16, which the stream variant must equal. */
static double to_bf16_on_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  if (be->to_bf16_on == NULL) {
    be->to_bf16(d[1], d[0], P0);
    return NAN;
  }
  void *s = be->stream_new();
  be->to_bf16_on(s, NULL, d[1], d[0], P0, NULL);
  be->stream_copy(s, NULL, NULL, NULL, 0, 1); /* waits for the stream */
  be->stream_free(s);
  return NAN;
}

static void from_bf16_setup(OpCase *c)
{
  g_autofree float *x = g_new(float, P0);
  op_fill(c, x, P0, -3e4, 3e4);
  uint16_t *h = op_u16(c, "bf16", P0, FALSE);
  op_cpu()->to_bf16(h, x, P0);
  op_out(c, "out", P0, 0, 0); /* one product, rounded once */
}

static double from_bf16_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->from_bf16(d[1], d[0], P0, 0.25f);
  return NAN;
}

/* dst = fp32(src) / divisor, one rounding; without streams the same on the host (the CPU
 * backend's memory is host memory). */
static double from_bf16_div_on_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  const float divisor = 3.0f;
  if (be->from_bf16_div_on == NULL) {
    const uint16_t *src = d[0];
    float *dst = d[1];
    for (int i = 0; i < P0; i++)
      dst[i] = cohort_bf16_to_f32(src[i]) / divisor;
    return NAN;
  }
  void *s = be->stream_new();
  be->from_bf16_div_on(s, d[1], d[0], P0, divisor);
  be->stream_free(s);
  return NAN;
}

/* ---- memory ---- */

static void zero_setup(OpCase *c)
{
  op_out(c, "x", P0, 0, 0);
}

static double zero_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->zero(d[0], (size_t)P0 * sizeof(float));
  return NAN;
}

static void copy_setup(OpCase *c)
{
  op_in(c, "src", P0, -1, 1);
  op_out(c, "dst", P0, 0, 0);
}

static double copy_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->copy(d[1], d[0], (size_t)P0 * sizeof(float));
  return NAN;
}

#define GEMM(ta, tb, mode, name, pad)                                                              \
  {                                                                                                \
    "gemm", "ta" #ta "-tb" #tb "-" name, {ta, tb, mode, 37, 29, 53, pad}, gemm_setup, gemm_run     \
  }
#define GEMM4(mode, name, pad)                                                                     \
  GEMM(0, 0, mode, name, pad), GEMM(0, 1, mode, name, pad), GEMM(1, 0, mode, name, pad),           \
      GEMM(1, 1, mode, name, pad)

static const OpRow rows[] = {
    GEMM4(COHORT_GEMM_FP32, "fp32", 3),
    GEMM4(COHORT_GEMM_TF32, "tf32", 3),
    GEMM4(COHORT_GEMM_BF16, "bf16", 3),
    GEMM4(COHORT_GEMM_FP16, "fp16", 3),
    /* C's rows 31 floats apart: on a GPU computed in an aligned staging block, C read first */
    GEMM4(COHORT_GEMM_BF16, "bf16-odd-ldc", 2),
    {"add_bias", "N300-cols77", {300, 77}, add_bias_setup, add_bias_run},
    {"bias_backward", "N300-cols77", {300, 77}, bias_backward_setup, bias_backward_run},
    {"to_bf16", "n1000003", {1000003}, to_bf16_setup, to_bf16_run},
    {"from_bf16", "n1000003", {1000003}, from_bf16_setup, from_bf16_run},
    {"to_bf16_on", "n1000003", {1000003}, to_bf16_setup, to_bf16_on_run},
    {"from_bf16_div_on", "n100003", {100003}, from_bf16_setup, from_bf16_div_on_run},
    {"zero", "n10007", {10007}, zero_setup, zero_run},
    {"copy", "n10007", {10007}, copy_setup, copy_run},
};

OP_ROWS(ops_rows_linear, rows);
