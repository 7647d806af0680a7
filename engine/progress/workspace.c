/* A workspace's checkpoint folders and their state.json: discovery, run ids, reading. */
#include "engine/progress/workspace.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fileio.h"
#include "engine/progress/checkpoint-state.h"

#define MODEL_FILE COHORT_CHECKPOINT_MODEL_FILE
#define STATE_FILE COHORT_CHECKPOINT_STATE_FILE
/* state.json holds a few numbers and the config: anything larger is not one. */
#define MAX_STATE_BYTES (16 * 1024 * 1024)

/* clang-format off */
G_DEFINE_QUARK(cohort-checkpoint-error-quark, cohort_checkpoint_error)
/* clang-format on */

void cohort_run_id_new(char out[COHORT_RUN_ID_LEN])
{
  guint8 bytes[16];
  /* The kernel's random source: ids of runs started in the same microsecond still differ. */
  FILE *f = fopen("/dev/urandom", "rb");
  gboolean ok = f && fread(bytes, 1, sizeof bytes, f) == sizeof bytes;
  if (f)
    fclose(f);
  if (!ok) {
    for (guint i = 0; i < sizeof bytes; i++)
      bytes[i] = (guint8)g_random_int();
  }
  for (guint i = 0; i < sizeof bytes; i++)
    g_snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

gboolean cohort_checkpoint_corrupt(GError **error, const char *path, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cohort_fail_valist(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_CORRUPT, fmt, ap);
  va_end(ap);
  g_prefix_error(error, "%s: ", path);
  return FALSE;
}

gboolean cohort_checkpoint_io_error(GError **error, const char *path, const char *what, int err)
{
  return cohort_fail(error, COHORT_CHECKPOINT_ERROR, COHORT_CHECKPOINT_ERROR_IO,
                     "%s: cannot %s: %s", path, what, g_strerror(err));
}

char *cohort_checkpoint_read_state_text(const char *path, gsize *len, GError **error)
{
  g_autoptr(GError) local = NULL;
  char *text = cohort_file_read_regular(path, MAX_STATE_BYTES, "a checkpoint's state", len, &local);
  if (!text)
    g_set_error_literal(error, COHORT_CHECKPOINT_ERROR,
                        g_error_matches(local, G_FILE_ERROR, G_FILE_ERROR_INVAL)
                            ? COHORT_CHECKPOINT_ERROR_CORRUPT
                            : COHORT_CHECKPOINT_ERROR_IO,
                        local->message);
  return text;
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

GPtrArray *cohort_checkpoint_list(const char *ckdir)
{
  g_autoptr(GArray) all = list_complete(ckdir);
  GPtrArray *paths = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; i < all->len; i++)
    g_ptr_array_add(paths, g_strdup(g_array_index(all, Found, i).path));
  return paths;
}

void cohort_checkpoint_run_id(const char *dir, char out[COHORT_RUN_ID_LEN])
{
  CohortTrainState st = {0};
  out[0] = 0;
  if (cohort_checkpoint_read_state(dir, &st, NULL, NULL))
    g_strlcpy(out, st.run_id, COHORT_RUN_ID_LEN);
}

char *cohort_checkpoint_find_latest(const char *workspace)
{
  g_autofree char *ckdir = g_build_filename(workspace, "checkpoints", NULL);
  g_autoptr(GArray) all = list_complete(ckdir);
  if (all->len == 0)
    return NULL;
  return g_strdup(g_array_index(all, Found, all->len - 1).path);
}

guint cohort_checkpoint_count(const char *workspace, char run_id[COHORT_RUN_ID_LEN])
{
  g_autofree char *ckdir = g_build_filename(workspace, "checkpoints", NULL);
  g_autoptr(GArray) all = list_complete(ckdir);
  if (run_id) {
    run_id[0] = 0;
    if (all->len > 0)
      cohort_checkpoint_run_id(g_array_index(all, Found, all->len - 1).path, run_id);
  }
  return all->len;
}

gboolean cohort_checkpoint_read_state(const char *dir, CohortTrainState *st,
                                      CohortConfig **saved_cfg, GError **error)
{
  g_autofree char *state_path = g_build_filename(dir, STATE_FILE, NULL);
  gsize len = 0;
  g_autofree char *text = cohort_checkpoint_read_state_text(state_path, &len, error);
  if (!text)
    return FALSE;
  CohortStateExtras x = {0};
  if (!cohort_state_parse(text, len, state_path, st, &x, error))
    return FALSE;
  gboolean ok = TRUE;
  if (saved_cfg) {
    *saved_cfg = cohort_config_load_data(x.config_json, -1, state_path, error);
    ok = *saved_cfg != NULL;
  }
  cohort_state_extras_clear(&x);
  return ok;
}
