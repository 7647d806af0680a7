#include "ui/programs.h"

#include <glib/gi18n.h>

#include "cohort-build-config.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-ui-error-quark, cohort_ui_error)
/* clang-format on */

static char *executable_if(const char *path)
{
  if (g_file_test(path, G_FILE_TEST_IS_EXECUTABLE) && !g_file_test(path, G_FILE_TEST_IS_DIR))
    return g_strdup(path);
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

int cohort_ui_local_processes(const CohortConfig *cfg, int detected_gpus)
{
  if (!cfg->enable_multi_gpu)
    return 1;
  if (cfg->nproc_per_node > 0)
    return cfg->nproc_per_node;
  if (cfg->device_indexes != NULL && cfg->device_indexes->len > 0)
    return (int)cfg->device_indexes->len;
  if (cfg->world_size > 0)
    return MAX(1, cfg->world_size / MAX(1, cfg->num_nodes));
  return MAX(1, detected_gpus);
}

int cohort_ui_world_size(const CohortConfig *cfg, int detected_gpus)
{
  if (!cfg->enable_multi_gpu)
    return 1;
  if (cfg->world_size > 0)
    return cfg->world_size;
  return cohort_ui_local_processes(cfg, detected_gpus) * MAX(1, cfg->num_nodes);
}

GStrv cohort_ui_launch_argv(const CohortConfig *cfg, const char *config_path, int detected_gpus,
                            GError **error)
{
  g_autofree char *train = cohort_ui_find_program("cohort-train", error);
  if (train == NULL)
    return NULL;
  int nproc = cohort_ui_local_processes(cfg, detected_gpus);
  g_autoptr(GStrvBuilder) b = g_strv_builder_new();

  if (cfg->enable_multi_gpu && cfg->use_torchrun) {
    g_autofree char *run = cohort_ui_find_program("cohort-run", error);
    if (run == NULL)
      return NULL;
    g_autofree char *n = g_strdup_printf("%d", nproc);
    g_strv_builder_add_many(b, run, "--nproc-per-node", n, NULL);
    if (cfg->num_nodes > 1) {
      g_autofree char *nn = g_strdup_printf("%d", cfg->num_nodes);
      g_autofree char *nr = g_strdup_printf("%d", cfg->node_rank);
      g_autofree char *port = g_strdup_printf("%d", cfg->master_port);
      g_strv_builder_add_many(b, "--nnodes", nn, "--node-rank", nr, "--master-addr",
                              cfg->master_addr, "--master-port", port, NULL);
    } else {
      g_strv_builder_add(b, "--standalone");
    }
    g_autofree char *restarts = g_strdup_printf("%d", cfg->max_restarts);
    g_strv_builder_add_many(b, "--max-restarts", restarts, "--progress-fd", "3", train, "--config",
                            config_path, NULL);
  } else {
    g_strv_builder_add_many(b, train, "--config", config_path, "--progress-fd", "3", NULL);
    if (cfg->enable_multi_gpu && nproc > 1) {
      g_autofree char *n = g_strdup_printf("%d", nproc);
      g_strv_builder_add_many(b, "--nproc", n, NULL);
    }
  }
  return g_strv_builder_end(b);
}
