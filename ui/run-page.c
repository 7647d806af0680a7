#include "ui/run-page.h"

#include <glib/gi18n.h>
#include <math.h>

#include "ui/loss-chart.h"

typedef struct {
  GHashTable *figures; /* figure name -> GtkLabel */
  GtkWidget *step_bar;
  GtkWidget *epoch_bar;
  GtkWidget *chart;
  GtkWidget *ranks_grid;
  GtkWidget *ranks_placeholder;
  GtkWidget *loss_scale_box; /* shown only for fp16 runs, which report a loss scale */
  GtkTextBuffer *log;
  GtkWidget *log_view;
  guint n_ranks;
  int slowest;
  int total_steps;
  int steps_per_epoch;
} RunPage;

/* Keeps the log view bounded: a long run writes many lines. */
#define MAX_LOG_LINES 5000

static RunPage *get(GtkWidget *page)
{
  return g_object_get_data(G_OBJECT(page), "cohort-run-page");
}

static void page_free(gpointer data)
{
  RunPage *p = data;
  g_hash_table_unref(p->figures);
  g_free(p);
}

static void set_figure(RunPage *p, const char *name, const char *text)
{
  GtkLabel *label = g_hash_table_lookup(p->figures, name);
  if (label != NULL)
    gtk_label_set_text(label, text);
}

static GtkWidget *figure(RunPage *p, GtkWidget *grid, int col, int row, const char *name,
                         const char *title)
{
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 2);
  GtkWidget *caption = gtk_label_new(title);
  gtk_widget_add_css_class(caption, "dim-label");
  gtk_widget_add_css_class(caption, "caption");
  gtk_label_set_xalign(GTK_LABEL(caption), 0);
  GtkWidget *value = gtk_label_new("–");
  gtk_widget_add_css_class(value, "cohort-figure");
  gtk_label_set_xalign(GTK_LABEL(value), 0);
  gtk_label_set_selectable(GTK_LABEL(value), TRUE);
  gtk_box_append(GTK_BOX(box), caption);
  gtk_box_append(GTK_BOX(box), value);
  gtk_widget_set_hexpand(box, TRUE);
  gtk_grid_attach(GTK_GRID(grid), box, col, row, 1, 1);
  g_hash_table_insert(p->figures, g_strdup(name), value);
  return value;
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

static GtkWidget *frame_with(const char *title, GtkWidget *child)
{
  GtkWidget *box = gtk_box_new(GTK_ORIENTATION_VERTICAL, 6);
  GtkWidget *heading = gtk_label_new(title);
  gtk_widget_add_css_class(heading, "heading");
  gtk_label_set_xalign(GTK_LABEL(heading), 0);
  GtkWidget *frame = gtk_frame_new(NULL);
  gtk_frame_set_child(GTK_FRAME(frame), child);
  gtk_box_append(GTK_BOX(box), heading);
  gtk_box_append(GTK_BOX(box), frame);
  return box;
}

