/* The window's presets: loading (asking first when the shown preset has unsaved changes),
 * saving, deleting with Undo, importing as a new preset, exporting, the Presets menu (which
 * marks the preset shown) and the Save button. Saves, imports and exports confirm in a toast.
 * A preset saved under a new name, or imported, gets a workspace_dir of its own when its
 * folder is another preset's, so two presets never write into one run folder. */
#include "ui/window-private.h"

#include <glib/gi18n.h>
#include <string.h>

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
  g_clear_pointer(&win->preset_cfg, cohort_config_free);
  if (name != NULL)
    win->preset_cfg = cohort_config_copy(cohort_config_form_get_config(win->form));
  /* The menu's radio mark follows the action's state. */
  GAction *a = g_action_map_lookup_action(G_ACTION_MAP(win), "load-preset");
  g_simple_action_set_state(G_SIMPLE_ACTION(a), g_variant_new_string(name ? name : ""));
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

/* When the workspace is another preset's, the preset being saved as `name` gets its own:
 * runs/<name>. */
static void own_workspace(CohortWindow *win, const char *name)
{
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *mine = cohort_resolve_path(cfg->workspace_dir);
  g_auto(GStrv) all = cohort_preset_list(FALSE);
  gboolean shared = FALSE;
  for (char **n = all; n != NULL && *n != NULL && !shared; n++) {
    if (g_str_equal(*n, name))
      continue;
    g_autoptr(CohortConfig) other = cohort_preset_load(*n, NULL);
    g_autofree char *theirs = other != NULL ? cohort_resolve_path(other->workspace_dir) : NULL;
    shared = theirs != NULL && g_str_equal(theirs, mine);
  }
  if (!shared)
    return;
  g_autofree char *safe = g_strdup(name);
  g_strdelimit(safe, G_DIR_SEPARATOR_S " ", '-');
  g_autofree char *ws = g_build_filename("runs", safe, NULL);
  cohort_config_form_set_text(win->form, "workspace_dir", ws);
}

gboolean cohort_window_save_preset_as(CohortWindow *win, const char *name, GError **error)
{
  if (!cohort_preset_name_valid(name, error))
    return FALSE;
  if (g_strcmp0(name, win->preset) != 0)
    own_workspace(win, name);
  if (!cohort_preset_save(cohort_config_form_get_config(win->form), name, error))
    return FALSE;
  cohort_window_set_preset(win, name);
  cohort_window_rebuild_preset_menu(win);
  g_autofree char *msg = g_strdup_printf(_("Preset “%s” saved"), name);
  cohort_window_toast(win, msg, NULL);
  return TRUE;
}

gboolean cohort_window_delete_preset(CohortWindow *win, const char *name, GError **error)
{
  g_autoptr(CohortConfig) kept = cohort_preset_load(name, NULL);
  if (!cohort_preset_delete(name, error))
    return FALSE;
  /* Kept for the toast's Undo. */
  g_clear_pointer(&win->deleted, cohort_config_free);
  win->deleted = g_steal_pointer(&kept);
  g_free(win->deleted_name);
  win->deleted_name = g_strdup(name);
  if (g_strcmp0(win->preset, name) == 0)
    cohort_window_set_preset(win, NULL);
  cohort_window_rebuild_preset_menu(win);
  cohort_window_update_state(win);
  g_autofree char *msg = g_strdup_printf(_("Preset “%s” deleted"), name);
  cohort_window_toast(win, msg, win->deleted != NULL ? "win.preset-undo-delete" : NULL);
  return TRUE;
}

static void on_undo_delete(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  if (win->deleted == NULL)
    return;
  g_autoptr(GError) error = NULL;
  if (!cohort_preset_save(win->deleted, win->deleted_name, &error)) {
    cohort_window_show_banner(win, error->message);
    return;
  }
  g_autofree char *msg = g_strdup_printf(_("Preset “%s” restored"), win->deleted_name);
  /* It is shown again when nothing else was picked meanwhile. */
  if (win->preset == NULL && !cohort_window_is_modified(win))
    cohort_window_load_preset(win, win->deleted_name);
  g_clear_pointer(&win->deleted, cohort_config_free);
  g_clear_pointer(&win->deleted_name, g_free);
  cohort_window_rebuild_preset_menu(win);
  cohort_window_toast(win, msg, NULL);
}

/* A user preset name for an imported file: its name without ".json", made valid, and "-2",
 * "-3"… when a preset has it already. */
static char *import_name(const char *path)
{
  g_autofree char *base = g_path_get_basename(path);
  if (g_str_has_suffix(base, ".json"))
    base[strlen(base) - strlen(".json")] = '\0';
  g_strdelimit(base, G_DIR_SEPARATOR_S, '-');
  while (base[0] == '.')
    base[0] = '-';
  if (*base == '\0' || !g_utf8_validate(base, -1, NULL) || g_utf8_strlen(base, -1) > 60) {
    g_free(base);
    base = g_strdup(_("imported"));
  }
  g_auto(GStrv) all = cohort_preset_list(FALSE);
  char *name = g_strdup(base);
  for (int n = 2; g_strv_contains((const char *const *)all, name); n++) {
    g_free(name);
    name = g_strdup_printf("%s-%d", base, n);
  }
  return name;
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
  g_autofree char *name = import_name(path);
  if (!cohort_window_save_preset_as(win, name, &error)) {
    /* The settings are shown all the same; only the preset could not be made. */
    cohort_window_set_preset(win, NULL);
    g_autofree char *msg =
        g_strdup_printf(_("Imported, but not saved as a preset: %s"), error->message);
    cohort_window_show_banner(win, msg);
    return TRUE;
  }
  g_autofree char *msg = g_strdup_printf(_("Imported as the preset “%s”"), name);
  cohort_window_toast(win, msg, NULL);
  return TRUE;
}

