/* The rendezvous store and the launcher with real cohort-train jobs (suite dist, loopback
 * only):
 *  - a 2-rank spawn-mode job survives abuse of rank 0's store while it runs (a flood of
 *    connect/close cycles, idle connections past the cap, wrong, missing and predictable
 *    tokens, an oversized value, a deeply nested value) and ends with the weights of a job
 *    left alone; rank 0's threads and descriptors stay bounded; its store is not reachable on
 *    the host's network address; the job's secret is in no worker's command line nor in any
 *    output;
 *  - ranks 2 and 3 of a 4-rank job never start: the others name them;
 *  - rank 0 warns when its store is on a network address without a job secret;
 *  - SIGTERM to one worker of a cohort-run group fails the group (or restarts it with
 *    --max-restarts), SIGTERM to cohort-run exits 143, SIGINT to cohort-train exits 130;
 *  - two jobs on one port with one secret: the second launcher is refused, a stray rank of
 *    another job is told the store belongs to another job, the first job is unharmed;
 *  - rank 0 stopped (SIGSTOP) while training and while probing: the group fails within
 *    timeout_s + the launcher's grace period, rank 1 saying that rank 0 (the store) does not
 *    answer; rank 1 stopped: rank 0's hang reports give its record's age and call its silent
 *    heartbeat out. */
#include <fcntl.h>
#include <ifaddrs.h>
#include <signal.h>
#include <sys/prctl.h>

#include <gio/gio.h>

#include "engine/distributed/store.h"
#include "store-raw.h"
#include "test-util.h"

static const char *const base_sets[] = {
    "n_layer=2",      "n_head=2",     "n_embd=32",    "seq_len=32",
    "warmup_steps=1", "eval_every=0", "eval_steps=2", "sample_every=0",
    "save_every=0",   "threads=1",    "batch_size=2", NULL,
};

static void die_with_parent(gpointer data)
{
  (void)data;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static const char *program(const char *var)
{
  const char *p = g_getenv(var);
  g_assert_nonnull(p);
  return p;
}

/* Starts `pre` (the launcher and its flags, may be NULL) + cohort-train + `flags` (may be
 * NULL) + the small config in `ws` + `extra` sets, with fd 3 writing to `events` (may be
 * NULL) and the `env` pairs (may be NULL) in its environment, COHORT_JOB_TOKEN unset. */
static GSubprocess *start_job(const char *const *pre, const char *const *flags, const char *ws,
                              const char *events, const char *const *extra, const char *const *env)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, die_with_parent, NULL, NULL);
  g_subprocess_launcher_unsetenv(l, "COHORT_JOB_TOKEN");
  for (guint i = 0; env && env[i]; i += 2)
    g_subprocess_launcher_setenv(l, env[i], env[i + 1], TRUE);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; pre && pre[i]; i++)
    g_ptr_array_add(argv, g_strdup(pre[i]));
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  for (guint i = 0; flags && flags[i]; i++)
    g_ptr_array_add(argv, g_strdup(flags[i]));
  if (events != NULL) {
    int fd = open(events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_subprocess_launcher_take_fd(l, fd, 3);
  }
  for (guint i = 0; base_sets[i]; i++) {
    g_ptr_array_add(argv, g_strdup("--set"));
    g_ptr_array_add(argv, g_strdup(base_sets[i]));
  }
  for (guint i = 0; extra && extra[i]; i++) {
    g_ptr_array_add(argv, g_strdup("--set"));
    g_ptr_array_add(argv, g_strdup(extra[i]));
  }
  g_ptr_array_add(argv, g_strdup("--set"));
  g_ptr_array_add(argv, g_strdup_printf("workspace_dir=%s", ws));
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  GSubprocess *p = g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  return p;
}

static char *finish(GSubprocess *p, int *status)
{
  char *err = NULL;
  g_autoptr(GError) error = NULL;
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, &err, &error);
  g_assert_no_error(error);
  *status = g_subprocess_get_if_signaled(p) ? 128 + g_subprocess_get_term_sig(p)
                                            : g_subprocess_get_exit_status(p);
  return err;
}

static void wait_for_text(const char *path, const char *needle)
{
  gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
  for (;;) {
    g_autofree char *text = NULL;
    g_file_get_contents(path, &text, NULL, NULL);
    if (text && strstr(text, needle))
      return;
    g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    g_usleep(20000);
  }
}

/* A NUL-separated /proc file as a string vector. */
static GStrv proc_strings(int pid, const char *what)
{
  g_autofree char *path = g_strdup_printf("/proc/%d/%s", pid, what);
  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(path, &data, &len, NULL));
  GPtrArray *out = g_ptr_array_new();
  for (gsize i = 0; i < len; i += strlen(data + i) + 1)
    g_ptr_array_add(out, g_strdup(data + i));
  g_ptr_array_add(out, NULL);
  return (GStrv)g_ptr_array_free(out, FALSE);
}

