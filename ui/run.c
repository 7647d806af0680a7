#include "ui/run.h"
#include "engine/base/json-read.h"
#include "ui/progress-event.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <glib/gi18n.h>
#include <gio/gunixinputstream.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct _CohortRun {
  GObject parent_instance;
  GSubprocess *child;
  int pid;
  int control_fd; /* our end of the control channel, -1 when none */
  CohortRunOutcome outcome;
  GCancellable *cancel;
  guint open_streams; /* progress and output readers not at their end yet */
  gboolean child_done;
  gboolean stopping;
  guint kill_source;
  char *done_status; /* "status" of the done event */
  int done_step;
  double done_elapsed;
  char *checkpoint;    /* the run's last checkpoint folder: saved, or resumed from; or NULL */
  int checkpoint_step; /* its step */
  char *error_message; /* first error event */
  char *last_output;   /* last non-empty output line */
  char *summary;
  /* Replaying one run of a workspace's events.jsonl: events of other runs are left out. */
  char *only_run;
  guint run_events;      /* events of only_run seen */
  guint other_events;    /* events of other runs left out */
  GPtrArray *other_runs; /* their ids, in order of appearance */
  guint read_turns;      /* asynchronous reads that returned lines (for tests) */
};

G_DEFINE_FINAL_TYPE(CohortRun, cohort_run, G_TYPE_OBJECT)

enum { SIGNAL_EVENT, SIGNAL_OUTPUT, SIGNAL_FINISHED, N_SIGNALS };
static guint signals[N_SIGNALS];

typedef struct {
  CohortRun *run;
  GDataInputStream *in;
  gboolean progress; /* JSON lines, else plain output */
} Reader;

static void finish_if_done(CohortRun *run);

/* TRUE when `ev` belongs to another run than the one being replayed (events.jsonl holds
 * every run of a workspace, each event with its "run_id"). */
static gboolean other_run(CohortRun *run, JsonObject *ev)
{
  if (run->only_run == NULL)
    return FALSE;
  const char *id = cohort_event_text(ev, COHORT_FIELD_RUN_ID, NULL);
  if (id == NULL || g_str_equal(id, run->only_run)) {
    run->run_events++;
    return FALSE;
  }
  run->other_events++;
  if (!g_ptr_array_find_with_equal_func(run->other_runs, id, g_str_equal, NULL))
    g_ptr_array_add(run->other_runs, g_strdup(id));
  return TRUE;
}

/* At the end of a replay of one run: what was left out, in the log. */
static void report_other_runs(CohortRun *run)
{
  if (run->only_run == NULL || run->other_runs->len == 0)
    return;
  g_ptr_array_add(run->other_runs, NULL);
  g_autofree char *ids = g_strjoinv(", ", (char **)run->other_runs->pdata);
  g_ptr_array_remove_index(run->other_runs, run->other_runs->len - 1);
  g_autofree char *msg =
      run->run_events == 0
          ? g_strdup_printf(_("replay: no events of run %s in this file; its runs: %s"),
                            run->only_run, ids)
          : g_strdup_printf(_("replay: run %s; %u events of other runs (%s) left out; --run ID "
                              "shows another"),
                            run->only_run, run->other_events, ids);
  g_signal_emit(run, signals[SIGNAL_OUTPUT], 0, msg);
}

/* Members whose type the Run page relies on: read with the string or integer getters, which
 * return NULL or complain about another type. */
static const char *const string_members[] = {
    COHORT_FIELD_EVENT, COHORT_FIELD_STATUS, COHORT_FIELD_MESSAGE, COHORT_FIELD_TEXT,
    COHORT_FIELD_PATH,  COHORT_FIELD_LEVEL,  COHORT_FIELD_RUN,     COHORT_FIELD_DEVICE};

static gboolean holds(JsonObject *o, const char *name, GType type)
{
  JsonNode *n = json_object_get_member(o, name);
  return n == NULL || (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == type);
}

/* An event the page can show without surprises: "event" and the text members are strings,
 * "rank" an integer, "ranks" a list of objects whose "host" is a string. */
