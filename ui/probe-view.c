#include "ui/probe-view.h"

#include <glib/gi18n.h>

#include "ui/progress-event.h"
#include "ui/run.h"

struct _CohortProbeView {
  GtkBox parent_instance;
  GtkWidget *button;
  GtkWidget *status;
  GtkWidget *measured;
  GtkWidget *grid;
  GtkWidget *advice;
  CohortProbeCommandFunc command;
  gpointer user;
  CohortRun *run;
  gboolean shown; /* a probe event arrived for this run */
  char *error;    /* the run's error event */
};

G_DEFINE_FINAL_TYPE(CohortProbeView, cohort_probe_view, GTK_TYPE_BOX)

static GtkWidget *cell(const char *text, gboolean header)
{
  GtkWidget *l = gtk_label_new(text);
  gtk_label_set_xalign(GTK_LABEL(l), header ? 0 : 1);
  gtk_widget_add_css_class(l, header ? "heading" : "numeric");
  return l;
}

static void clear_grid(CohortProbeView *v)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(v->grid)) != NULL)
    gtk_grid_remove(GTK_GRID(v->grid), child);
}

static JsonObject *find_collective(JsonObject *measured, const char *name)
{
  JsonArray *c = cohort_event_list(measured, COHORT_FIELD_COLLECTIVES);
  for (guint i = 0; c != NULL && i < json_array_get_length(c); i++) {
    JsonObject *o = json_array_get_object_element(c, i);
    if (o != NULL && g_strcmp0(cohort_event_text(o, COHORT_FIELD_COLLECTIVE, NULL), name) == 0)
      return o;
  }
  return NULL;
}

/* A measured time as people read it: "< 1 ms" for what rounds to nothing, milliseconds below
 * a second ("12 ms", "1.4 ms"), seconds above ("2.35 s"); never "0.000 s". */
char *cohort_probe_duration_text(double s)
{
  if (!(s >= 0.0005))
    return g_strdup(_("< 1 ms"));
  if (s < 0.01)
    return g_strdup_printf(_("%.1f ms"), s * 1e3);
  if (s < 1)
    return g_strdup_printf(_("%.0f ms"), s * 1e3);
  return g_strdup_printf(_("%.2f s"), s);
}

/* Whether every gradient bucket became final only as backward ended (a small model's one
 * bucket): then no all-reduce can run while backward does. */
static gboolean buckets_at_end(JsonObject *measured)
{
  JsonArray *b = cohort_event_list(measured, COHORT_FIELD_BUCKETS);
  for (guint i = 0; b != NULL && i < json_array_get_length(b); i++) {
    JsonObject *o = json_array_get_object_element(b, i);
    if (o != NULL && cohort_event_number(o, COHORT_FIELD_READY, 1) < 0.99)
      return FALSE;
  }
  return b != NULL && json_array_get_length(b) > 0;
}

/* The share of the buckets' communication that backward hid; a row without communication
 * backward could hide (one process, under a millisecond of it, or buckets that are ready only
 * at the end) has nothing to hide. */
static char *hidden_text(JsonObject *row, gboolean at_end)
{
  double comm = cohort_event_number(row, COHORT_FIELD_BUCKET_COMM_S, 0);
  if (cohort_event_int(row, COHORT_FIELD_WORLD_SIZE, 0) < 2 || !(comm >= 0.0005) || at_end)
    return g_strdup(_("nothing to hide"));
  return g_strdup_printf(_("%.0f %%"), cohort_event_number(row, COHORT_FIELD_HIDDEN, 0) * 100);
}

static char *rate_text(JsonObject *row)
{
  double tokens = cohort_event_number(row, COHORT_FIELD_TOKENS_PER_S, 0);
  if (tokens > 0)
    return g_strdup_printf(_("%.0f tokens/s"), tokens);
  return g_strdup_printf(_("%.1f samples/s"),
                         cohort_event_number(row, COHORT_FIELD_SAMPLES_PER_S, 0));
}

