/* Rows of the op harness: multi-head attention, causal (GPT) and not (DiT), grouped-query
 * attention (Llama, Qwen) and cross-attention with key padding (PixArt-α). The backward starts from
 * the CPU's forward output and log-sum-exps on both sides. See tests/backend-ops.h. */
#include "backend-ops.h"

/* p = {B, T, C, NH, causal} */
#define NQKV ((size_t)P0 * P1 * 3 * P2)
#define NOUT ((size_t)P0 * P1 * P2)
#define NLSE ((size_t)P0 * P3 * P1)

static void attention_setup(OpCase *c)
{
  op_in(c, "qkv", NQKV, -1, 1);
  /* online softmax against a two-pass softmax: the same sums in another order */
  op_out(c, "out", NOUT, 1e-5, 1e-4);
  op_out(c, "lse", NLSE, 1e-5, 1e-5);
}

static double attention_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->attention_forward(d[1], d[2], d[0], P0, P1, P2, P3, P4);
  return NAN;
}

static void attention_backward_setup(OpCase *c)
{
  float *qkv = op_in(c, "qkv", NQKV, -1, 1);
  op_in(c, "dout", NOUT, -1, 1);
  float *out = op_in(c, "out", NOUT, 0, 1), *lse = op_in(c, "lse", NLSE, 0, 1);
  op_cpu()->attention_forward(out, lse, qkv, P0, P1, P2, P3, P4);
  op_out(c, "dqkv", NQKV, 1e-4, 1e-3);
}

static double attention_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->attention_backward(d[4], d[1], d[0], d[2], d[3], P0, P1, P2, P3, P4);
  return NAN;
}

#define ATT(label, B, T, C, NH, causal)                                                            \
  {"attention_forward", label, {B, T, C, NH, causal}, attention_setup, attention_run},             \
  {                                                                                                \
    "attention_backward", label, {B, T, C, NH, causal}, attention_backward_setup,                  \
        attention_backward_run                                                                     \
  }

/* ---- grouped-query: p = {B, T, NH, NKV, hd, causal} ---- */
#define GQ   ((size_t)P0 * P1 * P2 * P4)
#define GKV  ((size_t)P0 * P1 * P3 * P4)
#define GLSE ((size_t)P0 * P2 * P1)

static void gqa_setup(OpCase *c)
{
  op_in(c, "q", GQ, -1, 1);
  op_in(c, "k", GKV, -1, 1);
  op_in(c, "v", GKV, -1, 1);
  op_out(c, "out", GQ, 1e-5, 1e-4);
  op_out(c, "lse", GLSE, 1e-5, 1e-5);
}

static double gqa_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->attention_gqa_forward(d[3], d[4], d[0], d[1], d[2], P0, P1, P2, P3, P4, P5);
  return NAN;
}

static void gqa_backward_setup(OpCase *c)
{
  float *q = op_in(c, "q", GQ, -1, 1), *k = op_in(c, "k", GKV, -1, 1);
  float *v = op_in(c, "v", GKV, -1, 1);
  op_in(c, "dout", GQ, -1, 1);
  float *out = op_in(c, "out", GQ, 0, 1), *lse = op_in(c, "lse", GLSE, 0, 1);
  op_cpu()->attention_gqa_forward(out, lse, q, k, v, P0, P1, P2, P3, P4, P5);
  op_out(c, "dq", GQ, 1e-4, 1e-3);
  op_out(c, "dk", GKV, 1e-4, 1e-3);
  op_out(c, "dv", GKV, 1e-4, 1e-3);
}

static double gqa_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->attention_gqa_backward(d[6], d[7], d[8], d[3], d[0], d[1], d[2], d[4], d[5], P0, P1, P2, P3,
                             P4, P5);
  return NAN;
}

