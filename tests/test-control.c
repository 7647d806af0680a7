/* The control channel (engine/progress/control.h, docs/progress-protocol.md): requests are read
 * without blocking (poll, never O_NONBLOCK on the watcher's pipe), a bounded amount per step,
 * whole lines only, bad lines are skipped with rate-limited warnings; a file, a device or a
 * folder is refused as the channel; a flood of garbage neither stalls a run nor fills its
 * disk, and SIGTERM still stops it at once; and end to end,
 * cohort-train (one process, two ranks in spawn mode, two under cohort-run) answers "sample" and
 * "save" at the next step with events that say "requested", the checkpoint being a real one at that
 * step. */
#include <gio/gunixinputstream.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "engine/progress/control.h"
#include "tests/test-util.h"
#include "tests/train-run.h"

static char *read_file(const char *path)
{
  char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  return text;
}

/* A failed assertion ends this test: the run it started ends with it. */
static void end_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
}

/* The log events of a file written by a CohortProgress, by level "warning". */
static guint count_warnings(const char *path)
{
  g_autofree char *text = read_file(path);
  guint n = 0;
  for (const char *p = text; (p = strstr(p, "\"level\":\"warning\"")) != NULL; p++)
    n++;
  return n;
}

static void test_poll(void)
{
  g_autofree char *dir = tu_mkdtemp("control");
  g_autofree char *log = g_build_filename(dir, "events.jsonl", NULL);
  int log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_assert_cmpint(log_fd, >=, 0);
  g_autoptr(CohortProgress) progress = cohort_progress_new(log_fd, FALSE);
  int p[2];
  g_assert_cmpint(pipe(p), ==, 0);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortControl) c = cohort_control_new(p[0], &error);
  g_assert_no_error(error);
  /* The watcher's pipe keeps its flags: no O_NONBLOCK on a shared file description. */
  g_assert_cmpint(fcntl(p[0], F_GETFL) & O_NONBLOCK, ==, 0);

  /* Nothing yet: no blocking, no request. */
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);
  /* Half a line is not a request until its newline comes. */
  g_assert_cmpint(write(p[1], "sam", 3), ==, 3);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);
  g_assert_cmpint(write(p[1], "ple\n save \n", 11), ==, 11);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==,
                   COHORT_CONTROL_SAMPLE | COHORT_CONTROL_SAVE);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);

  /* A word that is no request is skipped with a warning; a line past the limit too, counted
   * into the next summary (warnings are rate-limited). */
  g_autofree char *longline = g_strnfill(COHORT_CONTROL_MAX_LINE + 40, 'x');
  g_autofree char *junk = g_strdup_printf("bogus\n%s\nsample\n", longline);
  cohort_control_set_warn_interval(c, 0.5);
  g_assert_cmpint(write(p[1], junk, strlen(junk)), ==, (gssize)strlen(junk));
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, COHORT_CONTROL_SAMPLE);
  g_autofree char *events = read_file(log);
  g_assert_nonnull(strstr(events, "control channel: \\\"bogus\\\" is not a request"));
  g_assert_cmpuint(count_warnings(log), ==, 1);
  g_usleep(600000);
  cohort_control_poll(c, progress);
  g_free(events);
  events = read_file(log);
  g_assert_nonnull(strstr(events, "1 more line skipped"));
  g_assert_nonnull(strstr(events, "a line longer than 256 bytes was skipped"));

  /* The writer went away: no more requests, and no error. */
  g_assert_cmpint(write(p[1], "save\n", 5), ==, 5);
  close(p[1]);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, COHORT_CONTROL_SAVE);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);
  close(p[0]);
  tu_rm_rf(dir);
}

/* A flood of garbage: each poll reads a bounded amount, and a thousand bad lines make one
 * warning, then one summary with their count. */
