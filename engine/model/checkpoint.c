/* Checkpoint folders: atomic save, pruning of the current run's old checkpoints, and a load in
 * three stages (parse state.json, verify the files against the model, read). Finding
 * checkpoints and reading state.json, which need no tensors, are engine/progress/workspace.c. */
#include "engine/model/checkpoint.h"
#include "engine/model/checkpoint-base.h"
#include "engine/model/lora.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "engine/progress/checkpoint-state.h"
#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/model/model-io.h"
#include "kernels/backend.h"

#define MODEL_FILE COHORT_CHECKPOINT_MODEL_FILE
#define STATE_FILE COHORT_CHECKPOINT_STATE_FILE
#define EMA_PREFIX "ema."

/* Lowercase hex sha256 of a file (models reach gigabytes: read in chunks). */
static char *sha256_file(const char *path, GError **error)
{
  g_autoptr(GError) local = NULL;
  char *sha = cohort_file_sha256(path, &local);
  if (!sha)
    g_set_error_literal(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_IO, local->message);
  return sha;
}

/* ---- the folders: crash-safe replacement, pruning and recovery ----
 *
 * Names in checkpoints/ (N = the step, eight digits or more):
 *   step-N             a checkpoint (complete when state.json and model.safetensors are there);
 *   step-N.tmp         a checkpoint being written, or, after an exchange, the old step-N being
 *                      removed;
 *   step-N.old.tmp     the old step-N during a replacement on a file system that cannot
 *                      exchange two names;
 *   step-N.pruned.tmp  a pruned checkpoint being removed.
 * Every change is a rename of a whole folder, so a crash at any moment leaves the complete
 * folders it found, possibly under a .tmp name, which cohort_checkpoint_recover puts back (a
 * step-N.tmp or step-N.old.tmp whose step-N is missing) or removes. */

/* "step-", digits, then exactly `suffix`: the step, or -1. */
static gint64 step_of(const char *name, const char *suffix)
{
  if (!g_str_has_prefix(name, "step-") || !g_str_has_suffix(name, suffix))
    return -1;
  const char *digits = name + 5;
  gsize n = strlen(digits) - strlen(suffix);
  if (n == 0 || n > 18)
    return -1;
  for (gsize i = 0; i < n; i++)
    if (!g_ascii_isdigit(digits[i]))
      return -1;
  return g_ascii_strtoll(digits, NULL, 10);
}

/* A folder a resume could use: both files regular and state.json readable. */
static gboolean is_usable(const char *dir)
{
  g_autofree char *model = g_build_filename(dir, MODEL_FILE, NULL);
  CohortTrainState st;
  return g_file_test(model, G_FILE_TEST_IS_REGULAR) &&
         cohort_checkpoint_read_state(dir, &st, NULL, NULL);
}

/* TRUE when `dir` holds nothing but what a save writes (its two files and their
 * temporaries): a half-deleted checkpoint, safe to remove. */
static gboolean only_checkpoint_files(const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name(d)))
    if (!g_str_has_prefix(name, MODEL_FILE) && !g_str_has_prefix(name, STATE_FILE))
      return FALSE;
  return d != NULL;
}

/* Puts back the folder of an interrupted replacement: step-N.tmp (the new copy) or else
 * step-N.old.tmp (the old one) becomes step-N when step-N is missing. */
static void recover_step(const char *ckdir, const char *name, GPtrArray *notes)
{
  gint64 step = step_of(name, ".tmp");
  if (step < 0)
    step = step_of(name, ".old.tmp");
  if (step < 0)
    return;
  g_autofree char *base = g_strdup_printf("step-%08" G_GINT64_FORMAT, step);
  g_autofree char *final = g_build_filename(ckdir, base, NULL);
  g_autofree char *fresh = g_strconcat(final, ".tmp", NULL);
  g_autofree char *old = g_strconcat(final, ".old.tmp", NULL);
  if (g_file_test(final, G_FILE_TEST_EXISTS))
    return;
  const char *from = is_usable(fresh) ? fresh : is_usable(old) ? old : NULL;
  if (from && g_rename(from, final) == 0 && notes)
    g_ptr_array_add(notes, g_strdup_printf("%s: completed a replacement that a crash interrupted "
                                           "(the %s copy put back)",
                                           final, from == fresh ? "new" : "old"));
}

