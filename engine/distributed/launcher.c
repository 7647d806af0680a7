/* The launcher: forks this node's ranks with torchrun's environment and supervises them. */
#include "engine/distributed/launcher.h"
#include "engine/distributed/env.h"
#include "engine/distributed/store.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LAST_LINES 20

CohortLaunchOptions *cohort_launch_options_new(void)
{
  CohortLaunchOptions *o = g_new0(CohortLaunchOptions, 1);
  o->nnodes = 1;
  o->nproc_per_node = 1;
  o->master_addr = g_strdup("127.0.0.1");
  o->monitor_interval = 0.1;
  o->grace_period = 10.0;
  o->progress_fd = -1;
  o->control_fd = -1;
  return o;
}

void cohort_launch_options_free(CohortLaunchOptions *o)
{
  if (o == NULL)
    return;
  g_free(o->master_addr);
  g_free(o->log_dir);
  g_free(o->run_id);
  g_strfreev(o->argv);
  g_strfreev(o->extra_env);
  g_free(o);
}

void cohort_launch_result_free(CohortLaunchResult *r)
{
  if (r == NULL)
    return;
  g_free(r->failure);
  if (r->last_pids != NULL)
    g_array_unref(r->last_pids);
  g_free(r);
}

const char *cohort_signal_name(int sig, char buf[32])
{
  const char *abbrev = sigabbrev_np(sig);
  if (abbrev == NULL) {
    g_snprintf(buf, 32, "signal %d", sig);
    return buf;
  }
  g_snprintf(buf, 32, "SIG%s", abbrev);
  return buf;
}

/* ---- signals: a self-pipe, so the supervision loop sees them in poll() ---- */

static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  if (write(sig_pipe[1], &b, 1) < 0) {
    /* the pipe is full: a signal is already pending, nothing is lost that matters */
  }
  errno = saved;
}

static const int handled[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};

/* ---- workers ---- */

typedef struct {
  int local_rank;
  int rank;
  GPid pid;
  int err_fd;
  GString *partial;
  GQueue lines; /* of char*, the last LAST_LINES stderr lines */
  FILE *err_log;
  gboolean exited;
  int status;
} Worker;

typedef struct {
  const CohortLaunchOptions *opts;
  const char *me; /* program name for messages */
  int port;
  int world_size;
  char *run_id;
  char *secret; /* COHORT_JOB_TOKEN made for this job, NULL when given or not made */
  gboolean quiet;
  /* On node 0: the store's listening sockets, held from the port check to the end of the job
   * and given to global rank 0 (COHORT_STORE_FDS) to serve on. */
  int held[COHORT_STORE_MAX_FDS];
  int n_held;
} Launch;

static void worker_line(Worker *w, const char *line)
{
  fprintf(stderr, "[rank %d]: %s\n", w->rank, line);
  if (w->err_log != NULL)
    fprintf(w->err_log, "%s\n", line);
  g_queue_push_tail(&w->lines, g_strdup(line));
  while (g_queue_get_length(&w->lines) > LAST_LINES)
    g_free(g_queue_pop_head(&w->lines));
}

