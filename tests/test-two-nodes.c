/* Two machines, for real (suite dist): two network namespaces joined by a veth pair, each with
 * its own address and 2 ms of netem delay each way, are node 0 and node 1 of a job of 2 × 2
 * ranks. Each runs the cohort-run command `cohort-run --print-commands` prints for it, from a
 * shell, as printed. Checked:
 *  - the job trains to the weights of one process with the combined batch;
 *  - when node 1 never comes, node 0 stops at timeout_s with an error naming ranks 2 and 3;
 *  - when a rank of node 1 is killed mid-run, both nodes stop with an error that says what
 *    happened; with --max-restarts (max_restarts 1), both nodes restart and finish, with the
 *    weights of a run that never failed.
 * Needs root (network namespaces); skipped with a message otherwise. The namespaces are
 * removed by a helper process when the test ends, however it ends. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "commands-run.h"

#define MASTER_ADDR "10.99.0.1"

static char *ns[2];
static char *veth[2];

/* Runs `cmd` (a shell command); TRUE when it exits 0. Its output goes to the test log. */
static gboolean sh(const char *cmd, char **out)
{
  g_autofree char *o = NULL, *e = NULL;
  int status = -1;
  const char *argv[] = {"sh", "-c", cmd, NULL};
  if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &o, &e, &status,
                    NULL))
    return FALSE;
  if (!g_spawn_check_wait_status(status, NULL)) {
    g_test_message("`%s` failed: %s%s", cmd, o, e);
    return FALSE;
  }
  if (out)
    *out = g_steal_pointer(&o);
  return TRUE;
}

static void remove_namespaces(void)
{
  for (int i = 0; i < 2; i++) {
    g_autofree char *cmd = g_strdup_printf("ip netns del %s 2>/dev/null", ns[i]);
    (void)!system(cmd);
  }
}

/* A helper that removes the namespaces when this process ends, even by a failed assertion or
 * SIGKILL: it waits for the end of a pipe only this process holds. */
static void start_janitor(void)
{
  int fds[2];
  g_assert_cmpint(pipe(fds), ==, 0);
  pid_t pid = fork();
  g_assert_cmpint(pid, >=, 0);
  if (pid == 0) {
    close(fds[1]);
    char c;
    while (read(fds[0], &c, 1) > 0) {
    }
    remove_namespaces();
    _exit(0);
  }
  close(fds[0]);
  /* Kept open (and out of every child) until this process exits. */
  g_assert_cmpint(fcntl(fds[1], F_SETFD, FD_CLOEXEC), ==, 0);
}

/* Two namespaces, a veth pair between them, addresses 10.99.0.1 and .2, 2 ms netem each way
 * when the kernel has it. FALSE (with the reason) when this machine cannot make them. */
static gboolean make_machines(char **why)
{
  if (geteuid() != 0) {
    *why = g_strdup("needs root to create network namespaces");
    return FALSE;
  }
  int pid = (int)getpid();
  for (int i = 0; i < 2; i++) {
    ns[i] = g_strdup_printf("cohort-n%d-%d", i, pid);
    veth[i] = g_strdup_printf("cv%c%d", 'a' + i, pid % 10000000);
  }
  start_janitor();
  g_autofree char *setup = g_strdup_printf(
      "set -e; ip netns add %1$s; ip netns add %2$s; "
      "ip link add %3$s type veth peer name %4$s; "
      "ip link set %3$s netns %1$s; ip link set %4$s netns %2$s; "
      "ip -n %1$s addr add " MASTER_ADDR "/24 dev %3$s; ip -n %2$s addr add 10.99.0.2/24 dev %4$s; "
      "ip -n %1$s link set lo up; ip -n %2$s link set lo up; "
      "ip -n %1$s link set %3$s up; ip -n %2$s link set %4$s up",
      ns[0], ns[1], veth[0], veth[1]);
  if (!sh(setup, NULL)) {
    *why = g_strdup("`ip netns add` or veth pairs are not available here (see the log)");
    return FALSE;
  }
  /* 2 ms each way on the link, where the kernel has netem (sch_netem). */
  g_autofree char *delay =
      g_strdup_printf("ip netns exec %1$s tc qdisc add dev %3$s root netem delay 2ms && "
                      "ip netns exec %2$s tc qdisc add dev %4$s root netem delay 2ms",
                      ns[0], ns[1], veth[0], veth[1]);
  if (!sh(delay, NULL)) {
    g_test_message("this kernel has no netem (sch_netem): the nodes run without the 2 ms delay");
    return TRUE;
  }
  g_autofree char *qdisc = NULL;
  g_autofree char *show = g_strdup_printf("ip netns exec %s tc qdisc show dev %s", ns[1], veth[1]);
  g_assert_true(sh(show, &qdisc));
  g_test_message("node 1: %s", qdisc);
  g_assert_nonnull(strstr(qdisc, "delay 2ms"));
  return TRUE;
}

