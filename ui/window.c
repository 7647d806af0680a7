#include "ui/window.h"

#include <glib/gi18n.h>
#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>

#include "cohort-build-config.h"
#include "engine/distributed/comm.h"
#include "ui/dist-page.h"
#include "ui/gpu-detect.h"
#include "ui/key-labels.h"
#include "ui/presets.h"
#include "ui/programs.h"
#include "ui/run-page.h"

/* Seconds between SIGTERM and SIGKILL when stopping: the engine saves a checkpoint first. */
#define STOP_GRACE_S 20.0

struct _CohortWindow {
  GtkApplicationWindow parent_instance;
  GtkWidget *preset_button;
  GtkWidget *start_button;
  GtkWidget *stop_button;
  GtkWidget *banner;
  GtkWidget *banner_label;
  GtkWidget *stack;
  GtkWidget *summary_label;
  GtkWidget *status_label;

  CohortConfigForm *form;
  CohortRun *run;
  GtkWidget *run_page;
  GtkWidget *dist_top;
  CohortMultinodeDialog *multinode;
  GCancellable *cancel;
  char *preset;
  guint save_source; /* pending write of the last used config */
  int gpus;
  gboolean closing;
};

G_DEFINE_FINAL_TYPE(CohortWindow, cohort_window, GTK_TYPE_APPLICATION_WINDOW)

static void show_banner(CohortWindow *win, const char *text)
{
  gtk_label_set_text(GTK_LABEL(win->banner_label), text);
  gtk_info_bar_set_revealed(GTK_INFO_BAR(win->banner), text != NULL);
}

static void on_banner_response(CohortWindow *win, int response)
{
  (void)response;
  show_banner(win, NULL);
}

static void update_title(CohortWindow *win)
{
  g_autofree char *title =
      win->preset != NULL ? g_strdup_printf(_("Cohort — %s"), win->preset) : g_strdup(_("Cohort"));
  gtk_window_set_title(GTK_WINDOW(win), title);
}

static void rebuild_preset_menu(CohortWindow *win)
{
  g_autoptr(GMenuModel) menu = cohort_ui_preset_menu_new();
  gtk_menu_button_set_menu_model(GTK_MENU_BUTTON(win->preset_button), menu);
}

static void set_action_enabled(CohortWindow *win, const char *name, gboolean enabled)
{
  GAction *a = g_action_map_lookup_action(G_ACTION_MAP(win), name);
  if (a != NULL)
    g_simple_action_set_enabled(G_SIMPLE_ACTION(a), enabled);
}

static void update_state(CohortWindow *win)
{
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  int world = cohort_ui_world_size(cfg, win->gpus);
  int global = cohort_config_global_batch(cfg, world);
  double lr = cohort_config_scaled_lr(cfg, world);
  g_autofree char *tokens = g_strdup_printf("%" G_GINT64_FORMAT, (gint64)global * cfg->seq_len);
  g_autofree char *lr_scaled = g_strdup_printf("%g", lr);
  g_autofree char *lr_base = g_strdup_printf("%g", cfg->learning_rate);
  g_autofree char *scaling = cohort_config_get(cfg, "lr_scaling");
  g_autofree char *summary = g_strdup_printf(
      _("Batch per process %d × accumulation %d × world size %d = global batch %d sequences "
        "(%s tokens) · learning rate %s → %s (scaling: %s)"),
      cfg->batch_size, cfg->gradient_accumulation_steps, world, global, tokens, lr_base, lr_scaled,
      cohort_key_choice_label(scaling));
  gtk_label_set_text(GTK_LABEL(win->summary_label), summary);

  gboolean running = cohort_run_is_running(win->run);
  guint n_errors = cohort_config_form_count_errors(win->form);
  g_autoptr(GError) unsupported = NULL;
  gboolean supported = cohort_config_check_supported(cfg, _("settings"), &unsupported);
  g_autofree char *status = NULL;
  if (n_errors > 0)
    status = g_strdup_printf(
        ngettext("%u setting is not valid: %s", "%u settings are not valid; first: %s", n_errors),
        n_errors, cohort_config_form_first_error(win->form));
  else if (!supported)
    status = g_strdup_printf(_("Cannot start on this build: %s"), unsupported->message);
  else if (running)
    status = g_strdup(_("Training runs; see the Run page."));
  else
    status = g_strdup(_("Ready to start."));
  gtk_label_set_text(GTK_LABEL(win->status_label), status);
  if (n_errors > 0 || !supported)
    gtk_widget_add_css_class(win->status_label, "error");
  else
    gtk_widget_remove_css_class(win->status_label, "error");

  set_action_enabled(win, "start", !running && n_errors == 0 && supported);
  set_action_enabled(win, "stop", running);
  set_action_enabled(win, "preset-delete",
                     win->preset != NULL && cohort_ui_preset_is_user(win->preset));
}