/* The workers of launcher `pid`, indexed by RANK (world ranks 0 and 1); FALSE while they are
 * not both there (a worker between fork and exec has the launcher's environment). */
static gboolean look_for_ranks(GPid pid, int ranks[2])
{
  ranks[0] = ranks[1] = -1;
  g_autofree char *path = g_strdup_printf("/proc/%d/task/%d/children", pid, pid);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_auto(GStrv) parts = g_strsplit(g_strstrip(text), " ", -1);
  for (guint i = 0; parts[i]; i++) {
    if (*parts[i] == '\0')
      continue;
    int child = atoi(parts[i]);
    g_auto(GStrv) env = proc_strings(child, "environ");
    const char *rank = g_environ_getenv(env, "RANK");
    if (rank != NULL && atoi(rank) < 2)
      ranks[atoi(rank)] = child;
  }
  return ranks[0] > 0 && ranks[1] > 0;
}

static void find_ranks(GPid pid, int ranks[2])
{
  g_assert_true(look_for_ranks(pid, ranks));
}

static char *non_loopback_address(void)
{
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0)
    return NULL;
  char *found = NULL;
  for (struct ifaddrs *i = list; i != NULL && found == NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
      continue;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, host, sizeof host);
    if (!g_str_has_prefix(host, "127."))
      found = g_strdup(host);
  }
  freeifaddrs(list);
  return found;
}

/* Opens and closes `n` connections, a third of them with half a hello, a third with a wrong
 * token. */
static void flood(int port, int n)
{
  for (int i = 0; i < n; i++) {
    int fd = raw_open("127.0.0.1", port);
    g_assert_cmpint(fd, >=, 0);
    if (i % 3 == 1)
      g_assert_cmpint(write(fd, "CHST", 4), ==, 4);
    else if (i % 3 == 2)
      raw_hello(fd, "not the token", NULL);
    close(fd);
  }
}

/* Holds `n` idle connections: the store must close all but its pending cap at once (well
 * before its hello timeout), and rank 0 must not hold a descriptor per connection. */
static void idle_past_cap(int port, int rank0, guint fds0, int n)
{
  g_autofree int *fds = g_new(int, n);
  for (int i = 0; i < n; i++) {
    fds[i] = raw_open("127.0.0.1", port);
    g_assert_cmpint(fds[i], >=, 0);
  }
  g_usleep(300000); /* the store accepts them all */
  g_autofree char *fd_dir = g_strdup_printf("/proc/%d/fd", rank0);
  guint held = count_entries(fd_dir);
  int closed = 0;
  gint64 deadline = g_get_monotonic_time() + 1500000;
  for (int i = 0; i < n; i++)
    closed += closed_within(fds[i], (int)MAX(deadline - g_get_monotonic_time(), 0) / 1000);
  g_test_message("%d idle connections: %d closed by the store within 2 s; rank 0 held %u fds "
                 "(%u before)",
                 n, closed, held, fds0);
  g_assert_cmpint(closed, >=, n - 64);
  g_assert_cmpuint(held, <=, fds0 + 64 + 4);
  for (int i = 0; i < n; i++)
    close(fds[i]);
}

/* Wrong, missing, predictable tokens and the bare secret are refused; with the real token,
 * an oversized value is refused and a deeply nested one is only stored. */
static void bad_clients(int port, GStrv rank0_env)
{
  const char *secret = g_environ_getenv(rank0_env, "COHORT_JOB_TOKEN");
  const char *bad[] = {"wrong", "", "cohort/none/attempt-0", secret};
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    int fd = raw_open("127.0.0.1", port);
    g_autofree char *reason = NULL;
    g_assert_cmpint(raw_hello(fd, bad[i], &reason), ==, 2);
    g_assert_nonnull(strstr(reason, "token differs"));
    close(fd);
  }
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortDistEnv) env =
      cohort_dist_env_from_environ((const char *const *)rank0_env, &error);
  g_assert_no_error(error);
  g_autofree char *token = cohort_dist_job_token(env);
  int fd = raw_open("127.0.0.1", port);
  g_assert_cmpint(raw_hello(fd, token, NULL), ==, 0);
  guint8 hdr[16] = {1, 0, 0, 0, 0, 0, 0, 1};
  guint64 huge = GUINT64_TO_BE((guint64)COHORT_STORE_MAX_VALUE + 1);
  memcpy(hdr + 8, &huge, 8);
  g_assert_cmpint(write(fd, hdr, 16), ==, 16);
  g_assert_true(closed_within(fd, 3000));
  close(fd);
  g_autoptr(CohortStore) c = cohort_store_connect("127.0.0.1", port, token, 5, &error);
  g_assert_no_error(error);
  gsize depth = 1000000;
  g_autofree char *nested = g_malloc(depth);
  memset(nested, '[', depth);
  g_assert_true(cohort_store_set(c, "config/json/7", nested, depth, &error));
  g_assert_no_error(error);
}

