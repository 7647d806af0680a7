/* What every family's distillation shares: settings and rules from the config, the distiller's
 * life cycle, the image families' teacher check, and student_init teacher_layers. */
#include "engine/model/distill.h"

#include <string.h>

#include "engine/base/error.h"
#include "kernels/backend.h"

void cohort_distill_settings_from_config(const CohortConfig *cfg, CohortDistillSettings *out)
{
  *out = (CohortDistillSettings){
      .alpha = cfg->distill_alpha,
      .temperature = cfg->distill_temperature,
      .cfg_scale = cfg->distill_cfg_scale,
  };
}

CohortDistill *cohort_distill_new(CohortModel *student, CohortModel *teacher,
                                  const CohortDistillSettings *settings, GError **error)
{
  const CohortModelClass *k = student->klass;
  if (!k->distill_new || teacher->klass != k || teacher->be != student->be) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "distillation: a %s model cannot learn from a %s model %s", k->name,
                teacher->klass->name,
                teacher->be != student->be ? "on another device" : "in this build");
    return NULL;
  }
  return k->distill_new(student, teacher, settings, error);
}

void cohort_distill_free(CohortDistill *d)
{
  if (d)
    d->ops->free(d);
}

float cohort_distill_forward(CohortDistill *d, const CohortBatch *batch, double *parts)
{
  return d->ops->forward(d, batch, parts);
}

void cohort_distill_backward(CohortDistill *d, float grad_scale)
{
  d->ops->backward(d, grad_scale);
}

gboolean cohort_distill_check_images(const CohortConfig *student, const CohortConfig *teacher,
                                     const char *teacher_dir, GError **error)
{
  const struct {
    const char *key;
    int s, t;
  } same[] = {
      {"image_size", student->image_size, teacher->image_size},
      {"image_channels", student->image_channels, teacher->image_channels},
      {"num_classes", student->num_classes, teacher->num_classes},
  };
  for (guint i = 0; i < G_N_ELEMENTS(same); i++)
    if (same[i].s != same[i].t)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "teacher_from %s: the teacher has %s %d but the student has %d; "
                         "allowed: a teacher of the same %s",
                         teacher_dir, same[i].key, same[i].t, same[i].s, same[i].key);
  return TRUE;
}

/* ---- student_init teacher_layers ---- */

/* The i-th tensor of block `layer`, or NULL. */
static const CohortTensorInfo *block_tensor(const CohortModel *m, int layer, guint i)
{
  guint k = 0;
  for (guint j = 0; j < m->n_tensors; j++)
    if (m->tensors[j].layer == layer && k++ == i)
      return &m->tensors[j];
  return NULL;
}

static gboolean same_shape(const CohortTensorInfo *a, const CohortTensorInfo *b)
{
  if (a->ndim != b->ndim)
    return FALSE;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d])
      return FALSE;
  return TRUE;
}

static char *dims(const CohortTensorInfo *t)
{
  gint64 shape[COHORT_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++)
    shape[d] = t->shape[d];
  return cohort_tensor_dims_string(t->ndim, shape);
}

static gboolean shape_error(const CohortTensorInfo *s, const CohortTensorInfo *t, GError **error)
{
  g_autofree char *ss = dims(s);
  g_autofree char *ts = t ? dims(t) : g_strdup("none");
  return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                     "student_init \"teacher_layers\": the student's tensor \"%s\" has shape %s "
                     "but the teacher's (\"%s\") has %s; allowed: a student of the teacher's "
                     "width (n_embd, patch_size), only shallower",
                     s->name, ss, t ? t->name : s->name, ts);
}

/* The teacher tensor student tensor `s` takes, or NULL with an error. */
static const CohortTensorInfo *source_of(const CohortModel *student, const CohortModel *teacher,
                                         const CohortTensorInfo *s, int ls, int lt, GError **error)
{
  const CohortTensorInfo *t = NULL;
  if (s->layer >= 0 && s->layer < ls) {
    guint i = 0;
    for (const CohortTensorInfo *x = student->tensors; x < s; x++)
      i += x->layer == s->layer;
    t = block_tensor(teacher, (int)((gint64)s->layer * lt / ls), i);
  } else {
    t = cohort_model_find_tensor(teacher, s->name);
  }
  if (!t || !same_shape(s, t)) {
    shape_error(s, t, error);
    return NULL;
  }
  return t;
}

gboolean cohort_distill_copy_teacher_layers(CohortModel *student, int ls,
                                            const CohortModel *teacher, int lt, GError **error)
{
  if (student->klass != teacher->klass || ls > lt || ls < 1)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "student_init \"teacher_layers\": a %s student of %d blocks cannot take "
                       "its blocks from a %s teacher of %d; allowed: a teacher of the same "
                       "family at least as deep",
                       student->klass->name, ls, teacher->klass->name, lt);
  if (!student->klass->copies_blocks)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "student_init \"teacher_layers\": the %s family's blocks change shape "
                       "with depth; allowed: student_init \"random\"",
                       student->klass->name);
  g_autofree float *tbuf = NULL, *sbuf = g_new(float, MAX(student->n_params, 1));
  const float *tp = cohort_model_params_host(teacher, &tbuf);
  cohort_model_download_params(student, sbuf);
  for (guint i = 0; i < student->n_tensors; i++) {
    const CohortTensorInfo *s = &student->tensors[i];
    const CohortTensorInfo *t = source_of(student, teacher, s, ls, lt, error);
    if (!t)
      return FALSE;
    memcpy(sbuf + s->offset, tp + t->offset, s->numel * sizeof(float));
  }
  cohort_model_upload_params(student, sbuf);
  return TRUE;
}
