#include "ui/run-page-private.h"

#include <glib/gi18n.h>
#include <math.h>

#include "ui/loss-chart-private.h"
#include "ui/progress-event.h"

struct _CohortRunPage {
  GtkBox parent_instance;
  /* The figures, each a GtkLabel of the template (see `figures` below). */
  GtkLabel *status_value;
  GtkLabel *step_value;
  GtkLabel *epoch_value;
  GtkLabel *loss_value;
  GtkLabel *val_loss_value;
  GtkLabel *lr_value;
  GtkLabel *tokens_per_s_value;
  GtkLabel *tokens_per_s_caption;
  GtkLabel *eta_value;
  GtkLabel *elapsed_value;
  GtkLabel *loss_scale_value;
  CohortSampleView *samples;
  GtkWidget *loss_scale_box; /* shown only for fp16 runs, which report a loss scale */
  GtkWidget *step_bar;
  GtkWidget *epoch_bar;
  CohortLossChart *chart;
  CohortRanksView *ranks;
  CohortReflowBox *reflow;
  GtkWidget *live_buttons;
  GtkWidget *ended_buttons;
  GtkWidget *history_button;
  GtkWidget *smoothing;
  GtkWidget *log_scale;
  GtkWidget *log_view;
  CohortHistoryPopover *history;
  GtkTextBuffer *log;
  int total_steps;
  int steps_per_epoch;
  gboolean live;
  gboolean final_phase;
};

G_DEFINE_FINAL_TYPE(CohortRunPage, cohort_run_page, GTK_TYPE_BOX)

enum { SIGNAL_SHOW_RUN, N_SIGNALS };
static guint signals[N_SIGNALS];

/* The figures by name (the names of cohort_run_page_get_figure). */
static const struct {
  const char *name;
  gsize offset;
} figures[] = {
    {"step", G_STRUCT_OFFSET(CohortRunPage, step_value)},
    {"epoch", G_STRUCT_OFFSET(CohortRunPage, epoch_value)},
    {"loss", G_STRUCT_OFFSET(CohortRunPage, loss_value)},
    {"val_loss", G_STRUCT_OFFSET(CohortRunPage, val_loss_value)},
    {"lr", G_STRUCT_OFFSET(CohortRunPage, lr_value)},
    {"tokens_per_s", G_STRUCT_OFFSET(CohortRunPage, tokens_per_s_value)},
    {"eta", G_STRUCT_OFFSET(CohortRunPage, eta_value)},
    {"elapsed", G_STRUCT_OFFSET(CohortRunPage, elapsed_value)},
    {"loss_scale", G_STRUCT_OFFSET(CohortRunPage, loss_scale_value)},
    {"status", G_STRUCT_OFFSET(CohortRunPage, status_value)},
};
/* Keeps the log view bounded: a long run writes many lines. */
#define MAX_LOG_LINES 5000

static GtkLabel *figure_label(CohortRunPage *p, const char *name)
{
  if (g_str_equal(name, "sample"))
    return NULL; /* the sample view's, see cohort_run_page_get_figure */
  for (guint i = 0; i < G_N_ELEMENTS(figures); i++)
    if (g_str_equal(figures[i].name, name))
      return G_STRUCT_MEMBER(GtkLabel *, p, figures[i].offset);
  return NULL;
}

static void set_figure(CohortRunPage *p, const char *name, const char *text)
{
  GtkLabel *label = figure_label(p, name);
  if (label != NULL)
    gtk_label_set_text(label, text);
}

static char *format_duration(double s)
{
  if (s < 0)
    s = 0;
  int total = (int)(s + 0.5);
  if (total >= 3600)
    return g_strdup_printf(_("%d h %02d min"), total / 3600, (total / 60) % 60);
  if (total >= 60)
    return g_strdup_printf(_("%d min %02d s"), total / 60, total % 60);
  return g_strdup_printf(_("%d s"), total);
}

/* The flow box wraps each figure in a child of its own: hide both, so no empty slot stays. */
static void show_loss_scale(CohortRunPage *p, gboolean shown)
{
  gtk_widget_set_visible(p->loss_scale_box, shown);
  GtkWidget *slot = gtk_widget_get_parent(p->loss_scale_box);
  if (GTK_IS_FLOW_BOX_CHILD(slot))
    gtk_widget_set_visible(slot, shown);
}