#define GQA(label, B, T, NH, NKV, hd, causal)                                                      \
  {"attention_gqa_forward", label, {B, T, NH, NKV, hd, causal}, gqa_setup, gqa_run},               \
  {                                                                                                \
    "attention_gqa_backward", label, {B, T, NH, NKV, hd, causal}, gqa_backward_setup,              \
        gqa_backward_run                                                                           \
  }

/* ---- cross-attention with key padding: p = {B, Tq, Tk, NH, hd, masked} ---- */
#define XQ   ((size_t)P0 * P1 * P3 * P4)
#define XKV  ((size_t)P0 * P2 * P3 * P4)
#define XLSE ((size_t)P0 * P3 * P1)

/* Example b sees all Tk keys, then fewer each example (an odd count past a tile), the last
 * none; a value past Tk (clamped) and, unmasked, no lengths at all (NULL). */
static int *cross_klen(OpCase *c)
{
  int *klen = op_buf(c, "klen", OP_I32, P0);
  for (int b = 0; b < P0; b++)
    klen[b] = b == 0 ? P2 + 3 : b == P0 - 1 ? 0 : MAX(1, P2 - 5 * b);
  return klen;
}

static void cross_setup(OpCase *c)
{
  op_in(c, "q", XQ, -1, 1);
  op_in(c, "k", XKV, -1, 1);
  op_in(c, "v", XKV, -1, 1);
  cross_klen(c);
  op_out(c, "out", XQ, 1e-5, 1e-4);
  op_out(c, "lse", XLSE, 1e-5, 1e-5);
}

static double cross_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->cross_attention_forward(d[4], d[5], d[0], d[1], d[2], P5 ? d[3] : NULL, P0, P1, P2, P3, P4);
  return NAN;
}

static void cross_backward_setup(OpCase *c)
{
  float *q = op_in(c, "q", XQ, -1, 1), *k = op_in(c, "k", XKV, -1, 1);
  float *v = op_in(c, "v", XKV, -1, 1);
  int *klen = cross_klen(c);
  op_in(c, "dout", XQ, -1, 1);
  float *out = op_in(c, "out", XQ, 0, 1), *lse = op_in(c, "lse", XLSE, 0, 1);
  op_cpu()->cross_attention_forward(out, lse, q, k, v, P5 ? klen : NULL, P0, P1, P2, P3, P4);
  op_out(c, "dq", XQ, 1e-4, 1e-3);
  op_out(c, "dk", XKV, 1e-4, 1e-3);
  op_out(c, "dv", XKV, 1e-4, 1e-3);
}

static double cross_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->cross_attention_backward(d[7], d[8], d[9], d[4], d[0], d[1], d[2], d[5], d[6],
                               P5 ? d[3] : NULL, P0, P1, P2, P3, P4);
  return NAN;
}

#define CROSS(label, B, Tq, Tk, NH, hd, masked)                                                    \
  {"cross_attention_forward", label, {B, Tq, Tk, NH, hd, masked}, cross_setup, cross_run},         \
  {                                                                                                \
    "cross_attention_backward", label, {B, Tq, Tk, NH, hd, masked}, cross_backward_setup,          \
        cross_backward_run                                                                         \
  }

/* ---- over a key/value cache: p = {Tq, Tk, NH, NKV, hd} ---- */
#define CQ  ((size_t)P0 * P2 * P4)
#define CKV ((size_t)P1 * P3 * P4)

static void gqa_cached_setup(OpCase *c)
{
  op_in(c, "q", CQ, -1, 1);
  op_in(c, "k", CKV, -1, 1);
  op_in(c, "v", CKV, -1, 1);
  op_out(c, "out", CQ, 1e-5, 1e-4);
}

static double gqa_cached_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->attention_gqa_cached(d[3], d[0], d[1], d[2], P0, P1, P2, P3, P4);
  return NAN;
}

#define GQC(label, Tq, Tk, NH, NKV, hd)                                                            \
  {                                                                                                \
    "attention_gqa_cached", label, {Tq, Tk, NH, NKV, hd}, gqa_cached_setup, gqa_cached_run         \
  }