/* The job secret, and the token derived from it, in none of `texts`. */
static void assert_secret_absent(GStrv rank0_env, const char *const *texts)
{
  const char *secret = g_environ_getenv(rank0_env, "COHORT_JOB_TOKEN");
  g_assert_nonnull(secret);
  g_assert_cmpuint(strlen(secret), ==, 32);
  g_autoptr(CohortDistEnv) env = cohort_dist_env_from_environ((const char *const *)rank0_env, NULL);
  g_autofree char *token = cohort_dist_job_token(env);
  for (guint i = 0; texts[i] != NULL; i++) {
    g_assert_null(strstr(texts[i], secret));
    g_assert_null(strstr(texts[i], token));
  }
}

static char *joined(GStrv v)
{
  return g_strjoinv(" ", v);
}

static const char *const abuse_sets[] = {"max_steps=40", "timeout_s=60", NULL};

/* No file under `dir` holds the job's secret or token. */
static void assert_files_free_of_secret(const char *dir, GStrv rank0_env)
{
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_assert_nonnull(d);
  const char *name;
  while ((name = g_dir_read_name(d)) != NULL) {
    g_autofree char *path = g_build_filename(dir, name, NULL);
    if (g_file_test(path, G_FILE_TEST_IS_DIR)) {
      assert_files_free_of_secret(path, rank0_env);
      continue;
    }
    g_autofree char *text = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(path, &text, &len, NULL));
    /* binary files too */
    const char *secret = g_environ_getenv(rank0_env, "COHORT_JOB_TOKEN");
    g_autoptr(CohortDistEnv) env =
        cohort_dist_env_from_environ((const char *const *)rank0_env, NULL);
    g_autofree char *token = cohort_dist_job_token(env);
    g_assert_null(memmem(text, len, secret, strlen(secret)));
    g_assert_null(memmem(text, len, token, strlen(token)));
  }
}

static const char *const spawn2[] = {"--nproc", "2", "--progress-fd", "3", NULL};

/* The weights a finished job left in `ws`, after checking it completed. */
static GArray *result_of(const char *ws, const char *events)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(events, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "\"status\":\"completed\""));
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  return tu_read_weights(path);
}

static void test_abuse_during_job(void)
{
  /* The same job left alone, for its result. */
  g_autofree char *ws_ref = tu_mkdtemp("abuse-ref");
  g_autofree char *ev_ref = g_build_filename(ws_ref, "progress.jsonl", NULL);
  g_autoptr(GSubprocess) ref = start_job(NULL, spawn2, ws_ref, ev_ref, abuse_sets, NULL);
  int st = -1;
  g_autofree char *err_ref = finish(ref, &st);
  g_assert_cmpint(st, ==, 0);
  g_autoptr(GArray) want = result_of(ws_ref, ev_ref);

  g_autofree char *ws = tu_mkdtemp("abuse");
  g_autofree char *ev = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GSubprocess) p = start_job(NULL, spawn2, ws, ev, abuse_sets, NULL);
  wait_for_text(ev, "\"step\":2,");
  int ranks[2];
  find_ranks(atoi(g_subprocess_get_identifier(p)), ranks);
  /* Rank 0's held store sockets (COHORT_STORE_FDS) are its own, not this test's. */
  g_auto(GStrv) env0 = g_environ_unsetenv(proc_strings(ranks[0], "environ"), "COHORT_STORE_FDS");
  int port = atoi(g_environ_getenv(env0, "MASTER_PORT"));
  /* Rank 1 paused: rank 0 waits in a collective, its store serving us, so the job is
   * certainly running throughout. */
  g_assert_cmpint(kill(ranks[1], SIGSTOP), ==, 0);
  g_autofree char *fd_dir = g_strdup_printf("/proc/%d/fd", ranks[0]);
  g_autofree char *task_dir = g_strdup_printf("/proc/%d/task", ranks[0]);
  guint fds0 = count_entries(fd_dir), tasks0 = count_entries(task_dir);

  g_autofree char *lan = non_loopback_address();
  if (lan != NULL) {
    g_assert_cmpint(raw_open(lan, port), ==, -1);
    g_assert_cmpint(errno, ==, ECONNREFUSED);
  } else {
    g_test_message("no address but loopback: the bind address is not checked");
  }
  gint64 t0 = g_get_monotonic_time();
  flood(port, 3000);
  g_test_message("3000 connect/close cycles in %.2f s", (g_get_monotonic_time() - t0) / 1e6);
  idle_past_cap(port, ranks[0], fds0, 200);
  bad_clients(port, env0);
  /* everything we opened is closed again, and no thread was added */
  gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
  while (count_entries(fd_dir) > fds0 && g_get_monotonic_time() < deadline)
    g_usleep(20000);
  g_test_message("rank 0: %u fds, %u threads (before: %u, %u)", count_entries(fd_dir),
                 count_entries(task_dir), fds0, tasks0);
  g_assert_cmpuint(count_entries(fd_dir), <=, fds0);
  g_assert_cmpuint(count_entries(task_dir), ==, tasks0);
  g_auto(GStrv) cmd0 = proc_strings(ranks[0], "cmdline");
  g_auto(GStrv) cmd1 = proc_strings(ranks[1], "cmdline");
  g_assert_cmpint(kill(ranks[1], SIGCONT), ==, 0);

  g_autofree char *err = finish(p, &st);
  g_test_message("job stderr:\n%s", err);
  g_assert_cmpint(st, ==, 0);
  g_autoptr(GArray) got = result_of(ws, ev);
  g_assert_cmpuint(got->len, ==, want->len);
  g_assert_cmpint(memcmp(got->data, want->data, got->len * sizeof(float)), ==, 0);
  g_autofree char *c0 = joined(cmd0), *c1 = joined(cmd1);
  g_autofree char *events = NULL;
  g_assert_true(g_file_get_contents(ev, &events, NULL, NULL));
  const char *texts[] = {c0, c1, err, events, NULL};
  assert_secret_absent(env0, texts);
  assert_files_free_of_secret(ws, env0); /* the workspace: events, checkpoints, logs */
  tu_rm_rf(ws_ref);
  tu_rm_rf(ws);
}