static void save_last(CohortWindow *win);

static gboolean save_last_now(gpointer data)
{
  CohortWindow *win = data;
  win->save_source = 0;
  save_last(win);
  return G_SOURCE_REMOVE;
}

static void on_form_changed(CohortWindow *win)
{
  update_state(win);
  /* The last used config is written a moment after edits stop, so a crash or a killed
   * session loses at most that moment. */
  g_clear_handle_id(&win->save_source, g_source_remove);
  win->save_source = g_timeout_add_seconds(1, save_last_now, win);
}

/* --- presets ------------------------------------------------------------------------- */

static void set_preset(CohortWindow *win, const char *name)
{
  g_free(win->preset);
  win->preset = g_strdup(name);
  update_title(win);
  update_state(win);
}

gboolean cohort_window_load_preset(CohortWindow *win, const char *name)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_preset_load(name, &error);
  if (cfg == NULL) {
    g_autofree char *msg =
        g_strdup_printf(_("Preset “%s” could not be opened: %s"), name, error->message);
    show_banner(win, msg);
    return FALSE;
  }
  show_banner(win, NULL);
  cohort_config_form_set_config(win->form, cfg);
  set_preset(win, name);
  return TRUE;
}

const char *cohort_window_get_preset(CohortWindow *win)
{
  return win->preset;
}

gboolean cohort_window_save_preset_as(CohortWindow *win, const char *name, GError **error)
{
  if (!cohort_ui_preset_save(cohort_config_form_get_config(win->form), name, error))
    return FALSE;
  set_preset(win, name);
  rebuild_preset_menu(win);
  return TRUE;
}

gboolean cohort_window_delete_preset(CohortWindow *win, const char *name, GError **error)
{
  if (!cohort_ui_preset_delete(name, error))
    return FALSE;
  if (g_strcmp0(win->preset, name) == 0)
    set_preset(win, NULL);
  rebuild_preset_menu(win);
  update_state(win);
  return TRUE;
}

gboolean cohort_window_import(CohortWindow *win, const char *path)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_config_load_file(path, &error);
  if (cfg == NULL) {
    g_autofree char *msg = g_strdup_printf(_("Could not import: %s"), error->message);
    show_banner(win, msg);
    return FALSE;
  }
  show_banner(win, NULL);
  cohort_config_form_set_config(win->form, cfg);
  set_preset(win, NULL);
  return TRUE;
}

gboolean cohort_window_export(CohortWindow *win, const char *path, GError **error)
{
  return cohort_config_save_file(cohort_config_form_get_config(win->form), path, error);
}

static void report_error(CohortWindow *win, GError *error)
{
  show_banner(win, error->message);
}

static void on_load_preset(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  cohort_window_load_preset(data, g_variant_get_string(param, NULL));
}

static void on_save_as_response(GtkDialog *dialog, int response, gpointer data)
{
  CohortWindow *win = data;
  if (response == GTK_RESPONSE_ACCEPT) {
    GtkEditable *entry = g_object_get_data(G_OBJECT(dialog), "cohort-entry");
    g_autoptr(GError) error = NULL;
    if (!cohort_window_save_preset_as(win, gtk_editable_get_text(entry), &error)) {
      report_error(win, error);
    }
  }
  gtk_window_destroy(GTK_WINDOW(dialog));
}

