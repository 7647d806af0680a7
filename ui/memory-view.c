#include "ui/memory-view.h"

#include <gio/gio.h>
#include <glib/gi18n.h>
#include <glib/gstdio.h>
#include <unistd.h>

#include "ui/explain-plan.h"
#include "ui/programs.h"

/* The figures of the grid, two to a row. */
enum {
  FIG_PARAMS,
  FIG_GRADS,
  FIG_OPTIM,
  FIG_EMA,
  FIG_ACTS,
  FIG_WORKING,
  FIG_TEACHER,
  FIG_TOTAL,
  N_FIGURES
};

struct _CohortMemoryView {
  GtkBox parent_instance;
  GtkWidget *heading;
  GtkWidget *grid;
  GtkWidget *captions[N_FIGURES];
  GtkWidget *values[N_FIGURES];
  GtkWidget *machine;
  GtkWidget *status;  /* a GtkStack: "working", "fits", "gpu", "nofit", "error" */
  GtkWidget *error;   /* the "error" page's label */
  char *wanted;       /* the latest settings as JSON: the plan to show */
  char *requested;    /* the settings the engine was asked for last */
  GSubprocess *child; /* the engine process working one out, or NULL */
  guint source;       /* the pending start, a moment after the last edit */
  GCancellable *cancel;
  guint asked;
};

G_DEFINE_FINAL_TYPE(CohortMemoryView, cohort_memory_view, GTK_TYPE_BOX)

/* Milliseconds after an edit before the engine is asked: typing a number asks once. */
#define SETTLE_MS 250

static void show_plan(CohortMemoryView *v, const CohortExplainMemory *m)
{
  const gint64 bytes[N_FIGURES] = {m->params,      m->grads,   m->optim,   m->ema,
                                   m->activations, m->working, m->teacher, m->startup};
  for (guint i = 0; i < N_FIGURES; i++) {
    /* "12.4 MiB", "1.2 GiB": a small model's figures do not all read 0.00 GiB. */
    g_autofree char *t = g_format_size_full((guint64)MAX(bytes[i], 0), G_FORMAT_SIZE_IEC_UNITS);
    gtk_label_set_text(GTK_LABEL(v->values[i]), t);
  }
  /* TRANSLATORS: the heading of the memory plan; the ZeRO stage, 0 to 3. */
  g_autofree char *heading =
      g_strdup_printf(_("Memory per process at ZeRO stage %d"), m->zero_stage);
  gtk_label_set_text(GTK_LABEL(v->heading), heading);
  const char *page = "gpu";
  if (m->machine > 0) {
    g_autofree char *need = g_format_size_full((guint64)m->machine_need, G_FORMAT_SIZE_IEC_UNITS);
    g_autofree char *have = g_format_size_full((guint64)m->machine, G_FORMAT_SIZE_IEC_UNITS);
    /* TRANSLATORS: processes on this machine, their memory together, the machine's. */
    g_autofree char *t = g_strdup_printf(
        ngettext("%d process: %s of its %s", "%d processes: %s of its %s", m->local_ranks),
        m->local_ranks, need, have);
    gtk_label_set_text(GTK_LABEL(v->machine), t);
    page = m->fits ? "fits" : "nofit";
  } else {
    gtk_label_set_text(GTK_LABEL(v->machine), "–");
  }
  gtk_stack_set_visible_child_name(GTK_STACK(v->status), page);
  gtk_widget_remove_css_class(v->grid, "dim-label");
}

static void show_error(CohortMemoryView *v, const char *why)
{
  /* TRANSLATORS: the engine's reason follows. */
  g_autofree char *text = g_strdup_printf(_("No memory plan: %s"), why);
  gtk_label_set_text(GTK_LABEL(v->error), text);
  gtk_widget_set_tooltip_text(v->error, text);
  for (guint i = 0; i < N_FIGURES; i++)
    gtk_label_set_text(GTK_LABEL(v->values[i]), "–");
  gtk_label_set_text(GTK_LABEL(v->machine), "–");
  gtk_stack_set_visible_child_name(GTK_STACK(v->status), "error");
  gtk_widget_remove_css_class(v->grid, "dim-label");
}

