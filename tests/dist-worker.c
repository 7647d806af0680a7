/* A stand-in worker for the launcher tests: `dist-worker OUTDIR [args…]`.
 *
 * Writes OUTDIR/rank-<RANK>-attempt-<TORCHELASTIC_RESTART_COUNT>.env holding its environment,
 * then "PID=<pid>" and "ARGV=<args joined by spaces>"; with --progress-fd N writes one line to
 * fd N. Then behaves as DIST_WORKER_MODE says:
 *   ok (default)  exit 0;
 *   fail          rank DIST_WORKER_FAIL_RANK writes "about to fail" to stderr and exits 3 (or
 *                 dies of SIGSEGV with DIST_WORKER_FAIL_HOW=segv); with
 *                 DIST_WORKER_FAIL_ONCE=1 it does so only when not given --resume auto; the
 *                 other ranks wait up to 30 s;
 *   hang          wait up to 30 s; rank DIST_WORKER_STUBBORN_RANK ignores SIGTERM.
 * In every mode but ok, rank DIST_WORKER_STOPPED_RANK stops itself (SIGSTOP) first, as a rank
 * whose process or node is paused. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static const char *env_or(const char *name, const char *fallback)
{
  const char *v = getenv(name);
  return v != NULL ? v : fallback;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: dist-worker OUTDIR [args...]\n");
    return 2;
  }
  const char *rank = env_or("RANK", "x");
  int resumed = 0, progress_fd = -1;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc && strcmp(argv[i + 1], "auto") == 0)
      resumed = 1;
    if (strcmp(argv[i], "--progress-fd") == 0 && i + 1 < argc)
      progress_fd = atoi(argv[i + 1]);
  }
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/rank-%s-attempt-%s.env", argv[1], rank,
           env_or("TORCHELASTIC_RESTART_COUNT", "0"));
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) {
    perror(tmp);
    return 2;
  }
  for (char **e = environ; *e != NULL; e++)
    fprintf(f, "%s\n", *e);
  fprintf(f, "PID=%d\nARGV=", (int)getpid());
  for (int i = 2; i < argc; i++)
    fprintf(f, "%s%s", i > 2 ? " " : "", argv[i]);
  fprintf(f, "\n");
  fclose(f);
  rename(tmp, path); /* readers never see half a file */
  if (progress_fd >= 0) {
    char line[64];
    int n = snprintf(line, sizeof line, "{\"event\":\"hello\",\"rank\":%s}\n", rank);
    if (write(progress_fd, line, (size_t)n) != n)
      return 4;
  }

  const char *mode = env_or("DIST_WORKER_MODE", "ok");
  if (strcmp(mode, "ok") == 0) {
    fprintf(stderr, "worker %s done\n", rank);
    return 0;
  }
  if (strcmp(rank, env_or("DIST_WORKER_STOPPED_RANK", "none")) == 0)
    raise(SIGSTOP);
  if (strcmp(mode, "fail") == 0 && strcmp(rank, env_or("DIST_WORKER_FAIL_RANK", "0")) == 0) {
    if (!(resumed && strcmp(env_or("DIST_WORKER_FAIL_ONCE", "0"), "1") == 0)) {
      usleep(200 * 1000); /* let the others start */
      fprintf(stderr, "something went wrong\nabout to fail\n");
      fflush(stderr);
      if (strcmp(env_or("DIST_WORKER_FAIL_HOW", "exit"), "segv") == 0) {
        /* The default action, even where a sanitizer installed its own handler. */
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
      }
      return 3;
    }
    fprintf(stderr, "worker %s resumed and done\n", rank);
    return 0;
  }
  if (strcmp(mode, "fail") == 0 && strcmp(env_or("DIST_WORKER_FAIL_ONCE", "0"), "1") == 0 &&
      resumed)
    return 0;
  if (strcmp(rank, env_or("DIST_WORKER_STUBBORN_RANK", "none")) == 0)
    signal(SIGTERM, SIG_IGN);
  for (int i = 0; i < 300; i++)
    usleep(100 * 1000);
  return 0;
}
