/* How many training windows text through a tokenizer gives, before the run tokenizes it: what
 * --explain (and its forecast of steps) counts. Byte-level text and token shards count their
 * windows exactly without this (cohort_data_source_count). */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

/* For data_format text with a tokenizer (cohort_config_tokenizer_path): TRUE with *applies set
 * and *n the windows of seq_len inputs of train_data, exact (*estimated FALSE) when the
 * workspace's token cache already holds its tokens (a run of it tokenized them), else
 * estimated from the tokens per byte of its first MiB (*estimated TRUE), or, while the
 * tokenizer cannot be read (a folder the user has yet to bring), as one token per byte
 * (*estimated TRUE). *applies FALSE (and TRUE returned) for any other data. FALSE with an error
 * when the text cannot be read or encoded (the run would fail the same way). */
gboolean cohort_explain_text_windows(const CohortConfig *cfg, gboolean *applies, guint64 *n,
                                     gboolean *estimated, GError **error);

G_END_DECLS
