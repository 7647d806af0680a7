/* AdamW and SGD, learning-rate schedules, clipping and EMA over the backend's optimizer ops. */
#include "engine/model/optim.h"
#include "kernels/backend.h"

#include <math.h>

#define MAX_STATES 2

/* A range of parameters whose state sits at state_off in every state buffer. */
typedef struct {
  size_t offset, count, state_off;
} Range;

struct CohortOptimizer {
  CohortOptimizerKind kind;
  const CohortBackend *be;
  size_t n;         /* parameters of the model */
  size_t state_len; /* floats per state buffer: the ranges' total */
  guint n_ranges;
  Range *ranges;
  guint n_states;
  float *state[MAX_STATES];
  const char *prefix[MAX_STATES];
};

double cohort_lr_at(CohortLrSchedule schedule, double base_lr, int warmup_steps,
                    double min_lr_ratio, int step, int total_steps)
{
  if (step < 0)
    step = 0;
  if (warmup_steps > 0 && step < warmup_steps)
    return base_lr * (step + 1) / warmup_steps;
  if (schedule == COHORT_LR_CONSTANT)
    return base_lr;
  double min_lr = base_lr * min_lr_ratio;
  /* decay runs from the first step after warmup (full lr) to the last step (min_lr) */
  int span = total_steps - 1 - warmup_steps;
  double progress = span > 0 ? (double)(step - warmup_steps) / span : 1.0;
  progress = CLAMP(progress, 0.0, 1.0);
  if (schedule == COHORT_LR_COSINE)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + cos(G_PI * progress));
  return base_lr - (base_lr - min_lr) * progress;
}

double cohort_lr_step_at(double base_lr, int warmup_steps, int step_size, double gamma, int step)
{
  if (step < 0)
    step = 0;
  if (warmup_steps > 0 && step < warmup_steps)
    return base_lr * (step + 1) / warmup_steps;
  int decays = (step - warmup_steps) / MAX(step_size, 1);
  return base_lr * pow(gamma, decays);
}

double cohort_lr_for(const CohortConfig *cfg, double base_lr, int warmup_steps, int step,
                     int total_steps)
{
  if (cfg->lr_schedule == COHORT_LR_STEP)
    return cohort_lr_step_at(base_lr, warmup_steps, cfg->lr_step_size, cfg->lr_gamma, step);
  return cohort_lr_at(cfg->lr_schedule, base_lr, warmup_steps, cfg->min_lr_ratio, step,
                      total_steps);
}

/* An optimizer of `kind` with the given state prefixes (NULL-terminated, at most MAX_STATES),
 * keeping state for `ranges` (NULL: all n parameters). */
static CohortOptimizer *optimizer_new(CohortOptimizerKind kind, const CohortBackend *be, size_t n,
                                      const char *const *prefixes, const CohortParamRange *ranges,
                                      guint n_ranges)
{
  const CohortParamRange all = {0, n};
  if (!ranges) {
    ranges = &all;
    n_ranges = 1;
  }
  for (guint k = 0; k < n_ranges; k++) {
    g_return_val_if_fail(ranges[k].offset + ranges[k].count <= n, NULL);
    g_return_val_if_fail(k == 0 || ranges[k].offset >= ranges[k - 1].offset + ranges[k - 1].count,
                         NULL);
  }
  CohortOptimizer *opt = g_new0(CohortOptimizer, 1);
  opt->kind = kind;
  opt->be = be;
  opt->n = n;
  opt->ranges = g_new(Range, MAX(n_ranges, 1));
  for (guint k = 0; k < n_ranges; k++) {
    opt->ranges[k] = (Range){ranges[k].offset, ranges[k].count, opt->state_len};
    opt->state_len += ranges[k].count;
  }
  opt->n_ranges = n_ranges;
  for (guint i = 0; prefixes[i] && i < MAX_STATES; i++) {
    opt->prefix[i] = prefixes[i];
    opt->state[i] = be->alloc(MAX(opt->state_len, 1) * sizeof(float));
    opt->n_states = i + 1;
    if (!opt->state[i]) {
      cohort_optimizer_free(opt);
      return NULL;
    }
  }
  return opt;
}

static const char *const sgd_buffer[] = {"optim.momentum_buffer.", NULL};
static const char *const sgd_none[] = {NULL};
static const char *const adamw_moments[] = {"optim.m.", "optim.v.", NULL};

CohortOptimizer *cohort_sgd_new_on(const CohortBackend *be, size_t n, gboolean with_momentum)
{
  return optimizer_new(COHORT_OPTIMIZER_SGD, be, n, with_momentum ? sgd_buffer : sgd_none, NULL, 0);
}

CohortOptimizer *cohort_optimizer_new_sharded(const CohortConfig *cfg, const CohortBackend *be,
                                              size_t n, const CohortParamRange *ranges,
                                              guint n_ranges)
{
  if (cfg->optimizer == COHORT_OPTIMIZER_SGD)
    return optimizer_new(COHORT_OPTIMIZER_SGD, be, n, cfg->momentum != 0 ? sgd_buffer : sgd_none,
                         ranges, n_ranges);
  return optimizer_new(COHORT_OPTIMIZER_ADAMW, be, n, adamw_moments, ranges, n_ranges);
}

