#include "ui/app.h"

#include <glib/gi18n.h>
#include <locale.h>

#include "cohort-build-config.h"
#include "ui/run.h"
#include "ui/window.h"

static char *locale_dir;
static char *start_page;
static char *replay_path;
static char *replay_run;

static gboolean running_from_build_tree(void)
{
  g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
  if (self == NULL)
    return FALSE;
  g_autofree char *root = g_strconcat(COHORT_BUILD_ROOT, "/", NULL);
  return g_str_has_prefix(self, root);
}

const char *cohort_app_locale_dir(void)
{
  if (locale_dir == NULL) {
    const char *env = g_getenv("COHORT_LOCALEDIR");
    if (env != NULL && *env != '\0')
      locale_dir = g_strdup(env);
    else if (running_from_build_tree())
      locale_dir = g_build_filename(COHORT_BUILD_ROOT, "po", NULL);
    else
      locale_dir = g_strdup(COHORT_LOCALEDIR);
  }
  return locale_dir;
}

void cohort_app_init_i18n(void)
{
  const char *locale = setlocale(LC_ALL, "");
  const char *language = g_getenv("LANGUAGE");
  /* glibc ignores LANGUAGE under the "C" locale; C.UTF-8 is always there and honours it, so
   * `LANGUAGE=de cohort` works from a shell without LANG. */
  if (language != NULL && *language != '\0' &&
      (locale == NULL || g_str_equal(locale, "C") || g_str_equal(locale, "POSIX")))
    setlocale(LC_ALL, "C.UTF-8");
  bindtextdomain(GETTEXT_PACKAGE, cohort_app_locale_dir());
  bind_textdomain_codeset(GETTEXT_PACKAGE, "UTF-8");
  textdomain(GETTEXT_PACKAGE);
}

void cohort_app_load_css(void)
{
  static gboolean done;
  adw_init();
  GdkDisplay *display = gdk_display_get_default();
  if (done || display == NULL)
    return;
  g_autoptr(GtkCssProvider) css = gtk_css_provider_new();
  gtk_css_provider_load_from_resource(css, "/org/cohort/Trainer/style.css");
  gtk_style_context_add_provider_for_display(display, GTK_STYLE_PROVIDER(css),
                                             GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
  /* The application's icon (About) from the resources, also before it is installed; the
   * application adds this path by itself. */
  gtk_icon_theme_add_resource_path(gtk_icon_theme_get_for_display(display),
                                   "/org/cohort/Trainer/icons");
  done = TRUE;
}

static void on_activate(GApplication *app)
{
  GtkWindow *win = gtk_application_get_active_window(GTK_APPLICATION(app));
  if (win != NULL) {
    gtk_window_present(win);
    return;
  }
  /* AdwApplication has loaded style.css from the resource base path already. */
  win = GTK_WINDOW(cohort_window_new(GTK_APPLICATION(app)));
  /* Presented first, so a dialog opened for --page multinode stays above it. */
  gtk_window_present(win);
  if (replay_path != NULL) {
    cohort_run_set_replay_choice(replay_run);
    cohort_window_replay(COHORT_WINDOW(win), replay_path);
    cohort_window_show_page(COHORT_WINDOW(win), "run");
  }
  if (g_strcmp0(start_page, "multinode") == 0) {
    cohort_window_show_page(COHORT_WINDOW(win), "distributed");
    g_action_group_activate_action(G_ACTION_GROUP(win), "multinode", NULL);
  } else if (start_page != NULL) {
    cohort_window_show_page(COHORT_WINDOW(win), start_page);
  }
}

static void on_quit(GSimpleAction *action, GVariant *param, gpointer app)
{
  (void)action;
  (void)param;
  GList *windows = gtk_application_get_windows(GTK_APPLICATION(app));
  for (GList *l = windows; l != NULL; l = l->next)
    gtk_window_close(GTK_WINDOW(l->data));
}

static int on_local_options(GApplication *app, GVariantDict *options, gpointer data)
{
  (void)app;
  (void)data;
  if (g_variant_dict_contains(options, "version")) {
    g_print("cohort %s\n", COHORT_VERSION);
    return 0;
  }
  g_variant_dict_lookup(options, "page", "s", &start_page);
  g_variant_dict_lookup(options, "replay", "^ay", &replay_path);
  g_variant_dict_lookup(options, "run", "s", &replay_run);
  if (replay_run != NULL && replay_path == NULL) {
    g_printerr(_("cohort: --run needs --replay FILE (the run to show from it)\n"));
    return 2;
  }
  return -1;
}

GtkApplication *cohort_app_new(void)
{
  g_set_application_name(_("Cohort"));
  GtkApplication *app =
      GTK_APPLICATION(adw_application_new(COHORT_APP_ID, G_APPLICATION_DEFAULT_FLAGS));
  g_signal_connect(app, "activate", G_CALLBACK(on_activate), NULL);
  g_application_add_main_option(G_APPLICATION(app), "page", 0, 0, G_OPTION_ARG_STRING,
                                _("Page to show first: model, data, training, distributed, "
                                  "output, run or multinode"),
                                _("PAGE"));
  g_application_add_main_option(G_APPLICATION(app), "replay", 0, 0, G_OPTION_ARG_FILENAME,
                                _("Show a recorded progress stream (JSON Lines, or a "
                                  "workspace's events.jsonl) on the Run page"),
                                _("FILE"));
  g_application_add_main_option(G_APPLICATION(app), "run", 0, 0, G_OPTION_ARG_STRING,
                                _("With --replay of an events.jsonl: the run id to show "
                                  "(default: the last run)"),
                                _("ID"));
  g_application_add_main_option(G_APPLICATION(app), "version", 0, 0, G_OPTION_ARG_NONE,
                                _("Print the version and exit"), NULL);
  g_signal_connect(app, "handle-local-options", G_CALLBACK(on_local_options), NULL);

  static const GActionEntry actions[] = {{.name = "quit", .activate = on_quit}};
  g_action_map_add_action_entries(G_ACTION_MAP(app), actions, G_N_ELEMENTS(actions), app);
  static const struct {
    const char *action;
    const char *accel;
  } accels[] = {
      {"app.quit", "<Control>q"},        {"win.start", "<Control>Return"},
      {"win.resume", "<Control>r"},      {"win.stop", "<Control>period"},
      {"win.sample-now", "<Control>g"},  {"win.save-now", "<Control>k"},
      {"win.preset-save", "<Control>s"}, {"win.show-help-overlay", "<Control>question"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(accels); i++) {
    const char *one[] = {accels[i].accel, NULL};
    gtk_application_set_accels_for_action(app, accels[i].action, one);
  }
  return app;
}
