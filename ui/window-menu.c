/* The main menu's windows: About (version, licence, links, and the build's details for bug
 * reports), Preferences, and Keyboard Shortcuts (ui/help-overlay.ui, whose shortcuts show the
 * accelerators the application sets, so the two cannot disagree). */
#include "ui/window-private.h"

#include <glib/gi18n.h>

#include "cohort-build-config.h"
#include "engine/launch/build-info.h"
#include "ui/app.h"

static char *debug_info(void)
{
  return g_strdup_printf("Cohort %s\nGTK %u.%u.%u, libadwaita %u.%u.%u, GLib %u.%u.%u\n"
                         "CUDA path: %s\nNCCL backend: %s\nGloo backend: %s\n",
                         COHORT_VERSION, gtk_get_major_version(), gtk_get_minor_version(),
                         gtk_get_micro_version(), adw_get_major_version(), adw_get_minor_version(),
                         adw_get_micro_version(), glib_major_version, glib_minor_version,
                         glib_micro_version, COHORT_HAVE_CUDA ? "yes" : "no",
                         cohort_build_has_backend("nccl") ? "yes" : "no",
                         cohort_build_has_backend("gloo") ? "yes" : "no");
}

static void on_about(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  GtkWidget *about = adw_about_window_new();
  AdwAboutWindow *a = ADW_ABOUT_WINDOW(about);
  gtk_window_set_transient_for(GTK_WINDOW(about), GTK_WINDOW(win));
  adw_about_window_set_application_name(a, _("Cohort"));
  adw_about_window_set_application_icon(a, COHORT_APP_ID);
  adw_about_window_set_version(a, COHORT_VERSION);
  adw_about_window_set_developer_name(a, _("The Cohort developers"));
  adw_about_window_set_comments(
      a, _("Train neural networks data-parallel on one or several GPUs and machines, and watch "
           "every run live."));
  adw_about_window_set_license_type(a, GTK_LICENSE_GPL_3_0);
  adw_about_window_set_website(a, COHORT_WEBSITE);
  adw_about_window_set_issue_url(a, COHORT_WEBSITE "/issues");
  adw_about_window_add_link(a, _("Configuration reference"), COHORT_WEBSITE "/docs/config.md");
  adw_about_window_add_link(a, _("Launching on clusters"), COHORT_WEBSITE "/docs/launching.md");
  /* TRANSLATORS: your names, one per line, for the About window. */
  adw_about_window_set_translator_credits(a, _("translator-credits"));
  g_autofree char *info = debug_info();
  adw_about_window_set_debug_info(a, info);
  adw_about_window_set_debug_info_filename(a, "cohort-debug-info.txt");
  gtk_window_present(GTK_WINDOW(about));
}

static void on_switch(GObject *sw, GParamSpec *pspec, gpointer data)
{
  (void)pspec;
  gboolean *field = g_object_get_data(sw, "cohort-field");
  *field = gtk_switch_get_active(GTK_SWITCH(sw));
  cohort_window_state_save(data);
}

static GtkWidget *switch_row(CohortWindow *win, const char *title, const char *subtitle,
                             gboolean *field)
{
  GtkWidget *row = adw_action_row_new();
  adw_preferences_row_set_title(ADW_PREFERENCES_ROW(row), title);
  adw_action_row_set_subtitle(ADW_ACTION_ROW(row), subtitle);
  GtkWidget *sw = gtk_switch_new();
  gtk_widget_set_valign(sw, GTK_ALIGN_CENTER);
  gtk_switch_set_active(GTK_SWITCH(sw), *field);
  g_object_set_data(G_OBJECT(sw), "cohort-field", field);
  g_signal_connect(sw, "notify::active", G_CALLBACK(on_switch), &win->state);
  adw_action_row_add_suffix(ADW_ACTION_ROW(row), sw);
  adw_action_row_set_activatable_widget(ADW_ACTION_ROW(row), sw);
  return row;
}

static void on_preferences(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  GtkWidget *prefs = adw_preferences_window_new();
  gtk_window_set_transient_for(GTK_WINDOW(prefs), GTK_WINDOW(win));
  gtk_window_set_modal(GTK_WINDOW(prefs), TRUE);
  adw_preferences_window_set_search_enabled(ADW_PREFERENCES_WINDOW(prefs), FALSE);
  GtkWidget *page = adw_preferences_page_new();
  GtkWidget *group = adw_preferences_group_new();
  adw_preferences_group_set_title(ADW_PREFERENCES_GROUP(group), _("Runs"));
  adw_preferences_group_add(
      ADW_PREFERENCES_GROUP(group),
      switch_row(win, _("Notify When a Run Ends"),
                 _("A desktop notification when a run completes, stops or fails while the window "
                   "is not in front"),
                 &win->state.notify));
  adw_preferences_group_add(ADW_PREFERENCES_GROUP(group),
                            switch_row(win, _("Ask Before Closing During a Run"),
                                       _("Closing the window stops the run; ask first"),
                                       &win->state.confirm_close));
  adw_preferences_page_add(ADW_PREFERENCES_PAGE(page), ADW_PREFERENCES_GROUP(group));
  adw_preferences_window_add(ADW_PREFERENCES_WINDOW(prefs), ADW_PREFERENCES_PAGE(page));
  g_object_set_data(G_OBJECT(win), "cohort-preferences", prefs);
  gtk_window_present(GTK_WINDOW(prefs));
}

void cohort_window_add_menu_actions(CohortWindow *win)
{
  static const GActionEntry actions[] = {
      {.name = "about", .activate = on_about},
      {.name = "preferences", .activate = on_preferences},
  };
  g_action_map_add_action_entries(G_ACTION_MAP(win), actions, G_N_ELEMENTS(actions), win);
  g_autoptr(GtkBuilder) b = gtk_builder_new_from_resource("/org/cohort/Trainer/help-overlay.ui");
  GtkShortcutsWindow *overlay = GTK_SHORTCUTS_WINDOW(gtk_builder_get_object(b, "help_overlay"));
  gtk_application_window_set_help_overlay(GTK_APPLICATION_WINDOW(win), overlay);
}
