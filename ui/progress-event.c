#include "ui/progress-event.h"

/* The member's value node when it holds a value of `type`, else NULL. */
static JsonNode *value_of(JsonObject *ev, const char *field, GType type)
{
  JsonNode *n = json_object_get_member(ev, field);
  return n != NULL && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == type ? n : NULL;
}

const char *cohort_event_name(JsonObject *ev)
{
  return cohort_event_text(ev, COHORT_FIELD_EVENT, "");
}

gboolean cohort_event_is(JsonObject *ev, const char *name)
{
  return g_str_equal(cohort_event_name(ev), name);
}

double cohort_event_number(JsonObject *ev, const char *field, double fallback)
{
  JsonNode *n = value_of(ev, field, G_TYPE_INT64);
  if (n == NULL)
    n = value_of(ev, field, G_TYPE_DOUBLE);
  return n != NULL ? json_node_get_double(n) : fallback;
}

gint64 cohort_event_int(JsonObject *ev, const char *field, gint64 fallback)
{
  JsonNode *n = value_of(ev, field, G_TYPE_INT64);
  if (n != NULL)
    return json_node_get_int(n);
  n = value_of(ev, field, G_TYPE_DOUBLE);
  if (n == NULL)
    return fallback;
  double v = json_node_get_double(n);
  /* 2^63 is exactly representable; anything at or past it (or NaN) would overflow the cast. */
  if (!(v > -9223372036854775808.0))
    return G_MININT64;
  return v < 9223372036854775808.0 ? (gint64)v : G_MAXINT64;
}

const char *cohort_event_text(JsonObject *ev, const char *field, const char *fallback)
{
  JsonNode *n = value_of(ev, field, G_TYPE_STRING);
  return n != NULL ? json_node_get_string(n) : fallback;
}

JsonArray *cohort_event_list(JsonObject *ev, const char *field)
{
  JsonNode *n = json_object_get_member(ev, field);
  return n != NULL && JSON_NODE_HOLDS_ARRAY(n) ? json_node_get_array(n) : NULL;
}

gboolean cohort_event_flag(JsonObject *ev, const char *field, gboolean fallback)
{
  JsonNode *n = value_of(ev, field, G_TYPE_BOOLEAN);
  return n != NULL ? json_node_get_boolean(n) : fallback;
}
