/* The launcher with a stand-in worker (tests/dist-worker.c): torchrun's environment, the
 * progress fd, the first-failure report (also with a stopped worker), restarts, SIGTERM/SIGKILL to
 * the launcher leaving no process behind, spawn mode, agreement with real torchrun when installed.
 * The printed commands are tested in test-launch-plan and test-commands-run. */
#include "engine/distributed/env.h"
#include "engine/distributed/launcher.h"
#include "engine/distributed/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <glib/gstdio.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char *worker_path(void)
{
  return g_test_build_filename(G_TEST_BUILT, "dist-worker", NULL);
}

static char *make_outdir(void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp("cohort-launcher-XXXXXX", &error);
  g_assert_no_error(error);
  return dir;
}

static void rm_rf(const char *dir)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  const char *name;
  while (d != NULL && (name = g_dir_read_name(d)) != NULL) {
    g_autofree char *p = g_build_filename(dir, name, NULL);
    if (g_file_test(p, G_FILE_TEST_IS_DIR))
      rm_rf(p);
    else
      g_unlink(p);
  }
  g_rmdir(dir);
}

/* The worker's env file as an environ array (NULL when absent). */
static GStrv read_env(const char *dir, int rank, int attempt)
{
  g_autofree char *p = g_strdup_printf("%s/rank-%d-attempt-%d.env", dir, rank, attempt);
  g_autofree char *text = NULL;
  if (!g_file_get_contents(p, &text, NULL, NULL))
    return NULL;
  g_strchomp(text);
  return g_strsplit(text, "\n", -1);
}

static const char *get(GStrv env, const char *key)
{
  return g_environ_getenv(env, key);
}

static CohortLaunchOptions *options(const char *outdir, int nproc)
{
  CohortLaunchOptions *o = cohort_launch_options_new();
  o->nproc_per_node = nproc;
  o->grace_period = 2;
  o->quiet = TRUE;
  g_autofree char *w = worker_path();
  const char *argv[] = {w, outdir, NULL};
  o->argv = g_strdupv((char **)argv);
  return o;
}

static void assert_gone(GArray *pids)
{
  for (guint i = 0; i < pids->len; i++) {
    GPid pid = g_array_index(pids, GPid, i);
    g_assert_cmpint(kill(pid, 0), ==, -1);
    g_assert_cmpint(errno, ==, ESRCH);
  }
}

