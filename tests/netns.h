/* Two "machines" on one host for tests (header-only, tests only): network namespaces joined by
 * a veth pair, with addresses NETNS_ADDR0 and NETNS_ADDR1, the link optionally rate-limited
 * with a token-bucket filter (`tc … tbf`; this kernel has no netem for delay). Needs root. A
 * helper process removes the namespaces when the test process ends, however it ends. */
#pragma once

#include <fcntl.h>
#include <glib.h>
#include <stdlib.h>
#include <unistd.h>

#define NETNS_ADDR0 "10.98.0.1"
#define NETNS_ADDR1 "10.98.0.2"

typedef struct {
  char *ns[2];
  char *veth[2];
} Netns;

static inline gboolean netns_sh(const char *cmd)
{
  int status = -1;
  const char *argv[] = {"sh", "-c", cmd, NULL};
  g_autofree char *out = NULL, *err = NULL;
  if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, &err, &status,
                    NULL))
    return FALSE;
  if (!g_spawn_check_wait_status(status, NULL)) {
    g_test_message("`%s` failed: %s%s", cmd, out, err);
    return FALSE;
  }
  return TRUE;
}

/* Frees the names (the namespaces themselves go when the process ends: netns_janitor). */
static inline void netns_clear(Netns *n)
{
  for (int i = 0; i < 2; i++) {
    g_clear_pointer(&n->ns[i], g_free);
    g_clear_pointer(&n->veth[i], g_free);
  }
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Netns, netns_clear)

/* Removes the namespaces when this process ends: a child waits for the end of a pipe only this
 * process holds. */
static inline void netns_janitor(const Netns *n)
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
    for (int i = 0; i < 2; i++) {
      g_autofree char *cmd = g_strdup_printf("ip netns del %s 2>/dev/null", n->ns[i]);
      (void)!system(cmd);
    }
    _exit(0);
  }
  close(fds[0]);
  g_assert_cmpint(fcntl(fds[1], F_SETFD, FD_CLOEXEC), ==, 0);
}

/* Makes the two machines; FALSE with the reason (for g_test_skip) when this host cannot. */
static inline gboolean netns_make(Netns *n, char **why)
{
  if (geteuid() != 0) {
    *why = g_strdup("needs root to create network namespaces");
    return FALSE;
  }
  int pid = (int)getpid();
  for (int i = 0; i < 2; i++) {
    n->ns[i] = g_strdup_printf("cohort-p%d-%d", i, pid);
    n->veth[i] = g_strdup_printf("cp%c%d", 'a' + i, pid % 10000000);
  }
  netns_janitor(n);
  g_autofree char *setup =
      g_strdup_printf("set -e; ip netns add %1$s; ip netns add %2$s; "
                      "ip link add %3$s type veth peer name %4$s; "
                      "ip link set %3$s netns %1$s; ip link set %4$s netns %2$s; "
                      "ip -n %1$s addr add " NETNS_ADDR0 "/24 dev %3$s; "
                      "ip -n %2$s addr add " NETNS_ADDR1 "/24 dev %4$s; "
                      "ip -n %1$s link set lo up; ip -n %2$s link set lo up; "
                      "ip -n %1$s link set %3$s up; ip -n %2$s link set %4$s up",
                      n->ns[0], n->ns[1], n->veth[0], n->veth[1]);
  if (!netns_sh(setup)) {
    *why = g_strdup("`ip netns add` or veth pairs are not available here (see the log)");
    return FALSE;
  }
  return TRUE;
}

/* Limits both directions of the link to `rate` (tc's spelling: "100mbit", "1gbit"). */
static inline gboolean netns_limit(const Netns *n, const char *rate)
{
  for (int i = 0; i < 2; i++) {
    g_autofree char *cmd = g_strdup_printf("ip netns exec %s tc qdisc replace dev %s root tbf rate "
                                           "%s burst 64kbit latency 50ms",
                                           n->ns[i], n->veth[i], rate);
    if (!netns_sh(cmd))
      return FALSE;
  }
  return TRUE;
}
