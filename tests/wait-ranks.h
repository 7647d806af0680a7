/* Waiting for ranks forked by the multi-process tests (header-only, tests only). */
#pragma once

#include <glib.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

/* Waits for `n` forked ranks, at most `timeout_s` in all; each must exit with status 0. A rank
 * still running then is killed and fails the test, so a hung collective cannot hang it. */
static inline void tu_wait_ranks(const pid_t *pids, int n, int timeout_s)
{
  gint64 deadline = g_get_monotonic_time() + (gint64)timeout_s * G_USEC_PER_SEC;
  int status[64] = {0}, left = n;
  gboolean done[64] = {0};
  g_assert_cmpint(n, <=, 64);
  while (left > 0 && g_get_monotonic_time() < deadline) {
    for (int r = 0; r < n; r++) {
      if (!done[r] && waitpid(pids[r], &status[r], WNOHANG) == pids[r]) {
        done[r] = TRUE;
        left--;
      }
    }
    g_usleep(20000);
  }
  for (int r = 0; r < n; r++) {
    if (!done[r]) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status[r], 0);
      g_error("rank %d of %d did not finish within %d s", r, n, timeout_s);
    }
    g_assert_true(WIFEXITED(status[r]));
    g_assert_cmpint(WEXITSTATUS(status[r]), ==, 0);
  }
}
