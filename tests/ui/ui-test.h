/* Helpers shared by the window tests (suite ui). */
#pragma once

#include <glib/gstdio.h>
#include <gtk/gtk.h>

#include "ui/app.h"

/* A fresh $XDG_CONFIG_HOME (set before anything reads it), translations, GTK. Returns the
 * temporary folder; the caller removes it with ui_test_rmtree. */
static inline char *ui_test_init(int *argc, char ***argv)
{
  char *tmp = g_dir_make_tmp("cohort-ui-XXXXXX", NULL);
  g_assert_nonnull(tmp);
  g_autofree char *config = g_build_filename(tmp, "config", NULL);
  g_mkdir_with_parents(config, 0700);
  g_setenv("XDG_CONFIG_HOME", config, TRUE);
  cohort_app_init_i18n();
  gtk_test_init(argc, argv, NULL);
  cohort_app_load_css();
  return tmp;
}

static inline void ui_test_rmtree(const char *path)
{
  g_autoptr(GDir) dir = g_dir_open(path, 0, NULL);
  const char *name;
  while (dir != NULL && (name = g_dir_read_name(dir)) != NULL) {
    g_autofree char *child = g_build_filename(path, name, NULL);
    if (g_file_test(child, G_FILE_TEST_IS_DIR) && !g_file_test(child, G_FILE_TEST_IS_SYMLINK))
      ui_test_rmtree(child);
    else
      g_unlink(child);
  }
  g_rmdir(path);
}

/* Runs the main loop until `cond(data)` holds or `timeout_s` passes; returns whether it
 * held. */
static inline gboolean ui_test_wait(gboolean (*cond)(gpointer), gpointer data, double timeout_s)
{
  gint64 end = g_get_monotonic_time() + (gint64)(timeout_s * G_USEC_PER_SEC);
  while (!cond(data)) {
    if (g_get_monotonic_time() > end)
      return FALSE;
    if (!g_main_context_iteration(NULL, FALSE))
      g_usleep(2000);
  }
  return TRUE;
}

/* Lets pending events run for `seconds`. */
static inline void ui_test_spin(double seconds)
{
  gint64 end = g_get_monotonic_time() + (gint64)(seconds * G_USEC_PER_SEC);
  while (g_get_monotonic_time() < end)
    if (!g_main_context_iteration(NULL, FALSE))
      g_usleep(2000);
}
