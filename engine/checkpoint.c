/* Checkpoint folders: atomic save, pruning, discovery and verified load. */
#include "engine/checkpoint.h"

#include <math.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include "engine/gpt-io.h"
#include "kernels/backend.h"
#include "engine/json-read.h"
#include "engine/json-write.h"
#include "engine/safetensors.h"

#define MODEL_FILE "model.safetensors"
#define STATE_FILE "state.json"
/* state.json holds a few numbers and the config: anything larger is not one. */
#define MAX_STATE_BYTES (16 * 1024 * 1024)

/* clang-format off */
G_DEFINE_QUARK(cohort-checkpoint-error-quark, cohort_checkpoint_error)
/* clang-format on */

/* The groups of model-shaped tensors a checkpoint may hold, by name prefix. */
#define EMA_PREFIX "ema."
#define M_PREFIX   "optim.m."
#define V_PREFIX   "optim.v."

static void remove_tree(const char *path)
{
  if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(path, G_FILE_TEST_IS_SYMLINK)) {
    g_autoptr(GDir) d = g_dir_open(path, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name(d))) {
      g_autofree char *child = g_build_filename(path, name, NULL);
      remove_tree(child);
    }
    g_rmdir(path);
  } else {
    g_unlink(path);
  }
}

static void fsync_dir(const char *path)
{
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

static gboolean io_error(GError **error, const char *path, const char *what, int err)
{
  g_set_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_IO, "%s: cannot %s: %s", path,
              what, g_strerror(err));
  return FALSE;
}

static gboolean write_synced(const char *path, const char *data, gsize len, GError **error)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_error(error, path, "create", errno);
  gsize done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return io_error(error, path, "write", e);
    }
    done += (gsize)n;
  }
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    return io_error(error, path, "sync", e);
  }
  if (close(fd) != 0)
    return io_error(error, path, "close", errno);
  return TRUE;
}

/* Opens `path` for reading if it is a regular file: a FIFO in a checkpoint folder would
 * block the reader forever. */
static FILE *open_regular(const char *path, GError **error)
{
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    io_error(error, path, "read", errno);
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    g_set_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_IO,
                "%s: cannot read: not a regular file", path);
    return NULL;
  }
  FILE *fp = fdopen(fd, "rb");
  if (!fp) {
    io_error(error, path, "read", errno);
    close(fd);
  }
  return fp;
}

/* Lowercase hex sha256 of a file, read in chunks (models reach gigabytes). */
static char *sha256_file(const char *path, GError **error)
{
  FILE *fp = open_regular(path, error);
  if (!fp)
    return NULL;
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  g_autofree guchar *buf = g_malloc(1 << 20);
  size_t n;
  while ((n = fread(buf, 1, 1 << 20, fp)) > 0)
    g_checksum_update(sum, buf, (gssize)n);
  gboolean failed = ferror(fp);
  int e = errno;
  fclose(fp);
  if (failed) {
    io_error(error, path, "read", e);
    return NULL;
  }
  return g_strdup(g_checksum_get_string(sum));
}

/* "step-" followed by digits only: a complete checkpoint's folder name. */
static gboolean parse_step_name(const char *name, gint64 *step)
{
  if (!g_str_has_prefix(name, "step-"))
    return FALSE;
  const char *digits = name + 5;
  if (!*digits || strlen(digits) > 18)
    return FALSE;
  for (const char *p = digits; *p; p++)
    if (!g_ascii_isdigit(*p))
      return FALSE;
  *step = g_ascii_strtoll(digits, NULL, 10);
  return TRUE;
}

static gboolean is_complete(const char *dir)
{
  g_autofree char *model = g_build_filename(dir, MODEL_FILE, NULL);
  g_autofree char *state = g_build_filename(dir, STATE_FILE, NULL);
  return g_file_test(dir, G_FILE_TEST_IS_DIR) && g_file_test(model, G_FILE_TEST_IS_REGULAR) &&
         g_file_test(state, G_FILE_TEST_IS_REGULAR);
}

