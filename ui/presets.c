#include "ui/presets.h"

#include <errno.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <string.h>

#include "ui/programs.h"

static char *user_preset_file(const char *name)
{
  g_autofree char *dir = cohort_user_preset_dir();
  g_autofree char *file = g_strconcat(name, ".json", NULL);
  return g_build_filename(dir, file, NULL);
}

gboolean cohort_ui_preset_is_user(const char *name)
{
  g_autofree char *path = user_preset_file(name);
  return g_file_test(path, G_FILE_TEST_IS_REGULAR);
}

gboolean cohort_ui_preset_name_valid(const char *name, GError **error)
{
  if (name == NULL || *name == '\0' || g_utf8_strlen(name, -1) > 64 || strchr(name, '/') ||
      name[0] == '.' || !g_utf8_validate(name, -1, NULL)) {
    g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_FAILED,
                _("preset name \"%s\" is not allowed: use 1 to 64 characters, no \"/\", not "
                  "starting with \".\""),
                name != NULL ? name : "");
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_ui_preset_save(const CohortConfig *cfg, const char *name, GError **error)
{
  if (!cohort_ui_preset_name_valid(name, error))
    return FALSE;
  g_autofree char *dir = cohort_user_preset_dir();
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), _("%s: cannot create: %s"), dir,
                g_strerror(e));
    return FALSE;
  }
  g_autofree char *path = user_preset_file(name);
  return cohort_config_save_file(cfg, path, error);
}

gboolean cohort_ui_preset_delete(const char *name, GError **error)
{
  if (!cohort_ui_preset_name_valid(name, error))
    return FALSE;
  if (!cohort_ui_preset_is_user(name)) {
    g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_FAILED,
                _("preset \"%s\" is not one of yours: built-in presets cannot be deleted"), name);
    return FALSE;
  }
  g_autofree char *path = user_preset_file(name);
  if (g_unlink(path) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), _("%s: cannot delete: %s"), path,
                g_strerror(e));
    return FALSE;
  }
  return TRUE;
}

char *cohort_ui_last_config_path(void)
{
  return g_build_filename(g_get_user_config_dir(), "cohort", "last.json", NULL);
}

GMenuModel *cohort_ui_preset_menu_new(void)
{
  GMenu *menu = g_menu_new();
  g_auto(GStrv) all = cohort_preset_list(FALSE);
  g_autoptr(GMenu) builtin = g_menu_new();
  g_autoptr(GMenu) mine = g_menu_new();
  for (char **n = all; n != NULL && *n != NULL; n++) {
    g_autoptr(GMenuItem) item = g_menu_item_new(*n, NULL);
    g_menu_item_set_action_and_target_value(item, "win.load-preset", g_variant_new_string(*n));
    g_menu_append_item(cohort_ui_preset_is_user(*n) ? mine : builtin, item);
  }
  g_menu_append_section(menu, _("Built-in presets"), G_MENU_MODEL(builtin));
  if (g_menu_model_get_n_items(G_MENU_MODEL(mine)) > 0)
    g_menu_append_section(menu, _("Your presets"), G_MENU_MODEL(mine));
  g_autoptr(GMenu) actions = g_menu_new();
  g_menu_append(actions, _("_Save"), "win.preset-save");
  g_menu_append(actions, _("Save _As…"), "win.preset-save-as");
  g_menu_append(actions, _("_Delete…"), "win.preset-delete");
  g_menu_append(actions, _("_Import…"), "win.preset-import");
  g_menu_append(actions, _("_Export…"), "win.preset-export");
  g_menu_append_section(menu, NULL, G_MENU_MODEL(actions));
  return G_MENU_MODEL(menu);
}
