#include "ui/run-history.h"

#include <glib/gi18n.h>
#include <math.h>
#include <string.h>

#include "engine/base/fileio.h"
#include "engine/base/json-read.h"
#include "ui/progress-event.h"

void cohort_past_run_free(CohortPastRun *run)
{
  if (run == NULL)
    return;
  g_free(run->id);
  g_free(run->name);
  g_free(run->status);
  g_array_unref(run->train);
  g_array_unref(run->val);
  g_free(run);
}

static CohortPastRun *past_run_new(const char *id)
{
  CohortPastRun *run = g_new0(CohortPastRun, 1);
  run->id = g_strdup(id);
  run->final_loss = NAN;
  run->train = g_array_new(FALSE, FALSE, sizeof(double));
  run->val = g_array_new(FALSE, FALSE, sizeof(double));
  return run;
}

/* Drops the points of steps after `step`: a resumed run redoes them. */
static void drop_after(GArray *a, double step)
{
  guint keep = 0;
  for (guint i = 0; i + 1 < a->len; i += 2) {
    if (g_array_index(a, double, i) > step)
      continue;
    g_array_index(a, double, keep) = g_array_index(a, double, i);
    g_array_index(a, double, keep + 1) = g_array_index(a, double, i + 1);
    keep += 2;
  }
  g_array_set_size(a, keep);
}

static void add_point(GArray *a, double step, double v)
{
  if (!isfinite(v))
    return;
  double pt[2] = {step, v};
  g_array_append_vals(a, pt, 2);
}

static void take_event(CohortPastRun *run, JsonObject *ev, const char *name)
{
  double step = cohort_event_number(ev, COHORT_FIELD_STEP, NAN);
  if (g_str_equal(name, COHORT_EVENT_START)) {
    if (run->started == 0)
      run->started = cohort_event_number(ev, COHORT_FIELD_TIME, 0);
    g_free(run->name);
    run->name = g_strdup(cohort_event_text(ev, COHORT_FIELD_RUN, NULL));
    run->total_steps =
        (gint64)cohort_event_number(ev, COHORT_FIELD_TOTAL_STEPS, (double)run->total_steps);
    double from = cohort_event_number(ev, COHORT_FIELD_START_STEP, 0);
    drop_after(run->train, from);
    drop_after(run->val, from);
    g_clear_pointer(&run->status, g_free);
  } else if (g_str_equal(name, COHORT_EVENT_STEP)) {
    add_point(run->train, step, cohort_event_number(ev, COHORT_FIELD_LOSS, NAN));
    if (isfinite(cohort_event_number(ev, COHORT_FIELD_LOSS, NAN)))
      run->final_loss = cohort_event_number(ev, COHORT_FIELD_LOSS, NAN);
    run->last_step = MAX(run->last_step, (gint64)cohort_event_number(ev, COHORT_FIELD_STEP, 0));
  } else if (g_str_equal(name, COHORT_EVENT_EVAL)) {
    add_point(run->val, step, cohort_event_number(ev, COHORT_FIELD_VAL_LOSS, NAN));
  } else if (g_str_equal(name, COHORT_EVENT_SAMPLE)) {
    run->samples++;
  } else if (g_str_equal(name, COHORT_EVENT_DONE)) {
    g_free(run->status);
    run->status = g_strdup(cohort_event_text(ev, COHORT_FIELD_STATUS, NULL));
  }
}

GPtrArray *cohort_past_runs_load(const char *path, GError **error)
{
  /* A regular file (a FIFO named events.jsonl would hang the window) of a sane size. */
  gsize len = 0;
  g_autofree char *contents = cohort_file_read_regular(path, 1u << 30, "a run record", &len, error);
  if (contents == NULL)
    return NULL;
  GPtrArray *runs = g_ptr_array_new_with_free_func((GDestroyNotify)cohort_past_run_free);
  g_autoptr(GHashTable) by_id = g_hash_table_new(g_str_hash, g_str_equal);
  for (char *line = contents, *end; line < contents + len; line = end + 1) {
    end = memchr(line, '\n', contents + len - line);
    if (end == NULL)
      end = contents + len;
    /* The same strict reader as the live stream: a damaged line is skipped, never read. */
    g_autoptr(JsonNode) root = cohort_json_parse_strict(line, end - line, path, 0, NULL);
    if (root == NULL || !JSON_NODE_HOLDS_OBJECT(root))
      continue;
    JsonObject *ev = json_node_get_object(root);
    const char *id = cohort_event_text(ev, COHORT_FIELD_RUN_ID, NULL),
               *name = cohort_event_text(ev, COHORT_FIELD_EVENT, NULL);
    if (id == NULL || name == NULL)
      continue;
    CohortPastRun *run = g_hash_table_lookup(by_id, id);
    if (run == NULL) {
      run = past_run_new(id);
      g_ptr_array_add(runs, run);
      g_hash_table_insert(by_id, run->id, run);
    }
    take_event(run, ev, name);
  }
  return runs;
}

static void load_in_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
  (void)source;
  (void)cancel;
  GError *error = NULL;
  GPtrArray *runs = cohort_past_runs_load(data, &error);
  if (runs == NULL)
    g_task_return_error(task, error);
  else
    g_task_return_pointer(task, runs, (GDestroyNotify)g_ptr_array_unref);
}

typedef struct {
  CohortPastRunsCallback callback;
  gpointer data;
} LoadCall;

static void on_loaded(GObject *source, GAsyncResult *res, gpointer data)
{
  (void)source;
  LoadCall *call = data;
  GError *error = NULL;
  GPtrArray *runs = g_task_propagate_pointer(G_TASK(res), &error);
  if (!g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    call->callback(runs, error, call->data);
  else
    g_clear_error(&error);
  g_free(call);
}

void cohort_past_runs_load_async(const char *path, GCancellable *cancel,
                                 CohortPastRunsCallback callback, gpointer data)
{
  LoadCall *call = g_new0(LoadCall, 1);
  call->callback = callback;
  call->data = data;
  g_autoptr(GTask) task = g_task_new(NULL, cancel, on_loaded, call);
  g_task_set_task_data(task, g_strdup(path), g_free);
  g_task_set_return_on_cancel(task, TRUE);
  g_task_run_in_thread(task, load_in_thread);
}

char *cohort_past_run_title(const CohortPastRun *run)
{
  g_autoptr(GDateTime) t = g_date_time_new_from_unix_local((gint64)run->started);
  g_autofree char *when = t != NULL ? g_date_time_format(t, "%x %X") : g_strdup("?");
  return g_strdup_printf(_("%s, %s"), run->name != NULL ? run->name : run->id, when);
}
