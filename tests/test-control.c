/* The control channel (engine/progress/control.h, docs/progress-protocol.md): requests are read
 * without blocking, whole lines only, bad lines are reported and skipped; and end to end,
 * cohort-train (one process, two ranks in spawn mode, two under cohort-run) answers "sample" and
 * "save" at the next step with events that say "requested", the checkpoint being a real one at that
 * step. */
#include <gio/gunixinputstream.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "engine/progress/control.h"
#include "tests/test-util.h"
#include "tests/train-run.h"

static char *read_file(const char *path)
{
  char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  return text;
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
  g_autoptr(CohortControl) c = cohort_control_new(p[0]);

  /* Nothing yet: no blocking, no request. */
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);
  /* Half a line is not a request until its newline comes. */
  g_assert_cmpint(write(p[1], "sam", 3), ==, 3);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);
  g_assert_cmpint(write(p[1], "ple\n save \n", 11), ==, 11);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==,
                   COHORT_CONTROL_SAMPLE | COHORT_CONTROL_SAVE);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);

  /* A word that is no request, and a line past the limit, are skipped with a warning. */
  g_autofree char *longline = g_strnfill(COHORT_CONTROL_MAX_LINE + 40, 'x');
  g_autofree char *junk = g_strdup_printf("bogus\n%s\nsample\n", longline);
  g_assert_cmpint(write(p[1], junk, strlen(junk)), ==, (gssize)strlen(junk));
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, COHORT_CONTROL_SAMPLE);
  g_autofree char *events = read_file(log);
  g_assert_nonnull(strstr(events, "control channel: \\\"bogus\\\" is not a request"));
  g_assert_nonnull(strstr(events, "a line longer than 256 bytes was skipped"));

  /* The writer went away: no more requests, and no error. */
  g_assert_cmpint(write(p[1], "save\n", 5), ==, 5);
  close(p[1]);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, COHORT_CONTROL_SAVE);
  g_assert_cmpuint(cohort_control_poll(c, progress), ==, 0);
  close(p[0]);
  tu_rm_rf(dir);
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

/* A failed assertion ends this test: the run it started ends with it. */
static void end_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGTERM);
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
  alarm(240);
  g_test_add_func("/control/poll", test_poll);
  g_test_add_func("/control/one-process", test_one_process);
  g_test_add_func("/control/two-ranks", test_two_ranks);
  g_test_add_func("/control/cohort-run", test_cohort_run);
  return g_test_run();
}