static void clear_log(CohortRunPage *p)
{
  gtk_text_buffer_set_text(p->log, "", -1);
}

void cohort_run_page_reset(CohortRunPage *p)
{
  const char *names[] = {"step",         "epoch", "loss",    "val_loss",  "lr",
                         "tokens_per_s", "eta",   "elapsed", "loss_scale"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    set_figure(p, names[i], "–");
  gtk_label_set_text(p->tokens_per_s_caption, _("Tokens per second"));
  cohort_sample_view_reset(p->samples);
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), 0);
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->epoch_bar), 0);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->step_bar), NULL);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->epoch_bar), NULL);
  cohort_loss_chart_clear(p->chart);
  cohort_ranks_view_reset(p->ranks);
  show_loss_scale(p, FALSE);
  p->total_steps = 0;
  p->steps_per_epoch = 0;
  p->final_phase = FALSE;
  clear_log(p);
}

static void set_number(CohortRunPage *p, const char *figure, const char *format, double v)
{
  if (isnan(v))
    return;
  g_autofree char *text = g_strdup_printf(format, v);
  set_figure(p, figure, text);
}

static void show_progress(CohortRunPage *p, JsonObject *ev, int step)
{
  int total = (int)cohort_event_number(ev, COHORT_FIELD_TOTAL_STEPS, p->total_steps);
  p->total_steps = total;
  p->steps_per_epoch =
      (int)cohort_event_number(ev, COHORT_FIELD_STEPS_PER_EPOCH, p->steps_per_epoch);
  g_autofree char *s =
      total > 0 ? g_strdup_printf(_("%d of %d"), step, total) : g_strdup_printf("%d", step);
  set_figure(p, "step", s);
  if (total > 0) {
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), CLAMP((double)step / total, 0, 1));
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->step_bar), s);
  }
  int epoch = (int)cohort_event_number(ev, COHORT_FIELD_EPOCH, 0),
      epoch_step = (int)cohort_event_number(ev, COHORT_FIELD_EPOCH_STEP, 0);
  g_autofree char *e = g_strdup_printf("%d", epoch + 1);
  set_figure(p, "epoch", e);
  if (p->steps_per_epoch > 0) {
    g_autofree char *et =
        g_strdup_printf(_("epoch %d: %d of %d steps"), epoch + 1, epoch_step, p->steps_per_epoch);
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->epoch_bar),
                                  CLAMP((double)epoch_step / p->steps_per_epoch, 0, 1));
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->epoch_bar), et);
  }
}

/* Losses a model reports beside the total ("loss_task", "loss_distill"…) get curves too. */
static void chart_loss_parts(CohortRunPage *p, JsonObject *ev, int step)
{
  g_autoptr(GList) members = json_object_get_members(ev);
  for (GList *m = members; m != NULL; m = m->next)
    if (g_str_has_prefix(m->data, COHORT_FIELD_LOSS_PART_PREFIX) &&
        !g_str_equal(m->data, COHORT_FIELD_LOSS_SCALE))
      cohort_loss_chart_add_point(p->chart, m->data, step, cohort_event_number(ev, m->data, NAN));
}