typedef struct {
  gint64 step;
  char *path;
} Found;

static gint compare_found(gconstpointer a, gconstpointer b)
{
  const Found *x = a, *y = b;
  return x->step < y->step ? -1 : x->step > y->step;
}

static void found_clear(gpointer p)
{
  g_free(((Found *)p)->path);
}

/* Complete checkpoints under `ckdir`, by increasing step. */
static GArray *list_complete(const char *ckdir)
{
  GArray *arr = g_array_new(FALSE, FALSE, sizeof(Found));
  g_array_set_clear_func(arr, found_clear);
  g_autoptr(GDir) d = g_dir_open(ckdir, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name(d))) {
    Found f;
    if (!parse_step_name(name, &f.step))
      continue;
    f.path = g_build_filename(ckdir, name, NULL);
    if (!is_complete(f.path)) {
      g_free(f.path);
      continue;
    }
    g_array_append_val(arr, f);
  }
  g_array_sort(arr, compare_found);
  return arr;
}

/* Left-overs of a save that was killed: step-*.tmp folders. */
static void clean_stale(const char *ckdir)
{
  g_autoptr(GDir) d = g_dir_open(ckdir, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name(d))) {
    if (g_str_has_prefix(name, "step-") && g_str_has_suffix(name, ".tmp")) {
      g_autofree char *path = g_build_filename(ckdir, name, NULL);
      remove_tree(path);
    }
  }
}

