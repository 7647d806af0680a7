#include "ui/programs.h"

#include <glib/gi18n.h>

#include "cohort-build-config.h"
#include "ui/run.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-ui-error-quark, cohort_ui_error)
/* clang-format on */

/* `path`, absolute, when it is an executable file. */
static char *executable_if(const char *path)
{
  if (g_file_test(path, G_FILE_TEST_IS_EXECUTABLE) && !g_file_test(path, G_FILE_TEST_IS_DIR))
    return g_canonicalize_filename(path, NULL);
  return NULL;
}

char *cohort_ui_find_program(const char *name, GError **error)
{
  g_autofree char *var = g_ascii_strup(name, -1);
  g_strdelimit(var, "-", '_');
  g_autofree char *env_name = g_strconcat(var, "_PROGRAM", NULL);
  const char *env = g_getenv(env_name);
  if (env != NULL && *env != '\0') {
    char *found = executable_if(env);
    if (found == NULL)
      g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_NOT_FOUND,
                  _("%s=%s is not an executable file"), env_name, env);
    return found;
  }

  g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
  if (self != NULL) {
    g_autofree char *dir = g_path_get_dirname(self);
    g_autofree char *beside = g_build_filename(dir, name, NULL);
    char *found = executable_if(beside);
    if (found != NULL)
      return found;
    g_autofree char *root = g_strconcat(COHORT_BUILD_ROOT, "/", NULL);
    if (g_str_has_prefix(self, root)) {
      g_autofree char *built = g_build_filename(COHORT_BUILD_ROOT, "engine", "cli", name, NULL);
      found = executable_if(built);
      if (found != NULL)
        return found;
    }
  }

  char *found = g_find_program_in_path(name);
  if (found == NULL)
    g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_NOT_FOUND,
                _("%s not found: looked next to this program, in the build tree and on PATH "
                  "(set %s to its path)"),
                name, env_name);
  return found;
}

char *cohort_ui_command_program(const char *name)
{
  g_autofree char *var = g_ascii_strup(name, -1);
  g_strdelimit(var, "-", '_');
  g_autofree char *env_name = g_strconcat(var, "_PROGRAM", NULL);
  g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
  g_autofree char *root = g_strconcat(COHORT_BUILD_ROOT, "/", NULL);
  gboolean built = self != NULL && g_str_has_prefix(self, root);
  const char *env = g_getenv(env_name);
  if (built || (env != NULL && *env != '\0')) {
    char *found = cohort_ui_find_program(name, NULL);
    if (found != NULL)
      return found;
  }
  return g_strdup(name);
}

CohortLaunchPlan *cohort_ui_launch_plan(const CohortConfig *cfg, int detected_gpus, GError **error)
{
  /* The window is never a rank of a launcher: it plans for this machine. */
  CohortMachine machine = {.gpus = MAX(detected_gpus, 0)};
  return cohort_launch_plan_new(cfg, _("settings"), &machine, error);
}

GStrv cohort_ui_launch_argv(const CohortConfig *cfg, const char *config_path, int detected_gpus,
                            GError **error)
{
  g_autoptr(CohortLaunchPlan) plan = cohort_ui_launch_plan(cfg, detected_gpus, error);
  if (plan == NULL)
    return NULL;
  g_autofree char *train = cohort_ui_find_program("cohort-train", error);
  if (train == NULL)
    return NULL;
  g_autofree char *run = NULL;
  if (plan->kind == COHORT_LAUNCH_COHORT_RUN) {
    run = cohort_ui_find_program("cohort-run", error);
    if (run == NULL)
      return NULL;
  }
  const char *train_args[] = {"--config", config_path, NULL};
  CohortLaunchArgs args = {.train_program = train,
                           .run_program = run,
                           .train_args = train_args,
                           .progress_fd = 3,
                           .control_fd = COHORT_RUN_CONTROL_FD};
  return cohort_launch_plan_argv(plan, -1, &args);
}
