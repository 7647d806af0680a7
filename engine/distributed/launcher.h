/* The launcher: starts the local ranks of a job and supervises them (cohort-run, and
 * cohort-train's spawn mode).
 *
 * Rendezvous is static, like torchrun's --rdzv-backend=static: the job has nnodes ×
 * nproc_per_node ranks, node n runs global ranks n×nproc_per_node … (n+1)×nproc_per_node−1,
 * and every node's launcher is started with its --node-rank. Elastic membership (nodes
 * joining or leaving a running job) is not supported.
 *
 * Worker environment, as torchrun sets it: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
 * GROUP_RANK (= node rank), GROUP_WORLD_SIZE (= nnodes), ROLE_RANK (= RANK), ROLE_WORLD_SIZE
 * (= WORLD_SIZE), ROLE_NAME ("default"), MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
 * TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, and OMP_NUM_THREADS=1 when it is unset and
 * more than one worker runs on the node (a warning says so once).
 *
 * Job secret (COHORT_JOB_TOKEN, from which the ranks derive the rendezvous store's token):
 * one given in the launcher's environment (or extra_env) is checked
 * (cohort_dist_check_secret) and passed on as it is; on a single node the launcher otherwise
 * draws a fresh 128-bit one per job (the same across restarts: the token also carries the
 * restart count) and puts it in the workers' environment. It is never put on a command line
 * nor printed. On several nodes the launchers cannot agree on a drawn secret, so none is
 * drawn: the user exports the same COHORT_JOB_TOKEN on every node (the commands from
 * cohort_launch_commands say so), and without it the ranks derive a guessable one and rank 0
 * warns.
 *
 * Worker command line: the given argv; global rank 0 alone gets "--progress-fd N" appended
 * (and inherits fd N) when a progress fd is given, and "--control-fd M" (inheriting fd M)
 * when a control fd is given; on a restart every worker gets
 * "--resume auto" appended: the contract is that a worker given it resumes from its
 * workspace's latest checkpoint when there is one and starts fresh otherwise.
 *
 * Output: each worker's stderr is read line by line, echoed to the launcher's stderr
 * prefixed "[rank N]: ", and its last lines are kept for the failure report. With a log dir,
 * each worker's stdout and stderr also go to LOG_DIR/attempt_K/rank_N/{stdout,stderr}.log
 * (stdout only to the file); without one, stdout is inherited.
 *
 * Supervision: the first worker that exits non-zero or dies of a signal fails the group: the
 * others get SIGTERM (to their process group, then SIGCONT so a stopped worker acts on it
 * too), SIGKILL after the grace period, and the
 * launcher reports the failure (global rank, pid, exit code or signal name, last stderr
 * lines). The group is restarted up to max_restarts times. A worker that exits 130 or 143
 * (cohort-train stopped by SIGINT or SIGTERM) without the launcher having asked is such a
 * failure too: something outside stopped part of the group. SIGINT, SIGTERM or SIGHUP to the
 * launcher stop the group the same way (SIGTERM to every worker, no restart) and the launcher
 * exits 128 + that signal.
 *
 * Port: before the first attempt, the launcher of node 0 binds the store's port on the
 * address rank 0 would bind (cohort_store_hold_port). With hold_port (spawn mode, and
 * cohort-run when the program is cohort-train) it holds it to the end: global rank 0 of each
 * attempt inherits the listening sockets (COHORT_STORE_FDS, engine/distributed/env.h) and
 * serves on them, so no other job takes the port between the check and the bind. Without it
 * (another program, which binds MASTER_PORT itself) the sockets are closed again, and the
 * check is repeated before each restart. When the port is taken, the launch fails at once (an
 * error, COHORT_DIST_ERROR_ADDR_IN_USE naming the port; before a restart, a failure without
 * restarting), since starting again cannot help.
 *
 * Run id: TORCHELASTIC_RUN_ID is opts->run_id; on one node without one the launcher draws a
 * random one per job, so two jobs sharing a COHORT_JOB_TOKEN (and by mistake a port) still
 * have different store tokens and a rank reaching the other job's store is told so
 * (cohort_dist_job_token). Several nodes must agree on it ("none" when not given). Each
 * worker runs in its own process group with PR_SET_PDEATHSIG = SIGKILL, so even a SIGKILLed
 * launcher leaves nothing behind. The group succeeds when every worker has exited 0. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  int nnodes;              /* >= 1 */
  int nproc_per_node;      /* >= 1 ("auto": cohort_launch_resolve_nproc, launch-plan.h) */
  int node_rank;           /* 0 .. nnodes-1 */
  char *master_addr;       /* default "127.0.0.1" */
  int master_port;         /* 0 = pick a free one (only with nnodes == 1) */
  int max_restarts;        /* >= 0 */
  double monitor_interval; /* seconds between checks of the workers, > 0 */
  double grace_period;     /* seconds between SIGTERM and SIGKILL when stopping, >= 0 */
  char *log_dir;           /* NULL = no log files */
  int progress_fd;         /* -1 = none; else passed to global rank 0 */
  int control_fd;          /* -1 = none; else passed to global rank 0 as --control-fd */
  char *run_id;            /* TORCHELASTIC_RUN_ID; NULL = random on one node, else "none" */
  gboolean hold_port;      /* hold the store's port for the job and give it to rank 0 (a
                            * worker that serves on COHORT_STORE_FDS: cohort-train) */
  gboolean quiet;          /* no launcher messages except failures */
  GStrv argv;              /* the worker command; argv[0] is looked up in PATH */
  GStrv extra_env;         /* "KEY=VALUE" added to every worker's environment, may be NULL */
} CohortLaunchOptions;