static void test_env_contract(void)
{
  g_autofree char *dir = make_outdir();
  g_autoptr(CohortLaunchOptions) o = options(dir, 2);
  o->run_id = g_strdup("job-17");
  o->hold_port = TRUE;
  int p[2];
  g_assert_cmpint(pipe(p), ==, 0);
  o->progress_fd = p[1];
  g_unsetenv("OMP_NUM_THREADS");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, &error);
  g_setenv("OMP_NUM_THREADS", "1", TRUE);
  g_assert_no_error(error);
  g_assert_true(r->success);
  g_assert_cmpint(cohort_launch_exit_status(r), ==, 0);
  close(p[1]);
  char buf[512] = {0};
  gssize n = read(p[0], buf, sizeof buf - 1);
  close(p[0]);
  /* exactly one line, from rank 0 */
  g_assert_cmpstr(buf, ==, "{\"event\":\"hello\",\"rank\":0}\n");
  (void)n;

  g_auto(GStrv) e0 = read_env(dir, 0, 0);
  g_auto(GStrv) e1 = read_env(dir, 1, 0);
  g_assert_nonnull(e0);
  g_assert_nonnull(e1);
  GStrv envs[2] = {e0, e1};
  for (int r = 0; r < 2; r++) {
    g_autofree char *rs = g_strdup_printf("%d", r);
    GStrv e = envs[r];
    g_assert_cmpstr(get(e, "RANK"), ==, rs);
    g_assert_cmpstr(get(e, "LOCAL_RANK"), ==, rs);
    g_assert_cmpstr(get(e, "ROLE_RANK"), ==, rs);
    g_assert_cmpstr(get(e, "WORLD_SIZE"), ==, "2");
    g_assert_cmpstr(get(e, "LOCAL_WORLD_SIZE"), ==, "2");
    g_assert_cmpstr(get(e, "ROLE_WORLD_SIZE"), ==, "2");
    g_assert_cmpstr(get(e, "GROUP_RANK"), ==, "0");
    g_assert_cmpstr(get(e, "GROUP_WORLD_SIZE"), ==, "1");
    g_assert_cmpstr(get(e, "ROLE_NAME"), ==, "default");
    g_assert_cmpstr(get(e, "MASTER_ADDR"), ==, "127.0.0.1");
    g_assert_cmpstr(get(e, "TORCHELASTIC_RESTART_COUNT"), ==, "0");
    g_assert_cmpstr(get(e, "TORCHELASTIC_MAX_RESTARTS"), ==, "0");
    g_assert_cmpstr(get(e, "TORCHELASTIC_RUN_ID"), ==, "job-17");
    g_assert_cmpstr(get(e, "OMP_NUM_THREADS"), ==, "1");
    g_assert_cmpint(atoi(get(e, "MASTER_PORT")), >, 0);
    /* Global rank 0 alone gets the store's sockets the launcher holds (not inherited by this
     * test, so left out of the discovery below). */
    if (r == 0)
      g_assert_nonnull(get(e, "COHORT_STORE_FDS"));
    else
      g_assert_null(get(e, "COHORT_STORE_FDS"));
    e = g_environ_unsetenv(e, "COHORT_STORE_FDS");
    /* and rank discovery reads it back */
    g_autoptr(GError) err = NULL;
    g_autoptr(CohortDistEnv) d = cohort_dist_env_from_environ((const char *const *)e, &err);
    g_assert_no_error(err);
    g_assert_cmpint(d->rank, ==, r);
    g_assert_cmpint(d->world_size, ==, 2);
    g_assert_cmpstr(d->run_id, ==, "job-17");
  }
  g_assert_cmpstr(get(e0, "MASTER_PORT"), ==, get(e1, "MASTER_PORT"));
  g_autofree char *want_argv = g_strdup_printf("--progress-fd %d", p[1]);
  g_assert_cmpstr(get(e0, "ARGV"), ==, want_argv);
  g_assert_cmpstr(get(e1, "ARGV"), ==, "");
  rm_rf(dir);
}

static void run_failure(const char *how, const char *want_words)
{
  g_autofree char *dir = make_outdir();
  g_autoptr(CohortLaunchOptions) o = options(dir, 3);
  const char *extra[] = {"DIST_WORKER_MODE=fail", "DIST_WORKER_FAIL_RANK=1", how, NULL};
  o->extra_env = g_strdupv((char **)extra);
  g_autoptr(GError) error = NULL;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, &error);
  gint64 took = g_get_monotonic_time() - t0;
  g_assert_no_error(error);
  g_assert_false(r->success);
  g_assert_cmpint(cohort_launch_exit_status(r), ==, 1);
  g_assert_cmpint(r->failed_rank, ==, 1);
  g_test_message("report:\n%s", r->failure);
  g_auto(GStrv) words = g_strsplit(want_words, "|", -1);
  for (int i = 0; words[i] != NULL; i++)
    if (strstr(r->failure, words[i]) == NULL)
      g_error("the report lacks \"%s\":\n%s", words[i], r->failure);
  /* the others were stopped at once, not left to run their 30 s */
  g_assert_cmpint(took, <, 10 * G_USEC_PER_SEC);
  assert_gone(r->last_pids);
  rm_rf(dir);
}

static void test_failure_exit(void)
{
  run_failure("DIST_WORKER_FAIL_HOW=exit",
              "rank 1 (local rank 1|exited with code 3|[rank 1]: about to fail|something went");
}

static void test_failure_signal(void)
{
  run_failure("DIST_WORKER_FAIL_HOW=segv", "rank 1|killed by SIGSEGV|about to fail");
}

/* Issue 33: rank 1 fails while rank 0 is stopped (SIGSTOP). SIGTERM alone stays pending in a
 * stopped process, so the group waited the whole grace period for SIGKILL; the launcher
 * continues it, and the group ends at once. */
static void test_failure_stopped_worker(void)
{
  g_autofree char *dir = make_outdir();
  g_autoptr(CohortLaunchOptions) o = options(dir, 2);
  o->grace_period = 30;
  const char *extra[] = {"DIST_WORKER_MODE=fail", "DIST_WORKER_FAIL_RANK=1",
                         "DIST_WORKER_STOPPED_RANK=0", NULL};
  o->extra_env = g_strdupv((char **)extra);
  g_autoptr(GError) error = NULL;
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, &error);
  double took = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  g_assert_no_error(error);
  g_test_message("the group ended after %.2f s (grace period 30 s)", took);
  g_assert_false(r->success);
  g_assert_cmpint(r->failed_rank, ==, 1);
  g_assert_cmpfloat(took, <, 10);
  assert_gone(r->last_pids);
  rm_rf(dir);
}