guint cohort_checkpoint_recover(const char *workspace, GPtrArray *notes)
{
  g_autofree char *ckdir = g_build_filename(workspace, "checkpoints", NULL);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GDir) d = g_dir_open(ckdir, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name(d)))
    g_ptr_array_add(names, g_strdup(name));
  /* First whatever can be put back, then what is left over. */
  for (guint i = 0; i < names->len; i++)
    recover_step(ckdir, names->pdata[i], notes);
  guint removed = 0;
  for (guint i = 0; i < names->len; i++) {
    const char *n = names->pdata[i];
    g_autofree char *path = g_build_filename(ckdir, n, NULL);
    gboolean leftover = g_str_has_prefix(n, "step-") && g_str_has_suffix(n, ".tmp");
    /* A step-N half deleted by a prune of an older Cohort, or emptied by hand. */
    gboolean broken = step_of(n, "") >= 0 && !is_usable(path) && only_checkpoint_files(path);
    if (!(leftover || broken) || !g_file_test(path, G_FILE_TEST_IS_DIR) ||
        g_file_test(path, G_FILE_TEST_IS_SYMLINK))
      continue;
    cohort_remove_tree(path);
    removed++;
    if (notes)
      g_ptr_array_add(notes, g_strdup_printf("%s: removed what a crash left of %s", path,
                                             leftover ? "a save or a prune" : "a checkpoint"));
  }
  if (removed > 0)
    cohort_fsync_dir(ckdir);
  return removed;
}

/* Moves the complete folder `tmp` to `final`. When `final` exists (a resumed run saving a step
 * again), the two are swapped in one atomic exchange and the old one, now at `tmp`, removed:
 * there is never a moment without a complete `final`. Where the file system cannot exchange,
 * the old folder goes to .old.tmp first, and cohort_checkpoint_recover completes what a crash
 * between the two renames leaves. */
static gboolean put_in_place(const char *ckdir, const char *tmp, const char *final, GError **error)
{
  if (!g_file_test(final, G_FILE_TEST_EXISTS)) {
    if (g_rename(tmp, final) != 0)
      return cohort_checkpoint_io_error(error, final, "rename into place", errno);
    cohort_fsync_dir(ckdir);
    return TRUE;
  }
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
    cohort_fsync_dir(ckdir);
    cohort_remove_tree(tmp);
    return TRUE;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return cohort_checkpoint_io_error(error, final, "replace", errno);
  g_autofree char *old = g_strconcat(final, ".old.tmp", NULL);
  cohort_remove_tree(old);
  if (g_rename(final, old) != 0)
    return cohort_checkpoint_io_error(error, final, "replace", errno);
  if (g_rename(tmp, final) != 0) {
    int e = errno;
    g_rename(old, final);
    return cohort_checkpoint_io_error(error, final, "rename into place", e);
  }
  cohort_fsync_dir(ckdir);
  cohort_remove_tree(old);
  return TRUE;
}

/* Removes the oldest checkpoints of run `run_id` beyond its newest keep_last. Checkpoints of
 * other runs (and of none) are never touched. Each goes to a .pruned.tmp name first, so a
 * crash while its files are deleted leaves no half checkpoint under a checkpoint's name. */
static void prune(const char *ckdir, const char *run_id, int keep_last)
{
  if (keep_last <= 0)
    return;
  g_autoptr(GPtrArray) all = cohort_checkpoint_list(ckdir);
  g_autoptr(GPtrArray) mine = g_ptr_array_new();
  for (guint i = 0; i < all->len; i++) {
    char id[COHORT_RUN_ID_LEN];
    cohort_checkpoint_run_id(g_ptr_array_index(all, i), id);
    if (strcmp(id, run_id) == 0)
      g_ptr_array_add(mine, g_ptr_array_index(all, i));
  }
  for (guint i = 0; i + (guint)keep_last < mine->len; i++) {
    const char *dir = g_ptr_array_index(mine, i);
    g_autofree char *doomed = g_strconcat(dir, ".pruned.tmp", NULL);
    cohort_remove_tree(doomed);
    if (g_rename(dir, doomed) != 0)
      continue;
    cohort_fsync_dir(ckdir);
    cohort_remove_tree(doomed);
  }
}

/* Host copies of every group, named, ready for cohort_safetensors_write. */
typedef struct {
  GPtrArray *names;
  GArray *entries;
  GPtrArray *copies; /* host buffers downloaded from the device */
} Groups;