void cohort_probe_view_show(CohortProbeView *v, JsonObject *p)
{
  JsonObject *m = json_object_get_object_member(p, COHORT_FIELD_MEASURED);
  if (m == NULL)
    return;
  int world = (int)cohort_event_int(p, COHORT_FIELD_WORLD_SIZE, 1);
  JsonObject *ar = find_collective(m, "all_reduce");
  g_autofree char *net =
      ar != NULL ? g_strdup_printf(_("; all-reduce between them %.2f ms + %.2f Gbit/s"),
                                   cohort_event_number(ar, COHORT_FIELD_ALPHA_S, 0) * 1e3,
                                   cohort_event_number(ar, COHORT_FIELD_GBIT_S, 0))
                 : g_strdup("");
  /* Measured with the buckets in flight (docs/launching.md, "Contention"). */
  g_autofree char *cont =
      json_object_has_member(p, COHORT_FIELD_CONTENTION)
          ? g_strdup_printf(_("; each second of communication during backward delays it %.2f s"),
                            cohort_event_number(p, COHORT_FIELD_CONTENTION, 0))
          : g_strdup("");
  long long nodes = cohort_event_int(p, COHORT_FIELD_NUM_NODES, 1);
  g_autofree char *where = g_strdup_printf(ngettext("%d process", "%d processes", world), world);
  g_autofree char *on = g_strdup_printf(ngettext("%lld node", "%lld nodes", nodes), nodes);
  g_autofree char *pass =
      cohort_probe_duration_text(cohort_event_number(m, COHORT_FIELD_FORWARD_S, 0) +
                                 cohort_event_number(m, COHORT_FIELD_BACKWARD_S, 0));
  g_autofree char *optim =
      cohort_probe_duration_text(cohort_event_number(m, COHORT_FIELD_OPTIMIZER_S, 0));
  /* TRANSLATORS: processes, nodes, the backend, then two times ("12 ms", "< 1 ms"). */
  g_autofree char *said = g_strdup_printf(
      _("Measured on %s (%s, %s): forward and backward %s, optimizer step %s per step%s%s."), where,
      on, cohort_event_text(p, COHORT_FIELD_BACKEND, "?"), pass, optim, net, cont);
  gboolean at_end = world >= 2 && buckets_at_end(m);
  g_autofree char *measured =
      at_end ? g_strconcat(said, " ",
                           _("Every gradient bucket is ready only when backward ends, so "
                             "backward has no communication to hide."),
                           NULL)
             : g_strdup(said);
  gtk_label_set_text(GTK_LABEL(v->measured), measured);
  clear_grid(v);
  const char *heads[] = {_("Processes"), _("Step"), _("Throughput"), _("Efficiency"),
                         _("Communication hidden")};
  for (guint c = 0; c < G_N_ELEMENTS(heads); c++)
    gtk_grid_attach(GTK_GRID(v->grid), cell(heads[c], TRUE), (int)c, 0, 1, 1);
  JsonArray *rows = cohort_event_list(p, COHORT_FIELD_FORECAST);
  for (guint i = 0; rows != NULL && i < json_array_get_length(rows); i++) {
    JsonObject *r = json_array_get_object_element(rows, i);
    if (r == NULL)
      continue;
    g_autofree char *n =
        g_strdup_printf("%lld", (long long)cohort_event_int(r, COHORT_FIELD_WORLD_SIZE, 0));
    g_autofree char *step =
        cohort_probe_duration_text(cohort_event_number(r, COHORT_FIELD_STEP_S, 0));
    g_autofree char *rate = rate_text(r);
    g_autofree char *eff =
        g_strdup_printf(_("%.0f %%"), cohort_event_number(r, COHORT_FIELD_EFFICIENCY, 0) * 100);
    g_autofree char *hid = hidden_text(r, at_end);
    const char *texts[] = {n, step, rate, eff, hid};
    for (guint c = 0; c < G_N_ELEMENTS(texts); c++)
      gtk_grid_attach(GTK_GRID(v->grid), cell(texts[c], FALSE), (int)c, (int)i + 1, 1, 1);
  }
  g_autofree char *advice = NULL;
  int batch = (int)cohort_event_int(p, COHORT_FIELD_BATCH_SIZE, 0);
  if (world < 2)
    advice = g_strdup(_("One process: nothing to measure between processes. Enable several "
                        "processes to forecast their speed-up."));
  else if (json_object_has_member(p, COHORT_FIELD_MIN_BATCH_90))
    advice =
        g_strdup_printf(_("The forecast is for batch size %d per process. Keeping 90 %% "
                          "efficiency on %d processes needs a batch of at least %lld per "
                          "process."),
                        batch, world, (long long)cohort_event_int(p, COHORT_FIELD_MIN_BATCH_90, 0));
  else
    advice = g_strdup_printf(_("The forecast is for batch size %d per process. No batch up to %lld "
                               "per process keeps 90 %% efficiency on %d processes: the links are "
                               "too slow for this model."),
                             batch, (long long)cohort_event_int(p, COHORT_FIELD_MIN_BATCH_LIMIT, 0),
                             world);
  gtk_label_set_text(GTK_LABEL(v->advice), advice);
  gtk_widget_set_visible(v->measured, TRUE);
  gtk_widget_set_visible(v->grid, TRUE);
  gtk_widget_set_visible(v->advice, TRUE);
}