/* Starts rank `rank` of `world` by hand, with torchrun's variables, master `addr` and
 * `secret` (NULL = no COHORT_JOB_TOKEN), running `max_steps` with `timeout`. */
static GSubprocess *start_rank(int rank, int world, const char *addr, int port, const char *secret,
                               const char *ws, const char *max_steps)
{
  g_autofree char *r = g_strdup_printf("%d", rank), *w = g_strdup_printf("%d", world);
  g_autofree char *p = g_strdup_printf("%d", port);
  const char *env[] = {"RANK",
                       r,
                       "LOCAL_RANK",
                       r,
                       "WORLD_SIZE",
                       w,
                       "LOCAL_WORLD_SIZE",
                       w,
                       "MASTER_ADDR",
                       addr,
                       "MASTER_PORT",
                       p,
                       "TORCHELASTIC_RUN_ID",
                       "job-1",
                       secret ? "COHORT_JOB_TOKEN" : NULL,
                       secret,
                       NULL};
  const char *flags[] = {"--quiet", NULL};
  const char *extra[] = {max_steps, "timeout_s=3", NULL};
  return start_job(NULL, flags, ws, NULL, extra, env);
}

/* Rank 0 warns when its store listens on a network address and the token derives only from
 * job ids; not with a secret, nor on loopback. The secret never shows. */
static void test_exposed_warning(void)
{
  g_autofree char *lan = non_loopback_address();
  if (lan == NULL) {
    g_test_skip("this host has no address but loopback");
    return;
  }
  g_autofree char *secret = cohort_dist_new_secret(NULL);
  const struct {
    const char *addr, *secret;
    gboolean warns;
  } cases[] = {{lan, NULL, TRUE}, {lan, secret, FALSE}, {"127.0.0.1", NULL, FALSE}};
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *ws = tu_mkdtemp("exposed");
    int port = cohort_store_find_free_port(0);
    g_autoptr(GSubprocess) r0 =
        start_rank(0, 2, cases[i].addr, port, cases[i].secret, ws, "max_steps=2");
    g_autoptr(GSubprocess) r1 =
        start_rank(1, 2, cases[i].addr, port, cases[i].secret, ws, "max_steps=2");
    int st0 = -1, st1 = -1;
    g_autofree char *e0 = finish(r0, &st0);
    g_autofree char *e1 = finish(r1, &st1);
    g_test_message("master %s, %s: rank 0 said: %s", cases[i].addr,
                   cases[i].secret ? "a secret" : "no secret", e0);
    g_assert_cmpint(st0, ==, 0);
    g_assert_cmpint(st1, ==, 0);
    g_assert_cmpint(strstr(e0, "warning: the rendezvous store listens") != NULL, ==,
                    cases[i].warns);
    g_assert_null(strstr(e1, "warning"));
    g_assert_null(strstr(e0, secret));
    tu_rm_rf(ws);
  }
}