CohortOptimizer *cohort_optimizer_new_for(const CohortConfig *cfg, const CohortBackend *be,
                                          size_t n)
{
  return cohort_optimizer_new_sharded(cfg, be, n, NULL, 0);
}

CohortOptimizerKind cohort_optimizer_kind(const CohortOptimizer *opt)
{
  return opt->kind;
}

CohortAdamW *cohort_adamw_new(size_t n)
{
  CohortAdamW *opt = cohort_adamw_new_on(cohort_backend_cpu(), n);
  if (!opt)
    g_error("AdamW: out of memory for the moments of %zu parameters", n);
  return opt;
}

CohortAdamW *cohort_adamw_new_on(const CohortBackend *be, size_t n)
{
  return optimizer_new(COHORT_OPTIMIZER_ADAMW, be, n, adamw_moments, NULL, 0);
}

void cohort_optimizer_free(CohortOptimizer *opt)
{
  if (!opt)
    return;
  for (guint i = 0; i < opt->n_states; i++)
    opt->be->free(opt->state[i]);
  g_free(opt->ranges);
  g_free(opt);
}

void cohort_adamw_free(CohortAdamW *opt)
{
  cohort_optimizer_free(opt);
}

size_t cohort_optimizer_size(const CohortOptimizer *opt)
{
  return opt->n;
}

size_t cohort_optimizer_state_len(const CohortOptimizer *opt)
{
  return opt->state_len;
}

gboolean cohort_optimizer_is_sharded(const CohortOptimizer *opt)
{
  return opt->state_len != opt->n;
}

size_t cohort_optimizer_state_bytes(const CohortOptimizer *opt)
{
  return (size_t)opt->n_states * opt->state_len * sizeof(float);
}

guint cohort_optimizer_n_states(const CohortOptimizer *opt)
{
  return opt->n_states;
}

float *cohort_optimizer_state(CohortOptimizer *opt, guint i)
{
  g_return_val_if_fail(i < opt->n_states, NULL);
  return opt->state[i];
}

const char *cohort_optimizer_state_prefix(const CohortOptimizer *opt, guint i)
{
  g_return_val_if_fail(i < opt->n_states, NULL);
  return opt->prefix[i];
}

const CohortBackend *cohort_optimizer_backend(const CohortOptimizer *opt)
{
  return opt->be;
}

void cohort_optimizer_download_state(const CohortOptimizer *opt, guint i, float *host)
{
  opt->be->download(host, opt->state[i], opt->state_len * sizeof(float));
}

void cohort_optimizer_upload_state(CohortOptimizer *opt, guint i, const float *host)
{
  opt->be->upload(opt->state[i], host, opt->state_len * sizeof(float));
}

const CohortBackend *cohort_adamw_backend(const CohortAdamW *opt)
{
  return opt->be;
}

void cohort_adamw_download(const CohortAdamW *opt, float *m, float *v)
{
  cohort_optimizer_download_state(opt, 0, m);
  cohort_optimizer_download_state(opt, 1, v);
}

void cohort_adamw_upload(CohortAdamW *opt, const float *m, const float *v)
{
  cohort_optimizer_upload_state(opt, 0, m);
  cohort_optimizer_upload_state(opt, 1, v);
}

float *cohort_adamw_m(CohortAdamW *opt)
{
  return opt->state[0];
}

float *cohort_adamw_v(CohortAdamW *opt)
{
  return opt->state[1];
}

/* The pieces a step updates: each tensor cut to each range the state covers, with where its
 * state is and whether it decays. Unsharded, one piece per tensor, exactly as before there
 * were ranges. */
typedef struct {
  size_t offset, count, state_off;
  gboolean decay;
} Piece;

typedef void (*PieceFunc)(CohortOptimizer *opt, const Piece *p, gpointer data);

static void for_each_piece(CohortOptimizer *opt, const CohortTensorInfo *tensors, guint n_tensors,
                           PieceFunc fn, gpointer data)
{
  for (guint k = 0; k < opt->n_ranges; k++) {
    const Range *rg = &opt->ranges[k];
    for (guint i = 0; i < n_tensors; i++) {
      const CohortTensorInfo *ti = &tensors[i];
      g_return_if_fail(ti->offset + ti->numel <= opt->n);
      size_t lo = MAX(ti->offset, rg->offset);
      size_t hi = MIN(ti->offset + ti->numel, rg->offset + rg->count);
      if (lo >= hi)
        continue;
      Piece p = {lo, hi - lo, rg->state_off + (lo - rg->offset), ti->decay};
      fn(opt, &p, data);
    }
  }
}

typedef struct {
  float *params;
  const float *grads;
  gboolean params_state, grads_state; /* laid out like the state rather than the model */
  float lr, beta1, beta2, eps, wd, bc1, bc2, momentum;
  gboolean nesterov, first;
} StepArgs;

