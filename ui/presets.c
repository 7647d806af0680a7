#include "ui/presets.h"

#include <errno.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <string.h>

#include "ui/programs.h"

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
    /* win.load-preset's state is the preset shown: its item carries the radio mark. */
    g_autoptr(GMenuItem) item = g_menu_item_new(*n, NULL);
    g_menu_item_set_action_and_target_value(item, "win.load-preset", g_variant_new_string(*n));
    g_menu_append_item(cohort_preset_is_user(*n) ? mine : builtin, item);
  }
  g_menu_append_section(menu, _("Built-in presets"), G_MENU_MODEL(builtin));
  if (g_menu_model_get_n_items(G_MENU_MODEL(mine)) > 0)
    g_menu_append_section(menu, _("Your presets"), G_MENU_MODEL(mine));
  g_autoptr(GMenu) actions = g_menu_new();
  g_menu_append(actions, _("_Save"), "win.preset-save");
  g_menu_append(actions, _("Save _As…"), "win.preset-save-as");
  g_menu_append(actions, _("_Delete"), "win.preset-delete");
  g_menu_append(actions, _("_Import…"), "win.preset-import");
  g_menu_append(actions, _("_Export…"), "win.preset-export");
  g_menu_append_section(menu, NULL, G_MENU_MODEL(actions));
  return G_MENU_MODEL(menu);
}
