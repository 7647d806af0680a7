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

static const char *state_of_menu(CohortWindow *win)
{
  GAction *a = g_action_map_lookup_action(G_ACTION_MAP(win), "load-preset");
  g_autoptr(GVariant) state = g_action_get_state(a);
  static char name[128];
  g_strlcpy(name, g_variant_get_string(state, NULL), sizeof name);
  return name;
}

/* The title marks edits since the preset was loaded or saved (an edit undone clears it), the
 * menu marks the preset shown, and switching with unsaved edits asks. */
static void test_modified_marker(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  CohortConfigForm *form = cohort_window_get_form(win);
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  g_assert_false(cohort_window_is_modified(win));
  g_assert_cmpstr(gtk_window_get_title(GTK_WINDOW(win)), ==, "Cohort — tiny-gpt");
  g_assert_cmpstr(state_of_menu(win), ==, "tiny-gpt");

  g_assert_true(cohort_config_form_set_text(form, "n_layer", "6"));
  g_assert_true(cohort_window_is_modified(win));
  g_assert_cmpstr(gtk_window_get_title(GTK_WINDOW(win)), ==, "Cohort — tiny-gpt (modified)");
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "4"));
  g_assert_false(cohort_window_is_modified(win));
  g_assert_cmpstr(gtk_window_get_title(GTK_WINDOW(win)), ==, "Cohort — tiny-gpt");

  /* With an edit, the menu asks: Cancel keeps everything. */
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "6"));
  g_action_group_activate_action(G_ACTION_GROUP(win), "load-preset",
                                 g_variant_new_string("gpt2-124m"));
  GtkWidget *q = cohort_window_get_question(win);
  g_assert_nonnull(q);
  g_assert_cmpstr(adw_message_dialog_get_heading(ADW_MESSAGE_DIALOG(q)), ==,
                  "Save Changes to “tiny-gpt”?");
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(q), "cancel");
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "tiny-gpt");
  g_assert_cmpint(cohort_config_form_get_config(form)->n_layer, ==, 6);
  /* Discard loads the other preset. */
  g_action_group_activate_action(G_ACTION_GROUP(win), "load-preset",
                                 g_variant_new_string("gpt2-124m"));
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(cohort_window_get_question(win)), "discard");
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "gpt2-124m");
  g_assert_cmpint(cohort_config_form_get_config(form)->n_layer, ==, 12);
  g_assert_cmpstr(state_of_menu(win), ==, "gpt2-124m");
  /* Without edits nothing is asked. */
  g_action_group_activate_action(G_ACTION_GROUP(win), "load-preset",
                                 g_variant_new_string("tiny-gpt"));
  g_assert_null(cohort_window_get_question(win));
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "tiny-gpt");

  /* Save on a built-in preset keeps the edits as a preset of the user's own. */
  g_assert_true(cohort_config_form_set_text(form, "n_layer", "5"));
  g_action_group_activate_action(G_ACTION_GROUP(win), "load-preset",
                                 g_variant_new_string("gpt2-124m"));
  adw_message_dialog_response(ADW_MESSAGE_DIALOG(cohort_window_get_question(win)), "save");
  g_assert_true(cohort_preset_is_user("tiny-gpt-2"));
  g_autoptr(CohortConfig) kept = cohort_preset_load("tiny-gpt-2", NULL);
  g_assert_cmpint(kept->n_layer, ==, 5);
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "gpt2-124m");
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_preset_delete("tiny-gpt-2", &error));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Delete offers Undo in a toast; Undo brings the preset back. */
static void test_delete_undo(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  g_assert_true(cohort_config_form_set_text(cohort_window_get_form(win), "learning_rate", "0.004"));
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_save_preset_as(win, "undoable", &error));
  g_assert_cmpstr(cohort_window_get_last_toast(win), ==, "Preset “undoable” saved");
  g_autofree char *path = user_preset("undoable");
  g_assert_true(cohort_window_action_enabled(win, "preset-delete"));
  g_action_group_activate_action(G_ACTION_GROUP(win), "preset-delete", NULL);
  /* No dialog: the toast says it and offers Undo. */
  g_assert_null(cohort_window_get_question(win));
  g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
  g_assert_cmpstr(cohort_window_get_last_toast(win), ==, "Preset “undoable” deleted");
  g_assert_null(cohort_window_get_preset(win));
  g_action_group_activate_action(G_ACTION_GROUP(win), "preset-undo-delete", NULL);
  g_assert_true(g_file_test(path, G_FILE_TEST_IS_REGULAR));
  g_assert_cmpstr(cohort_window_get_last_toast(win), ==, "Preset “undoable” restored");
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "undoable");
  g_assert_cmpfloat(lr_of(win), ==, 0.004);
  g_assert_true(cohort_window_delete_preset(win, "undoable", &error));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Import adds a preset named after the file; a preset saved under a new name, or imported,
 * gets its own workspace when its folder is another preset's; exports confirm in a toast. */
static void test_import_adds_preset(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(cohort_window_load_preset(win, "tiny-gpt"));
  g_autofree char *file = g_build_filename(tmp_dir, "my run.json", NULL);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_window_export(win, file, &error));
  g_assert_cmpstr(cohort_window_get_last_toast(win), ==, "Exported to “my run.json”");
  g_assert_true(cohort_window_import(win, file));
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "my run");
  g_assert_true(cohort_preset_is_user("my run"));
  g_assert_cmpstr(cohort_window_get_last_toast(win), ==, "Imported as the preset “my run”");
  /* tiny-gpt's runs/tiny-gpt is not shared: the imported preset has runs/my-run. */
  g_autoptr(CohortConfig) imported = cohort_preset_load("my run", NULL);
  g_assert_cmpstr(imported->workspace_dir, ==, "runs/my-run");
  /* A second import of the same file gets a name of its own. */
  g_assert_true(cohort_window_import(win, file));
  g_assert_cmpstr(cohort_window_get_preset(win), ==, "my run-2");

  g_assert_true(cohort_window_load_preset(win, "my run"));
  g_assert_true(cohort_window_save_preset_as(win, "copy", &error));
  g_autoptr(CohortConfig) copy = cohort_preset_load("copy", NULL);
  g_assert_cmpstr(copy->workspace_dir, ==, "runs/copy");
  /* Saving a preset under its own name keeps its folder. */
  g_assert_true(cohort_window_save_preset_as(win, "copy", &error));
  g_autoptr(CohortConfig) again = cohort_preset_load("copy", NULL);
  g_assert_cmpstr(again->workspace_dir, ==, "runs/copy");
  const char *names[] = {"my run", "my run-2", "copy"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    g_assert_true(cohort_preset_delete(names[i], &error));
  gtk_window_destroy(GTK_WINDOW(win));
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/presets/save-load-delete", test_save_load_delete);
  g_test_add_func("/ui/presets/broken", test_broken_preset);
  g_test_add_func("/ui/presets/import-export", test_import_export);
  g_test_add_func("/ui/presets/last-config", test_last_config_restored);
  g_test_add_func("/ui/presets/modified-marker", test_modified_marker);
  g_test_add_func("/ui/presets/delete-undo", test_delete_undo);
  g_test_add_func("/ui/presets/import-adds-preset", test_import_adds_preset);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
