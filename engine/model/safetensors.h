/* The .safetensors format: 8-byte little-endian header length, a JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
 * then the raw little-endian data. Reading checks every offset, shape and dtype against the
 * file so a truncated or forged file is an error, never a crash. */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

#define COHORT_SAFETENSORS_ERROR (cohort_safetensors_error_quark())
GQuark cohort_safetensors_error_quark(void);
typedef enum {
  COHORT_SAFETENSORS_ERROR_IO,
  COHORT_SAFETENSORS_ERROR_FORMAT,  /* bad header, offsets outside the file, truncated */
  COHORT_SAFETENSORS_ERROR_MISSING, /* a tensor that was asked for is not there */
  COHORT_SAFETENSORS_ERROR_SHAPE,   /* present with another shape */
  COHORT_SAFETENSORS_ERROR_DTYPE,   /* a dtype we cannot convert to F32 */
} CohortSafetensorsError;

/* One tensor to write: float32 data of `ndim` dims. With `int64` set the values (integers, a
 * counter such as BatchNorm's num_batches_tracked) are written as I64, rounded to nearest. */
typedef struct {
  const char *name;
  const float *data;
  int ndim;
  int64_t shape[4];
  gboolean int64;
  /* When set, the values are these bfloat16 bits (a frozen_dtype bf16 base), written widened
   * to F32 (exactly: a bf16 is the upper half of its float32); `data` is then unused. */
  const uint16_t *bf16;
} CohortStEntry;

/* Writes F32 (and I64) tensors and string metadata (may be NULL) to `path` atomically: a temporary
 * file in the same folder, fsync, rename. */
gboolean cohort_safetensors_write(const char *path, const CohortStEntry *entries, guint n,
                                  GHashTable *metadata, GError **error);

/* The bytes cohort_safetensors_write puts before the tensor data of `entries` (the header's
 * length and the header, padded to 8 bytes), for a file that several processes write in
 * pieces (ZeRO's checkpoints): entry i's data then starts after the prefix and the data of
 * entries 0 … i − 1 (4 bytes a value, 8 for int64 entries). Entries' data are not read. NULL
 * with an error naming `path` on the writer's conditions (a name given twice, a reserved name,
 * more than 4 dimensions). */
GBytes *cohort_safetensors_prefix(const char *path, const CohortStEntry *entries, guint n,
                                  GHashTable *metadata, GError **error);
/* Writes entry e's data at fd's position, as cohort_safetensors_write does. FALSE with errno
 * set. */
gboolean cohort_safetensors_write_entry(int fd, const CohortStEntry *e);

typedef struct CohortStFile CohortStFile;

/* Opens and validates the header (all offsets inside the file, sizes match dtype × shape). */
CohortStFile *cohort_safetensors_open(const char *path, GError **error);
void cohort_safetensors_close(CohortStFile *f);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortStFile, cohort_safetensors_close)

gboolean cohort_safetensors_has(const CohortStFile *f, const char *name);
/* Names in file order, NULL-terminated, owned by f. */
const char *const *cohort_safetensors_names(const CohortStFile *f);
/* Shape of `name`; returns ndim, or -1 when absent. */
int cohort_safetensors_shape(const CohortStFile *f, const char *name, int64_t shape[8]);
/* Metadata value or NULL. */
const char *cohort_safetensors_metadata(const CohortStFile *f, const char *key);
/* All the metadata (string to string), owned by f. */
GHashTable *cohort_safetensors_metadata_all(const CohortStFile *f);

/* Reads `name` into dst as float32 (F32, F16, BF16 and I64 convert; I64 is exact up to 2^24). The
 * tensor must have exactly `ndim` dims of `shape`; errors name the file, the tensor, the expected
 * and found shape. */
gboolean cohort_safetensors_read_f32(const CohortStFile *f, const char *name, int ndim,
                                     const int64_t *shape, float *dst, GError **error);

/* Values [first, first + count) of `name` (in its row-major order) into dst as float32, with
 * the same checks and conversions: a rank of a ZeRO run reads only its pieces. */
gboolean cohort_safetensors_read_f32_range(const CohortStFile *f, const char *name, int ndim,
                                           const int64_t *shape, guint64 first, guint64 count,
                                           float *dst, GError **error);

G_END_DECLS