GtkWidget *cohort_run_page_new(void)
{
  RunPage *p = g_new0(RunPage, 1);
  p->figures = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  p->slowest = -1;

  GtkWidget *page = gtk_box_new(GTK_ORIENTATION_VERTICAL, 12);
  gtk_widget_add_css_class(page, "cohort-page");
  g_object_set_data_full(G_OBJECT(page), "cohort-run-page", p, page_free);

  GtkWidget *status = gtk_label_new(_("Not running. Press Start to train with these settings."));
  gtk_widget_add_css_class(status, "title-4");
  gtk_label_set_xalign(GTK_LABEL(status), 0);
  gtk_label_set_wrap(GTK_LABEL(status), TRUE);
  gtk_label_set_selectable(GTK_LABEL(status), TRUE);
  g_hash_table_insert(p->figures, g_strdup("status"), status);
  gtk_box_append(GTK_BOX(page), status);

  GtkWidget *bars = gtk_grid_new();
  gtk_grid_set_column_spacing(GTK_GRID(bars), 12);
  gtk_grid_set_row_spacing(GTK_GRID(bars), 6);
  GtkWidget *sl = gtk_label_new(_("Steps"));
  GtkWidget *el = gtk_label_new(_("Epoch"));
  gtk_label_set_xalign(GTK_LABEL(sl), 0);
  gtk_label_set_xalign(GTK_LABEL(el), 0);
  p->step_bar = gtk_progress_bar_new();
  p->epoch_bar = gtk_progress_bar_new();
  gtk_progress_bar_set_show_text(GTK_PROGRESS_BAR(p->step_bar), TRUE);
  gtk_progress_bar_set_show_text(GTK_PROGRESS_BAR(p->epoch_bar), TRUE);
  gtk_widget_set_hexpand(p->step_bar, TRUE);
  gtk_widget_set_valign(p->step_bar, GTK_ALIGN_CENTER);
  gtk_widget_set_valign(p->epoch_bar, GTK_ALIGN_CENTER);
  gtk_grid_attach(GTK_GRID(bars), sl, 0, 0, 1, 1);
  gtk_grid_attach(GTK_GRID(bars), p->step_bar, 1, 0, 1, 1);
  gtk_grid_attach(GTK_GRID(bars), el, 0, 1, 1, 1);
  gtk_grid_attach(GTK_GRID(bars), p->epoch_bar, 1, 1, 1, 1);
  gtk_box_append(GTK_BOX(page), bars);

  GtkWidget *grid = gtk_grid_new();
  gtk_grid_set_column_spacing(GTK_GRID(grid), 18);
  gtk_grid_set_row_spacing(GTK_GRID(grid), 8);
  figure(p, grid, 0, 0, "step", _("Step"));
  figure(p, grid, 1, 0, "epoch", _("Epoch"));
  figure(p, grid, 2, 0, "loss", _("Loss"));
  figure(p, grid, 3, 0, "val_loss", _("Validation loss"));
  figure(p, grid, 0, 1, "lr", _("Learning rate"));
  figure(p, grid, 1, 1, "tokens_per_s", _("Tokens per second"));
  figure(p, grid, 2, 1, "eta", _("Time left"));
  figure(p, grid, 3, 1, "elapsed", _("Elapsed"));
  p->loss_scale_box =
      gtk_widget_get_parent(figure(p, grid, 0, 2, "loss_scale", _("Loss scale (fp16)")));
  gtk_widget_set_visible(p->loss_scale_box, FALSE);
  gtk_box_append(GTK_BOX(page), grid);

  GtkWidget *middle = gtk_box_new(GTK_ORIENTATION_HORIZONTAL, 12);
  gtk_widget_set_vexpand(middle, TRUE);
  p->chart = cohort_loss_chart_new();
  GtkWidget *chart_box = frame_with(_("Loss"), p->chart);
  gtk_widget_set_hexpand(chart_box, TRUE);
  gtk_box_append(GTK_BOX(middle), chart_box);

  GtkWidget *side = gtk_box_new(GTK_ORIENTATION_VERTICAL, 12);
  gtk_widget_set_size_request(side, 360, -1);
  GtkWidget *sample = gtk_label_new(_("No sample yet."));
  gtk_label_set_wrap(GTK_LABEL(sample), TRUE);
  gtk_label_set_wrap_mode(GTK_LABEL(sample), PANGO_WRAP_WORD_CHAR);
  gtk_label_set_xalign(GTK_LABEL(sample), 0);
  gtk_label_set_yalign(GTK_LABEL(sample), 0);
  gtk_label_set_selectable(GTK_LABEL(sample), TRUE);
  gtk_label_set_max_width_chars(GTK_LABEL(sample), 40);
  gtk_widget_add_css_class(sample, "cohort-sample");
  g_hash_table_insert(p->figures, g_strdup("sample"), sample);
  gtk_box_append(GTK_BOX(side), frame_with(_("Latest sample"), sample));

  GtkWidget *ranks = gtk_box_new(GTK_ORIENTATION_VERTICAL, 0);
  p->ranks_grid = gtk_grid_new();
  gtk_grid_set_column_spacing(GTK_GRID(p->ranks_grid), 12);
  gtk_grid_set_row_spacing(GTK_GRID(p->ranks_grid), 4);
  gtk_widget_add_css_class(p->ranks_grid, "cohort-ranks");
  p->ranks_placeholder = gtk_label_new(_("Per-rank timings appear when several ranks run."));
  gtk_label_set_wrap(GTK_LABEL(p->ranks_placeholder), TRUE);
  gtk_widget_add_css_class(p->ranks_placeholder, "dim-label");
  gtk_box_append(GTK_BOX(ranks), p->ranks_placeholder);
  gtk_box_append(GTK_BOX(ranks), p->ranks_grid);
  gtk_box_append(GTK_BOX(side), frame_with(_("Ranks"), ranks));
  gtk_box_append(GTK_BOX(middle), side);
  gtk_box_append(GTK_BOX(page), middle);

  p->log_view = gtk_text_view_new();
  gtk_text_view_set_editable(GTK_TEXT_VIEW(p->log_view), FALSE);
  gtk_text_view_set_monospace(GTK_TEXT_VIEW(p->log_view), TRUE);
  gtk_text_view_set_wrap_mode(GTK_TEXT_VIEW(p->log_view), GTK_WRAP_WORD_CHAR);
  p->log = gtk_text_view_get_buffer(GTK_TEXT_VIEW(p->log_view));
  GtkWidget *scroll = gtk_scrolled_window_new();
  gtk_scrolled_window_set_child(GTK_SCROLLED_WINDOW(scroll), p->log_view);
  gtk_widget_set_size_request(scroll, -1, 140);
  gtk_box_append(GTK_BOX(page), frame_with(_("Output"), scroll));
  return page;
}

