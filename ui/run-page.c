#include "ui/run-page-private.h"

#include <glib/gi18n.h>
#include <math.h>

#include "ui/loss-chart-private.h"
#include "ui/sample-view.h"

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
  GtkLabel *eta_value;
  GtkLabel *elapsed_value;
  GtkLabel *loss_scale_value;
  CohortSampleView *samples;
  GtkWidget *loss_scale_box; /* shown only for fp16 runs, which report a loss scale */
  GtkWidget *step_bar;
  GtkWidget *epoch_bar;
  CohortLossChart *chart;
  GtkWidget *accuracy_box; /* shown for runs whose model reports an accuracy (classifiers) */
  CohortLossChart *accuracy_chart;
  GtkWidget *ranks_grid;
  GtkWidget *ranks_placeholder;
  GtkWidget *log_view;
  GtkTextBuffer *log;
  guint n_ranks;
  gboolean syncbn_column; /* the ranks table shows SyncBatchNorm's time */
  int slowest;
  int total_steps;
  int steps_per_epoch;
};

G_DEFINE_FINAL_TYPE(CohortRunPage, cohort_run_page, GTK_TYPE_BOX)

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

static char *format_bytes(double b)
{
  return g_format_size((guint64)MAX(b, 0));
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
  gtk_widget_class_set_template_from_resource(wc, "/org/cohort/Trainer/run-page.ui");
  gtk_widget_class_bind_template_child(wc, CohortRunPage, status_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, step_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, epoch_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, loss_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, val_loss_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, lr_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, tokens_per_s_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, eta_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, elapsed_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, loss_scale_value);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, samples);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, loss_scale_box);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, step_bar);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, epoch_bar);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, chart);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, accuracy_box);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, accuracy_chart);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, ranks_grid);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, ranks_placeholder);
  gtk_widget_class_bind_template_child(wc, CohortRunPage, log_view);
}

static void cohort_run_page_init(CohortRunPage *p)
{
  gtk_widget_init_template(GTK_WIDGET(p));
  p->log = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->log_view));
  p->slowest = -1;
  cohort_loss_chart_set_accuracy(p->accuracy_chart, TRUE);
}

GtkWidget *cohort_run_page_new(void)
{
  return g_object_new(COHORT_TYPE_RUN_PAGE, NULL);
}

static void clear_ranks(CohortRunPage *p)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(p->ranks_grid)) != NULL)
    gtk_grid_remove(GTK_GRID(p->ranks_grid), child);
}

void cohort_run_page_reset(CohortRunPage *p)
{
  const char *names[] = {"step",         "epoch", "loss",    "val_loss",  "lr",
                         "tokens_per_s", "eta",   "elapsed", "loss_scale"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    set_figure(p, names[i], "–");
  cohort_sample_view_reset(p->samples);
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), 0);
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->epoch_bar), 0);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->step_bar), NULL);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->epoch_bar), NULL);
  cohort_loss_chart_clear(p->chart);
  cohort_loss_chart_clear(p->accuracy_chart);
  gtk_widget_set_visible(p->accuracy_box, FALSE);
  clear_ranks(p);
  gtk_widget_set_visible(p->ranks_placeholder, TRUE);
  gtk_widget_set_visible(p->loss_scale_box, FALSE);
  p->n_ranks = 0;
  p->slowest = -1;
  p->total_steps = 0;
  p->steps_per_epoch = 0;
  gtk_text_buffer_set_text(p->log, "", -1);
}

static double num(JsonObject *ev, const char *key, double fallback)
{
  JsonNode *n = json_object_get_member(ev, key);
  if (n == NULL || !JSON_NODE_HOLDS_VALUE(n))
    return fallback;
  GType t = json_node_get_value_type(n);
  if (t == G_TYPE_INT64 || t == G_TYPE_DOUBLE || t == G_TYPE_BOOLEAN)
    return json_node_get_double(n);
  return fallback;
}

