/* NVIDIA GPUs on this machine, from `nvidia-smi --query-gpu=name,memory.total
 * --format=csv,noheader` (run asynchronously; absent tool or failure = no GPUs). */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  int index;
  char *name;
  char *memory; /* as nvidia-smi prints it, e.g. "81559 MiB" */
} CohortGpu;

void cohort_gpu_free(CohortGpu *gpu);

/* Parses nvidia-smi's CSV output into a GPtrArray of CohortGpu (possibly empty). */
GPtrArray *cohort_gpu_parse(const char *csv);

/* Runs the query; `callback` gets the array (owned by the callee, unref when done) or, when
 * nvidia-smi is missing or fails, an empty array. $COHORT_NVIDIA_SMI overrides the tool. */
void cohort_gpu_detect_async(GCancellable *cancel, void (*callback)(GPtrArray *gpus, gpointer),
                             gpointer data);

G_END_DECLS
