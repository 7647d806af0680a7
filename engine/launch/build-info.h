/* What this build can do, for parts that must not link the code that does it (the window
 * does not link the distributed layer): which collective backends and whether the CUDA path
 * were built. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Whether this build has the collective backend `name`: "local" always, "gloo" when Gloo was
 * found, "nccl" when the CUDA path and NCCL 2.14 or newer were. The same answers as
 * cohort_comm_backend_available (test-comm checks that they agree). */
gboolean cohort_build_has_backend(const char *name);

/* Whether this build has the CUDA path (device "cuda"). */
gboolean cohort_build_has_cuda(void);

G_END_DECLS