static void groups_clear(Groups *g)
{
  g_ptr_array_unref(g->names);
  g_array_unref(g->entries);
  g_ptr_array_unref(g->copies);
}

/* The parameters (or EMA weights) `v` under `prefix`: the whole model, adapters included, or
 * with `only_train` the train table alone (a checkpoint of what learns: checkpoint-base.h). */
static void param_entries(Groups *g, const CohortModel *m, gboolean only_train, const float *v,
                          const char *prefix)
{
  if (only_train) {
    cohort_tensor_st_entries(m->train, m->n_train, v, prefix, g->names, g->entries);
    return;
  }
  cohort_tensor_st_entries(m->tensors, m->n_tensors, v, prefix, g->names, g->entries);
  if (m->lora) /* the LoRA adapters are parameters too, in the same vector */
    cohort_tensor_st_entries(m->lora->tensors, m->lora->n_tensors, v, prefix, g->names, g->entries);
}

static void collect_groups(Groups *g, const CohortModel *m, CohortOptimizer *opt, const float *ema,
                           gboolean only_train)
{
  g->names = g_ptr_array_new_with_free_func(g_free);
  g->entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  g->copies = g_ptr_array_new_with_free_func(g_free);
  float *tmp = NULL;
  const float *params = cohort_model_params_host(m, &tmp);
  if (tmp)
    g_ptr_array_add(g->copies, tmp);
  param_entries(g, m, only_train, params, "");
  const float *buffers = cohort_model_buffers_host(m, &tmp);
  if (tmp)
    g_ptr_array_add(g->copies, tmp);
  cohort_tensor_st_entries(m->buffers, m->n_buffers, buffers, "", g->names, g->entries);
  if (ema)
    param_entries(g, m, only_train, ema, EMA_PREFIX);
  /* The optimizer's state covers what learns alone: the train table (engine/model/finetune.h). */
  for (guint i = 0; opt && i < cohort_optimizer_n_states(opt); i++) {
    const float *state = cohort_optimizer_state(opt, i);
    if (cohort_optimizer_backend(opt) != cohort_backend_cpu()) {
      float *copy = g_new(float, MAX(m->n_trainable, 1));
      cohort_optimizer_download_state(opt, i, copy);
      g_ptr_array_add(g->copies, copy);
      state = copy;
    }
    cohort_tensor_st_entries(m->train, m->n_train, state, cohort_optimizer_state_prefix(opt, i),
                             g->names, g->entries);
  }
}

/* What model.safetensors holds and who writes it: the whole model from here, or a writer of
 * the trainer's (cohort_checkpoint_save_with). */
typedef struct {
  const CohortModel *model;
  CohortOptimizer *opt;
  const float *ema;
  CohortCheckpointWriteFunc write;
  gpointer data;
  gboolean has_ema, has_opt;
  gboolean only_train; /* what learns alone, and the base's reference (checkpoint-base.h) */
} Contents;

static gboolean write_tensors(const char *path, const Contents *c, const CohortTrainState *st,
                              GError **error)
{
  if (c->write)
    return c->write(path, c->data, error);
  Groups groups;
  collect_groups(&groups, c->model, c->opt, c->ema, c->only_train);
  g_autoptr(GHashTable) meta = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free);
  g_hash_table_insert(meta, "format", g_strdup("pt"));
  g_hash_table_insert(meta, "cohort.step", g_strdup_printf("%" G_GINT64_FORMAT, st->step));
  gboolean ok = cohort_safetensors_write(path, (CohortStEntry *)groups.entries->data,
                                         groups.entries->len, meta, error);
  groups_clear(&groups);
  return ok;
}

static gboolean write_folder(const char *tmp, const CohortConfig *cfg, const Contents *c,
                             const CohortTrainState *st, GError **error)
{
  g_autofree char *model = g_build_filename(tmp, MODEL_FILE, NULL);
  g_autofree char *state = g_build_filename(tmp, STATE_FILE, NULL);
  g_autofree char *sha = NULL;
  g_autofree char *json = NULL;
  return write_tensors(model, c, st, error) && (sha = sha256_file(model, error)) &&
         (json = cohort_state_to_json(cfg, st, sha, c->has_ema, c->has_opt, error)) &&
         cohort_write_file_atomic(state, json, strlen(json), error);
}

