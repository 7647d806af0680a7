#include "ui/gpu-detect.h"

#include <string.h>

void cohort_gpu_free(CohortGpu *gpu)
{
  if (gpu == NULL)
    return;
  g_free(gpu->name);
  g_free(gpu->memory);
  g_free(gpu);
}

GPtrArray *cohort_gpu_parse(const char *csv)
{
  GPtrArray *gpus = g_ptr_array_new_with_free_func((GDestroyNotify)cohort_gpu_free);
  g_auto(GStrv) lines = g_strsplit(csv != NULL ? csv : "", "\n", -1);
  for (char **l = lines; *l != NULL; l++) {
    g_strstrip(*l);
    char *comma = strrchr(*l, ',');
    if (**l == '\0' || comma == NULL)
      continue;
    *comma = '\0';
    CohortGpu *gpu = g_new0(CohortGpu, 1);
    gpu->index = (int)gpus->len;
    gpu->name = g_strstrip(g_strdup(*l));
    gpu->memory = g_strstrip(g_strdup(comma + 1));
    g_ptr_array_add(gpus, gpu);
  }
  return gpus;
}

typedef struct {
  void (*callback)(GPtrArray *, gpointer);
  gpointer data;
} Detect;

static void on_done(GObject *source, GAsyncResult *res, gpointer user)
{
  Detect *d = user;
  g_autofree char *out = NULL;
  g_autoptr(GError) error = NULL;
  GPtrArray *gpus;
  gboolean ok = g_subprocess_communicate_utf8_finish(G_SUBPROCESS(source), res, &out, NULL, &error);
  if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
    g_free(d); /* the window that asked is gone */
    return;
  }
  if (ok && g_subprocess_get_if_exited(G_SUBPROCESS(source)) &&
      g_subprocess_get_exit_status(G_SUBPROCESS(source)) == 0)
    gpus = cohort_gpu_parse(out);
  else
    gpus = cohort_gpu_parse(NULL);
  d->callback(gpus, d->data);
  g_free(d);
}

void cohort_gpu_detect_async(GCancellable *cancel, void (*callback)(GPtrArray *, gpointer),
                             gpointer data)
{
  const char *tool = g_getenv("COHORT_NVIDIA_SMI");
  g_autofree char *path = g_find_program_in_path(tool != NULL ? tool : "nvidia-smi");
  g_autoptr(GSubprocess) proc = NULL;
  if (path != NULL) {
    const char *argv[] = {path, "--query-gpu=name,memory.total", "--format=csv,noheader", NULL};
    proc = g_subprocess_newv(
        argv, G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_SILENCE, NULL);
  }
  if (proc == NULL) {
    callback(cohort_gpu_parse(NULL), data);
    return;
  }
  Detect *d = g_new0(Detect, 1);
  d->callback = callback;
  d->data = data;
  g_subprocess_communicate_utf8_async(proc, NULL, cancel, on_done, d);
}
