/* Presets: TrainConfig files by name, built-in ones in <data dir>/presets/ and the user's in
 * $XDG_CONFIG_HOME/cohort/presets/. */
#include "engine/config/presets.h"

#include <errno.h>
#include <string.h>
#include <glib/gstdio.h>

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

static char *user_preset_file(const char *name)
{
  g_autofree char *dir = cohort_user_preset_dir();
  g_autofree char *file = g_strconcat(name, ".json", NULL);
  return g_build_filename(dir, file, NULL);
}

gboolean cohort_preset_is_user(const char *name)
{
  g_autofree char *path = user_preset_file(name);
  return g_file_test(path, G_FILE_TEST_IS_REGULAR);
}

gboolean cohort_preset_name_valid(const char *name, GError **error)
{
  if (name == NULL || *name == '\0' || g_utf8_strlen(name, -1) > 64 || strchr(name, '/') ||
      name[0] == '.' || !g_utf8_validate(name, -1, NULL)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "preset name \"%s\" is not allowed: use 1 to 64 characters, no \"/\", not "
                "starting with \".\"",
                name != NULL ? name : "");
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_preset_save(const CohortConfig *cfg, const char *name, GError **error)
{
  if (!cohort_preset_name_valid(name, error))
    return FALSE;
  g_autofree char *dir = cohort_user_preset_dir();
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot create: %s", dir,
                g_strerror(e));
    return FALSE;
  }
  g_autofree char *path = user_preset_file(name);
  return cohort_config_save_file(cfg, path, error);
}

gboolean cohort_preset_delete(const char *name, GError **error)
{
  if (!cohort_preset_name_valid(name, error))
    return FALSE;
  if (!cohort_preset_is_user(name)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "preset \"%s\" is not one of yours: built-in presets cannot be deleted", name);
    return FALSE;
  }
  g_autofree char *path = user_preset_file(name);
  if (g_unlink(path) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: cannot delete: %s", path,
                g_strerror(e));
    return FALSE;
  }
  return TRUE;
}
