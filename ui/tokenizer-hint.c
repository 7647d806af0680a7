#include "ui/tokenizer-hint.h"

#include <glib/gi18n.h>

char *cohort_tokenizer_hint(const CohortConfig *cfg)
{
  if (!cohort_config_takes_tokenizer(cfg))
    return NULL;
  g_autofree char *path = cohort_config_tokenizer_path(cfg);
  g_autofree char *init =
      cfg->init_from && *cfg->init_from ? cohort_resolve_path(cfg->init_from) : NULL;
  if (!path && cfg->data_format == COHORT_DATA_TEXT && init &&
      !g_file_test(init, G_FILE_TEST_EXISTS))
    return g_strdup_printf(_("Looks for a tokenizer in the initial weights' folder “%s”, which "
                             "does not exist"),
                           cfg->init_from);
  if (!path)
    return cfg->data_format == COHORT_DATA_TEXT ? g_strdup(_("Text is read as bytes, one token "
                                                             "each (no tokenizer)"))
                                                : NULL;
  gboolean from_init = g_strcmp0(cfg->tokenizer, "bytes") == 0;
  if (!g_file_test(path, G_FILE_TEST_EXISTS))
    return g_strdup_printf(_("“%s” does not exist"), cfg->tokenizer);
  const char *what = g_file_test(path, G_FILE_TEST_IS_DIR) ? cohort_folder_tokenizer(path) : NULL;
  if (g_file_test(path, G_FILE_TEST_IS_DIR) && !what)
    return g_strdup_printf(_("No tokenizer in “%s” (tokenizer.json, or vocab.json and merges.txt)"),
                           path);
  g_autofree char *shown = g_path_get_basename(path);
  if (from_init)
    /* TRANSLATORS: "%s in %s": the tokenizer's files, in the init_from folder. */
    return g_strdup_printf(_("Found %s in the initial weights' folder “%s”"), what, shown);
  return what ? g_strdup_printf(_("Found %s in “%s”"), what, shown)
              : g_strdup_printf(_("Uses “%s”"), shown);
}
