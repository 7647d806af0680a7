/* text_encoder: the caption phase of a run's set-up. The captions of the training (and
 * validation) images are read with the data (engine/model/data-source.h); here every distinct
 * caption, and the empty one that caption dropout and guidance use, gets its embedding from the
 * frozen text encoder, and the data sources get the embeddings (data/text-table.h), so no step
 * runs the encoder.
 *
 * Embeddings are cached in the workspace in the latent cache's journal (data/latent-cache.h:
 * appended record by record, a torn end cut on open, compacted to what the run uses), in
 * <cache folder>/text-train.bin and text-val.bin, one record per caption of 1 + max_text_tokens ×
 * D floats (the length, then the rows, zeros past it), keyed by SHA-256 of the encoder's
 * fingerprint (engine/models/text-encoder.h: encoder, weights' version, layer, max_text_tokens)
 * and the caption's UTF-8: a changed caption or encoder is another key, encoded anew, never
 * served stale.
 *
 *  - distributed_data_loading with several ranks: the distinct captions, in byte order, are cut
 *    round-robin (caption i to rank i mod world), each rank encodes the missing ones of its share
 *    into its own cache folder (cache/rank-r), then the shares go to every rank in one
 *    all-gather: N ranks hold exactly the embeddings one process makes;
 *  - without it: rank 0 encodes everything into cache/ while the others wait for the data (the
 *    set-up's rank-0-first order), then they find every caption in that cache. */
#pragma once

#include "engine/train/trainer-run.h"

G_BEGIN_DECLS

/* Embeds the captions of r->train and r->val (when it has one) as above, with the cache in
 * `cache_dir`, and gives each source its table; rank 0 logs the captions' summary and, per set,
 * "N distinct captions: E encoded, K from the cache". */
gboolean cohort_rank_run_encode_captions(CohortRankRun *r, const char *cache_dir, GError **error);

G_END_DECLS