static gboolean save_folder(const char *workspace, const CohortConfig *cfg, const Contents *c,
                            const CohortTrainState *st, int keep_last, char **out_dir,
                            GError **error)
{
  g_autofree char *ckdir = g_build_filename(workspace, "checkpoints", NULL);
  if (g_mkdir_with_parents(ckdir, 0755) != 0)
    return cohort_checkpoint_io_error(error, ckdir, "create folder", errno);
  cohort_checkpoint_recover(workspace, NULL);

  g_autofree char *base = g_strdup_printf("step-%08" G_GINT64_FORMAT, st->step);
  g_autofree char *final = g_build_filename(ckdir, base, NULL);
  g_autofree char *tmp = g_strconcat(final, ".tmp", NULL);
  if (g_mkdir(tmp, 0755) != 0)
    return cohort_checkpoint_io_error(error, tmp, "create folder", errno);
  if (!write_folder(tmp, cfg, c, st, error)) {
    cohort_remove_tree(tmp);
    return FALSE;
  }
  cohort_fsync_dir(tmp);
  if (!put_in_place(ckdir, tmp, final, error)) {
    cohort_remove_tree(tmp);
    return FALSE;
  }
  prune(ckdir, st->run_id, keep_last);
  if (out_dir)
    *out_dir = g_steal_pointer(&final);
  return TRUE;
}

gboolean cohort_checkpoint_save(const char *workspace, const CohortConfig *cfg,
                                const CohortModel *model, CohortOptimizer *opt,
                                const float *ema_or_NULL, const CohortTrainState *st, int keep_last,
                                char **out_dir, GError **error)
{
  g_return_val_if_fail(workspace && cfg && model && st, FALSE);
  /* A shard of the state (ZeRO stage 1) is gathered whole first (engine/train/trainer-zero.h). */
  g_return_val_if_fail(!opt || !cohort_optimizer_is_sharded(opt), FALSE);
  Contents c = {.model = model,
                .opt = opt,
                .ema = ema_or_NULL,
                .has_ema = ema_or_NULL != NULL,
                .has_opt = opt != NULL,
                .only_train = st->frozen_sha256[0] != 0};
  return save_folder(workspace, cfg, &c, st, keep_last, out_dir, error);
}

gboolean cohort_checkpoint_save_with(const char *workspace, const CohortConfig *cfg,
                                     CohortCheckpointWriteFunc write, gpointer data,
                                     gboolean has_ema, gboolean has_opt, const CohortTrainState *st,
                                     int keep_last, char **out_dir, GError **error)
{
  g_return_val_if_fail(workspace && cfg && write && st, FALSE);
  /* A checkpoint of what learns (ZeRO stages 2 and 3 with a frozen part too) goes through
   * cohort_checkpoint_save: engine/train/trainer-shard-learn.c gathers what learns for it. */
  g_return_val_if_fail(!st->frozen_sha256[0], FALSE);
  Contents c = {.write = write, .data = data, .has_ema = has_ema, .has_opt = has_opt};
  return save_folder(workspace, cfg, &c, st, keep_last, out_dir, error);
}

/* No tensor beyond the model's groups: more layers in the file is another model too. */
static gboolean check_no_extra(const CohortModel *m, CohortOptimizer *opt, const CohortStFile *f,
                               const char *path, GError **error)
{
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    const char *bare = *name;
    if (g_str_has_prefix(bare, EMA_PREFIX))
      bare += strlen(EMA_PREFIX);
    for (guint i = 0; opt && i < cohort_optimizer_n_states(opt); i++)
      if (g_str_has_prefix(bare, cohort_optimizer_state_prefix(opt, i)))
        bare += strlen(cohort_optimizer_state_prefix(opt, i));
    if (g_str_has_prefix(bare, "optim."))
      continue; /* another optimizer's state: checked below when it matters */
    if (!cohort_model_find_tensor(m, bare) && !cohort_model_find_buffer(m, bare)) {
      g_set_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                  "%s: tensor \"%s\" is not part of this %s model", path, *name, m->klass->name);
      return FALSE;
    }
  }
  return TRUE;
}

/* Every group the load will read is present with the model's shapes; checked before anything
 * is read so a mismatched checkpoint changes nothing. */
