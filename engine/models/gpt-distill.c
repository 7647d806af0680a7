/* What a GPT teacher must share with its student: the vocabulary, and a context at least as
 * long as the windows the student trains on (the teacher runs on the same windows). Depth,
 * width and heads may differ. The distillation itself is the logits families' one
 * (engine/model/distill-logits.c). */
#include "engine/models/gpt.h"

gboolean cohort_gpt_check_teacher(const CohortConfig *student, const CohortConfig *teacher,
                                  const char *teacher_dir, GError **error)
{
  if (teacher->vocab_size != student->vocab_size) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "teacher_from %s: the teacher has vocab_size %d but the student has %d; allowed: "
                "a teacher of the same vocabulary",
                teacher_dir, teacher->vocab_size, student->vocab_size);
    return FALSE;
  }
  if (teacher->seq_len < student->seq_len) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "teacher_from %s: the teacher has seq_len %d, shorter than the student's %d; "
                "allowed: a student seq_len of at most %d",
                teacher_dir, teacher->seq_len, student->seq_len, teacher->seq_len);
    return FALSE;
  }
  return TRUE;
}