static void show_step(CohortRunPage *p, JsonObject *ev)
{
  int step = (int)cohort_event_number(ev, COHORT_FIELD_STEP, 0);
  show_progress(p, ev, step);
  double loss = cohort_event_number(ev, COHORT_FIELD_LOSS, NAN);
  set_number(p, "loss", "%.4f", loss);
  if (!isnan(loss))
    cohort_loss_chart_add(p->chart, FALSE, step, loss);
  chart_loss_parts(p, ev, step);
  set_number(p, "lr", "%.3g", cohort_event_number(ev, COHORT_FIELD_LR, NAN));
  /* Token models report tokens per second; every model reports samples per second. */
  double tps = cohort_event_number(ev, COHORT_FIELD_TOKENS_PER_S, NAN),
         sps = cohort_event_number(ev, COHORT_FIELD_SAMPLES_PER_S, NAN);
  if (isnan(tps) && !isnan(sps)) {
    gtk_label_set_text(p->tokens_per_s_caption, _("Samples per second"));
    set_number(p, "tokens_per_s", "%.1f", sps);
  } else {
    set_number(p, "tokens_per_s", "%.0f", tps);
  }
  double eta = cohort_event_number(ev, COHORT_FIELD_ETA_S, NAN),
         elapsed = cohort_event_number(ev, COHORT_FIELD_ELAPSED_S, NAN);
  g_autofree char *eta_text = isnan(eta) ? NULL : format_duration(eta);
  g_autofree char *elapsed_text = isnan(elapsed) ? NULL : format_duration(elapsed);
  if (eta_text != NULL)
    set_figure(p, "eta", eta_text);
  if (elapsed_text != NULL)
    set_figure(p, "elapsed", elapsed_text);
  double scale = cohort_event_number(ev, COHORT_FIELD_LOSS_SCALE, NAN);
  if (!isnan(scale)) {
    int skipped = (int)cohort_event_number(ev, COHORT_FIELD_SKIPPED_STEPS, 0);
    g_autofree char *l =
        skipped > 0
            ? g_strdup_printf(ngettext("%.0f, %d step skipped", "%.0f, %d steps skipped", skipped),
                              scale, skipped)
            : g_strdup_printf("%.0f", scale);
    set_figure(p, "loss_scale", l);
    show_loss_scale(p, TRUE);
  }
  /* After the last step the run evaluates, samples, saves and exports: seconds without a step
   * event, which the status explains. */
  if (p->total_steps > 0 && step >= p->total_steps && !p->final_phase) {
    p->final_phase = TRUE;
    set_figure(p, "status", _("Final evaluation and saving the model…"));
  }
}

static void show_start(CohortRunPage *p, JsonObject *ev)
{
  /* A resumed run (a replayed events.jsonl holds its earlier part too) redoes the steps after
   * its checkpoint: their old points go. */
  cohort_loss_chart_drop_after(p->chart, cohort_event_number(ev, COHORT_FIELD_START_STEP, 0));
  p->total_steps = (int)cohort_event_number(ev, COHORT_FIELD_TOTAL_STEPS, 0);
  p->steps_per_epoch = (int)cohort_event_number(ev, COHORT_FIELD_STEPS_PER_EPOCH, 0);
  p->final_phase = FALSE;
  int world = (int)cohort_event_number(ev, COHORT_FIELD_WORLD_SIZE, 1);
  g_autofree char *s =
      g_strdup_printf(ngettext("Training %s: %.1f M parameters on %s, %d process",
                               "Training %s: %.1f M parameters on %s, %d processes", world),
                      cohort_event_text(ev, COHORT_FIELD_RUN, ""),
                      cohort_event_number(ev, COHORT_FIELD_PARAMS, 0) / 1e6,
                      cohort_event_text(ev, COHORT_FIELD_DEVICE, "?"), world);
  set_figure(p, "status", s);
}

/* Every metric of an evaluation gets a curve: val_loss on the loss axis, others (accuracy…)
 * on the right one. */
static void show_eval(CohortRunPage *p, JsonObject *ev)
{
  int step = (int)cohort_event_number(ev, COHORT_FIELD_STEP, 0);
  set_number(p, "val_loss", "%.4f", cohort_event_number(ev, COHORT_FIELD_VAL_LOSS, NAN));
  static const char *const not_metrics[] = {
      COHORT_FIELD_EVENT, COHORT_FIELD_TIME,       COHORT_FIELD_STEP,   COHORT_FIELD_VAL_SAMPLES,
      COHORT_FIELD_EMA,   COHORT_FIELD_VAL_TOKENS, COHORT_FIELD_RUN_ID, NULL};
  g_autoptr(GList) members = json_object_get_members(ev);
  for (GList *m = members; m != NULL; m = m->next)
    if (!g_strv_contains(not_metrics, m->data))
      cohort_loss_chart_add_point(p->chart, m->data, step, cohort_event_number(ev, m->data, NAN));
}

/* vae_from: before the first step, images are encoded into the latent cache (the `latents`
 * event): the status, the step bar and the ETA follow it until training starts. */