static gboolean have_machines;
static char *skip_reason;

static gboolean skip_without_machines(void)
{
  if (have_machines)
    return FALSE;
  g_test_skip(skip_reason);
  return TRUE;
}

/* The two-node config in `dir`, with `extra`; its printed text in *text. */
static char *job_config(const char *dir, const char *const *extra, char **text)
{
  g_autoptr(GPtrArray) sets = g_ptr_array_new();
  const char *base[] = {"nproc_per_node=2",  "num_nodes=2",  "master_addr=" MASTER_ADDR,
                        "master_port=29555", "batch_size=2", NULL};
  for (guint i = 0; base[i]; i++)
    g_ptr_array_add(sets, (gpointer)base[i]);
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(sets, (gpointer)extra[i]);
  g_ptr_array_add(sets, NULL);
  char *config = cr_write_config(dir, (const char *const *)sets->pdata);
  *text = cr_print(config);
  return config;
}

/* Starts node `n`'s printed cohort-run command in its namespace. */
static GSubprocess *start_node(const char *text, int n)
{
  g_autofree char *cmd = cr_command(text, "cohort-run", n);
  g_test_message("node %d: %s", n, cmd);
  g_auto(GStrv) env = cr_environ(NULL);
  const char *prefix[] = {"ip", "netns", "exec", ns[n], NULL};
  return cr_start(prefix, cmd, env);
}

/* One process with the combined batch (2 nodes × 2 ranks × 2), as the reference. */
static GArray *single_weights(const char *const *extra)
{
  g_autofree char *dir = tu_mkdtemp("two-nodes-1");
  g_autoptr(GPtrArray) sets = g_ptr_array_new();
  g_ptr_array_add(sets, "batch_size=8");
  g_ptr_array_add(sets, "enable_multi_gpu=false");
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(sets, (gpointer)extra[i]);
  g_ptr_array_add(sets, NULL);
  g_autofree char *config = cr_write_config(dir, (const char *const *)sets->pdata);
  g_autofree char *cmd = g_strdup_printf("cohort-train --quiet --config %s", config);
  g_auto(GStrv) env = cr_environ(NULL);
  g_autoptr(GSubprocess) p = cr_start(NULL, cmd, env);
  g_autofree char *err = NULL;
  g_assert_cmpint(cr_finish(p, &err), ==, 0);
  GArray *w = cr_weights(dir);
  tu_rm_rf(dir);
  return w;
}