/* Reads what is there; FALSE at end of file. */
static gboolean worker_read(Worker *w)
{
  char buf[4096];
  ssize_t n = read(w->err_fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return TRUE;
  if (n <= 0) {
    if (w->partial->len > 0)
      worker_line(w, w->partial->str);
    g_string_truncate(w->partial, 0);
    return FALSE;
  }
  g_string_append_len(w->partial, buf, n);
  char *nl;
  while ((nl = memchr(w->partial->str, '\n', w->partial->len)) != NULL) {
    *nl = '\0';
    worker_line(w, w->partial->str);
    g_string_erase(w->partial, 0, nl - w->partial->str + 1);
  }
  /* A very long line without a newline is shown in pieces rather than held forever. */
  if (w->partial->len > 65536) {
    worker_line(w, w->partial->str);
    g_string_truncate(w->partial, 0);
  }
  return TRUE;
}

static void worker_clear(Worker *w)
{
  if (w->err_fd >= 0)
    close(w->err_fd);
  if (w->partial != NULL)
    g_string_free(w->partial, TRUE);
  g_queue_clear_full(&w->lines, g_free);
  if (w->err_log != NULL)
    fclose(w->err_log);
}

static char **worker_environ(const Launch *l, const Worker *w, int restart, gboolean set_omp)
{
  const CohortLaunchOptions *o = l->opts;
  char **env = g_get_environ();
  struct {
    const char *k;
    char *v;
  } vars[] = {
      {"LOCAL_RANK", g_strdup_printf("%d", w->local_rank)},
      {"RANK", g_strdup_printf("%d", w->rank)},
      {"GROUP_RANK", g_strdup_printf("%d", o->node_rank)},
      {"ROLE_RANK", g_strdup_printf("%d", w->rank)},
      {"ROLE_NAME", g_strdup("default")},
      {"LOCAL_WORLD_SIZE", g_strdup_printf("%d", o->nproc_per_node)},
      {"WORLD_SIZE", g_strdup_printf("%d", l->world_size)},
      {"GROUP_WORLD_SIZE", g_strdup_printf("%d", o->nnodes)},
      {"ROLE_WORLD_SIZE", g_strdup_printf("%d", l->world_size)},
      {"MASTER_ADDR", g_strdup(o->master_addr)},
      {"MASTER_PORT", g_strdup_printf("%d", l->port)},
      {"TORCHELASTIC_RESTART_COUNT", g_strdup_printf("%d", restart)},
      {"TORCHELASTIC_MAX_RESTARTS", g_strdup_printf("%d", o->max_restarts)},
      {"TORCHELASTIC_RUN_ID", g_strdup(l->run_id)},
  };
  for (guint i = 0; i < G_N_ELEMENTS(vars); i++) {
    env = g_environ_setenv(env, vars[i].k, vars[i].v, TRUE);
    g_free(vars[i].v);
  }
  if (set_omp)
    env = g_environ_setenv(env, "OMP_NUM_THREADS", "1", TRUE);
  env = g_environ_unsetenv(env, COHORT_STORE_FDS_VAR);
  if (w->rank == 0 && l->n_held > 0) {
    g_autoptr(GString) fds = g_string_new(NULL);
    for (int i = 0; i < l->n_held; i++)
      g_string_append_printf(fds, "%s%d", i ? "," : "", l->held[i]);
    env = g_environ_setenv(env, COHORT_STORE_FDS_VAR, fds->str, TRUE);
  }
  /* The secret goes through the environment only: never argv, which anyone can read. */
  if (l->secret != NULL)
    env = g_environ_setenv(env, COHORT_JOB_TOKEN_VAR, l->secret, TRUE);
  for (int i = 0; o->extra_env != NULL && o->extra_env[i] != NULL; i++) {
    const char *eq = strchr(o->extra_env[i], '=');
    if (eq == NULL)
      continue;
    g_autofree char *k = g_strndup(o->extra_env[i], eq - o->extra_env[i]);
    env = g_environ_setenv(env, k, eq + 1, TRUE);
  }
  return env;
}

/* Forks one worker. In the child: own process group, killed with the launcher, stderr to
 * our pipe, stdout to its log file when there is one. */
static gboolean worker_start(const Launch *l, Worker *w, int restart, gboolean set_omp,
                             const char *attempt_dir, GError **error)
{
  const CohortLaunchOptions *o = l->opts;
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  for (int i = 0; o->argv[i] != NULL; i++)
    g_ptr_array_add(argv, g_strdup(o->argv[i]));
  gboolean progress = o->progress_fd >= 0 && w->rank == 0;
  if (progress) {
    g_ptr_array_add(argv, g_strdup("--progress-fd"));
    g_ptr_array_add(argv, g_strdup_printf("%d", o->progress_fd));
  }
  gboolean control = o->control_fd >= 0 && w->rank == 0;
  if (control) {
    g_ptr_array_add(argv, g_strdup("--control-fd"));
    g_ptr_array_add(argv, g_strdup_printf("%d", o->control_fd));
  }
  if (restart > 0) {
    g_ptr_array_add(argv, g_strdup("--resume"));
    g_ptr_array_add(argv, g_strdup("auto"));
  }
  g_ptr_array_add(argv, NULL);
  g_auto(GStrv) envp = worker_environ(l, w, restart, set_omp);

  int out_fd = -1;
  if (attempt_dir != NULL) {
    g_autofree char *dir = g_strdup_printf("%s/rank_%d", attempt_dir, w->rank);
    g_autofree char *out = g_build_filename(dir, "stdout.log", NULL);
    g_autofree char *err = g_build_filename(dir, "stderr.log", NULL);
    if (g_mkdir_with_parents(dir, 0755) != 0 ||
        (out_fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0 ||
        (w->err_log = fopen(err, "we")) == NULL) {
      int e = errno;
      if (out_fd >= 0)
        close(out_fd);
      g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                  "--log-dir: cannot write the logs of rank %d under %s: %s", w->rank, dir,
                  g_strerror(e));
      return FALSE;
    }
    setvbuf(w->err_log, NULL, _IOLBF, 0);
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) {
    int e = errno;
    if (out_fd >= 0)
      close(out_fd);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "pipe: %s", g_strerror(e));
    return FALSE;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(p[0]);
    close(p[1]);
    if (out_fd >= 0)
      close(out_fd);
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "fork: %s", g_strerror(e));
    return FALSE;
  }
  if (pid == 0) {
    /* Only async-signal-safe calls from here to exec. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (guint i = 0; i < G_N_ELEMENTS(handled); i++)
      signal(handled[i], SIG_DFL);
    dup2(p[1], 2);
    if (out_fd >= 0)
      dup2(out_fd, 1);
    if (o->progress_fd > 2) {
      if (progress) {
        int flags = fcntl(o->progress_fd, F_GETFD);
        fcntl(o->progress_fd, F_SETFD, flags & ~FD_CLOEXEC);
      } else {
        close(o->progress_fd);
      }
    }
    /* The held store sockets stay open in global rank 0 alone (close-on-exec elsewhere). */
    for (int i = 0; w->rank == 0 && i < l->n_held; i++)
      fcntl(l->held[i], F_SETFD, fcntl(l->held[i], F_GETFD) & ~FD_CLOEXEC);
    if (o->control_fd > 2) {
      if (control) {
        int flags = fcntl(o->control_fd, F_GETFD);
        fcntl(o->control_fd, F_SETFD, flags & ~FD_CLOEXEC);
      } else {
        close(o->control_fd);
      }
    }
    execvpe(argv->pdata[0], (char **)argv->pdata, envp);
    const char *msg = "cannot start the worker program: ";
    const char *why = strerror(errno);
    if (write(2, msg, strlen(msg)) < 0 || write(2, argv->pdata[0], strlen(argv->pdata[0])) < 0 ||
        write(2, ": ", 2) < 0 || write(2, why, strlen(why)) < 0 || write(2, "\n", 1) < 0)
      _exit(127);
    _exit(127);
  }
  setpgid(pid, pid); /* also here: no window where a signal to the group misses it */
  close(p[1]);
  if (out_fd >= 0)
    close(out_fd);
  w->pid = pid;
  w->err_fd = p[0];
  fcntl(w->err_fd, F_SETFL, fcntl(w->err_fd, F_GETFL) | O_NONBLOCK);
  return TRUE;
}