/* The parameters (or their EMA, under `prefix`) as param_entries writes them. */
static gboolean check_params(const CohortModel *m, gboolean only_train, const CohortStFile *f,
                             const char *path, const char *prefix, GError **error)
{
  if (only_train)
    return cohort_tensor_check(m->train, m->n_train, f, path, prefix, error);
  return cohort_tensor_check(m->tensors, m->n_tensors, f, path, prefix, error) &&
         (!m->lora ||
          cohort_tensor_check(m->lora->tensors, m->lora->n_tensors, f, path, prefix, error));
}

static gboolean read_params(const CohortModel *m, gboolean only_train, const CohortStFile *f,
                            const char *prefix, float *dst, GError **error)
{
  if (only_train)
    return cohort_tensor_read(m->train, m->n_train, f, prefix, dst, error);
  return cohort_tensor_read(m->tensors, m->n_tensors, f, prefix, dst, error) &&
         (!m->lora ||
          cohort_tensor_read(m->lora->tensors, m->lora->n_tensors, f, prefix, dst, error));
}

/* The name of the first tensor the EMA group holds. */
static char *ema_first(const CohortModel *m, gboolean only_train)
{
  return g_strconcat(EMA_PREFIX, only_train ? m->train[0].name : m->tensors[0].name, NULL);
}

static gboolean verify_groups(const CohortModel *m, CohortOptimizer *opt, gboolean want_ema,
                              gboolean only_train, const CohortStFile *f, const char *path,
                              GError **error)
{
  g_autoptr(GError) local = NULL;
  gboolean ok = check_no_extra(m, opt, f, path, &local) &&
                check_params(m, only_train, f, path, "", &local) &&
                cohort_tensor_check(m->buffers, m->n_buffers, f, path, "", &local);
  g_autofree char *first = ema_first(m, only_train);
  gboolean has_ema = cohort_safetensors_has(f, first);
  ok = ok && (!(want_ema && has_ema) || check_params(m, only_train, f, path, EMA_PREFIX, &local));
  for (guint i = 0; ok && opt && i < cohort_optimizer_n_states(opt); i++) {
    const char *prefix = cohort_optimizer_state_prefix(opt, i);
    g_autofree char *state0 = g_strconcat(prefix, m->train[0].name, NULL);
    if (!cohort_safetensors_has(f, state0))
      return cohort_checkpoint_corrupt(error, path, "holds no optimizer state (\"%s\" is absent)",
                                       state0);
    ok = cohort_tensor_check(m->train, m->n_train, f, path, prefix, &local);
  }
  if (!ok)
    g_set_error_literal(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                        local->message);
  return ok;
}

/* Reads the verified groups into host buffers, then hands them to the backends. With
 * `only_train` the model's current parameters (the rebuilt base) fill what the file lacks, in
 * the parameters and in the EMA weights alike: the frozen part never moves. */
static gboolean read_groups(CohortModel *m, CohortOptimizer *opt, float *ema, gboolean only_train,
                            const CohortStFile *f, GError **error)
{
  size_t n = m->n_params;
  g_autofree float *params = g_new(float, MAX(n, 1));
  g_autofree float *buffers = g_new(float, MAX(m->n_buffer_floats, 1));
  if (only_train)
    cohort_model_download_params(m, params);
  if (!read_params(m, only_train, f, "", params, error) ||
      !cohort_tensor_read(m->buffers, m->n_buffers, f, "", buffers, error))
    return FALSE;
  if (ema) {
    g_autofree char *first = ema_first(m, only_train);
    memcpy(ema, params, n * sizeof(float));
    if (cohort_safetensors_has(f, first) && !read_params(m, only_train, f, EMA_PREFIX, ema, error))
      return FALSE;
  }
  guint n_states = opt ? cohort_optimizer_n_states(opt) : 0;
  g_autoptr(GPtrArray) states = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; i < n_states; i++) {
    float *st = g_new(float, MAX(m->n_trainable, 1));
    g_ptr_array_add(states, st);
    if (!cohort_tensor_read(m->train, m->n_train, f, cohort_optimizer_state_prefix(opt, i), st,
                            error))
      return FALSE;
  }
  /* Everything is read: only now does anything the caller holds change. */
  cohort_model_upload_params(m, params);
  cohort_model_upload_buffers(m, buffers);
  for (guint i = 0; i < n_states; i++)
    cohort_optimizer_upload_state(opt, i, g_ptr_array_index(states, i));
  return TRUE;
}