static const OpRow rows[] = {
    ATT("B2-T45-C48-NH3-causal", 2, 45, 48, 3, 1),   /* head size 16, T no multiple of the tiles */
    ATT("B1-T70-C128-NH2-causal", 1, 70, 128, 2, 1), /* head size 64 (GPT-2's) */
    ATT("B1-T33-C128-NH1-causal", 1, 33, 128, 1, 1), /* head size 128, the largest */
    ATT("B2-T9-C60-NH2-causal", 2, 9, 60, 2, 1),     /* head size 30: lanes past the head idle */
    ATT("B1-T1-C32-NH4-causal", 1, 1, 32, 4, 1),     /* one position */
    ATT("B2-T45-C48-NH3", 2, 45, 48, 3, 0),
    ATT("B1-T100-C128-NH2", 1, 100, 128, 2, 0), /* four key tiles, the last partial */
    ATT("B1-T33-C128-NH1", 1, 33, 128, 1, 0),
    ATT("B2-T9-C60-NH2", 2, 9, 60, 2, 0),
    ATT("B1-T1-C32-NH4", 1, 1, 32, 4, 0),
    ATT("B4-T64-C72-NH6", 4, 64, 72, 6, 0),        /* DiT-like: 64 patches, head size 12 */
    ATT("B2-T45-C96-NH3-causal", 2, 45, 96, 3, 1), /* head size 32 (tiny-dit's): two keys */
    ATT("B2-T37-C64-NH2", 2, 37, 64, 2, 0),        /* at a time in the key/value gradient */
    GQA("B2-T45-NH6-NKV2-hd16-causal", 2, 45, 6, 2, 16, 1),
    GQA("B1-T70-NH9-NKV3-hd64-causal", 1, 70, 9, 3, 64, 1),   /* SmolLM2-135M's heads */
    GQA("B1-T33-NH4-NKV1-hd128-causal", 1, 33, 4, 1, 128, 1), /* multi-query, Qwen3's head size */
    GQA("B2-T9-NH2-NKV2-hd30-causal", 2, 9, 2, 2, 30, 1),     /* no grouping */
    GQA("B2-T40-NH4-NKV2-hd24", 2, 40, 4, 2, 24, 0),
    GQA("B2-T23-NH4-NKV2-hd36-causal", 2, 23, 4, 2, 36, 1), /* two keys at a time, lanes left */
    CROSS("B2-Tq16-Tk21-NH2-hd32-masked", 2, 16, 21, 2, 32, 1),
    CROSS("B3-Tq64-Tk45-NH3-hd16-masked", 3, 64, 45, 3, 16, 1), /* DiT-like: 64 patches */
    CROSS("B2-Tq9-Tk70-NH2-hd64-masked", 2, 9, 70, 2, 64, 1),   /* more keys than queries */
    CROSS("B1-Tq33-Tk7-NH1-hd30", 1, 33, 7, 1, 30, 0),          /* no lengths (NULL) */
    GQC("Tq1-Tk1-NH4-NKV2-hd16", 1, 1, 4, 2, 16),               /* the first position */
    GQC("Tq1-Tk45-NH6-NKV2-hd16", 1, 45, 6, 2, 16),             /* one step, keys across tiles */
    GQC("Tq1-Tk70-NH9-NKV3-hd64", 1, 70, 9, 3, 64),             /* SmolLM2-135M's heads */
    GQC("Tq1-Tk33-NH4-NKV1-hd128", 1, 33, 4, 1, 128),           /* multi-query, Qwen3's head size */
    GQC("Tq13-Tk13-NH4-NKV2-hd30", 13, 13, 4, 2, 30),           /* a prefill */
    GQC("Tq11-Tk50-NH6-NKV3-hd24", 11, 50, 6, 3, 24),           /* a prefill after a context */
};

OP_ROWS(ops_rows_attention, rows);