static void save_as_dialog(CohortWindow *win)
{
  GtkWidget *dialog = gtk_dialog_new_with_buttons(
      _("Save preset as"), GTK_WINDOW(win), GTK_DIALOG_MODAL | GTK_DIALOG_USE_HEADER_BAR,
      _("_Cancel"), GTK_RESPONSE_CANCEL, _("_Save"), GTK_RESPONSE_ACCEPT, NULL);
  gtk_dialog_set_default_response(GTK_DIALOG(dialog), GTK_RESPONSE_ACCEPT);
  GtkWidget *box = gtk_dialog_get_content_area(GTK_DIALOG(dialog));
  gtk_box_set_spacing(GTK_BOX(box), 6);
  gtk_widget_set_margin_start(box, 18);
  gtk_widget_set_margin_end(box, 18);
  gtk_widget_set_margin_top(box, 12);
  gtk_widget_set_margin_bottom(box, 12);
  GtkWidget *label = gtk_label_new(_("Name of the preset:"));
  gtk_label_set_xalign(GTK_LABEL(label), 0);
  GtkWidget *entry = gtk_entry_new();
  gtk_entry_set_activates_default(GTK_ENTRY(entry), TRUE);
  if (win->preset != NULL)
    gtk_editable_set_text(GTK_EDITABLE(entry), win->preset);
  gtk_box_append(GTK_BOX(box), label);
  gtk_box_append(GTK_BOX(box), entry);
  g_object_set_data(G_OBJECT(dialog), "cohort-entry", entry);
  g_signal_connect(dialog, "response", G_CALLBACK(on_save_as_response), win);
  gtk_window_present(GTK_WINDOW(dialog));
}

static void on_preset_save(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  if (win->preset != NULL && cohort_ui_preset_is_user(win->preset)) {
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
  if (win->preset == NULL || !cohort_ui_preset_is_user(win->preset))
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

/* --- running ------------------------------------------------------------------------- */

static void save_last(CohortWindow *win)
{
  g_autofree char *path = cohort_ui_last_config_path();
  g_autofree char *dir = g_path_get_dirname(path);
  g_mkdir_with_parents(dir, 0755);
  /* Best effort: failing to remember the last config must not stop anything. */
  cohort_config_save_file(cohort_config_form_get_config(win->form), path, NULL);
}

gboolean cohort_window_start(CohortWindow *win, GError **error)
{
  if (!cohort_window_can_start(win)) {
    g_set_error(error, COHORT_UI_ERROR, COHORT_UI_ERROR_FAILED, "%s",
                gtk_label_get_text(GTK_LABEL(win->status_label)));
    return FALSE;
  }
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  if (g_mkdir_with_parents(ws, 0755) != 0) {
    int e = errno;
    g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), _("%s: cannot create: %s"), ws,
                g_strerror(e));
    return FALSE;
  }
  g_autofree char *config_path = g_build_filename(ws, "run.json", NULL);
  if (!cohort_config_save_file(cfg, config_path, error))
    return FALSE;
  g_auto(GStrv) argv = cohort_ui_launch_argv(cfg, config_path, win->gpus, error);
  if (argv == NULL)
    return FALSE;
  save_last(win);

  cohort_run_page_reset(win->run_page);
  g_autofree char *joined = g_strjoinv(" ", argv);
  g_autofree char *line = g_strdup_printf("$ %s", joined);
  cohort_run_page_append_log(win->run_page, line);
  if (!cohort_run_start(win->run, (const char *const *)argv, NULL, error))
    return FALSE;
  cohort_run_page_set_status(win->run_page, _("Starting…"));
  gtk_stack_set_visible_child_name(GTK_STACK(win->stack), "run");
  update_state(win);
  return TRUE;
}

void cohort_window_stop(CohortWindow *win)
{
  if (!cohort_run_is_running(win->run))
    return;
  cohort_run_page_set_status(win->run_page, _("Stopping: waiting for every process to end…"));
  cohort_run_stop(win->run, STOP_GRACE_S);
}

void cohort_window_replay(CohortWindow *win, const char *path)
{
  g_autoptr(GFile) file = g_file_new_for_path(path);
  g_autoptr(GError) error = NULL;
  g_autoptr(GFileInputStream) in = g_file_read(file, NULL, &error);
  if (in == NULL) {
    show_banner(win, error->message);
    return;
  }
  cohort_run_page_reset(win->run_page);
  cohort_run_replay(win->run, G_INPUT_STREAM(in));
  update_state(win);
}

static void on_start(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  g_autoptr(GError) error = NULL;
  if (!cohort_window_start(win, &error)) {
    g_autofree char *msg = g_strdup_printf(_("Could not start: %s"), error->message);
    show_banner(win, msg);
  }
}

static void on_stop(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  cohort_window_stop(data);
}

static void on_multinode(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  CohortWindow *win = data;
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *ws = cohort_resolve_path(cfg->workspace_dir);
  g_autofree char *abs = g_canonicalize_filename(ws, NULL);
  g_autofree char *path = g_build_filename(abs, "run.json", NULL);
  cohort_multinode_dialog_set_config_path(win->multinode, path);
  gtk_window_present(GTK_WINDOW(win->multinode));
}