static void signal_all(Worker *ws, int n, int sig)
{
  for (int i = 0; i < n; i++)
    if (!ws[i].exited && ws[i].pid > 0)
      kill(-ws[i].pid, sig);
}

static char *describe_status(int status)
{
  char buf[32];
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 128 + SIGINT || code == 128 + SIGTERM)
    return g_strdup_printf("exited with code %d (stopped: it or another rank of the job got %s, "
                           "which the launcher did not send)",
                           code, code == 128 + SIGINT ? "SIGINT" : "SIGTERM");
  if (WIFEXITED(status))
    return g_strdup_printf("exited with code %d", code);
  if (WIFSIGNALED(status))
    return g_strdup_printf("was killed by %s%s", cohort_signal_name(WTERMSIG(status), buf),
                           WCOREDUMP(status) ? " (core dumped)" : "");
  return g_strdup_printf("ended with status %d", status);
}

typedef struct {
  int failed; /* index of the first failed worker, -1 */
  int signal; /* a signal to the launcher, 0 */
} GroupOutcome;

/* Starts every worker of an attempt; on a failure stops those that started. */
static gboolean start_all(const Launch *l, Worker *ws, int restart, GError **error)
{
  const CohortLaunchOptions *o = l->opts;
  int n = o->nproc_per_node;
  gboolean set_omp = n > 1 && g_getenv("OMP_NUM_THREADS") == NULL;
  g_autofree char *attempt_dir =
      o->log_dir ? g_strdup_printf("%s/attempt_%d", o->log_dir, restart) : NULL;
  int started = 0;
  gboolean ok = TRUE;
  for (int i = 0; i < n && ok; i++) {
    ok = worker_start(l, &ws[i], restart, set_omp, attempt_dir, error);
    started += ok;
  }
  if (!ok) {
    /* Stop what did start; nothing useful can run without every rank. */
    for (int i = 0; i < started; i++)
      kill(-ws[i].pid, SIGKILL);
    for (int i = 0; i < started; i++)
      waitpid(ws[i].pid, NULL, 0);
  }
  return ok;
}