typedef struct {
  CohortMemoryView *view; /* a reference */
  char *json;             /* the settings asked for */
  char *config;           /* their temporary file, removed when done */
} Request;

static void request_free(Request *r)
{
  g_unlink(r->config);
  g_free(r->config);
  g_free(r->json);
  g_object_unref(r->view);
  g_free(r);
}

static void start(CohortMemoryView *v);

static void done(GObject *source, GAsyncResult *res, gpointer data)
{
  Request *r = data;
  CohortMemoryView *v = r->view;
  g_autofree char *out = NULL, *err = NULL;
  g_autoptr(GError) error = NULL;
  gboolean ok = g_subprocess_communicate_utf8_finish(G_SUBPROCESS(source), res, &out, &err, &error);
  if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
    request_free(r);
    return;
  }
  g_clear_object(&v->child);
  /* The settings changed while it ran: its plan is not shown; the latest one is asked for
   * (once in view). */
  if (g_strcmp0(r->json, v->wanted) != 0) {
    request_free(r);
    if (v->source == 0 && gtk_widget_get_mapped(GTK_WIDGET(v)))
      start(v);
    return;
  }
  CohortExplainMemory m;
  g_autoptr(GError) bad = NULL;
  if (ok && g_subprocess_get_successful(G_SUBPROCESS(source)) &&
      cohort_explain_memory_read(out, &m, &bad)) {
    show_plan(v, &m);
  } else {
    const char *why = bad != NULL                   ? bad->message
                      : err != NULL && *err != '\0' ? err
                      : error != NULL               ? error->message
                                                    : "";
    g_autofree char *line = g_strstrip(g_strdup(why));
    show_error(v, line);
  }
  request_free(r);
}

/* Asks the engine for the plan of the latest settings. */
static void start(CohortMemoryView *v)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *program = cohort_ui_find_program("cohort-train", &error);
  char *config = NULL;
  int fd = program ? g_file_open_tmp("cohort-plan-XXXXXX.json", &config, &error) : -1;
  if (fd >= 0)
    close(fd);
  g_autoptr(CohortConfig) cfg =
      fd >= 0 ? cohort_config_load_data(v->wanted, -1, "settings", &error) : NULL;
  if (cfg == NULL || !cohort_config_save_file(cfg, config, &error)) {
    show_error(v, error->message);
    if (config)
      g_unlink(config);
    g_free(config);
    return;
  }
  const char *argv[] = {program, "--config", config, "--explain", NULL};
  g_autoptr(GSubprocess) p = g_subprocess_newv(
      argv, G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE, &error);
  if (p == NULL) {
    show_error(v, error->message);
    g_unlink(config);
    g_free(config);
    return;
  }
  Request *r = g_new0(Request, 1);
  r->view = g_object_ref(v);
  r->json = g_strdup(v->wanted);
  g_free(v->requested);
  v->requested = g_strdup(v->wanted);
  r->config = config;
  v->child = g_object_ref(p);
  v->asked++;
  g_subprocess_communicate_utf8_async(p, NULL, v->cancel, done, r);
}

static gboolean settled(gpointer data)
{
  CohortMemoryView *v = data;
  v->source = 0;
  /* One process at a time: the one running asks again for the latest when it ends. */
  if (v->child == NULL)
    start(v);
  return G_SOURCE_REMOVE;
}

void cohort_memory_view_update(CohortMemoryView *v, const CohortConfig *cfg)
{
  g_autofree char *json = cohort_config_to_json(cfg, FALSE);
  if (g_strcmp0(json, v->wanted) == 0)
    return;
  g_free(v->wanted);
  v->wanted = g_steal_pointer(&json);
  /* What is shown is not these settings' plan any more: said at once, the figures dimmed in
   * place. */
  gtk_stack_set_visible_child_name(GTK_STACK(v->status), "working");
  gtk_widget_add_css_class(v->grid, "dim-label");
  /* Out of view, the engine is asked when the page is shown (an edit elsewhere costs no
   * process). */
  g_clear_handle_id(&v->source, g_source_remove);
  if (gtk_widget_get_mapped(GTK_WIDGET(v)))
    v->source = g_timeout_add(SETTLE_MS, settled, v);
}