/* World size 4, ranks 2 and 3 never start: ranks 0 and 1 fail naming them, not store keys. */
static void test_missing_ranks(void)
{
  g_autofree char *ws = tu_mkdtemp("missing");
  int port = cohort_store_find_free_port(0);
  g_autofree char *secret = cohort_dist_new_secret(NULL);
  g_autoptr(GSubprocess) r0 = start_rank(0, 4, "127.0.0.1", port, secret, ws, "max_steps=3");
  g_autoptr(GSubprocess) r1 = start_rank(1, 4, "127.0.0.1", port, secret, ws, "max_steps=3");
  for (int r = 0; r < 2; r++) {
    int st = -1;
    g_autofree char *err = finish(r == 0 ? r0 : r1, &st);
    g_test_message("rank %d exited %d: %s", r, st, err);
    g_assert_cmpint(st, ==, 1);
    g_assert_nonnull(strstr(err, "ranks 2, 3 of 4 never joined"));
    g_assert_null(strstr(err, "config/hash"));
  }
  tu_rm_rf(ws);
}

/* cohort-run with 2 ranks and `restarts`; SIGTERM to rank 1 once rank 0 has made 3 steps.
 * Returns cohort-run's status and stderr. */
static char *sigterm_one_worker(int restarts, const char *max_steps, const char *ws, int *status)
{
  g_autofree char *ev = g_build_filename(ws, "progress.jsonl", NULL);
  g_autofree char *logs = g_build_filename(ws, "logs", NULL);
  g_autofree char *restart_flag = g_strdup_printf("--max-restarts=%d", restarts);
  g_autofree char *log_flag = g_strdup_printf("--log-dir=%s", logs);
  const char *pre[] = {program("COHORT_RUN"),
                       "--standalone",
                       "--nproc-per-node=2",
                       restart_flag,
                       log_flag,
                       "--progress-fd=3",
                       NULL};
  const char *extra[] = {max_steps, "save_every=0", NULL};
  g_autoptr(GSubprocess) p = start_job(pre, NULL, ws, ev, extra, NULL);
  wait_for_text(ev, "\"step\":3,");
  int ranks[2];
  find_ranks(atoi(g_subprocess_get_identifier(p)), ranks);
  /* Rank 0's held store sockets (COHORT_STORE_FDS) are its own, not this test's. */
  g_auto(GStrv) env0 = g_environ_unsetenv(proc_strings(ranks[0], "environ"), "COHORT_STORE_FDS");
  g_assert_cmpint(kill(ranks[1], SIGTERM), ==, 0);
  char *err = finish(p, status);
  g_test_message("cohort-run exited %d:\n%s", *status, err);
  const char *texts[] = {err, NULL};
  assert_secret_absent(env0, texts);
  assert_files_free_of_secret(logs, env0);
  return err;
}

/* A worker stopped from outside is a failure of the group: cohort-run fails, or restarts
 * when it may; the restarted group resumes and completes. */
static void test_sigterm_worker(void)
{
  g_autofree char *ws = tu_mkdtemp("sigterm-worker");
  int st = -1;
  g_autofree char *err = sigterm_one_worker(0, "max_steps=3000", ws, &st);
  g_assert_cmpint(st, ==, 1);
  g_assert_nonnull(strstr(err, "exited with code 143"));
  g_assert_null(strstr(err, "restarting"));
  tu_rm_rf(ws);

  g_autofree char *ws2 = tu_mkdtemp("sigterm-restart");
  g_autofree char *err2 = sigterm_one_worker(1, "max_steps=200", ws2, &st);
  g_assert_cmpint(st, ==, 0);
  g_assert_nonnull(strstr(err2, "restarting the group"));
  g_autofree char *ev = g_build_filename(ws2, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) events = tu_read_events(ev);
  g_autoptr(GArray) starts = tu_event_values(events, "start", "start_step");
  g_assert_cmpuint(starts->len, ==, 2);
  g_assert_cmpfloat(g_array_index(starts, double, 1), >=, 3);
  tu_rm_rf(ws2);
}

/* A stop asked of cohort-run is a stop: 143; of cohort-train alone, SIGINT: 130. Both after
 * the stop checkpoint. */