/* Reads the signals the launcher got: the first stops the group, a second kills it. */
static void take_signals(const Launch *l, Worker *ws, GroupOutcome *out, gboolean *killed)
{
  unsigned char sigs[64];
  ssize_t got = read(sig_pipe[0], sigs, sizeof sigs);
  for (ssize_t k = 0; k < got; k++) {
    if (sigs[k] == SIGCHLD)
      continue;
    if (out->signal == 0) {
      out->signal = sigs[k];
      if (!l->quiet)
        fprintf(stderr, "%s: got %s, stopping the workers\n", l->me,
                cohort_signal_name(sigs[k], (char[32]){0}));
    } else if (!*killed) {
      /* a second signal: no more patience */
      signal_all(ws, l->opts->nproc_per_node, SIGKILL);
      *killed = TRUE;
    }
  }
}

/* Reaps the workers that exited; returns how many did. The first that failed while the
 * launcher was not stopping the group fails it. */
static int reap(Worker *ws, int n, gboolean stopping, GroupOutcome *out)
{
  int reaped = 0;
  for (int i = 0; i < n; i++) {
    if (ws[i].exited)
      continue;
    int st;
    if (waitpid(ws[i].pid, &st, WNOHANG) != ws[i].pid)
      continue;
    ws[i].exited = TRUE;
    ws[i].status = st;
    reaped++;
    gboolean failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* Workers we stopped ourselves are not failures. */
    if (failed && out->failed < 0 && !stopping && out->signal == 0)
      out->failed = i;
  }
  return reaped;
}

/* Watches the running workers until all have exited: echoes their stderr, stops the group
 * on the first failure or a signal to the launcher (SIGTERM, SIGKILL after the grace
 * period). */
static void supervise(const Launch *l, Worker *ws, GroupOutcome *out)
{
  const CohortLaunchOptions *o = l->opts;
  int n = o->nproc_per_node;
  gint64 stop_at = 0; /* when SIGKILL follows SIGTERM; 0 = not stopping */
  gboolean killed = FALSE;
  gint64 drain_until = 0;
  int alive = n;
  g_autofree struct pollfd *pfd = g_new(struct pollfd, n + 1);
  g_autofree int *idx = g_new(int, n + 1);
  for (;;) {
    /* poll the signal pipe and every open stderr pipe */
    int np = 0;
    pfd[np++] = (struct pollfd){sig_pipe[0], POLLIN, 0};
    for (int i = 0; i < n; i++) {
      if (ws[i].err_fd >= 0) {
        idx[np] = i;
        pfd[np++] = (struct pollfd){ws[i].err_fd, POLLIN, 0};
      }
    }
    if (alive == 0 && np == 1)
      break;
    int timeout_ms = (int)(o->monitor_interval * 1000);
    int r = poll(pfd, np, MAX(timeout_ms, 1));
    if (r < 0 && errno != EINTR)
      break;
    for (int k = 1; r > 0 && k < np; k++) {
      Worker *w = &ws[idx[k]];
      if ((pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) && !worker_read(w)) {
        close(w->err_fd);
        w->err_fd = -1;
      }
    }
    if (r > 0 && (pfd[0].revents & POLLIN))
      take_signals(l, ws, out, &killed);
    alive -= reap(ws, n, stop_at != 0, out);
    gint64 now = g_get_monotonic_time();
    if (stop_at == 0 && (out->failed >= 0 || out->signal != 0) && alive > 0) {
      signal_all(ws, n, SIGTERM);
      /* A stopped worker (SIGSTOP, a debugger's stop) would keep SIGTERM pending and the
       * group waiting out the grace period: continue it, so it acts on SIGTERM now, as a
       * shell does for a stopped job it kills. */
      signal_all(ws, n, SIGCONT);
      stop_at = now + (gint64)(o->grace_period * G_USEC_PER_SEC);
    }
    if (stop_at != 0 && !killed && now >= stop_at && alive > 0) {
      if (!l->quiet)
        fprintf(stderr, "%s: workers still running %g s after SIGTERM, sending SIGKILL\n", l->me,
                o->grace_period);
      signal_all(ws, n, SIGKILL);
      killed = TRUE;
    }
    /* After the last exit, a grandchild could hold a pipe open: drain briefly, then stop. */
    if (alive == 0) {
      if (drain_until == 0)
        drain_until = now + G_USEC_PER_SEC;
      else if (now >= drain_until)
        break;
    }
  }
}