/* In view again: the plan of settings changed meanwhile is asked for at once. */
static void on_map(GtkWidget *widget)
{
  CohortMemoryView *v = COHORT_MEMORY_VIEW(widget);
  if (v->wanted != NULL && g_strcmp0(v->wanted, v->requested) != 0 && v->source == 0 &&
      v->child == NULL)
    start(v);
}

char *cohort_memory_view_get_text(CohortMemoryView *v)
{
  GString *s = g_string_new(gtk_label_get_text(GTK_LABEL(v->heading)));
  for (guint i = 0; i < N_FIGURES; i++)
    g_string_append_printf(s, "\n%s %s", gtk_label_get_text(GTK_LABEL(v->captions[i])),
                           gtk_label_get_text(GTK_LABEL(v->values[i])));
  g_string_append_printf(s, "\n%s %s", _("This machine"),
                         gtk_label_get_text(GTK_LABEL(v->machine)));
  GtkWidget *shown = gtk_stack_get_visible_child(GTK_STACK(v->status));
  g_string_append_printf(s, "\n%s", gtk_label_get_text(GTK_LABEL(shown)));
  return g_string_free(s, FALSE);
}

gboolean cohort_memory_view_is_working(CohortMemoryView *v)
{
  return g_strcmp0(gtk_stack_get_visible_child_name(GTK_STACK(v->status)), "working") == 0;
}

guint cohort_memory_view_count_asked(CohortMemoryView *v)
{
  return v->asked;
}

static void cohort_memory_view_dispose(GObject *obj)
{
  CohortMemoryView *v = COHORT_MEMORY_VIEW(obj);
  g_clear_handle_id(&v->source, g_source_remove);
  if (v->cancel != NULL)
    g_cancellable_cancel(v->cancel);
  g_clear_object(&v->cancel);
  /* its answer would be for nobody */
  if (v->child != NULL)
    g_subprocess_force_exit(v->child);
  g_clear_object(&v->child);
  G_OBJECT_CLASS(cohort_memory_view_parent_class)->dispose(obj);
}

static void cohort_memory_view_finalize(GObject *obj)
{
  g_free(COHORT_MEMORY_VIEW(obj)->wanted);
  g_free(COHORT_MEMORY_VIEW(obj)->requested);
  G_OBJECT_CLASS(cohort_memory_view_parent_class)->finalize(obj);
}

static void cohort_memory_view_class_init(CohortMemoryViewClass *klass)
{
  G_OBJECT_CLASS(klass)->dispose = cohort_memory_view_dispose;
  G_OBJECT_CLASS(klass)->finalize = cohort_memory_view_finalize;
}

static GtkWidget *line(const char *text, const char *css)
{
  GtkWidget *l = gtk_label_new(text);
  gtk_label_set_xalign(GTK_LABEL(l), 0);
  gtk_label_set_yalign(GTK_LABEL(l), 0);
  gtk_label_set_wrap(GTK_LABEL(l), TRUE);
  if (css != NULL)
    gtk_widget_add_css_class(l, css);
  return l;
}

