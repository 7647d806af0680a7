/* ZeRO stages 2 and 3 with finetune lora or frozen: checkpoints, resume and the export.
 *
 * Only what learns is sharded (trainer-shard.h); the frozen base is whole on every rank. A
 * checkpoint of such a run holds only what learns and a reference to the base
 * (engine/model/checkpoint-base.h), which is small: so every rank gathers what learns whole
 * (the optimizer state, the EMA weights and at stage 3 the parameters, one all-gather per
 * unit) and rank 0 writes the very files stage 0 writes. A resume is stage 0's too: rank 0
 * rebuilds the base and reads the checkpoint, everyone receives it by broadcast and keeps its
 * pieces. So the files are the same whatever the stage and the number of ranks, and a
 * checkpoint of stage 2 resumes at stage 3 or on one process. */
#include "engine/train/trainer-run.h"

#include <string.h>

#include "engine/base/error.h"
#include "kernels/backend.h"

gboolean cohort_rank_run_shard_learns(const CohortRankRun *r)
{
  return r->shard != NULL && r->model->finetune != COHORT_FINETUNE_FULL;
}

void cohort_learning_whole_clear(CohortLearningWhole *w)
{
  g_clear_pointer(&w->opt, cohort_optimizer_free);
  g_clear_pointer(&w->ema, g_free);
}

gboolean cohort_rank_run_gather_learning(CohortRankRun *r, gboolean states, CohortLearningWhole *w,
                                         GError **error)
{
  CohortModel *m = r->model;
  CohortShard *sh = r->shard;
  size_t n = m->n_trainable;
  *w = (CohortLearningWhole){0};
  if (!cohort_shard_gather_learning(sh, error))
    return FALSE;
  g_autofree float *buf = g_new(float, MAX(n, 1));
  guint n_states = states ? cohort_optimizer_n_states(r->opt) : 0;
  if (n_states > 0 && r->opts->rank == 0)
    w->opt = cohort_optimizer_new_for(r->cfg, cohort_backend_cpu(), n);
  for (guint i = 0; i < n_states; i++) {
    if (!cohort_shard_gather_to_host(sh, cohort_optimizer_state(r->opt, i), buf, error))
      return FALSE;
    if (w->opt)
      cohort_optimizer_upload_state(w->opt, i, buf);
  }
  float *ema = cohort_shard_ema(sh);
  if (ema) {
    /* the EMA of what learns over the frozen base, which never moves */
    w->ema = g_new(float, MAX(m->n_params, 1));
    cohort_model_download_params(m, w->ema);
    if (!cohort_shard_gather_to_host(sh, ema, w->ema, error))
      return FALSE;
  }
  if (n_states > 0 && r->opts->rank == 0 && !w->opt)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "checkpoint at step %" G_GINT64_FORMAT ": rank 0 is out of host memory for "
                       "the optimizer state of the %zu parameters that learn, which it gathers "
                       "whole to save (zero_stage %d)",
                       r->st.step, n, cohort_shard_stage(sh));
  return TRUE;
}

gboolean cohort_rank_run_save_learning(CohortRankRun *r, char **dir, GError **error)
{
  CohortLearningWhole w;
  gboolean ok = cohort_rank_run_gather_learning(r, TRUE, &w, error);
  if (ok && r->opts->rank == 0)
    ok = cohort_checkpoint_save(r->cfg->workspace_dir, r->model_cfg, r->model, w.opt, w.ema, &r->st,
                                r->cfg->keep_last, dir, error);
  cohort_shard_let_go_learning(r->shard);
  cohort_learning_whole_clear(&w);
  return ok;
}

gboolean cohort_rank_run_scatter_learning(CohortRankRun *r, CohortOptimizer *full,
                                          const float *ema_whole, GError **error)
{
  CohortModel *m = r->model;
  CohortShard *sh = r->shard;
  size_t n = m->n_trainable;
  gboolean rank0 = r->opts->rank == 0;
  g_autofree float *buf = g_new(float, MAX(n, 1));
  for (guint i = 0; i < cohort_optimizer_n_states(r->opt); i++) {
    if (rank0)
      cohort_optimizer_download_state(full, i, buf);
    if (!cohort_train_dist_broadcast_host(r->dist, buf, n * sizeof(float), error))
      return FALSE;
    cohort_shard_take_whole(sh, buf, cohort_optimizer_state(r->opt, i));
  }
  float *ema = cohort_shard_ema(sh);
  if (ema) {
    if (rank0)
      memcpy(buf, ema_whole, n * sizeof(float));
    if (!cohort_train_dist_broadcast_host(r->dist, buf, n * sizeof(float), error))
      return FALSE;
    cohort_shard_take_whole(sh, buf, ema);
  }
  /* The parameters came whole by broadcast: stage 3 keeps its pieces of what learns. */
  cohort_shard_take_params(sh);
  return TRUE;
}