static void on_run_event(CohortRun *run, JsonObject *ev, CohortWindow *win)
{
  (void)run;
  cohort_run_page_handle_event(win->run_page, ev);
}

static void on_run_output(CohortRun *run, const char *line, CohortWindow *win)
{
  (void)run;
  cohort_run_page_append_log(win->run_page, line);
}

static void on_run_finished(CohortRun *run, const char *summary, CohortWindow *win)
{
  (void)run;
  cohort_run_page_set_status(win->run_page, summary);
  cohort_run_page_append_log(win->run_page, summary);
  update_state(win);
  gtk_label_set_text(GTK_LABEL(win->status_label), summary);
}

static void on_gpus(GPtrArray *gpus, gpointer data)
{
  CohortWindow *win = data;
  win->gpus = (int)gpus->len;
  cohort_dist_page_set_gpus(win->dist_top, gpus);
  g_ptr_array_unref(gpus);
  update_state(win);
}

/* --- life cycle ---------------------------------------------------------------------- */

static void on_closing_finished(CohortRun *run, const char *summary, GApplication *app)
{
  (void)run;
  (void)summary;
  g_application_release(app);
}

static gboolean on_close_request(GtkWindow *window)
{
  CohortWindow *win = COHORT_WINDOW(window);
  save_last(win);
  if (cohort_run_is_running(win->run) && !win->closing) {
    /* Keep the application alive until the run has ended, so no rank outlives it. */
    GApplication *app = G_APPLICATION(gtk_window_get_application(window));
    win->closing = TRUE;
    if (app != NULL) {
      g_application_hold(app);
      g_signal_connect_object(win->run, "finished", G_CALLBACK(on_closing_finished), app, 0);
    }
    cohort_run_stop(win->run, STOP_GRACE_S);
  }
  return FALSE;
}

gboolean cohort_window_can_start(CohortWindow *win)
{
  GAction *a = g_action_map_lookup_action(G_ACTION_MAP(win), "start");
  return g_action_get_enabled(a);
}

static void restore_last(CohortWindow *win)
{
  g_autofree char *path = cohort_ui_last_config_path();
  if (g_file_test(path, G_FILE_TEST_EXISTS)) {
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortConfig) cfg = cohort_config_load_file(path, &error);
    if (cfg != NULL) {
      cohort_config_form_set_config(win->form, cfg);
      return;
    }
    g_autofree char *msg = g_strdup_printf(
        _("The last used settings could not be restored, so the defaults are shown: %s"),
        error->message);
    show_banner(win, msg);
  }
  g_autoptr(CohortConfig) cfg = cohort_preset_load("tiny-gpt", NULL);
  if (cfg != NULL) {
    cohort_config_form_set_config(win->form, cfg);
    set_preset(win, "tiny-gpt");
  }
}

static void add_page(CohortWindow *win, GtkWidget *page, const char *name, const char *title)
{
  gtk_stack_add_titled(GTK_STACK(win->stack), page, name, title);
}

static void cohort_window_dispose(GObject *obj)
{
  CohortWindow *win = COHORT_WINDOW(obj);
  if (win->cancel != NULL)
    g_cancellable_cancel(win->cancel);
  g_clear_object(&win->cancel);
  if (win->save_source != 0) {
    g_clear_handle_id(&win->save_source, g_source_remove);
    save_last(win);
  }
  if (win->run != NULL)
    g_signal_handlers_disconnect_by_data(win->run, win);
  if (win->form != NULL)
    g_signal_handlers_disconnect_by_data(win->form, win);
  if (win->multinode != NULL)
    gtk_window_destroy(GTK_WINDOW(win->multinode));
  win->multinode = NULL;
  gtk_widget_dispose_template(GTK_WIDGET(obj), COHORT_TYPE_WINDOW);
  g_clear_object(&win->run);
  g_clear_object(&win->form);
  g_clear_pointer(&win->preset, g_free);
  G_OBJECT_CLASS(cohort_window_parent_class)->dispose(obj);
}

