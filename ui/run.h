/* A training run as a child process: launches the engine with a progress pipe on fd 3, reads
 * the progress events and the child's output asynchronously, and stops the whole process
 * group on request. The window never blocks on the child. */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

#define COHORT_TYPE_RUN (cohort_run_get_type())
G_DECLARE_FINAL_TYPE(CohortRun, cohort_run, COHORT, RUN, GObject)

/* Signals:
 *   "event"    (JsonObject *ev): one progress event (an object with "event").
 *   "output"   (const char *line): one line of the child's stdout/stderr, or a progress line
 *              that is not a JSON object.
 *   "finished" (const char *summary): the child exited and both streams reached their end;
 *              `summary` says how it ended, in words (translated). */
CohortRun *cohort_run_new(void);

/* How a run ended. */
typedef enum {
  COHORT_RUN_RUNNING,   /* not ended (or never started) */
  COHORT_RUN_COMPLETED, /* done: completed */
  COHORT_RUN_STOPPED,   /* done: stopped (Stop, or SIGINT/SIGTERM from elsewhere: 130/143) */
  COHORT_RUN_FAILED,    /* anything else */
} CohortRunOutcome;

/* The descriptor the child gets for its control channel (engine/progress/control.h): the window
 * adds
 * "--control-fd 4" to the engine's command line. */
#define COHORT_RUN_CONTROL_FD 4

/* Starts `argv` in `cwd` (NULL: the current folder) as the leader of a new process group,
 * with the write end of a pipe as its fd 3, one end of a socket pair as its fd 4 (the control
 * channel, see cohort_run_request) and stdout+stderr merged into one pipe. */
gboolean cohort_run_start(CohortRun *run, const char *const *argv, const char *cwd, GError **error);

/* Reads progress lines from `stream` through the same reader as a live run, without a child
 * (recorded runs, tests). "finished" comes at the end of the stream. A workspace's
 * events.jsonl holds every run, each event with its "run_id": when `stream` can seek, only
 * the run chosen with cohort_run_set_replay_choice is shown, else the run of the file's last
 * event; events of other runs are left out and the log says which runs they were. */
void cohort_run_replay(CohortRun *run, GInputStream *stream);

/* The run id replays show (`cohort --run ID`); NULL (the default): the last run of the file.
 * Applies to every later replay in this process. */
void cohort_run_set_replay_choice(const char *run_id);

/* SIGTERM to the child's process group; SIGKILL to the group when it has not exited after
 * `grace_s` seconds. Returns at once; "finished" reports the end. */
void cohort_run_stop(CohortRun *run, double grace_s);

gboolean cohort_run_is_running(CohortRun *run);

/* Whether the run is a child process (not a replay) that has not ended. */
gboolean cohort_run_is_live(CohortRun *run);

/* Sends one request line ("sample" or "save") to the child's control channel, without
 * blocking. FALSE with an error when no child runs or it no longer reads. */
gboolean cohort_run_request(CohortRun *run, const char *request, GError **error);

/* Turns of the main loop that read lines since the run started (for tests: the lines that are
 * there already are taken many per turn). */
guint cohort_run_get_read_turns(CohortRun *run);

/* How the run ended (COHORT_RUN_RUNNING before "finished"). */
CohortRunOutcome cohort_run_get_outcome(CohortRun *run);

/* The child's process id (its process group id too), or 0 when none was started. */
int cohort_run_get_pid(CohortRun *run);

/* The last summary given by "finished", or NULL. */
const char *cohort_run_get_summary(CohortRun *run);

G_END_DECLS
