/* Checks before Start: what would make a run fail seconds after it started that the config's
 * own validation (which never looks at the disk or the machine) cannot see. The window keeps
 * Start disabled while any problem stands, shows each on its field and the first in the
 * status line. Messages name keys by their labels. The launch plan's refusals join here. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

typedef struct {
  char *key;     /* the config key the problem belongs to */
  char *message; /* translated, "<label>: …" */
} CohortLaunchProblem;

void cohort_launch_problem_free(CohortLaunchProblem *problem);

/* The problems of `cfg` on this machine, data first (an empty array when it can
 * start): a data path (train_data, val_data) that does not exist or holds no data in the
 * config's format, an initial or teacher model (init_from, teacher_from) that does not exist,
 * a workspace_dir that is not a folder, device cuda in a build without CUDA, a frozen_dtype
 * bf16 the engine would refuse with the other keys (engine/config/finetune-rules.h) or on
 * device cuda, and, when `gpus`
 * is known (>= 0, -1 while detection runs), NCCL between several processes or device cuda
 * without a GPU. Cheap enough for every
 * edit: it reads file metadata and stops at the first data file a folder holds. Relative paths
 * are taken from the current folder, as the engine does. */
GPtrArray *cohort_launch_check(const CohortConfig *cfg, int gpus);

G_END_DECLS
