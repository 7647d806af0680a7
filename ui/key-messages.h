/* The window's words about config keys, translated: a key's help and what it allows, and why a
 * value was refused, naming the key by its label (key-labels.h) rather than its config name.
 * The engine's own messages are English and name keys; they are what the command line shows,
 * and the window falls back to them only for rules it does not know. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

/* The key's label, or its config name when the layout has none. */
const char *cohort_key_display_name(const char *key);

/* The key's help sentence in the window's language. */
const char *cohort_key_help(const CohortConfigKey *key);

/* What the key allows, in the window's language ("1 to 96", "a number above 0 and below 1",
 * "text (.txt, .jsonl), tokens (llm.c .bin)"). */
char *cohort_key_allowed(const CohortConfigKey *key);

/* The message for `typed`, refused for `key` with the engine's `engine_error` while the rest
 * of the config is `cfg`: "<label>: “xyz” is not a whole number; allowed: 1 to 65536". */
char *cohort_key_refusal(const CohortConfigKey *key, const char *typed, const CohortConfig *cfg,
                         const GError *engine_error);

G_END_DECLS
