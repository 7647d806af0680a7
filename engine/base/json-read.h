/* The one JSON reader of the engine: strict RFC 8259, checked before json-glib sees the text.
 *
 * json-glib 1.6 is lenient in ways that change meaning (a second value after the first is
 * ignored, "\u0000" ends a string early, integers beyond 64 bits wrap, the last of repeated
 * keys wins) and it recurses once per nesting level, so deep input overflows the stack. Every
 * JSON text Cohort reads (configs and presets, state.json, safetensors headers, progress
 * events) goes through cohort_json_parse_strict instead, so json-glib only ever sees valid,
 * shallow text. */
#pragma once

#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* Nesting allowed when the caller passes 0: arrays and objects, the outermost counting 1. */
#define COHORT_JSON_MAX_DEPTH 64

#define COHORT_JSON_ERROR (cohort_json_error_quark())
GQuark cohort_json_error_quark(void);
typedef enum {
  COHORT_JSON_ERROR_SYNTAX,        /* not one RFC 8259 value, or a value Cohort cannot hold */
  COHORT_JSON_ERROR_DEPTH,         /* nested deeper than the limit */
  COHORT_JSON_ERROR_DUPLICATE_KEY, /* an object names a key twice */
} CohortJsonError;

/* Parses `text` (`len` bytes, or up to its NUL when `len` is negative) as exactly one JSON
 * value followed by nothing but whitespace. Refused, with a one-line error
 * "SOURCE: not valid JSON: LINE:COLUMN: what is wrong" (columns count characters, from 1):
 *   - anything RFC 8259 does not allow: comments, single quotes, leading zeros, hexadecimal,
 *     NaN/Infinity, a leading '+', trailing commas, a byte order mark, raw control
 *     characters in strings, text after the value, bytes that are not UTF-8;
 *   - what RFC 8259 allows but Cohort cannot hold faithfully: "\u0000" (C strings would end
 *     there), lone UTF-16 surrogates, integers outside the 64-bit range, numbers that
 *     overflow a double;
 *   - nesting deeper than `max_depth` (0 = COHORT_JSON_MAX_DEPTH), COHORT_JSON_ERROR_DEPTH;
 *   - an object that names a key twice (keys compared after unescaping),
 *     COHORT_JSON_ERROR_DUPLICATE_KEY: "SOURCE: key "NAME" is given more than once (at
 *     LINE:COLUMN); allowed: each key once".
 * `source` names the input in messages (a file path; NULL = "JSON"). The check runs in
 * linear time without recursion. Returns a new node, json_node_unref it. */
JsonNode *cohort_json_parse_strict(const char *text, gssize len, const char *source,
                                   guint max_depth, GError **error);

G_END_DECLS