/* The grid: a caption and a value of fixed width, two to a row, and this machine's line. */
static void build_grid(CohortMemoryView *v)
{
  const char *captions[N_FIGURES] = {
      _("Parameters"),  _("Gradients"),   _("Optimizer state"), _("EMA of the weights"),
      _("Activations"), _("Working set"), _("Teacher"),         _("Each process"),
  };
  v->grid = gtk_grid_new();
  gtk_grid_set_column_spacing(GTK_GRID(v->grid), 12);
  gtk_grid_set_row_spacing(GTK_GRID(v->grid), 2);
  for (guint i = 0; i < N_FIGURES; i++) {
    v->captions[i] = gtk_label_new(captions[i]);
    gtk_label_set_xalign(GTK_LABEL(v->captions[i]), 0);
    gtk_widget_set_hexpand(v->captions[i], TRUE);
    v->values[i] = gtk_label_new("–");
    gtk_label_set_xalign(GTK_LABEL(v->values[i]), 1);
    /* "1023.9 MiB" fits: a value that grows never widens its column */
    gtk_label_set_width_chars(GTK_LABEL(v->values[i]), 11);
    gtk_widget_add_css_class(v->values[i], "numeric");
    int col = (int)(i % 2) * 2, row = (int)(i / 2);
    gtk_grid_attach(GTK_GRID(v->grid), v->captions[i], col, row, 1, 1);
    gtk_grid_attach(GTK_GRID(v->grid), v->values[i], col + 1, row, 1, 1);
  }
  gtk_widget_add_css_class(v->captions[FIG_TOTAL], "heading");
  gtk_widget_add_css_class(v->values[FIG_TOTAL], "heading");
  gtk_widget_set_tooltip_text(v->captions[FIG_WORKING],
                              _("The largest set of gathered gradients and parameters at ZeRO "
                                "stages 2 and 3"));
  GtkWidget *caption = gtk_label_new(_("This machine"));
  gtk_label_set_xalign(GTK_LABEL(caption), 0);
  v->machine = gtk_label_new("–");
  gtk_label_set_xalign(GTK_LABEL(v->machine), 1);
  gtk_label_set_ellipsize(GTK_LABEL(v->machine), PANGO_ELLIPSIZE_START);
  gtk_widget_add_css_class(v->machine, "numeric");
  gtk_grid_attach(GTK_GRID(v->grid), caption, 0, N_FIGURES / 2, 1, 1);
  gtk_grid_attach(GTK_GRID(v->grid), v->machine, 1, N_FIGURES / 2, 3, 1);
}

static void cohort_memory_view_init(CohortMemoryView *v)
{
  gtk_orientable_set_orientation(GTK_ORIENTABLE(v), GTK_ORIENTATION_VERTICAL);
  gtk_box_set_spacing(GTK_BOX(v), 6);
  v->cancel = g_cancellable_new();
  v->heading = line(_("Memory per process"), "heading");
  build_grid(v);
  /* Every state's line, in a stack as high as the highest: the page never moves under them. */
  v->status = gtk_stack_new();
  gtk_stack_set_vhomogeneous(GTK_STACK(v->status), TRUE);
  gtk_stack_set_hhomogeneous(GTK_STACK(v->status), FALSE);
  gtk_stack_add_named(GTK_STACK(v->status),
                      line(_("Working out the plan for these settings…"), "dim-label"), "working");
  gtk_stack_add_named(GTK_STACK(v->status), line(_("Fits in this machine's memory."), "dim-label"),
                      "fits");
  gtk_stack_add_named(
      GTK_STACK(v->status),
      line(_("Each GPU process checks its device's memory when it starts."), "dim-label"), "gpu");
  gtk_stack_add_named(GTK_STACK(v->status),
                      line(_("Does not fit: Start will be refused. A higher ZeRO stage, a "
                             "smaller batch or fewer processes on this machine would help."),
                           "error"),
                      "nofit");
  v->error = line("", NULL);
  /* an engine's reason can be long: two lines here, all of it in the tooltip */
  gtk_label_set_ellipsize(GTK_LABEL(v->error), PANGO_ELLIPSIZE_END);
  gtk_label_set_lines(GTK_LABEL(v->error), 2);
  gtk_label_set_selectable(GTK_LABEL(v->error), TRUE);
  gtk_stack_add_named(GTK_STACK(v->status), v->error, "error");
  gtk_stack_set_visible_child_name(GTK_STACK(v->status), "working");
  gtk_box_append(GTK_BOX(v), v->heading);
  gtk_box_append(GTK_BOX(v), v->grid);
  gtk_box_append(GTK_BOX(v), v->status);
  g_signal_connect(v, "map", G_CALLBACK(on_map), NULL);
}

GtkWidget *cohort_memory_view_new(void)
{
  return g_object_new(COHORT_TYPE_MEMORY_VIEW, NULL);
}