static void test_poll_flood(void)
{
  g_autofree char *dir = tu_mkdtemp("control-flood");
  g_autofree char *log = g_build_filename(dir, "events.jsonl", NULL);
  int log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_autoptr(CohortProgress) progress = cohort_progress_new(log_fd, FALSE);
  int p[2];
  g_assert_cmpint(pipe(p), ==, 0);
  g_autoptr(CohortControl) c = cohort_control_new(p[0], NULL);
  g_autoptr(GString) flood = g_string_new(NULL);
  while (flood->len < 60000)
    g_string_append(flood, "garbage\n");
  g_assert_cmpint(write(p[1], flood->str, flood->len), ==, (gssize)flood->len);
  guint polls = 0;
  for (int available = 1; available > 0; polls++) {
    cohort_control_poll(c, progress);
    g_assert_cmpint(ioctl(p[0], FIONREAD, &available), ==, 0);
  }
  g_test_message("%u polls for %u bytes", polls, (guint)flood->len);
  g_assert_cmpuint(polls, >=, flood->len / COHORT_CONTROL_MAX_BYTES_PER_POLL);
  g_assert_cmpuint(count_warnings(log), ==, 1);
  cohort_control_set_warn_interval(c, 0.0);
  cohort_control_poll(c, progress);
  g_assert_cmpuint(count_warnings(log), ==, 2);
  g_autofree char *events = read_file(log);
  g_autofree char *summary = g_strdup_printf("%u more lines skipped", (guint)(flood->len / 8 - 1));
  g_assert_nonnull(strstr(events, summary));
  close(p[1]);
  close(p[0]);
  tu_rm_rf(dir);
}

/* Descriptors that cannot be a control channel are refused, naming what they are. */
static void test_check_fd(void)
{
  g_autofree char *dir = tu_mkdtemp("control-fd");
  g_autofree char *file = g_build_filename(dir, "events.jsonl", NULL);
  g_assert_true(g_file_set_contents(file, "", 0, NULL));
  int fds[] = {open(file, O_RDONLY), open("/dev/zero", O_RDONLY), open(dir, O_RDONLY)};
  const char *kinds[] = {"a regular file", "a device", "a folder"};
  for (guint i = 0; i < G_N_ELEMENTS(fds); i++) {
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortControl) c = cohort_control_new(fds[i], &error);
    g_assert_null(c);
    g_test_message("%s", error->message);
    g_assert_nonnull(strstr(error->message, kinds[i]));
    g_autofree char *flag = g_strdup_printf("--control-fd %d", fds[i]);
    g_assert_nonnull(strstr(error->message, flag));
    close(fds[i]);
  }
  tu_rm_rf(dir);
}

/* cohort-train with the small model in `ws` plus `extra`, descriptor `control` as fd 3
 * (--control-fd 3), progress to `progress`; a child of this test. */
static GSubprocess *start_with_control(const char *ws, const char *const *extra, int control,
                                       const char *progress)
{
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  g_ptr_array_insert(args, 0, g_strdup(train_program()));
  g_ptr_array_add(args, g_strdup("--control-fd"));
  g_ptr_array_add(args, g_strdup("3"));
  g_ptr_array_add(args, g_strdup("--progress-fd"));
  g_ptr_array_add(args, g_strdup("4"));
  g_ptr_array_add(args, NULL);
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, end_with_parent, NULL, NULL);
  g_subprocess_launcher_take_fd(l, control, 3);
  int pfd = open(progress, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_assert_cmpint(pfd, >=, 0);
  g_subprocess_launcher_take_fd(l, pfd, 4);
  g_autoptr(GError) error = NULL;
  GSubprocess *p = g_subprocess_launcher_spawnv(l, (const char *const *)args->pdata, &error);
  g_assert_no_error(error);
  return p;
}

/* Waits for `p` at most `limit_s` seconds; FALSE (and the process killed) when it is still
 * running then. */
