/* Knowledge distillation: a student trains on its own micro-batch against a frozen teacher's
 * outputs on that same micro-batch, mixed with its ordinary task loss:
 *
 *   loss = alpha · teacher term + (1 − alpha) · task term
 *
 *  - logits families (GPT, classifiers): teacher term = tau² · KL(softmax(teacher / tau) ‖
 *    softmax(student / tau)), averaged over the rows of logits (positions, images); task term
 *    = cross-entropy with the labels (engine/model/distill-logits.c, kernels kl_div_*);
 *  - dit (flow matching): teacher term = mean squared error between the student's velocity
 *    and the teacher's at the same (x_t, t, label), optionally the teacher's classifier-free-
 *    guided velocity; task term = the ordinary flow-matching loss (models/dit-distill.c).
 *
 * Both terms are row-wise means over the micro-batch, so N ranks distilling their own
 * micro-batches compute what one process computes on the combined batch. The teacher is a
 * frozen model (cohort_model_new_frozen: no gradients), run in evaluation mode, never
 * optimised or saved. Loading it is engine/train/teacher.h. */
#pragma once

#include "engine/model/model.h"

G_BEGIN_DECLS

/* The parts of a distillation loss, as forward reports them. */
enum {
  COHORT_DISTILL_PART_TEACHER, /* the teacher term, unweighted (tau² · KL, or the velocity MSE) */
  COHORT_DISTILL_PART_TASK,    /* the task term, unweighted (cross-entropy, flow-matching MSE) */
  COHORT_DISTILL_N_PARTS
};

typedef struct {
  /* Runs the student's TRAIN forward and the teacher's EVAL forward on the same batch (for
   * dit: the same x_t, t and labels), keeping what backward needs. Returns the mixed loss and
   * fills parts[COHORT_DISTILL_N_PARTS]. */
  float (*forward)(CohortDistill *d, const CohortBatch *batch, double *parts);
  /* ADDS d(mixed loss · grad_scale)/d(student params) into the student's gradients, calling
   * its grad-ready hook as ranges become final. After forward only. */
  void (*backward)(CohortDistill *d, float grad_scale);
  /* Frees the family's distiller (not the models). */
  void (*free)(CohortDistill *d);
} CohortDistillOps;

/* The base of every family's distiller; the models are not owned. */
struct CohortDistill {
  const CohortDistillOps *ops;
  CohortModel *student;
  CohortModel *teacher;
  CohortDistillSettings settings;
};

/* The settings the config's distill_* keys give. */
void cohort_distill_settings_from_config(const CohortConfig *cfg, CohortDistillSettings *out);

/* The distiller of `student` from `teacher` (same family, same backend): the family's
 * distill_new. An error names the family when it has none. */
CohortDistill *cohort_distill_new(CohortModel *student, CohortModel *teacher,
                                  const CohortDistillSettings *settings, GError **error);
void cohort_distill_free(CohortDistill *d);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortDistill, cohort_distill_free)

/* d->ops->forward and d->ops->backward. */
float cohort_distill_forward(CohortDistill *d, const CohortBatch *batch, double *parts);
void cohort_distill_backward(CohortDistill *d, float grad_scale);

/* The distiller of every logits family: the family provides ops->logits and
 * ops->backward_logits (engine/model/model.h). The teacher's logits come from its EVAL forward on
 * the same batch; rows and classes of both must agree. */
CohortDistill *cohort_logits_distill_new(CohortModel *student, CohortModel *teacher,
                                         const CohortDistillSettings *settings, GError **error);

/* student_init teacher_layers: with the depths (n_layer) L_s of the student and L_t of the
 * teacher, the student's block l takes the weights of the teacher's block floor(l · L_t / L_s)
 * (every k-th block when the depths divide), and every tensor outside the blocks (embeddings,
 * final norm, head) the teacher's tensor of the same name. A block is the tensors whose table
 * `layer` is l, matched in table order. The student needs the teacher's width: a tensor whose
 * shapes differ is an error naming it and both shapes; a deeper student than its teacher, or a
 * family whose class does not copies_blocks, is an error too. Buffers stay as init_weights
 * made them. Nothing changes on error. */
gboolean cohort_distill_copy_teacher_layers(CohortModel *student, int student_layers,
                                            const CohortModel *teacher, int teacher_layers,
                                            GError **error);

/* A check_teacher for image families: image_size, image_channels and num_classes (resolved,
 * not 0) must be equal. */
gboolean cohort_distill_check_images(const CohortConfig *student, const CohortConfig *teacher,
                                     const char *teacher_dir, GError **error);

G_END_DECLS
