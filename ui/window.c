/* The window itself: its template, pages and life cycle, the banner, title, summary and
 * status lines, the last used config, and the getters the tests read. */
#include "ui/window-private.h"

#include <glib/gi18n.h>

#include "engine/build-info.h"
#include "ui/dist-page.h"
#include "ui/gpu-detect.h"
#include "ui/key-labels.h"
#include "ui/presets.h"
#include "ui/programs.h"

G_DEFINE_FINAL_TYPE(CohortWindow, cohort_window, GTK_TYPE_APPLICATION_WINDOW)

void cohort_window_show_banner(CohortWindow *win, const char *text)
{
  gtk_label_set_text(GTK_LABEL(win->banner_label), text);
  gtk_info_bar_set_revealed(GTK_INFO_BAR(win->banner), text != NULL);
}

static void on_banner_response(CohortWindow *win, int response)
{
  (void)response;
  cohort_window_show_banner(win, NULL);
}

void cohort_window_update_title(CohortWindow *win)
{
  g_autofree char *title =
      win->preset != NULL ? g_strdup_printf(_("Cohort — %s"), win->preset) : g_strdup(_("Cohort"));
  gtk_window_set_title(GTK_WINDOW(win), title);
}

static void set_action_enabled(CohortWindow *win, const char *name, gboolean enabled)
{
  GAction *a = g_action_map_lookup_action(G_ACTION_MAP(win), name);
  if (a != NULL)
    g_simple_action_set_enabled(G_SIMPLE_ACTION(a), enabled);
}

/* The summary line from the launch plan, the same plan Start runs; NULL plan: the batch
 * alone (the status line says why there is no plan). */
static void update_summary(CohortWindow *win, const CohortConfig *cfg, const CohortLaunchPlan *plan)
{
  g_autofree char *summary = NULL;
  if (plan == NULL) {
    summary = g_strdup_printf(_("Batch per process %d × accumulation %d"), cfg->batch_size,
                              cfg->gradient_accumulation_steps);
    gtk_label_set_text(GTK_LABEL(win->summary_label), summary);
    return;
  }
  g_autofree char *tokens =
      g_strdup_printf("%" G_GINT64_FORMAT, (gint64)plan->global_batch * cfg->seq_len);
  g_autofree char *lr_scaled = g_strdup_printf("%g", plan->scaled_lr);
  g_autofree char *lr_base = g_strdup_printf("%g", plan->learning_rate);
  g_autofree char *scaling = cohort_config_get(cfg, "lr_scaling");
  g_autofree char *numbers = g_strdup_printf(
      _("Batch per process %d × accumulation %d × world size %d = global batch %d sequences "
        "(%s tokens) · learning rate %s → %s (scaling: %s)"),
      cfg->batch_size, cfg->gradient_accumulation_steps, plan->world_size, plan->global_batch,
      tokens, lr_base, lr_scaled, cohort_key_choice_label(scaling));
  const char *how = NULL;
  switch (plan->kind) {
  case COHORT_LAUNCH_SPAWN:
    how = _("spawn mode");
    break;
  case COHORT_LAUNCH_COHORT_RUN:
    how = _("cohort-run");
    break;
  default:
    how = _("one process");
    break;
  }
  summary = g_strdup_printf(_("%s · %d node(s) × %d process(es), started by %s"), numbers,
                            plan->num_nodes, plan->local_processes, how);
  gtk_label_set_text(GTK_LABEL(win->summary_label), summary);
}

void cohort_window_update_state(CohortWindow *win)
{
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autoptr(GError) unsupported = NULL;
  g_autoptr(CohortLaunchPlan) plan = cohort_ui_launch_plan(cfg, win->gpus, &unsupported);
  gboolean supported = plan != NULL;
  update_summary(win, cfg, plan);

  gboolean running = cohort_run_is_running(win->run);
  guint n_errors = cohort_config_form_count_errors(win->form);
  g_autofree char *status = NULL;
  if (n_errors > 0)
    status = g_strdup_printf(
        ngettext("%u setting is not valid: %s", "%u settings are not valid; first: %s", n_errors),
        n_errors, cohort_config_form_first_error(win->form));
  else if (!supported)
    status = g_strdup_printf(_("Cannot start: %s"), unsupported->message);
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
                     win->preset != NULL && cohort_preset_is_user(win->preset));
}