static void show_step(CohortRunPage *p, JsonObject *ev)
{
  int step = (int)num(ev, "step", 0);
  int total = (int)num(ev, "total_steps", p->total_steps);
  p->total_steps = total;
  p->steps_per_epoch = (int)num(ev, "steps_per_epoch", p->steps_per_epoch);
  g_autofree char *s =
      total > 0 ? g_strdup_printf(_("%d of %d"), step, total) : g_strdup_printf("%d", step);
  set_figure(p, "step", s);
  if (total > 0) {
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), CLAMP((double)step / total, 0, 1));
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->step_bar), s);
  }
  int epoch = (int)num(ev, "epoch", 0), epoch_step = (int)num(ev, "epoch_step", 0);
  g_autofree char *e = g_strdup_printf("%d", epoch + 1);
  set_figure(p, "epoch", e);
  if (p->steps_per_epoch > 0) {
    g_autofree char *et =
        g_strdup_printf(_("epoch %d: %d of %d steps"), epoch + 1, epoch_step, p->steps_per_epoch);
    gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->epoch_bar),
                                  CLAMP((double)epoch_step / p->steps_per_epoch, 0, 1));
    gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->epoch_bar), et);
  }
  double loss = num(ev, "loss", NAN);
  if (!isnan(loss)) {
    g_autofree char *l = g_strdup_printf("%.4f", loss);
    set_figure(p, "loss", l);
    cohort_loss_chart_add(p->chart, FALSE, step, loss);
  }
  cohort_loss_chart_add_part(p->chart, TRUE, step, num(ev, "loss_distill", NAN));
  cohort_loss_chart_add_part(p->chart, FALSE, step, num(ev, "loss_task", NAN));
  double lr = num(ev, "lr", NAN);
  if (!isnan(lr)) {
    g_autofree char *l = g_strdup_printf("%.3g", lr);
    set_figure(p, "lr", l);
  }
  double tps = num(ev, "tokens_per_s", NAN);
  if (!isnan(tps)) {
    g_autofree char *l = g_strdup_printf("%.0f", tps);
    set_figure(p, "tokens_per_s", l);
  }
  double eta = num(ev, "eta_s", NAN);
  if (!isnan(eta)) {
    g_autofree char *l = format_duration(eta);
    set_figure(p, "eta", l);
  }
  double elapsed = num(ev, "elapsed_s", NAN);
  if (!isnan(elapsed)) {
    g_autofree char *l = format_duration(elapsed);
    set_figure(p, "elapsed", l);
  }
  double scale = num(ev, "loss_scale", NAN);
  if (!isnan(scale)) {
    int skipped = (int)num(ev, "skipped_steps", 0);
    g_autofree char *l =
        skipped > 0
            ? g_strdup_printf(ngettext("%.0f, %d step skipped", "%.0f, %d steps skipped", skipped),
                              scale, skipped)
            : g_strdup_printf("%.0f", scale);
    set_figure(p, "loss_scale", l);
    gtk_widget_set_visible(p->loss_scale_box, TRUE);
  }
}

static GtkWidget *cell(const char *text, gboolean header, gboolean slow)
{
  GtkWidget *l = gtk_label_new(text);
  gtk_label_set_xalign(GTK_LABEL(l), header ? 0 : 1);
  if (header)
    gtk_widget_add_css_class(l, "heading");
  if (slow)
    gtk_widget_add_css_class(l, "cohort-slowest");
  return l;
}