static void test_restart(void)
{
  g_autofree char *dir = make_outdir();
  g_autoptr(CohortLaunchOptions) o = options(dir, 2);
  o->max_restarts = 2;
  const char *extra[] = {"DIST_WORKER_MODE=fail", "DIST_WORKER_FAIL_RANK=1",
                         "DIST_WORKER_FAIL_ONCE=1", NULL};
  o->extra_env = g_strdupv((char **)extra);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, &error);
  g_assert_no_error(error);
  g_assert_true(r->success);
  g_assert_cmpint(r->restarts, ==, 1);
  g_assert_cmpint(r->failed_rank, ==, 1); /* the failure of attempt 0 stays on record */
  for (int rank = 0; rank < 2; rank++) {
    g_auto(GStrv) e = read_env(dir, rank, 1);
    g_assert_nonnull(e);
    g_assert_cmpstr(get(e, "TORCHELASTIC_RESTART_COUNT"), ==, "1");
    g_assert_cmpstr(get(e, "TORCHELASTIC_MAX_RESTARTS"), ==, "2");
    g_assert_cmpstr(get(e, "ARGV"), ==, "--resume auto");
  }
  g_auto(GStrv) first = read_env(dir, 0, 0);
  g_assert_cmpstr(get(first, "ARGV"), ==, "");
  rm_rf(dir);

  /* a failure on every attempt: gives up after max_restarts */
  g_autofree char *dir2 = make_outdir();
  g_autoptr(CohortLaunchOptions) o2 = options(dir2, 2);
  o2->max_restarts = 1;
  const char *extra2[] = {"DIST_WORKER_MODE=fail", "DIST_WORKER_FAIL_RANK=0", NULL};
  o2->extra_env = g_strdupv((char **)extra2);
  g_autoptr(CohortLaunchResult) r2 = cohort_launch_run(o2, &error);
  g_assert_no_error(error);
  g_assert_false(r2->success);
  g_assert_cmpint(r2->restarts, ==, 1);
  g_auto(GStrv) last = read_env(dir2, 0, 1);
  g_auto(GStrv) none = read_env(dir2, 0, 2);
  g_assert_nonnull(last);
  g_assert_null(none);
  rm_rf(dir2);
}

/* Runs a launcher in a child, signals it once both workers are up, and checks that nothing
 * is left. */
static void run_signal_launcher(int sig)
{
  g_autofree char *dir = make_outdir();
  g_autoptr(CohortLaunchOptions) o = options(dir, 2);
  o->grace_period = 1;
  const char *extra[] = {"DIST_WORKER_MODE=hang", "DIST_WORKER_STUBBORN_RANK=1", NULL};
  o->extra_env = g_strdupv((char **)extra);
  pid_t launcher = fork();
  g_assert_cmpint(launcher, >=, 0);
  if (launcher == 0) {
    g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, NULL);
    _exit(r ? cohort_launch_exit_status(r) : 99);
  }
  GPid pids[2] = {0, 0};
  gint64 deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;
  while ((pids[0] == 0 || pids[1] == 0) && g_get_monotonic_time() < deadline) {
    for (int r = 0; r < 2; r++) {
      g_auto(GStrv) e = read_env(dir, r, 0);
      if (e != NULL)
        pids[r] = atoi(get(e, "PID"));
    }
    g_usleep(20000);
  }
  g_assert_cmpint(pids[0], >, 0);
  g_assert_cmpint(pids[1], >, 0);
  g_assert_cmpint(kill(launcher, sig), ==, 0);
  int status = 0;
  g_assert_cmpint(waitpid(launcher, &status, 0), ==, launcher);
  if (sig != SIGKILL) {
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 128 + sig);
  }
  /* The workers are gone; after a SIGKILLed launcher they die by PR_SET_PDEATHSIG and are
   * reaped by whoever adopted them, so allow a moment and count a zombie as gone. */
  deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
  for (int r = 0; r < 2; r++) {
    for (;;) {
      g_autofree char *stat_path = g_strdup_printf("/proc/%d/stat", pids[r]);
      g_autofree char *stat = NULL;
      gboolean alive = kill(pids[r], 0) == 0;
      if (alive && g_file_get_contents(stat_path, &stat, NULL, NULL)) {
        const char *close_paren = strrchr(stat, ')');
        if (close_paren != NULL && close_paren[2] == 'Z')
          alive = FALSE;
      }
      if (!alive)
        break;
      if (g_get_monotonic_time() > deadline)
        g_error("worker %d (pid %d) outlived the launcher", r, pids[r]);
      g_usleep(20000);
    }
  }
  rm_rf(dir);
}