/* The failure report of worker `w`, into `result` and on stderr. */
static void report_failure(const Launch *l, const Worker *w, int restart,
                           CohortLaunchResult *result)
{
  g_autofree char *how = describe_status(w->status);
  g_autoptr(GString) rep = g_string_new(NULL);
  g_string_append_printf(rep, "%s: rank %d (local rank %d, pid %d) %s", l->me, w->rank,
                         w->local_rank, (int)w->pid, how);
  if (restart > 0)
    g_string_append_printf(rep, " in restart %d", restart);
  guint nl = g_queue_get_length((GQueue *)&w->lines);
  if (nl > 0) {
    g_string_append_printf(rep, "\nlast %u line%s of its stderr:", nl, nl > 1 ? "s" : "");
    for (GList *it = w->lines.head; it != NULL; it = it->next)
      g_string_append_printf(rep, "\n  [rank %d]: %s", w->rank, (char *)it->data);
  } else {
    g_string_append(rep, " (it wrote nothing to stderr)");
  }
  g_free(result->failure);
  result->failure = g_string_free(g_steal_pointer(&rep), FALSE);
  result->failed_rank = w->rank;
  result->failed_exit_code = WIFEXITED(w->status) ? WEXITSTATUS(w->status) : -1;
  result->failed_signal = WIFSIGNALED(w->status) ? WTERMSIG(w->status) : 0;
  fprintf(stderr, "%s\n", result->failure);
}

/* Runs one attempt of the group to its end. */
static gboolean run_group(const Launch *l, int restart, CohortLaunchResult *result,
                          GroupOutcome *out, GError **error)
{
  const CohortLaunchOptions *o = l->opts;
  int n = o->nproc_per_node;
  g_autofree Worker *ws = g_new0(Worker, n);
  for (int i = 0; i < n; i++) {
    ws[i].err_fd = -1;
    ws[i].local_rank = i;
    ws[i].rank = o->node_rank * n + i;
    ws[i].partial = g_string_new(NULL);
    g_queue_init(&ws[i].lines);
  }
  out->failed = -1;
  out->signal = 0;
  gboolean ok = start_all(l, ws, restart, error);
  if (ok) {
    g_array_set_size(result->last_pids, 0);
    for (int i = 0; i < n; i++)
      g_array_append_val(result->last_pids, ws[i].pid);
    supervise(l, ws, out);
    /* Anything left in a process group (a worker's own children) goes too. */
    for (int i = 0; i < n; i++)
      kill(-ws[i].pid, SIGKILL);
    if (out->failed >= 0)
      report_failure(l, &ws[out->failed], restart, result);
  }
  for (int i = 0; i < n; i++)
    worker_clear(&ws[i]);
  return ok;
}

