/* Text embeddings of captions held for training (text_encoder): for each distinct caption the
 * encoder's hidden states, which a data source copies into batches (engine/model/data-source.h).
 * Read-only once filled, so loader threads look captions up at once. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  int len;       /* tokens, 0 .. max_tokens (0: the empty caption) */
  float *values; /* [len, width]; NULL when len is 0 */
} CohortTextRow;

typedef struct {
  int width;        /* D */
  int max_tokens;   /* M */
  GHashTable *rows; /* caption (UTF-8) → CohortTextRow */
} CohortTextTable;

CohortTextTable *cohort_text_table_new(int width, int max_tokens);
void cohort_text_table_free(CohortTextTable *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTextTable, cohort_text_table_free)

/* Adds `caption`'s embedding (len <= max_tokens rows of width floats; `values` taken, NULL when
 * len is 0), replacing any earlier one. */
void cohort_text_table_insert(CohortTextTable *t, const char *caption, int len, float *values);
/* The embedding of `caption`, or NULL when it is not in the table. */
const CohortTextRow *cohort_text_table_lookup(const CohortTextTable *t, const char *caption);

G_END_DECLS
