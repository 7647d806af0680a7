/* The .safetensors file of a model's tensor groups (checkpoints: the parameters, the buffers,
 * "ema.*", "optim.*"; exports: the parameters and the buffers), written or read in pieces, so
 * that the ranks of a ZeRO stage 2 or 3 run each write and read only their shard's values:
 * the file is byte for byte the one cohort_safetensors_write makes of the whole model, so it
 * is an ordinary file whatever the number of ranks that wrote it, and any stage resumes it.
 *
 * A group is the parameter table under a name prefix. Its tensors lie back to back in table
 * order, so the flat vector's values [offset, offset + count) of a group are one byte range of
 * the file. Nothing here communicates: the trainer orders the ranks' writes (rank 0 creates
 * the file, then every rank writes its pieces). */
#pragma once

#include <glib.h>

#include "engine/model/model.h"
#include "engine/model/safetensors.h"

G_BEGIN_DECLS

typedef struct CohortGroupFile CohortGroupFile;

/* The layout of `path` for model `m`: its parameters under each of `prefixes` (NULL-terminated;
 * the first is "" and the model's buffers follow it, as cohort_checkpoint_save and
 * cohort_model_save order them) and `metadata` (may be NULL; "format": "pt" is added unless
 * given). NULL with an error when a name is not allowed. */
CohortGroupFile *cohort_group_file_new(const CohortModel *m, const char *const *prefixes,
                                       GHashTable *metadata, const char *path, GError **error);
void cohort_group_file_free(CohortGroupFile *gf);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortGroupFile, cohort_group_file_free)

/* Creates the file (replacing one of that name) at its full size with the header and the
 * buffers (`buffers`: host memory laid out as the buffer table) in place; the groups' values
 * are left for cohort_group_file_write. */
gboolean cohort_group_file_create(const CohortGroupFile *gf, const float *buffers, GError **error);

/* Opens the created file for writing pieces; -1 with an error. */
int cohort_group_file_open(const CohortGroupFile *gf, GError **error);
/* Writes the flat vector's values [offset, offset + count) of group `group` (an index into
 * the prefixes) from `src` (host memory) to their place in the file open as `fd`. */
gboolean cohort_group_file_write(const CohortGroupFile *gf, int fd, guint group, size_t offset,
                                 size_t count, const float *src, GError **error);
/* fsync and close of `fd`; FALSE with an error when the data may not be on disk. */
gboolean cohort_group_file_close(const CohortGroupFile *gf, int fd, GError **error);

/* Reads the flat vector's values [offset, offset + count) of the group named `prefix` from
 * `f` (any safetensors file holding the model's tensors under that prefix, whatever its
 * layout) into `dst` (host memory), tensor by tensor, with the shapes checked. */
gboolean cohort_group_file_read(const CohortModel *m, const CohortStFile *f, const char *prefix,
                                size_t offset, size_t count, float *dst, GError **error);

G_END_DECLS
