/* The window itself: its template, pages and life cycle, the banner and toasts, the title,
 * summary and status lines, the pre-launch checks, the last used config, closing during a
 * run, and the getters the tests read. */
#include "ui/window-private.h"

#include <glib/gi18n.h>

#include "cohort-build-config.h"
#include "engine/launch/build-info.h"
#include "engine/progress/workspace.h"
#include "ui/dist-page.h"
#include "ui/finetune-hint.h"
#include "ui/gpu-detect.h"
#include "ui/key-labels.h"
#include "ui/launch-check.h"
#include "ui/page-sidebar.h"
#include "ui/presets.h"
#include "ui/probe-view.h"
#include "ui/programs.h"

G_DEFINE_FINAL_TYPE(CohortWindow, cohort_window, ADW_TYPE_APPLICATION_WINDOW)

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

void cohort_window_toast(CohortWindow *win, const char *text, const char *undo_action)
{
  AdwToast *toast = adw_toast_new(text);
  if (undo_action != NULL) {
    adw_toast_set_button_label(toast, _("_Undo"));
    adw_toast_set_action_name(toast, undo_action);
  }
  g_free(win->last_toast);
  win->last_toast = g_strdup(text);
  adw_toast_overlay_add_toast(ADW_TOAST_OVERLAY(win->toasts), toast);
}

gboolean cohort_window_is_modified(CohortWindow *win)
{
  if (win->preset == NULL || win->preset_cfg == NULL)
    return FALSE;
  g_auto(GStrv) diff =
      cohort_config_diff(win->preset_cfg, cohort_config_form_get_config(win->form));
  return g_strv_length(diff) > 0;
}

void cohort_window_update_title(CohortWindow *win)
{
  gboolean modified = cohort_window_is_modified(win);
  g_autofree char *subtitle = win->preset == NULL ? NULL
                              : modified          ? g_strdup_printf(_("%s (modified)"), win->preset)
                                                  : g_strdup(win->preset);
  adw_window_title_set_subtitle(ADW_WINDOW_TITLE(win->window_title), subtitle);
  g_autofree char *title =
      subtitle != NULL ? g_strdup_printf(_("Cohort — %s"), subtitle) : g_strdup(_("Cohort"));
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
  /* how many parameters learn, in every finetune mode (the config's own count: the window
   * links no model) */
  g_autofree char *learning = cohort_finetune_learning(cfg);
  g_autofree char *tail = learning ? g_strdup_printf(" · %s", learning) : g_strdup("");
  if (plan == NULL) {
    summary = g_strdup_printf(_("Batch per process %d × accumulation %d"), cfg->batch_size,
                              cfg->gradient_accumulation_steps);
    g_autofree char *line = g_strconcat(summary, tail, NULL);
    gtk_label_set_text(GTK_LABEL(win->summary_label), line);
    return;
  }
  g_autofree char *tokens =
      g_strdup_printf("%" G_GINT64_FORMAT, (gint64)plan->global_batch * cfg->seq_len);
  g_autofree char *lr_scaled = g_strdup_printf("%g", plan->scaled_lr);
  g_autofree char *lr_base = g_strdup_printf("%g", plan->learning_rate);
  g_autofree char *scaling = cohort_config_get(cfg, "lr_scaling");
  /* an image model's batch is images (or their latents), a language model's sequences */
  g_autofree char *numbers =
      cfg->data_format == COHORT_DATA_IMAGES
          ? g_strdup_printf(_("Batch per process %d × accumulation %d × world size %d = global "
                              "batch %d images · learning rate %s → %s (scaling: %s)"),
                            cfg->batch_size, cfg->gradient_accumulation_steps, plan->world_size,
                            plan->global_batch, lr_base, lr_scaled,
                            cohort_key_choice_label(scaling))
          : g_strdup_printf(_("Batch per process %d × accumulation %d × world size %d = global "
                              "batch %d sequences (%s tokens) · learning rate %s → %s (scaling: "
                              "%s)"),
                            cfg->batch_size, cfg->gradient_accumulation_steps, plan->world_size,
                            plan->global_batch, tokens, lr_base, lr_scaled,
                            cohort_key_choice_label(scaling));
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
  g_autofree char *nodes =
      g_strdup_printf(ngettext("%d node", "%d nodes", plan->num_nodes), plan->num_nodes);
  g_autofree char *processes = g_strdup_printf(
      ngettext("%d process", "%d processes", plan->local_processes), plan->local_processes);
  /* TRANSLATORS: the batch and learning rate, "2 nodes", "4 processes" (on each node), and
   * what starts them. */
  summary = g_strdup_printf(_("%s · %s × %s, started by %s"), numbers, nodes, processes, how);
  g_autofree char *line = g_strconcat(summary, tail, NULL);
  gtk_label_set_text(GTK_LABEL(win->summary_label), line);
}