static gboolean save_last_now(gpointer data)
{
  CohortWindow *win = data;
  win->save_source = 0;
  cohort_window_save_last(win);
  return G_SOURCE_REMOVE;
}

static void on_form_changed(CohortWindow *win)
{
  cohort_window_update_state(win);
  /* The last used config is written a moment after edits stop, so a crash or a killed
   * session loses at most that moment. */
  g_clear_handle_id(&win->save_source, g_source_remove);
  win->save_source = g_timeout_add_seconds(1, save_last_now, win);
}

void cohort_window_save_last(CohortWindow *win)
{
  g_autofree char *path = cohort_ui_last_config_path();
  g_autofree char *dir = g_path_get_dirname(path);
  g_mkdir_with_parents(dir, 0755);
  /* Best effort: failing to remember the last config must not stop anything. */
  cohort_config_save_file(cohort_config_form_get_config(win->form), path, NULL);
}

static void on_gpus(GPtrArray *gpus, gpointer data)
{
  CohortWindow *win = data;
  win->gpus = (int)gpus->len;
  cohort_dist_page_set_gpus(win->dist_top, gpus);
  g_ptr_array_unref(gpus);
  cohort_window_update_state(win);
}

static void on_closing_finished(CohortRun *run, const char *summary, GApplication *app)
{
  (void)run;
  (void)summary;
  g_application_release(app);
}

static gboolean on_close_request(GtkWindow *window)
{
  CohortWindow *win = COHORT_WINDOW(window);
  cohort_window_save_last(win);
  if (cohort_run_is_running(win->run) && !win->closing) {
    /* Keep the application alive until the run has ended, so no rank outlives it. */
    GApplication *app = G_APPLICATION(gtk_window_get_application(window));
    win->closing = TRUE;
    if (app != NULL) {
      g_application_hold(app);
      g_signal_connect_object(win->run, "finished", G_CALLBACK(on_closing_finished), app, 0);
    }
    cohort_run_stop(win->run, COHORT_WINDOW_STOP_GRACE_S);
  }
  return FALSE;
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
    cohort_window_show_banner(win, msg);
  }
  g_autoptr(CohortConfig) cfg = cohort_preset_load("tiny-gpt", NULL);
  if (cfg != NULL) {
    cohort_config_form_set_config(win->form, cfg);
    cohort_window_set_preset(win, "tiny-gpt");
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
    cohort_window_save_last(win);
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

  cohort_window_add_run_actions(win);
  cohort_window_add_preset_actions(win);

  win->form = cohort_config_form_new();
  /* NCCL only when the engine has the backend, not merely CUDA kernels. */
  if (!cohort_build_has_backend("nccl"))
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
  win->run_page = COHORT_RUN_PAGE(cohort_run_page_new());
  add_page(win, GTK_WIDGET(win->run_page), "run", _("Run"));

  win->run = cohort_run_new();
  cohort_window_watch_run(win);

  cohort_window_rebuild_preset_menu(win);
  restore_last(win);
  g_signal_connect_swapped(win->form, "changed", G_CALLBACK(on_form_changed), win);
  cohort_window_update_title(win);
  cohort_window_update_state(win);
  cohort_gpu_detect_async(win->cancel, on_gpus, win);
}

CohortWindow *cohort_window_new(GtkApplication *app)
{
  return g_object_new(COHORT_TYPE_WINDOW, "application", app, NULL);
}

void cohort_window_show_page(CohortWindow *win, const char *page)
{
  gtk_stack_set_visible_child_name(GTK_STACK(win->stack), page);
}

CohortConfigForm *cohort_window_get_form(CohortWindow *win)
{
  return win->form;
}

CohortRun *cohort_window_get_run(CohortWindow *win)
{
  return win->run;
}

CohortRunPage *cohort_window_get_run_page(CohortWindow *win)
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

const char *cohort_window_get_preset(CohortWindow *win)
{
  return win->preset;
}

gboolean cohort_window_can_start(CohortWindow *win)
{
  GAction *a = g_action_map_lookup_action(G_ACTION_MAP(win), "start");
  return g_action_get_enabled(a);
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
