/* Loading a distillation teacher from a Cohort model folder or a Hugging Face GPT-2 folder. */
#include "engine/train/teacher.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "data/images.h"
#include "engine/base/error.h"
#include "engine/model/hf-weights.h"
#include "engine/model/model-io.h"
#include "engine/model/safetensors.h"
#include "engine/models/gpt-io.h"
#include "engine/models/llama-io.h"
#include "engine/models/registry.h"

void cohort_teacher_free(CohortTeacher *t)
{
  if (!t)
    return;
  cohort_model_free(t->model);
  cohort_config_free(t->cfg);
  g_free(t->dir);
  g_free(t->weights);
  g_free(t->sha256);
  g_free(t);
}

size_t cohort_teacher_bytes(const CohortTeacher *t)
{
  return cohort_model_memory_bytes(t->model);
}

/* classes.json beside an image model: its count resolves num_classes 0, and its names must be
 * the student's data's, in order, or a label would mean another class to the teacher. */
static gboolean resolve_classes(CohortTeacher *t, const char *const *student_classes,
                                GError **error)
{
  g_autofree char *path = g_build_filename(t->dir, "classes.json", NULL);
  if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
    if (t->cfg->num_classes == 0)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "teacher_from %s: classes.json is missing and cohort-config.json has "
                         "num_classes 0, so the teacher's classes are unknown; allowed: the "
                         "folder a run's export wrote",
                         t->dir);
    return TRUE;
  }
  g_auto(GStrv) names = cohort_image_classes_read(path, error);
  if (!names)
    return FALSE;
  int n = (int)g_strv_length(names);
  if (t->cfg->num_classes == 0)
    t->cfg->num_classes = n;
  if (student_classes && !g_strv_equal((const char *const *)names, student_classes)) {
    g_autofree char *a = g_strjoinv(", ", names);
    g_autofree char *b = g_strjoinv(", ", (char **)student_classes);
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: the teacher was trained on the classes [%s] but the student's "
                       "train_data has [%s]; allowed: the same class folders, in the same order",
                       path, a, b);
  }
  return TRUE;
}

/* The teacher's config and weights file from its folder. */
static gboolean read_folder(CohortTeacher *t, const CohortConfig *student,
                            const char *const *student_classes, GError **error)
{
  g_autofree char *cohort_cfg = g_build_filename(t->dir, "cohort-config.json", NULL);
  g_autofree char *hf_cfg = g_build_filename(t->dir, "config.json", NULL);
  g_autofree char *model = g_build_filename(t->dir, "model.safetensors", NULL);
  g_autofree char *ema = g_build_filename(t->dir, "model-ema.safetensors", NULL);
  if (g_file_test(cohort_cfg, G_FILE_TEST_EXISTS)) {
    t->cfg = cohort_config_load_file(cohort_cfg, error);
    if (!t->cfg)
      return FALSE;
    t->ema = g_file_test(ema, G_FILE_TEST_IS_REGULAR);
    t->weights = g_strdup(t->ema ? ema : model);
    g_autofree char *index = g_build_filename(t->dir, COHORT_HF_INDEX_FILE, NULL);
    if (!t->ema && !g_file_test(model, G_FILE_TEST_EXISTS) &&
        g_file_test(index, G_FILE_TEST_IS_REGULAR)) {
      /* an export cut into shards (max_shard_size_mb): read as its family imports them */
      g_free(t->weights);
      t->weights = g_steal_pointer(&index);
      t->hf = TRUE;
    }
    if (t->cfg->data_format == COHORT_DATA_IMAGES && !resolve_classes(t, student_classes, error))
      return FALSE;
  } else if (g_file_test(hf_cfg, G_FILE_TEST_EXISTS)) {
    /* a Hugging Face folder of the student's family: its weights may be shards */
    gboolean llama = g_strcmp0(student->model, "llama") == 0;
    t->cfg = cohort_config_copy(student);
    t->hf = TRUE;
    t->weights = llama ? cohort_llama_import_file(t->dir) : g_strdup(model);
    if (!(llama ? cohort_llama_read_hf_config(hf_cfg, t->cfg, NULL, error)
                : cohort_gpt_read_hf_config(hf_cfg, t->cfg, error)))
      return FALSE;
  } else {
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "teacher_from %s: the folder holds neither cohort-config.json (a Cohort "
                       "model folder, as a run's export leaves it) nor config.json (a Hugging "
                       "Face GPT-2 or Llama-family folder)",
                       t->dir);
  }
  if (!g_file_test(t->weights, G_FILE_TEST_IS_REGULAR))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "teacher_from %s: %s is missing; the teacher needs its weights", t->dir,
                       t->weights);
  return TRUE;
}

