/* Presets from the window: save as, load, delete (user presets only), a broken preset shows
 * its error without replacing the settings, import/export, and the last config restored. */
#include "tests/ui/ui-test.h"
#include "ui/config-form-private.h"
#include "ui/presets.h"
#include "ui/window-private.h"

static char *tmp_dir;

static double lr_of(CohortWindow *win)
{
  return cohort_config_form_get_config(cohort_window_get_form(win))->learning_rate;
}

static char *user_preset(const char *name)
{
  g_autofree char *dir = cohort_user_preset_dir();
  g_autofree char *file = g_strconcat(name, ".json", NULL);
  return g_build_filename(dir, file, NULL);
}

static void test_save_load_delete(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "tiny-gpt");
  g_assert_true(cohort_config_form_set_text(form, "learning_rate", "0.003"));
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_save_preset_as(win, "mine", &error));
  g_assert_no_error(error);
  g_autofree char *path = user_preset("mine");
  g_assert_true(g_file_test(path, G_FILE_TEST_IS_REGULAR));
  g_assert_true(cohort_preset_is_user("mine"));
  g_auto(GStrv) mine = cohort_preset_list(TRUE);
  g_assert_true(g_strv_contains((const char *const *)mine, "mine"));
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "mine");

  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  g_assert_cmpfloat(lr_of(win), ==, 0.002);
  g_assert_true(cohort_window_load_preset(win, "mine"));
  g_assert_cmpfloat(lr_of(win), ==, 0.003);
  g_assert_null(cohort_window_get_banner(win));

  g_assert_false(cohort_window_save_preset_as(win, "a/b", &error));
  g_assert_nonnull(strstr(error->message, "a/b"));
  g_clear_error(&error);
  g_assert_false(cohort_window_delete_preset(win, "tiny-gpt", &error));
  g_assert_nonnull(strstr(error->message, "built-in"));
  g_clear_error(&error);

  g_assert_true(cohort_window_delete_preset(win, "mine", &error));
  g_assert_no_error(error);
  g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
  g_assert_null(cohort_window_get_preset(win));
  g_assert_false(cohort_window_load_preset(win, "mine"));
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_broken_preset(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_autofree char *dir = cohort_user_preset_dir();
  g_mkdir_with_parents(dir, 0755);
  g_autofree char *path = user_preset("broken");
  g_assert_true(g_file_set_contents(path, "{\"version\": 1, \"learnig_rate\": 0.1}\n", -1, NULL));
  g_assert_true(
      cohort_config_form_set_text(cohort_window_get_form(win), "learning_rate", "0.0025"));
  g_assert_false(cohort_window_load_preset(win, "broken"));
  const char *banner = cohort_window_get_banner(win);
  g_assert_nonnull(banner);
  g_test_message("banner: %s", banner);
  g_assert_nonnull(strstr(banner, "learnig_rate"));
  g_assert_nonnull(strstr(banner, "learning_rate"));
  g_assert_cmpfloat(lr_of(win), ==, 0.0025);
  g_assert_true(cohort_window_can_start(win));
  g_unlink(path);
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_import_export(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "3"));
  g_autofree char *path = g_build_filename(tmp_dir, "exported.json", NULL);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_export(win, path, &error));
  g_assert_no_error(error);
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "5"));
  g_assert_true(cohort_window_import(win, path));
  g_assert_cmpint(cohort_config_form_get_config(form)->n_layer, ==, 3);
  g_autofree char *bad = g_build_filename(tmp_dir, "bad.json", NULL);
  g_assert_true(g_file_set_contents(bad, "{\"version\": 1, \"n_layer\": 0}", -1, NULL));
  g_assert_false(cohort_window_import(win, bad));
  g_assert_nonnull(strstr(cohort_window_get_banner(win), "n_layer"));
  g_assert_cmpint(cohort_config_form_get_config(form)->n_layer, ==, 3);
  gtk_window_destroy(GTK_WINDOW(win));
}

static void test_last_config_restored(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(
      cohort_config_form_set_text(cohort_window_get_form(win), "learning_rate", "0.0042"));
  g_object_ref(win);
  gtk_window_close(GTK_WINDOW(win));
  gtk_window_destroy(GTK_WINDOW(win));
  g_object_unref(win);
  g_autofree char *last = cohort_ui_last_config_path();
  g_assert_true(g_file_test(last, G_FILE_TEST_IS_REGULAR));

  win = cohort_window_new(NULL);
  g_assert_cmpfloat(lr_of(win), ==, 0.0042);
  gtk_window_destroy(GTK_WINDOW(win));

  /* A last config that no longer loads: the window opens with tiny-gpt and says why. */
  g_assert_true(g_file_set_contents(last, "{\"version\": 99}", -1, NULL));
  win = cohort_window_new(NULL);
  g_assert_nonnull(cohort_window_get_banner(win));
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "tiny-gpt");
  g_assert_cmpfloat(lr_of(win), ==, 0.002);
  gtk_window_destroy(GTK_WINDOW(win));
  g_unlink(last);
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/presets/save-load-delete", test_save_load_delete);
  g_test_add_func("/ui/presets/broken", test_broken_preset);
  g_test_add_func("/ui/presets/import-export", test_import_export);
  g_test_add_func("/ui/presets/last-config", test_last_config_restored);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
