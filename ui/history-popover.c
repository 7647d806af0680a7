#include "ui/history-popover.h"

#include <glib/gi18n.h>
#include <math.h>

struct _CohortHistoryPopover {
  GtkPopover parent_instance;
  CohortLossChart *chart; /* not owned: the page holds both */
  GtkWidget *list;
  GtkWidget *note;
  char *workspace;
  GPtrArray *runs;     /* CohortPastRun, oldest first; NULL before a load */
  GPtrArray *compared; /* run ids, in the order they were turned on */
  char *current;
  gboolean can_show;
  GCancellable *cancel;
};

G_DEFINE_FINAL_TYPE(CohortHistoryPopover, cohort_history_popover, GTK_TYPE_POPOVER)

enum { SIGNAL_SHOW_RUN, N_SIGNALS };
static guint signals[N_SIGNALS];

static CohortPastRun *find_run(CohortHistoryPopover *p, const char *id)
{
  for (guint i = 0; p->runs != NULL && i < p->runs->len; i++) {
    CohortPastRun *run = g_ptr_array_index(p->runs, i);
    if (g_str_equal(run->id, id))
      return run;
  }
  return NULL;
}

/* The name of a run in the chart's legend: when it started and the start of its id (runs of
 * one workspace share their name). */
static char *overlay_label(const CohortPastRun *run)
{
  g_autoptr(GDateTime) t = g_date_time_new_from_unix_local((gint64)run->started);
  g_autofree char *when = t != NULL ? g_date_time_format(t, "%H:%M") : g_strdup("?");
  return g_strdup_printf("%s %.6s", when, run->id);
}

static void apply_overlays(CohortHistoryPopover *p)
{
  cohort_loss_chart_clear_overlays(p->chart);
  for (guint i = 0; i < p->compared->len; i++) {
    CohortPastRun *run = find_run(p, g_ptr_array_index(p->compared, i));
    if (run == NULL)
      continue;
    g_autofree char *label = overlay_label(run);
    cohort_loss_chart_add_overlay(p->chart, label, run->train, run->val);
  }
}

static const char *status_words(const CohortPastRun *run)
{
  if (g_strcmp0(run->status, "completed") == 0)
    return _("completed");
  if (g_strcmp0(run->status, "stopped") == 0)
    return _("stopped");
  if (g_strcmp0(run->status, "failed") == 0)
    return _("failed");
  return _("no end reported");
}

static void on_compare_toggled(GtkCheckButton *check, CohortHistoryPopover *p)
{
  const char *id = g_object_get_data(G_OBJECT(check), "cohort-run");
  if (!cohort_history_popover_compare(p, id, gtk_check_button_get_active(check)))
    gtk_check_button_set_active(check, FALSE);
}

static void on_show_clicked(GtkButton *button, CohortHistoryPopover *p)
{
  g_autofree char *id = g_strdup(g_object_get_data(G_OBJECT(button), "cohort-run"));
  gtk_popover_popdown(GTK_POPOVER(p));
  g_signal_emit(p, signals[SIGNAL_SHOW_RUN], 0, id);
}

static GtkWidget *run_row(CohortHistoryPopover *p, const CohortPastRun *run)
{
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 8);
  GtkWidget *check = gtk_check_button_new();
  gtk_widget_set_tooltip_text(check, _("Compare: lay this run's loss over the chart"));
  gtk_check_button_set_active(
      GTK_CHECK_BUTTON(check),
      g_ptr_array_find_with_equal_func(p->compared, run->id, g_str_equal, NULL));
  g_object_set_data_full(G_OBJECT(check), "cohort-run", g_strdup(run->id), g_free);
  g_signal_connect(check, "toggled", G_CALLBACK(on_compare_toggled), p);
  GtkWidget *text = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
  gtk_widget_set_hexpand(text, TRUE);
  g_autofree char *title = cohort_past_run_title(run);
  gboolean current = g_strcmp0(run->id, p->current) == 0;
  g_autofree char *shown = current ? g_strdup_printf(_("%s (shown)"), title) : NULL;
  GtkWidget *head = gtk_label_new(shown != NULL ? shown : title);
  gtk_label_set_xalign(GTK_LABEL(head), 0);
  gtk_widget_add_css_class(head, "heading");
  g_autofree char *loss =
      isfinite(run->final_loss) ? g_strdup_printf("%.4f", run->final_loss) : g_strdup("–");
  g_autofree char *details =
      g_strdup_printf(_("%lld of %lld steps · %s · loss %s · %.6s"), (long long)run->last_step,
                      (long long)run->total_steps, status_words(run), loss, run->id);
  GtkWidget *sub = gtk_label_new(details);
  gtk_label_set_xalign(GTK_LABEL(sub), 0);
  gtk_widget_add_css_class(sub, "dim-label");
  gtk_widget_add_css_class(sub, "caption");
  gtk_box_append(GTK_BOX(text), head);
  gtk_box_append(GTK_BOX(text), sub);
  GtkWidget *show = gtk_button_new_with_mnemonic(_("_Show"));
  gtk_widget_set_valign(show, GTK_ALIGN_CENTER);
  gtk_widget_set_tooltip_text(show, _("Show this run on the Run page"));
  gtk_widget_set_sensitive(show, p->can_show && !current);
  g_object_set_data_full(G_OBJECT(show), "cohort-run", g_strdup(run->id), g_free);
  g_signal_connect(show, "clicked", G_CALLBACK(on_show_clicked), p);
  gtk_box_append(GTK_BOX(box), check);
  gtk_box_append(GTK_BOX(box), text);
  gtk_box_append(GTK_BOX(box), show);
  return box;
}