static gboolean well_formed(JsonNode *root)
{
  if (!JSON_NODE_HOLDS_OBJECT(root))
    return FALSE;
  JsonObject *ev = json_node_get_object(root);
  if (!json_object_has_member(ev, COHORT_FIELD_EVENT) ||
      !holds(ev, COHORT_FIELD_RANK, G_TYPE_INT64))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS(string_members); i++)
    if (!holds(ev, string_members[i], G_TYPE_STRING))
      return FALSE;
  for (const char *const *key =
           (const char *const[]){COHORT_FIELD_STEP, COHORT_FIELD_ELAPSED_S, NULL};
       *key; key++) {
    JsonNode *n = json_object_get_member(ev, *key);
    if (n != NULL && !JSON_NODE_HOLDS_VALUE(n))
      return FALSE;
  }
  JsonNode *ranks = json_object_get_member(ev, COHORT_FIELD_RANKS);
  if (ranks == NULL)
    return TRUE;
  if (!JSON_NODE_HOLDS_ARRAY(ranks))
    return FALSE;
  JsonArray *a = json_node_get_array(ranks);
  for (guint i = 0; i < json_array_get_length(a); i++) {
    JsonNode *r = json_array_get_element(a, i);
    if (!JSON_NODE_HOLDS_OBJECT(r) ||
        !holds(json_node_get_object(r), COHORT_FIELD_HOST, G_TYPE_STRING))
      return FALSE;
  }
  return TRUE;
}

/* A progress line that is no event goes to the log, cut short: it may be megabytes. */
static void not_an_event(CohortRun *run, const char *line)
{
  const char *cut = g_utf8_strlen(line, -1) > 200 ? g_utf8_offset_to_pointer(line, 200) : NULL;
  g_autofree char *shown = cut ? g_strdup_printf("%.*s...", (int)(cut - line), line) : NULL;
  g_autofree char *msg = g_strdup_printf(_("progress: not an event: %s"), shown ? shown : line);
  g_signal_emit(run, signals[SIGNAL_OUTPUT], 0, msg);
}

/* A line of the progress stream: strict JSON (the engine writes nothing else), so a damaged
 * or hostile line, however deep or odd, is shown as text and skipped, never read. */
static void handle_progress_line(CohortRun *run, const char *line)
{
  if (*line == '\0')
    return;
  g_autoptr(JsonNode) root = cohort_json_parse_strict(line, -1, "progress", 0, NULL);
  if (root == NULL || !well_formed(root)) {
    not_an_event(run, line);
    return;
  }
  JsonObject *ev = json_node_get_object(root);
  if (other_run(run, ev))
    return;
  const char *name = cohort_event_name(ev);
  if (g_str_equal(name, COHORT_EVENT_DONE)) {
    g_free(run->done_status);
    run->done_status =
        g_strdup(cohort_event_text(ev, COHORT_FIELD_STATUS, COHORT_STATUS_COMPLETED));
    run->done_step = (int)cohort_event_int(ev, COHORT_FIELD_STEP, 0);
    run->done_elapsed = cohort_event_number(ev, COHORT_FIELD_ELAPSED_S, 0);
  } else if (g_str_equal(name, COHORT_EVENT_CHECKPOINT) ||
             (g_str_equal(name, COHORT_EVENT_START) &&
              json_object_has_member(ev, COHORT_FIELD_RESUMED_FROM))) {
    gboolean saved = g_str_equal(name, COHORT_EVENT_CHECKPOINT);
    g_free(run->checkpoint);
    run->checkpoint =
        g_strdup(cohort_event_text(ev, saved ? COHORT_FIELD_PATH : COHORT_FIELD_RESUMED_FROM, ""));
    run->checkpoint_step =
        (int)cohort_event_int(ev, saved ? COHORT_FIELD_STEP : COHORT_FIELD_START_STEP, 0);
  } else if (g_str_equal(name, COHORT_EVENT_ERROR) && run->error_message == NULL) {
    const char *msg = cohort_event_text(ev, COHORT_FIELD_MESSAGE, "");
    if (json_object_has_member(ev, COHORT_FIELD_RANK))
      run->error_message =
          g_strdup_printf(_("rank %d: %s"), (int)cohort_event_int(ev, COHORT_FIELD_RANK, 0), msg);
    else
      run->error_message = g_strdup(msg);
  }
  g_signal_emit(run, signals[SIGNAL_EVENT], 0, ev);
}

