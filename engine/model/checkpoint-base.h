/* The base of a checkpoint that holds only what learns (finetune lora or frozen,
 * docs/finetuning.md#checkpoints). Such a checkpoint (state.json version 2) records where its
 * base came from instead of holding it: the sha256 of the file init_from read (base_path,
 * base_sha256; none for a base made from the seed) and the sha256 of the frozen part of the
 * parameter vector as the run started (frozen_sha256). Loading it takes two steps: rebuild
 * the base here (the family's initialisation from the checkpoint's seed, then init_from's
 * file, whose digest must match), then cohort_checkpoint_load, which checks frozen_sha256
 * against the rebuilt base and reads the learning part over it. */
#pragma once

#include <glib.h>

#include "engine/model/model.h"
#include "engine/progress/workspace.h"

G_BEGIN_DECLS

/* Lowercase hex sha256 of the frozen part of the parameter vector, [n_trainable, n_params),
 * as float32 bytes in host order (downloaded in pieces when the model is not on the host). */
char *cohort_frozen_sha256(const CohortModel *m);

/* The file an import of `init_from` reads (a folder's weights file; builtin: resolved):
 * what base_sha256 digests. g_free it. */
char *cohort_base_file(const CohortModel *m, const char *init_from);

/* Right after a fresh start from `cfg` (the seed, init_from and adapter_from applied): fills
 * st->base_sha256 and st->frozen_sha256 when the run's checkpoints are to hold only what
 * learns (finetune lora or frozen, and not student_init teacher_layers, whose base comes in
 * part from the teacher), clears them otherwise. */
gboolean cohort_checkpoint_base_init(const CohortModel *m, const CohortConfig *cfg,
                                     CohortTrainState *st, GError **error);

/* For a checkpoint folder `dir` of only what learns: puts its base into `m`, which must be
 * made from the checkpoint's config: the family's initialisation from the checkpoint's seed,
 * then, when the checkpoint's base is a file, the file named by `init_from` (the config in use's,
 * which may name a base that moved; NULL takes the checkpoint's base_path), refused unless its
 * sha256 is base_sha256. A base file with init_from "" is refused, and so is an init_from for
 * a checkpoint whose base came from the seed.
 * Nothing to do for a checkpoint of the whole model. Errors are one line naming the
 * checkpoint, the base file, and the expected and found digests. */
gboolean cohort_checkpoint_rebuild_base(const char *dir, CohortModel *m, const char *init_from,
                                        GError **error);

G_END_DECLS
