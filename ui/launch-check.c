#include "ui/launch-check.h"

#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <glob.h>
#include <string.h>

#include "cohort-build-config.h"
#include "engine/config/finetune-rules.h"
#include "ui/key-messages.h"

void cohort_launch_problem_free(CohortLaunchProblem *p)
{
  if (p == NULL)
    return;
  g_free(p->key);
  g_free(p->message);
  g_free(p);
}

static void add(GPtrArray *out, const char *key, char *why)
{
  CohortLaunchProblem *p = g_new0(CohortLaunchProblem, 1);
  p->key = g_strdup(key);
  /* TRANSLATORS: a setting's label, then what is wrong with it. */
  p->message = g_strdup_printf(_("%s: %s"), cohort_key_display_name(key), why);
  g_ptr_array_add(out, p);
  g_free(why);
}

static gboolean is_image_name(const char *name)
{
  g_autofree char *lower = g_ascii_strdown(name, -1);
  return g_str_has_suffix(lower, ".png") || g_str_has_suffix(lower, ".jpg") ||
         g_str_has_suffix(lower, ".jpeg");
}

/* Whether folder `dir` holds a file named with `suffix` (images: an image file), directly or
 * (images) one level down, in a class folder. Stops at the first. */
static gboolean folder_has(const char *dir, const char *suffix, int depth)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  const char *name;
  while (d != NULL && (name = g_dir_read_name(d)) != NULL) {
    if (name[0] == '.')
      continue;
    g_autofree char *full = g_build_filename(dir, name, NULL);
    if (g_file_test(full, G_FILE_TEST_IS_DIR)) {
      if (depth > 0 && folder_has(full, suffix, depth - 1))
        return TRUE;
    } else if (suffix != NULL ? g_str_has_suffix(name, suffix) : is_image_name(name)) {
      return TRUE;
    }
  }
  return FALSE;
}

/* Whether `path` (resolved) is a glob pattern that matches a file, as the data readers take it
 * when nothing has the path's own name (data/file-list.h). */
static gboolean pattern_matches(const char *path)
{
  if (strpbrk(path, "*?[") == NULL)
    return FALSE;
  glob_t g;
  gboolean found = glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0;
  globfree(&g);
  return found;
}

/* Why the data at `value` cannot be read in `format`, or NULL. */
static char *data_problem(const char *value, CohortDataFormat format)
{
  g_autofree char *path = cohort_resolve_path(value);
  GStatBuf st;
  if (g_stat(path, &st) != 0) {
    if (pattern_matches(path))
      return NULL;
    return g_strdup_printf(_("“%s” does not exist"), value);
  }
  gboolean dir = S_ISDIR(st.st_mode);
  if (format == COHORT_DATA_IMAGES) {
    if (!dir)
      return g_strdup_printf(_("“%s” is not a folder; images are read from a folder of class "
                               "folders"),
                             value);
    if (!folder_has(path, NULL, 1))
      return g_strdup_printf(_("the folder “%s” holds no PNG or JPEG images"), value);
    return NULL;
  }
  /* Text is .txt files and .jsonl files (a document per line). */
  if (dir && format == COHORT_DATA_TEXT)
    return folder_has(path, ".txt", 0) || folder_has(path, ".jsonl", 0)
               ? NULL
               : g_strdup_printf(_("the folder “%s” holds no .txt or .jsonl files"), value);
  if (dir && format == COHORT_DATA_CHAT)
    return folder_has(path, ".jsonl", 0)
               ? NULL
               : g_strdup_printf(_("the folder “%s” holds no %s files"), value, ".jsonl");
  if (dir)
    return folder_has(path, ".bin", 0)
               ? NULL
               : g_strdup_printf(_("the folder “%s” holds no %s files"), value, ".bin");
  if (!S_ISREG(st.st_mode))
    return g_strdup_printf(_("“%s” is not a file or folder"), value);
  if (st.st_size == 0)
    return g_strdup_printf(_("“%s” is empty"), value);
  return NULL;
}

/* What folder `dir` lacks of `holds` (CohortKeyPath.holds: "a|b+c"), in words, or NULL when it
 * holds one of the alternatives whole. */
static char *folder_lacks(const char *dir, const char *holds)
{
  g_auto(GStrv) alternatives = g_strsplit(holds, "|", -1);
  g_autoptr(GPtrArray) said = g_ptr_array_new_with_free_func(g_free);
  for (guint a = 0; alternatives[a] != NULL; a++) {
    g_auto(GStrv) files = g_strsplit(alternatives[a], "+", -1);
    g_autoptr(GPtrArray) missing = g_ptr_array_new();
    for (guint f = 0; files[f] != NULL; f++) {
      g_autofree char *full = g_build_filename(dir, files[f], NULL);
      if (!g_file_test(full, G_FILE_TEST_IS_REGULAR))
        g_ptr_array_add(missing, files[f]);
    }
    if (missing->len == 0)
      return NULL;
    /* One way to be complete: the files it lacks; several: each way whole. */
    g_ptr_array_add(missing, NULL);
    g_ptr_array_add(said, alternatives[1] == NULL ? g_strjoinv(", ", (char **)missing->pdata)
                                                  : g_strjoinv(" + ", files));
  }
  g_ptr_array_add(said, NULL);
  /* TRANSLATORS: put between the ways a folder can be complete: "config.json or
   * vae/config.json". */
  return g_strjoinv(_(" or "), (char **)said->pdata);
}