static void take_line(Reader *r, char *raw, gsize len)
{
  CohortRun *run = r->run;
  /* A line that is not UTF-8 (or holds a NUL byte) is shown repaired, never read as an event,
   * and the lines after it are still read. */
  gboolean clean = memchr(raw, '\0', len) == NULL && g_utf8_validate(raw, (gssize)len, NULL);
  g_autofree char *line = clean ? g_strdup(raw) : g_utf8_make_valid(raw, (gssize)len);
  if (r->progress && !clean) {
    not_an_event(run, line);
  } else if (r->progress) {
    handle_progress_line(run, line);
  } else {
    g_autofree char *trimmed = g_strstrip(g_strdup(line));
    if (*trimmed != '\0') {
      g_free(run->last_output);
      run->last_output = g_strdup(line);
    }
    g_signal_emit(run, signals[SIGNAL_OUTPUT], 0, line);
  }
}

/* Whether the stream's buffer holds a whole line, so reading it cannot block. */
static gboolean line_buffered(Reader *r)
{
  gsize n = 0;
  const void *buf = g_buffered_input_stream_peek_buffer(G_BUFFERED_INPUT_STREAM(r->in), &n);
  return n > 0 && memchr(buf, '\n', n) != NULL;
}

/* Lines taken in one turn of the main loop when they are there already: a replay of a long
 * run would otherwise draw the window once per line. */
#define LINES_PER_TURN 500

static void on_line(GObject *source, GAsyncResult *res, gpointer data)
{
  Reader *r = data;
  g_autoptr(GError) error = NULL;
  gsize len = 0;
  g_autofree char *raw =
      g_data_input_stream_read_line_finish(G_DATA_INPUT_STREAM(source), res, &len, &error);
  CohortRun *run = r->run;
  if (raw == NULL) {
    if (error != NULL && !g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
      g_autofree char *msg =
          g_strdup_printf(_("reading the run's output failed: %s"), error->message);
      g_signal_emit(run, signals[SIGNAL_OUTPUT], 0, msg);
    }
    if (r->progress)
      report_other_runs(run);
    g_object_unref(r->in);
    g_free(r);
    run->open_streams--;
    finish_if_done(run);
    g_object_unref(run);
    return;
  }
  run->read_turns++;
  take_line(r, raw, len);
  for (int i = 0;
       i < LINES_PER_TURN && !g_cancellable_is_cancelled(run->cancel) && line_buffered(r); i++) {
    g_autofree char *more = g_data_input_stream_read_line(r->in, &len, NULL, NULL);
    if (more == NULL)
      break;
    take_line(r, more, len);
  }
  g_data_input_stream_read_line_async(r->in, G_PRIORITY_DEFAULT, run->cancel, on_line, r);
}

static void read_lines(CohortRun *run, GInputStream *stream, gboolean progress)
{
  Reader *r = g_new0(Reader, 1);
  r->run = g_object_ref(run);
  r->in = g_data_input_stream_new(stream);
  r->progress = progress;
  /* Lines up to 1 MiB by the protocol; GDataInputStream grows its buffer as needed. */
  g_data_input_stream_set_newline_type(r->in, G_DATA_STREAM_NEWLINE_TYPE_LF);
  /* Many lines per read, so a replay takes them in few turns of the main loop. */
  g_buffered_input_stream_set_buffer_size(G_BUFFERED_INPUT_STREAM(r->in), 256 * 1024);
  run->open_streams++;
  g_data_input_stream_read_line_async(r->in, G_PRIORITY_DEFAULT, run->cancel, on_line, r);
}

static char *exit_summary(CohortRun *run)
{
  if (run->child == NULL)
    return NULL;
  if (g_subprocess_get_if_signaled(run->child)) {
    int sig = g_subprocess_get_term_sig(run->child);
    return g_strdup_printf(_("killed by signal %d (%s)"), sig, g_strsignal(sig));
  }
  int code = g_subprocess_get_exit_status(run->child);
  /* Launchers report a group they stopped on request as 128 + the signal; a run stopped from
   * elsewhere (a signal from a terminal) that said so is a stop too, not a failure. */
  gboolean stop_code = code == 128 + SIGTERM || code == 128 + SIGINT;
  if (code == 0 ||
      (stop_code && (run->stopping || g_strcmp0(run->done_status, COHORT_STATUS_STOPPED) == 0)))
    return NULL;
  return g_strdup_printf(_("exited with code %d"), code);
}

