/* The runs a workspace has seen, read back from its events.jsonl (every event of every run,
 * each with its "run_id"; docs/progress-protocol.md): for the Run page's history, which shows
 * an earlier run again or lays its curves over the current one. */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  char *id;         /* run_id */
  char *name;       /* the start event's "run" (the workspace folder's name) */
  double started;   /* Unix time of its first start event */
  gint64 last_step; /* the highest step it reported */
  gint64 total_steps;
  char *status;      /* its last done event's status; NULL when it has none (running, killed) */
  double final_loss; /* the last training loss it reported; NaN when none */
  GArray *train;     /* double pairs (step, loss); a resume's redone steps replace the old */
  GArray *val;       /* double pairs (step, val_loss) */
  guint samples;     /* sample events */
} CohortPastRun;

void cohort_past_run_free(CohortPastRun *run);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortPastRun, cohort_past_run_free)

/* The runs of the events.jsonl at `path`, in the order they first appear (oldest first). Lines
 * that are not events, or have no run_id, are skipped. NULL with an error when the file cannot
 * be read; an empty array when it holds no run. */
GPtrArray *cohort_past_runs_load(const char *path, GError **error);

/* cohort_past_runs_load in a worker thread; `callback` gets the array (owned by the callee) or
 * NULL with the error (owned by the callee), on the calling thread's main context. */
typedef void (*CohortPastRunsCallback)(GPtrArray *runs, GError *error, gpointer data);
void cohort_past_runs_load_async(const char *path, GCancellable *cancel,
                                 CohortPastRunsCallback callback, gpointer data);

/* "<name>, <date and time>" for menus, in the local time zone. g_free the result. */
char *cohort_past_run_title(const CohortPastRun *run);

G_END_DECLS
