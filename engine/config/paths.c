/* Where Cohort finds its data (presets, sample text). */
#include "engine/config/config.h"

#include "cohort-build-config.h"

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

const char *cohort_folder_tokenizer(const char *dir)
{
  g_autofree char *json = g_build_filename(dir, "tokenizer.json", NULL);
  g_autofree char *vocab = g_build_filename(dir, "vocab.json", NULL);
  g_autofree char *merges = g_build_filename(dir, "merges.txt", NULL);
  if (g_file_test(json, G_FILE_TEST_IS_REGULAR))
    return "tokenizer.json";
  if (g_file_test(vocab, G_FILE_TEST_IS_REGULAR) && g_file_test(merges, G_FILE_TEST_IS_REGULAR))
    return "vocab.json + merges.txt";
  return NULL;
}

gboolean cohort_config_takes_tokenizer(const CohortConfig *cfg)
{
  return cohort_config_key_applies(cohort_config_find_key("tokenizer"), cfg->model);
}

char *cohort_config_tokenizer_path(const CohortConfig *cfg)
{
  if (!cohort_config_takes_tokenizer(cfg))
    return NULL;
  if (g_strcmp0(cfg->tokenizer, "bytes") != 0)
    return cohort_resolve_path(cfg->tokenizer);
  if (!cfg->init_from || !*cfg->init_from)
    return NULL;
  g_autofree char *dir = cohort_resolve_path(cfg->init_from);
  if (g_file_test(dir, G_FILE_TEST_IS_DIR) && cohort_folder_tokenizer(dir))
    return g_steal_pointer(&dir);
  return NULL;
}
