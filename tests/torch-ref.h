/* Running a PyTorch reference script of tests/ (header-only, tests only). */
#pragma once

#include <glib.h>

/* Runs /usr/bin/python3 tests/SCRIPT ARGS… (`args` NULL-terminated) and returns what it wrote
 * to stdout (free with g_free); fails the test with the script's stderr when it fails. */
static inline char *torch_ref_run(const char *script, const char *const *args)
{
  char *path = g_test_build_filename(G_TEST_DIST, script, NULL);
  GPtrArray *argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer) "/usr/bin/python3");
  g_ptr_array_add(argv, path);
  for (guint i = 0; args[i] != NULL; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  char *out = NULL, *err = NULL;
  int status = 0;
  GError *error = NULL;
  g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status,
               &error);
  g_assert_no_error(error);
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("%s failed: %s", script, err);
  g_free(err);
  g_ptr_array_free(argv, TRUE);
  g_free(path);
  return out;
}
