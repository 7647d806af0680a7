/* Where Cohort finds its data (presets, sample text) and the user's presets, and the derived
 * quantities that depend on the number of processes. */
#include "engine/config.h"

#include "cohort-build-config.h"

#include <math.h>
#include <string.h>

const char *cohort_data_dir(void)
{
  /* Read every time: tests and launchers set it after start. */
  const char *env = g_getenv("COHORT_DATA_DIR");
  if (env && *env)
    return env;

  static char *dir;
  if (g_once_init_enter(&dir)) {
    g_autofree char *installed_presets =
        g_build_filename(COHORT_INSTALLED_DATADIR, "presets", NULL);
    const char *found = g_file_test(installed_presets, G_FILE_TEST_IS_DIR)
                            ? COHORT_INSTALLED_DATADIR
                            : COHORT_SOURCE_DATADIR;
    g_once_init_leave(&dir, g_strdup(found));
  }
  return dir;
}

char *cohort_resolve_path(const char *path)
{
  if (!path || !g_str_has_prefix(path, "builtin:"))
    return g_strdup(path);
  const char *rel = path + strlen("builtin:");
  char *in_data = g_build_filename(cohort_data_dir(), rel, NULL);
  /* Data the build generates (the glyph set) is in the build tree until it is installed. */
  g_autofree char *built = g_build_filename(COHORT_BUILD_ROOT, "data", rel, NULL);
  if (!g_file_test(in_data, G_FILE_TEST_EXISTS) && g_file_test(built, G_FILE_TEST_EXISTS)) {
    g_free(in_data);
    return g_steal_pointer(&built);
  }
  return in_data;
}

char *cohort_user_preset_dir(void)
{
  return g_build_filename(g_get_user_config_dir(), "cohort", "presets", NULL);
}

static char *builtin_preset_dir(void)
{
  return g_build_filename(cohort_data_dir(), "presets", NULL);
}

static void add_names(GPtrArray *names, const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  const char *entry;
  while (d && (entry = g_dir_read_name(d))) {
    if (!g_str_has_suffix(entry, ".json") || entry[0] == '.')
      continue;
    g_autofree char *name = g_strndup(entry, strlen(entry) - strlen(".json"));
    gboolean seen = FALSE;
    for (guint i = 0; i < names->len && !seen; i++)
      seen = strcmp(names->pdata[i], name) == 0;
    if (!seen && *name)
      g_ptr_array_add(names, g_steal_pointer(&name));
  }
}

static int compare_names(gconstpointer a, gconstpointer b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

GStrv cohort_preset_list(gboolean user_only)
{
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
  g_autofree char *user = cohort_user_preset_dir();
  add_names(names, user);
  if (!user_only) {
    g_autofree char *builtin = builtin_preset_dir();
    add_names(names, builtin);
  }
  g_ptr_array_sort(names, compare_names);
  g_ptr_array_add(names, NULL);
  return (GStrv)g_ptr_array_steal(names, NULL);
}

char *cohort_preset_path(const char *name, GError **error)
{
  if (!name || !*name || strchr(name, '/') || name[0] == '.') {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "preset \"%s\" is not a preset name; allowed: a name like tiny-gpt (use --config "
                "for a file path)",
                name ? name : "");
    return NULL;
  }
  g_autofree char *stem =
      g_str_has_suffix(name, ".json") ? g_strndup(name, strlen(name) - 5) : g_strdup(name);
  g_autofree char *file = g_strconcat(stem, ".json", NULL);
  g_autofree char *user_dir = cohort_user_preset_dir();
  g_autofree char *builtin_dir = builtin_preset_dir();
  const char *dirs[] = {user_dir, builtin_dir};
  for (guint i = 0; i < G_N_ELEMENTS(dirs); i++) {
    g_autofree char *path = g_build_filename(dirs[i], file, NULL);
    if (g_file_test(path, G_FILE_TEST_IS_REGULAR))
      return g_steal_pointer(&path);
  }
  g_auto(GStrv) names = cohort_preset_list(FALSE);
  g_autofree char *list = g_strjoinv(", ", names);
  g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO,
              "preset \"%s\" not found in %s or %s; available: %s", stem, user_dir, builtin_dir,
              *list ? list : "none");
  return NULL;
}

CohortConfig *cohort_preset_load(const char *name, GError **error)
{
  g_autofree char *path = cohort_preset_path(name, error);
  if (!path)
    return NULL;
  return cohort_config_load_file(path, error);
}

int cohort_config_global_batch(const CohortConfig *cfg, int world_size)
{
  gint64 world = MAX(world_size, 1);
  gint64 global = (gint64)cfg->batch_size * cfg->gradient_accumulation_steps * world;
  /* Table bounds allow products past G_MAXINT; saturate rather than wrap. */
  return (int)MIN(global, (gint64)G_MAXINT);
}

double cohort_config_scaled_lr(const CohortConfig *cfg, int world_size)
{
  double world = MAX(world_size, 1);
  switch (cfg->lr_scaling) {
  case COHORT_LR_SCALING_LINEAR:
    return cfg->learning_rate * world;
  case COHORT_LR_SCALING_SQRT:
    return cfg->learning_rate * sqrt(world);
  case COHORT_LR_SCALING_NONE:
  default:
    return cfg->learning_rate;
  }
}
