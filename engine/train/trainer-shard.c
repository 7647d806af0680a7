/* ZeRO stages 2 and 3 in the trainer: the shard buffers, the start, the step and the EMA swap
 * (see trainer-shard.h; checkpoints and exports are trainer-shard-io.c). */
#include "engine/train/trainer-shard.h"

#include <math.h>
#include <string.h>

#include "kernels/backend.h"

struct CohortShard {
  int stage;
  CohortComm *comm;
  CohortModel *model;
  const CohortBackend *be;
  CohortShardPlan *plan;
  CohortSharder *sharder;
  float *params; /* stage 3 */
  float *grads;
  float *ema;    /* NULL without EMA */
  float *backup; /* stage 2 with EMA: this rank's parameter pieces while the EMA is swapped in */
};

static float *alloc_shard(const CohortShard *sh)
{
  return sh->be->alloc(MAX(sh->plan->shard_floats, 1) * sizeof(float));
}

CohortShard *cohort_shard_new(CohortComm *comm, CohortModel *m, int stage, gboolean ema, int device,
                              GError **error)
{
  g_return_val_if_fail(stage == 2 || stage == 3, NULL);
  g_return_val_if_fail(m->grads_reserved && (stage == 2 || m->params_reserved), NULL);
  g_autoptr(CohortShard) sh = g_new0(CohortShard, 1);
  sh->stage = stage;
  sh->comm = comm;
  sh->model = m;
  sh->be = m->be;
  /* What learns alone is sharded: the train table covers [0, n_trainable), the frozen base
   * after it stays whole on every rank (engine/model/finetune.h). With finetune full the
   * train table is the parameter table. */
  sh->plan = cohort_shard_plan_new(m->train, m->n_train, m->n_trainable, NULL,
                                   cohort_comm_world_size(comm), cohort_comm_rank(comm), error);
  if (!sh->plan)
    return NULL;
  sh->grads = alloc_shard(sh);
  gboolean ok = sh->grads != NULL;
  if (ok && stage == 3)
    ok = (sh->params = alloc_shard(sh)) != NULL;
  if (ok && ema)
    ok = (sh->ema = alloc_shard(sh)) != NULL && (stage == 3 || (sh->backup = alloc_shard(sh)));
  if (!ok) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "ZeRO stage %d: out of %s memory for this rank's shard of %zu of the %zu "
                "parameters that learn",
                stage, sh->be->name, sh->plan->shard_floats, m->n_trainable);
    return NULL;
  }
  sh->sharder = cohort_sharder_new(comm, sh->plan, stage, sh->be, m->params, m->grads, sh->grads);
  cohort_sharder_set_source(sh->sharder, sh->params);
  if (device >= 0 && !cohort_sharder_use_device(sh->sharder, device, error))
    return NULL;
  return g_steal_pointer(&sh);
}

void cohort_shard_free(CohortShard *sh)
{
  if (!sh)
    return;
  cohort_sharder_free(sh->sharder);
  if (sh->be) {
    sh->be->free(sh->params);
    sh->be->free(sh->grads);
    sh->be->free(sh->ema);
    sh->be->free(sh->backup);
  }
  cohort_shard_plan_free(sh->plan);
  g_free(sh);
}

int cohort_shard_stage(const CohortShard *sh)
{
  return sh->stage;
}

const CohortShardPlan *cohort_shard_plan(const CohortShard *sh)
{
  return sh->plan;
}

CohortSharder *cohort_shard_sharder(const CohortShard *sh)
{
  return sh->sharder;
}

CohortParamRange *cohort_shard_ranges(const CohortShard *sh, guint *n_ranges)
{
  CohortParamRange *out = g_new(CohortParamRange, MAX(sh->plan->n_units, 1));
  guint k = 0;
  for (guint u = 0; u < sh->plan->n_units; u++) {
    size_t off, count;
    cohort_shard_plan_piece(sh->plan, u, sh->plan->rank, &off, &count);
    if (count > 0)
      out[k++] = (CohortParamRange){off, count};
  }
  *n_ranges = k;
  return out;
}

float *cohort_shard_params(const CohortShard *sh)
{
  return sh->params;
}

float *cohort_shard_grads(const CohortShard *sh)
{
  return sh->grads;
}

float *cohort_shard_ema(const CohortShard *sh)
{
  return sh->ema;
}

size_t cohort_shard_bytes(const CohortShard *sh)
{
  guint buffers = 1 + (sh->params != NULL) + (sh->ema != NULL) + (sh->backup != NULL);
  return buffers * sh->plan->shard_floats * sizeof(float);
}

/* Copies between this rank's pieces in the flat vector `full` and the shard layout. */
static void pieces_to_shard(const CohortShard *sh, float *shard, const float *full)
{
  for (guint u = 0; u < sh->plan->n_units; u++) {
    const CohortShardUnit *unit = &sh->plan->units[u];
    size_t off, count;
    cohort_shard_plan_piece(sh->plan, u, sh->plan->rank, &off, &count);
    sh->be->copy(shard + unit->local, full + off, count * sizeof(float));
  }
}

