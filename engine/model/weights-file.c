/* init_from's weight files in either format (weights-file.h). */
#include "engine/model/weights-file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "engine/model/safetensors.h"
#include "engine/model/torch-file.h"

struct CohortWeightsFile {
  CohortStFile *st;
  CohortTorchFile *pt;
};

/* A name PyTorch files go by. */
static gboolean torch_name(const char *path)
{
  static const char *const ext[] = {".pt", ".pth", ".bin", ".ckpt", ".tar"};
  g_autofree char *lower = g_ascii_strdown(path, -1);
  for (guint i = 0; i < G_N_ELEMENTS(ext); i++)
    if (g_str_has_suffix(lower, ext[i]))
      return TRUE;
  return FALSE;
}

CohortWeightsFile *cohort_weights_file_open(const char *path, GError **error)
{
  guint8 head[8] = {0};
  gssize got = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    got = read(fd, head, sizeof head);
    close(fd);
  }
  g_autoptr(CohortWeightsFile) f = g_new0(CohortWeightsFile, 1);
  /* Unreadable files and folders reach the safetensors reader, whose errors say so. */
  if (got > 0 && cohort_torch_file_sniff(head, (gsize)got)) {
    f->pt = cohort_torch_file_open(path, error);
    return f->pt ? g_steal_pointer(&f) : NULL;
  }
  g_autoptr(GError) local = NULL;
  f->st = cohort_safetensors_open(path, &local);
  if (f->st)
    return g_steal_pointer(&f);
  /* A .pth that is no ZIP archive is not a bad safetensors file: say what it is not. (A pickle
   * is named as such by the safetensors reader.) */
  gboolean pickle = got >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5;
  if (g_error_matches(local, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT) &&
      torch_name(path) && !pickle) {
    g_set_error(error, COHORT_SAFETENSORS_ERROR, COHORT_SAFETENSORS_ERROR_FORMAT,
                "%s: not a PyTorch weights file: torch.save has written ZIP archives since "
                "PyTorch 1.6 and this is none (nor a safetensors file); allowed: a .pt or .pth "
                "that torch.save wrote, or a .safetensors file",
                path);
    return NULL;
  }
  g_propagate_error(error, g_steal_pointer(&local));
  return NULL;
}

void cohort_weights_file_close(CohortWeightsFile *f)
{
  if (!f)
    return;
  cohort_safetensors_close(f->st);
  cohort_torch_file_close(f->pt);
  g_free(f);
}

const char *cohort_weights_file_format(const CohortWeightsFile *f)
{
  return f->pt ? "PyTorch" : "safetensors";
}

const char *const *cohort_weights_file_names(const CohortWeightsFile *f)
{
  return f->pt ? cohort_torch_file_names(f->pt) : cohort_safetensors_names(f->st);
}

int cohort_weights_file_shape(const CohortWeightsFile *f, const char *name, int64_t shape[8])
{
  return f->pt ? cohort_torch_file_shape(f->pt, name, shape)
               : cohort_safetensors_shape(f->st, name, shape);
}

gboolean cohort_weights_file_read_f32(CohortWeightsFile *f, const char *name, int ndim,
                                      const int64_t *shape, float *dst, GError **error)
{
  return f->pt ? cohort_torch_file_read_f32(f->pt, name, ndim, shape, dst, error)
               : cohort_safetensors_read_f32(f->st, name, ndim, shape, dst, error);
}
