/* The window around the pages: the main menu (Preferences, Keyboard Shortcuts, About; F10),
 * the application's shortcuts and the shortcuts window that lists them, the About window,
 * Preferences that are kept, the window's size and page remembered between sessions, and
 * `cohort --version`. */
#include "cohort-build-config.h"
#include "tests/ui/ui-test.h"
#include "ui/window-private.h"

static char *tmp_dir;

static gboolean menu_has(GMenuModel *menu, const char *action)
{
  for (int i = 0; i < g_menu_model_get_n_items(menu); i++) {
    g_autofree char *a = NULL;
    if (g_menu_model_get_item_attribute(menu, i, G_MENU_ATTRIBUTE_ACTION, "s", &a) &&
        g_str_equal(a, action))
      return TRUE;
    g_autoptr(GMenuModel) section = g_menu_model_get_item_link(menu, i, G_MENU_LINK_SECTION);
    if (section != NULL && menu_has(section, action))
      return TRUE;
  }
  return FALSE;
}

static void test_main_menu(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  GtkMenuButton *button = GTK_MENU_BUTTON(win->main_menu_button);
  /* A primary menu: F10 opens it. */
  g_assert_true(gtk_menu_button_get_primary(button));
  GMenuModel *menu = gtk_menu_button_get_menu_model(button);
  g_assert_true(menu_has(menu, "win.preferences"));
  g_assert_true(menu_has(menu, "win.show-help-overlay"));
  g_assert_true(menu_has(menu, "win.about"));
  g_assert_true(menu_has(menu, "app.quit"));
  gtk_window_destroy(GTK_WINDOW(win));
}

