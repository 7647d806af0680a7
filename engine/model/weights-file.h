/* One reader over the weight files init_from takes: .safetensors (engine/model/safetensors.h)
 * and PyTorch's .pt/.pth (engine/model/torch-file.h), told apart by their first bytes, with
 * the names, shapes and float32 reads a family's importer needs. */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef struct CohortWeightsFile CohortWeightsFile;

/* Opens `path` as whichever format it is. Errors name the file. */
CohortWeightsFile *cohort_weights_file_open(const char *path, GError **error);
void cohort_weights_file_close(CohortWeightsFile *f);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortWeightsFile, cohort_weights_file_close)

/* "safetensors" or "PyTorch". */
const char *cohort_weights_file_format(const CohortWeightsFile *f);
/* Names in the file's order, NULL-terminated, owned by f. */
const char *const *cohort_weights_file_names(const CohortWeightsFile *f);
/* The shape of `name`: its number of dimensions, or -1 when absent. */
int cohort_weights_file_shape(const CohortWeightsFile *f, const char *name, int64_t shape[8]);
/* Reads `name` as float32; it must have `ndim` dims of `shape`. Errors name the file and the
 * tensor. */
gboolean cohort_weights_file_read_f32(CohortWeightsFile *f, const char *name, int ndim,
                                      const int64_t *shape, float *dst, GError **error);

G_END_DECLS
