/* JSON text from json-glib nodes, with numbers written so any JSON reader takes them.
 *
 * json-glib 1.6 (Debian bookworm) writes some doubles as invalid JSON ("1e-08.0"), so the
 * engine's events and plans are written here instead: doubles in their shortest form that
 * reads back to the same value, non-finite numbers as null. */
#pragma once

#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* `pretty`: two-space indentation, one member per line; else one line. */
char *cohort_json_to_string(JsonNode *node, gboolean pretty);

/* Appends `value` in its shortest round-trip form (null when not finite). */
void cohort_json_append_double(GString *out, double value);

/* Appends `text` as a JSON string literal (quotes, escapes). Bytes of `text` that are not
 * UTF-8 (a file name from a foreign system) are written as cohort_utf8_escape writes them, so
 * the output is always valid JSON. */
void cohort_json_append_string(GString *out, const char *text);

/* `bytes` as valid UTF-8 text: a copy when it is UTF-8 already; else every byte that is not
 * part of a valid UTF-8 sequence becomes the four characters \xHH (two lowercase hex
 * digits), as Python's "backslashreplace" writes it. For names that go into JSON, messages
 * and logs. g_free the result. */
char *cohort_utf8_escape(const char *bytes);

G_END_DECLS
