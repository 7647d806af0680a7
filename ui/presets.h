/* Presets as the window shows them, on top of engine/config/presets.h: the preset menu and the last
 * used config. */
#pragma once

#include <gio/gio.h>

#include "engine/config/config.h"
#include "engine/config/presets.h"

G_BEGIN_DECLS

/* $XDG_CONFIG_HOME/cohort/last.json: the config the window restores at start. */
char *cohort_ui_last_config_path(void);

/* A menu of every preset: a section of built-in ones and one of the user's, each item
 * activating win.load-preset with the name (a stateful action: the preset shown is marked),
 * then the preset actions. */
GMenuModel *cohort_ui_preset_menu_new(void);

G_END_DECLS
