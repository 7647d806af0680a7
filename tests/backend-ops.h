/* The op table harness (tests only), in the spirit of ggml's test-backend-ops: one row per
 * case of an op of kernels/backend.h, run on a reference backend (the CPU) and on the backend
 * under test from the same host inputs, the row's outputs compared.
 *
 * A row names its op, a label for its shape, up to 8 shape numbers (p[]), a `setup` that
 * declares the case's buffers in order and fills them on the host, and a `run` that calls the
 * op on one backend with those buffers in backend memory (d[0], d[1], … in declaration
 * order). Buffers are inputs (random, uniform in [lo, hi)), outputs the op overwrites (filled
 * with junk first, so an op that forgets a value is caught), or outputs the op accumulates
 * into (random start values); every output is compared as |dut - ref| <= atol + rtol |ref|
 * (0, 0: the same bits). An input that another op derives (an attention backward's forward
 * output) is computed in `setup` by the CPU backend on the host buffers, so each op is
 * compared on its own. `run` returns the op's host result where it has one (sum_squares,
 * accuracy_count; compared with op_scalar's tolerance), else NAN.
 *
 * Adding a row for a new op: write its setup and run next to the ops of its kind
 * (tests/backend-ops-<kind>.c, like kernels/cpu/<kind>.c) and put it in that file's row
 * list; test-backend-ops fails while a member of CohortBackend has no row. */
#pragma once

#include "kernels/backend.h"

#include <glib.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define OP_MAX_BUFS 16

typedef enum { OP_F32, OP_I32, OP_U16 } OpType;

typedef struct {
  const char *name;
  OpType type;
  size_t n;       /* elements */
  void *host;     /* the values both backends start from */
  gboolean check; /* compared after the op */
  double atol, rtol;
} OpBuf;

typedef struct {
  const int *p; /* the row's shape numbers */
  GRand *rng;   /* seeded from the row, so every run draws the same inputs */
  int n_bufs;
  OpBuf b[OP_MAX_BUFS];
  gboolean has_scalar;
  double scalar_rtol;
} OpCase;

typedef struct {
  const char *op;    /* the member of CohortBackend */
  const char *label; /* the shape, for the test's name and messages */
  int p[8];
  void (*setup)(OpCase *c);
  /* Calls the op on `be` with the buffers in its memory; the op's host result, else NAN. */
  double (*run)(const CohortBackend *be, OpCase *c, void *const *d);
} OpRow;

typedef struct {
  const OpRow *rows;
  size_t n;
} OpRows;

/* The row lists, one per kind of op (tests/backend-ops-<kind>.c). */
extern const OpRows ops_rows_linear, ops_rows_pointwise, ops_rows_norms, ops_rows_embeddings,
    ops_rows_attention, ops_rows_conv, ops_rows_losses, ops_rows_optim, ops_rows_vae;

#define OP_ROWS(name, array) const OpRows name = {array, G_N_ELEMENTS(array)}

static inline size_t op_type_size(OpType t)
{
  return t == OP_F32 ? 4 : t == OP_I32 ? 4 : 2;
}

static inline void *op_buf(OpCase *c, const char *name, OpType type, size_t n)
{
  g_assert_cmpint(c->n_bufs, <, OP_MAX_BUFS);
  OpBuf *b = &c->b[c->n_bufs++];
  *b = (OpBuf){.name = name, .type = type, .n = n, .atol = -1, .rtol = -1};
  b->host = g_malloc0(MAX(n, 1) * op_type_size(type));
  return b->host;
}

static inline void op_fill(OpCase *c, float *x, size_t n, double lo, double hi)
{
  for (size_t i = 0; i < n; i++)
    x[i] = (float)g_rand_double_range(c->rng, lo, hi);
}

/* An input of n floats, uniform in [lo, hi). */
static inline float *op_in(OpCase *c, const char *name, size_t n, double lo, double hi)
{
  float *x = op_buf(c, name, OP_F32, n);
  op_fill(c, x, n, lo, hi);
  return x;
}

/* An input of n ints, uniform in [0, hi). */
static inline int *op_in_int(OpCase *c, const char *name, size_t n, int hi)
{
  int *x = op_buf(c, name, OP_I32, n);
  for (size_t i = 0; i < n; i++)
    x[i] = g_rand_int_range(c->rng, 0, hi);
  return x;
}

static inline void op_check(OpCase *c, double atol, double rtol)
{
  OpBuf *b = &c->b[c->n_bufs - 1];
  b->check = TRUE;
  b->atol = atol;
  b->rtol = rtol;
}

/* An output the op overwrites: junk before, compared after. */
static inline float *op_out(OpCase *c, const char *name, size_t n, double atol, double rtol)
{
  float *x = op_in(c, name, n, 1e3, 1e4);
  op_check(c, atol, rtol);
  return x;
}

/* An output the op accumulates into: random start values, compared after. */
static inline float *op_acc(OpCase *c, const char *name, size_t n, double lo, double hi,
                            double atol, double rtol)
{
  float *x = op_in(c, name, n, lo, hi);
  op_check(c, atol, rtol);
  return x;
}

/* bf16 bits: an output (junk, compared bit for bit) or an input. */
static inline uint16_t *op_u16(OpCase *c, const char *name, size_t n, gboolean out)
{
  uint16_t *x = op_buf(c, name, OP_U16, n);
  for (size_t i = 0; i < n; i++)
    x[i] = (uint16_t)g_rand_int_range(c->rng, 0, 65536);
  if (out)
    op_check(c, 0, 0);
  return x;
}

/* The op returns a host result, compared within `rtol` relative (0: equal). */
static inline void op_scalar(OpCase *c, double rtol)
{
  c->has_scalar = TRUE;
  c->scalar_rtol = rtol;
}

/* Shape numbers, for setup and run. */
#define P0 (c->p[0])
#define P1 (c->p[1])
#define P2 (c->p[2])
#define P3 (c->p[3])
#define P4 (c->p[4])
#define P5 (c->p[5])
#define P6 (c->p[6])
#define P7 (c->p[7])

/* The CPU backend, for inputs derived on the host in setup. */
static inline const CohortBackend *op_cpu(void)
{
  return cohort_backend_cpu();
}
