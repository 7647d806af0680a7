/* Rows of the op harness: token and position embeddings, label rows, timestep features and
 * image patches. See tests/backend-ops.h. */
#include "backend-ops.h"

/* ---- token + position: p = {B, T, C, V}, a small vocabulary so that tokens repeat ---- */

static void embedding_setup(OpCase *c)
{
  op_in_int(c, "tokens", (size_t)P0 * P1, P3);
  op_in(c, "wte", (size_t)P3 * P2, -1, 1);
  op_in(c, "wpe", (size_t)P1 * P2, -1, 1);
  op_out(c, "out", (size_t)P0 * P1 * P2, 0, 0); /* one add: exact */
}

static double embedding_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->embedding_forward(d[3], d[0], d[1], d[2], P0, P1, P2);
  return NAN;
}

static void embedding_backward_setup(OpCase *c)
{
  op_in_int(c, "tokens", (size_t)P0 * P1, P3);
  op_in(c, "dout", (size_t)P0 * P1 * P2, -1, 1);
  /* accumulates into random tables; both sum positions in the same order */
  op_acc(c, "dwte", (size_t)P3 * P2, -1, 1, 1e-6, 1e-6);
  op_acc(c, "dwpe", (size_t)P1 * P2, -1, 1, 1e-6, 1e-6);
}

static double embedding_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->embedding_backward(d[2], d[3], d[1], d[0], P0, P1, P2);
  return NAN;
}

/* a frozen table: only the other gradient (the frozen one stays as it was) */
static double embedding_backward_no_wte_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->embedding_backward(NULL, d[3], d[1], d[0], P0, P1, P2);
  return NAN;
}

static double embedding_backward_no_wpe_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->embedding_backward(d[2], NULL, d[1], d[0], P0, P1, P2);
  return NAN;
}

/* ---- label rows: p = {B, V, C}, few labels so that rows repeat ---- */

static void rows_gather_setup(OpCase *c)
{
  op_in_int(c, "rows", P0, P1);
  op_in(c, "table", (size_t)P1 * P2, -1, 1);
  op_out(c, "out", (size_t)P0 * P2, 0, 0);
}

static double rows_gather_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->rows_gather(d[2], d[1], d[0], P0, P2);
  return NAN;
}

static void rows_scatter_setup(OpCase *c)
{
  op_in_int(c, "rows", P0, P1);
  op_in(c, "dout", (size_t)P0 * P2, -1, 1);
  /* repeated rows added in order of b on both sides: the same bits */
  op_acc(c, "dtable", (size_t)P1 * P2, -1, 1, 0, 0);
}

static double rows_scatter_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->rows_scatter_add(d[2], d[1], d[0], P0, P2);
  return NAN;
}

/* ---- timestep features: p = {B, dim}; both in double, rounded once ---- */

static void timestep_setup(OpCase *c)
{
  float *t = op_in(c, "t", P0, 0, 1000);
  t[0] = 0.0f, t[1] = 999.0f;
  op_out(c, "out", (size_t)P0 * P1, 1e-7, 0);
}

static double timestep_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->timestep_embedding(d[1], d[0], P0, P1, 10000.0f);
  return NAN;
}

/* ---- patches: p = {B, C, H, W, p}; permutations, exact ---- */

static void patch_setup(OpCase *c)
{
  size_t n = (size_t)P0 * P1 * P2 * P3;
  op_in(c, "in", n, -1, 1);
  op_out(c, "out", n, 0, 0);
}

#define PATCH_RUN(op)                                                                              \
  static double op##_run(const CohortBackend *be, OpCase *c, void *const *d)                       \
  {                                                                                                \
    be->op(d[1], d[0], P0, P1, P2, P3, P4);                                                        \
    return NAN;                                                                                    \
  }
PATCH_RUN(patchify)
PATCH_RUN(patchify_backward)
PATCH_RUN(unpatchify)
PATCH_RUN(unpatchify_backward)