static void show_latents(CohortRunPage *p, JsonObject *ev)
{
  const char *set = cohort_event_text(ev, COHORT_FIELD_SET, "train");
  /* TRANSLATORS: the training or validation data ("train", "val") of a run */
  const char *which = g_str_equal(set, "val") ? _("validation images") : _("training images");
  int done = (int)cohort_event_number(ev, COHORT_FIELD_DONE, 0),
      total = (int)cohort_event_number(ev, COHORT_FIELD_TOTAL, 0);
  double rate = cohort_event_number(ev, COHORT_FIELD_IMAGES_PER_S, 0),
         eta = cohort_event_number(ev, COHORT_FIELD_ETA_S, NAN);
  gboolean finished = json_object_get_boolean_member_with_default(ev, COHORT_FIELD_FINISHED, FALSE);
  g_autofree char *status =
      finished ? g_strdup_printf(_("Latents of %d %s cached (%.1f images per second)"), total,
                                 which, rate)
               : g_strdup_printf(_("Caching latents of the %s: %d of %d (%.1f images per second)"),
                                 which, done, total, rate);
  set_figure(p, "status", status);
  g_autofree char *bar = g_strdup_printf(_("latents: %d of %d images"), done, total);
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar),
                                total > 0 ? CLAMP((double)done / total, 0, 1) : 0);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->step_bar), bar);
  g_autofree char *eta_text = isnan(eta) || finished ? NULL : format_duration(eta);
  if (eta_text)
    set_figure(p, "eta", eta_text);
}

static void show_log(CohortRunPage *p, JsonObject *ev)
{
  const char *level = cohort_event_text(ev, COHORT_FIELD_LEVEL, COHORT_LEVEL_INFO);
  const char *msg = cohort_event_text(ev, COHORT_FIELD_MESSAGE, "");
  if (g_str_equal(level, COHORT_LEVEL_INFO)) {
    cohort_run_page_append_log(p, msg);
    return;
  }
  /* TRANSLATORS: a log level (warning, error, debug) and a message from the run. */
  g_autofree char *l = g_strdup_printf(_("%s: %s"), level, msg);
  cohort_run_page_append_log(p, l);
}

static void show_done(CohortRunPage *p, JsonObject *ev)
{
  set_number(p, "val_loss", "%.4f", cohort_event_number(ev, COHORT_FIELD_VAL_LOSS, NAN));
  double elapsed = cohort_event_number(ev, COHORT_FIELD_ELAPSED_S, NAN);
  g_autofree char *text = isnan(elapsed) ? NULL : format_duration(elapsed);
  /* The elapsed time of the whole run, final evaluation and saving included. */
  if (text != NULL)
    set_figure(p, "elapsed", text);
  gboolean completed =
      g_strcmp0(cohort_event_text(ev, COHORT_FIELD_STATUS, ""), COHORT_STATUS_COMPLETED) == 0;
  if (completed && p->total_steps > 0) {
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), 1.0);
    g_autofree char *none = format_duration(0);
    set_figure(p, "eta", none);
  }
  cohort_run_page_run_ended(p, completed);
}

/* Text data going through the tokenizer before the first step: how far it is. */
static void show_tokenize(CohortRunPage *p, JsonObject *ev)
{
  const char *data = cohort_event_text(ev, COHORT_FIELD_DATA, "");
  double done = cohort_event_number(ev, COHORT_FIELD_DONE_BYTES, 0) / 1e6;
  double total = cohort_event_number(ev, COHORT_FIELD_TOTAL_BYTES, 0) / 1e6;
  double source = cohort_event_number(ev, COHORT_FIELD_SOURCE_BYTES, 0) / 1e6;
  int ranks = (int)cohort_event_int(ev, COHORT_FIELD_RANKS, 1);
  g_autofree char *s =
      ranks > 1
          /* TRANSLATORS: the config key of the data (train_data), then megabytes. */
          ? g_strdup_printf(_("Tokenizing %s: %.1f MB of %.1f MB (rank 0's share of %.1f MB)"),
                            data, done, total, source)
          : g_strdup_printf(_("Tokenizing %s: %.1f MB of %.1f MB"), data, done, total);
  set_figure(p, "status", s);
  if (total > 0)
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), CLAMP(done / total, 0, 1));
}

