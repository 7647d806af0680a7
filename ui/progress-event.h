/* The window's one reader of progress events (docs/progress-protocol.md): typed access to an
 * event's members by their protocol names (engine/progress/protocol.h). A member that is
 * absent, or not of the type asked for, reads as the fallback: the protocol leaves unknown
 * figures out and tells readers to ignore what they do not understand, so a reader never
 * fails on a member. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "engine/progress/protocol.h"

G_BEGIN_DECLS

/* The event's name (COHORT_EVENT_*), or "" when `ev` has no string `event`. */
const char *cohort_event_name(JsonObject *ev);

/* Whether `ev` is the event named `name`. */
gboolean cohort_event_is(JsonObject *ev, const char *name);

/* A JSON number (integer or not) as a double; `fallback` for anything else. */
double cohort_event_number(JsonObject *ev, const char *field, double fallback);

/* A JSON number as an integer (a fraction is cut off, a huge value clamped); `fallback` for
 * anything else. */
gint64 cohort_event_int(JsonObject *ev, const char *field, gint64 fallback);

/* A JSON string, owned by `ev`; `fallback` for anything else. */
const char *cohort_event_text(JsonObject *ev, const char *field, const char *fallback);

/* A JSON true or false; `fallback` for anything else. */
gboolean cohort_event_flag(JsonObject *ev, const char *field, gboolean fallback);

/* A JSON array, owned by `ev`; NULL for anything else. */
JsonArray *cohort_event_list(JsonObject *ev, const char *field);

G_END_DECLS