static char *state_json(const CohortConfig *cfg, const CohortTrainState *st, const char *sha,
                        gboolean has_ema, gboolean has_optim, GError **error)
{
  /* The config's own JSON (doubles keep their ".0"), parsed first so that text a reader
   * would refuse fails the save rather than the load. */
  g_autofree char *cfg_json = cohort_config_to_json(cfg, FALSE);
  g_autoptr(JsonNode) cfg_node = json_from_string(cfg_json, error);
  if (!cfg_node)
    return NULL;
  GString *out = g_string_new("{\n");
  g_string_append_printf(out, "  \"version\": %d,\n", COHORT_CHECKPOINT_VERSION);
  g_string_append_printf(out, "  \"step\": %" G_GINT64_FORMAT ",\n", st->step);
  g_string_append_printf(out, "  \"epoch\": %" G_GINT64_FORMAT ",\n", st->epoch);
  g_string_append_printf(out, "  \"batch_in_epoch\": %" G_GINT64_FORMAT ",\n", st->batch_in_epoch);
  g_string_append_printf(out, "  \"tokens_seen\": %" G_GINT64_FORMAT ",\n", st->tokens_seen);
  /* A string: JSON numbers lose uint64 precision in many readers. */
  g_string_append_printf(out, "  \"sample_rng\": \"%" G_GUINT64_FORMAT "\",\n", st->sample_rng);
  char scale[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd(scale, sizeof scale, "%.17g", st->loss_scale);
  /* %.17g of a whole number has no '.', which is still a JSON number; readers take it. */
  g_string_append_printf(out, "  \"loss_scale\": %s,\n", scale);
  g_string_append_printf(out, "  \"scale_good_steps\": %" G_GINT64_FORMAT ",\n",
                         st->scale_good_steps);
  g_string_append_printf(out, "  \"skipped_steps\": %" G_GINT64_FORMAT ",\n", st->skipped_steps);
  g_string_append_printf(out, "  \"has_ema\": %s,\n", has_ema ? "true" : "false");
  g_string_append_printf(out, "  \"has_optim\": %s,\n", has_optim ? "true" : "false");
  g_string_append_printf(out, "  \"model_sha256\": \"%s\",\n", sha);
  g_string_append(out, "  \"config\": ");
  g_string_append(out, cfg_json);
  g_string_append(out, "\n}\n");
  return g_string_free(out, FALSE);
}

static void add_group(GArray *entries, const CohortGpt *gpt, const float *buf, const char *prefix,
                      GPtrArray *names)
{
  guint n = 0;
  g_autofree CohortStEntry *e = cohort_gpt_st_entries(gpt, buf, prefix, names, &n);
  g_array_append_vals(entries, e, n);
}

gboolean cohort_checkpoint_save(const char *workspace, const CohortConfig *cfg,
                                const CohortGpt *gpt, CohortAdamW *opt, const float *ema_or_NULL,
                                const CohortTrainState *st, int keep_last, char **out_dir,
                                GError **error)
{
  g_return_val_if_fail(workspace && cfg && gpt && st, FALSE);
  g_autofree char *ckdir = g_build_filename(workspace, "checkpoints", NULL);
  if (g_mkdir_with_parents(ckdir, 0755) != 0)
    return io_error(error, ckdir, "create folder", errno);
  clean_stale(ckdir);

  g_autofree char *base = g_strdup_printf("step-%08" G_GINT64_FORMAT, st->step);
  g_autofree char *final = g_build_filename(ckdir, base, NULL);
  g_autofree char *tmp = g_strconcat(final, ".tmp", NULL);
  if (g_mkdir(tmp, 0755) != 0)
    return io_error(error, tmp, "create folder", errno);

  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  g_autoptr(GArray) entries = g_array_new(FALSE, TRUE, sizeof(CohortStEntry));
  /* Backend memory that is not the host's is downloaded first. */
  g_autofree float *params_copy = NULL, *m_copy = NULL, *v_copy = NULL;
  add_group(entries, gpt, cohort_gpt_params_host(gpt, &params_copy), "", names);
  if (ema_or_NULL)
    add_group(entries, gpt, ema_or_NULL, EMA_PREFIX, names);
  if (opt) {
    const float *m = cohort_adamw_m(opt), *v = cohort_adamw_v(opt);
    if (cohort_adamw_backend(opt) != cohort_backend_cpu()) {
      size_t n = cohort_gpt_num_params(gpt);
      m = m_copy = g_new(float, n);
      v = v_copy = g_new(float, n);
      cohort_adamw_download(opt, m_copy, v_copy);
    }
    add_group(entries, gpt, m, M_PREFIX, names);
    add_group(entries, gpt, v, V_PREFIX, names);
  }
  g_autoptr(GHashTable) meta = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free);
  g_hash_table_insert(meta, "format", g_strdup("pt"));
  g_hash_table_insert(meta, "cohort.step", g_strdup_printf("%" G_GINT64_FORMAT, st->step));

  g_autofree char *model = g_build_filename(tmp, MODEL_FILE, NULL);
  g_autofree char *state = g_build_filename(tmp, STATE_FILE, NULL);
  g_autofree char *sha = NULL;
  g_autofree char *json = NULL;
  if (!cohort_safetensors_write(model, (CohortStEntry *)entries->data, entries->len, meta, error) ||
      !(sha = sha256_file(model, error)) ||
      !(json = state_json(cfg, st, sha, ema_or_NULL != NULL, opt != NULL, error)) ||
      !write_synced(state, json, strlen(json), error)) {
    remove_tree(tmp);
    return FALSE;
  }
  fsync_dir(tmp);

  /* Saving a step again (a resumed run reaching it) replaces the old folder; the old one is
   * moved to a .tmp name first, so a crash leaves it for clean_stale rather than half. */
  g_autofree char *old = g_strconcat(final, ".old.tmp", NULL);
  if (g_file_test(final, G_FILE_TEST_EXISTS)) {
    remove_tree(old);
    if (g_rename(final, old) != 0) {
      int e = errno;
      remove_tree(tmp);
      return io_error(error, final, "replace", e);
    }
  }
  if (g_rename(tmp, final) != 0) {
    int e = errno;
    remove_tree(tmp);
    return io_error(error, final, "rename into place", e);
  }
  fsync_dir(ckdir);
  remove_tree(old);

  if (keep_last > 0) {
    g_autoptr(GArray) all = list_complete(ckdir);
    for (guint i = 0; i + (guint)keep_last < all->len; i++)
      remove_tree(g_array_index(all, Found, i).path);
  }
  clean_stale(ckdir);
  if (out_dir)
    *out_dir = g_steal_pointer(&final);
  return TRUE;
}