static void rebuild(CohortHistoryPopover *p)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(p->list)) != NULL)
    gtk_list_box_remove(GTK_LIST_BOX(p->list), child);
  guint n = p->runs != NULL ? p->runs->len : 0;
  for (guint i = n; i-- > 0;)
    gtk_list_box_append(GTK_LIST_BOX(p->list), run_row(p, g_ptr_array_index(p->runs, i)));
  gtk_widget_set_visible(p->list, n > 0);
  g_autofree char *note = n == 0 ? g_strdup(_("No earlier runs in this workspace yet."))
                                 : g_strdup_printf(_("Compare lays up to %d runs over the chart."),
                                                   COHORT_LOSS_CHART_MAX_OVERLAYS);
  gtk_label_set_text(GTK_LABEL(p->note), note);
}

static void take_runs(CohortHistoryPopover *p, GPtrArray *runs)
{
  g_clear_pointer(&p->runs, g_ptr_array_unref);
  p->runs = runs;
  /* Comparisons of runs that are gone (another workspace) end. */
  for (guint i = p->compared->len; i-- > 0;)
    if (find_run(p, g_ptr_array_index(p->compared, i)) == NULL)
      g_ptr_array_remove_index(p->compared, i);
  apply_overlays(p);
  rebuild(p);
}

static char *events_path(CohortHistoryPopover *p)
{
  return p->workspace != NULL ? g_build_filename(p->workspace, "events.jsonl", NULL) : NULL;
}

gboolean cohort_history_popover_reload(CohortHistoryPopover *p, GError **error)
{
  g_autofree char *path = events_path(p);
  GPtrArray *runs = path != NULL && g_file_test(path, G_FILE_TEST_EXISTS)
                        ? cohort_past_runs_load(path, error)
                        : g_ptr_array_new_with_free_func((GDestroyNotify)cohort_past_run_free);
  if (runs == NULL)
    return FALSE;
  take_runs(p, runs);
  return TRUE;
}

static void on_loaded(GPtrArray *runs, GError *error, gpointer data)
{
  CohortHistoryPopover *p = data;
  if (runs == NULL) {
    gtk_label_set_text(GTK_LABEL(p->note), error->message);
    g_error_free(error);
    return;
  }
  take_runs(p, runs);
}

static void on_visible(GObject *obj, GParamSpec *pspec, gpointer data)
{
  (void)pspec;
  (void)data;
  CohortHistoryPopover *p = COHORT_HISTORY_POPOVER(obj);
  g_autofree char *path = events_path(p);
  if (!gtk_widget_get_visible(GTK_WIDGET(p)))
    return;
  if (path == NULL || !g_file_test(path, G_FILE_TEST_EXISTS)) {
    take_runs(p, g_ptr_array_new_with_free_func((GDestroyNotify)cohort_past_run_free));
    return;
  }
  gtk_label_set_text(GTK_LABEL(p->note), _("Reading the workspace's runs…"));
  cohort_past_runs_load_async(path, p->cancel, on_loaded, p);
}

GPtrArray *cohort_history_popover_get_runs(CohortHistoryPopover *p)
{
  return p->runs;
}

