/* Optimisation pieces the trainer composes: AdamW and SGD, learning-rate schedules, gradient
 * clipping by global norm, EMA weights. All loops are deterministic for a given thread count
 * (reductions in a fixed order). */
#pragma once

#include "engine/config/config.h"
#include "engine/base/tensor.h"

G_BEGIN_DECLS

typedef struct CohortBackend CohortBackend;

/* Learning rate for optimizer step `step` (0-based) of `total_steps`: linear warmup from
 * base_lr/warmup_steps over warmup_steps, then constant, cosine or linear decay to
 * base_lr * min_lr_ratio at the last step. */
double cohort_lr_at(CohortLrSchedule schedule, double base_lr, int warmup_steps,
                    double min_lr_ratio, int step, int total_steps);
/* PyTorch's StepLR after the same linear warmup: base_lr * gamma^floor((step - warmup_steps) /
 * step_size) once warmup is over (step 0-based). */
double cohort_lr_step_at(double base_lr, int warmup_steps, int step_size, double gamma, int step);
/* The learning rate of optimizer step `step` of `total_steps` for the config's schedule
 * (lr_schedule, min_lr_ratio, lr_step_size, lr_gamma) from the peak base_lr, after
 * `warmup_steps` of warm-up (the trainer passes the config's, shortened to the run). */
double cohort_lr_for(const CohortConfig *cfg, double base_lr, int warmup_steps, int step,
                     int total_steps);

/* An optimizer's state: per parameter, the buffers its rule keeps (AdamW: the first and
 * second moments; SGD: the momentum buffer, none without momentum), in one backend's memory, each
 * laid out like the parameters, so checkpoints save them under the parameter names with a prefix
 * per buffer. */
typedef struct CohortOptimizer CohortOptimizer;
/* An AdamW CohortOptimizer (the name its API had before there were others). */
typedef struct CohortOptimizer CohortAdamW;

/* A range of the flat parameter vector, in floats. */
typedef struct {
  size_t offset, count;
} CohortParamRange;

/* First and second moments for `n` parameters, zeroed, in CPU memory. */
CohortAdamW *cohort_adamw_new(size_t n);
/* The same in the memory of backend `be`; the step then runs there (params and grads must be
 * that backend's memory too). NULL when the backend is out of memory. */
CohortAdamW *cohort_adamw_new_on(const CohortBackend *be, size_t n);
/* torch.optim.SGD's state for `n` parameters on backend `be`: a momentum buffer when
 * `with_momentum`, else nothing. NULL when the backend is out of memory. */
CohortOptimizer *cohort_sgd_new_on(const CohortBackend *be, size_t n, gboolean with_momentum);
/* The optimizer cfg->optimizer names (AdamW, or SGD with a buffer when cfg->momentum > 0). */
CohortOptimizer *cohort_optimizer_new_for(const CohortConfig *cfg, const CohortBackend *be,
                                          size_t n);
/* The optimizer cfg->optimizer names, keeping state for only the parameters in `ranges`
 * (increasing, not overlapping, within `n`): its state buffers hold those ranges back to
 * back, and a step updates only those parameters, with the weight decay of the tensor each
 * element belongs to (a range may start or end inside a tensor). This is ZeRO's optimizer:
 * each rank keeps the state of its shard (stage 1: a range and a tail; stages 2 and 3: a piece
 * of every unit, engine/distributed/shard-plan.h). The update of every element is the one the
 * unsharded optimizer makes, bit for bit. NULL when the backend is out of memory. */
CohortOptimizer *cohort_optimizer_new_sharded(const CohortConfig *cfg, const CohortBackend *be,
                                              size_t n, const CohortParamRange *ranges,
                                              guint n_ranges);
void cohort_optimizer_free(CohortOptimizer *opt);
void cohort_adamw_free(CohortAdamW *opt);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortOptimizer, cohort_optimizer_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortAdamW, cohort_adamw_free)

/* Parameters of the model the optimizer was made for (the whole vector, sharded or not). */
size_t cohort_optimizer_size(const CohortOptimizer *opt);
/* Floats in each state buffer: cohort_optimizer_size unsharded, the ranges' total sharded. */
size_t cohort_optimizer_state_len(const CohortOptimizer *opt);
/* Whether the state covers only some of the parameters (cohort_optimizer_new_sharded with
 * ranges that are not the whole vector). */
