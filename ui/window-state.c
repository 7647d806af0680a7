/* What the window remembers between sessions: its size, whether it was maximized, the page it
 * showed, the chart's smoothing, and the preferences, in a key file beside the last used
 * config ($XDG_CONFIG_HOME/cohort/window.ini). Missing or unreadable values take defaults. */
#include "ui/window-private.h"

char *cohort_window_state_path(void)
{
  return g_build_filename(g_get_user_config_dir(), "cohort", "window.ini", NULL);
}

void cohort_window_state_clear(CohortWindowState *st)
{
  g_clear_pointer(&st->page, g_free);
}

static int int_or(GKeyFile *kf, const char *group, const char *key, int fallback, int lo, int hi)
{
  g_autoptr(GError) error = NULL;
  int v = g_key_file_get_integer(kf, group, key, &error);
  return error == NULL && v >= lo && v <= hi ? v : fallback;
}

static gboolean bool_or(GKeyFile *kf, const char *group, const char *key, gboolean fallback)
{
  g_autoptr(GError) error = NULL;
  gboolean v = g_key_file_get_boolean(kf, group, key, &error);
  return error == NULL ? v : fallback;
}

void cohort_window_state_load(CohortWindowState *st)
{
  cohort_window_state_clear(st);
  g_autoptr(GKeyFile) kf = g_key_file_new();
  g_autofree char *path = cohort_window_state_path();
  g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, NULL);
  /* The default fits a 1366×768 laptop with room for the panel. */
  st->width = int_or(kf, "window", "width", 1180, 360, 16384);
  st->height = int_or(kf, "window", "height", 720, 300, 16384);
  st->maximized = bool_or(kf, "window", "maximized", FALSE);
  st->page = g_key_file_get_string(kf, "window", "page", NULL);
  st->notify = bool_or(kf, "preferences", "notify", TRUE);
  st->confirm_close = bool_or(kf, "preferences", "confirm-close", TRUE);
  g_autoptr(GError) error = NULL;
  double s = g_key_file_get_double(kf, "chart", "smoothing", &error);
  st->smoothing = error == NULL && s >= 0 && s <= 0.99 ? s : 0.6;
}

void cohort_window_state_save(const CohortWindowState *st)
{
  g_autoptr(GKeyFile) kf = g_key_file_new();
  g_key_file_set_integer(kf, "window", "width", st->width);
  g_key_file_set_integer(kf, "window", "height", st->height);
  g_key_file_set_boolean(kf, "window", "maximized", st->maximized);
  if (st->page != NULL)
    g_key_file_set_string(kf, "window", "page", st->page);
  g_key_file_set_boolean(kf, "preferences", "notify", st->notify);
  g_key_file_set_boolean(kf, "preferences", "confirm-close", st->confirm_close);
  g_key_file_set_double(kf, "chart", "smoothing", st->smoothing);
  g_autofree char *path = cohort_window_state_path();
  g_autofree char *dir = g_path_get_dirname(path);
  g_mkdir_with_parents(dir, 0755);
  /* Best effort, like the last used config. */
  g_key_file_save_to_file(kf, path, NULL);
}
