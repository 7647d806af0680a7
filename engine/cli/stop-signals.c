#include "engine/cli/stop-signals.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

static volatile int *armed_flag;

/* Ends the process by `sig`, as if it had never been caught. Runs on the receiving thread,
 * which unblocks the signal for itself only. */
static void die_by(int sig)
{
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  raise(sig);
}

static void take(int sig)
{
  volatile int *flag = g_atomic_pointer_get(&armed_flag);
  if (flag && !*flag)
    *flag = sig;
  else
    die_by(sig);
}

static gpointer receive(gpointer data)
{
  const sigset_t *set = data;
  for (;;) {
    int sig = 0;
    if (sigwait(set, &sig) == 0)
      take(sig);
  }
  return NULL;
}

/* A thread that existed before cohort_stop_signals_start (none should) does not block the
 * signals; should the kernel pick it, this handler does what the receiving thread does. */
static void on_signal(int sig)
{
  take(sig);
}

void cohort_stop_signals_start(void)
{
  static sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  g_thread_unref(g_thread_new("stop-signals", receive, &set));
}

void cohort_stop_signals_arm(volatile int *flag)
{
  g_atomic_pointer_set(&armed_flag, flag);
}