void cohort_run_page_handle_event(CohortRunPage *p, JsonObject *ev)
{
  const char *name = cohort_event_name(ev);
  if (g_str_equal(name, COHORT_EVENT_START)) {
    show_start(p, ev);
  } else if (g_str_equal(name, COHORT_EVENT_STEP)) {
    show_step(p, ev);
  } else if (g_str_equal(name, COHORT_EVENT_EVAL)) {
    show_eval(p, ev);
  } else if (g_str_equal(name, COHORT_EVENT_SAMPLE)) {
    cohort_sample_view_add(p->samples, ev);
  } else if (g_str_equal(name, COHORT_EVENT_CHECKPOINT)) {
    g_autofree char *l =
        g_strdup_printf(_("checkpoint saved: %s"), cohort_event_text(ev, COHORT_FIELD_PATH, ""));
    cohort_run_page_append_log(p, l);
  } else if (g_str_equal(name, COHORT_EVENT_RANKS)) {
    cohort_ranks_view_show(p->ranks, ev);
  } else if (g_str_equal(name, COHORT_EVENT_HANG)) {
    cohort_ranks_view_show_hang(p->ranks, ev);
  } else if (g_str_equal(name, COHORT_EVENT_LATENTS)) {
    show_latents(p, ev);
  } else if (g_str_equal(name, COHORT_EVENT_HEALTH)) {
    g_autofree char *l = cohort_ranks_view_health_text(ev);
    cohort_run_page_append_log(p, l);
  } else if (g_str_equal(name, COHORT_EVENT_LOG)) {
    show_log(p, ev);
  } else if (g_str_equal(name, COHORT_EVENT_ERROR) && !p->live) {
    g_autofree char *l =
        g_strdup_printf(_("error: %s"), cohort_event_text(ev, COHORT_FIELD_MESSAGE, ""));
    cohort_run_page_append_log(p, l);
  } else if (g_str_equal(name, COHORT_EVENT_DONE)) {
    show_done(p, ev);
  } else if (g_str_equal(name, COHORT_EVENT_TOKENIZE)) {
    show_tokenize(p, ev);
  }
}

void cohort_run_page_append_log(CohortRunPage *p, const char *line)
{
  GtkTextIter end;
  gtk_text_buffer_get_end_iter(p->log, &end);
  gtk_text_buffer_insert(p->log, &end, line, -1);
  gtk_text_buffer_insert(p->log, &end, "\n", 1);
  int lines = gtk_text_buffer_get_line_count(p->log);
  if (lines > MAX_LOG_LINES) {
    GtkTextIter a, b;
    gtk_text_buffer_get_start_iter(p->log, &a);
    gtk_text_buffer_get_iter_at_line(p->log, &b, lines - MAX_LOG_LINES);
    gtk_text_buffer_delete(p->log, &a, &b);
  }
  gtk_text_buffer_get_end_iter(p->log, &end);
  GtkTextMark *mark = gtk_text_buffer_get_insert(p->log);
  gtk_text_buffer_place_cursor(p->log, &end);
  gtk_text_view_scroll_mark_onscreen(GTK_TEXT_VIEW(p->log_view), mark);
}

void cohort_run_page_set_status(CohortRunPage *p, const char *text)
{
  set_figure(p, "status", text);
}

void cohort_run_page_set_live(CohortRunPage *p, gboolean live)
{
  p->live = live;
  gtk_widget_set_visible(p->live_buttons, live);
  cohort_history_popover_set_can_show(p->history, !live);
}

void cohort_run_page_run_ended(CohortRunPage *p, gboolean completed)
{
  /* A stopped or failed run has no time left: nothing runs that it would measure. */
  if (!completed)
    set_figure(p, "eta", "–");
  p->final_phase = FALSE;
}

void cohort_run_page_set_ended(CohortRunPage *p, gboolean ended)
{
  gtk_widget_set_visible(p->ended_buttons, ended);
}

void cohort_run_page_set_workspace(CohortRunPage *p, const char *workspace)
{
  cohort_history_popover_set_workspace(p->history, workspace);
}

void cohort_run_page_set_current_run(CohortRunPage *p, const char *run_id)
{
  cohort_history_popover_set_current(p->history, run_id);
}

gboolean cohort_run_page_in_final_phase(CohortRunPage *p)
{
  return p->final_phase;
}

double cohort_run_page_get_smoothing(CohortRunPage *p)
{
  return gtk_range_get_value(GTK_RANGE(p->smoothing));
}

void cohort_run_page_set_smoothing(CohortRunPage *p, double weight)
{
  gtk_range_set_value(GTK_RANGE(p->smoothing), weight);
}

/* The chart's controls and its export. */

static void on_smoothing(GtkRange *range, CohortRunPage *p)
{
  cohort_loss_chart_set_smoothing(p->chart, gtk_range_get_value(range));
}

static void on_log_scale(GtkToggleButton *button, CohortRunPage *p)
{
  cohort_loss_chart_set_log_scale(p->chart, gtk_toggle_button_get_active(button));
}