static gboolean wait_at_most(GSubprocess *p, double limit_s)
{
  gint64 deadline = g_get_monotonic_time() + (gint64)(limit_s * G_USEC_PER_SEC);
  while (g_get_monotonic_time() < deadline) {
    if (waitpid(atoi(g_subprocess_get_identifier(p)), NULL, WNOHANG | WNOWAIT) != 0)
      break;
    g_usleep(20000);
  }
  gboolean in_time = g_get_monotonic_time() < deadline;
  if (!in_time)
    g_subprocess_force_exit(p);
  g_subprocess_wait(p, NULL, NULL);
  return in_time;
}

static gint64 last_step(const char *progress)
{
  g_autofree char *text = NULL;
  if (!g_file_get_contents(progress, &text, NULL, NULL))
    return -1;
  gint64 step = -1;
  for (const char *p = text; (p = strstr(p, "{\"event\":\"step\"")) != NULL; p++) {
    const char *s = strstr(p, "\"step\":");
    s = s ? strstr(s + 1, "\"step\":") : NULL;
    if (s)
      step = MAX(step, g_ascii_strtoll(s + 7, NULL, 10));
  }
  return step;
}

typedef struct {
  int fd;
  gsize written;
} Flood;

/* `yes garbage` in a thread: until the reader is gone (EPIPE). */
static gpointer flood_writer(gpointer data)
{
  Flood *f = data;
  char block[4096];
  for (gsize i = 0; i < sizeof block; i += 8)
    memcpy(block + i, "garbage\n", 8);
  for (;;) {
    gssize n = write(f->fd, block, sizeof block);
    if (n <= 0)
      break;
    f->written += (gsize)n;
  }
  close(f->fd);
  return NULL;
}

/* A watcher that writes garbage without end: the run keeps stepping, the events stay few,
 * SIGTERM stops it at once, and the watcher's pipe keeps its flags. */
static void test_garbage_flood(void)
{
  g_autofree char *ws = tu_mkdtemp("control-garbage");
  g_autofree char *progress = g_build_filename(ws, "progress.jsonl", NULL);
  int p[2];
  g_assert_cmpint(pipe(p), ==, 0);
  int mine = dup(p[0]);
  const char *extra[] = {"--set",          "max_steps=20000", "--set",
                         "sample_every=0", "--set",           "eval_every=0",
                         "--set",          "save_every=0",    NULL};
  g_autoptr(GSubprocess) child = start_with_control(ws, extra, p[0], progress);
  Flood f = {p[1], 0};
  GThread *writer = g_thread_new("flood", flood_writer, &f);
  gint64 deadline = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
  while (last_step(progress) < 40 && g_get_monotonic_time() < deadline)
    g_usleep(50000);
  gint64 reached = last_step(progress);
  g_test_message("step %" G_GINT64_FORMAT " with %" G_GSIZE_FORMAT " bytes of garbage written",
                 reached, f.written);
  g_subprocess_send_signal(child, SIGTERM);
  gint64 t0 = g_get_monotonic_time();
  g_assert_true(wait_at_most(child, 30));
  g_test_message("stopped %.2f s after SIGTERM", (g_get_monotonic_time() - t0) / 1e6);
  g_assert_cmpint(reached, >=, 40);
  g_assert_true(g_subprocess_get_if_exited(child));
  g_assert_cmpint(g_subprocess_get_exit_status(child), ==, 128 + SIGTERM);
  g_assert_cmpint(fcntl(mine, F_GETFL) & O_NONBLOCK, ==, 0);
  close(mine);
  g_thread_join(writer);
  g_autofree char *events = g_build_filename(ws, "events.jsonl", NULL);
  GStatBuf st;
  g_assert_cmpint(g_stat(events, &st), ==, 0);
  g_test_message("events.jsonl: %" G_GINT64_FORMAT " bytes, %u warnings", (gint64)st.st_size,
                 count_warnings(events));
  g_assert_cmpint(st.st_size, <, 1 << 20);
  g_assert_cmpuint(count_warnings(events), <=, 10);
  tu_rm_rf(ws);
}