/* A stop, with the checkpoint a Resume continues from (the progress events name it). */
static char *stopped_text(CohortRun *run)
{
  if (run->checkpoint != NULL && run->checkpoint_step == run->done_step)
    /* TRANSLATORS: a step, then the checkpoint's folder. */
    return g_strdup_printf(_("Stopped at step %d; its checkpoint: %s"), run->done_step,
                           run->checkpoint);
  if (run->checkpoint != NULL)
    /* TRANSLATORS: the step it stopped at; the step of the last checkpoint, and its folder. */
    return g_strdup_printf(_("Stopped at step %d; the last checkpoint is of step %d: %s"),
                           run->done_step, run->checkpoint_step, run->checkpoint);
  if (run->done_step == 0)
    return g_strdup(_("Stopped at step 0, before the first step: no checkpoint was saved"));
  return g_strdup_printf(_("Stopped at step %d; no checkpoint was reported"), run->done_step);
}

static void finish_if_done(CohortRun *run)
{
  if (run->open_streams > 0 || (run->child != NULL && !run->child_done) || run->summary != NULL)
    return;
  g_autofree char *exit = exit_summary(run);
  g_autofree char *status = NULL;
  if (g_strcmp0(run->done_status, COHORT_STATUS_COMPLETED) == 0)
    status = g_strdup_printf(_("Completed: %d steps in %.0f s"), run->done_step, run->done_elapsed);
  else if (g_strcmp0(run->done_status, COHORT_STATUS_STOPPED) == 0)
    status = stopped_text(run);
  else if (g_strcmp0(run->done_status, COHORT_STATUS_FAILED) == 0)
    status = g_strdup_printf(_("Failed: %s"), run->error_message ? run->error_message
                                              : run->last_output ? run->last_output
                                                                 : _("no reason given"));
  else if (run->stopping)
    status = g_strdup(_("Stopped before the run reported an end"));
  else
    status = g_strdup_printf(_("Ended without a report: %s"),
                             run->last_output ? run->last_output : _("no output"));

  if (exit != NULL)
    run->summary = g_strdup_printf("%s (%s)", status, exit);
  else
    run->summary = g_steal_pointer(&status);
  if (exit == NULL && g_strcmp0(run->done_status, COHORT_STATUS_COMPLETED) == 0)
    run->outcome = COHORT_RUN_COMPLETED;
  else if (run->stopping ||
           (exit == NULL && g_strcmp0(run->done_status, COHORT_STATUS_STOPPED) == 0))
    run->outcome = COHORT_RUN_STOPPED;
  else
    run->outcome = COHORT_RUN_FAILED;
  if (run->control_fd >= 0)
    close(run->control_fd);
  run->control_fd = -1;
  g_clear_handle_id(&run->kill_source, g_source_remove);
  g_signal_emit(run, signals[SIGNAL_FINISHED], 0, run->summary);
}

static void on_child_exited(GObject *source, GAsyncResult *res, gpointer data)
{
  CohortRun *run = data;
  g_subprocess_wait_finish(G_SUBPROCESS(source), res, NULL);
  run->child_done = TRUE;
  finish_if_done(run);
  g_object_unref(run);
}

static void reset(CohortRun *run)
{
  g_clear_object(&run->child);
  g_clear_object(&run->cancel);
  run->cancel = g_cancellable_new();
  run->pid = 0;
  if (run->control_fd >= 0)
    close(run->control_fd);
  run->control_fd = -1;
  run->outcome = COHORT_RUN_RUNNING;
  run->child_done = FALSE;
  run->stopping = FALSE;
  run->done_step = 0;
  run->done_elapsed = 0;
  g_clear_pointer(&run->done_status, g_free);
  g_clear_pointer(&run->checkpoint, g_free);
  run->checkpoint_step = 0;
  g_clear_pointer(&run->error_message, g_free);
  g_clear_pointer(&run->last_output, g_free);
  g_clear_pointer(&run->summary, g_free);
  g_clear_pointer(&run->only_run, g_free);
  run->run_events = run->other_events = 0;
  run->read_turns = 0;
  g_ptr_array_set_size(run->other_runs, 0);
}

static void child_setup(gpointer data)
{
  (void)data;
  /* Its own process group, so Stop reaches the launcher and every rank it started. */
  setpgid(0, 0);
}

