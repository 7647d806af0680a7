#include "ui/ranks-view.h"

#include <glib/gi18n.h>
#include <math.h>
#include "ui/progress-event.h"

struct _CohortRanksView {
  GtkBox parent_instance;
  GtkWidget *placeholder;
  GtkWidget *grid;
  GtkWidget *legend;
  GtkWidget *hang; /* where a waiting collective's missing ranks are (`hang` events) */
  guint n_ranks;
  int slowest;
  gboolean gpu;
  gboolean syncbn; /* SyncBatchNorm's time per step (models with BatchNorm layers) */
  gboolean batch;  /* each rank's examples per micro-batch (rank_batch_sizes) */
  gboolean device; /* a GPU by name, memory and PCI bus id */
};

G_DEFINE_FINAL_TYPE(CohortRanksView, cohort_ranks_view, GTK_TYPE_BOX)

static void clear_grid(CohortRanksView *v)
{
  GtkWidget *child;
  while ((child = gtk_widget_get_first_child(v->grid)) != NULL)
    gtk_grid_remove(GTK_GRID(v->grid), child);
}

void cohort_ranks_view_reset(CohortRanksView *v)
{
  clear_grid(v);
  gtk_widget_set_visible(v->placeholder, TRUE);
  gtk_widget_set_visible(v->grid, FALSE);
  gtk_widget_set_visible(v->legend, FALSE);
  v->n_ranks = 0;
  v->slowest = -1;
  v->gpu = FALSE;
  v->syncbn = FALSE;
  v->batch = FALSE;
  v->device = FALSE;
  gtk_label_set_text(GTK_LABEL(v->hang), "");
  gtk_widget_set_visible(v->hang, FALSE);
}

static GtkWidget *cell(const char *text, gboolean header, gboolean slow)
{
  GtkWidget *l = gtk_label_new(text);
  gtk_label_set_xalign(GTK_LABEL(l), header ? 0 : 1);
  if (header)
    gtk_widget_add_css_class(l, "heading");
  else
    gtk_widget_add_css_class(l, "numeric");
  if (slow)
    gtk_widget_add_css_class(l, "cohort-slowest");
  return l;
}

