/* The window's presets: loading, saving, deleting, importing and exporting configurations,
 * the actions of the Presets menu and the Save button, and the dialogs they open. */
#include "ui/window-private.h"

#include <glib/gi18n.h>

#include "ui/preset-save-dialog.h"
#include "ui/presets.h"

void cohort_window_rebuild_preset_menu(CohortWindow *win)
{
  g_autoptr(GMenuModel) menu = cohort_ui_preset_menu_new();
  gtk_menu_button_set_menu_model(GTK_MENU_BUTTON(win->preset_button), menu);
}

void cohort_window_set_preset(CohortWindow *win, const char *name)
{
  g_free(win->preset);
  win->preset = g_strdup(name);
  cohort_window_update_title(win);
  cohort_window_update_state(win);
}

gboolean cohort_window_load_preset(CohortWindow *win, const char *name)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_preset_load(name, &error);
  if (cfg == NULL) {
    g_autofree char *msg =
        g_strdup_printf(_("Preset “%s” could not be opened: %s"), name, error->message);
    cohort_window_show_banner(win, msg);
    return FALSE;
  }
  cohort_window_show_banner(win, NULL);
  cohort_config_form_set_config(win->form, cfg);
  cohort_window_set_preset(win, name);
  return TRUE;
}

gboolean cohort_window_save_preset_as(CohortWindow *win, const char *name, GError **error)
{
  if (!cohort_preset_save(cohort_config_form_get_config(win->form), name, error))
    return FALSE;
  cohort_window_set_preset(win, name);
  cohort_window_rebuild_preset_menu(win);
  return TRUE;
}

gboolean cohort_window_delete_preset(CohortWindow *win, const char *name, GError **error)
{
  if (!cohort_preset_delete(name, error))
    return FALSE;
  if (g_strcmp0(win->preset, name) == 0)
    cohort_window_set_preset(win, NULL);
  cohort_window_rebuild_preset_menu(win);
  cohort_window_update_state(win);
  return TRUE;
}

gboolean cohort_window_import(CohortWindow *win, const char *path)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_config_load_file(path, &error);
  if (cfg == NULL) {
    g_autofree char *msg = g_strdup_printf(_("Could not import: %s"), error->message);
    cohort_window_show_banner(win, msg);
    return FALSE;
  }
  cohort_window_show_banner(win, NULL);
  cohort_config_form_set_config(win->form, cfg);
  cohort_window_set_preset(win, NULL);
  return TRUE;
}

gboolean cohort_window_export(CohortWindow *win, const char *path, GError **error)
{
  return cohort_config_save_file(cohort_config_form_get_config(win->form), path, error);
}

static void report_error(CohortWindow *win, GError *error)
{
  cohort_window_show_banner(win, error->message);
}

static void on_load_preset(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  cohort_window_load_preset(data, g_variant_get_string(param, NULL));
}

static void on_save_as_response(CohortPresetSaveDialog *dialog, int response, CohortWindow *win)
{
  if (response == GTK_RESPONSE_ACCEPT) {
    g_autoptr(GError) error = NULL;
    if (!cohort_window_save_preset_as(win, cohort_preset_save_dialog_get_name(dialog), &error))
      report_error(win, error);
  }
  gtk_window_destroy(GTK_WINDOW(dialog));
}

static void save_as_dialog(CohortWindow *win)
{
  GtkWidget *dialog = cohort_preset_save_dialog_new(GTK_WINDOW(win), win->preset);
  g_signal_connect(dialog, "response", G_CALLBACK(on_save_as_response), win);
  gtk_window_present(GTK_WINDOW(dialog));
}

static void on_preset_save(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  if (win->preset != NULL && cohort_preset_is_user(win->preset)) {
    g_autoptr(GError) error = NULL;
    g_autofree char *name = g_strdup(win->preset);
    if (!cohort_window_save_preset_as(win, name, &error))
      report_error(win, error);
    else
      gtk_label_set_text(GTK_LABEL(win->status_label), _("Preset saved."));
    return;
  }
  save_as_dialog(win);
}

static void on_preset_save_as(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  save_as_dialog(data);
}

static void on_delete_response(GtkDialog *dialog, int response, gpointer data)
{
  CohortWindow *win = data;
  const char *name = g_object_get_data(G_OBJECT(dialog), "cohort-name");
  if (response == GTK_RESPONSE_ACCEPT) {
    g_autoptr(GError) error = NULL;
    if (!cohort_window_delete_preset(win, name, &error))
      report_error(win, error);
  }
  gtk_window_destroy(GTK_WINDOW(dialog));
}

