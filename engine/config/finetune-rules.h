/* The rules that tie the fine-tuning keys to others, from the config alone: the engine refuses
 * a run that breaks one (engine/model/finetune.h cohort_finetune_check_config), and the window
 * keeps Start off with the same reason, in its own words (ui/launch-check.c). */
#pragma once

#include "engine/config/config.h"

G_BEGIN_DECLS

/* Why `frozen_dtype: bf16` cannot run with the rest of the config, or OK (also for fp32). */
typedef enum {
  COHORT_FROZEN_DTYPE_OK,
  COHORT_FROZEN_DTYPE_NOTHING_FROZEN, /* finetune full */
  COHORT_FROZEN_DTYPE_PRECISION,      /* precision other than bf16 */
  COHORT_FROZEN_DTYPE_ZERO,           /* zero_stage 2 or 3 */
  COHORT_FROZEN_DTYPE_EMA,            /* ema_decay > 0 */
  COHORT_FROZEN_DTYPE_TEACHER_LAYERS, /* student_init teacher_layers */
} CohortFrozenDtypeConflict;

/* The first rule `cfg`'s frozen_dtype breaks, in the order above. */
CohortFrozenDtypeConflict cohort_frozen_dtype_conflict(const CohortConfig *cfg);

G_END_DECLS