/* Why the value of path key `key` will not do, or NULL: what CohortKeyPath says it names. */
static char *path_problem(const CohortConfigKey *key, const char *value, const CohortConfig *cfg)
{
  const CohortKeyPath *p = key->path;
  if (*value == '\0' || g_strcmp0(value, p->word) == 0)
    return NULL;
  if (p->kind == COHORT_PATH_DATA)
    return data_problem(value, cfg->data_format);
  g_autofree char *path = cohort_resolve_path(value);
  GStatBuf st;
  if (g_stat(path, &st) != 0)
    return p->kind == COHORT_PATH_OUTPUT ? NULL /* made when missing */
                                         : g_strdup_printf(_("“%s” does not exist"), value);
  gboolean dir = S_ISDIR(st.st_mode), file = S_ISREG(st.st_mode);
  gboolean wants_dir = p->kind != COHORT_PATH_FILE;
  if (!dir && !file)
    return g_strdup_printf(_("“%s” is not a file or folder"), value);
  if (dir != wants_dir && !p->or_other)
    return g_strdup_printf(wants_dir ? _("“%s” is a file; a folder is needed here")
                                     : _("“%s” is a folder; a file is needed here"),
                           value);
  g_autofree char *lacks = dir && p->holds != NULL ? folder_lacks(path, p->holds) : NULL;
  if (lacks != NULL)
    /* TRANSLATORS: a folder, then the files it should hold ("adapter_model.safetensors"). */
    return g_strdup_printf(_("the folder “%s” has no %s"), value, lacks);
  return NULL;
}

GPtrArray *cohort_launch_check_paths(const CohortConfig *cfg)
{
  GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)cohort_launch_problem_free);
  guint n = 0;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    if (keys[i].path == NULL || !cohort_config_key_in_effect(&keys[i], cfg))
      continue;
    g_autofree char *value = cohort_config_get(cfg, keys[i].name);
    char *why = path_problem(&keys[i], value != NULL ? value : "", cfg);
    if (why != NULL)
      add(out, keys[i].name, why);
  }
  return out;
}

char *cohort_launch_paths_read(const CohortConfig *cfg)
{
  GString *s = g_string_new(NULL);
  g_string_append_printf(s, "%d", cfg->data_format);
  guint n = 0;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    if (keys[i].path == NULL)
      continue;
    g_autofree char *value = cohort_config_get(cfg, keys[i].name);
    /* a key out of effect is not checked, whatever it holds */
    g_string_append_printf(s, "\n%s=%s", keys[i].name,
                           cohort_config_key_in_effect(&keys[i], cfg) ? value : "\x01");
  }
  return g_string_free(s, FALSE);
}

/* What frozen_dtype bf16 cannot run with (the engine's own refusal, in the window's words). */
static char *frozen_dtype_problem(const CohortConfig *cfg)
{
  switch (cohort_frozen_dtype_conflict(cfg)) {
  case COHORT_FROZEN_DTYPE_NOTHING_FROZEN:
    return g_strdup(_("bf16 stores the frozen base, and with full fine-tuning nothing is "
                      "frozen; choose LoRA or frozen, or fp32"));
  case COHORT_FROZEN_DTYPE_PRECISION:
    return g_strdup(_("bf16 needs bf16 precision; choose it, or fp32"));
  case COHORT_FROZEN_DTYPE_ZERO:
    return g_strdup(_("bf16 does not run with ZeRO stage 2 or 3 yet; choose stage 0 or 1, "
                      "or fp32"));
  case COHORT_FROZEN_DTYPE_EMA:
    return g_strdup(_("bf16 does not run with an EMA of the weights yet; set the EMA decay to "
                      "0, or choose fp32"));
  case COHORT_FROZEN_DTYPE_TEACHER_LAYERS:
    return g_strdup(_("bf16 does not run with a student initialised from the teacher's "
                      "layers; choose random initialisation, or fp32"));
  case COHORT_FROZEN_DTYPE_OK:
    break;
  }
  return NULL;
}

GPtrArray *cohort_launch_check_rules(const CohortConfig *cfg, int gpus)
{
  GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)cohort_launch_problem_free);
  if (cfg->device == COHORT_DEVICE_CUDA && !COHORT_HAVE_CUDA)
    add(out, "device", g_strdup(_("this build has no CUDA path; choose CPU or automatic")));
  else if (gpus == 0 && cfg->device == COHORT_DEVICE_CUDA)
    add(out, "device",
        g_strdup(_("CUDA needs an NVIDIA GPU and none was found on this machine; "
                   "choose CPU or automatic")));
  char *frozen = frozen_dtype_problem(cfg);
  if (frozen != NULL)
    add(out, "frozen_dtype", frozen);
  if (gpus == 0 && cfg->enable_multi_gpu && cfg->distributed_backend == COHORT_BACKEND_NCCL)
    add(out, "distributed_backend",
        g_strdup(_("NCCL needs NVIDIA GPUs and none was found on this machine; choose Gloo")));
  return out;
}

GPtrArray *cohort_launch_check(const CohortConfig *cfg, int gpus)
{
  GPtrArray *out = cohort_launch_check_paths(cfg);
  g_autoptr(GPtrArray) rules = cohort_launch_check_rules(cfg, gpus);
  g_ptr_array_extend_and_steal(out, g_steal_pointer(&rules));
  return out;
}