static void test_stop_statuses(void)
{
  g_autofree char *ws = tu_mkdtemp("sigterm-run");
  g_autofree char *ev = g_build_filename(ws, "progress.jsonl", NULL);
  const char *pre[] = {program("COHORT_RUN"), "--standalone", "--nproc-per-node=2",
                       "--progress-fd=3", NULL};
  const char *extra[] = {"max_steps=3000", NULL};
  g_autoptr(GSubprocess) p = start_job(pre, NULL, ws, ev, extra, NULL);
  wait_for_text(ev, "\"step\":3,");
  g_subprocess_send_signal(p, SIGTERM);
  int st = -1;
  g_autofree char *err = finish(p, &st);
  g_test_message("cohort-run after SIGTERM: %d", st);
  g_assert_cmpint(st, ==, 128 + SIGTERM);
  wait_for_text(ev, "\"status\":\"stopped\"");
  tu_rm_rf(ws);

  g_autofree char *ws1 = tu_mkdtemp("sigint-train");
  g_autofree char *ev1 = g_build_filename(ws1, "progress.jsonl", NULL);
  const char *flags[] = {"--progress-fd=3", NULL};
  g_autoptr(GSubprocess) t = start_job(NULL, flags, ws1, ev1, extra, NULL);
  wait_for_text(ev1, "\"step\":3,");
  g_subprocess_send_signal(t, SIGINT);
  g_autofree char *err1 = finish(t, &st);
  g_test_message("cohort-train after SIGINT: %d", st);
  g_assert_cmpint(st, ==, 128 + SIGINT);
  wait_for_text(ev1, "\"event\":\"checkpoint\"");
  wait_for_text(ev1, "\"status\":\"stopped\"");
  tu_rm_rf(ws1);
}

/* Two jobs on one port with one COHORT_JOB_TOKEN (issue 20: they killed each other 3 times in
 * 10): job A's launcher holds the port, so job B's launcher is refused at once naming it; and
 * a stray rank of another job that reaches A's store (the same secret, the same port) is told
 * the store belongs to another job, while A finishes untouched. */
static void test_two_jobs_one_port(void)
{
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  g_assert_cmpint(bind(sock, (struct sockaddr *)&addr, sizeof addr), ==, 0);
  socklen_t len = sizeof addr;
  getsockname(sock, (struct sockaddr *)&addr, &len);
  int port = ntohs(addr.sin_port);
  close(sock);
  g_autofree char *port_text = g_strdup_printf("%d", port);
  const char *token = "0123456789abcdef0123456789abcdef";
  const char *env[] = {"COHORT_JOB_TOKEN", token, "OMP_NUM_THREADS", "1", NULL};
  const char *run[] = {
      program("COHORT_RUN"), "--nproc-per-node", "2", "--master-port", port_text, "--quiet", NULL};
  const char *fd3[] = {"--progress-fd", "3", NULL};
  g_autofree char *ws_a = tu_mkdtemp("two-jobs-a"), *ws_b = tu_mkdtemp("two-jobs-b");
  g_autofree char *ws_c = tu_mkdtemp("two-jobs-stray");
  g_autofree char *events = g_build_filename(ws_a, "progress.jsonl", NULL);
  const char *long_run[] = {"max_steps=300", NULL};
  g_autoptr(GSubprocess) a = start_job(run, fd3, ws_a, events, long_run, env);
  wait_for_text(events, "\"event\":\"step\"");

  gint64 t0 = g_get_monotonic_time();
  g_autoptr(GSubprocess) b = start_job(run, NULL, ws_b, NULL, long_run, env);
  int b_status;
  g_autofree char *b_err = finish(b, &b_status);
  g_test_message("job B: exit %d after %.1f s: %s", b_status, (g_get_monotonic_time() - t0) / 1e6,
                 b_err);
  g_assert_cmpint(b_status, ==, 1);
  g_assert_nonnull(strstr(b_err, port_text));
  g_assert_nonnull(strstr(b_err, "already in use"));

  /* A rank of another job (no run id of its own, as torchrun leaves it) on A's port. */
  const char *stray_env[] = {"COHORT_JOB_TOKEN",
                             token,
                             "RANK",
                             "1",
                             "WORLD_SIZE",
                             "2",
                             "LOCAL_RANK",
                             "0",
                             "LOCAL_WORLD_SIZE",
                             "1",
                             "MASTER_ADDR",
                             "127.0.0.1",
                             "MASTER_PORT",
                             port_text,
                             "OMP_NUM_THREADS",
                             "1",
                             NULL};
  t0 = g_get_monotonic_time();
  g_autoptr(GSubprocess) c = start_job(NULL, NULL, ws_c, NULL, long_run, stray_env);
  int c_status;
  g_autofree char *c_err = finish(c, &c_status);
  double c_secs = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("stray rank: exit %d after %.1f s: %s", c_status, c_secs, c_err);
  g_assert_cmpint(c_status, !=, 0);
  g_assert_nonnull(strstr(c_err, "belongs to another job"));
  g_assert_cmpfloat(c_secs, <, 30);

  int a_status;
  g_autofree char *a_err = finish(a, &a_status);
  if (a_status != 0)
    g_test_message("job A: %s", a_err);
  g_assert_cmpint(a_status, ==, 0);
  tu_rm_rf(ws_a);
  tu_rm_rf(ws_b);
  tu_rm_rf(ws_c);
}

/* Ends a test's job that outlived its bound: rank 0 continued and killed, the launcher
 * killed, so the test fails on its assertion instead of hanging. */