/* /dev/zero and the run's own events.jsonl as the channel: refused before anything starts. */
static void test_special_channels(void)
{
  g_autofree char *ws = tu_mkdtemp("control-special");
  g_autofree char *progress = g_build_filename(ws, "progress.jsonl", NULL);
  g_autofree char *events = g_build_filename(ws, "events.jsonl", NULL);
  g_assert_true(g_file_set_contents(events, "", 0, NULL));
  const char *extra[] = {"--set", "max_steps=20", NULL};
  int fds[] = {open("/dev/zero", O_RDONLY), open(events, O_RDONLY)};
  const char *named[] = {"a device", "a regular file"};
  for (guint i = 0; i < G_N_ELEMENTS(fds); i++) {
    g_autoptr(GSubprocess) child = start_with_control(ws, extra, fds[i], progress);
    g_assert_true(wait_at_most(child, 30));
    g_autofree char *err = NULL;
    GInputStream *in = g_subprocess_get_stderr_pipe(child);
    gsize n = 0;
    char buf[4096];
    g_input_stream_read_all(in, buf, sizeof buf - 1, &n, NULL, NULL);
    buf[n] = '\0';
    g_test_message("%s", buf);
    g_assert_true(g_subprocess_get_if_exited(child));
    g_assert_cmpint(g_subprocess_get_exit_status(child), ==, 2);
    g_assert_nonnull(strstr(buf, "--control-fd 3"));
    g_assert_nonnull(strstr(buf, named[i]));
  }
  tu_rm_rf(ws);
}

/* The next progress event (blocking read of one line), or NULL at the end of the stream. */
static JsonObject *next_event(GDataInputStream *in)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *line = g_data_input_stream_read_line_utf8(in, NULL, NULL, &error);
  g_assert_no_error(error);
  if (line == NULL)
    return NULL;
  g_autoptr(JsonNode) node = json_from_string(line, &error);
  g_assert_no_error(error);
  return json_object_ref(json_node_get_object(node));
}

static const char *event_name(JsonObject *ev)
{
  return json_object_get_string_member(ev, "event");
}

/* `nproc` ranks of cohort-train (spawn mode), or under cohort-run when `launcher`: the
 * descriptors go to the launcher, which gives them to rank 0. */