static void show_ranks(CohortRunPage *p, JsonObject *ev)
{
  JsonArray *ranks =
      json_object_has_member(ev, "ranks") ? json_object_get_array_member(ev, "ranks") : NULL;
  if (ranks == NULL)
    return;
  clear_ranks(p);
  gtk_widget_set_visible(p->ranks_placeholder, FALSE);
  p->slowest = (int)num(ev, "slowest", -1);

  /* SyncBatchNorm's collectives block compute: their time gets a column when the run has it. */
  JsonObject *first =
      json_array_get_length(ranks) > 0 ? json_array_get_object_element(ranks, 0) : NULL;
  p->syncbn_column = first != NULL && json_object_has_member(first, "syncbn_s");
  int n_cols = p->syncbn_column ? 7 : 6;
  const char *heads[] = {_("Rank"),          _("Host"),   _("Step"),  _("Data"),
                         _("Communication"), _("Memory"), _("SyncBN")};
  for (int c = 0; c < n_cols; c++)
    gtk_grid_attach(GTK_GRID(p->ranks_grid), cell(heads[c], TRUE, FALSE), c, 0, 1, 1);
  p->n_ranks = json_array_get_length(ranks);
  for (guint i = 0; i < p->n_ranks; i++) {
    JsonObject *r = json_array_get_object_element(ranks, i);
    if (r == NULL)
      continue;
    int rank = (int)num(r, "rank", i);
    gboolean slow = rank == p->slowest;
    double mem = num(r, "gpu_mem_used", num(r, "mem_bytes", 0));
    g_autofree char *c0 = g_strdup_printf("%d", rank);
    g_autofree char *c2 = g_strdup_printf(_("%.0f ms"), num(r, "step_s", 0) * 1000);
    g_autofree char *c3 = g_strdup_printf(_("%.0f ms"), num(r, "data_s", 0) * 1000);
    g_autofree char *c4 = g_strdup_printf(_("%.0f ms"), num(r, "comm_s", 0) * 1000);
    g_autofree char *c5 = format_bytes(mem);
    g_autofree char *c6 = g_strdup_printf(_("%.0f ms"), num(r, "syncbn_s", 0) * 1000);
    const char *host = json_object_get_string_member_with_default(r, "host", "");
    const char *cols[] = {c0, host, c2, c3, c4, c5, c6};
    for (int c = 0; c < n_cols; c++)
      gtk_grid_attach(GTK_GRID(p->ranks_grid), cell(cols[c], FALSE, slow), c, (int)i + 1, 1, 1);
  }
}

/* Whether the start event's "metrics" (what each eval event will carry) names `metric`. */
static gboolean has_metric(JsonObject *start, const char *metric)
{
  JsonNode *node = json_object_get_member(start, "metrics");
  if (node == NULL || !JSON_NODE_HOLDS_ARRAY(node))
    return FALSE;
  JsonArray *a = json_node_get_array(node);
  for (guint i = 0; i < json_array_get_length(a); i++) {
    JsonNode *e = json_array_get_element(a, i);
    if (JSON_NODE_HOLDS_VALUE(e) && json_node_get_value_type(e) == G_TYPE_STRING &&
        g_str_equal(json_node_get_string(e), metric))
      return TRUE;
  }
  return FALSE;
}