typedef struct {
  GPid launcher, rank0;
  double bound_s;
  gint done; /* atomic */
  gboolean killed;
} Reaper;

static gpointer reaper_thread(gpointer data)
{
  Reaper *r = data;
  gint64 end = g_get_monotonic_time() + (gint64)(r->bound_s * G_USEC_PER_SEC);
  while (!g_atomic_int_get(&r->done) && g_get_monotonic_time() < end)
    g_usleep(50000);
  if (!g_atomic_int_get(&r->done)) {
    r->killed = TRUE;
    kill(r->rank0, SIGCONT);
    kill(r->rank0, SIGKILL);
    kill(r->launcher, SIGKILL);
  }
  return NULL;
}

/* Rank 0 of `p` (a cohort-run group) gets SIGSTOP; returns the seconds until the launcher
 * exits (ended after 60 s if it has not), its status and stderr. */
static double freeze_rank0(GSubprocess *p, int ranks[2], int *status, char **err)
{
  Reaper r = {.launcher = atoi(g_subprocess_get_identifier(p)), .rank0 = ranks[0], .bound_s = 60};
  g_assert_cmpint(kill(ranks[0], SIGSTOP), ==, 0);
  gint64 t0 = g_get_monotonic_time();
  GThread *th = g_thread_new("reaper", reaper_thread, &r);
  *err = finish(p, status);
  double took = (double)(g_get_monotonic_time() - t0) / G_USEC_PER_SEC;
  g_atomic_int_set(&r.done, 1);
  g_thread_join(th);
  g_test_message("cohort-run exited %d %.1f s after rank 0 was stopped%s:\n%s", *status, took,
                 r.killed ? " (killed by the test)" : "", *err);
  return took;
}

/* What a frozen rank 0's group must show: it fails (1), within timeout_s + the launcher's grace
 * period (the test's job: 8 s and 10 s; 3 s more for the heartbeat interval and a loaded
 * machine), and rank 1 says why, early as a warning and in its failure. Rank 0, continued by
 * cohort-run, usually ends at once; about one run in twenty it stays in a Gloo send that a reset
 * connection left pending (Gloo does not fail an unbound send queued on a pair when the pair
 * fails), and only the grace period's SIGKILL ends it. */
static void assert_frozen_rank0_failed(double took, int status, const char *err)
{
  g_assert_cmpint(status, ==, 1);
  g_assert_cmpfloat(took, <, 8 + 10 + 3);
  g_assert_nonnull(strstr(err, "rank 1: warning: rank 0 (the store) does not answer"));
  g_assert_true(strstr(err, "on rank 1 failed: rank 0 (the store) does not answer") != NULL ||
                strstr(err, "on rank 1 timed out after 8 s (8 s without progress): rank 0 "
                            "(the store) does not answer") != NULL);
  g_assert_nonnull(strstr(err, "cohort-run: rank 1 (local rank 1"));
}

static const char *const frozen_sets[] = {"max_steps=100000", "timeout_s=8", "hang_report_s=2",
                                          NULL};

/* Issue 33: SIGSTOP of rank 0 (a paused node) left rank 1's heartbeat blocked in recv() on
 * rank 0's store and its timeout path waiting on the store, and the job ran until killed. */
static void test_frozen_rank0(void)
{
  g_autofree char *ws = tu_mkdtemp("frozen-rank0");
  g_autofree char *ev = g_build_filename(ws, "progress.jsonl", NULL);
  const char *pre[] = {program("COHORT_RUN"), "--standalone", "--nproc-per-node=2",
                       "--progress-fd=3", NULL};
  g_autoptr(GSubprocess) p = start_job(pre, NULL, ws, ev, frozen_sets, NULL);
  wait_for_text(ev, "\"step\":3,");
  int ranks[2];
  find_ranks(atoi(g_subprocess_get_identifier(p)), ranks);
  int st = -1;
  g_autofree char *err = NULL;
  double took = freeze_rank0(p, ranks, &st, &err);
  assert_frozen_rank0_failed(took, st, err);
  tu_rm_rf(ws);
}

/* Whether process `pid` has a thread named `name`. */
static gboolean has_thread(int pid, const char *name)
{
  g_autofree char *dir = g_strdup_printf("/proc/%d/task", pid);
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  const char *tid;
  while (d != NULL && (tid = g_dir_read_name(d)) != NULL) {
    g_autofree char *path = g_strdup_printf("%s/%s/comm", dir, tid);
    g_autofree char *comm = NULL;
    if (g_file_get_contents(path, &comm, NULL, NULL) && g_str_equal(g_strstrip(comm), name))
      return TRUE;
  }
  return FALSE;
}

/* The same under --probe: rank 0 stopped once its communicator exists (its watchdog thread
 * runs), while the probe measures. */