char *cohort_checkpoint_find_latest(const char *workspace)
{
  g_autofree char *ckdir = g_build_filename(workspace, "checkpoints", NULL);
  g_autoptr(GArray) all = list_complete(ckdir);
  if (all->len == 0)
    return NULL;
  return g_strdup(g_array_index(all, Found, all->len - 1).path);
}

static gboolean corrupt(GError **error, const char *path, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static gboolean corrupt(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT, "%s: %s", path, msg);
  return FALSE;
}

static gboolean get_int(JsonObject *o, const char *path, const char *key, gint64 *out,
                        GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64 ||
      json_node_get_int(n) < 0)
    return corrupt(error, path, "\"%s\" is missing or not a non-negative integer", key);
  *out = json_node_get_int(n);
  return TRUE;
}

static const char *get_string(JsonObject *o, const char *path, const char *key, GError **error)
{
  JsonNode *n = json_object_get_member(o, key);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING) {
    corrupt(error, path, "\"%s\" is missing or not a string", key);
    return NULL;
  }
  return json_node_get_string(n);
}

static char *dims_string(int nd, const int64_t *shape)
{
  GString *str = g_string_new("[");
  for (int d = 0; d < nd; d++)
    g_string_append_printf(str, "%s%" G_GINT64_FORMAT, d ? ", " : "", shape[d]);
  g_string_append_c(str, ']');
  return g_string_free(str, FALSE);
}

/* Every tensor of a group is present with the model's shape; checked before anything is
 * read so a mismatched checkpoint changes nothing. */
static gboolean check_group(const CohortGpt *gpt, const CohortStFile *f, const char *path,
                            const char *prefix, GError **error)
{
  guint n = 0;
  const CohortTensorInfo *t = cohort_gpt_tensors(gpt, &n);
  for (guint i = 0; i < n; i++) {
    g_autofree char *name = g_strconcat(prefix, t[i].name, NULL);
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, name, shape);
    gboolean same = nd == t[i].ndim;
    for (int d = 0; same && d < nd; d++)
      same = shape[d] == t[i].shape[d];
    if (!same) {
      if (nd < 0) {
        g_set_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                    "%s: tensor \"%s\" is missing; the checkpoint is of another model", path, name);
      } else {
        g_autofree char *found = dims_string(nd, shape);
        int64_t want[2] = {t[i].shape[0], t[i].shape[1]};
        g_autofree char *expect = dims_string(t[i].ndim, want);
        g_set_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                    "%s: tensor \"%s\" has shape %s, the model expects %s; the checkpoint is "
                    "of another model shape",
                    path, name, found, expect);
      }
      return FALSE;
    }
  }
  return TRUE;
}

/* No tensor beyond the model's: more layers in the file is another model too. */
static gboolean check_no_extra(const CohortGpt *gpt, const CohortStFile *f, const char *path,
                               GError **error)
{
  static const char *const prefixes[] = {EMA_PREFIX, M_PREFIX, V_PREFIX};
  for (const char *const *name = cohort_safetensors_names(f); *name; name++) {
    const char *bare = *name;
    for (gsize i = 0; i < G_N_ELEMENTS(prefixes); i++)
      if (g_str_has_prefix(bare, prefixes[i]))
        bare += strlen(prefixes[i]);
    if (!cohort_gpt_find_tensor(gpt, bare)) {
      g_set_error(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_MISMATCH,
                  "%s: tensor \"%s\" is not part of this model (n_layer %d)", path, *name,
                  cohort_gpt_shape(gpt)->n_layer);
      return FALSE;
    }
  }
  return TRUE;
}