static void cohort_window_class_init(CohortWindowClass *klass)
{
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  G_OBJECT_CLASS(klass)->dispose = cohort_window_dispose;
  GTK_WINDOW_CLASS(klass)->close_request = on_close_request;
  gtk_widget_class_set_template_from_resource(wc, "/org/cohort/Trainer/window.ui");
  gtk_widget_class_bind_template_child(wc, CohortWindow, preset_button);
  gtk_widget_class_bind_template_child(wc, CohortWindow, start_button);
  gtk_widget_class_bind_template_child(wc, CohortWindow, stop_button);
  gtk_widget_class_bind_template_child(wc, CohortWindow, banner);
  gtk_widget_class_bind_template_child(wc, CohortWindow, banner_label);
  gtk_widget_class_bind_template_child(wc, CohortWindow, stack);
  gtk_widget_class_bind_template_child(wc, CohortWindow, summary_label);
  gtk_widget_class_bind_template_child(wc, CohortWindow, status_label);
  gtk_widget_class_bind_template_callback(wc, on_banner_response);
}

static void cohort_window_init(CohortWindow *win)
{
  gtk_widget_init_template(GTK_WIDGET(win));
  win->cancel = g_cancellable_new();

  static const GActionEntry actions[] = {
      {.name = "start", .activate = on_start},
      {.name = "stop", .activate = on_stop},
      {.name = "load-preset", .activate = on_load_preset, .parameter_type = "s"},
      {.name = "preset-save", .activate = on_preset_save},
      {.name = "preset-save-as", .activate = on_preset_save_as},
      {.name = "preset-delete", .activate = on_preset_delete},
      {.name = "preset-import", .activate = on_preset_import},
      {.name = "preset-export", .activate = on_preset_export},
      {.name = "multinode", .activate = on_multinode},
  };
  g_action_map_add_action_entries(G_ACTION_MAP(win), actions, G_N_ELEMENTS(actions), win);

  win->form = cohort_config_form_new();
  /* NCCL only when the engine has the backend, not merely CUDA kernels. */
  if (!cohort_comm_backend_available("nccl"))
    cohort_config_form_hide_choice(win->form, "distributed_backend", "nccl",
                                   _("NCCL needs a build with the NCCL backend; choose Gloo"));

  win->multinode = cohort_multinode_dialog_new(GTK_WINDOW(win), win->form);
  win->dist_top = cohort_dist_page_top_new();
  for (const char *const *g = cohort_key_groups(); *g != NULL; g++) {
    gboolean dist = g_str_equal(*g, "distributed");
    GtkWidget *page =
        cohort_config_form_build_page(win->form, *g, NULL, dist ? win->dist_top : NULL);
    add_page(win, page, *g, cohort_key_group_title(*g));
  }
  win->run_page = cohort_run_page_new();
  add_page(win, win->run_page, "run", _("Run"));

  win->run = cohort_run_new();
  g_signal_connect(win->run, "event", G_CALLBACK(on_run_event), win);
  g_signal_connect(win->run, "output", G_CALLBACK(on_run_output), win);
  g_signal_connect(win->run, "finished", G_CALLBACK(on_run_finished), win);

  rebuild_preset_menu(win);
  restore_last(win);
  g_signal_connect_swapped(win->form, "changed", G_CALLBACK(on_form_changed), win);
  update_title(win);
  update_state(win);
  cohort_gpu_detect_async(win->cancel, on_gpus, win);
}

CohortWindow *cohort_window_new(GtkApplication *app)
{
  return g_object_new(COHORT_TYPE_WINDOW, "application", app, NULL);
}

CohortConfigForm *cohort_window_get_form(CohortWindow *win)
{
  return win->form;
}

CohortRun *cohort_window_get_run(CohortWindow *win)
{
  return win->run;
}

GtkWidget *cohort_window_get_run_page(CohortWindow *win)
{
  return win->run_page;
}

GtkWidget *cohort_window_get_dist_top(CohortWindow *win)
{
  return win->dist_top;
}

CohortMultinodeDialog *cohort_window_get_multinode_dialog(CohortWindow *win)
{
  return win->multinode;
}

const char *cohort_window_get_summary(CohortWindow *win)
{
  return gtk_label_get_text(GTK_LABEL(win->summary_label));
}

const char *cohort_window_get_status(CohortWindow *win)
{
  return gtk_label_get_text(GTK_LABEL(win->status_label));
}

const char *cohort_window_get_banner(CohortWindow *win)
{
  if (!gtk_info_bar_get_revealed(GTK_INFO_BAR(win->banner)))
    return NULL;
  return gtk_label_get_text(GTK_LABEL(win->banner_label));
}

void cohort_window_show_page(CohortWindow *win, const char *page)
{
  gtk_stack_set_visible_child_name(GTK_STACK(win->stack), page);
}
