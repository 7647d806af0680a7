/* Presets: TrainConfig files by name. Built-in ones live in <data dir>/presets/NAME.json
 * (installed with the program), the user's in $XDG_CONFIG_HOME/cohort/presets/NAME.json; the
 * user's win on a name clash. The command line (--preset) and the window both use these. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

/* The file of preset `name` (with or without ".json"); an error listing the presets when
 * there is none by that name. g_free it. */
char *cohort_preset_path(const char *name, GError **error);
CohortConfig *cohort_preset_load(const char *name, GError **error);
/* Sorted, NULL-terminated names of all presets; `user_only` limits to the user's. */
GStrv cohort_preset_list(gboolean user_only);
char *cohort_user_preset_dir(void);

/* Whether `name` is one of the user's presets. */
gboolean cohort_preset_is_user(const char *name);
/* Checks a name for a user preset: 1 to 64 characters of UTF-8, no '/', not starting with
 * '.'. */
gboolean cohort_preset_name_valid(const char *name, GError **error);
/* Saves `cfg` as the user's preset `name` (creating the folder), atomically. */
gboolean cohort_preset_save(const CohortConfig *cfg, const char *name, GError **error);
/* Deletes the user's preset `name`; built-in presets cannot be deleted. */
gboolean cohort_preset_delete(const char *name, GError **error);

G_END_DECLS
