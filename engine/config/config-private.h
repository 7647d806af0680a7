/* Private to the config part (engine/config*.c): where a key's value lives in CohortConfig,
 * and the helpers that check, convert and store one key's value, shared by the JSON reader
 * and writer (config-json.c), --set (config-text.c), validation (config.c) and migration
 * (config-migrate.c). A value is checked as a JsonNode whether it came from a file or from
 * --set text, so both paths give the same messages. */
#pragma once

#include <json-glib/json-glib.h>

#include "engine/config/config-keys.h"
#include "engine/config/config.h"

G_BEGIN_DECLS

#define FIELD(cfg, key, type)  ((type *)((char *)(cfg) + cohort_config_key_offset(key)))
#define CFIELD(cfg, key, type) ((const type *)((const char *)(cfg) + cohort_config_key_offset(key)))

/* Config files are small; a cap keeps a mistaken path (a data set) from being slurped. */
#define MAX_CONFIG_BYTES (16 * 1024 * 1024)

/* `source` for messages, "config" when there is none. */
const char *config_src(const char *source);

/* A node as messages show it: JSON text, escaped and cut short. g_free it. */
char *config_node_text(JsonNode *node);
JsonNode *config_string_node(const char *s);
/* The node --set text means for `key` (numbers, true/false, choices, "0,1,2" lists). */
JsonNode *config_text_to_node(const CohortConfigKey *key, const char *text);
gboolean config_is_int_node(JsonNode *node);
/* Checks `node` against the key's type and bounds; the error names the key, the value
 * (`typed`, when given, is the text the user typed, shown instead) and what is allowed. */
gboolean config_check_typed(const CohortConfigKey *key, JsonNode *node, const char *typed,
                            const char *source, GError **error);
gboolean config_check_node(const CohortConfigKey *key, JsonNode *node, const char *source,
                           GError **error);
/* Stores a node that config_check_node accepted. */
void config_store_node(CohortConfig *cfg, const CohortConfigKey *key, JsonNode *node);
/* The key's value as a node. */
JsonNode *config_value_node(const CohortConfig *cfg, const CohortConfigKey *key);
/* A double in its shortest round-trip form, with ".0" on whole numbers. */
void config_append_double(GString *out, double v);

/* config.c: the unknown-key error, with a suggestion of the closest key. */
void config_unknown_key_error(const char *source, const char *name, GError **error);

/* config-migrate.c: a key's new name when `name` is an older spelling, else NULL. */
const char *config_renamed_key(const char *name);
/* Why `name`, a key of the seeds, means nothing in Cohort (one clause), or NULL. */
const char *config_meaningless_key(const char *name);
/* The tables of older spellings and refused seed keys, as Markdown (for docs/config.md). */
void config_append_spellings_doc(GString *out);
/* Brings a parsed config object of any older version to COHORT_CONFIG_VERSION. */
gboolean config_migrate(JsonObject *obj, const char *source, GError **error);

G_END_DECLS