/* The application's accelerators, and the shortcuts window showing them by action. */
static void test_shortcuts(void)
{
  g_autoptr(GtkApplication) app = cohort_app_new();
  const struct {
    const char *action, *accel;
  } want[] = {
      {"win.stop", "<Control>period"},   {"win.resume", "<Control>r"},
      {"win.sample-now", "<Control>g"},  {"win.save-now", "<Control>k"},
      {"win.start", "<Control>Return"},  {"win.show-help-overlay", "<Control>question"},
      {"win.preset-save", "<Control>s"}, {"app.quit", "<Control>q"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(want); i++) {
    g_auto(GStrv) accels = gtk_application_get_accels_for_action(app, want[i].action);
    g_assert_nonnull(accels[0]);
    g_assert_cmpstr(accels[0], ==, want[i].accel);
  }
  CohortWindow *win = cohort_window_new(NULL);
  GtkShortcutsWindow *overlay =
      gtk_application_window_get_help_overlay(GTK_APPLICATION_WINDOW(win));
  g_assert_nonnull(overlay);
  g_assert_true(g_action_group_has_action(G_ACTION_GROUP(win), "show-help-overlay"));
  /* Every shortcut the window lists names an action the application gives an accelerator
   * (F10, the menu button's own, aside). */
  g_autoptr(GtkBuilder) b = gtk_builder_new_from_resource("/org/cohort/Trainer/help-overlay.ui");
  guint listed = 0;
  for (GSList *l = gtk_builder_get_objects(b); l != NULL; l = g_slist_delete_link(l, l)) {
    if (!GTK_IS_SHORTCUTS_SHORTCUT(l->data))
      continue;
    g_autofree char *action = NULL, *accel = NULL;
    g_object_get(l->data, "action-name", &action, "accelerator", &accel, NULL);
    if (action == NULL) {
      g_assert_cmpstr(accel, ==, "F10");
      continue;
    }
    g_auto(GStrv) accels = gtk_application_get_accels_for_action(app, action);
    if (accels[0] == NULL)
      g_error("the shortcuts window lists %s, which has no accelerator", action);
    listed++;
  }
  g_assert_cmpuint(listed, ==, 8);
  gtk_window_destroy(GTK_WINDOW(win));
}

static GtkWindow *find_transient(CohortWindow *win, GType type)
{
  GListModel *tops = gtk_window_get_toplevels();
  for (guint i = 0; i < g_list_model_get_n_items(tops); i++) {
    g_autoptr(GtkWindow) w = g_list_model_get_item(tops, i);
    if (G_TYPE_CHECK_INSTANCE_TYPE(w, type) && gtk_window_get_transient_for(w) == GTK_WINDOW(win))
      return w;
  }
  return NULL;
}

static void test_about(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_action_group_activate_action(G_ACTION_GROUP(win), "about", NULL);
  GtkWindow *about = find_transient(win, ADW_TYPE_ABOUT_WINDOW);
  g_assert_nonnull(about);
  AdwAboutWindow *a = ADW_ABOUT_WINDOW(about);
  g_assert_cmpstr(adw_about_window_get_version(a), ==, COHORT_VERSION);
  g_assert_cmpint(adw_about_window_get_license_type(a), ==, GTK_LICENSE_GPL_3_0);
  g_assert_true(g_str_has_prefix(adw_about_window_get_website(a), "https://"));
  g_assert_nonnull(strstr(adw_about_window_get_debug_info(a), "NCCL backend"));
  gtk_window_destroy(about);
  gtk_window_destroy(GTK_WINDOW(win));
}

/* Preferences are saved as they change and read by the next window. */
static void test_preferences(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  g_assert_true(win->state.notify);
  g_action_group_activate_action(G_ACTION_GROUP(win), "preferences", NULL);
  GtkWindow *prefs = find_transient(win, ADW_TYPE_PREFERENCES_WINDOW);
  g_assert_nonnull(prefs);
  /* The first switch is "Notify when a run ends". */
  GtkWidget *w = GTK_WIDGET(prefs);
  while (w != NULL && !GTK_IS_SWITCH(w)) {
    GtkWidget *next = gtk_widget_get_first_child(w);
    while (next == NULL && w != NULL) {
      next = gtk_widget_get_next_sibling(w);
      if (next == NULL)
        w = gtk_widget_get_parent(w);
    }
    w = next;
  }
  g_assert_nonnull(w);
  gtk_switch_set_active(GTK_SWITCH(w), FALSE);
  g_assert_false(win->state.notify);
  gtk_window_destroy(prefs);
  gtk_window_destroy(GTK_WINDOW(win));
  CohortWindow *again = cohort_window_new(NULL);
  g_assert_false(again->state.notify);
  again->state.notify = TRUE;
  cohort_window_state_save(&again->state);
  gtk_window_destroy(GTK_WINDOW(again));
}

static gboolean realized(gpointer data)
{
  return gtk_widget_get_realized(data);
}

/* The size and page of the last session, restored. */
static void test_size_and_page_remembered(void)
{
  CohortWindow *win = cohort_window_new(NULL);
  gtk_window_set_default_size(GTK_WINDOW(win), 900, 640);
  cohort_window_show_page(win, "training");
  gtk_window_present(GTK_WINDOW(win));
  g_assert_true(ui_test_wait(realized, win, 10));
  ui_test_spin(0.3);
  gtk_window_close(GTK_WINDOW(win));
  ui_test_spin(0.1);

  g_autofree char *path = cohort_window_state_path();
  g_assert_true(g_file_test(path, G_FILE_TEST_IS_REGULAR));
  CohortWindow *again = cohort_window_new(NULL);
  int w = 0, h = 0;
  gtk_window_get_default_size(GTK_WINDOW(again), &w, &h);
  g_assert_cmpint(w, ==, 900);
  g_assert_cmpint(h, ==, 640);
  g_assert_cmpstr(gtk_stack_get_visible_child_name(GTK_STACK(again->stack)), ==, "training");
  gtk_window_destroy(GTK_WINDOW(again));

  /* A damaged file gives the defaults, not a crash or a tiny window. */
  g_assert_true(
      g_file_set_contents(path, "[window]\nwidth=-5\nheight=abc\npage=nowhere\n", -1, NULL));
  CohortWindow *fresh = cohort_window_new(NULL);
  gtk_window_get_default_size(GTK_WINDOW(fresh), &w, &h);
  g_assert_cmpint(w, ==, 1180);
  g_assert_cmpint(h, ==, 720);
  g_assert_cmpstr(gtk_stack_get_visible_child_name(GTK_STACK(fresh->stack)), ==, "model");
  gtk_window_destroy(GTK_WINDOW(fresh));
}

static void test_version(void)
{
  g_autofree char *cohort =
      g_build_filename(g_getenv("G_TEST_BUILDDIR"), "..", "ui", "cohort", NULL);
  const char *argv[] = {cohort, "--version", NULL};
  g_autofree char *out = NULL;
  int status = -1;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, NULL,
                             &status, &error));
  g_assert_no_error(error);
  g_assert_true(g_spawn_check_wait_status(status, NULL));
  g_assert_cmpstr(out, ==, "cohort " COHORT_VERSION "\n");
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/shell/main-menu", test_main_menu);
  g_test_add_func("/ui/shell/shortcuts", test_shortcuts);
  g_test_add_func("/ui/shell/about", test_about);
  g_test_add_func("/ui/shell/preferences", test_preferences);
  g_test_add_func("/ui/shell/size-and-page-remembered", test_size_and_page_remembered);
  g_test_add_func("/ui/shell/version", test_version);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