void cohort_run_page_reset(GtkWidget *page)
{
  RunPage *p = get(page);
  const char *names[] = {"step",         "epoch", "loss",    "val_loss",  "lr",
                         "tokens_per_s", "eta",   "elapsed", "loss_scale"};
  for (guint i = 0; i < G_N_ELEMENTS(names); i++)
    set_figure(p, names[i], "–");
  set_figure(p, "sample", _("No sample yet."));
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->step_bar), 0);
  gtk_progress_bar_set_fraction(GTK_PROGRESS_BAR(p->epoch_bar), 0);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->step_bar), NULL);
  gtk_progress_bar_set_text(GTK_PROGRESS_BAR(p->epoch_bar), NULL);
  cohort_loss_chart_clear(p->chart);
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(p->ranks_grid)) != NULL)
    gtk_grid_remove(GTK_GRID(p->ranks_grid), child);
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

static void show_step(RunPage *p, JsonObject *ev)
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

static void show_ranks(RunPage *p, JsonObject *ev)
{
  JsonArray *ranks =
      json_object_has_member(ev, "ranks") ? json_object_get_array_member(ev, "ranks") : NULL;
  if (ranks == NULL)
    return;
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(p->ranks_grid)) != NULL)
    gtk_grid_remove(GTK_GRID(p->ranks_grid), child);
  gtk_widget_set_visible(p->ranks_placeholder, FALSE);
  p->slowest = (int)num(ev, "slowest", -1);

  const char *heads[] = {_("Rank"), _("Host"),          _("Step"),
                         _("Data"), _("Communication"), _("Memory")};
  for (int c = 0; c < 6; c++)
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
    const char *host = json_object_get_string_member_with_default(r, "host", "");
    const char *cols[] = {c0, host, c2, c3, c4, c5};
    for (int c = 0; c < 6; c++)
      gtk_grid_attach(GTK_GRID(p->ranks_grid), cell(cols[c], FALSE, slow), c, (int)i + 1, 1, 1);
  }
}

void cohort_run_page_handle_event(GtkWidget *page, JsonObject *ev)
{
  RunPage *p = get(page);
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
  } else if (g_str_equal(name, "step")) {
    show_step(p, ev);
  } else if (g_str_equal(name, "eval")) {
    double v = num(ev, "val_loss", NAN);
    if (!isnan(v)) {
      g_autofree char *l = g_strdup_printf("%.4f", v);
      set_figure(p, "val_loss", l);
      cohort_loss_chart_add(p->chart, TRUE, num(ev, "step", 0), v);
    }
  } else if (g_str_equal(name, "sample")) {
    set_figure(p, "sample", json_object_get_string_member_with_default(ev, "text", ""));
  } else if (g_str_equal(name, "checkpoint")) {
    g_autofree char *l = g_strdup_printf(
        _("checkpoint saved: %s"), json_object_get_string_member_with_default(ev, "path", ""));
    cohort_run_page_append_log(page, l);
  } else if (g_str_equal(name, "ranks")) {
    show_ranks(p, ev);
  } else if (g_str_equal(name, "log")) {
    g_autofree char *l =
        g_strdup_printf("[%s] %s", json_object_get_string_member_with_default(ev, "level", "info"),
                        json_object_get_string_member_with_default(ev, "message", ""));
    cohort_run_page_append_log(page, l);
  } else if (g_str_equal(name, "error")) {
    g_autofree char *l = g_strdup_printf(
        _("error: %s"), json_object_get_string_member_with_default(ev, "message", ""));
    cohort_run_page_append_log(page, l);
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

void cohort_run_page_append_log(GtkWidget *page, const char *line)
{
  RunPage *p = get(page);
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

void cohort_run_page_set_status(GtkWidget *page, const char *text)
{
  set_figure(get(page), "status", text);
}

const char *cohort_run_page_get_figure(GtkWidget *page, const char *name)
{
  GtkLabel *label = g_hash_table_lookup(get(page)->figures, name);
  return label != NULL ? gtk_label_get_text(label) : NULL;
}

double cohort_run_page_get_step_fraction(GtkWidget *page)
{
  return gtk_progress_bar_get_fraction(GTK_PROGRESS_BAR(get(page)->step_bar));
}

guint cohort_run_page_count_points(GtkWidget *page, gboolean validation)
{
  return cohort_loss_chart_count(get(page)->chart, validation);
}

guint cohort_run_page_count_ranks(GtkWidget *page)
{
  return get(page)->n_ranks;
}

int cohort_run_page_get_slowest(GtkWidget *page)
{
  return get(page)->slowest;
}

char *cohort_run_page_get_log(GtkWidget *page)
{
  RunPage *p = get(page);
  GtkTextIter a, b;
  gtk_text_buffer_get_bounds(p->log, &a, &b);
  return gtk_text_buffer_get_text(p->log, &a, &b, FALSE);
}

gboolean cohort_run_page_figure_shown(GtkWidget *page, const char *figure)
{
  GtkWidget *label = g_hash_table_lookup(get(page)->figures, figure);
  return label != NULL && gtk_widget_get_visible(gtk_widget_get_parent(label));
}
