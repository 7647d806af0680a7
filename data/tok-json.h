/* Reading tokenizer.json's parts (internal to data/): small helpers over json-glib nodes and
 * the readers of each component. Every refusal names the file, the field (a JSON path such
 * as pre_tokenizer.pretokenizers[0].pattern) and what is allowed. */
#pragma once

#include <json-glib/json-glib.h>

#include "data/bpe-private.h"

/* The member's string value, or NULL when it is missing, null or not a string. */
const char *tok_json_string(JsonObject *o, const char *key);
/* A boolean member: 1 true, 0 false, -1 missing or null; -2 another type. */
int tok_json_bool(JsonObject *o, const char *key);
/* An object member, or NULL. */
JsonObject *tok_json_object(JsonObject *o, const char *key);
gboolean tok_json_is_null(JsonObject *o, const char *key);

/* Refuses members of `o` that are not in `allowed` (NULL-terminated), naming `where`. */
gboolean tok_json_only(Build *b, JsonObject *o, const char *where, const char *const *allowed);

/* The components; `node` may be NULL or null where the field is optional. */
gboolean tok_read_normalizer(Build *b, CohortTokenizer *t, JsonNode *node);
gboolean tok_read_pre_tokenizer(Build *b, CohortTokenizer *t, JsonNode *node);
gboolean tok_read_decoder(Build *b, CohortTokenizer *t, JsonNode *node);
/* The post-processor needs the tokens: call it after the vocabulary and added tokens. */
gboolean tok_read_post_processor(Build *b, CohortTokenizer *t, JsonNode *node);