static int compare_doubles(gconstpointer a, gconstpointer b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The slowest rank when its step time exceeds the median of the other ranks' by the factor
 * (with two ranks: the other rank's time), else -1. Small differences are noise. */
static int find_straggler(JsonArray *ranks)
{
  guint n = json_array_get_length(ranks);
  int worst = -1;
  guint worst_i = 0;
  double worst_t = -INFINITY;
  for (guint i = 0; i < n; i++) {
    JsonObject *r = json_array_get_object_element(ranks, i);
    double t = r != NULL ? cohort_event_number(r, COHORT_FIELD_STEP_S, NAN) : NAN;
    if (isfinite(t) && t > worst_t) {
      worst_t = t;
      worst_i = i;
      worst = (int)cohort_event_number(r, COHORT_FIELD_RANK, i);
    }
  }
  g_autoptr(GArray) others = g_array_new(FALSE, FALSE, sizeof(double));
  for (guint i = 0; i < n; i++) {
    JsonObject *r = json_array_get_object_element(ranks, i);
    double t = r != NULL ? cohort_event_number(r, COHORT_FIELD_STEP_S, NAN) : NAN;
    if (i != worst_i && isfinite(t))
      g_array_append_val(others, t);
  }
  if (worst < 0 || others->len == 0)
    return -1;
  g_array_sort(others, compare_doubles);
  guint m = others->len;
  double median =
      m % 2 ? g_array_index(others, double, m / 2)
            : (g_array_index(others, double, m / 2 - 1) + g_array_index(others, double, m / 2)) / 2;
  return worst_t > median * COHORT_RANKS_SLOW_FACTOR ? worst : -1;
}

/* Whether any rank reports `a` or `b` (NULL: only `a`). */
static gboolean any_member(JsonArray *ranks, const char *a, const char *b)
{
  for (guint i = 0; i < json_array_get_length(ranks); i++) {
    JsonObject *r = json_array_get_object_element(ranks, i);
    if (r != NULL && (json_object_has_member(r, a) || (b != NULL && json_object_has_member(r, b))))
      return TRUE;
  }
  return FALSE;
}

/* Whether any rank's device is a GPU (its name, not "CPU …"). */
static gboolean any_gpu_device(JsonArray *ranks)
{
  for (guint i = 0; i < json_array_get_length(ranks); i++) {
    JsonObject *r = json_array_get_object_element(ranks, i);
    const char *d = r != NULL ? cohort_event_text(r, COHORT_FIELD_DEVICE, "") : "";
    if (*d != '\0' && !g_str_has_prefix(d, "CPU"))
      return TRUE;
  }
  return FALSE;
}

/* The columns shown: the six every run has, the device (GPU ranks) and the batch (each rank's
 * share) when reported, SyncBN when reported, the GPU pair when reported. Fills `cols` with
 * each shown column's index in the full list; returns how many. */
enum {
  COL_RANK,
  COL_HOST,
  COL_DEVICE,
  COL_BATCH,
  COL_STEP,
  COL_DATA,
  COL_COMM,
  COL_MEM,
  COL_SYNCBN,
  COL_GPU_UTIL,
  COL_GPU_MEM,
  N_COLS
};

static guint shown_columns(CohortRanksView *v, guint cols[N_COLS])
{
  guint n = 0;
  for (guint c = 0; c < N_COLS; c++)
    if ((c != COL_SYNCBN || v->syncbn) && (c < COL_GPU_UTIL || v->gpu) &&
        (c != COL_DEVICE || v->device) && (c != COL_BATCH || v->batch))
      cols[n++] = c;
  return n;
}

static char *ms(double s)
{
  return isfinite(s) ? g_strdup_printf(_("%.0f ms"), s * 1000) : g_strdup("–");
}

static void add_row(CohortRanksView *v, JsonObject *r, guint row, guint i)
{
  int rank = (int)cohort_event_number(r, COHORT_FIELD_RANK, i);
  gboolean slow = rank == v->slowest;
  g_autofree char *c0 = g_strdup_printf("%d", rank);
  g_autofree char *c2 = ms(cohort_event_number(r, COHORT_FIELD_STEP_S, NAN));
  g_autofree char *c3 = ms(cohort_event_number(r, COHORT_FIELD_DATA_S, NAN));
  g_autofree char *c4 = ms(cohort_event_number(r, COHORT_FIELD_COMM_S, NAN));
  g_autofree char *c5 =
      g_format_size((guint64)MAX(cohort_event_number(r, COHORT_FIELD_MEM_BYTES, 0), 0));
  g_autofree char *c6 = ms(cohort_event_number(r, COHORT_FIELD_SYNCBN_S, NAN));
  double util = cohort_event_number(r, COHORT_FIELD_GPU_UTIL, NAN),
         gmem = cohort_event_number(r, COHORT_FIELD_GPU_MEM_USED, NAN);
  g_autofree char *c7 = isfinite(util) ? g_strdup_printf(_("%.0f %%"), util) : g_strdup("–");
  g_autofree char *c8 = isfinite(gmem) ? g_format_size((guint64)MAX(gmem, 0)) : g_strdup("–");
  const char *host = cohort_event_text(r, COHORT_FIELD_HOST, "");
  const char *device = cohort_event_text(r, COHORT_FIELD_DEVICE, "–");
  double b = cohort_event_number(r, COHORT_FIELD_BATCH, NAN);
  g_autofree char *batch = isfinite(b) ? g_strdup_printf("%.0f", b) : g_strdup("–");
  const char *texts[N_COLS] = {c0, host, device, batch, c2, c3, c4, c5, c6, c7, c8};
  guint cols[N_COLS];
  guint n_cols = shown_columns(v, cols);
  for (guint c = 0; c < n_cols; c++)
    gtk_grid_attach(GTK_GRID(v->grid), cell(texts[cols[c]], FALSE, slow), (int)c, (int)row, 1, 1);
}

void cohort_ranks_view_show(CohortRanksView *v, JsonObject *ev)
{
  JsonArray *ranks = cohort_event_list(ev, COHORT_FIELD_RANKS);
  if (ranks == NULL)
    return;
  clear_grid(v);
  v->slowest = find_straggler(ranks);
  v->gpu = any_member(ranks, COHORT_FIELD_GPU_UTIL, COHORT_FIELD_GPU_MEM_USED);
  v->syncbn = any_member(ranks, COHORT_FIELD_SYNCBN_S, NULL);
  v->batch = any_member(ranks, COHORT_FIELD_BATCH, NULL);
  v->device = any_gpu_device(ranks);
  const char *heads[N_COLS] = {_("Rank"),   _("Host"),    _("Device"),        _("Batch"),
                               _("Step"),   _("Data"),    _("Communication"), _("Memory"),
                               _("SyncBN"), _("GPU use"), _("GPU memory")};
  guint cols[N_COLS];
  guint n_cols = shown_columns(v, cols);
  for (guint c = 0; c < n_cols; c++)
    gtk_grid_attach(GTK_GRID(v->grid), cell(heads[cols[c]], TRUE, FALSE), (int)c, 0, 1, 1);
  v->n_ranks = 0;
  for (guint i = 0; i < json_array_get_length(ranks); i++) {
    JsonObject *r = json_array_get_object_element(ranks, i);
    if (r != NULL)
      add_row(v, r, ++v->n_ranks, i);
  }
  g_autofree char *legend = g_strdup_printf(
      _("%sMean per step since the last report: Step, the whole step; Data, waiting for data; "
        "Communication, waiting for gradients from the other ranks%s. Memory: the process's "
        "resident memory%s. A rank is highlighted when its step takes more than %.0f %% longer "
        "than the median of the other ranks."),
      v->batch ? _("Batch: the examples each rank takes from every micro-batch. ") : "",
      v->syncbn ? _("; SyncBN, synchronising BatchNorm statistics across ranks") : "",
      v->gpu ? _("; GPU use and memory as NVML reports them") : "",
      (COHORT_RANKS_SLOW_FACTOR - 1) * 100);
  gtk_label_set_text(GTK_LABEL(v->legend), legend);
  gtk_widget_set_visible(v->placeholder, FALSE);
  gtk_widget_set_visible(v->grid, TRUE);
  gtk_widget_set_visible(v->legend, TRUE);
}

/* A rank's phase (docs/progress-protocol.md), in words. */
static const char *phase_words(const char *phase)
{
  static const struct {
    const char *word, *text;
  } table[] = {
      {COHORT_PHASE_STARTUP, N_("starting up")},
      {COHORT_PHASE_DATA, N_("loading data")},
      {COHORT_PHASE_TOKENIZING, N_("tokenizing the data")},
      {COHORT_PHASE_CACHING, N_("filling its cache")},
      {COHORT_PHASE_FORWARD, N_("in the forward pass")},
      {COHORT_PHASE_BACKWARD, N_("in the backward pass")},
      {COHORT_PHASE_OPTIMIZER, N_("in the optimizer step")},
      {COHORT_PHASE_EVALUATION, N_("evaluating")},
      {COHORT_PHASE_SAMPLE, N_("drawing a sample")},
      {COHORT_PHASE_CHECKPOINT, N_("writing a checkpoint")},
      {COHORT_PHASE_EXPORT, N_("exporting the model")},
      {COHORT_PHASE_HEALTH, N_("comparing weights")},
      {COHORT_PHASE_PROBE, N_("probing")},
      {COHORT_PHASE_DONE, N_("finished")},
  };
  for (guint i = 0; i < G_N_ELEMENTS(table); i++)
    if (g_strcmp0(phase, table[i].word) == 0)
      return _(table[i].text);
  return phase;
}

void cohort_ranks_view_show_hang(CohortRanksView *v, JsonObject *ev)
{
  JsonArray *ranks = cohort_event_list(ev, COHORT_FIELD_RANKS);
  if (cohort_event_flag(ev, COHORT_FIELD_RESOLVED, FALSE) || ranks == NULL) {
    gtk_label_set_text(GTK_LABEL(v->hang), "");
    gtk_widget_set_visible(v->hang, FALSE);
    return;
  }
  g_autoptr(GString) who = g_string_new(NULL);
  for (guint i = 0; i < json_array_get_length(ranks); i++) {
    JsonObject *r = json_array_get_object_element(ranks, i);
    if (r == NULL || cohort_event_flag(r, COHORT_FIELD_ARRIVED, TRUE))
      continue;
    if (who->len > 0)
      g_string_append(who, "; ");
    const char *phase = cohort_event_text(r, COHORT_FIELD_PHASE, NULL);
    if (phase == NULL)
      g_string_append_printf(who, _("rank %lld (no heartbeat yet)"),
                             (long long)cohort_event_int(r, COHORT_FIELD_RANK, i));
    else
      g_string_append_printf(who, _("rank %lld, %s for %.0f s at step %lld"),
                             (long long)cohort_event_int(r, COHORT_FIELD_RANK, i),
                             phase_words(phase), cohort_event_number(r, COHORT_FIELD_PHASE_S, 0),
                             (long long)cohort_event_int(r, COHORT_FIELD_STEP, 0));
  }
  const char *label = cohort_event_text(ev, COHORT_FIELD_LABEL, NULL);
  g_autofree char *what =
      label != NULL
          ? g_strdup_printf("%s #%lld (%s)", cohort_event_text(ev, COHORT_FIELD_COLLECTIVE, ""),
                            (long long)cohort_event_int(ev, COHORT_FIELD_SEQ, 0), label)
          : g_strdup_printf("%s #%lld", cohort_event_text(ev, COHORT_FIELD_COLLECTIVE, ""),
                            (long long)cohort_event_int(ev, COHORT_FIELD_SEQ, 0));
  g_autofree char *text = g_strdup_printf(
      _("Waiting %.0f s in %s for %s. The others keep waiting, up to %.0f s without progress."),
      cohort_event_number(ev, COHORT_FIELD_WAITED_S, 0), what, who->str,
      cohort_event_number(ev, COHORT_FIELD_TIMEOUT_S, 0));
  gtk_label_set_text(GTK_LABEL(v->hang), text);
  gtk_widget_set_visible(v->hang, TRUE);
}

const char *cohort_ranks_view_get_hang_text(CohortRanksView *v)
{
  return gtk_widget_get_visible(v->hang) ? gtk_label_get_text(GTK_LABEL(v->hang)) : "";
}

char *cohort_ranks_view_health_text(JsonObject *ev)
{
  long long step = (long long)cohort_event_int(ev, COHORT_FIELD_STEP, 0);
  if (g_str_equal(cohort_event_text(ev, COHORT_FIELD_STATUS, ""), COHORT_STATUS_OK))
    return g_strdup_printf(_("step %lld: the %lld processes hold the same weights (%lld tensors "
                             "compared)"),
                           step, (long long)cohort_event_int(ev, COHORT_FIELD_WORLD_SIZE, 0),
                           (long long)cohort_event_int(ev, COHORT_FIELD_TENSORS, 0));
  return g_strdup_printf(_("step %lld: the processes' weights differ, first in %s"), step,
                         cohort_event_text(ev, COHORT_FIELD_TENSOR, "?"));
}

guint cohort_ranks_view_count(CohortRanksView *v)
{
  return v->n_ranks;
}

int cohort_ranks_view_get_slowest(CohortRanksView *v)
{
  return v->slowest;
}

gboolean cohort_ranks_view_has_gpu_columns(CohortRanksView *v)
{
  return v->gpu;
}

gboolean cohort_ranks_view_has_batch_column(CohortRanksView *v)
{
  return v->batch;
}

gboolean cohort_ranks_view_has_device_column(CohortRanksView *v)
{
  return v->device;
}

gboolean cohort_ranks_view_has_syncbn_column(CohortRanksView *v)
{
  return v->syncbn;
}

static void cohort_ranks_view_class_init(CohortRanksViewClass *klass)
{
  (void)klass;
}

static void cohort_ranks_view_init(CohortRanksView *v)
{
  gtk_orientable_set_orientation(GTK_ORIENTABLE(v), GTK_ORIENTATION_VERTICAL);
  gtk_box_set_spacing(GTK_BOX(v), 6);
  gtk_widget_add_css_class(GTK_WIDGET(v), "cohort-ranks");
  v->placeholder = gtk_label_new(_("Per-rank timings appear when several ranks run."));
  gtk_label_set_wrap(GTK_LABEL(v->placeholder), TRUE);
  gtk_widget_add_css_class(v->placeholder, "dim-label");
  v->grid = gtk_grid_new();
  gtk_grid_set_column_spacing(GTK_GRID(v->grid), 12);
  gtk_grid_set_row_spacing(GTK_GRID(v->grid), 4);
  v->legend = gtk_label_new(NULL);
  gtk_label_set_wrap(GTK_LABEL(v->legend), TRUE);
  gtk_label_set_xalign(GTK_LABEL(v->legend), 0);
  gtk_widget_add_css_class(v->legend, "dim-label");
  gtk_widget_add_css_class(v->legend, "caption");
  v->hang = gtk_label_new(NULL);
  gtk_label_set_wrap(GTK_LABEL(v->hang), TRUE);
  gtk_label_set_xalign(GTK_LABEL(v->hang), 0);
  gtk_widget_add_css_class(v->hang, "warning");
  gtk_box_append(GTK_BOX(v), v->hang);
  gtk_box_append(GTK_BOX(v), v->placeholder);
  gtk_box_append(GTK_BOX(v), v->grid);
  gtk_box_append(GTK_BOX(v), v->legend);
  cohort_ranks_view_reset(v);
}

GtkWidget *cohort_ranks_view_new(void)
{
  return g_object_new(COHORT_TYPE_RANKS_VIEW, NULL);
}