static void run_with_requests(int nproc, gboolean launcher)
{
  g_autofree char *ws = tu_mkdtemp("control-run");
  g_autofree char *np = g_strdup_printf("%d", nproc);
  const char *extra[] = {
      "--set",        "max_steps=20000", "--set",        "sample_every=0", "--set",
      "eval_every=0", "--set",           "save_every=0", "--quiet",        NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  const char *fds[] = {"--progress-fd", "3", "--control-fd", "4"};
  if (launcher) {
    const char *run[] = {g_getenv("COHORT_RUN"),
                         "--standalone",
                         "--nproc-per-node",
                         np,
                         "--quiet",
                         fds[0],
                         fds[1],
                         fds[2],
                         fds[3],
                         train_program()};
    for (guint i = G_N_ELEMENTS(run); i-- > 0;)
      g_ptr_array_insert(args, 0, g_strdup(run[i]));
  } else {
    for (guint i = 0; i < G_N_ELEMENTS(fds); i++)
      g_ptr_array_add(args, g_strdup(fds[i]));
    g_ptr_array_add(args, g_strdup("--nproc"));
    g_ptr_array_add(args, g_strdup(np));
    g_ptr_array_insert(args, 0, g_strdup(train_program()));
  }
  g_ptr_array_add(args, NULL);

  int progress[2], control[2];
  g_assert_cmpint(pipe(progress), ==, 0);
  g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control), ==, 0);
  g_autoptr(GSubprocessLauncher) l = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE |
                                                               G_SUBPROCESS_FLAGS_STDERR_SILENCE);
  g_subprocess_launcher_set_child_setup(l, end_with_parent, NULL, NULL);
  g_subprocess_launcher_take_fd(l, progress[1], 3);
  g_subprocess_launcher_take_fd(l, control[1], 4);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) child =
      g_subprocess_launcher_spawnv(l, (const char *const *)args->pdata, &error);
  g_assert_no_error(error);
  g_clear_object(&l); /* closes our copies of the child's ends */
  g_autoptr(GInputStream) raw = g_unix_input_stream_new(progress[0], TRUE);
  g_autoptr(GDataInputStream) in = g_data_input_stream_new(raw);

  gint64 sample_step = -1, ckpt_step = -1, asked_at = -1;
  g_autofree char *ckpt_path = NULL;
  JsonObject *ev;
  while ((sample_step < 0 || ckpt_step < 0) && (ev = next_event(in)) != NULL) {
    const char *name = event_name(ev);
    gboolean requested = json_object_get_boolean_member_with_default(ev, "requested", FALSE);
    if (g_str_equal(name, "step") && asked_at < 0) {
      asked_at = json_object_get_int_member(ev, "step");
      g_assert_cmpint(send(control[0], "sample\nsave\n", 12, MSG_NOSIGNAL), ==, 12);
    } else if (g_str_equal(name, "sample")) {
      g_assert_true(requested);
      sample_step = json_object_get_int_member(ev, "step");
      g_assert_true(g_str_has_prefix(json_object_get_string_member(ev, "text"), "This"));
    } else if (g_str_equal(name, "checkpoint")) {
      g_assert_true(requested);
      ckpt_step = json_object_get_int_member(ev, "step");
      ckpt_path = g_strdup(json_object_get_string_member(ev, "path"));
    }
    g_assert_false(g_str_equal(name, "done"));
    json_object_unref(ev);
  }
  g_test_message("asked after step %" G_GINT64_FORMAT ": sample at %" G_GINT64_FORMAT
                 ", checkpoint at %" G_GINT64_FORMAT,
                 asked_at, sample_step, ckpt_step);
  /* Answered at a step boundary after the request, both at the same one. */
  g_assert_cmpint(sample_step, >=, asked_at);
  g_assert_cmpint(ckpt_step, ==, sample_step);
  g_autofree char *state = g_build_filename(ckpt_path, "state.json", NULL);
  g_autofree char *text = read_file(state);
  g_autofree char *step_field = g_strdup_printf("\"step\":%" G_GINT64_FORMAT ",", ckpt_step);
  g_autoptr(GString) squeezed = g_string_new(NULL);
  for (const char *c = text; *c; c++)
    if (*c != ' ' && *c != '\n')
      g_string_append_c(squeezed, *c);
  g_assert_nonnull(strstr(squeezed->str, step_field));

  /* The run goes on; a stop ends it as before. */
  g_subprocess_send_signal(child, SIGTERM);
  g_subprocess_wait(child, NULL, &error);
  g_assert_no_error(error);
  g_assert_cmpint(g_subprocess_get_exit_status(child), ==, 128 + SIGTERM);
  close(control[0]);
  tu_rm_rf(ws);
}

static void test_one_process(void)
{
  run_with_requests(1, FALSE);
}

static void test_two_ranks(void)
{
  run_with_requests(2, FALSE);
}

static void test_cohort_run(void)
{
  run_with_requests(2, TRUE);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  /* A run that never answers must not hang the suite. */
  alarm(400);
  /* The flood writer learns that the run is gone from EPIPE. */
  signal(SIGPIPE, SIG_IGN);
  g_test_add_func("/control/poll", test_poll);
  g_test_add_func("/control/poll-flood", test_poll_flood);
  g_test_add_func("/control/check-fd", test_check_fd);
  g_test_add_func("/control/garbage-flood", test_garbage_flood);
  g_test_add_func("/control/special-channels", test_special_channels);
  g_test_add_func("/control/one-process", test_one_process);
  g_test_add_func("/control/two-ranks", test_two_ranks);
  g_test_add_func("/control/cohort-run", test_cohort_run);
  return g_test_run();
}
