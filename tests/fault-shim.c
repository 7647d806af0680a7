/* A fault-injection shim for crash tests (LD_PRELOAD; tests only): it counts the renames,
 * unlinks and folder removals whose path contains $COHORT_FAULT_MATCH and kills the process
 * with SIGKILL right after the $COHORT_FAULT_AFTER-th of them has been done, which is what a
 * power cut or kill -9 at that moment leaves on disk. With $COHORT_FAULT_LOG set, each counted
 * call is appended there as "op path" first (a run with COHORT_FAULT_AFTER=0 only counts).
 * With $COHORT_FAULT_NO_EXCHANGE set, renameat2 with RENAME_EXCHANGE fails with EINVAL, as on
 * a file system that cannot exchange two names. Without $COHORT_FAULT_MATCH it does
 * nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_long calls;

static int counts(const char *path)
{
  const char *match = getenv("COHORT_FAULT_MATCH");
  return match != NULL && *match != '\0' && path != NULL && strstr(path, match) != NULL;
}

/* After a counted call that has been done: log it, and die when it is the chosen one. */
static void after(const char *op, const char *path, const char *to)
{
  long n = atomic_fetch_add(&calls, 1) + 1;
  const char *log = getenv("COHORT_FAULT_LOG");
  if (log != NULL) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dprintf(fd, "%ld %s %s%s%s\n", n, op, path, to ? " -> " : "", to ? to : "");
      close(fd);
    }
  }
  const char *after_env = getenv("COHORT_FAULT_AFTER");
  long k = after_env != NULL ? strtol(after_env, NULL, 10) : 0;
  if (k > 0 && n == k)
    raise(SIGKILL);
}

#define NEXT(name, type) ((type)dlsym(RTLD_NEXT, name))

int rename(const char *from, const char *to)
{
  int rc = NEXT("rename", int (*)(const char *, const char *))(from, to);
  if (rc == 0 && (counts(from) || counts(to)))
    after("rename", from, to);
  return rc;
}

int renameat(int fd1, const char *from, int fd2, const char *to)
{
  int rc = NEXT("renameat", int (*)(int, const char *, int, const char *))(fd1, from, fd2, to);
  if (rc == 0 && (counts(from) || counts(to)))
    after("rename", from, to);
  return rc;
}

int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned flags)
{
  if ((flags & RENAME_EXCHANGE) && getenv("COHORT_FAULT_NO_EXCHANGE") != NULL) {
    errno = EINVAL;
    return -1;
  }
  int rc = NEXT("renameat2",
                int (*)(int, const char *, int, const char *, unsigned))(fd1, from, fd2, to, flags);
  if (rc == 0 && (counts(from) || counts(to)))
    after(flags & RENAME_EXCHANGE ? "exchange" : "rename", from, to);
  return rc;
}

int unlink(const char *path)
{
  int rc = NEXT("unlink", int (*)(const char *))(path);
  if (rc == 0 && counts(path))
    after("unlink", path, NULL);
  return rc;
}

int unlinkat(int fd, const char *path, int flags)
{
  int rc = NEXT("unlinkat", int (*)(int, const char *, int))(fd, path, flags);
  if (rc == 0 && counts(path))
    after(flags & AT_REMOVEDIR ? "rmdir" : "unlink", path, NULL);
  return rc;
}

int rmdir(const char *path)
{
  int rc = NEXT("rmdir", int (*)(const char *))(path);
  if (rc == 0 && counts(path))
    after("rmdir", path, NULL);
  return rc;
}