static void on_export_response(GtkNativeDialog *native, int response, gpointer data)
{
  CohortRunPage *p = data;
  gboolean png = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(native), "cohort-png"));
  if (response == GTK_RESPONSE_ACCEPT) {
    g_autoptr(GFile) file = gtk_file_chooser_get_file(GTK_FILE_CHOOSER(native));
    g_autofree char *path = file != NULL ? g_file_get_path(file) : NULL;
    g_autoptr(GError) error = NULL;
    gboolean ok =
        path == NULL || (png ? cohort_loss_chart_save_png(p->chart, path, 1200, 700, &error)
                             : cohort_loss_chart_save_csv(p->chart, path, &error));
    if (!ok)
      cohort_run_page_append_log(p, error->message);
  }
  g_object_unref(native);
  g_object_unref(p);
}

static void export_chart(CohortRunPage *p, gboolean png)
{
  GtkRoot *root = gtk_widget_get_root(GTK_WIDGET(p));
  GtkFileChooserNative *native =
      gtk_file_chooser_native_new(png ? _("Save Chart as Image") : _("Save Points as CSV"),
                                  GTK_IS_WINDOW(root) ? GTK_WINDOW(root) : NULL,
                                  GTK_FILE_CHOOSER_ACTION_SAVE, _("_Save"), _("_Cancel"));
  gtk_file_chooser_set_current_name(GTK_FILE_CHOOSER(native), png ? "loss.png" : "loss.csv");
  g_object_set_data(G_OBJECT(native), "cohort-png", GINT_TO_POINTER(png));
  g_signal_connect(native, "response", G_CALLBACK(on_export_response), g_object_ref(p));
  gtk_native_dialog_show(GTK_NATIVE_DIALOG(native));
}

static void on_export_png(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  export_chart(data, TRUE);
}

static void on_export_csv(GSimpleAction *action, GVariant *param, gpointer data)
{
  (void)action;
  (void)param;
  export_chart(data, FALSE);
}

static void on_show_run(CohortHistoryPopover *pop, const char *run_id, CohortRunPage *p)
{
  (void)pop;
  g_signal_emit(p, signals[SIGNAL_SHOW_RUN], 0, run_id);
}

static void cohort_run_page_dispose(GObject *obj)
{
  gtk_widget_dispose_template(GTK_WIDGET(obj), COHORT_TYPE_RUN_PAGE);
  G_OBJECT_CLASS(cohort_run_page_parent_class)->dispose(obj);
}

static void cohort_run_page_class_init(CohortRunPageClass *klass)
{
  GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
  G_OBJECT_CLASS(klass)->dispose = cohort_run_page_dispose;
  g_type_ensure(COHORT_TYPE_LOSS_CHART);
  g_type_ensure(COHORT_TYPE_SAMPLE_VIEW);
  g_type_ensure(COHORT_TYPE_RANKS_VIEW);
  g_type_ensure(COHORT_TYPE_REFLOW_BOX);
  gtk_widget_class_set_template_from_resource(wc, "/org/cohort/Trainer/run-page.ui");
#define BIND(name) gtk_widget_class_bind_template_child(wc, CohortRunPage, name)
  BIND(status_value);
  BIND(step_value);
  BIND(epoch_value);
  BIND(loss_value);
  BIND(val_loss_value);
  BIND(lr_value);
  BIND(tokens_per_s_value);
  BIND(tokens_per_s_caption);
  BIND(eta_value);
  BIND(elapsed_value);
  BIND(loss_scale_value);
  BIND(samples);
  BIND(loss_scale_box);
  BIND(step_bar);
  BIND(epoch_bar);
  BIND(chart);
  BIND(ranks);
  BIND(reflow);
  BIND(live_buttons);
  BIND(ended_buttons);
  BIND(history_button);
  BIND(smoothing);
  BIND(log_scale);
  BIND(log_view);
#undef BIND
  signals[SIGNAL_SHOW_RUN] = g_signal_new("show-run", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST,
                                          0, NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
}

static void cohort_run_page_init(CohortRunPage *p)
{
  gtk_widget_init_template(GTK_WIDGET(p));
  p->log = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->log_view));
  p->history = COHORT_HISTORY_POPOVER(cohort_history_popover_new(p->chart));
  gtk_menu_button_set_popover(GTK_MENU_BUTTON(p->history_button), GTK_WIDGET(p->history));
  g_signal_connect(p->history, "show-run", G_CALLBACK(on_show_run), p);
  g_signal_connect(p->smoothing, "value-changed", G_CALLBACK(on_smoothing), p);
  g_signal_connect(p->log_scale, "toggled", G_CALLBACK(on_log_scale), p);
  static const GActionEntry actions[] = {
      {.name = "export-png", .activate = on_export_png},
      {.name = "export-csv", .activate = on_export_csv},
  };
  g_autoptr(GSimpleActionGroup) group = g_simple_action_group_new();
  g_action_map_add_action_entries(G_ACTION_MAP(group), actions, G_N_ELEMENTS(actions), p);
  gtk_widget_insert_action_group(GTK_WIDGET(p), "chart", G_ACTION_GROUP(group));
  cohort_run_page_reset(p);
  cohort_run_page_set_status(p, _("Not running. Press Start to train with these settings."));
}

