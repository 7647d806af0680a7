/* Checkpoints and the export at ZeRO stages 2 and 3, without the whole model on any rank:
 * every rank writes its pieces of the parameters, the EMA weights and the optimizer state
 * into one .safetensors file that rank 0 created with the header and the buffers
 * (engine/model/group-file.h), the file stage 0 would write byte for byte, and at a resume
 * every rank reads only its pieces of it. The workspace must be one every rank sees (always
 * so on one machine; on several, shared storage): a rank that cannot open rank 0's file says
 * so, and every rank fails the save together. */
#include "engine/train/trainer-run.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <glib/gstdio.h>

#include "engine/base/fileio.h"
#include "engine/model/group-file.h"
#include "engine/model/model-io.h"
#include "kernels/backend.h"

#define MAX_GROUPS 4 /* parameters, EMA, two optimizer states */

/* The file's groups: the parameters, and in a checkpoint the EMA weights and the optimizer's
 * state. */
static guint group_prefixes(const CohortRankRun *r, gboolean checkpoint, const char **out)
{
  guint n = 0;
  out[n++] = "";
  if (checkpoint && cohort_shard_ema(r->shard))
    out[n++] = "ema.";
  for (guint i = 0; checkpoint && i < cohort_optimizer_n_states(r->opt); i++)
    out[n++] = cohort_optimizer_state_prefix(r->opt, i);
  out[n] = NULL;
  return n;
}

/* This rank's pieces of group g (an index into group_prefixes' list); `params` for group 0
 * (the parameter shard, or the EMA shard for the EMA export). NULL: the whole parameters
 * (stage 2). */
static const float *group_source(const CohortRankRun *r, guint g, const float *params)
{
  if (g == 0)
    return params;
  if (cohort_shard_ema(r->shard) && g == 1)
    return cohort_shard_ema(r->shard);
  return cohort_optimizer_state(r->opt, g - (cohort_shard_ema(r->shard) ? 2 : 1));
}

/* Host memory for one piece of this rank when the shards are a device's (NULL on the CPU). */
static float *piece_buffer(const CohortRankRun *r)
{
  if (cohort_model_on_host(r->model))
    return NULL;
  const CohortShardPlan *p = cohort_shard_plan(r->shard);
  size_t most = 1;
  for (guint u = 0; u < p->n_units; u++)
    most = MAX(most, p->units[u].own_count);
  return g_new(float, most);
}

static gboolean write_pieces(const CohortRankRun *r, const CohortGroupFile *gf, guint n_groups,
                             const float *params, GError **error)
{
  int fd = cohort_group_file_open(gf, error);
  if (fd < 0)
    return FALSE;
  const CohortShardPlan *p = cohort_shard_plan(r->shard);
  g_autofree float *host = piece_buffer(r);
  gboolean ok = TRUE;
  for (guint g = 0; ok && g < n_groups; g++) {
    const float *src = group_source(r, g, params);
    for (guint u = 0; ok && u < p->n_units; u++) {
      size_t off, count;
      cohort_shard_plan_piece(p, u, p->rank, &off, &count);
      const float *from = src ? src + p->units[u].local : r->model->params + off;
      if (host && count > 0) {
        r->be->download(host, from, count * sizeof(float));
        from = host;
      }
      ok = count == 0 || cohort_group_file_write(gf, fd, g, off, count, from, error);
    }
  }
  if (!ok) {
    close(fd);
    return FALSE;
  }
  return cohort_group_file_close(gf, fd, error);
}

/* What rank 0 tells the others before they write: the file, or that there is none. */
typedef struct {
  int ok;
  char path[4096];
} Announce;

/* Every rank's verdict: TRUE when none failed. A rank that failed keeps its own message; the
 * others say that `what` failed elsewhere. */
static gboolean all_ok(CohortRankRun *r, gboolean ok, GError *mine, const char *what,
                       GError **error)
{
  double failed = ok ? 0 : 1;
  if (!cohort_train_dist_sum(r->dist, &failed, 1, error)) {
    g_clear_error(&mine);
    return FALSE;
  }
  if (failed == 0)
    return TRUE;
  if (mine)
    g_propagate_error(error, mine);
  else
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s failed on %.0f other rank%s (their messages say why)", what, failed,
                failed == 1 ? "" : "s");
  return FALSE;
}

/* The collective write of one file: rank 0 has created it (or failed to: created FALSE with
 * its reason in `mine`) and announces it; every rank writes its pieces, those of the
 * parameters from `params` (see group_source). */
