/* Rules across the fine-tuning keys (see finetune-rules.h). */
#include "engine/config/finetune-rules.h"

CohortFrozenDtypeConflict cohort_frozen_dtype_conflict(const CohortConfig *cfg)
{
  if (cfg->frozen_dtype != COHORT_FROZEN_BF16)
    return COHORT_FROZEN_DTYPE_OK;
  if (cfg->finetune == COHORT_FINETUNE_FULL)
    return COHORT_FROZEN_DTYPE_NOTHING_FROZEN;
  if (cfg->precision != COHORT_PRECISION_BF16)
    return COHORT_FROZEN_DTYPE_PRECISION;
  /* stage 3 brings layers in through the same layer hook; not combined in this version */
  if (cfg->zero_stage > 1)
    return COHORT_FROZEN_DTYPE_ZERO;
  /* the EMA copy holds the whole parameter vector in fp32 */
  if (cfg->ema_decay > 0)
    return COHORT_FROZEN_DTYPE_EMA;
  /* those runs save whole-model checkpoints, which read the base outside its layers */
  if (cfg->student_init == COHORT_STUDENT_INIT_TEACHER_LAYERS)
    return COHORT_FROZEN_DTYPE_TEACHER_LAYERS;
  return COHORT_FROZEN_DTYPE_OK;
}