static void shard_to_pieces(const CohortShard *sh, float *full, const float *shard)
{
  for (guint u = 0; u < sh->plan->n_units; u++) {
    const CohortShardUnit *unit = &sh->plan->units[u];
    size_t off, count;
    cohort_shard_plan_piece(sh->plan, u, sh->plan->rank, &off, &count);
    sh->be->copy(full + off, shard + unit->local, count * sizeof(float));
  }
}

gboolean cohort_shard_init_weights(CohortShard *sh, guint64 seed, GError **error)
{
  CohortModel *m = sh->model;
  /* With finetune lora or frozen the base is whole on every rank anyway (and the units,
   * over the train table, are not the family's tensors): the whole initialisation. */
  if (sh->stage == 2 || !m->ops->init_tensor || m->finetune != COHORT_FINETUNE_FULL) {
    if (!cohort_model_commit_params(m, m->n_params, error))
      return FALSE;
    cohort_model_init(m, seed);
    cohort_shard_take_params(sh);
    return TRUE;
  }
  /* One unit at a time in host memory: the whole model never is. */
  g_autofree float *unit_host = g_new(float, MAX(sh->plan->largest_unit, 1));
  for (guint u = 0; u < sh->plan->n_units; u++) {
    const CohortShardUnit *unit = &sh->plan->units[u];
    for (guint i = unit->first_tensor; i < unit->first_tensor + unit->n_tensors; i++)
      m->ops->init_tensor(m, seed, i, unit_host + (m->tensors[i].offset - unit->offset));
    size_t off, count;
    cohort_shard_plan_piece(sh->plan, u, sh->plan->rank, &off, &count);
    sh->be->upload(sh->params + unit->local, unit_host + (off - unit->offset),
                   count * sizeof(float));
  }
  m->ops->init_buffers(m);
  return TRUE;
}

void cohort_shard_take_params(CohortShard *sh)
{
  if (sh->stage != 3)
    return;
  CohortModel *m = sh->model;
  pieces_to_shard(sh, sh->params, m->params);
  /* What learns only: the frozen base after it stays in place, whole, for good. */
  sh->be->decommit(m->params, m->n_trainable * sizeof(float));
}

void cohort_shard_ema_from_params(CohortShard *sh)
{
  if (!sh->ema)
    return;
  if (sh->stage == 3)
    sh->be->copy(sh->ema, sh->params, sh->plan->shard_floats * sizeof(float));
  else
    pieces_to_shard(sh, sh->ema, sh->model->params);
}

gboolean cohort_shard_check_finite(const CohortShard *sh, const char *source, GError **error)
{
  if (sh->stage != 3)
    return TRUE;
  const CohortModel *m = sh->model;
  g_autofree float *host = g_new(float, MAX(sh->plan->shard_floats, 1));
  sh->be->download(host, sh->params, sh->plan->shard_floats * sizeof(float));
  for (guint u = 0; u < sh->plan->n_units; u++) {
    const CohortShardUnit *unit = &sh->plan->units[u];
    size_t off, count;
    cohort_shard_plan_piece(sh->plan, u, sh->plan->rank, &off, &count);
    for (size_t k = 0; k < count; k++) {
      if (isfinite(host[unit->local + k]))
        continue;
      const char *name = "?";
      for (guint i = unit->first_tensor; i < unit->first_tensor + unit->n_tensors; i++)
        if (off + k >= m->train[i].offset && off + k < m->train[i].offset + m->train[i].numel)
          name = m->train[i].name;
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID,
                  "%s: tensor \"%s\" holds %g; the weights are damaged (non-finite)", source, name,
                  (double)host[unit->local + k]);
      return FALSE;
    }
  }
  return TRUE;
}

gboolean cohort_shard_clip(CohortShard *sh, float unscale, double max_norm, double *norm,
                           GError **error)
{
  size_t n = sh->plan->shard_floats;
  if (unscale != 1.0f)
    sh->be->scale(sh->grads, n, unscale);
  double sum = sh->be->sum_squares(sh->grads, n);
  if (!cohort_comm_all_reduce_f64(sh->comm, &sum, 1, COHORT_REDUCE_SUM, 0, error))
    return FALSE;
  *norm = sqrt(sum);
  /* torch.nn.utils.clip_grad_norm_, as cohort_clip_grad_norm_on: coef = max / (norm + 1e-6) */
  if (max_norm > 0.0) {
    double coef = max_norm / (*norm + 1e-6);
    if (coef < 1.0)
      sh->be->scale(sh->grads, n, (float)coef);
  }
  return TRUE;
}