static void set_status(CohortProbeView *v, const char *text, const char *css)
{
  gtk_label_set_text(GTK_LABEL(v->status), text);
  gtk_widget_remove_css_class(v->status, "error");
  gtk_widget_remove_css_class(v->status, "dim-label");
  if (css != NULL)
    gtk_widget_add_css_class(v->status, css);
}

static void on_event(CohortRun *run, JsonObject *ev, CohortProbeView *v)
{
  (void)run;
  const char *name = cohort_event_name(ev);
  if (g_str_equal(name, COHORT_EVENT_PROBE)) {
    v->shown = TRUE;
    cohort_probe_view_show(v, ev);
  } else if (g_str_equal(name, COHORT_EVENT_ERROR)) {
    g_free(v->error);
    v->error = g_strdup(cohort_event_text(ev, COHORT_FIELD_MESSAGE, ""));
  }
}

static void on_finished(CohortRun *run, const char *summary, CohortProbeView *v)
{
  gtk_widget_set_sensitive(v->button, TRUE);
  if (v->shown && cohort_run_get_outcome(run) == COHORT_RUN_COMPLETED) {
    set_status(v, _("Connection tested: every process joined."), "dim-label");
    return;
  }
  g_autofree char *msg = g_strdup_printf(_("The test failed: %s"), v->error ? v->error : summary);
  set_status(v, msg, "error");
}

void cohort_probe_view_start(CohortProbeView *v)
{
  if (cohort_probe_view_is_running(v))
    return;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) argv = v->command(v->user, &error);
  if (argv == NULL) {
    g_autofree char *msg = g_strdup_printf(_("Cannot test: %s"), error->message);
    set_status(v, msg, "error");
    return;
  }
  g_clear_pointer(&v->error, g_free);
  v->shown = FALSE;
  if (!cohort_run_start(v->run, (const char *const *)argv, NULL, &error)) {
    g_autofree char *msg = g_strdup_printf(_("Cannot test: %s"), error->message);
    set_status(v, msg, "error");
    return;
  }
  gtk_widget_set_sensitive(v->button, FALSE);
  set_status(v, _("Starting the processes and measuring… (this takes a minute or less)"),
             "dim-label");
}

void cohort_probe_view_stop(CohortProbeView *v)
{
  if (cohort_run_is_live(v->run))
    cohort_run_stop(v->run, 5);
}

gboolean cohort_probe_view_is_running(CohortProbeView *v)
{
  return cohort_run_is_live(v->run);
}

const char *cohort_probe_view_get_status(CohortProbeView *v)
{
  return gtk_label_get_text(GTK_LABEL(v->status));
}