gboolean cohort_run_start(CohortRun *run, const char *const *argv, const char *cwd, GError **error)
{
  g_return_val_if_fail(!cohort_run_is_running(run), FALSE);
  reset(run);
  int fds[2];
  if (!g_unix_open_pipe(fds, FD_CLOEXEC, error))
    return FALSE;
  /* A socket rather than a pipe for the control channel: send() with MSG_NOSIGNAL never
   * raises SIGPIPE in the window when the run has gone. */
  int control[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(e), "socketpair: %s", g_strerror(e));
    return FALSE;
  }

  g_autoptr(GSubprocessLauncher) launcher =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_MERGE |
                                G_SUBPROCESS_FLAGS_STDIN_INHERIT);
  g_subprocess_launcher_take_fd(launcher, fds[1], 3);
  g_subprocess_launcher_take_fd(launcher, control[1], COHORT_RUN_CONTROL_FD);
  g_subprocess_launcher_set_child_setup(launcher, child_setup, NULL, NULL);
  if (cwd != NULL)
    g_subprocess_launcher_set_cwd(launcher, cwd);
  run->child = g_subprocess_launcher_spawnv(launcher, argv, error);
  /* The launcher holds the write end; drop it now so the reader sees the end of the stream
   * when the child (and everything it started) is gone. */
  g_clear_object(&launcher);
  if (run->child == NULL) {
    close(fds[0]);
    close(control[0]);
    return FALSE;
  }
  run->control_fd = control[0];
  fcntl(run->control_fd, F_SETFL, fcntl(run->control_fd, F_GETFL) | O_NONBLOCK);
  /* A child that has already ended has no identifier any more: nothing is left to stop. */
  const char *id = g_subprocess_get_identifier(run->child);
  run->pid = id != NULL ? (int)g_ascii_strtoll(id, NULL, 10) : 0;

  g_autoptr(GInputStream) progress = g_unix_input_stream_new(fds[0], TRUE);
  read_lines(run, progress, TRUE);
  read_lines(run, g_subprocess_get_stdout_pipe(run->child), FALSE);
  g_subprocess_wait_async(run->child, NULL, on_child_exited, g_object_ref(run));
  return TRUE;
}

static char *replay_choice;

void cohort_run_set_replay_choice(const char *run_id)
{
  g_free(replay_choice);
  replay_choice = g_strdup(run_id);
}

/* Progress lines are at most 1 MiB: the last event starts within the last 2 MiB. */
#define TAIL_BYTES (2 << 20)

/* The "run_id" of the last event of a seekable `stream` (left at its start again), or NULL
 * when that event has none (a plain progress stream) or the stream cannot seek. */
static char *last_run_id(GInputStream *stream)
{
  if (!G_IS_SEEKABLE(stream) || !g_seekable_can_seek(G_SEEKABLE(stream)))
    return NULL;
  GSeekable *s = G_SEEKABLE(stream);
  g_autofree char *tail = g_malloc(TAIL_BYTES + 1);
  gsize n = 0;
  gboolean ok = g_seekable_seek(s, 0, G_SEEK_END, NULL, NULL);
  goffset size = g_seekable_tell(s);
  ok = ok && g_seekable_seek(s, MAX(size - TAIL_BYTES, 0), G_SEEK_SET, NULL, NULL) &&
       g_input_stream_read_all(stream, tail, TAIL_BYTES, &n, NULL, NULL);
  if (!g_seekable_seek(s, 0, G_SEEK_SET, NULL, NULL) || !ok)
    return NULL;
  tail[n] = '\0';
  g_auto(GStrv) lines = g_strsplit(tail, "\n", -1);
  /* The first line may be cut (it started before the tail); it is the last one tried. */
  for (guint i = g_strv_length(lines); i-- > 0;) {
    /* The strict reader: json-glib alone recurses once per level of a deep line. */
    g_autoptr(JsonNode) root =
        *lines[i] ? cohort_json_parse_strict(lines[i], -1, "events.jsonl", 0, NULL) : NULL;
    if (root == NULL || !JSON_NODE_HOLDS_OBJECT(root))
      continue;
    JsonObject *ev = json_node_get_object(root);
    if (!json_object_has_member(ev, COHORT_FIELD_EVENT))
      continue;
    return g_strdup(cohort_event_text(ev, COHORT_FIELD_RUN_ID, NULL));
  }
  return NULL;
}

