/* Training and validation data of any format, as numbered examples that fill CohortBatch rows:
 * token windows (byte-level text, llm.c shards) for language models; images for image
 * models. The trainer draws example numbers from the DistributedSampler and never looks at
 * what an example holds. */
#pragma once

#include <glib.h>

#include "engine/model/batch.h"
#include "engine/config/config.h"
#include "data/captions.h"
#include "data/latent-set.h"
#include "data/text-table.h"

G_BEGIN_DECLS

typedef struct CohortDataSource CohortDataSource;

/* Opens `path` (a config path; "builtin:" resolved here) in cfg->data_format, with a
 * prepared-data index or cache in `cache_dir` (may be NULL). Errors name the file. */
CohortDataSource *cohort_data_source_open(const CohortConfig *cfg, const char *path,
                                          const char *cache_dir, GError **error);
/* Like cohort_data_source_open, for llm.c token shards whatever cfg->data_format says: text
 * that a tokenizer has turned into shards (engine/train/text-tokens.h). */
CohortDataSource *cohort_data_source_open_tokens(const CohortConfig *cfg, const char *path,
                                                 const char *cache_dir, GError **error);
/* Chat data (data_format chat): the cache file of tokenized conversations
 * (data/chat-data.h, made by engine/train/text-tokens.h), one conversation per window of
 * seq_len, padded with id 0; targets that are not the assistant's are ignored. */
CohortDataSource *cohort_data_source_open_chat(const CohortConfig *cfg, const char *file,
                                               GError **error);
/* Whether some targets count in no loss (chat data): the trainer then divides each step's
 * loss by the step's counted targets (engine/model/batch.h's loss_norm). */
gboolean cohort_data_source_ignores_targets(const CohortDataSource *s);
/* How many targets of example `index` count in the loss: seq_len for text and tokens, the
 * assistant's for chat, 1 for images. */
guint64 cohort_data_source_counted(const CohortDataSource *s, guint64 index);
/* Latents as data (vae_from): the source takes `table` (data/latent-set.h) and serves its
 * latents as images [channels, size, size] with their labels. Training batches with the
 * config's augment "flip" take the mirrored latent when the draw of (seed, epoch, index) says
 * so (the table must then hold both); evaluation batches never do. */
CohortDataSource *cohort_data_source_new_latents(const CohortConfig *cfg, CohortLatentTable *table);
/* The captions (data/captions.h) of a latent source's images, read from `folder`, the image
 * folder its table was encoded from, matched by path (table->paths): the source then has
 * captions as an image source opened with text_encoder does, and its batches carry a latent
 * and its caption's embeddings (cohort_data_source_set_text) per row. FALSE with an error
 * naming the folder when the captions cannot be read or an image has gone since. */
gboolean cohort_data_source_read_latent_captions(CohortDataSource *s, const CohortConfig *cfg,
                                                 const char *folder, GError **error);
void cohort_data_source_free(CohortDataSource *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortDataSource, cohort_data_source_free)

/* How many examples there are. */
guint64 cohort_data_source_count(const CohortDataSource *s);

/* Classes of image data (0 for a flat folder and for token data), their names in index order
 * (NULL for token data), and how many bad images skip_bad_images left out. */
int cohort_data_source_num_classes(const CohortDataSource *s);
const char *const *cohort_data_source_class_names(const CohortDataSource *s);
guint cohort_data_source_num_skipped(const CohortDataSource *s);
/* Why skipped file `i` (< num_skipped) was left out: one line naming it. */
const char *cohort_data_source_skipped_reason(const CohortDataSource *s, guint i);

/* Captions (image data opened with text_encoder set; data/captions.h): whether the source has
 * them, the folder's captions (NULL without), and the caption example `index` trains on in
 * `epoch` (a new string): "" with probability cfg_dropout in training (epoch >= 0; drawn from
 * the example's own stream, so N ranks draw what one process draws), the caption itself in
 * evaluation (epoch < 0). */
gboolean cohort_data_source_has_captions(const CohortDataSource *s);
const CohortCaptions *cohort_data_source_captions(const CohortDataSource *s);
char *cohort_data_source_caption(const CohortDataSource *s, guint64 index, gint64 epoch);
/* Gives the source the embeddings of its captions (`table`, taken; it must hold every caption
 * the source can serve and ""): its batches then carry them (CohortBatch's text). */
void cohort_data_source_set_text(CohortDataSource *s, CohortTextTable *table);

/* A batch with room for `capacity` rows of the shape this data gives. */
CohortBatch *cohort_data_source_batch_new(const CohortDataSource *s, int capacity);

/* Fills row `row` of `b` with example `index` (< count) and records the index in
 * b->example_ids; several threads may call it at once for different batches. Images are
 * augmented (the config's augment) as a function of (seed, b->epoch, index); an evaluation
 * batch (b->epoch < 0) is never augmented. FALSE with an
 * error naming the file and offset when token data changed under the run and a token is now
 * outside the vocabulary (data/dataset.h checks every window). */
gboolean cohort_data_source_load(const CohortDataSource *s, CohortBatch *b, int row, guint64 index,
                                 GError **error);

G_END_DECLS