static gboolean check_options(const CohortLaunchOptions *o, GError **error)
{
#define BAD(...)                                                                                   \
  do {                                                                                             \
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID, __VA_ARGS__);                 \
    return FALSE;                                                                                  \
  } while (0)
  if (o->argv == NULL || o->argv[0] == NULL)
    BAD("no worker command given; usage: cohort-run [options] PROGRAM [ARGS...]");
  if (o->nnodes < 1)
    BAD("--nnodes %d is not allowed; expected 1 or more", o->nnodes);
  if (o->nproc_per_node < 1)
    BAD("--nproc-per-node %d is not allowed; expected 1 or more", o->nproc_per_node);
  if (o->node_rank < 0 || o->node_rank >= o->nnodes)
    BAD("--node-rank %d is not allowed with --nnodes %d; expected 0 to %d", o->node_rank, o->nnodes,
        o->nnodes - 1);
  if (o->master_port < 0 || o->master_port > 65535)
    BAD("--master-port %d is not allowed; expected 1 to 65535", o->master_port);
  if (o->master_port == 0 && o->nnodes > 1)
    BAD("--master-port is required with --nnodes %d (every node must use the same port)",
        o->nnodes);
  if (o->max_restarts < 0)
    BAD("--max-restarts %d is not allowed; expected 0 or more", o->max_restarts);
  if (!(o->monitor_interval > 0))
    BAD("--monitor-interval %g is not allowed; expected a number of seconds above 0",
        o->monitor_interval);
  if (o->grace_period < 0)
    BAD("the grace period %g is not allowed; expected 0 or more seconds", o->grace_period);
  if (o->progress_fd >= 0 && fcntl(o->progress_fd, F_GETFD) < 0)
    BAD("--progress-fd %d is not an open file descriptor", o->progress_fd);
  if (o->control_fd >= 0 && fcntl(o->control_fd, F_GETFD) < 0)
    BAD("--control-fd %d is not an open file descriptor", o->control_fd);
  g_autofree char *prog = g_find_program_in_path(o->argv[0]);
  if (prog == NULL)
    BAD("cannot run \"%s\": no such program (give a path, or put it on PATH)", o->argv[0]);
#undef BAD
  if (o->log_dir != NULL && g_mkdir_with_parents(o->log_dir, 0755) != 0) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED,
                "--log-dir %s: cannot create it: %s", o->log_dir, g_strerror(errno));
    return FALSE;
  }
  return TRUE;
}

/* The job secret the workers get (see launcher.h). FALSE when a given one is unusable. */
static gboolean choose_secret(Launch *l, GError **error)
{
  const CohortLaunchOptions *o = l->opts;
  const char *given = g_getenv(COHORT_JOB_TOKEN_VAR);
  for (int i = 0; o->extra_env != NULL && o->extra_env[i] != NULL; i++)
    if (g_str_has_prefix(o->extra_env[i], COHORT_JOB_TOKEN_VAR "="))
      given = o->extra_env[i] + strlen(COHORT_JOB_TOKEN_VAR "=");
  if (given != NULL)
    return cohort_dist_check_secret(given, error);
  /* Nodes cannot agree on a secret one of them draws: on several nodes the user sets it,
   * and without it the ranks derive a weaker one (rank 0 warns). */
  if (o->nnodes > 1)
    return TRUE;
  l->secret = cohort_dist_new_secret(error);
  return l->secret != NULL;
}

/* The node of global rank 0 binds the store's port before the first attempt and holds it
 * for the whole job (rank 0 of each attempt serves on the held sockets): when it is taken,
 * starting the workers cannot help, and no other job can take it between this check and
 * rank 0's serving. *port gets the port (picked when it was 0). */
static void close_held(Launch *l)
{
  for (int i = 0; i < l->n_held; i++)
    close(l->held[i]);
  l->n_held = 0;
}

static gboolean hold_port(Launch *l, GError **error)
{
  const CohortLaunchOptions *o = l->opts;
  if (o->node_rank != 0)
    return TRUE;
  const char *bind = cohort_store_bind_address(o->master_addr, o->nnodes == 1);
  l->port = cohort_store_hold_port(bind, l->port, l->held, COHORT_STORE_MAX_FDS, &l->n_held, error);
  /* A worker that binds the port itself must find it free: checked only. */
  if (!o->hold_port)
    close_held(l);
  return l->port > 0;
}

/* The port check of a launch that does not hold its port, before a restart. */
static gboolean check_port_again(const Launch *l, GError **error)
{
  const CohortLaunchOptions *o = l->opts;
  if (o->node_rank != 0)
    return TRUE;
  int fds[COHORT_STORE_MAX_FDS], n = 0;
  const char *bind = cohort_store_bind_address(o->master_addr, o->nnodes == 1);
  gboolean ok = cohort_store_hold_port(bind, l->port, fds, COHORT_STORE_MAX_FDS, &n, error) > 0;
  for (int i = 0; i < n; i++)
    close(fds[i]);
  return ok;
}

/* Runs attempts until one succeeds, is interrupted, or the restarts are spent. FALSE when
 * an attempt could not start. */
