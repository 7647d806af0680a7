/* Rows of the op harness: cross-entropy, distillation's KL term, the per-example MSE and the
 * accuracy count. Backwards start from the CPU's log-sum-exps. See tests/backend-ops.h. */
#include "backend-ops.h"

/* ---- cross-entropy: p = {N, V}, V wider than a block ---- */

/* Every third target negative (ignored) when `ignore` (chat data's masked tokens). */
static void ce_setup_with(OpCase *c, gboolean ignore)
{
  op_in(c, "logits", (size_t)P0 * P1, -5, 5);
  int *targets = op_in_int(c, "targets", P0, P1);
  for (int n = 0; ignore && n < P0; n += 3)
    targets[n] = -1;
  op_out(c, "losses", P0, 1e-5, 1e-5);
  op_out(c, "lse", P0, 1e-5, 1e-5);
}

static void ce_setup(OpCase *c)
{
  ce_setup_with(c, FALSE);
}

static void ce_ignored_setup(OpCase *c)
{
  ce_setup_with(c, TRUE);
}

static double ce_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->crossentropy_forward(d[2], d[3], d[0], d[1], P0, P1);
  return NAN;
}

static void ce_backward_setup_with(OpCase *c, gboolean ignore)
{
  float *logits = op_in(c, "logits", (size_t)P0 * P1, -5, 5);
  int *targets = op_in_int(c, "targets", P0, P1);
  for (int n = 0; ignore && n < P0; n += 3)
    targets[n] = -1;
  float *lse = op_in(c, "lse", P0, 0, 1);
  g_autofree float *losses = g_new(float, P0);
  op_cpu()->crossentropy_forward(losses, lse, logits, targets, P0, P1);
  op_out(c, "dlogits", (size_t)P0 * P1, 1e-7, 1e-5);
}

static void ce_backward_setup(OpCase *c)
{
  ce_backward_setup_with(c, FALSE);
}

static void ce_backward_ignored_setup(OpCase *c)
{
  ce_backward_setup_with(c, TRUE);
}

static double ce_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->crossentropy_backward(d[3], d[0], d[2], d[1], P0, P1, 1.0f / P0);
  return NAN;
}

/* ---- KL divergence: p = {N, V, tau, spread}: logits in ±spread ---- */

static void kl_setup(OpCase *c)
{
  op_in(c, "student", (size_t)P0 * P1, -P3, P3);
  op_in(c, "teacher", (size_t)P0 * P1, -P3, P3);
  /* double sums on both sides: the difference is the exponentials' rounding */
  op_out(c, "losses", P0, 1e-6, 1e-5);
  op_out(c, "lse", 2 * (size_t)P0, 1e-6, 1e-6);
}

static double kl_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->kl_div_forward(d[2], d[3], d[0], d[1], P0, P1, (float)P2);
  return NAN;
}

static void kl_backward_setup(OpCase *c)
{
  float *s = op_in(c, "student", (size_t)P0 * P1, -P3, P3);
  float *t = op_in(c, "teacher", (size_t)P0 * P1, -P3, P3);
  float *lse = op_in(c, "lse", 2 * (size_t)P0, 0, 1);
  g_autofree float *losses = g_new(float, P0);
  op_cpu()->kl_div_forward(losses, lse, s, t, P0, P1, (float)P2);
  op_acc(c, "dstudent", (size_t)P0 * P1, -1, 1, 1e-7, 1e-6); /* adds onto what it held */
}

static double kl_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->kl_div_backward(d[3], d[0], d[1], d[2], P0, P1, (float)P2, 0.37f);
  return NAN;
}

/* ---- MSE: p = {B, D} ---- */

static void mse_setup(OpCase *c)
{
  op_in(c, "pred", (size_t)P0 * P1, -2, 2);
  op_in(c, "target", (size_t)P0 * P1, -2, 2);
  op_out(c, "losses", P0, 0, 1e-5); /* sums of D squares in another order */
}

static double mse_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->mse_forward(d[2], d[0], d[1], P0, P1);
  return NAN;
}

static void mse_backward_setup(OpCase *c)
{
  op_in(c, "pred", (size_t)P0 * P1, -2, 2);
  op_in(c, "target", (size_t)P0 * P1, -2, 2);
  op_out(c, "dpred", (size_t)P0 * P1, 0, 0); /* the same two roundings */
}

static double mse_backward_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  be->mse_backward(d[2], d[0], d[1], P0, P1, 0.2f * 1024.0f); /* 1/B times a loss scale */
  return NAN;
}

/* ---- accuracy: p = {N, V}; ties (the first maximum wins) and NaN rows (NaN is the
 * maximum); the count comes back to the host ---- */

static void accuracy_setup(OpCase *c)
{
  int N = P0, V = P1;
  float *logits = op_in(c, "logits", (size_t)N * V, -3, 3);
  int *labels = op_buf(c, "labels", OP_I32, N);
  for (int n = 0; n < N; n++) {
    float *row = logits + (size_t)n * V;
    int k = g_rand_int_range(c->rng, 0, V);
    if (n % 5 == 1)
      row[k] = row[V - 1 - k] = 10.0f;
    if (n % 7 == 2)
      row[k] = NAN;
    labels[n] = n % 3 ? k : g_rand_int_range(c->rng, 0, V);
  }
  op_scalar(c, 0);
}

static double accuracy_run(const CohortBackend *be, OpCase *c, void *const *d)
{
  return be->accuracy_count(d[0], d[1], P0, P1);
}

#define KL(label, ...)                                                                             \
  {"kl_div_forward", label, {__VA_ARGS__}, kl_setup, kl_run},                                      \
  {                                                                                                \
    "kl_div_backward", label, {__VA_ARGS__}, kl_backward_setup, kl_backward_run                    \
  }

static const OpRow rows[] = {
    {"crossentropy_forward", "N13-V1000", {13, 1000}, ce_setup, ce_run},
    {"crossentropy_backward", "N13-V1000", {13, 1000}, ce_backward_setup, ce_backward_run},
    {"crossentropy_forward", "N13-V1000-ignored", {13, 1000}, ce_ignored_setup, ce_run},
    {"crossentropy_backward",
     "N13-V1000-ignored",
     {13, 1000},
     ce_backward_ignored_setup,
     ce_backward_run},
    KL("N7-V50-tau1", 7, 50, 1, 3),
    KL("N7-V50-tau4", 7, 50, 4, 3),
    KL("N64-V256-tau2", 64, 256, 2, 5),           /* the byte-level GPT's vocabulary */
    KL("N3-V5000-tau1-spread80", 3, 5000, 1, 80), /* exp(80) overflows unshifted */
    KL("N70000-V3-tau4", 70000, 3, 4, 2),         /* more rows than blocks in the grid */
    {"mse_forward", "B5-D3079", {5, 3 * 32 * 32 + 7}, mse_setup, mse_run},
    {"mse_backward", "B5-D3079", {5, 3 * 32 * 32 + 7}, mse_backward_setup, mse_backward_run},
    {"accuracy_count", "N300-V10", {300, 10}, accuracy_setup, accuracy_run}, /* < a warp */
    {"accuracy_count", "N70-V1000", {70, 1000}, accuracy_setup, accuracy_run},
    {"accuracy_count", "N5-V1", {5, 1}, accuracy_setup, accuracy_run},
};

OP_ROWS(ops_rows_losses, rows);