static float *piece_params(const StepArgs *a, const Piece *p)
{
  return a->params + (a->params_state ? p->state_off : p->offset);
}

static const float *piece_grads(const StepArgs *a, const Piece *p)
{
  return a->grads + (a->grads_state ? p->state_off : p->offset);
}

static void adamw_piece(CohortOptimizer *opt, const Piece *p, gpointer data)
{
  const StepArgs *a = data;
  opt->be->adamw_update(piece_params(a, p), piece_grads(a, p), opt->state[0] + p->state_off,
                        opt->state[1] + p->state_off, p->count, a->lr, a->beta1, a->beta2, a->eps,
                        p->decay ? a->wd : 0.0f, a->bc1, a->bc2);
}

static void sgd_piece(CohortOptimizer *opt, const Piece *p, gpointer data)
{
  const StepArgs *a = data;
  float *buf = opt->n_states > 0 ? opt->state[0] + p->state_off : NULL;
  opt->be->sgd_update(piece_params(a, p), piece_grads(a, p), buf, p->count, a->lr,
                      buf ? a->momentum : 0.0f, 0.0f, p->decay ? a->wd : 0.0f, a->nesterov && buf,
                      a->first);
}

static void adamw_args(StepArgs *a, double lr, double beta1, double beta2, double eps,
                       double weight_decay, int t)
{
  a->lr = (float)lr;
  a->beta1 = (float)beta1;
  a->beta2 = (float)beta2;
  a->eps = (float)eps;
  a->wd = (float)weight_decay;
  a->bc1 = (float)(1.0 - pow(beta1, t));
  a->bc2 = (float)(1.0 - pow(beta2, t));
}

void cohort_adamw_step(CohortAdamW *opt, float *params, const float *grads,
                       const CohortTensorInfo *tensors, guint n_tensors, double lr, double beta1,
                       double beta2, double eps, double weight_decay, int t)
{
  g_return_if_fail(t >= 1 && opt->kind == COHORT_OPTIMIZER_ADAMW);
  StepArgs a = {.params = params, .grads = grads};
  adamw_args(&a, lr, beta1, beta2, eps, weight_decay, t);
  for_each_piece(opt, tensors, n_tensors, adamw_piece, &a);
}

void cohort_optimizer_step_layout(CohortOptimizer *opt, float *params, CohortLayout params_layout,
                                  const float *grads, CohortLayout grads_layout,
                                  const CohortTensorInfo *tensors, guint n_tensors,
                                  const CohortConfig *cfg, double lr, int t)
{
  g_return_if_fail(t >= 1);
  StepArgs a = {.params = params,
                .grads = grads,
                .params_state = params_layout == COHORT_LAYOUT_STATE,
                .grads_state = grads_layout == COHORT_LAYOUT_STATE};
  if (opt->kind == COHORT_OPTIMIZER_ADAMW) {
    adamw_args(&a, lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t);
    for_each_piece(opt, tensors, n_tensors, adamw_piece, &a);
    return;
  }
  a.lr = (float)lr;
  a.wd = (float)cfg->weight_decay;
  a.momentum = (float)cfg->momentum;
  a.nesterov = cfg->nesterov;
  a.first = t == 1;
  for_each_piece(opt, tensors, n_tensors, sgd_piece, &a);
}

void cohort_optimizer_step(CohortOptimizer *opt, float *params, const float *grads,
                           const CohortTensorInfo *tensors, guint n_tensors,
                           const CohortConfig *cfg, double lr, int t)
{
  cohort_optimizer_step_layout(opt, params, COHORT_LAYOUT_MODEL, grads, COHORT_LAYOUT_MODEL,
                               tensors, n_tensors, cfg, lr, t);
}

double cohort_global_norm_on(const CohortBackend *be, const float *values, size_t n)
{
  return sqrt(be->sum_squares(values, n));
}

double cohort_global_norm(const float *values, size_t n)
{
  return cohort_global_norm_on(cohort_backend_cpu(), values, n);
}

void cohort_scale(float *values, size_t n, float s)
{
  cohort_backend_cpu()->scale(values, n, s);
}

double cohort_clip_grad_norm_on(const CohortBackend *be, float *grads, size_t n, double max_norm)
{
  double norm = cohort_global_norm_on(be, grads, n);
  if (max_norm > 0.0) {
    /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1 */
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0)
      be->scale(grads, n, (float)coef);
  }
  return norm;
}

double cohort_clip_grad_norm(float *grads, size_t n, double max_norm)
{
  return cohort_clip_grad_norm_on(cohort_backend_cpu(), grads, n, max_norm);
}

void cohort_ema_update_on(const CohortBackend *be, float *ema, const float *params, size_t n,
                          double decay)
{
  be->ema_update(ema, params, n, (float)decay);
}

void cohort_ema_update(float *ema, const float *params, size_t n, double decay)
{
  cohort_ema_update_on(cohort_backend_cpu(), ema, params, n, decay);
}
