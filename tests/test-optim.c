/* AdamW and SGD (momentum, Nesterov, weight decay in the gradient) against their formulas
 * computed here in double, the LR schedules at key steps (StepLR too), clipping as
 * torch.nn.utils.clip_grad_norm_, and EMA; ZeRO stage 1's sharded optimizer against the
 * unsharded one, bit for bit. */
#include "engine/model/optim.h"
#include "kernels/backend.h"

#include <glib.h>
#include <math.h>
#include <string.h>

/* Two tensors over 5 parameters: a 2x2 matrix (decayed) and a bias of 1 (not decayed). */
static const CohortTensorInfo tensors[] = {
    {.name = "w", .ndim = 2, .shape = {2, 2}, .offset = 0, .numel = 4, .decay = TRUE},
    {.name = "b", .ndim = 1, .shape = {1, 0}, .offset = 4, .numel = 1, .decay = FALSE},
};

static void adamw_reference(double *p, const double *g, double *m, double *v, int n,
                            const gboolean *decay, double lr, double b1, double b2, double eps,
                            double wd, int t)
{
  for (int i = 0; i < n; i++) {
    if (decay[i])
      p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    double mhat = m[i] / (1 - pow(b1, t)), vhat = v[i] / (1 - pow(b2, t));
    p[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
}

static void check_adamw(double wd)
{
  const int n = 5;
  float p[5] = {0.5f, -1.25f, 2.0f, 0.0f, 3.0f};
  const gboolean decay[5] = {TRUE, TRUE, TRUE, TRUE, FALSE};
  double rp[5], rm[5] = {0}, rv[5] = {0};
  for (int i = 0; i < n; i++)
    rp[i] = p[i];
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(n);
  const double lr = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8;
  for (int t = 1; t <= 3; t++) {
    /* a gradient that changes sign and size between steps */
    float g[5] = {0.1f * t, -0.3f, 1e-3f, 2.0f / t, -0.7f * (t % 2 ? 1 : -1)};
    double gd[5];
    for (int i = 0; i < n; i++)
      gd[i] = g[i];
    cohort_adamw_step(opt, p, g, tensors, G_N_ELEMENTS(tensors), lr, b1, b2, eps, wd, t);
    adamw_reference(rp, gd, rm, rv, n, decay, lr, b1, b2, eps, wd, t);
    for (int i = 0; i < n; i++) {
      g_assert_cmpfloat_with_epsilon(p[i], rp[i], 1e-6 * fmax(1.0, fabs(rp[i])));
      g_assert_cmpfloat_with_epsilon(cohort_adamw_m(opt)[i], rm[i], 1e-7);
      g_assert_cmpfloat_with_epsilon(cohort_adamw_v(opt)[i], rv[i], 1e-7);
    }
  }
}

static void test_adamw_no_decay(void)
{
  check_adamw(0.0);
}

static void test_adamw_decay(void)
{
  check_adamw(0.5);
  /* decay only touches tensors marked so: a zero gradient moves w but not b */
  float p[5] = {1, 1, 1, 1, 1}, g[5] = {0};
  g_autoptr(CohortAdamW) opt = cohort_adamw_new(5);
  cohort_adamw_step(opt, p, g, tensors, G_N_ELEMENTS(tensors), 0.1, 0.9, 0.999, 1e-8, 0.5, 1);
  g_assert_cmpfloat_with_epsilon(p[0], 0.95, 1e-7);
  g_assert_cmpfloat(p[4], ==, 1.0f);
}

static void test_schedules(void)
{
  /* warmup 10 of 111 steps: decay spans steps 10..110 */
  const double base = 1.0, ratio = 0.1;
  const struct {
    CohortLrSchedule s;
    int step;
    double want;
  } cases[] = {
      {COHORT_LR_CONSTANT, 0, 0.1},
      {COHORT_LR_CONSTANT, 4, 0.5},
      {COHORT_LR_CONSTANT, 9, 1.0},
      {COHORT_LR_CONSTANT, 110, 1.0},
      {COHORT_LR_COSINE, 0, 0.1},
      {COHORT_LR_COSINE, 10, 1.0},
      {COHORT_LR_COSINE, 35, 0.1 + 0.45 * (1 + cos(G_PI / 4))},
      {COHORT_LR_COSINE, 60, 0.55},
      {COHORT_LR_COSINE, 110, 0.1},
      {COHORT_LR_COSINE, 500, 0.1},
      {COHORT_LR_LINEAR, 4, 0.5},
      {COHORT_LR_LINEAR, 10, 1.0},
      {COHORT_LR_LINEAR, 35, 0.775},
      {COHORT_LR_LINEAR, 60, 0.55},
      {COHORT_LR_LINEAR, 110, 0.1},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    double got = cohort_lr_at(cases[i].s, base, 10, ratio, cases[i].step, 111);
    if (fabs(got - cases[i].want) > 1e-12)
      g_error("schedule %d step %d: %.15g, want %.15g", cases[i].s, cases[i].step, got,
              cases[i].want);
  }
  /* no warmup: the first step runs at the base rate */
  g_assert_cmpfloat(cohort_lr_at(COHORT_LR_COSINE, 3e-4, 0, 0.0, 0, 100), ==, 3e-4);
  g_assert_cmpfloat_with_epsilon(cohort_lr_at(COHORT_LR_COSINE, 3e-4, 0, 0.0, 99, 100), 0.0, 1e-15);
}

/* torch.optim.SGD with dampening 0: g += wd p (decayed tensors); buf = g on the first step,
 * else momentum buf + g; p -= lr (g + momentum buf) with Nesterov, else lr buf. */
static void check_sgd(gboolean nesterov, double momentum)
{
  const int n = 5;
  const gboolean decay[5] = {TRUE, TRUE, TRUE, TRUE, FALSE};
  float p[5] = {0.5f, -1.25f, 2.0f, 0.0f, 3.0f};
  double rp[5], rb[5] = {0};
  for (int i = 0; i < n; i++)
    rp[i] = p[i];
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  cfg->optimizer = COHORT_OPTIMIZER_SGD;
  cfg->momentum = momentum;
  cfg->nesterov = nesterov;
  cfg->weight_decay = 0.5;
  g_autoptr(CohortOptimizer) opt = cohort_optimizer_new_for(cfg, cohort_backend_cpu(), n);
  g_assert_cmpint(cohort_optimizer_kind(opt), ==, COHORT_OPTIMIZER_SGD);
  g_assert_cmpuint(cohort_optimizer_n_states(opt), ==, momentum != 0 ? 1 : 0);
  if (momentum != 0)
    g_assert_cmpstr(cohort_optimizer_state_prefix(opt, 0), ==, "optim.momentum_buffer.");
  const double lr = 0.1;
  for (int t = 1; t <= 3; t++) {
    float g[5] = {0.1f * t, -0.3f, 1e-3f, 2.0f / t, -0.7f * (t % 2 ? 1 : -1)};
    cohort_optimizer_step(opt, p, g, tensors, G_N_ELEMENTS(tensors), cfg, lr, t);
    for (int i = 0; i < n; i++) {
      double d = g[i] + (decay[i] ? 0.5 * rp[i] : 0.0);
      rb[i] = t == 1 ? d : momentum * rb[i] + d;
      double step = momentum == 0 ? d : nesterov ? d + momentum * rb[i] : rb[i];
      rp[i] -= lr * step;
      g_assert_cmpfloat_with_epsilon(p[i], rp[i], 1e-6 * fmax(1.0, fabs(rp[i])));
      if (momentum != 0)
        g_assert_cmpfloat_with_epsilon(cohort_optimizer_state(opt, 0)[i], rb[i], 1e-6);
    }
  }
}

static void test_sgd(void)
{
  check_sgd(FALSE, 0.9);
  check_sgd(TRUE, 0.9);
  check_sgd(FALSE, 0.0);
  check_sgd(TRUE, 0.0); /* Nesterov without momentum is plain SGD */
}

/* StepLR: base · gamma^floor((step − warmup) / step_size) after the linear warmup. */
/* ZeRO stage 1's optimizer: shards that start and end inside tensors (one decayed, one not),
 * each updating only its ranges, together make the unsharded update bit for bit, parameters and
 * state; parameters outside a shard's ranges stay as they were. */
static void check_sharded(CohortOptimizerKind kind, double momentum)
{
  static const CohortTensorInfo big[] = {
      {.name = "a", .ndim = 1, .shape = {20000}, .offset = 0, .numel = 20000, .decay = TRUE},
      {.name = "b", .ndim = 1, .shape = {17}, .offset = 20000, .numel = 17, .decay = FALSE},
      {.name = "c", .ndim = 1, .shape = {9003}, .offset = 20017, .numel = 9003, .decay = TRUE},
  };
  enum { N = 29020 };
  /* Three ranks' shards of 9673 (boundaries inside "a" and "c", "b" inside the second) and a
   * tail of 1 that every rank keeps. */
  const CohortParamRange shards[3][2] = {
      {{0, 9673}, {29019, 1}}, {{9673, 9673}, {29019, 1}}, {{19346, 9673}, {29019, 1}}};
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  cfg->optimizer = kind;
  cfg->momentum = momentum;
  cfg->nesterov = momentum != 0;
  cfg->weight_decay = 0.1;
  const CohortBackend *cpu = cohort_backend_cpu();
  g_autoptr(CohortOptimizer) full = cohort_optimizer_new_for(cfg, cpu, N);
  g_assert_false(cohort_optimizer_is_sharded(full));
  CohortOptimizer *part[3];
  for (int r = 0; r < 3; r++) {
    part[r] = cohort_optimizer_new_sharded(cfg, cpu, N, shards[r], 2);
    g_assert_true(cohort_optimizer_is_sharded(part[r]));
    g_assert_cmpuint(cohort_optimizer_state_len(part[r]), ==, 9674);
    g_assert_cmpuint(cohort_optimizer_state_bytes(part[r]), ==,
                     cohort_optimizer_n_states(full) * 9674 * sizeof(float));
  }
  g_autofree float *p = g_new(float, N), *q = g_new(float, N), *g = g_new(float, N);
  g_autofree float *mine = g_new(float, N), *before = g_new(float, N);
  for (int i = 0; i < N; i++)
    p[i] = q[i] = sinf(0.37f * (float)i);
  for (int t = 1; t <= 3; t++) {
    for (int i = 0; i < N; i++)
      g[i] = cosf(0.11f * (float)i * (float)t) * (i % 7 ? 1.0f : 1e-4f);
    cohort_optimizer_step(full, p, g, big, G_N_ELEMENTS(big), cfg, 0.01, t);
    memcpy(before, q, N * sizeof(float));
    for (int r = 0; r < 3; r++) {
      /* Each shard on its own copy of the parameters before the step: it must leave
       * everything outside its ranges alone. */
      memcpy(mine, before, N * sizeof(float));
      cohort_optimizer_step(part[r], mine, g, big, G_N_ELEMENTS(big), cfg, 0.01, t);
      for (int i = 0; i < N; i++) {
        gboolean in = (i >= (int)shards[r][0].offset &&
                       i < (int)(shards[r][0].offset + shards[r][0].count)) ||
                      i == N - 1;
        g_assert_true(in || mine[i] == before[i]);
      }
      memcpy(q + shards[r][0].offset, mine + shards[r][0].offset, 9673 * sizeof(float));
      if (r == 0)
        q[N - 1] = mine[N - 1];
      else
        g_assert_true(mine[N - 1] == q[N - 1]); /* the tail agrees on every rank */
    }
    g_assert_cmpmem(q, N * sizeof(float), p, N * sizeof(float));
  }
  for (guint i = 0; i < cohort_optimizer_n_states(full); i++)
    for (int r = 0; r < 3; r++) {
      const float *whole = cohort_optimizer_state(full, i);
      const float *sh = cohort_optimizer_state(part[r], i);
      g_assert_cmpmem(sh, 9673 * sizeof(float), whole + shards[r][0].offset, 9673 * sizeof(float));
      g_assert_true(sh[9673] == whole[N - 1]);
    }
  for (int r = 0; r < 3; r++)
    cohort_optimizer_free(part[r]);
}

static void test_sharded(void)
{
  check_sharded(COHORT_OPTIMIZER_ADAMW, 0);
  check_sharded(COHORT_OPTIMIZER_SGD, 0.9);
  check_sharded(COHORT_OPTIMIZER_SGD, 0);
}

static void test_step_schedule(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  cfg->lr_schedule = COHORT_LR_STEP;
  cfg->warmup_steps = 4;
  cfg->lr_step_size = 3;
  cfg->lr_gamma = 0.5;
  const double want[] = {0.25, 0.5, 0.75, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25};
  for (int s = 0; s < (int)G_N_ELEMENTS(want); s++)
    g_assert_cmpfloat_with_epsilon(cohort_lr_for(cfg, 1.0, cfg->warmup_steps, s, 100), want[s],
                                   1e-15);
  /* torch.optim.lr_scheduler.StepLR(step_size=30, gamma=0.1) per step, no warmup */
  g_assert_cmpfloat_with_epsilon(cohort_lr_step_at(0.1, 0, 30, 0.1, 29), 0.1, 1e-15);
  g_assert_cmpfloat_with_epsilon(cohort_lr_step_at(0.1, 0, 30, 0.1, 30), 0.01, 1e-15);
  g_assert_cmpfloat_with_epsilon(cohort_lr_step_at(0.1, 0, 30, 0.1, 95), 1e-4, 1e-15);
  /* the other schedules go through cohort_lr_for unchanged */
  cfg->lr_schedule = COHORT_LR_COSINE;
  cfg->min_lr_ratio = 0.1;
  g_assert_cmpfloat(cohort_lr_for(cfg, 1.0, cfg->warmup_steps, 50, 111), ==,
                    cohort_lr_at(COHORT_LR_COSINE, 1.0, 4, 0.1, 50, 111));
}

static void test_clip(void)
{
  float g[2] = {3.0f, 4.0f};
  double norm = cohort_clip_grad_norm(g, 2, 1.0);
  g_assert_cmpfloat_with_epsilon(norm, 5.0, 1e-12);
  /* torch: coef = max_norm / (norm + 1e-6) */
  g_assert_cmpfloat_with_epsilon(g[0], 3.0 / (5.0 + 1e-6), 1e-7);
  g_assert_cmpfloat_with_epsilon(g[1], 4.0 / (5.0 + 1e-6), 1e-7);
  float h[2] = {3.0f, 4.0f};
  g_assert_cmpfloat_with_epsilon(cohort_clip_grad_norm(h, 2, 10.0), 5.0, 1e-12);
  g_assert_cmpfloat(h[0], ==, 3.0f); /* below the limit: untouched */
  g_assert_cmpfloat_with_epsilon(cohort_clip_grad_norm(h, 2, 0.0), 5.0, 1e-12);
  g_assert_cmpfloat(h[1], ==, 4.0f); /* max_norm 0 only measures */

  size_t n = 200001;
  float *v = g_new(float, n);
  double ss = 0;
  for (size_t i = 0; i < n; i++) {
    v[i] = (float)sin((double)i);
    ss += (double)v[i] * v[i];
  }
  g_assert_cmpfloat_with_epsilon(cohort_global_norm(v, n), sqrt(ss), 1e-9 * sqrt(ss));
  cohort_scale(v, n, 2.0f);
  g_assert_cmpfloat(v[7], ==, 2.0f * (float)sin(7.0));
  g_free(v);
}

static void test_ema(void)
{
  float ema[3] = {1.0f, 2.0f, -1.0f}, p[3] = {3.0f, 6.0f, -1.0f};
  cohort_ema_update(ema, p, 3, 0.9);
  g_assert_cmpfloat_with_epsilon(ema[0], 1.2, 1e-6);
  g_assert_cmpfloat_with_epsilon(ema[1], 2.4, 1e-6);
  g_assert_cmpfloat_with_epsilon(ema[2], -1.0, 1e-6);
  cohort_ema_update(ema, p, 3, 0.0); /* decay 0: a copy */
  g_assert_cmpfloat(ema[1], ==, 6.0f);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/optim/sgd", test_sgd);
  g_test_add_func("/optim/sharded", test_sharded);
  g_test_add_func("/optim/step-schedule", test_step_schedule);
  g_test_add_func("/optim/adamw", test_adamw_no_decay);
  g_test_add_func("/optim/adamw-decay", test_adamw_decay);
  g_test_add_func("/optim/schedules", test_schedules);
  g_test_add_func("/optim/clip", test_clip);
  g_test_add_func("/optim/ema", test_ema);
  return g_test_run();
}