static void test_frozen_rank0_probe(void)
{
  g_autofree char *ws = tu_mkdtemp("frozen-rank0-probe");
  const char *pre[] = {program("COHORT_RUN"), "--standalone", "--nproc-per-node=2", NULL};
  const char *flags[] = {"--probe", NULL};
  const char *extra[] = {"n_embd=128",  "seq_len=64",      "batch_size=4",
                         "timeout_s=8", "hang_report_s=2", NULL};
  g_autoptr(GSubprocess) p = start_job(pre, flags, ws, NULL, extra, NULL);
  int ranks[2] = {-1, -1};
  gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
  while (!look_for_ranks(atoi(g_subprocess_get_identifier(p)), ranks) ||
         !has_thread(ranks[0], "cohort-watchdog")) {
    g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    g_usleep(20000);
  }
  int st = -1;
  g_autofree char *err = NULL;
  double took = freeze_rank0(p, ranks, &st, &err);
  assert_frozen_rank0_failed(took, st, err);
  tu_rm_rf(ws);
}

/* Issue 33: a stopped rank's hang report showed its last record as if it were now ("in forward
 * for 0 s", again and again). Rank 1 stopped, rank 0 waiting: a report must give the record's
 * age and call the silent heartbeat out; once rank 1 goes on, the job completes. */
static void test_stopped_rank_silent(void)
{
  g_autofree char *ws = tu_mkdtemp("silent-rank1");
  g_autofree char *ev = g_build_filename(ws, "progress.jsonl", NULL);
  const char *extra[] = {"max_steps=40", "timeout_s=60", "hang_report_s=1", NULL};
  g_autoptr(GSubprocess) p = start_job(NULL, spawn2, ws, ev, extra, NULL);
  wait_for_text(ev, "\"step\":3,");
  int ranks[2];
  find_ranks(atoi(g_subprocess_get_identifier(p)), ranks);
  g_assert_cmpint(kill(ranks[1], SIGSTOP), ==, 0);
  wait_for_text(ev, "\"silent\":true");
  g_assert_cmpint(kill(ranks[1], SIGCONT), ==, 0);
  int st = -1;
  g_autofree char *err = finish(p, &st);
  g_assert_cmpint(st, ==, 0);
  g_autoptr(GPtrArray) events = tu_read_events(ev);
  gboolean fresh = FALSE, silent = FALSE, logged = FALSE;
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    const char *name = json_object_get_string_member(o, "event");
    if (g_str_equal(name, "log") && strstr(json_object_get_string_member(o, "message"),
                                           "its heartbeat has been silent for") != NULL) {
      if (!logged)
        g_test_message("%s", json_object_get_string_member(o, "message"));
      logged = TRUE;
    }
    if (!g_str_equal(name, "hang") || json_object_get_boolean_member(o, "resolved"))
      continue;
    JsonArray *ranks = json_object_get_array_member(o, "ranks");
    JsonObject *r0 = json_array_get_object_element(ranks, 0);
    JsonObject *r1 = json_array_get_object_element(ranks, 1);
    /* rank 0's own record is now; rank 1's ages from the moment it stopped */
    g_assert_cmpfloat(json_object_get_double_member(r0, "record_age_s"), ==, 0);
    g_assert_false(json_object_get_boolean_member(r0, "silent"));
    double age = json_object_get_double_member(r1, "record_age_s");
    gboolean is_silent = json_object_get_boolean_member(r1, "silent");
    g_test_message("hang report: rank 1's record %.1f s old, silent %d, waited %.1f s", age,
                   is_silent, json_object_get_double_member(o, "waited_s"));
    g_assert_true(is_silent == (age >= 3));
    fresh = fresh || !is_silent;
    silent = silent || is_silent;
  }
  g_assert_true(silent);
  g_assert_true(logged);
  (void)fresh; /* the first report may already find the record old on a loaded machine */
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_unsetenv("COHORT_JOB_TOKEN");
  g_test_add_func("/rendezvous/abuse-during-job", test_abuse_during_job);
  g_test_add_func("/rendezvous/missing-ranks", test_missing_ranks);
  g_test_add_func("/rendezvous/exposed-warning", test_exposed_warning);
  g_test_add_func("/rendezvous/sigterm-worker", test_sigterm_worker);
  g_test_add_func("/rendezvous/stop-statuses", test_stop_statuses);
  g_test_add_func("/rendezvous/two-jobs-one-port", test_two_jobs_one_port);
  g_test_add_func("/rendezvous/frozen-rank0", test_frozen_rank0);
  g_test_add_func("/rendezvous/frozen-rank0-probe", test_frozen_rank0_probe);
  g_test_add_func("/rendezvous/stopped-rank-silent", test_stopped_rank_silent);
  return g_test_run();
}
