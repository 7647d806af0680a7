/* What the window says under the tokenizer setting: which tokenizer the config uses, found
 * where (the tokenizer key, or the init_from folder's files), or that text is read as bytes. */
#pragma once

#include "engine/config/config.h"

G_BEGIN_DECLS

/* A translated line for `cfg`, or NULL when the config reads no text (token shards, images). */
char *cohort_tokenizer_hint(const CohortConfig *cfg);

G_END_DECLS