void cohort_run_page_handle_event(CohortRunPage *p, JsonObject *ev)
{
  const char *name = json_object_get_string_member_with_default(ev, "event", "");
  if (g_str_equal(name, "start")) {
    /* A resumed run (a replayed events.jsonl holds its earlier part too) redoes the steps
     * after its checkpoint: their old points go. */
    cohort_loss_chart_drop_after(p->chart, num(ev, "start_step", 0));
    p->total_steps = (int)num(ev, "total_steps", 0);
    p->steps_per_epoch = (int)num(ev, "steps_per_epoch", 0);
    int world = (int)num(ev, "world_size", 1);
    g_autofree char *s = g_strdup_printf(
        ngettext("Training %s: %.1f M parameters on %s, %d process",
                 "Training %s: %.1f M parameters on %s, %d processes", world),
        json_object_get_string_member_with_default(ev, "run", ""), num(ev, "params", 0) / 1e6,
        json_object_get_string_member_with_default(ev, "device", "?"), world);
    set_figure(p, "status", s);
    gtk_widget_set_visible(p->accuracy_box, has_metric(ev, "accuracy"));
  } else if (g_str_equal(name, "step")) {
    show_step(p, ev);
  } else if (g_str_equal(name, "eval")) {
    double v = num(ev, "val_loss", NAN);
    if (!isnan(v)) {
      g_autofree char *l = g_strdup_printf("%.4f", v);
      set_figure(p, "val_loss", l);
      cohort_loss_chart_add(p->chart, TRUE, num(ev, "step", 0), v);
    }
    cohort_loss_chart_add(p->accuracy_chart, TRUE, num(ev, "step", 0), num(ev, "accuracy", NAN));
  } else if (g_str_equal(name, "sample")) {
    cohort_sample_view_add(p->samples, ev);
  } else if (g_str_equal(name, "checkpoint")) {
    g_autofree char *l = g_strdup_printf(
        _("checkpoint saved: %s"), json_object_get_string_member_with_default(ev, "path", ""));
    cohort_run_page_append_log(p, l);
  } else if (g_str_equal(name, "ranks")) {
    show_ranks(p, ev);
  } else if (g_str_equal(name, "log")) {
    g_autofree char *l =
        g_strdup_printf("[%s] %s", json_object_get_string_member_with_default(ev, "level", "info"),
                        json_object_get_string_member_with_default(ev, "message", ""));
    cohort_run_page_append_log(p, l);
  } else if (g_str_equal(name, "error")) {
    g_autofree char *l = g_strdup_printf(
        _("error: %s"), json_object_get_string_member_with_default(ev, "message", ""));
    cohort_run_page_append_log(p, l);
  } else if (g_str_equal(name, "done")) {
    double v = num(ev, "val_loss", NAN);
    if (!isnan(v)) {
      g_autofree char *l = g_strdup_printf("%.4f", v);
      set_figure(p, "val_loss", l);
    }
    if (g_strcmp0(json_object_get_string_member_with_default(ev, "status", ""), "completed") == 0 &&
        p->total_steps > 0)
      gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), 1.0);
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

const char *cohort_run_page_get_figure(CohortRunPage *p, const char *name)
{
  if (g_str_equal(name, "sample"))
    return cohort_sample_view_get_text(p->samples);
  GtkLabel *label = figure_label(p, name);
  return label != NULL ? gtk_label_get_text(label) : NULL;
}

CohortSampleView *cohort_run_page_get_samples(CohortRunPage *p)
{
  return p->samples;
}

double cohort_run_page_get_step_fraction(CohortRunPage *p)
{
  return gtk_progress_bar_get_fraction(GTK_PROGRESS_BAR(p->step_bar));
}

guint cohort_run_page_count_points(CohortRunPage *p, gboolean validation)
{
  return cohort_loss_chart_count(p->chart, validation);
}

guint cohort_run_page_count_parts(CohortRunPage *p, gboolean teacher)
{
  return cohort_loss_chart_count_part(p->chart, teacher);
}

guint cohort_run_page_count_accuracy_points(CohortRunPage *p)
{
  return cohort_loss_chart_count(p->accuracy_chart, TRUE);
}

gboolean cohort_run_page_ranks_show_syncbn(CohortRunPage *p)
{
  return p->n_ranks > 0 && p->syncbn_column;
}

gboolean cohort_run_page_accuracy_shown(CohortRunPage *p)
{
  return gtk_widget_get_visible(p->accuracy_box);
}

guint cohort_run_page_count_ranks(CohortRunPage *p)
{
  return p->n_ranks;
}

int cohort_run_page_get_slowest(CohortRunPage *p)
{
  return p->slowest;
}

char *cohort_run_page_get_log(CohortRunPage *p)
{
  GtkTextIter a, b;
  gtk_text_buffer_get_bounds(p->log, &a, &b);
  return gtk_text_buffer_get_text(p->log, &a, &b, FALSE);
}

gboolean cohort_run_page_figure_shown(CohortRunPage *p, const char *figure)
{
  GtkLabel *label = figure_label(p, figure);
  return label != NULL && gtk_widget_get_visible(gtk_widget_get_parent(GTK_WIDGET(label)));
}