/* A checkpoint of what learns continues only on the frozen weights it was trained with, which
 * the caller has rebuilt into `m` (cohort_checkpoint_rebuild_base). */
static gboolean same_base(const char *dir, const CohortModel *m, const char *want, GError **error)
{
  if (m->n_trainable == m->n_params)
    return cohort_fail(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                       "%s: the checkpoint holds only what learns in finetune lora or frozen, but "
                       "this model has no frozen part (finetune full); allowed: the checkpoint's "
                       "finetune, lora_* and trainable keys",
                       dir);
  g_autofree char *have = cohort_frozen_sha256(m);
  if (strcmp(have, want) != 0)
    return cohort_fail(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                       "%s: the rebuilt base's frozen weights have sha256 %s, but the checkpoint "
                       "was trained on frozen weights of sha256 %s; it continues only on the same "
                       "base (the same init_from file, model shape, finetune and trainable)",
                       dir, have, want);
  return TRUE;
}

/* Steps 1 and 2 of a load: state.json parsed, the tensors file's digest and tensors checked
 * against the model; *f gets the open file, *s the state, *cfg the saved config (when asked). */
static gboolean open_checked(const char *dir, const CohortModel *model, CohortOptimizer *opt,
                             gboolean want_ema, CohortStFile **file, CohortTrainState *out,
                             CohortConfig **saved_cfg, GError **error)
{
  g_autofree char *state_path = g_build_filename(dir, STATE_FILE, NULL);
  g_autofree char *model_path = g_build_filename(dir, MODEL_FILE, NULL);

  /* 1. parse state.json */
  gsize len = 0;
  g_autofree char *text = cohort_checkpoint_read_state_text(state_path, &len, error);
  if (!text)
    return FALSE;
  CohortTrainState s = {0};
  g_auto(CohortStateExtras) x = {0};
  if (!cohort_state_parse(text, len, state_path, &s, &x, error))
    return FALSE;

  /* 2. verify the tensors file against state.json and the model */
  g_autofree char *sha = sha256_file(model_path, error);
  if (!sha)
    return FALSE;
  if (g_ascii_strcasecmp(sha, x.model_sha256) != 0)
    return cohort_checkpoint_corrupt(
        error, model_path,
        "sha256 %s does not match %s recorded in state.json; the file is truncated "
        "or corrupt",
        sha, x.model_sha256);
  gboolean only_train = s.frozen_sha256[0] != 0;
  if (only_train && !same_base(dir, model, s.frozen_sha256, error))
    return FALSE;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(model_path, error);
  if (!f || !verify_groups(model, opt, want_ema, only_train, f, model_path, error))
    return FALSE;
  g_autoptr(CohortConfig) cfg = NULL;
  if (saved_cfg && !(cfg = cohort_config_load_data(x.config_json, -1, state_path, error)))
    return FALSE;
  *out = s;
  if (saved_cfg)
    *saved_cfg = g_steal_pointer(&cfg);
  if (file)
    *file = g_steal_pointer(&f);
  return TRUE;
}

gboolean cohort_checkpoint_load(const char *dir, CohortModel *model, CohortOptimizer *opt,
                                float *ema_or_NULL, CohortTrainState *st, CohortConfig **saved_cfg,
                                GError **error)
{
  g_return_val_if_fail(!opt || !cohort_optimizer_is_sharded(opt), FALSE);
  g_autoptr(CohortStFile) f = NULL;
  g_autoptr(CohortConfig) cfg = NULL;
  CohortTrainState s = {0};
  if (!open_checked(dir, model, opt, ema_or_NULL != NULL, &f, &s, saved_cfg ? &cfg : NULL, error))
    return FALSE;
  /* 3. read */
  if (!read_groups(model, opt, ema_or_NULL, s.frozen_sha256[0] != 0, f, error))
    return FALSE;
  if (st)
    *st = s;
  if (saved_cfg)
    *saved_cfg = g_steal_pointer(&cfg);
  return TRUE;
}

gboolean cohort_checkpoint_verify(const char *dir, const CohortModel *model, CohortOptimizer *opt,
                                  gboolean want_ema, CohortTrainState *st, CohortConfig **saved_cfg,
                                  GError **error)
{
  CohortTrainState s = {0};
  if (!open_checked(dir, model, opt, want_ema, NULL, &s, saved_cfg, error))
    return FALSE;
  if (st)
    *st = s;
  return TRUE;
}