static void test_sigterm_to_launcher(void)
{
  run_signal_launcher(SIGTERM);
}

static void test_sigint_to_launcher(void)
{
  run_signal_launcher(SIGINT);
}

static void test_sigkill_to_launcher(void)
{
  run_signal_launcher(SIGKILL);
}

static void test_spawn(void)
{
  g_autofree char *dir = make_outdir();
  g_autofree char *w = worker_path();
  const char *argv[] = {w, dir, NULL};
  g_autoptr(GError) error = NULL;
  g_assert_cmpint(cohort_launch_spawn(argv, 3, -1, &error), ==, 0);
  g_assert_no_error(error);
  for (int r = 0; r < 3; r++) {
    g_auto(GStrv) e = read_env(dir, r, 0);
    g_assert_nonnull(e);
    g_assert_cmpstr(get(e, "WORLD_SIZE"), ==, "3");
  }
  const char *bad[] = {"/nonexistent/program", NULL};
  g_assert_cmpint(cohort_launch_spawn(bad, 2, -1, &error), ==, -1);
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID);
  g_assert_nonnull(strstr(error->message, "/nonexistent/program"));
  rm_rf(dir);
}

/* Real torchrun (Debian's torch 1.13 needs -r 1 -t 1 to start) gives the same contract. */
static void test_torchrun_agrees(void)
{
  if (!g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE)) {
    g_test_skip("no /usr/bin/python3");
    return;
  }
  const char *probe[] = {"/usr/bin/python3", "-c", "import torch.distributed.run", NULL};
  int st = 1;
  if (!g_spawn_sync(NULL, (char **)probe, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL, NULL,
                    &st, NULL) ||
      !g_spawn_check_wait_status(st, NULL)) {
    g_test_skip("python3-torch is not installed");
    return;
  }
  g_autofree char *dir = make_outdir();
  g_autofree char *logs = g_build_filename(dir, "logs", NULL);
  g_autofree char *w = worker_path();
  const char *argv[] = {"/usr/bin/python3",
                        "-m",
                        "torch.distributed.run",
                        "-r",
                        "1",
                        "-t",
                        "1",
                        "--log_dir",
                        logs,
                        "--no_python",
                        "--standalone",
                        "--nproc_per_node",
                        "2",
                        w,
                        dir,
                        NULL};
  g_auto(GStrv) envp = g_environ_unsetenv(g_get_environ(), "OMP_NUM_THREADS");
  g_autoptr(GError) error = NULL;
  g_spawn_sync(NULL, (char **)argv, envp, G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
               NULL, NULL, NULL, NULL, &st, &error);
  g_assert_no_error(error);
  g_assert_true(g_spawn_check_wait_status(st, NULL));

  /* ours, on the same command */
  g_autofree char *ours = make_outdir();
  g_autoptr(CohortLaunchOptions) o = options(ours, 2);
  g_unsetenv("OMP_NUM_THREADS");
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, &error);
  g_setenv("OMP_NUM_THREADS", "1", TRUE);
  g_assert_no_error(error);
  g_assert_true(r->success);

  const char *same[] = {"RANK",
                        "LOCAL_RANK",
                        "WORLD_SIZE",
                        "LOCAL_WORLD_SIZE",
                        "GROUP_RANK",
                        "GROUP_WORLD_SIZE",
                        "ROLE_RANK",
                        "ROLE_WORLD_SIZE",
                        "ROLE_NAME",
                        "TORCHELASTIC_RESTART_COUNT",
                        "TORCHELASTIC_MAX_RESTARTS",
                        "OMP_NUM_THREADS",
                        NULL};
  const char *present[] = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", NULL};
  for (int rank = 0; rank < 2; rank++) {
    g_auto(GStrv) t = read_env(dir, rank, 0);
    g_auto(GStrv) c = read_env(ours, rank, 0);
    g_assert_nonnull(t);
    g_assert_nonnull(c);
    for (int i = 0; same[i] != NULL; i++) {
      g_test_message("rank %d %s: torchrun %s, cohort %s", rank, same[i], get(t, same[i]),
                     get(c, same[i]));
      g_assert_cmpstr(get(t, same[i]), ==, get(c, same[i]));
    }
    for (int i = 0; present[i] != NULL; i++) {
      g_assert_nonnull(get(t, present[i]));
      g_assert_nonnull(get(c, present[i]));
    }
    g_autoptr(CohortDistEnv) d = cohort_dist_env_from_environ((const char *const *)t, &error);
    g_assert_no_error(error);
    g_assert_cmpint(d->rank, ==, rank);
    g_assert_cmpstr(d->source, ==, "torchrun");
  }
  rm_rf(dir);
  rm_rf(ours);
}