static void on_preset_delete(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  if (win->preset == NULL || !cohort_preset_is_user(win->preset))
    return;
  GtkWidget *dialog =
      gtk_message_dialog_new(GTK_WINDOW(win), GTK_DIALOG_MODAL, GTK_MESSAGE_QUESTION,
                             GTK_BUTTONS_NONE, _("Delete the preset “%s”?"), win->preset);
  gtk_message_dialog_format_secondary_text(GTK_MESSAGE_DIALOG(dialog),
                                           _("The preset file is removed; this cannot be undone."));
  gtk_dialog_add_buttons(GTK_DIALOG(dialog), _("_Cancel"), GTK_RESPONSE_CANCEL, _("_Delete"),
                         GTK_RESPONSE_ACCEPT, NULL);
  GtkWidget *del = gtk_dialog_get_widget_for_response(GTK_DIALOG(dialog), GTK_RESPONSE_ACCEPT);
  gtk_widget_add_css_class(del, "destructive-action");
  g_object_set_data_full(G_OBJECT(dialog), "cohort-name", g_strdup(win->preset), g_free);
  g_signal_connect(dialog, "response", G_CALLBACK(on_delete_response), win);
  gtk_window_present(GTK_WINDOW(dialog));
}

static GtkFileFilter *json_filter(void)
{
  GtkFileFilter *f = gtk_file_filter_new();
  gtk_file_filter_set_name(f, _("Cohort configurations (JSON)"));
  gtk_file_filter_add_pattern(f, "*.json");
  return f;
}

static void on_import_response(GtkNativeDialog *native, int response, gpointer data)
{
  CohortWindow *win = data;
  if (response == GTK_RESPONSE_ACCEPT) {
    g_autoptr(GFile) file = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(native));
    g_autofree char *path = file != NULL ? g_file_get_path(file) : NULL;
    if (path != NULL)
      cohort_window_import(win, path);
  }
  g_object_unref(native);
}

static void on_export_response(GtkNativeDialog *native, int response, gpointer data)
{
  CohortWindow *win = data;
  if (response == GTK_RESPONSE_ACCEPT) {
    g_autoptr(GFile) file = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(native));
    g_autofree char *path = file != NULL ? g_file_get_path(file) : NULL;
    g_autoptr(GError) error = NULL;
    if (path != NULL && !cohort_window_export(win, path, &error))
      report_error(win, error);
  }
  g_object_unref(native);
}

/* A native file chooser over the window that shows JSON files. */
static GtkFileChooserNative *json_chooser_new(CohortWindow *win, const char *title,
                                              GtkFileChooserAction action, const char *accept)
{
  GtkFileChooserNative *native =
      gtk_file_chooser_native_new(title, GTK_WINDOW(win), action, accept, _("_Cancel"));
  g_autoptr(GtkFileFilter) filter = json_filter();
  gtk_file_chooser_add_filter(GTK_FILE_CHOOSER(native), filter);
  return native;
}

static void on_preset_import(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  GtkFileChooserNative *native =
      json_chooser_new(win, _("Import configuration"), GTK_FILE_CHOOSER_ACTION_OPEN, _("_Import"));
  g_signal_connect(native, "response", G_CALLBACK(on_import_response), win);
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(native));
}

static void on_preset_export(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  GtkFileChooserNative *native =
      json_chooser_new(win, _("Export configuration"), GTK_FILE_CHOOSER_ACTION_SAVE, _("_Export"));
  g_autofree char *name = g_strdup_printf("%s.json", win->preset ? win->preset : "config");
  gtk_file_chooser_set_current_name(GTK_FILE_CHOOSER(native), name);
  g_signal_connect(native, "response", G_CALLBACK(on_export_response), win);
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(native));
}

void cohort_window_add_preset_actions(CohortWindow *win)
{
  static const GActionEntry actions[] = {
      {.name = "load-preset", .activate = on_load_preset, .parameter_type = "s"},
      {.name = "preset-save", .activate = on_preset_save},
      {.name = "preset-save-as", .activate = on_preset_save_as},
      {.name = "preset-delete", .activate = on_preset_delete},
      {.name = "preset-import", .activate = on_preset_import},
      {.name = "preset-export", .activate = on_preset_export},
  };
  g_action_map_add_action_entries(G_ACTION_MAP(win), actions, G_N_ELEMENTS(actions), win);
}
