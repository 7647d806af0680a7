/* A Hugging Face folder's weights: one model.safetensors, or shards that
 * model.safetensors.index.json lists ({"metadata": {"total_size": N}, "weight_map": {tensor:
 * shard file}}), as transformers' save_pretrained writes them above max_shard_size. Reading
 * checks the index against the shards (a shard it names that is missing, a tensor in a shard the
 * index maps elsewhere or to no shard, a tensor in two shards, a name that leaves the folder) so
 * a tensor comes from exactly one place; writing cuts the tensors into shards in their order. */
#pragma once

#include <glib.h>

#include "engine/model/safetensors.h"

G_BEGIN_DECLS

#define COHORT_HF_INDEX_FILE   "model.safetensors.index.json"
#define COHORT_HF_WEIGHTS_FILE "model.safetensors"

typedef struct CohortHfWeights CohortHfWeights;

/* Opens the weights at `path`: a folder (its model.safetensors when there is one, else its
 * index), an index file, or one .safetensors file. Errors name the file and what is wrong with
 * it. */
CohortHfWeights *cohort_hf_weights_open(const char *path, GError **error);
void cohort_hf_weights_close(CohortHfWeights *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortHfWeights, cohort_hf_weights_close)

/* Every tensor's name (index order, or the file's), NULL-terminated, owned by `w`. */
const char *const *cohort_hf_weights_names(const CohortHfWeights *w);
/* The file holding tensor `name`, or NULL; *path (may be NULL) gets its path, owned by `w`. */
const CohortStFile *cohort_hf_weights_find(const CohortHfWeights *w, const char *name,
                                           const char **path);
/* The file a checkpoint records as the base (its sha256): model.safetensors or the index. */
const char *cohort_hf_weights_main_file(const CohortHfWeights *w);
/* The number of files read (1 without an index). */
guint cohort_hf_weights_n_files(const CohortHfWeights *w);

/* The file cohort_hf_weights_open reads first for `path` (a folder's model.safetensors, else
 * its index when present, else model.safetensors); `path` itself when it is a file. g_free. */
char *cohort_hf_weights_main_path(const char *path);

/* Writes `entries` into folder `dir`: model.safetensors when their data take at most
 * `max_bytes` (F32, 4 bytes a value), else shards model-0000i-of-0000n.safetensors of at most
 * max_bytes each (a tensor larger than that alone in its shard), in the entries' order, and
 * model.safetensors.index.json; each file atomically. What an earlier export of the other kind
 * left (model.safetensors, an index, shards of this naming that the new index does not list)
 * is removed afterwards. `metadata` goes into every file. *n_shards (may be NULL) gets the
 * number of shards, 0 for one file. */
gboolean cohort_hf_weights_write(const char *dir, const CohortStEntry *entries, guint n,
                                 guint64 max_bytes, GHashTable *metadata, guint *n_shards,
                                 GError **error);

/* An export's `dir`/model.safetensors cut into shards (cohort_hf_weights_write, its metadata
 * kept) when it is larger than `max_bytes`; else any index and shards an earlier export left
 * there are removed. *n_shards (may be NULL) gets the number of shards, 0 for one file. */
gboolean cohort_hf_weights_reshard(const char *dir, guint64 max_bytes, guint *n_shards,
                                   GError **error);

G_END_DECLS
