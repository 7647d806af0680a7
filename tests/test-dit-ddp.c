/* The diffusion transformer trained data-parallel (suite dist): N ranks with per-process
 * batch b compute what one process computes with batch N·b — the loss of every step and the
 * final weights — with and without gradient accumulation, on the built-in glyphs at 8×8.
 * Every random draw of a sample (its timestep, its noise, whether its label is dropped) is a
 * function of (seed, epoch, sample index), so the ranks between them draw exactly what the
 * one process draws. */
#include "test-util.h"

static const char *const base_sets[] = {
    "model=dit",    "data_format=images", "train_data=builtin:glyphs/train",
    "val_data=",    "image_size=8",       "image_channels=1",
    "patch_size=2", "n_layer=2",          "n_head=2",
    "n_embd=32",    "cfg_dropout=0.2",    "warmup_steps=1",
    "eval_every=0", "sample_every=0",     "save_every=0",
    "threads=1",    "timeout_s=60",       NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

typedef struct {
  int world;
  int batch; /* per process */
  int accum;
} Case;

/* Tolerance as in test-ddp.c: rounding of sums taken in another order, amplified at most to
 * a thousandth of the distance AdamW can move a weight in K steps (lr · K); losses of each
 * step agree to 1e-5 relative. A wrong reduction or a rank-dependent draw moves weights by
 * O(lr · K) and losses by far more. */
static void check(const Case *c)
{
  const int steps = 6;
  const double lr = 1e-3;
  g_autofree char *s_steps = g_strdup_printf("max_steps=%d", steps);
  g_autofree char *s_accum = g_strdup_printf("gradient_accumulation_steps=%d", c->accum);
  g_autofree char *s_lr = g_strdup_printf("learning_rate=%g", lr);
  g_autofree char *s_bn = g_strdup_printf("batch_size=%d", c->batch);
  g_autofree char *s_b1 = g_strdup_printf("batch_size=%d", c->batch * c->world);
  const char *multi[] = {s_steps, s_accum, s_lr, s_bn, "bucket_cap_mb=0.02", NULL};
  const char *single[] = {s_steps, s_accum, s_lr, s_b1, NULL};
  GArray *ln = NULL, *l1 = NULL;
  g_autoptr(GArray) wn = train_run(c->world, multi, "dit-ddp-n", &ln);
  g_autoptr(GArray) w1 = train_run(1, single, "dit-ddp-1", &l1);
  g_assert_cmpuint(ln->len, ==, steps);
  g_assert_cmpuint(l1->len, ==, steps);
  for (int s = 0; s < steps; s++) {
    double a = g_array_index(ln, double, s), b = g_array_index(l1, double, s);
    if (fabs(a - b) > 1e-5 * fabs(b))
      g_error("step %d: %d ranks loss %.8g, one process %.8g", s + 1, c->world, a, b);
  }
  double diff = max_abs_diff(wn, w1);
  double tol = 1e-3 * lr * steps;
  g_test_message("%d ranks × batch %d (accum %d) vs 1 × %d: max |Δw| = %.3g (tolerance %.3g)",
                 c->world, c->batch, c->accum, c->batch * c->world, diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* the runs trained: six steps move the weights far beyond the tolerance */
  g_autoptr(GArray) w0 = train_weights(1, (const char *[]){"max_steps=1", s_b1, NULL}, "dit-ddp-0");
  g_assert_cmpfloat(max_abs_diff(w0, w1), >, 100 * tol);
  g_array_unref(ln);
  g_array_unref(l1);
}

static void test_2_ranks(void)
{
  check(&(Case){2, 4, 1});
}

static void test_3_ranks(void)
{
  check(&(Case){3, 2, 1});
}

static void test_accumulation(void)
{
  check(&(Case){2, 2, 3});
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/dit-ddp/2-ranks", test_2_ranks);
  g_test_add_func("/dit-ddp/3-ranks", test_3_ranks);
  g_test_add_func("/dit-ddp/accumulation", test_accumulation);
  return g_test_run();
}