gboolean cohort_window_export(CohortWindow *win, const char *path, GError **error)
{
  if (!cohort_config_save_file(cohort_config_form_get_config(win->form), path, error))
    return FALSE;
  g_autofree char *base = g_path_get_basename(path);
  g_autofree char *msg = g_strdup_printf(_("Exported to “%s”"), base);
  cohort_window_toast(win, msg, NULL);
  return TRUE;
}

static void report_error(CohortWindow *win, GError *error)
{
  cohort_window_show_banner(win, error->message);
}

/* Switching presets with unsaved changes asks: save them, discard them, or stay. */
static void on_switch_answer(AdwMessageDialog *dialog, const char *response, CohortWindow *win)
{
  win->question = NULL;
  const char *target = g_object_get_data(G_OBJECT(dialog), "cohort-target");
  g_autoptr(GError) error = NULL;
  if (g_str_equal(response, "save")) {
    g_autofree char *current = g_strdup(win->preset);
    if (cohort_preset_is_user(current) && !cohort_window_save_preset_as(win, current, &error)) {
      report_error(win, error);
      return;
    }
    if (!cohort_preset_is_user(current)) {
      /* A built-in preset cannot be overwritten: keep the edits under a new name. */
      g_autofree char *copy = import_name(current);
      if (!cohort_window_save_preset_as(win, copy, &error)) {
        report_error(win, error);
        return;
      }
    }
  }
  if (g_str_equal(response, "save") || g_str_equal(response, "discard"))
    cohort_window_load_preset(win, target);
}

static void ask_before_switching(CohortWindow *win, const char *target)
{
  g_autofree char *heading = g_strdup_printf(_("Save Changes to “%s”?"), win->preset);
  GtkWidget *d = adw_message_dialog_new(
      GTK_WINDOW(win), heading,
      cohort_preset_is_user(win->preset)
          ? _("The settings were changed since the preset was loaded. Opening another preset "
              "replaces them.")
          : _("The settings were changed since the preset was loaded. Built-in presets stay as "
              "they are: saving keeps the changes as a preset of your own."));
  adw_message_dialog_add_responses(ADW_MESSAGE_DIALOG(d), "cancel", _("_Cancel"), "discard",
                                   _("_Discard"), "save", _("_Save"), NULL);
  adw_message_dialog_set_response_appearance(ADW_MESSAGE_DIALOG(d), "discard",
                                             ADW_RESPONSE_DESTRUCTIVE);
  adw_message_dialog_set_response_appearance(ADW_MESSAGE_DIALOG(d), "save", ADW_RESPONSE_SUGGESTED);
  adw_message_dialog_set_default_response(ADW_MESSAGE_DIALOG(d), "save");
  adw_message_dialog_set_close_response(ADW_MESSAGE_DIALOG(d), "cancel");
  g_object_set_data_full(G_OBJECT(d), "cohort-target", g_strdup(target), g_free);
  g_signal_connect(d, "response", G_CALLBACK(on_switch_answer), win);
  win->question = d;
  gtk_window_present(GTK_WINDOW(d));
}

static void on_load_preset(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  CohortWindow *win = data;
  const char *name = g_variant_get_string(param, NULL);
  if (cohort_window_is_modified(win) && g_strcmp0(name, win->preset) != 0)
    ask_before_switching(win, name);
  else
    cohort_window_load_preset(win, name);
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

static void on_preset_delete(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  g_autoptr(GError) error = NULL;
  if (win->preset != NULL && cohort_preset_is_user(win->preset)) {
    g_autofree char *name = g_strdup(win->preset);
    if (!cohort_window_delete_preset(win, name, &error))
      report_error(win, error);
  }
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
  g_autoptr(GtkFileFilter) filter = gtk_file_filter_new();
  gtk_file_filter_set_name(filter, _("Cohort configurations (JSON)"));
  gtk_file_filter_add_pattern(filter, "*.json");
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
      {.name = "load-preset", .activate = on_load_preset, .parameter_type = "s", .state = "''"},
      {.name = "preset-save", .activate = on_preset_save},
      {.name = "preset-save-as", .activate = on_preset_save_as},
      {.name = "preset-delete", .activate = on_preset_delete},
      {.name = "preset-undo-delete", .activate = on_undo_delete},
      {.name = "preset-import", .activate = on_preset_import},
      {.name = "preset-export", .activate = on_preset_export},
  };
  g_action_map_add_action_entries(G_ACTION_MAP(win), actions, G_N_ELEMENTS(actions), win);
}
