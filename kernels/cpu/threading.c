#include "kernels/cpu/threading.h"

#include <stdlib.h>
#include <unistd.h>

#define DONE_VAR "COHORT_THREADING_ENV"

void cohort_cpu_threading_env(char **argv)
{
  if (getenv(DONE_VAR))
    return;
  /* Marked first, so a failed or repeated exec can never loop. */
  setenv(DONE_VAR, "1", 1);
  int changed = 0;
  if (!getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = 1;
  }
  if (!getenv("OPENBLAS_THREAD_TIMEOUT")) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    changed = 1;
  }
  if (changed)
    execv("/proc/self/exe", argv);
}