static gboolean run_attempts(const Launch *l, CohortLaunchResult *result, GError **error)
{
  const CohortLaunchOptions *o = l->opts;
  for (int attempt = 0;; attempt++) {
    /* A port not held is checked again before a restart: taken, starting cannot help. */
    GError *port_error = NULL;
    if (attempt > 0 && !l->opts->hold_port && !check_port_again(l, &port_error)) {
      g_free(result->failure);
      result->failure = g_strdup_printf("%s: not restarting: %s", l->me, port_error->message);
      fprintf(stderr, "%s\n", result->failure);
      g_error_free(port_error);
      return TRUE;
    }
    GroupOutcome out;
    if (!run_group(l, attempt, result, &out, error))
      return FALSE;
    result->restarts = attempt;
    if (out.signal != 0) {
      result->interrupted = TRUE;
      result->signal = out.signal;
      return TRUE;
    }
    if (out.failed < 0) {
      result->success = TRUE;
      return TRUE;
    }
    if (attempt >= o->max_restarts)
      return TRUE;
    if (!o->quiet)
      fprintf(stderr, "%s: restarting the group (restart %d of %d); workers get --resume auto\n",
              l->me, attempt + 1, o->max_restarts);
  }
}

CohortLaunchResult *cohort_launch_run(const CohortLaunchOptions *o, GError **error)
{
  if (!check_options(o, error))
    return NULL;
  const char *me = g_get_prgname() ? g_get_prgname() : "cohort-run";
  Launch l = {.opts = o, .me = me, .quiet = o->quiet};
  l.world_size = o->nnodes * o->nproc_per_node;
  l.port = o->master_port;
  if (!hold_port(&l, error) || !choose_secret(&l, error)) {
    close_held(&l);
    return NULL;
  }
  /* One node: a random run id unless one is given, so that two jobs sharing a secret and a
   * port still have different store tokens. Several nodes must agree on it: --rdzv-id. */
  l.run_id = o->run_id        ? g_strdup(o->run_id)
             : o->nnodes == 1 ? g_uuid_string_random()
                              : g_strdup("none");
  if (o->nproc_per_node > 1 && g_getenv("OMP_NUM_THREADS") == NULL && !o->quiet)
    fprintf(stderr,
            "%s: OMP_NUM_THREADS is not set: each worker gets OMP_NUM_THREADS=1 so %d "
            "workers do not overload the CPU; set it yourself to tune.\n",
            me, o->nproc_per_node);

  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    g_set_error(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_FAILED, "pipe: %s", g_strerror(errno));
    g_free(l.run_id);
    g_free(l.secret);
    close_held(&l);
    return NULL;
  }
  struct sigaction old[G_N_ELEMENTS(handled)];
  for (guint i = 0; i < G_N_ELEMENTS(handled); i++) {
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | (handled[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
    sigemptyset(&sa.sa_mask);
    sigaction(handled[i], &sa, &old[i]);
  }

  CohortLaunchResult *result = g_new0(CohortLaunchResult, 1);
  result->failed_rank = -1;
  result->failed_exit_code = -1;
  result->last_pids = g_array_new(FALSE, FALSE, sizeof(GPid));
  gboolean ok = run_attempts(&l, result, error);

  for (guint i = 0; i < G_N_ELEMENTS(handled); i++)
    sigaction(handled[i], &old[i], NULL);
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  sig_pipe[0] = sig_pipe[1] = -1;
  close_held(&l);
  g_free(l.run_id);
  if (l.secret != NULL) {
    explicit_bzero(l.secret, strlen(l.secret));
    g_free(l.secret);
  }
  if (!ok) {
    cohort_launch_result_free(result);
    return NULL;
  }
  return result;
}

int cohort_launch_exit_status(const CohortLaunchResult *result)
{
  if (result->success)
    return 0;
  if (result->interrupted)
    return 128 + result->signal;
  return 1;
}

int cohort_launch_spawn(const char *const *argv, int nproc, int progress_fd, GError **error)
{
  return cohort_launch_spawn_fds(argv, nproc, progress_fd, -1, error);
}

int cohort_launch_spawn_fds(const char *const *argv, int nproc, int progress_fd, int control_fd,
                            GError **error)
{
  g_autoptr(CohortLaunchOptions) o = cohort_launch_options_new();
  o->nproc_per_node = nproc;
  o->progress_fd = progress_fd;
  o->control_fd = control_fd;
  o->argv = g_strdupv((char **)argv);
  o->run_id = g_uuid_string_random();
  o->hold_port = TRUE; /* the workers are cohort-train */
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, error);
  if (r == NULL)
    return -1;
  return cohort_launch_exit_status(r);
}
