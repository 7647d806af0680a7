/* Velocity distillation of the DiT family: the student regresses the teacher's velocity at the
 * very (x_t, t, label) it sees — label dropout included, so a dropped label asks for the
 * teacher's unconditional velocity — mixed with the ground-truth flow target:
 *   loss = alpha · mean_b MSE(v_student, v_teacher) + (1 − alpha) · mean_b MSE(v_student, ε − x₀)
 * With distill_cfg_scale w ≠ 1 the teacher's velocity is the guided one,
 * v_u + w (v_c − v_u), which distils classifier-free guidance into a single pass. Both terms are
 * linear in their targets, so backward is one MSE against α v_teacher + (1 − α)(ε − x₀). */
#include "engine/model/distill.h"
#include "engine/models/dit-private.h"

#include <string.h>

#include <math.h>

typedef struct {
  CohortDistill base;
  float *v_teacher; /* [max_batch, D] backend: the teacher's (guided) velocity */
  float *mix;       /* [max_batch, D] backend: backward's target */
  int *null_labels; /* [max_batch] host: every label "no label" */
  int last_B;
} DitDistill;

static size_t image_floats(const Dit *d)
{
  return (size_t)d->shape.channels * d->shape.image_size * d->shape.image_size;
}

/* The mean over the batch of the per-example MSE of the student's last prediction to `target`
 * (backend memory). */
static double mean_mse(Dit *s, const float *target, int B)
{
  const CohortBackend *be = s->base.be;
  be->mse_forward(s->acts.losses, s->acts.pred, target, B, (int)image_floats(s));
  be->download(s->host_losses, s->acts.losses, (size_t)B * sizeof(float));
  double sum = 0;
  for (int i = 0; i < B; i++)
    sum += s->host_losses[i];
  return sum / B;
}

float cohort_dit_distill_forward_given(CohortDistill *base, const float *x_t, const float *t,
                                       const int *labels, const float *target, int B, double *parts)
{
  DitDistill *dd = (DitDistill *)base;
  Dit *s = dit_of(base->student), *te = dit_of(base->teacher);
  const CohortBackend *be = s->base.be;
  g_return_val_if_fail(B >= 1 && B <= base->student->max_batch, NAN);
  size_t n = (size_t)B * image_floats(s);
  double w = base->settings.cfg_scale, a = base->settings.alpha;

  cohort_dit_run(te, x_t, t, labels, B);
  be->copy(dd->v_teacher, te->acts.pred, n * sizeof(float));
  if (w != 1.0) {
    cohort_dit_run(te, x_t, t, dd->null_labels, B);
    be->axpby(dd->v_teacher, (float)w, dd->v_teacher, (float)(1.0 - w), te->acts.pred, n);
  }
  te->have_targets = FALSE;

  parts[COHORT_DISTILL_PART_TASK] =
      cohort_dit_forward_given(base->student, x_t, t, labels, target, B);
  parts[COHORT_DISTILL_PART_TEACHER] = mean_mse(s, dd->v_teacher, B);
  dd->last_B = B;
  return (float)(a * parts[COHORT_DISTILL_PART_TEACHER] +
                 (1 - a) * parts[COHORT_DISTILL_PART_TASK]);
}

static float dit_distill_forward(CohortDistill *base, const CohortBatch *batch, double *parts)
{
  Dit *s = dit_of(base->student);
  g_return_val_if_fail(batch->B >= 1 && batch->B <= base->student->max_batch, NAN);
  cohort_dit_prepare(s, batch);
  return cohort_dit_distill_forward_given(base, s->host_img, s->host_t, s->host_labels,
                                          s->host_target, batch->B, parts);
}

static void dit_distill_backward(CohortDistill *base, float grad_scale)
{
  DitDistill *dd = (DitDistill *)base;
  Dit *s = dit_of(base->student);
  const CohortBackend *be = s->base.be;
  int B = dd->last_B;
  g_return_if_fail(B > 0 && s->have_targets);
  size_t D = image_floats(s);
  float a = (float)base->settings.alpha;
  be->axpby(dd->mix, a, dd->v_teacher, 1.0f - a, s->acts.target, (size_t)B * D);
  be->mse_backward(s->acts.dimg, s->acts.pred, dd->mix, B, (int)D, grad_scale / (float)B);
  cohort_dit_net_backward(s, B);
}

