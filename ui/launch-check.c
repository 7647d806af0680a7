#include "ui/launch-check.h"

#include <glib/gi18n.h>
#include <glib/gstdio.h>
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

/* Why the data at `value` cannot be read in `format`, or NULL. */
static char *data_problem(const char *value, CohortDataFormat format)
{
  g_autofree char *path = cohort_resolve_path(value);
  GStatBuf st;
  if (g_stat(path, &st) != 0)
    return g_strdup_printf(_("“%s” does not exist"), value);
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

static void check_model_file(GPtrArray *out, const CohortConfig *cfg, const char *key)
{
  g_autofree char *value = cohort_config_get(cfg, key);
  if (value == NULL || *value == '\0')
    return;
  g_autofree char *path = cohort_resolve_path(value);
  if (!g_file_test(path, G_FILE_TEST_EXISTS))
    add(out, key, g_strdup_printf(_("“%s” does not exist"), value));
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

GPtrArray *cohort_launch_check(const CohortConfig *cfg, int gpus)
{
  GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)cohort_launch_problem_free);
  char *why = data_problem(cfg->train_data, cfg->data_format);
  if (why != NULL)
    add(out, "train_data", why);
  if (cfg->val_data != NULL && *cfg->val_data != '\0' &&
      (why = data_problem(cfg->val_data, cfg->data_format)) != NULL)
    add(out, "val_data", why);
  check_model_file(out, cfg, "init_from");
  check_model_file(out, cfg, "teacher_from");
  check_model_file(out, cfg, "vae_from");
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  if (g_file_test(ws, G_FILE_TEST_EXISTS) && !g_file_test(ws, G_FILE_TEST_IS_DIR))
    add(out, "workspace_dir",
        g_strdup_printf(_("“%s” is a file; the workspace must be a folder"), cfg->workspace_dir));
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