gboolean cohort_optimizer_is_sharded(const CohortOptimizer *opt);
/* Bytes of state this optimizer holds: state buffers × state_len × 4. */
size_t cohort_optimizer_state_bytes(const CohortOptimizer *opt);
CohortOptimizerKind cohort_optimizer_kind(const CohortOptimizer *opt);
/* State buffers and their checkpoint name prefixes ("optim.m.", "optim.v." for AdamW,
 * "optim.momentum_buffer." for SGD, as torch.optim names its state). */
guint cohort_optimizer_n_states(const CohortOptimizer *opt);
float *cohort_optimizer_state(CohortOptimizer *opt, guint i);
const char *cohort_optimizer_state_prefix(const CohortOptimizer *opt, guint i);
const CohortBackend *cohort_optimizer_backend(const CohortOptimizer *opt);
/* Copies state buffer i (state_len floats) to or from host memory. */
void cohort_optimizer_download_state(const CohortOptimizer *opt, guint i, float *host);
void cohort_optimizer_upload_state(CohortOptimizer *opt, guint i, const float *host);

/* The AdamW moments, in the backend's memory (host memory on the CPU backend). */
float *cohort_adamw_m(CohortAdamW *opt);
float *cohort_adamw_v(CohortAdamW *opt);
const CohortBackend *cohort_adamw_backend(const CohortAdamW *opt);
/* Copies both moments (n floats each) to or from host memory. */
void cohort_adamw_download(const CohortAdamW *opt, float *m, float *v);
void cohort_adamw_upload(CohortAdamW *opt, const float *m, const float *v);

/* One AdamW step t (1-based, for bias correction), PyTorch's AdamW formula: decoupled weight
 * decay p -= lr*wd*p on tensors whose `decay` is set, then the Adam update. */
void cohort_adamw_step(CohortAdamW *opt, float *params, const float *grads,
                       const CohortTensorInfo *tensors, guint n_tensors, double lr, double beta1,
                       double beta2, double eps, double weight_decay, int t);

/* One update t (1-based: AdamW's bias corrections, SGD's first step, which starts the momentum
 * buffer at the gradient as PyTorch does) at learning rate `lr`, with the config's rule and
 * hyper-parameters: AdamW (beta1, beta2, eps, decoupled weight_decay) or SGD (momentum,
 * nesterov, no dampening, weight_decay added to the gradient). Weight decay applies only to
 * tensors whose `decay` is set. */
void cohort_optimizer_step(CohortOptimizer *opt, float *params, const float *grads,
                           const CohortTensorInfo *tensors, guint n_tensors,
                           const CohortConfig *cfg, double lr, int t);

/* Where a step finds each element: like the model's parameters (offset = its place in the
 * flat vector), or like the optimizer's state (the ranges back to back: a ZeRO shard). */
typedef enum { COHORT_LAYOUT_MODEL, COHORT_LAYOUT_STATE } CohortLayout;

/* cohort_optimizer_step with `params` and `grads` each in either layout (ZeRO stage 2: the
 * parameters whole, the reduced gradients a shard; stage 3: both shards). */
void cohort_optimizer_step_layout(CohortOptimizer *opt, float *params, CohortLayout params_layout,
                                  const float *grads, CohortLayout grads_layout,
                                  const CohortTensorInfo *tensors, guint n_tensors,
                                  const CohortConfig *cfg, double lr, int t);

/* Global L2 norm of `n` values (accumulated in double, fixed order). */
double cohort_global_norm(const float *values, size_t n);
/* values *= s */
void cohort_scale(float *values, size_t n, float s);
/* Clips to `max_norm` as torch.nn.utils.clip_grad_norm_ does; returns the norm before
 * clipping. max_norm <= 0 only measures. */
double cohort_clip_grad_norm(float *grads, size_t n, double max_norm);

/* ema = decay * ema + (1 - decay) * params */
void cohort_ema_update(float *ema, const float *params, size_t n, double decay);

/* The three above on backend `be` (buffers in its memory); the plain ones use the CPU. */
double cohort_global_norm_on(const CohortBackend *be, const float *values, size_t n);
double cohort_clip_grad_norm_on(const CohortBackend *be, float *grads, size_t n, double max_norm);
void cohort_ema_update_on(const CohortBackend *be, float *ema, const float *params, size_t n,
                          double decay);

G_END_DECLS
