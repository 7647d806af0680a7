/* Presets as the window manages them, on top of engine/config.h's preset functions: saving
 * and deleting the user's presets, and the last used config. */
#pragma once

#include <gio/gio.h>

#include "engine/config.h"

G_BEGIN_DECLS

/* Whether `name` is one of the user's presets (in cohort_user_preset_dir()). */
gboolean cohort_ui_preset_is_user(const char *name);

/* Checks a name for a user preset: not empty, at most 64 characters, no '/', not starting
 * with '.'. */
gboolean cohort_ui_preset_name_valid(const char *name, GError **error);

/* Saves `cfg` as the user's preset `name` (creating the folder), atomically. */
gboolean cohort_ui_preset_save(const CohortConfig *cfg, const char *name, GError **error);

/* Deletes the user's preset `name`; built-in presets cannot be deleted. */
gboolean cohort_ui_preset_delete(const char *name, GError **error);

/* $XDG_CONFIG_HOME/cohort/last.json: the config the window restores at start. */
char *cohort_ui_last_config_path(void);

/* A menu of every preset: a section of built-in ones and one of the user's, each item
 * activating win.load-preset with the name, then the preset actions. */
GMenuModel *cohort_ui_preset_menu_new(void);

G_END_DECLS
