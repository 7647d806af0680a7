/* Where the engine programs are and how the window launches them.
 *
 * A program NAME ("cohort-train", "cohort-run") is looked up, in order: the environment
 * variable (COHORT_TRAIN_PROGRAM, COHORT_RUN_PROGRAM), the folder of the running program (an
 * installed `cohort` sits next to them in bindir), the build tree's engine/cli/ when the
 * running program is in the build tree, then PATH. */
#pragma once

#include <glib.h>

#include "engine/config.h"

G_BEGIN_DECLS

#define COHORT_UI_ERROR (cohort_ui_error_quark())
GQuark cohort_ui_error_quark(void);
typedef enum {
  COHORT_UI_ERROR_NOT_FOUND, /* an engine program could not be found */
  COHORT_UI_ERROR_FAILED,
} CohortUiError;

/* The full path of `name`, or NULL with an error that says where it was looked for. */
char *cohort_ui_find_program(const char *name, GError **error);

/* Processes this node starts: nproc_per_node when set, else the number of device_indexes,
 * else world_size / num_nodes when world_size is set, else the detected GPUs (at least 1).
 * 1 when multi-GPU is off. */
int cohort_ui_local_processes(const CohortConfig *cfg, int detected_gpus);

/* The world size the run will have: world_size when set, else local processes × nodes. */
int cohort_ui_world_size(const CohortConfig *cfg, int detected_gpus);

/* The command line that trains `config_path` on this node with progress on fd 3:
 *   cohort-train --config F --progress-fd 3                 (one process)
 *   cohort-train --config F --progress-fd 3 --nproc N       (spawn mode)
 *   cohort-run --nproc-per-node N --standalone --progress-fd 3 TRAIN --config F
 *                                                          (torchrun style, one node)
 *   cohort-run --nnodes K --node-rank R --master-addr A --master-port P … (several nodes) */
GStrv cohort_ui_launch_argv(const CohortConfig *cfg, const char *config_path, int detected_gpus,
                            GError **error);

G_END_DECLS