static const char *secret_of(GStrv env)
{
  const char *v = get(env, "COHORT_JOB_TOKEN");
  g_assert_nonnull(v);
  return v;
}

static gboolean is_fresh_secret(const char *v)
{
  return strlen(v) == 32 && strspn(v, "0123456789abcdef") == 32;
}

/* Runs the cohort-run program with dist-worker on 2 ranks; returns its exit status and
 * stderr. */
static int run_program(const char *dir, const char *const *flags, char **err)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)g_getenv("COHORT_RUN"));
  for (int i = 0; flags[i] != NULL; i++)
    g_ptr_array_add(argv, (gpointer)flags[i]);
  g_autofree char *w = worker_path();
  g_ptr_array_add(argv, w);
  g_ptr_array_add(argv, (gpointer)dir);
  g_ptr_array_add(argv, NULL);
  int st = -1;
  g_autoptr(GError) error = NULL;
  g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, err,
               &st, &error);
  g_assert_no_error(error);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Spawn mode and cohort-run give the workers a random COHORT_JOB_TOKEN per job, the same on
 * every rank and across restarts, in their environment and never their argv or the
 * launcher's output; a given one is used as it is, a weak one refused; several nodes get none
 * unless the user gives it. */
static void test_job_secret(void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *d1 = make_outdir(), *d2 = make_outdir();
  g_autofree char *w = worker_path();
  const char *argv1[] = {w, d1, NULL}, *argv2[] = {w, d2, NULL};
  g_assert_cmpint(cohort_launch_spawn(argv1, 2, -1, &error), ==, 0);
  g_assert_cmpint(cohort_launch_spawn(argv2, 2, -1, &error), ==, 0);
  g_auto(GStrv) a0 = read_env(d1, 0, 0), a1 = read_env(d1, 1, 0), b0 = read_env(d2, 0, 0);
  g_assert_true(is_fresh_secret(secret_of(a0)));
  g_assert_cmpstr(secret_of(a0), ==, secret_of(a1));
  g_assert_cmpstr(secret_of(a0), !=, secret_of(b0));
  g_assert_null(strstr(get(a0, "ARGV"), secret_of(a0)));
  rm_rf(d1);
  rm_rf(d2);

  /* the program, twice: different secrets, none in its output or the workers' argv */
  g_autofree char *d3 = make_outdir(), *d4 = make_outdir();
  g_autofree char *e3 = NULL, *e4 = NULL;
  const char *flags[] = {"--standalone", "--nproc-per-node=2", NULL};
  g_assert_cmpint(run_program(d3, flags, &e3), ==, 0);
  g_assert_cmpint(run_program(d4, flags, &e4), ==, 0);
  g_auto(GStrv) c0 = read_env(d3, 0, 0), c1 = read_env(d3, 1, 0), f0 = read_env(d4, 0, 0);
  g_assert_cmpstr(secret_of(c0), ==, secret_of(c1));
  g_assert_cmpstr(secret_of(c0), !=, secret_of(f0));
  g_assert_null(strstr(e3, secret_of(c0)));
  g_assert_null(strstr(get(c1, "ARGV"), secret_of(c0)));
  rm_rf(d3);
  rm_rf(d4);

  /* restarts keep the job's secret (the token carries the attempt) */
  g_autofree char *d5 = make_outdir();
  g_autoptr(CohortLaunchOptions) o = options(d5, 2);
  o->max_restarts = 1;
  const char *fail_once[] = {"DIST_WORKER_MODE=fail", "DIST_WORKER_FAIL_RANK=1",
                             "DIST_WORKER_FAIL_ONCE=1", NULL};
  o->extra_env = g_strdupv((char **)fail_once);
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, &error);
  g_assert_no_error(error);
  g_assert_true(r->success);
  g_auto(GStrv) first = read_env(d5, 0, 0), second = read_env(d5, 0, 1);
  g_assert_cmpstr(secret_of(first), ==, secret_of(second));
  rm_rf(d5);

  /* given: passed on as it is; too short: refused without echoing it */
  g_autofree char *d6 = make_outdir();
  g_autoptr(CohortLaunchOptions) given = options(d6, 2);
  const char *mine[] = {"COHORT_JOB_TOKEN=0123456789abcdefXYZ", NULL};
  given->extra_env = g_strdupv((char **)mine);
  g_autoptr(CohortLaunchResult) rg = cohort_launch_run(given, &error);
  g_assert_no_error(error);
  g_auto(GStrv) g0 = read_env(d6, 0, 0);
  g_assert_cmpstr(secret_of(g0), ==, "0123456789abcdefXYZ");
  const char *weak[] = {"COHORT_JOB_TOKEN=short", NULL};
  g_strfreev(given->extra_env);
  given->extra_env = g_strdupv((char **)weak);
  g_assert_null(cohort_launch_run(given, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
  g_assert_null(strstr(error->message, "short"));
  g_clear_error(&error);
  rm_rf(d6);

  /* several nodes: nothing drawn (node 1's launcher: node 0 would host the store) */
  g_autofree char *d7 = make_outdir();
  g_autoptr(CohortLaunchOptions) multi = options(d7, 1);
  multi->nnodes = 2;
  multi->node_rank = 1;
  multi->master_port = cohort_store_find_free_port(0);
  g_autoptr(CohortLaunchResult) rm = cohort_launch_run(multi, &error);
  g_assert_no_error(error);
  g_auto(GStrv) m1 = read_env(d7, 1, 0);
  g_assert_nonnull(m1);
  g_assert_null(get(m1, "COHORT_JOB_TOKEN"));
  rm_rf(d7);
}

/* A taken store port fails at once, naming the port, without starting a worker and without
 * the restarts --max-restarts allows. */
static void test_port_taken(void)
{
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  g_assert_cmpint(bind(sock, (struct sockaddr *)&addr, sizeof addr), ==, 0);
  g_assert_cmpint(listen(sock, 1), ==, 0);
  socklen_t len = sizeof addr;
  getsockname(sock, (struct sockaddr *)&addr, &len);
  int port = ntohs(addr.sin_port);
  g_autofree char *dir = make_outdir();
  g_autofree char *port_flag = g_strdup_printf("--master-port=%d", port);
  const char *flags[] = {"--nproc-per-node=2", "--max-restarts=3", port_flag, NULL};
  g_autofree char *err = NULL;
  gint64 t0 = g_get_monotonic_time();
  int status = run_program(dir, flags, &err);
  double secs = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("exit %d after %.2f s:\n%s", status, secs, err);
  g_assert_cmpint(status, ==, 1);
  g_assert_cmpfloat(secs, <, 5);
  g_autofree char *port_text = g_strdup_printf("port %d", port);
  g_assert_nonnull(strstr(err, port_text));
  g_assert_null(strstr(err, "restarting"));
  g_assert_true(strstr(err, "cannot host") == g_strrstr(err, "cannot host")); /* one attempt */
  g_auto(GStrv) none = read_env(dir, 0, 0);
  g_assert_null(none);

  g_autoptr(GError) error = NULL;
  g_autoptr(CohortLaunchOptions) o = options(dir, 2);
  o->master_port = port;
  o->max_restarts = 3;
  g_assert_null(cohort_launch_run(o, &error));
  g_assert_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ADDR_IN_USE);
  close(sock);
  rm_rf(dir);
}