static GPtrArray *copy_problems(GPtrArray *from, GPtrArray *into)
{
  for (guint i = 0; i < from->len; i++) {
    CohortLaunchProblem *p = g_ptr_array_index(from, i), *c = g_new0(CohortLaunchProblem, 1);
    c->key = g_strdup(p->key);
    c->message = g_strdup(p->message);
    g_ptr_array_add(into, c);
  }
  return into;
}

/* The pre-launch checks: the path keys' again only when what they read changed (they read the
 * disk; cohort_launch_paths_read says what they read), the rules at every edit. Each key shows
 * its first problem. */
static void check_launch(CohortWindow *win)
{
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_autofree char *read = cohort_launch_paths_read(cfg);
  if (win->path_problems == NULL || g_strcmp0(read, win->checked) != 0) {
    g_free(win->checked);
    win->checked = g_steal_pointer(&read);
    g_clear_pointer(&win->path_problems, g_ptr_array_unref);
    win->path_problems = cohort_launch_check_paths(cfg);
  }
  g_clear_pointer(&win->problems, g_ptr_array_unref);
  win->problems =
      copy_problems(win->path_problems,
                    g_ptr_array_new_with_free_func((GDestroyNotify)cohort_launch_problem_free));
  g_autoptr(GPtrArray) rules = cohort_launch_check_rules(cfg, win->gpus);
  g_ptr_array_extend_and_steal(win->problems, g_steal_pointer(&rules));
  guint n = 0;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint k = 0; k < n; k++) {
    const char *message = NULL;
    for (guint i = 0; i < win->problems->len && message == NULL; i++) {
      CohortLaunchProblem *p = g_ptr_array_index(win->problems, i);
      if (g_str_equal(p->key, keys[k].name))
        message = p->message;
    }
    cohort_config_form_set_problem(win->form, keys[k].name, message);
  }
}

void cohort_window_count_checkpoints(CohortWindow *win)
{
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  g_free(win->counted_ws);
  win->counted_ws = cohort_resolve_path(cfg->workspace_dir);
  win->checkpoints = cohort_checkpoint_count(win->counted_ws, NULL);
}

/* After an edit: counted again only when the workspace changed (a run's end and Start count
 * anyway). */
static void recount_if_moved(CohortWindow *win)
{
  g_autofree char *ws =
      cohort_resolve_path(cohort_config_form_get_config(win->form)->workspace_dir);
  if (g_strcmp0(ws, win->counted_ws) != 0)
    cohort_window_count_checkpoints(win);
}

/* The status line; *bad when Start cannot run. `unsupported`: why the launch plan refused the
 * settings, or NULL when there is a plan. */
static char *status_text(CohortWindow *win, const GError *unsupported, gboolean *bad)
{
  guint n_errors = cohort_config_form_count_errors(win->form);
  guint n_problems = win->problems->len;
  gboolean supported = unsupported == NULL;
  *bad = n_errors > 0 || n_problems > 0 || !supported;
  if (n_errors > 0)
    return g_strdup_printf(
        ngettext("%u setting is not valid: %s", "%u settings are not valid; first: %s", n_errors),
        n_errors, cohort_config_form_first_error(win->form));
  if (n_problems > 0) {
    CohortLaunchProblem *first = g_ptr_array_index(win->problems, 0);
    if (n_problems == 1)
      return g_strdup_printf(_("Cannot start: %s"), first->message);
    return g_strdup_printf(ngettext("Cannot start, %u problem; first: %s",
                                    "Cannot start, %u problems; first: %s", n_problems),
                           n_problems, first->message);
  }
  const char *refused = cohort_config_form_refused_hint(win->form);
  if (refused != NULL) {
    *bad = TRUE;
    return g_strdup_printf(_("Cannot start: %s"), refused);
  }
  if (!supported)
    return g_strdup_printf(_("Cannot start: %s"), unsupported->message);
  if (cohort_run_is_live(win->run))
    return g_strdup(cohort_run_page_in_final_phase(win->run_page)
                        ? _("Final evaluation and saving the model…")
                        : _("Training runs; see the Run page."));
  if (cohort_run_is_running(win->run))
    return g_strdup(_("Showing a recorded run."));
  return g_strdup(_("Ready to start."));
}

/* enable_multi_gpu starts one process per GPU, or several CPU processes where this build or
 * machine has no GPU or the settings keep to the CPU: its switch says which (a machine whose
 * GPUs are still being looked for is taken to have them, in builds with the CUDA path). */
