/* The teacher of a distillation run (teacher_from), loaded on every rank, frozen.
 *
 * teacher_from names a folder, either
 *  - a Cohort model folder: what a run's export leaves in its workspace (model.safetensors,
 *    cohort-config.json, and classes.json for image models), or any folder with those files.
 *    When model-ema.safetensors is there too, the teacher uses those weights: the EMA of a run
 *    is the smoother, usually better model, and the one its evaluations and samples used;
 *  - a Hugging Face GPT-2 folder: config.json (GPT2Config) and model.safetensors.
 * The teacher may differ from the student in depth and width; the family's check_teacher says
 * what must be equal (vocabulary; image size, channels and classes), and for image models the
 * classes must have the same names in the same order as the student's data. */
#pragma once

#include "engine/base/fileio.h" /* cohort_file_sha256 */
#include "engine/model/model.h"

G_BEGIN_DECLS

typedef struct {
  CohortModel *model; /* frozen (cohort_model_new_frozen): no gradients, forward only */
  CohortConfig *cfg;  /* the teacher's own config (shape keys), num_classes resolved */
  char *dir;          /* the folder, teacher_from resolved */
  char *weights;      /* the file the weights came from */
  char *sha256;       /* lowercase hex digest of that file */
  gboolean ema;       /* the weights are model-ema.safetensors */
  gboolean hf;        /* a Hugging Face GPT-2 folder */
} CohortTeacher;

/* Loads student_cfg->teacher_from on backend `be` for micro-batches of up to max_batch.
 * `student_classes` (NULL-terminated, may be NULL) are the class names of the student's data,
 * which the teacher's classes.json must equal. Errors are one line naming the folder or file,
 * the field, both values and what is allowed: a missing folder or file, another family, a
 * vocabulary, image shape or class list that differs, weights that do not fit the config or
 * hold a NaN. */
CohortTeacher *cohort_teacher_load(const CohortBackend *be, const CohortConfig *student_cfg,
                                   const char *const *student_classes, int max_batch,
                                   GError **error);
void cohort_teacher_free(CohortTeacher *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTeacher, cohort_teacher_free)

/* Backend bytes the teacher holds: weights, buffers and activations (no gradients, no
 * optimizer state). */
size_t cohort_teacher_bytes(const CohortTeacher *t);

G_END_DECLS