gboolean cohort_shard_step(CohortShard *sh, CohortOptimizer *opt, const CohortConfig *cfg,
                           double lr, int t, GError **error)
{
  CohortModel *m = sh->model;
  size_t n = sh->plan->shard_floats;
  if (sh->stage == 3) {
    cohort_optimizer_step_layout(opt, sh->params, COHORT_LAYOUT_STATE, sh->grads,
                                 COHORT_LAYOUT_STATE, m->train, m->n_train, cfg, lr, t);
    if (sh->ema)
      sh->be->ema_update(sh->ema, sh->params, n, (float)cfg->ema_decay);
    return TRUE;
  }
  cohort_optimizer_step_layout(opt, m->params, COHORT_LAYOUT_MODEL, sh->grads, COHORT_LAYOUT_STATE,
                               m->train, m->n_train, cfg, lr, t);
  for (guint u = 0; sh->ema && u < sh->plan->n_units; u++) {
    const CohortShardUnit *unit = &sh->plan->units[u];
    size_t off, count;
    cohort_shard_plan_piece(sh->plan, u, sh->plan->rank, &off, &count);
    sh->be->ema_update(sh->ema + unit->local, m->params + off, count, (float)cfg->ema_decay);
  }
  return cohort_sharder_gather_params(sh->sharder, error);
}

gboolean cohort_shard_swap_ema(CohortShard *sh, gboolean in, GError **error)
{
  if (!sh->ema)
    return TRUE;
  if (sh->stage == 3) {
    if (!cohort_sharder_release(sh->sharder, error))
      return FALSE;
    cohort_sharder_set_source(sh->sharder, in ? sh->ema : sh->params);
    return TRUE;
  }
  float *params = sh->model->params;
  if (in) {
    pieces_to_shard(sh, sh->backup, params);
    shard_to_pieces(sh, params, sh->ema);
  } else {
    shard_to_pieces(sh, params, sh->backup);
  }
  return cohort_sharder_gather_params(sh->sharder, error);
}

gboolean cohort_shard_release(CohortShard *sh, GError **error)
{
  return cohort_sharder_release(sh->sharder, error);
}

gboolean cohort_shard_gather_whole(CohortShard *sh, const float *shard, float *full, GError **error)
{
  const CohortShardPlan *p = sh->plan;
  for (guint u = 0; u < p->n_units; u++) {
    const CohortShardUnit *unit = &p->units[u];
    size_t off, count;
    cohort_shard_plan_piece(p, u, p->rank, &off, &count);
    if (count > 0 && shard != full)
      sh->be->copy(full + off, shard + unit->local, count * sizeof(float));
    if (!cohort_sharder_gather_unit(sh->sharder, full + unit->offset, u, error))
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_shard_gather_to_host(CohortShard *sh, const float *shard, float *host,
                                     GError **error)
{
  if (cohort_model_on_host(sh->model))
    return cohort_shard_gather_whole(sh, shard, host, error);
  /* Through a unit of device memory, which the communicator reaches (or stages itself). */
  const CohortShardPlan *p = sh->plan;
  CohortSharder *s = sh->sharder;
  float *unit_buf = sh->be->alloc(MAX(p->largest_unit, 1) * sizeof(float));
  if (!unit_buf) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "ZeRO: out of %s memory for a layer of %zu floats", sh->be->name, p->largest_unit);
    return FALSE;
  }
  gboolean ok = TRUE;
  for (guint u = 0; ok && u < p->n_units; u++) {
    const CohortShardUnit *unit = &p->units[u];
    size_t off, count;
    cohort_shard_plan_piece(p, u, p->rank, &off, &count);
    sh->be->copy(unit_buf + (off - unit->offset), shard + unit->local, count * sizeof(float));
    ok = cohort_sharder_gather_unit(s, unit_buf, u, error);
    if (ok)
      sh->be->download(host + unit->offset, unit_buf, unit->count * sizeof(float));
  }
  sh->be->free(unit_buf);
  return ok;
}

void cohort_shard_take_whole(const CohortShard *sh, const float *host, float *shard)
{
  for (guint u = 0; u < sh->plan->n_units; u++) {
    const CohortShardUnit *unit = &sh->plan->units[u];
    size_t off, count;
    cohort_shard_plan_piece(sh->plan, u, sh->plan->rank, &off, &count);
    sh->be->upload(shard + unit->local, host + off, count * sizeof(float));
  }
}

gboolean cohort_shard_gather_learning(CohortShard *sh, GError **error)
{
  if (sh->stage != 3)
    return TRUE;
  return cohort_model_commit_params(sh->model, sh->model->n_trainable, error) &&
         cohort_shard_gather_whole(sh, sh->params, sh->model->params, error);
}

void cohort_shard_let_go_learning(CohortShard *sh)
{
  if (sh->stage == 3)
    sh->be->decommit(sh->model->params, sh->model->n_trainable * sizeof(float));
}
