/* What this build can do; engine/meson.build passes the distributed part's findings as
 * COHORT_BUILD_GLOO and COHORT_BUILD_NCCL. */
#include "engine/launch/build-info.h"

#include "cohort-build-config.h"

gboolean cohort_build_has_backend(const char *name)
{
  if (g_strcmp0(name, "local") == 0)
    return TRUE;
  if (g_strcmp0(name, "gloo") == 0)
    return COHORT_BUILD_GLOO;
  if (g_strcmp0(name, "nccl") == 0)
    return COHORT_BUILD_NCCL;
  return FALSE;
}

gboolean cohort_build_has_cuda(void)
{
  return COHORT_HAVE_CUDA;
}