void cohort_run_replay(CohortRun *run, GInputStream *stream)
{
  reset(run);
  if (G_IS_SEEKABLE(stream) && g_seekable_can_seek(G_SEEKABLE(stream)))
    run->only_run = replay_choice ? g_strdup(replay_choice) : last_run_id(stream);
  read_lines(run, stream, TRUE);
}

static gboolean kill_group(gpointer data)
{
  CohortRun *run = data;
  run->kill_source = 0;
  if (run->pid > 0 && !run->child_done)
    kill(-run->pid, SIGKILL);
  return G_SOURCE_REMOVE;
}

void cohort_run_stop(CohortRun *run, double grace_s)
{
  if (!cohort_run_is_running(run) || run->pid <= 0)
    return;
  run->stopping = TRUE;
  if (kill(-run->pid, SIGTERM) != 0 && errno == ESRCH)
    kill(run->pid, SIGTERM);
  if (run->kill_source == 0)
    run->kill_source = g_timeout_add_full(G_PRIORITY_DEFAULT, (guint)(grace_s * 1000), kill_group,
                                          g_object_ref(run), g_object_unref);
}

gboolean cohort_run_is_running(CohortRun *run)
{
  return (run->child != NULL && !run->child_done) || run->open_streams > 0;
}

gboolean cohort_run_is_live(CohortRun *run)
{
  return run->child != NULL && cohort_run_is_running(run);
}

gboolean cohort_run_request(CohortRun *run, const char *request, GError **error)
{
  if (!cohort_run_is_live(run) || run->control_fd < 0) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED, _("no run is going on"));
    return FALSE;
  }
  g_autofree char *line = g_strconcat(request, "\n", NULL);
  gssize n = send(run->control_fd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != (gssize)strlen(line)) {
    int e = n < 0 ? errno : EAGAIN;
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(e),
                _("the run does not take requests: %s"), g_strerror(e));
    return FALSE;
  }
  return TRUE;
}

guint cohort_run_get_read_turns(CohortRun *run)
{
  return run->read_turns;
}

CohortRunOutcome cohort_run_get_outcome(CohortRun *run)
{
  return run->outcome;
}

int cohort_run_get_pid(CohortRun *run)
{
  return run->pid;
}

const char *cohort_run_get_summary(CohortRun *run)
{
  return run->summary;
}

static void cohort_run_dispose(GObject *obj)
{
  CohortRun *run = COHORT_RUN(obj);
  if (run->cancel != NULL)
    g_cancellable_cancel(run->cancel);
  g_clear_handle_id(&run->kill_source, g_source_remove);
  G_OBJECT_CLASS(cohort_run_parent_class)->dispose(obj);
}

static void cohort_run_finalize(GObject *obj)
{
  CohortRun *run = COHORT_RUN(obj);
  g_clear_object(&run->child);
  g_clear_object(&run->cancel);
  if (run->control_fd >= 0)
    close(run->control_fd);
  g_free(run->done_status);
  g_free(run->checkpoint);
  g_free(run->error_message);
  g_free(run->last_output);
  g_free(run->summary);
  g_free(run->only_run);
  g_ptr_array_unref(run->other_runs);
  G_OBJECT_CLASS(cohort_run_parent_class)->finalize(obj);
}

static void cohort_run_class_init(CohortRunClass *klass)
{
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  oc->dispose = cohort_run_dispose;
  oc->finalize = cohort_run_finalize;
  signals[SIGNAL_EVENT] = g_signal_new("event", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0,
                                       NULL, NULL, NULL, G_TYPE_NONE, 1, JSON_TYPE_OBJECT);
  signals[SIGNAL_OUTPUT] = g_signal_new("output", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST, 0,
                                        NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
  signals[SIGNAL_FINISHED] = g_signal_new("finished", G_TYPE_FROM_CLASS(klass), G_SIGNAL_RUN_LAST,
                                          0, NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
}

static void cohort_run_init(CohortRun *run)
{
  run->cancel = g_cancellable_new();
  run->control_fd = -1;
  run->other_runs = g_ptr_array_new_with_free_func(g_free);
}

CohortRun *cohort_run_new(void)
{
  return g_object_new(COHORT_TYPE_RUN, NULL);
}
