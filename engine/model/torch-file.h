/* PyTorch weight files without Python: the .pt/.pth files torch.save(state_dict) writes
 * (PyTorch 1.6 and later: a ZIP archive of "<archive>/data.pkl", the pickled state dict, and
 * one "<archive>/data/<key>" record per storage). The archive is read by a bounded reader of
 * stored entries (engine/model/zip-stored.h) and the pickle by a restricted unpickler that
 * accepts exactly what torch.load(weights_only=True) accepts (engine/model/torch-pickle.h);
 * everything else is refused with the opcode or global named. A file in the legacy format
 * (PyTorch < 1.6, or _use_new_zipfile_serialization=False) is refused with how to re-save it.
 *
 * Tensors are strided views of their storages, checked to lie inside them; reading converts
 * float32, float64, float16, bfloat16 and the integer types to float32. Files are mapped, not
 * read, so a large file costs address space, not memory. */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

#define COHORT_TORCH_FILE_ERROR (cohort_torch_file_error_quark())
GQuark cohort_torch_file_error_quark(void);
typedef enum {
  COHORT_TORCH_FILE_ERROR_IO,
  COHORT_TORCH_FILE_ERROR_FORMAT,  /* not a torch.save file, damaged, over a cap */
  COHORT_TORCH_FILE_ERROR_REFUSED, /* an opcode or global torch.load(weights_only=True) refuses */
  COHORT_TORCH_FILE_ERROR_LEGACY,  /* the pre-1.6 format */
  COHORT_TORCH_FILE_ERROR_MISSING, /* a tensor that was asked for is not there */
  COHORT_TORCH_FILE_ERROR_SHAPE,   /* present with another shape */
  COHORT_TORCH_FILE_ERROR_DTYPE,   /* an element type Cohort does not convert */
} CohortTorchFileError;

typedef struct CohortTorchFile CohortTorchFile;

/* Opens a regular file and reads its state dict. Errors name the file. */
CohortTorchFile *cohort_torch_file_open(const char *path, GError **error);
/* The same on bytes in memory (which must outlive the result); `label` names them in errors. */
CohortTorchFile *cohort_torch_file_open_bytes(const guint8 *data, gsize size, const char *label,
                                              GError **error);
void cohort_torch_file_close(CohortTorchFile *f);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTorchFile, cohort_torch_file_close)

/* TRUE when the file's first bytes (3 or more) are a ZIP archive's or a legacy PyTorch
 * file's: what init_from opens with this reader rather than as safetensors. */
gboolean cohort_torch_file_sniff(const guint8 *head, gsize len);

/* The state dict's names in its order, NULL-terminated, owned by f. */
const char *const *cohort_torch_file_names(const CohortTorchFile *f);
/* Shape of `name`; returns its number of dimensions, or -1 when absent. */
int cohort_torch_file_shape(const CohortTorchFile *f, const char *name, int64_t shape[8]);
/* Where the state dict was in the file: "" at the top, "state_dict" or "model" inside a
 * training checkpoint. */
const char *cohort_torch_file_dict_path(const CohortTorchFile *f);

/* Reads `name` into dst as float32; it must have exactly `ndim` dims of `shape`. Errors name
 * the file, the tensor and both shapes, or the storage type that cannot be converted. */
gboolean cohort_torch_file_read_f32(CohortTorchFile *f, const char *name, int ndim,
                                    const int64_t *shape, float *dst, GError **error);

G_END_DECLS