/* Defaults: 1 node × 1 process, master 127.0.0.1, free port, no restarts, monitor interval
 * 0.1 s, grace period 10 s, no log dir, no progress fd, no control fd. */
CohortLaunchOptions *cohort_launch_options_new(void);
void cohort_launch_options_free(CohortLaunchOptions *opts);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortLaunchOptions, cohort_launch_options_free)

/* What happened to a group, for the caller's report and for tests. */
typedef struct {
  gboolean success;     /* every worker exited 0 */
  gboolean interrupted; /* stopped by a signal to the launcher */
  int signal;           /* that signal, when interrupted */
  int restarts;         /* how many restarts were made */
  int failed_rank;      /* global rank of the first failure, -1 = none */
  int failed_exit_code; /* its exit code, -1 when it died of a signal */
  int failed_signal;    /* its signal, 0 when it exited */
  char *failure;        /* the failure report (multi-line), NULL when none */
  GArray *last_pids;    /* of GPid: the pids of the last attempt's workers, by local rank */
} CohortLaunchResult;

void cohort_launch_result_free(CohortLaunchResult *result);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortLaunchResult, cohort_launch_result_free)

/* Runs this node's workers until the group succeeds, fails past max_restarts, or the
 * launcher is signalled. Returns NULL with an error only when nothing could be started (bad
 * options, a program not found, a log dir not writable: COHORT_DIST_ERROR_INVALID or
 * _FAILED; an unusable COHORT_JOB_TOKEN: _ENV; the store's port taken: _ADDR_IN_USE);
 * otherwise a result. Installs
 * handlers for SIGINT, SIGTERM, SIGHUP and SIGCHLD while it runs and restores the old ones.
 * Call from the main thread. */
CohortLaunchResult *cohort_launch_run(const CohortLaunchOptions *opts, GError **error);

/* The exit status a launcher program should return for `result`: 0 on success, 128+signal
 * when interrupted, else 1 (as torchrun does). */
int cohort_launch_exit_status(const CohortLaunchResult *result);

/* Spawn mode (cohort-train --nproc N): runs `nproc` local ranks of `argv` (1 node, master
 * 127.0.0.1, a free port), with the same environment, output handling and supervision as
 * cohort_launch_run but no restarts. `argv` is the worker command without --nproc (the
 * caller removes it, so workers do not spawn again); `progress_fd` (-1 = none) goes to rank 0
 * only. Returns the exit status for the caller's main(), as cohort_launch_exit_status, or -1
 * with an error when nothing could be started. */
int cohort_launch_spawn(const char *const *argv, int nproc, int progress_fd, GError **error);

/* cohort_launch_spawn with a control channel too: `control_fd` (-1 = none) goes to rank 0
 * only, as --control-fd (engine/progress/control.h). */
int cohort_launch_spawn_fds(const char *const *argv, int nproc, int progress_fd, int control_fd,
                            GError **error);

/* The name of a signal, "SIGSEGV"; "signal 77" for one without a name. Static or in `buf`. */
const char *cohort_signal_name(int sig, char buf[32]);

G_END_DECLS