/* The EMA weights of an export belong to the same export as model.safetensors: both record
 * the step and run they were written at (cohort.step, cohort.run_id), and a leftover of
 * another export is refused rather than taken silently. */
static gboolean same_export(CohortTeacher *t, GError **error)
{
  g_autofree char *model = g_build_filename(t->dir, "model.safetensors", NULL);
  if (!t->ema || !g_file_test(model, G_FILE_TEST_EXISTS))
    return TRUE;
  g_autoptr(CohortStFile) a = cohort_safetensors_open(model, error);
  g_autoptr(CohortStFile) b = a ? cohort_safetensors_open(t->weights, error) : NULL;
  if (!b)
    return FALSE;
  static const char *const keys[] = {"cohort.step", "cohort.run_id"};
  for (guint i = 0; i < G_N_ELEMENTS(keys); i++) {
    const char *x = cohort_safetensors_metadata(a, keys[i]);
    const char *y = cohort_safetensors_metadata(b, keys[i]);
    if (g_strcmp0(x, y) != 0)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "teacher_from %s: %s records %s %s but %s records %s %s: they are not "
                         "one export (a leftover of an earlier run?); allowed: the files one "
                         "export wrote (export again, or remove the stale file)",
                         t->dir, t->weights, keys[i], y ? y : "(none)", model, keys[i],
                         x ? x : "(none)");
  }
  return TRUE;
}

/* The family and the family's rules; the model itself, frozen, with its weights. */
static gboolean make_model(CohortTeacher *t, const CohortBackend *be, const CohortConfig *student,
                           int max_batch, GError **error)
{
  const CohortModelClass *k = cohort_model_class_find(student->model);
  if (g_strcmp0(t->cfg->model, student->model) != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "teacher_from %s: the teacher is a \"%s\" model but the student is "
                       "\"%s\"; allowed: a teacher of the student's family",
                       t->dir, t->cfg->model, student->model);
  if (k && k->check_teacher && !k->check_teacher(student, t->cfg, t->dir, error))
    return FALSE;
  g_autoptr(GError) local = NULL;
  t->model = cohort_model_new_frozen(be, t->cfg, max_batch, &local);
  if (!t->model)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "teacher_from %s: %s", t->dir, local->message);
  gboolean loaded = t->hf ? cohort_model_import(t->model, t->weights, NULL, error)
                          : cohort_model_load(t->model, t->weights, error);
  return loaded && cohort_model_check_finite(t->model, t->weights, error);
}

CohortTeacher *cohort_teacher_load(const CohortBackend *be, const CohortConfig *student_cfg,
                                   const char *const *student_classes, int max_batch,
                                   GError **error)
{
  g_autoptr(CohortTeacher) t = g_new0(CohortTeacher, 1);
  t->dir = cohort_resolve_path(student_cfg->teacher_from);
  if (!g_file_test(t->dir, G_FILE_TEST_IS_DIR)) {
    cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "teacher_from \"%s\": %s; allowed: a folder with a model",
                student_cfg->teacher_from,
                g_file_test(t->dir, G_FILE_TEST_EXISTS) ? "not a folder" : "no such folder");
    return NULL;
  }
  if (!read_folder(t, student_cfg, student_classes, error) || !same_export(t, error) ||
      !make_model(t, be, student_cfg, max_batch, error))
    return NULL;
  t->sha256 = cohort_file_sha256(t->weights, error);
  if (!t->sha256)
    return NULL;
  return g_steal_pointer(&t);
}