static void name_for_machine(CohortWindow *win, const CohortConfig *cfg)
{
  gboolean gpus = COHORT_HAVE_CUDA && win->gpus != 0 && cfg->device != COHORT_DEVICE_CPU;
  if (gpus == cohort_key_labels_get_gpus())
    return;
  cohort_key_labels_set_gpus(gpus);
  cohort_config_form_relabel(win->form);
}

void cohort_window_update_state(CohortWindow *win)
{
  const CohortConfig *cfg = cohort_config_form_get_config(win->form);
  name_for_machine(win, cfg);
  g_autoptr(GError) unsupported = NULL;
  g_autoptr(CohortLaunchPlan) plan = cohort_ui_launch_plan(cfg, win->gpus, &unsupported);
  update_summary(win, cfg, plan);
  check_launch(win);
  gboolean bad = FALSE, running = cohort_run_is_running(win->run);
  gboolean live = cohort_run_is_live(win->run);
  g_autofree char *status = status_text(win, unsupported, &bad);
  /* How the last run ended stays in the status line until the settings change. */
  if (!win->status_is_summary || running || bad)
    gtk_label_set_text(GTK_LABEL(win->status_label), status);
  if (bad)
    gtk_widget_add_css_class(win->status_label, "error");
  else
    gtk_widget_remove_css_class(win->status_label, "error");
  for (const char *const *g = cohort_key_pages(); *g != NULL; g++)
    cohort_page_sidebar_set_attention(COHORT_PAGE_SIDEBAR(win->sidebar), *g,
                                      cohort_config_form_page_issue(win->form, *g));

  gboolean final = cohort_run_page_in_final_phase(win->run_page);
  set_action_enabled(win, "start", !running && !bad);
  set_action_enabled(win, "resume", !running && !bad && win->checkpoints > 0);
  gtk_widget_set_visible(win->resume_button, !running && win->checkpoints > 0);
  set_action_enabled(win, "stop", live);
  set_action_enabled(win, "sample-now", live && !final);
  set_action_enabled(win, "save-now", live && !final);
  set_action_enabled(win, "check-ranks", live && !final);
  set_action_enabled(win, "open-folder", win->run_workspace != NULL);
  set_action_enabled(win, "show-model", win->model_path != NULL);
  set_action_enabled(win, "preset-delete",
                     win->preset != NULL && cohort_preset_is_user(win->preset));
  g_autofree char *ws =
      cohort_resolve_path(cohort_config_form_get_config(win->form)->workspace_dir);
  cohort_run_page_set_workspace(win->run_page, ws);
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
  win->status_is_summary = FALSE;
  recount_if_moved(win);
  cohort_window_update_state(win);
  cohort_dist_page_update_memory(win->dist_top, cohort_config_form_get_config(win->form));
  cohort_window_update_title(win);
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

/* Back in front (from a file manager, say): files may have come or gone since the paths were
 * checked, so they are checked again. */
static void on_active(GObject *obj, GParamSpec *pspec, gpointer data)
{
  (void)pspec;
  (void)data;
  CohortWindow *win = COHORT_WINDOW(obj);
  g_clear_pointer(&win->checked, g_free);
  cohort_window_update_state(win);
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

static gboolean close_now(gpointer data)
{
  gtk_window_close(GTK_WINDOW(data));
  return G_SOURCE_REMOVE;
}

static void on_close_answer(AdwMessageDialog *dialog, const char *response, CohortWindow *win)
{
  (void)dialog;
  win->question = NULL;
  if (g_str_equal(response, "stop")) {
    win->close_confirmed = TRUE;
    /* After the dialog has gone: it is transient for the window being closed. */
    g_idle_add_full(G_PRIORITY_DEFAULT, close_now, g_object_ref(win), g_object_unref);
  }
}

static void ask_before_closing(CohortWindow *win)
{
  GtkWidget *d = adw_message_dialog_new(GTK_WINDOW(win), _("Stop the Run and Close?"),
                                        _("Training is still running. Closing the window stops "
                                          "every process of the run; a checkpoint is saved first, "
                                          "so Resume can continue it later."));
  adw_message_dialog_add_responses(ADW_MESSAGE_DIALOG(d), "cancel", _("_Keep Running"), "stop",
                                   _("_Stop and Close"), NULL);
  adw_message_dialog_set_response_appearance(ADW_MESSAGE_DIALOG(d), "stop",
                                             ADW_RESPONSE_DESTRUCTIVE);
  adw_message_dialog_set_default_response(ADW_MESSAGE_DIALOG(d), "cancel");
  adw_message_dialog_set_close_response(ADW_MESSAGE_DIALOG(d), "cancel");
  g_signal_connect(d, "response", G_CALLBACK(on_close_answer), win);
  win->question = d;
  gtk_window_present(GTK_WINDOW(d));
}

static void remember_state(CohortWindow *win)
{
  gtk_window_get_default_size(GTK_WINDOW(win), &win->state.width, &win->state.height);
  win->state.maximized = gtk_window_is_maximized(GTK_WINDOW(win));
  g_free(win->state.page);
  win->state.page = g_strdup(gtk_stack_get_visible_child_name(GTK_STACK(win->stack)));
  win->state.smoothing = cohort_run_page_get_smoothing(win->run_page);
  cohort_window_state_save(&win->state);
}

static gboolean on_close_request(GtkWindow *window)
{
  CohortWindow *win = COHORT_WINDOW(window);
  if (cohort_run_is_live(win->run) && !win->closing) {
    if (win->state.confirm_close && !win->close_confirmed) {
      if (win->question == NULL)
        ask_before_closing(win);
      return TRUE;
    }
    /* Keep the application alive until the run has ended, so no rank outlives it. */
    GApplication *app = G_APPLICATION(gtk_window_get_application(window));
    win->closing = TRUE;
    if (app != NULL) {
      g_application_hold(app);
      g_signal_connect_object(win->run, "finished", G_CALLBACK(on_closing_finished), app, 0);
    }
    cohort_run_stop(win->run, COHORT_WINDOW_STOP_GRACE_S);
  }
  cohort_window_save_last(win);
  remember_state(win);
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

/* A folded sidebar (narrow window) closes once a page is picked. */
static void on_page_shown(CohortWindow *win)
{
  if (adw_flap_get_folded(ADW_FLAP(win->flap)))
    adw_flap_set_reveal_flap(ADW_FLAP(win->flap), FALSE);
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
  if (win->question != NULL)
    gtk_window_destroy(GTK_WINDOW(win->question));
  win->question = NULL;
  gtk_widget_dispose_template(GTK_WIDGET(obj), COHORT_TYPE_WINDOW);
  g_clear_object(&win->run);
  g_clear_object(&win->form);
  g_clear_pointer(&win->preset, g_free);
  g_clear_pointer(&win->preset_cfg, cohort_config_free);
  g_clear_pointer(&win->deleted, cohort_config_free);
  g_clear_pointer(&win->deleted_name, g_free);
  g_clear_pointer(&win->problems, g_ptr_array_unref);
  g_clear_pointer(&win->path_problems, g_ptr_array_unref);
  g_clear_pointer(&win->checked, g_free);
  g_clear_pointer(&win->counted_ws, g_free);
  g_clear_pointer(&win->run_workspace, g_free);
  g_clear_pointer(&win->model_path, g_free);
  g_clear_pointer(&win->last_toast, g_free);
  g_clear_pointer(&win->last_notification, g_free);
  g_clear_pointer(&win->last_opened, g_free);
  cohort_window_state_clear(&win->state);
  G_OBJECT_CLASS(cohort_window_parent_class)->dispose(obj);
}

static void cohort_window_class_init(CohortWindowClass *klass)
{
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  G_OBJECT_CLASS(klass)->dispose = cohort_window_dispose;
  GTK_WINDOW_CLASS(klass)->close_request = on_close_request;
  gtk_widget_class_set_template_from_resource(wc, "/org/cohort/Trainer/window.ui");
#define BIND(name) gtk_widget_class_bind_template_child(wc, CohortWindow, name)
  BIND(toasts);
  BIND(window_title);
  BIND(sidebar_button);
  BIND(preset_button);
  BIND(main_menu_button);
  BIND(start_button);
  BIND(resume_button);
  BIND(stop_button);
  BIND(banner);
  BIND(banner_label);
  BIND(flap);
  BIND(stack);
  BIND(summary_label);
  BIND(status_label);
#undef BIND
  gtk_widget_class_bind_template_callback(wc, on_banner_response);
}

/* The pages: one per key group, built by the form, then the Run page; the sidebar lists them
 * and folds away on a narrow window. */
static void build_pages(CohortWindow *win)
{
  win->dist_top = cohort_dist_page_top_new();
  win->probe_view = cohort_probe_view_new(cohort_window_probe_argv, win);
  gtk_widget_set_margin_top(win->probe_view, 12);
  gtk_box_append(GTK_BOX(win->dist_top), win->probe_view);
  for (const char *const *g = cohort_key_pages(); *g != NULL; g++) {
    gboolean dist = g_str_equal(*g, "distributed");
    GtkWidget *page =
        cohort_config_form_build_page(win->form, *g, NULL, dist ? win->dist_top : NULL);
    add_page(win, page, *g, cohort_key_page_title(*g));
  }
  win->run_page = COHORT_RUN_PAGE(cohort_run_page_new());
  add_page(win, GTK_WIDGET(win->run_page), "run", _("Run"));
  win->sidebar = cohort_page_sidebar_new(GTK_STACK(win->stack));
  gtk_widget_set_size_request(win->sidebar, 170, -1);
  cohort_page_sidebar_rebuild(COHORT_PAGE_SIDEBAR(win->sidebar));
  adw_flap_set_flap(ADW_FLAP(win->flap), win->sidebar);
  g_object_bind_property(win->flap, "folded", win->sidebar_button, "visible",
                         G_BINDING_SYNC_CREATE);
  g_object_bind_property(win->flap, "reveal-flap", win->sidebar_button, "active",
                         G_BINDING_SYNC_CREATE | G_BINDING_BIDIRECTIONAL);
  g_signal_connect_swapped(win->stack, "notify::visible-child", G_CALLBACK(on_page_shown), win);
}

static void restore_state(CohortWindow *win)
{
  cohort_window_state_load(&win->state);
  gtk_window_set_default_size(GTK_WINDOW(win), win->state.width, win->state.height);
  if (win->state.maximized)
    gtk_window_maximize(GTK_WINDOW(win));
  if (win->state.page != NULL &&
      gtk_stack_get_child_by_name(GTK_STACK(win->stack), win->state.page) != NULL)
    gtk_stack_set_visible_child_name(GTK_STACK(win->stack), win->state.page);
  cohort_run_page_set_smoothing(win->run_page, win->state.smoothing);
}

static void cohort_window_init(CohortWindow *win)
{
  gtk_widget_init_template(GTK_WIDGET(win));
  win->cancel = g_cancellable_new();
  win->gpus = -1;
  win->problems = g_ptr_array_new();

  cohort_window_add_run_actions(win);
  cohort_window_add_preset_actions(win);
  cohort_window_add_menu_actions(win);

  win->form = cohort_config_form_new();
  /* NCCL only when the engine has the backend, not merely CUDA kernels. */
  if (!cohort_build_has_backend("nccl"))
    cohort_config_form_hide_choice(win->form, "distributed_backend", "nccl",
                                   _("NCCL needs a build with the NCCL backend; choose Gloo"));

  win->multinode = cohort_multinode_dialog_new(GTK_WINDOW(win), win->form);
  build_pages(win);
  restore_state(win);

  win->run = cohort_run_new();
  cohort_window_watch_run(win);

  cohort_window_rebuild_preset_menu(win);
  restore_last(win);
  g_signal_connect_swapped(win->form, "changed", G_CALLBACK(on_form_changed), win);
  g_signal_connect(win, "notify::is-active", G_CALLBACK(on_active), NULL);
  cohort_window_count_checkpoints(win);
  cohort_window_update_title(win);
  cohort_window_update_state(win);
  cohort_dist_page_update_memory(win->dist_top, cohort_config_form_get_config(win->form));
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

GtkWidget *cohort_window_get_probe_view(CohortWindow *win)
{
  return win->probe_view;
}

GtkWidget *cohort_window_get_dist_top(CohortWindow *win)
{
  return win->dist_top;
}

GtkWidget *cohort_window_get_sidebar(CohortWindow *win)
{
  return win->sidebar;
}

CohortMultinodeDialog *cohort_window_get_multinode_dialog(CohortWindow *win)
{
  return win->multinode;
}

const char *cohort_window_get_preset(CohortWindow *win)
{
  return win->preset;
}

gboolean cohort_window_action_enabled(CohortWindow *win, const char *name)
{
  GAction *a = g_action_map_lookup_action(G_ACTION_MAP(win), name);
  return a != NULL && g_action_get_enabled(a);
}

gboolean cohort_window_can_start(CohortWindow *win)
{
  return cohort_window_action_enabled(win, "start");
}

gboolean cohort_window_can_resume(CohortWindow *win)
{
  return cohort_window_action_enabled(win, "resume");
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

GtkWidget *cohort_window_get_question(CohortWindow *win)
{
  return win->question;
}

const char *cohort_window_get_last_toast(CohortWindow *win)
{
  return win->last_toast;
}

const char *cohort_window_get_last_notification(CohortWindow *win)
{
  return win->last_notification;
}

const char *cohort_window_get_last_opened(CohortWindow *win)
{
  return win->last_opened;
}