/* DiT-S/2 on 32 x 32 latents; not square; one pixel per token */
#define PATCH_SHAPES(op)                                                                           \
  {#op, "B2-C4-32x32-p2", {2, 4, 32, 32, 2}, patch_setup, op##_run},                               \
      {#op, "B3-C3-12x20-p4", {3, 3, 12, 20, 4}, patch_setup, op##_run},                           \
  {                                                                                                \
#op, "B1-C1-5x5-p1", {1, 1, 5, 5, 1 }, patch_setup, op##_run                                   \
  }

/* ---- rotary embedding: p = {B, T, H, hd, pos0, in_place}, tables for pos0 + T positions;
 * one rotation per pair on both sides ---- */
#define ROPE_N    ((size_t)P0 * P1 * P2 * P3)
#define ROPE_ROWS ((size_t)(P4 + P1) * (P3 / 2))

static void rope_setup(OpCase *c)
{
  op_in(c, "cos", ROPE_ROWS, -1, 1);
  op_in(c, "sin", ROPE_ROWS, -1, 1);
  if (P5)
    op_acc(c, "x-then-out", ROPE_N, -2, 2, 1e-6, 1e-6);
  else {
    op_in(c, "x", ROPE_N, -2, 2);
    op_out(c, "out", ROPE_N, 1e-6, 1e-6);
  }
}

static double rope_forward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->rope_forward(d[P5 ? 2 : 3], d[2], d[0], d[1], P0, P1, P2, P3, P4);
  return NAN;
}

static double rope_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->rope_backward(d[P5 ? 2 : 3], d[2], d[0], d[1], P0, P1, P2, P3, P4);
  return NAN;
}

#define ROPE(label, B, T, H, hd, pos0, in_place)                                                   \
  {"rope_forward", label, {B, T, H, hd, pos0, in_place}, rope_setup, rope_forward_run},            \
  {                                                                                                \
    "rope_backward", label, {B, T, H, hd, pos0, in_place}, rope_setup, rope_backward_run           \
  }

static const OpRow rows[] = {
    {"embedding_forward", "B3-T17-C40-V11", {3, 17, 40, 11}, embedding_setup, embedding_run},
    {"embedding_backward",
     "B3-T17-C40-V11",
     {3, 17, 40, 11},
     embedding_backward_setup,
     embedding_backward_run},
    {"embedding_backward",
     "B3-T17-C40-V11-no-dwte",
     {3, 17, 40, 11},
     embedding_backward_setup,
     embedding_backward_no_wte_run},
    {"embedding_backward",
     "B3-T17-C40-V11-no-dwpe",
     {3, 17, 40, 11},
     embedding_backward_setup,
     embedding_backward_no_wpe_run},
    /* many positions per token, and columns past one block */
    {"embedding_backward",
     "B4-T300-C300-V50",
     {4, 300, 300, 50},
     embedding_backward_setup,
     embedding_backward_run},
    /* a vocabulary wider than the positions: most tokens once */
    {"embedding_backward",
     "B2-T64-C8-V50257",
     {2, 64, 8, 50257},
     embedding_backward_setup,
     embedding_backward_run},
    ROPE("B2-T37-H3-hd16", 2, 37, 3, 16, 0, 0),
    ROPE("B1-T20-H2-hd64-pos5-in-place", 1, 20, 2, 64, 5, 1), /* a KV cache's later positions */
    ROPE("B1-T9-H1-hd128", 1, 9, 1, 128, 0, 0),
    {"rows_gather", "B200-V11-C300", {200, 11, 300}, rows_gather_setup, rows_gather_run},
    {"rows_scatter_add", "B200-V11-C300", {200, 11, 300}, rows_scatter_setup, rows_scatter_run},
    {"timestep_embedding", "B64-dim256", {64, 256}, timestep_setup, timestep_run},
    {"timestep_embedding", "B64-dim7", {64, 7}, timestep_setup, timestep_run},
    PATCH_SHAPES(patchify),
    PATCH_SHAPES(patchify_backward),
    PATCH_SHAPES(unpatchify),
    PATCH_SHAPES(unpatchify_backward),
};

OP_ROWS(ops_rows_embeddings, rows);
