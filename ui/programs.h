/* Where the engine programs are and how the window launches them.
 *
 * A program NAME ("cohort-train", "cohort-run") is looked up, in order: the environment
 * variable (COHORT_TRAIN_PROGRAM, COHORT_RUN_PROGRAM), the folder of the running program (an
 * installed `cohort` sits next to them in bindir), the build tree's engine/cli/ when the
 * running program is in the build tree, then PATH. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"
#include "engine/launch/launch-plan.h"

G_BEGIN_DECLS

#define COHORT_UI_ERROR (cohort_ui_error_quark())
GQuark cohort_ui_error_quark(void);
typedef enum {
  COHORT_UI_ERROR_NOT_FOUND, /* an engine program could not be found */
  COHORT_UI_ERROR_FAILED,
} CohortUiError;

/* The full path of `name`, or NULL with an error that says where it was looked for. */
char *cohort_ui_find_program(const char *name, GError **error);

/* The path a command line should give for `name`: absolute (cohort_ui_find_program) when the
 * window runs from a build tree or $COHORT_TRAIN_PROGRAM / $COHORT_RUN_PROGRAM names it, since
 * nothing there is on PATH; the bare name when the window is installed (the programs are on
 * every node's PATH). */
char *cohort_ui_command_program(const char *name);

/* The launch plan of `cfg` on this machine with `detected_gpus` GPUs (engine/launch/launch-plan.h):
 * what the summary shows and Start runs. NULL with the plan's error when it cannot run. */
CohortLaunchPlan *cohort_ui_launch_plan(const CohortConfig *cfg, int detected_gpus, GError **error);

/* The command line Start runs for `config_path`, with progress on fd 3 and the control channel
 * on fd 4 (ui/run.h): the plan's command line
 * (cohort_launch_plan_argv) with the programs found (cohort_ui_find_program). */
GStrv cohort_ui_launch_argv(const CohortConfig *cfg, const char *config_path, int detected_gpus,
                            GError **error);

G_END_DECLS