/* A job's launcher holds the store's port from its check until the job ends (rank 0 serves
 * on the held sockets; --hold-port, the default for cohort-train), so a second job on the same
 * port is refused at once, even while the first job's rank 0 has not bound anything (the
 * stand-in workers never do); and each job on one node gets a random run id of its own, so
 * two jobs with one COHORT_JOB_TOKEN still have different store tokens. */
static void test_holds_port(void)
{
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  g_assert_cmpint(bind(sock, (struct sockaddr *)&addr, sizeof addr), ==, 0);
  socklen_t len = sizeof addr;
  getsockname(sock, (struct sockaddr *)&addr, &len);
  int port = ntohs(addr.sin_port);
  close(sock);
  g_autofree char *dir_a = make_outdir(), *dir_b = make_outdir();
  g_autofree char *port_flag = g_strdup_printf("--master-port=%d", port);
  g_autofree char *w = worker_path();
  const char *argv_a[] = {
      g_getenv("COHORT_RUN"), "--nproc-per-node=2", "--hold-port", port_flag, w, dir_a, NULL};
  g_auto(GStrv) envp = g_get_environ();
  envp = g_environ_setenv(envp, "DIST_WORKER_MODE", "hang", TRUE);
  envp = g_environ_setenv(envp, "COHORT_JOB_TOKEN", "0123456789abcdef0123", TRUE);
  GPid a_pid;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_spawn_async(NULL, (char **)argv_a, envp,
                              G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL |
                                  G_SPAWN_STDERR_TO_DEV_NULL,
                              NULL, NULL, &a_pid, &error));
  /* Both of A's workers have started: the port is A's for the whole job. */
  g_auto(GStrv) a0 = NULL;
  g_auto(GStrv) a1 = NULL;
  for (int i = 0; i < 500 && (!a0 || !a1); i++) {
    g_usleep(20000);
    if (!a0)
      a0 = read_env(dir_a, 0, 0);
    if (!a1)
      a1 = read_env(dir_a, 1, 0);
  }
  g_assert_nonnull(a0);
  g_assert_nonnull(a1);
  const char *flags[] = {"--nproc-per-node=2", port_flag, NULL};
  g_autofree char *err = NULL;
  gint64 t0 = g_get_monotonic_time();
  int status = run_program(dir_b, flags, &err);
  double secs = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("second job: exit %d after %.2f s: %s", status, secs, err);
  kill(a_pid, SIGTERM);
  int a_status;
  g_assert_cmpint(waitpid(a_pid, &a_status, 0), ==, a_pid);
  g_spawn_close_pid(a_pid);
  g_assert_cmpint(status, ==, 1);
  g_assert_cmpfloat(secs, <, 5);
  g_autofree char *port_text = g_strdup_printf("port %d", port);
  g_assert_nonnull(strstr(err, port_text));
  g_auto(GStrv) b0 = read_env(dir_b, 0, 0);
  g_assert_null(b0);
  /* A's run id: random, not "none", the same on both ranks. */
  const char *run_id = get(a0, "TORCHELASTIC_RUN_ID");
  g_assert_nonnull(run_id);
  g_assert_cmpstr(run_id, !=, "none");
  g_assert_cmpuint(strlen(run_id), >=, 32);
  g_assert_cmpstr(get(a1, "TORCHELASTIC_RUN_ID"), ==, run_id);
  rm_rf(dir_a);
  rm_rf(dir_b);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  /* The secret tests expect the launcher to draw one. */
  g_unsetenv("COHORT_JOB_TOKEN");
  g_test_add_func("/launcher/env-contract", test_env_contract);
  g_test_add_func("/launcher/failure-exit", test_failure_exit);
  g_test_add_func("/launcher/failure-signal", test_failure_signal);
  g_test_add_func("/launcher/failure-stopped-worker", test_failure_stopped_worker);
  g_test_add_func("/launcher/restart", test_restart);
  g_test_add_func("/launcher/sigterm", test_sigterm_to_launcher);
  g_test_add_func("/launcher/sigint", test_sigint_to_launcher);
  g_test_add_func("/launcher/sigkill", test_sigkill_to_launcher);
  g_test_add_func("/launcher/job-secret", test_job_secret);
  g_test_add_func("/launcher/port-taken", test_port_taken);
  g_test_add_func("/launcher/holds-port", test_holds_port);
  g_test_add_func("/launcher/spawn", test_spawn);
  g_test_add_func("/launcher/torchrun-agrees", test_torchrun_agrees);
  return g_test_run();
}