/* The tolerance of test-ddp: a thousandth of how far AdamW moves a weight in `steps` steps. */
static void assert_same_as_single(GArray *w, const char *const *extra, int steps)
{
  g_autoptr(GArray) ref = single_weights(extra);
  double diff = cr_max_diff(w, ref), tol = 1e-3 * 1e-3 * steps;
  g_test_message("2 nodes × 2 ranks × batch 2 vs 1 × batch 8: max |Δw| = %.3g (tolerance %.3g)",
                 diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
}

static void test_equivalence(void)
{
  if (skip_without_machines())
    return;
  g_autofree char *dir = tu_mkdtemp("two-nodes");
  g_autofree char *text = NULL;
  const char *extra[] = {"timeout_s=60", NULL};
  g_autofree char *config = job_config(dir, extra, &text);
  /* Node 1 first: it waits for node 0's store. */
  g_autoptr(GSubprocess) n1 = start_node(text, 1);
  g_autoptr(GSubprocess) n0 = start_node(text, 0);
  g_autofree char *e0 = NULL, *e1 = NULL;
  int s0 = cr_finish(n0, &e0), s1 = cr_finish(n1, &e1);
  if (s0 != 0 || s1 != 0)
    g_error("node 0 exited %d:\n%s\nnode 1 exited %d:\n%s", s0, e0, s1, e1);
  g_autoptr(GArray) w = cr_weights(dir);
  assert_same_as_single(w, NULL, 6);
  tu_rm_rf(dir);
}

static void test_missing_node(void)
{
  if (skip_without_machines())
    return;
  g_autofree char *dir = tu_mkdtemp("two-nodes-missing");
  g_autofree char *text = NULL;
  const char *extra[] = {"timeout_s=4", NULL};
  g_autofree char *config = job_config(dir, extra, &text);
  gint64 t0 = g_get_monotonic_time();
  g_autoptr(GSubprocess) n0 = start_node(text, 0);
  g_autofree char *err = NULL;
  int status = cr_finish(n0, &err);
  double took = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("node 0 alone: exit %d after %.1f s:\n%s", status, took, err);
  g_assert_cmpint(status, !=, 0);
  g_assert_nonnull(strstr(err, "ranks 2, 3 of 4 never joined"));
  g_assert_cmpfloat(took, <, 60);
  tu_rm_rf(dir);
}

/* The step rank 0 last recorded in DIR/ws/events.jsonl (0 when none). */
static int last_step(const char *dir)
{
  g_autofree char *path = g_build_filename(dir, "ws", "events.jsonl", NULL);
  g_autofree char *text = NULL;
  if (!g_file_get_contents(path, &text, NULL, NULL))
    return 0;
  const char *p = g_strrstr(text, "\"event\":\"step\"");
  const char *s = p ? strstr(p, "\"step\":") : NULL;
  return s ? atoi(s + strlen("\"step\":")) : 0;
}

/* The pid of a cohort-train of node 1 (GROUP_RANK=1) running `config`, or 0. */
static int node1_rank_pid(const char *config)
{
  g_autoptr(GDir) proc = g_dir_open("/proc", 0, NULL);
  const char *name;
  while ((name = g_dir_read_name(proc)) != NULL) {
    if (!g_ascii_isdigit(name[0]))
      continue;
    g_autofree char *cmdline_path = g_build_filename("/proc", name, "cmdline", NULL);
    g_autofree char *environ_path = g_build_filename("/proc", name, "environ", NULL);
    g_autofree char *cmdline = NULL, *env = NULL;
    gsize nc = 0, ne = 0;
    if (!g_file_get_contents(cmdline_path, &cmdline, &nc, NULL) ||
        !g_file_get_contents(environ_path, &env, &ne, NULL) || nc == 0)
      continue;
    g_autofree char *base = g_path_get_basename(cmdline);
    gboolean mine = FALSE, node1 = FALSE;
    for (gsize i = 0; i < nc; i += strlen(cmdline + i) + 1)
      mine |= g_str_equal(cmdline + i, config);
    for (gsize i = 0; i < ne; i += strlen(env + i) + 1)
      node1 |= g_str_equal(env + i, "GROUP_RANK=1");
    if (g_str_equal(base, "cohort-train") && mine && node1)
      return atoi(name);
  }
  return 0;
}

/* Starts both nodes, and SIGKILLs a rank of node 1 once the job has made 3 steps. */
static void start_and_kill(const char *dir, const char *config, const char *text, GSubprocess **n0,
                           GSubprocess **n1)
{
  *n1 = start_node(text, 1);
  *n0 = start_node(text, 0);
  gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
  while (last_step(dir) < 3) {
    g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    g_usleep(5000);
  }
  int victim = node1_rank_pid(config);
  g_assert_cmpint(victim, >, 0);
  g_test_message("killing rank pid %d of node 1 at step %d", victim, last_step(dir));
  g_assert_cmpint(kill(victim, SIGKILL), ==, 0);
}

static void test_node_killed(void)
{
  if (skip_without_machines())
    return;
  g_autofree char *dir = tu_mkdtemp("two-nodes-killed");
  g_autofree char *text = NULL;
  const char *extra[] = {"timeout_s=30", "max_steps=400", NULL};
  g_autofree char *config = job_config(dir, extra, &text);
  GSubprocess *n0, *n1;
  start_and_kill(dir, config, text, &n0, &n1);
  g_autofree char *e0 = NULL, *e1 = NULL;
  gint64 t0 = g_get_monotonic_time();
  int s0 = cr_finish(n0, &e0), s1 = cr_finish(n1, &e1);
  double took = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("node 0: exit %d:\n%s\nnode 1: exit %d:\n%s\n(both ended %.1f s after the kill)",
                 s0, e0, s1, e1, took);
  g_object_unref(n0);
  g_object_unref(n1);
  g_assert_cmpint(s0, ==, 1);
  g_assert_cmpint(s1, ==, 1);
  /* Node 1's launcher names the rank and the signal; node 0's names the rank that failed
   * there, and why. */
  g_assert_nonnull(strstr(e1, "was killed by SIGKILL"));
  g_assert_nonnull(strstr(e0, "cohort-run: rank "));
  g_assert_cmpfloat(took, <, 30);
  g_assert_cmpint(last_step(dir), <, 400);
  tu_rm_rf(dir);
}

static void test_restart(void)
{
  if (skip_without_machines())
    return;
  g_autofree char *dir = tu_mkdtemp("two-nodes-restart");
  g_autofree char *text = NULL;
  const char *extra[] = {"timeout_s=30", "max_steps=60", "save_every=2", "max_restarts=1", NULL};
  g_autofree char *config = job_config(dir, extra, &text);
  GSubprocess *n0, *n1;
  start_and_kill(dir, config, text, &n0, &n1);
  g_autofree char *e0 = NULL, *e1 = NULL;
  int s0 = cr_finish(n0, &e0), s1 = cr_finish(n1, &e1);
  g_test_message("node 0: exit %d:\n%s\nnode 1: exit %d:\n%s", s0, e0, s1, e1);
  g_object_unref(n0);
  g_object_unref(n1);
  g_assert_cmpint(s0, ==, 0);
  g_assert_cmpint(s1, ==, 0);
  g_assert_nonnull(strstr(e0, "restarting the group (restart 1 of 1)"));
  g_assert_nonnull(strstr(e1, "restarting the group (restart 1 of 1)"));
  g_autoptr(GArray) w = cr_weights(dir);
  const char *same[] = {"max_steps=60", NULL};
  assert_same_as_single(w, same, 60);
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  have_machines = make_machines(&skip_reason);
  if (!have_machines)
    g_test_message("two machines: %s", skip_reason);
  g_test_add_func("/two-nodes/equivalence", test_equivalence);
  g_test_add_func("/two-nodes/missing-node", test_missing_node);
  g_test_add_func("/two-nodes/node-killed", test_node_killed);
  g_test_add_func("/two-nodes/restart", test_restart);
  int rc = g_test_run();
  if (have_machines)
    remove_namespaces();
  g_free(skip_reason);
  return rc;
}
