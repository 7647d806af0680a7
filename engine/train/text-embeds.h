/* text_encoder: the caption phase of a run's set-up. The captions of the training (and
 * validation) images are read with the data (engine/model/data-source.h); here every distinct
 * caption, and the empty one that caption dropout and guidance use, goes through the frozen
 * text encoder once, and the data sources get the embeddings (data/text-table.h), so no step
 * runs the encoder. Every rank encodes every caption (the encoder is deterministic, so N ranks
 * hold what one process holds). */
#pragma once

#include "engine/train/trainer-run.h"

G_BEGIN_DECLS

/* Encodes the captions of r->train and r->val (when it has one) with cfg->text_encoder on the
 * rank's backend and gives each source its table; logs the captions' summary (where they came
 * from, what is missing) on rank 0. */
gboolean cohort_rank_run_encode_captions(CohortRankRun *r, GError **error);

G_END_DECLS
