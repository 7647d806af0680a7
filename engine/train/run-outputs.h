/* What cohort-train reads and writes, for the one output rule (engine/base/outputs.h): the
 * export's files must be none of the run's inputs (init_from, teacher_from, adapter_from,
 * vae_from), and --sample's image none of the saved model's files. */
#pragma once

#include "engine/base/outputs.h"
#include "engine/config/config.h"

G_BEGIN_DECLS

/* `path` as an input: the file itself, or for a folder the files Cohort reads from a model,
 * checkpoint, adapter, VAE or tokenizer folder (and from its adapter/, vae/ and transformer/
 * subfolders). */
void cohort_outputs_add_model_input(CohortOutputs *io, const char *path);

/* The export's files in `cfg`'s workspace against the run's inputs: FALSE with the refusal
 * ("workspace_dir ...: model.safetensors (the export) is ..., one of the inputs"). Before
 * anything is prepared, so a refusal costs nothing. */
gboolean cohort_run_check_outputs(const CohortConfig *cfg, GError **error);

G_END_DECLS