static gboolean write_together(CohortRankRun *r, const char *path, gboolean created, GError *mine,
                               gboolean checkpoint, GHashTable *meta, const float *params,
                               GError **error)
{
  Announce a = {.ok = created};
  if (r->opts->rank == 0 && path)
    g_strlcpy(a.path, path, sizeof a.path);
  if (!cohort_train_dist_broadcast_host(r->dist, &a, sizeof a, error)) {
    g_clear_error(&mine);
    return FALSE;
  }
  gboolean ok = a.ok;
  if (ok) {
    const char *prefixes[MAX_GROUPS + 2];
    guint n = group_prefixes(r, checkpoint, prefixes);
    g_autoptr(CohortGroupFile) gf =
        cohort_group_file_new(r->model, prefixes, meta, a.path, mine ? NULL : &mine);
    ok = gf && write_pieces(r, gf, n, params, mine ? NULL : &mine);
  }
  return all_ok(r, ok, mine, "writing the model's shards", error);
}

/* Rank 0: the file's layout, created with its header and buffers. */
static gboolean create_file(CohortRankRun *r, const char *path, gboolean checkpoint,
                            GHashTable *meta, GError **error)
{
  const char *prefixes[MAX_GROUPS + 2];
  group_prefixes(r, checkpoint, prefixes);
  g_autoptr(CohortGroupFile) gf = cohort_group_file_new(r->model, prefixes, meta, path, error);
  g_autofree float *tmp = NULL;
  const float *buffers = cohort_model_buffers_host(r->model, &tmp);
  return gf && cohort_group_file_create(gf, buffers, error);
}

/* ---- checkpoints ---- */

typedef struct {
  CohortRankRun *r;
  gboolean called;
} SaveCtx;

static GHashTable *step_meta(const CohortRankRun *r)
{
  GHashTable *meta = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free);
  g_hash_table_insert(meta, "format", g_strdup("pt"));
  g_hash_table_insert(meta, "cohort.step", g_strdup_printf("%" G_GINT64_FORMAT, r->st.step));
  return meta;
}

/* Rank 0, inside cohort_checkpoint_save_with: create, announce, write together. */
static gboolean write_checkpoint_file(const char *path, gpointer data, GError **error)
{
  SaveCtx *c = data;
  c->called = TRUE;
  g_autoptr(GHashTable) meta = step_meta(c->r);
  GError *mine = NULL;
  gboolean created = create_file(c->r, path, TRUE, meta, &mine);
  return write_together(c->r, path, created, mine, TRUE, meta, cohort_shard_params(c->r->shard),
                        error);
}

gboolean cohort_rank_run_save_sharded(CohortRankRun *r, char **dir, GError **error)
{
  if (r->opts->rank != 0) {
    g_autoptr(GHashTable) meta = step_meta(r);
    return write_together(r, NULL, FALSE, NULL, TRUE, meta, cohort_shard_params(r->shard), error);
  }
  SaveCtx c = {.r = r};
  GError *local = NULL;
  gboolean ok = cohort_checkpoint_save_with(
      r->cfg->workspace_dir, r->model_cfg, write_checkpoint_file, &c,
      cohort_shard_ema(r->shard) != NULL, TRUE, &r->st, r->cfg->keep_last, dir, &local);
  /* The others wait for the announcement: a save that failed before it still makes it. */
  if (!c.called) {
    g_autoptr(GHashTable) meta = step_meta(r);
    GError *ignored = NULL;
    write_together(r, NULL, FALSE, g_error_copy(local), TRUE, meta, NULL, &ignored);
    g_clear_error(&ignored);
  }
  if (!ok)
    g_propagate_error(error, local);
  return ok;
}

/* Reads this rank's pieces of the group named `prefix` into `dst` (shard layout), or the
 * whole parameters' pieces in place at stage 2 (dst NULL). */
static gboolean read_pieces(const CohortRankRun *r, const CohortStFile *f, const char *prefix,
                            float *dst, GError **error)
{
  const CohortShardPlan *p = cohort_shard_plan(r->shard);
  g_autofree float *host = piece_buffer(r);
  for (guint u = 0; u < p->n_units; u++) {
    size_t off, count;
    cohort_shard_plan_piece(p, u, p->rank, &off, &count);
    float *to = dst ? dst + p->units[u].local : r->model->params + off;
    if (count > 0 &&
        !cohort_group_file_read(r->model, f, prefix, off, count, host ? host : to, error))
      return FALSE;
    if (host && count > 0)
      r->be->upload(to, host, count * sizeof(float));
  }
  return TRUE;
}

/* Every rank's own part of checkpoint `ckpt` (rank 0 has checked it): its pieces of the
 * parameters, EMA weights (the parameters' when the checkpoint has none) and optimizer
 * state, and the buffers. */
