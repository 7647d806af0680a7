/* Comparing a run record with the progress stream it was fed (header-only, tests only):
 * events.jsonl lines against stream lines, and TensorBoard event files (read with
 * tests/tb-reader.h) against the scalars the documented tag rules give for the stream. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#include "tb-reader.h"

/* The object of one line of JSON (a new reference). */
static inline JsonObject *obj_of(const char *json)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) node = json_from_string(json, &error);
  g_assert_no_error(error);
  return json_object_ref(json_node_get_object(node));
}

/* The lines of a file that must end with '\n' (no torn last line). */
static inline char **read_lines(const char *path)
{
  g_autofree char *text = NULL;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, &error));
  g_assert_no_error(error);
  g_assert_true(*text == '\0' || g_str_has_suffix(text, "\n"));
  char **lines = g_strsplit(text, "\n", -1);
  /* The empty string after the last '\n'. */
  guint n = g_strv_length(lines);
  g_assert_cmpstr(lines[n - 1], ==, "");
  g_free(lines[n - 1]);
  lines[n - 1] = NULL;
  return lines;
}

/* Every events.jsonl line is the stream's line with ,"run_id":"…" before its closing brace
 * (exactly: same bytes otherwise), or the stream's line itself when the event carries the
 * run id already (the engine's `start` does). */
static inline void check_events_equal_stream(char **stream, char **events, const char *const *ids)
{
  g_assert_cmpuint(g_strv_length(events), ==, g_strv_length(stream));
  for (guint i = 0; stream[i]; i++) {
    g_assert_true(g_str_has_suffix(stream[i], "}"));
    g_autoptr(JsonObject) ev = obj_of(stream[i]);
    const char *has = json_object_get_string_member_with_default(ev, "run_id", NULL);
    if (has) {
      g_assert_cmpstr(has, ==, ids[i]);
      g_assert_cmpstr(events[i], ==, stream[i]);
      continue;
    }
    g_autofree char *head = g_strndup(stream[i], strlen(stream[i]) - 1);
    g_autofree char *want = g_strdup_printf("%s,\"run_id\":\"%s\"}", head, ids[i]);
    g_assert_cmpstr(events[i], ==, want);
  }
}

/* Every member of `o` that is a JSON number, but those in `skip`, as `prefix``name`. */
static inline void add_numbers(TbrEvent *e, JsonObject *o, const char *prefix,
                               const char *const *skip)
{
  g_autoptr(GList) names = json_object_get_members(o);
  for (GList *l = names; l; l = l->next) {
    JsonNode *n = json_object_get_member(o, l->data);
    if (g_strv_contains(skip, l->data) || !JSON_NODE_HOLDS_VALUE(n))
      continue;
    GType t = json_node_get_value_type(n);
    if (t == G_TYPE_INT64 || t == G_TYPE_DOUBLE)
      tbr_event_add(e, g_strconcat(prefix, l->data, NULL), json_node_get_double(n));
  }
}

/* The TensorBoard events a stream should give, in order: scalars of step/eval/ranks events
 * and a SessionLog START for a `start` with start_step > 0. */
static inline GPtrArray *expected_tb(char **stream)
{
  GPtrArray *out = g_ptr_array_new_with_free_func(tbr_event_free);
  for (guint i = 0; stream[i]; i++) {
    g_autoptr(JsonObject) ev = obj_of(stream[i]);
    const char *name = json_object_get_string_member(ev, "event");
    TbrEvent *e = tbr_event_new();
    e->wall_time = json_object_get_double_member(ev, "time");
    e->step = json_object_get_int_member_with_default(ev, "step", 0);
    if (g_str_equal(name, "start")) {
      gint64 from = json_object_get_int_member(ev, "start_step");
      e->step = from + 1;
      e->session_status = 1;
      if (from > 0)
        g_ptr_array_add(out, e);
      else
        tbr_event_free(e);
      continue;
    }
    if (g_str_equal(name, "step")) {
      const char *keys[] = {"loss",          "lr",         "grad_norm",    "tokens_per_s",
                            "samples_per_s", "loss_scale", "loss_distill", "loss_task"};
      for (guint k = 0; k < G_N_ELEMENTS(keys); k++)
        if (json_object_has_member(ev, keys[k]))
          tbr_event_add(e, g_strconcat("train/", keys[k], NULL),
                        json_object_get_double_member(ev, keys[k]));
    } else if (g_str_equal(name, "eval")) {
      const char *skip[] = {"event", "time", "step", "run_id", NULL};
      add_numbers(e, ev, "eval/", skip);
    } else if (g_str_equal(name, "ranks")) {
      JsonArray *ranks = json_object_get_array_member(ev, "ranks");
      const char *skip[] = {"rank", NULL};
      for (guint r = 0; r < json_array_get_length(ranks); r++) {
        JsonObject *o = json_array_get_object_element(ranks, r);
        g_autofree char *prefix =
            g_strdup_printf("rank/%d/", (int)json_object_get_int_member(o, "rank"));
        add_numbers(e, o, prefix, skip);
      }
    }
    if (e->tags->len > 0)
      g_ptr_array_add(out, e);
    else
      tbr_event_free(e);
  }
  return out;
}

/* `got` (from the file, after its file_version record) equals `want`: order, steps, wall
 * times, tags, and values as the float TensorBoard stores. Tags are compared as sets per
 * event (the record may order an event's members differently from this list). */
static inline void check_tb_equal(GPtrArray *got, guint first, GPtrArray *want)
{
  g_assert_cmpuint(got->len - first, ==, want->len);
  for (guint i = 0; i < want->len; i++) {
    TbrEvent *g = g_ptr_array_index(got, first + i), *w = g_ptr_array_index(want, i);
    g_assert_cmpint(g->step, ==, w->step);
    g_assert_cmpfloat(g->wall_time, ==, w->wall_time);
    g_assert_cmpint(g->session_status, ==, w->session_status);
    g_assert_null(g->file_version);
    g_assert_cmpuint(g->tags->len, ==, w->tags->len);
    for (guint k = 0; k < w->tags->len; k++) {
      float v = NAN;
      g_assert_true(tbr_event_lookup(g, g_ptr_array_index(w->tags, k), &v));
      float expect = (float)g_array_index(w->values, double, k);
      if (v != expect)
        g_error("event %u tag %s: %.9g in the file, %.9g in the stream", i,
                (char *)g_ptr_array_index(w->tags, k), v, expect);
    }
  }
}

/* The one file in `dir` (fails when there are none or several). */
static inline char *only_file(const char *dir)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, &error);
  g_assert_no_error(error);
  const char *name = g_dir_read_name(d);
  g_assert_nonnull(name);
  char *path = g_build_filename(dir, name, NULL);
  g_assert_null(g_dir_read_name(d));
  return path;
}

/* `a` then `b`, a new string vector. */
static inline char **concat_lines(char **a, char **b)
{
  g_autoptr(GStrvBuilder) both = g_strv_builder_new();
  g_strv_builder_addv(both, (const char **)a);
  g_strv_builder_addv(both, (const char **)b);
  return g_strv_builder_end(both);
}