GtkWidget *cohort_run_page_new(void)
{
  return g_object_new(COHORT_TYPE_RUN_PAGE, NULL);
}

/* For the tests. */

const char *cohort_run_page_get_figure(CohortRunPage *p, const char *name)
{
  if (g_str_equal(name, "sample"))
    return cohort_sample_view_get_text(p->samples);
  GtkLabel *label = figure_label(p, name);
  return label != NULL ? gtk_label_get_text(label) : NULL;
}

gboolean cohort_run_page_figure_shown(CohortRunPage *p, const char *figure)
{
  GtkLabel *label = figure_label(p, figure);
  return label != NULL && gtk_widget_get_visible(gtk_widget_get_parent(GTK_WIDGET(label)));
}

const char *cohort_run_page_get_throughput_caption(CohortRunPage *p)
{
  return gtk_label_get_text(p->tokens_per_s_caption);
}

CohortSampleView *cohort_run_page_get_samples(CohortRunPage *p)
{
  return p->samples;
}

CohortLossChart *cohort_run_page_get_chart(CohortRunPage *p)
{
  return p->chart;
}

CohortRanksView *cohort_run_page_get_ranks(CohortRunPage *p)
{
  return p->ranks;
}

CohortHistoryPopover *cohort_run_page_get_history(CohortRunPage *p)
{
  return p->history;
}

CohortReflowBox *cohort_run_page_get_reflow(CohortRunPage *p)
{
  return p->reflow;
}

gboolean cohort_run_page_live_buttons_shown(CohortRunPage *p)
{
  return gtk_widget_get_visible(p->live_buttons);
}

gboolean cohort_run_page_ended_buttons_shown(CohortRunPage *p)
{
  return gtk_widget_get_visible(p->ended_buttons);
}

double cohort_run_page_get_step_fraction(CohortRunPage *p)
{
  return gtk_progress_bar_get_fraction(GTK_PROGRESS_BAR(p->step_bar));
}

guint cohort_run_page_count_points(CohortRunPage *p, gboolean validation)
{
  return cohort_loss_chart_count(p->chart, validation);
}

guint cohort_run_page_count_ranks(CohortRunPage *p)
{
  return cohort_ranks_view_count(p->ranks);
}

int cohort_run_page_get_slowest(CohortRunPage *p)
{
  return cohort_ranks_view_get_slowest(p->ranks);
}

guint cohort_run_page_count_parts(CohortRunPage *p, gboolean teacher)
{
  return cohort_loss_chart_count_series(p->chart, teacher ? COHORT_FIELD_LOSS_DISTILL
                                                          : COHORT_FIELD_LOSS_TASK);
}

gboolean cohort_run_page_accuracy_shown(CohortRunPage *p)
{
  return cohort_run_page_count_accuracy_points(p) > 0;
}

guint cohort_run_page_count_accuracy_points(CohortRunPage *p)
{
  return cohort_loss_chart_count_series(p->chart, COHORT_FIELD_ACCURACY);
}

gboolean cohort_run_page_ranks_show_syncbn(CohortRunPage *p)
{
  return cohort_ranks_view_count(p->ranks) > 0 && cohort_ranks_view_has_syncbn_column(p->ranks);
}

char *cohort_run_page_get_log(CohortRunPage *p)
{
  GtkTextIter a, b;
  gtk_text_buffer_get_bounds(p->log, &a, &b);
  return gtk_text_buffer_get_text(p->log, &a, &b, FALSE);
}