char *cohort_probe_view_get_result(CohortProbeView *v)
{
  GString *s = g_string_new(gtk_label_get_text(GTK_LABEL(v->measured)));
  for (GtkWidget *c = gtk_widget_get_first_child(v->grid); c != NULL;
       c = gtk_widget_get_next_sibling(c))
    g_string_append_printf(s, "\n%s", gtk_label_get_text(GTK_LABEL(c)));
  g_string_append_printf(s, "\n%s", gtk_label_get_text(GTK_LABEL(v->advice)));
  return g_string_free(s, FALSE);
}

static void on_clicked(GtkButton *b, CohortProbeView *v)
{
  (void)b;
  cohort_probe_view_start(v);
}

static void cohort_probe_view_dispose(GObject *obj)
{
  CohortProbeView *v = COHORT_PROBE_VIEW(obj);
  if (v->run != NULL) {
    cohort_probe_view_stop(v);
    g_signal_handlers_disconnect_by_data(v->run, v);
    g_clear_object(&v->run);
  }
  g_clear_pointer(&v->error, g_free);
  G_OBJECT_CLASS(cohort_probe_view_parent_class)->dispose(obj);
}

static void cohort_probe_view_class_init(CohortProbeViewClass *klass)
{
  G_OBJECT_CLASS(klass)->dispose = cohort_probe_view_dispose;
}

static void cohort_probe_view_init(CohortProbeView *v)
{
  gtk_orientable_set_orientation(GTK_ORIENTABLE(v), GTK_ORIENTATION_VERTICAL);
  gtk_box_set_spacing(GTK_BOX(v), 6);
  GtkWidget *heading = gtk_label_new(_("Scaling forecast"));
  gtk_widget_add_css_class(heading, "heading");
  gtk_label_set_xalign(GTK_LABEL(heading), 0);
  GtkWidget *about = gtk_label_new(
      _("Starts the processes as Start would, measures one training step's compute and the "
        "network between the processes, and forecasts the speed-up. Nothing is trained."));
  gtk_label_set_wrap(GTK_LABEL(about), TRUE);
  gtk_label_set_xalign(GTK_LABEL(about), 0);
  gtk_widget_add_css_class(about, "dim-label");
  v->button = gtk_button_new_with_mnemonic(_("_Test Connection and Forecast"));
  gtk_widget_set_halign(v->button, GTK_ALIGN_START);
  g_signal_connect(v->button, "clicked", G_CALLBACK(on_clicked), v);
  v->status = gtk_label_new(NULL);
  gtk_label_set_wrap(GTK_LABEL(v->status), TRUE);
  gtk_label_set_xalign(GTK_LABEL(v->status), 0);
  gtk_label_set_selectable(GTK_LABEL(v->status), TRUE);
  v->measured = gtk_label_new(NULL);
  gtk_label_set_wrap(GTK_LABEL(v->measured), TRUE);
  gtk_label_set_xalign(GTK_LABEL(v->measured), 0);
  v->grid = gtk_grid_new();
  gtk_grid_set_column_spacing(GTK_GRID(v->grid), 12);
  gtk_grid_set_row_spacing(GTK_GRID(v->grid), 4);
  v->advice = gtk_label_new(NULL);
  gtk_label_set_wrap(GTK_LABEL(v->advice), TRUE);
  gtk_label_set_xalign(GTK_LABEL(v->advice), 0);
  GtkWidget *widgets[] = {heading, about, v->button, v->status, v->measured, v->grid, v->advice};
  for (guint i = 0; i < G_N_ELEMENTS(widgets); i++)
    gtk_box_append(GTK_BOX(v), widgets[i]);
  gtk_widget_set_visible(v->measured, FALSE);
  gtk_widget_set_visible(v->grid, FALSE);
  gtk_widget_set_visible(v->advice, FALSE);
  v->run = cohort_run_new();
  g_signal_connect(v->run, "event", G_CALLBACK(on_event), v);
  g_signal_connect(v->run, "finished", G_CALLBACK(on_finished), v);
}

GtkWidget *cohort_probe_view_new(CohortProbeCommandFunc command, gpointer user)
{
  CohortProbeView *v = g_object_new(COHORT_TYPE_PROBE_VIEW, NULL);
  v->command = command;
  v->user = user;
  return GTK_WIDGET(v);
}