gboolean cohort_history_popover_compare(CohortHistoryPopover *p, const char *run_id, gboolean on)
{
  guint at;
  gboolean already = g_ptr_array_find_with_equal_func(p->compared, run_id, g_str_equal, &at);
  if (!on) {
    if (already)
      g_ptr_array_remove_index(p->compared, at);
  } else if (!already) {
    if (find_run(p, run_id) == NULL || p->compared->len >= COHORT_LOSS_CHART_MAX_OVERLAYS)
      return FALSE;
    g_ptr_array_add(p->compared, g_strdup(run_id));
  }
  apply_overlays(p);
  return TRUE;
}

void cohort_history_popover_set_workspace(CohortHistoryPopover *p, const char *workspace)
{
  if (g_strcmp0(p->workspace, workspace) == 0)
    return;
  g_free(p->workspace);
  p->workspace = g_strdup(workspace);
  g_ptr_array_set_size(p->compared, 0);
  g_clear_pointer(&p->runs, g_ptr_array_unref);
  apply_overlays(p);
  rebuild(p);
}

void cohort_history_popover_set_current(CohortHistoryPopover *p, const char *run_id)
{
  g_free(p->current);
  p->current = g_strdup(run_id);
  rebuild(p);
}

void cohort_history_popover_set_can_show(CohortHistoryPopover *p, gboolean can_show)
{
  if (p->can_show == can_show)
    return;
  p->can_show = can_show;
  rebuild(p);
}

static void cohort_history_popover_dispose(GObject *obj)
{
  CohortHistoryPopover *p = COHORT_HISTORY_POPOVER(obj);
  if (p->cancel != NULL)
    g_cancellable_cancel(p->cancel);
  g_clear_object(&p->cancel);
  g_clear_pointer(&p->runs, g_ptr_array_unref);
  g_clear_pointer(&p->compared, g_ptr_array_unref);
  g_clear_pointer(&p->workspace, g_free);
  g_clear_pointer(&p->current, g_free);
  G_OBJECT_CLASS(cohort_history_popover_parent_class)->dispose(obj);
}

static void cohort_history_popover_class_init(CohortHistoryPopoverClass *klass)
{
  G_OBJECT_CLASS(klass)->dispose = cohort_history_popover_dispose;
  signals[SIGNAL_SHOW_RUN] = g_signal_new("show-run", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST,
                                          0, NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
}

static void cohort_history_popover_init(CohortHistoryPopover *p)
{
  p->compared = g_ptr_array_new_with_free_func(g_free);
  p->cancel = g_cancellable_new();
  p->can_show = TRUE;
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 8);
  GtkWidget *heading = gtk_label_new(_("Runs of this workspace"));
  gtk_label_set_xalign(GTK_LABEL(heading), 0);
  gtk_widget_add_css_class(heading, "heading");
  p->note = gtk_label_new(NULL);
  gtk_label_set_xalign(GTK_LABEL(p->note), 0);
  gtk_label_set_wrap(GTK_LABEL(p->note), TRUE);
  gtk_widget_add_css_class(p->note, "dim-label");
  p->list = gtk_list_box_new();
  gtk_list_box_set_selection_mode(GTK_LIST_BOX(p->list), GTK_SELECTION_NONE);
  gtk_widget_add_css_class(p->list, "boxed-list");
  GtkWidget *scroller = gtk_scrolled_window_new();
  gtk_scrolled_window_set_policy(GTK_SCROLLED_WINDOW(scroller), GTK_POLICY_NEVER,
                                 GTK_POLICY_AUTOMATIC);
  gtk_scrolled_window_set_propagate_natural_height(GTK_SCROLLED_WINDOW(scroller), TRUE);
  gtk_scrolled_window_set_max_content_height(GTK_SCROLLED_WINDOW(scroller), 360);
  gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(scroller), p->list);
  gtk_box_append(GTK_BOX(box), heading);
  gtk_box_append(GTK_BOX(box), scroller);
  gtk_box_append(GTK_BOX(box), p->note);
  gtk_widget_set_size_request(box, 380, -1);
  gtk_popover_set_child(GTK_POPOVER(p), box);
  g_signal_connect(p, "notify::visible", G_CALLBACK(on_visible), NULL);
  rebuild(p);
}

GtkWidget *cohort_history_popover_new(CohortLossChart *chart)
{
  CohortHistoryPopover *p = g_object_new(COHORT_TYPE_HISTORY_POPOVER, NULL);
  p->chart = chart;
  return GTK_WIDGET(p);
}