static gboolean read_own(CohortRankRun *r, const char *ckpt, GError **error)
{
  g_autofree char *path = g_build_filename(ckpt, COHORT_CHECKPOINT_MODEL_FILE, NULL);
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, error);
  if (!f || !read_pieces(r, f, "", cohort_shard_params(r->shard), error))
    return FALSE;
  CohortModel *m = r->model;
  g_autofree float *buffers = g_new(float, MAX(m->n_buffer_floats, 1));
  if (!cohort_tensor_read(m->buffers, m->n_buffers, f, "", buffers, error))
    return FALSE;
  cohort_model_upload_buffers(m, buffers);
  float *ema = cohort_shard_ema(r->shard);
  g_autofree char *ema_first = g_strconcat("ema.", m->tensors[0].name, NULL);
  if (ema && cohort_safetensors_has(f, ema_first) && !read_pieces(r, f, "ema.", ema, error))
    return FALSE;
  for (guint i = 0; i < cohort_optimizer_n_states(r->opt); i++)
    if (!read_pieces(r, f, cohort_optimizer_state_prefix(r->opt, i),
                     cohort_optimizer_state(r->opt, i), error))
      return FALSE;
  if (ema && !cohort_safetensors_has(f, ema_first) && cohort_shard_stage(r->shard) == 3)
    cohort_shard_ema_from_params(r->shard);
  return TRUE;
}

gboolean cohort_rank_run_resume_sharded(CohortRankRun *r, const char *ckpt, gboolean *keep_scale,
                                        GError **error)
{
  struct {
    CohortTrainState st;
    int ok, keep_scale, had_ema;
  } rec = {.ok = 1};
  GError *mine = NULL;
  if (r->opts->rank == 0) {
    g_autoptr(CohortConfig) saved = NULL;
    rec.ok = cohort_checkpoint_verify(ckpt, r->model, r->opt, cohort_shard_ema(r->shard) != NULL,
                                      &r->st, &saved, &mine) &&
             cohort_rank_run_check_saved(r, saved, ckpt, &mine);
    if (rec.ok) {
      rec.st = r->st;
      rec.keep_scale = saved->precision == COHORT_PRECISION_FP16 && r->st.loss_scale > 0;
      rec.had_ema = saved->ema_decay > 0;
      if (!rec.st.run_id[0])
        cohort_run_id_new(rec.st.run_id);
    }
  }
  if (!cohort_train_dist_broadcast_host(r->dist, &rec, sizeof rec, error)) {
    g_clear_error(&mine);
    return FALSE;
  }
  if (!rec.ok) {
    if (mine)
      g_propagate_error(error, mine);
    else
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "rank 0 could not load checkpoint %s (its message says why)", ckpt);
    return FALSE;
  }
  gboolean ok = read_own(r, ckpt, &mine);
  if (!all_ok(r, ok, mine, "reading the checkpoint's shards", error))
    return FALSE;
  r->st = rec.st;
  *keep_scale = rec.keep_scale;
  if (cohort_shard_stage(r->shard) == 2) {
    /* Each rank read its pieces of the parameters: everyone's, then the EMA's start. */
    if (!cohort_sharder_gather_params(cohort_shard_sharder(r->shard), error))
      return FALSE;
    if (cohort_shard_ema(r->shard) && !rec.had_ema)
      cohort_shard_ema_from_params(r->shard);
  }
  return TRUE;
}

/* ---- the export ---- */

/* One exported file holding `params` (this rank's pieces: the parameter shard, the EMA shard,
 * or NULL for the whole parameters at stage 2) under the parameters' names, and the buffers:
 * rank 0 creates a temporary next to `path`, every rank writes, rank 0 renames it into
 * place. */
static gboolean export_one(CohortRankRun *r, const char *path, const float *params,
                           GHashTable *meta, GError **error)
{
  g_autofree char *tmp = NULL;
  GError *mine = NULL;
  gboolean created = FALSE;
  if (r->opts->rank == 0) {
    tmp = g_strconcat(path, ".tmp-XXXXXX", NULL);
    int fd = g_mkstemp_full(tmp, O_WRONLY | O_CLOEXEC, 0644); /* as cohort_write_atomic */
    if (fd >= 0) {
      close(fd);
      created = create_file(r, tmp, FALSE, meta, &mine);
    } else {
      g_set_error(&mine, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: cannot create: %s", tmp,
                  g_strerror(errno));
    }
  }
  gboolean ok = write_together(r, tmp, created, mine, FALSE, meta, params, error);
  if (r->opts->rank != 0)
    return ok;
  if (ok && g_rename(tmp, path) != 0) {
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                "%s: cannot rename into place: %s", path, g_strerror(errno));
    ok = FALSE;
  }
  if (!ok && tmp)
    g_unlink(tmp);
  g_autofree char *dir = g_path_get_dirname(path);
  cohort_fsync_dir(dir);
  return ok;
}

gboolean cohort_rank_run_export_sharded(CohortRankRun *r, const char *path, const char *ema_path,
                                        GHashTable *meta, GError **error)
{
  if (!export_one(r, path, cohort_shard_params(r->shard), meta, error))
    return FALSE;
  return !ema_path || export_one(r, ema_path, cohort_shard_ema(r->shard), meta, error);
}
