/* state.json of a checkpoint: the training position and the config, as text and back. */
#pragma once

#include <glib.h>

#include "engine/progress/workspace.h"

G_BEGIN_DECLS

/* What state.json says besides the training position. */
typedef struct {
  gboolean has_ema;
  gboolean has_optim;
  char *model_sha256;
  char *config_json; /* the config object as JSON text */
  /* A checkpoint of only what learns (version 2): where its base and starting adapter were
   * read from, absolute (NULL when the base came from the seed, or without adapter_from). */
  char *base_path;
  char *adapter_path;
} CohortStateExtras;

void cohort_state_extras_clear(CohortStateExtras *x);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(CohortStateExtras, cohort_state_extras_clear)

/* The text of state.json. */
char *cohort_state_to_json(const CohortConfig *cfg, const CohortTrainState *st, const char *sha,
                           gboolean has_ema, gboolean has_optim, GError **error);

/* Parses and validates state.json text (`path` for messages): every field's type and range.
 * Fills *st and *x (clear it with cohort_state_extras_clear). */
gboolean cohort_state_parse(const char *text, gsize len, const char *path, CohortTrainState *st,
                            CohortStateExtras *x, GError **error);

G_END_DECLS