/* The text of state.json (a regular file of at most MAX_STATE_BYTES). */
static char *read_state(const char *path, gsize *len, GError **error)
{
  FILE *fp = open_regular(path, error);
  if (!fp)
    return NULL;
  g_autoptr(GString) text = g_string_new(NULL);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, fp)) > 0 && text->len <= MAX_STATE_BYTES)
    g_string_append_len(text, buf, (gssize)n);
  gboolean failed = ferror(fp);
  int e = errno;
  fclose(fp);
  if (failed) {
    io_error(error, path, "read", e);
    return NULL;
  }
  if (text->len > MAX_STATE_BYTES) {
    corrupt(error, path, "larger than %d MiB, which is not a checkpoint's state",
            MAX_STATE_BYTES >> 20);
    return NULL;
  }
  *len = text->len;
  return g_string_free(g_steal_pointer(&text), FALSE);
}

gboolean cohort_checkpoint_load(const char *dir, CohortGpt *gpt, CohortAdamW *opt,
                                float *ema_or_NULL, CohortTrainState *st, CohortConfig **saved_cfg,
                                GError **error)
{
  g_autofree char *state_path = g_build_filename(dir, STATE_FILE, NULL);
  g_autofree char *model_path = g_build_filename(dir, MODEL_FILE, NULL);

  gsize len = 0;
  g_autofree char *text = read_state(state_path, &len, error);
  if (!text)
    return FALSE;
  g_autoptr(GError) local = NULL;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(text, (gssize)len, state_path, 0, &local);
  if (!root) {
    g_set_error_literal(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT,
                        local->message);
    return FALSE;
  }
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return corrupt(error, state_path, "not a JSON object");
  JsonObject *o = json_node_get_object(root);

  gint64 version = 0;
  CohortTrainState s = {0};
  if (!get_int(o, state_path, "version", &version, error))
    return FALSE;
  if (version < 1 || version > COHORT_CHECKPOINT_VERSION)
    return corrupt(error, state_path, "version %" G_GINT64_FORMAT " is not supported (1 to %d)",
                   version, COHORT_CHECKPOINT_VERSION);
  if (!get_int(o, state_path, "step", &s.step, error) ||
      !get_int(o, state_path, "epoch", &s.epoch, error) ||
      !get_int(o, state_path, "batch_in_epoch", &s.batch_in_epoch, error) ||
      !get_int(o, state_path, "tokens_seen", &s.tokens_seen, error))
    return FALSE;
  const char *rng = get_string(o, state_path, "sample_rng", error);
  if (!rng)
    return FALSE;
  if (!g_ascii_string_to_unsigned(rng, 10, 0, G_MAXUINT64, &s.sample_rng, NULL))
    return corrupt(error, state_path, "\"sample_rng\" \"%s\" is not an unsigned 64-bit integer",
                   rng);
  /* Optional: absent in checkpoints from before fp16 training (see CohortTrainState). */
  if (json_object_has_member(o, "loss_scale")) {
    JsonNode *ls = json_object_get_member(o, "loss_scale");
    GType t = JSON_NODE_HOLDS_VALUE(ls) ? json_node_get_value_type(ls) : G_TYPE_INVALID;
    if (t != G_TYPE_DOUBLE && t != G_TYPE_INT64)
      return corrupt(error, state_path, "\"loss_scale\" is not a number");
    s.loss_scale = json_node_get_double(ls);
    if (!(s.loss_scale >= 0) || isinf(s.loss_scale))
      return corrupt(error, state_path, "\"loss_scale\" %g is not a finite number >= 0",
                     s.loss_scale);
    if (!get_int(o, state_path, "scale_good_steps", &s.scale_good_steps, error) ||
        !get_int(o, state_path, "skipped_steps", &s.skipped_steps, error))
      return FALSE;
    if (s.scale_good_steps < 0 || s.skipped_steps < 0 || s.skipped_steps > s.step)
      return corrupt(error, state_path,
                     "\"scale_good_steps\" %" G_GINT64_FORMAT
                     " or \"skipped_steps\" %" G_GINT64_FORMAT
                     " is out of range (0 to step %" G_GINT64_FORMAT ")",
                     s.scale_good_steps, s.skipped_steps, s.step);
  }
  const char *want_sha = get_string(o, state_path, "model_sha256", error);
  if (!want_sha)
    return FALSE;
  JsonNode *cfg_node = json_object_get_member(o, "config");
  if (!cfg_node || !JSON_NODE_HOLDS_OBJECT(cfg_node))
    return corrupt(error, state_path, "\"config\" is missing or not an object");

  g_autofree char *sha = sha256_file(model_path, error);
  if (!sha)
    return FALSE;
  if (g_ascii_strcasecmp(sha, want_sha) != 0)
    return corrupt(error, model_path,
                   "sha256 %s does not match %s recorded in state.json; the file is truncated "
                   "or corrupt",
                   sha, want_sha);

  g_autoptr(CohortStFile) f = cohort_safetensors_open(model_path, error);
  if (!f)
    return FALSE;
  gboolean has_ema = cohort_safetensors_has(f, EMA_PREFIX "wte.weight");
  if (opt && !cohort_safetensors_has(f, M_PREFIX "wte.weight"))
    return corrupt(error, model_path, "holds no optimizer moments (\"%swte.weight\" is absent)",
                   M_PREFIX);
  if (!check_no_extra(gpt, f, model_path, error) || !check_group(gpt, f, model_path, "", error) ||
      (has_ema && ema_or_NULL && !check_group(gpt, f, model_path, EMA_PREFIX, error)) ||
      (opt && !check_group(gpt, f, model_path, M_PREFIX, error)) ||
      (opt && !check_group(gpt, f, model_path, V_PREFIX, error)))
    return FALSE;

  g_autoptr(CohortConfig) cfg = NULL;
  if (saved_cfg) {
    g_autofree char *cfg_json = cohort_json_to_string(cfg_node, FALSE);
    cfg = cohort_config_load_data(cfg_json, -1, state_path, error);
    if (!cfg)
      return FALSE;
  }

  /* Everything is checked; the reads below only convert already-validated tensors. Backend
   * memory that is not the host's is read into host buffers and uploaded. */
  size_t n = cohort_gpt_num_params(gpt);
  gboolean params_on_host = cohort_gpt_on_host(gpt);
  g_autofree float *params_tmp = params_on_host ? NULL : g_new(float, n);
  float *params = params_on_host ? cohort_gpt_params(gpt) : params_tmp;
  if (!cohort_gpt_read_tensors(gpt, f, "", params, error))
    return FALSE;
  if (ema_or_NULL) {
    if (has_ema) {
      if (!cohort_gpt_read_tensors(gpt, f, EMA_PREFIX, ema_or_NULL, error))
        return FALSE;
    } else {
      memcpy(ema_or_NULL, params, n * sizeof(float));
    }
  }
  if (opt) {
    gboolean opt_on_host = cohort_adamw_backend(opt) == cohort_backend_cpu();
    g_autofree float *m_tmp = opt_on_host ? NULL : g_new(float, n);
    g_autofree float *v_tmp = opt_on_host ? NULL : g_new(float, n);
    if (!cohort_gpt_read_tensors(gpt, f, M_PREFIX, opt_on_host ? cohort_adamw_m(opt) : m_tmp,
                                 error) ||
        !cohort_gpt_read_tensors(gpt, f, V_PREFIX, opt_on_host ? cohort_adamw_v(opt) : v_tmp,
                                 error))
      return FALSE;
    if (!opt_on_host)
      cohort_adamw_upload(opt, m_tmp, v_tmp);
  }
  if (!params_on_host)
    cohort_gpt_upload_params(gpt, params_tmp);

  if (st)
    *st = s;
  if (saved_cfg)
    *saved_cfg = g_steal_pointer(&cfg);
  return TRUE;
}
