/* Small helpers shared by the engine's end-to-end tests (header-only, tests only). */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/safetensors.h"

/* A fresh temporary folder, removed by the caller with tu_rm_rf. */
static inline char *tu_mkdtemp(const char *name)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *tmpl = g_strdup_printf("cohort-%s-XXXXXX", name);
  char *dir = g_dir_make_tmp(tmpl, &error);
  g_assert_no_error(error);
  return dir;
}

static inline void tu_rm_rf(const char *path)
{
  if (!path)
    return;
  g_autofree char *quoted = g_shell_quote(path);
  g_autofree char *cmd = g_strdup_printf("rm -rf %s", quoted);
  g_assert_cmpint(system(cmd), ==, 0);
}

/* The JSON objects of a JSON Lines file, in order (every line must parse). */
static inline GPtrArray *tu_read_events(const char *path)
{
  g_autofree char *text = NULL;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, &error));
  GPtrArray *events = g_ptr_array_new_with_free_func((GDestroyNotify)json_object_unref);
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  for (guint i = 0; lines[i]; i++) {
    if (!*lines[i])
      continue;
    g_autoptr(JsonNode) node = json_from_string(lines[i], &error);
    g_assert_no_error(error);
    g_assert_true(JSON_NODE_HOLDS_OBJECT(node));
    JsonObject *o = json_node_get_object(node);
    g_assert_true(json_object_has_member(o, "event"));
    g_assert_true(json_object_has_member(o, "time"));
    g_ptr_array_add(events, json_object_ref(o));
  }
  return events;
}

/* Values of `member` of every event named `event`, as doubles. */
static inline GArray *tu_event_values(GPtrArray *events, const char *event, const char *member)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(double));
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), event) &&
        json_object_has_member(o, member)) {
      double v = json_object_get_double_member(o, member);
      g_array_append_val(out, v);
    }
  }
  return out;
}

/* The tensors of a .safetensors file as float32, concatenated in file order, but those whose
 * names end in skip_suffix (NULL: none). */
static inline GArray *tu_read_weights_except(const char *path, const char *skip_suffix)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_no_error(error);
  GArray *out = g_array_new(FALSE, FALSE, sizeof(float));
  const char *const *names = cohort_safetensors_names(f);
  for (guint i = 0; names[i]; i++) {
    if (skip_suffix && g_str_has_suffix(names[i], skip_suffix))
      continue;
    int64_t shape[8];
    int nd = cohort_safetensors_shape(f, names[i], shape);
    gsize numel = 1;
    for (int d = 0; d < nd; d++)
      numel *= (gsize)shape[d];
    guint old = out->len;
    g_array_set_size(out, old + (guint)numel);
    g_assert_true(cohort_safetensors_read_f32(f, names[i], nd, shape,
                                              &g_array_index(out, float, old), &error));
    g_assert_no_error(error);
  }
  return out;
}

/* All of them. */
static inline GArray *tu_read_weights(const char *path)
{
  return tu_read_weights_except(path, NULL);
}

/* Largest |a-b| / max(|b|, floor) over two equal-length arrays. */
static inline double tu_max_rel_diff(GArray *a, GArray *b, double floor)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0;
  for (guint i = 0; i < a->len; i++) {
    double x = g_array_index(a, float, i), y = g_array_index(b, float, i);
    double d = fabs(x - y) / MAX(fabs(y), floor);
    worst = MAX(worst, d);
  }
  return worst;
}