static void dit_distill_free(CohortDistill *base)
{
  DitDistill *dd = (DitDistill *)base;
  const CohortBackend *be = base->student->be;
  be->free(dd->v_teacher);
  be->free(dd->mix);
  g_free(dd->null_labels);
  g_free(dd);
}

static const CohortDistillOps dit_distill_ops = {
    .forward = dit_distill_forward,
    .backward = dit_distill_backward,
    .free = dit_distill_free,
};

CohortDistill *cohort_dit_distill_new(CohortModel *student, CohortModel *teacher,
                                      const CohortDistillSettings *settings, GError **error)
{
  Dit *s = dit_of(student), *te = dit_of(teacher);
  if (image_floats(s) != image_floats(te) || s->shape.num_classes != te->shape.num_classes ||
      teacher->max_batch < student->max_batch) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "distillation: the DiT teacher (%d×%d×%d images, %d classes, batch %d) does not "
                "fit the student (%d×%d×%d, %d classes, batch %d)",
                te->shape.channels, te->shape.image_size, te->shape.image_size,
                te->shape.num_classes, teacher->max_batch, s->shape.channels, s->shape.image_size,
                s->shape.image_size, s->shape.num_classes, student->max_batch);
    return NULL;
  }
  DitDistill *dd = g_new0(DitDistill, 1);
  dd->base = (CohortDistill){
      .ops = &dit_distill_ops, .student = student, .teacher = teacher, .settings = *settings};
  size_t bytes = (size_t)student->max_batch * image_floats(s) * sizeof(float);
  dd->v_teacher = student->be->alloc(bytes);
  dd->mix = student->be->alloc(bytes);
  dd->null_labels = g_new(int, student->max_batch);
  for (int i = 0; i < student->max_batch; i++)
    dd->null_labels[i] = s->shape.num_classes;
  if (!dd->v_teacher || !dd->mix) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "distillation: out of %s memory for the teacher's velocities (%.1f MiB)",
                student->be->name, 2 * bytes / 1048576.0);
    dit_distill_free(&dd->base);
    return NULL;
  }
  return &dd->base;
}

gboolean cohort_dit_check_teacher(const CohortConfig *student, const CohortConfig *teacher,
                                  const char *teacher_dir, GError **error)
{
  if (!cohort_distill_check_images(student, teacher, teacher_dir, error))
    return FALSE;
  /* Latents of another VAE (or pixels against latents) mean other inputs altogether. */
  g_autofree char *sv = cohort_resolve_path(student->vae_from ? student->vae_from : "");
  g_autofree char *tv = cohort_resolve_path(teacher->vae_from ? teacher->vae_from : "");
  g_autofree char *sa = *sv ? g_canonicalize_filename(sv, NULL) : g_strdup("");
  g_autofree char *ta = *tv ? g_canonicalize_filename(tv, NULL) : g_strdup("");
  if (strcmp(sa, ta) != 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "teacher_from %s: key \"vae_from\": the teacher was trained on \"%s\", the "
                "student on \"%s\"; allowed: the same VAE (or both in pixel space)",
                teacher_dir, teacher->vae_from ? teacher->vae_from : "",
                student->vae_from ? student->vae_from : "");
    return FALSE;
  }
  /* Guidance needs an unconditional velocity, which only label dropout teaches. */
  if (student->distill_cfg_scale != 1.0 &&
      (teacher->cfg_dropout <= 0 || teacher->num_classes == 0)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "teacher_from %s: key \"distill_cfg_scale\": %g needs a teacher trained with "
                "label dropout on classes, but the teacher has cfg_dropout %g and %d classes; "
                "allowed: distill_cfg_scale 1",
                teacher_dir, student->distill_cfg_scale, teacher->cfg_dropout,
                teacher->num_classes);
    return FALSE;
  }
  return TRUE;
}
