/* The progress protocol's code and its page agree: every name engine/progress/protocol.h
 * defines is documented in docs/progress-protocol.md, every event the page describes has a
 * constant, and a real run writes no event, member or value that has no constant. */
#include <json-glib/json-glib.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/phase.h"
#include "engine/progress/protocol.h"
#include "tests/train-run.h"

typedef struct {
  char *macro;
  char *kind; /* EVENT, FIELD, STATUS, LEVEL, CONTROL_WORD, PHASE */
  char *value;
} Name;

static void name_free(gpointer p)
{
  Name *n = p;
  g_free(n->macro);
  g_free(n->kind);
  g_free(n->value);
  g_free(n);
}

static char *source_file(const char *rel)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "..", rel, NULL);
  char *text = NULL;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, &error));
  g_assert_no_error(error);
  return text;
}

/* Every `#define COHORT_<KIND>_… "value"` of the header. */
static GPtrArray *protocol_names(void)
{
  g_autofree char *header = source_file("engine/progress/protocol.h");
  g_autoptr(GRegex) re = g_regex_new(
      "^#define (COHORT_(EVENT|FIELD|STATUS|LEVEL|CONTROL_WORD|PHASE)_\\w+)\\s+\"([^\"]*)\"\\s*$",
      G_REGEX_MULTILINE, 0, NULL);
  GPtrArray *names = g_ptr_array_new_with_free_func(name_free);
  g_autoptr(GMatchInfo) m = NULL;
  for (g_regex_match(re, header, 0, &m); g_match_info_matches(m); g_match_info_next(m, NULL)) {
    Name *n = g_new0(Name, 1);
    n->macro = g_match_info_fetch(m, 1);
    n->kind = g_match_info_fetch(m, 2);
    n->value = g_match_info_fetch(m, 3);
    g_ptr_array_add(names, n);
  }
  return names;
}

static gboolean has_name(GPtrArray *names, const char *kind, const char *value)
{
  for (guint i = 0; i < names->len; i++) {
    Name *n = g_ptr_array_index(names, i);
    if (g_str_equal(n->kind, kind) && g_str_equal(n->value, value))
      return TRUE;
  }
  return FALSE;
}

static void test_names_documented(void)
{
  g_autoptr(GPtrArray) names = protocol_names();
  g_autofree char *doc = source_file("docs/progress-protocol.md");
  /* The header is read, not skimmed: these are in it. */
  g_assert_cmpuint(names->len, >, 80);
  g_assert_true(has_name(names, "EVENT", COHORT_EVENT_DONE));
  g_assert_true(has_name(names, "FIELD", COHORT_FIELD_GPU_UTIL));
  g_assert_true(has_name(names, "CONTROL_WORD", COHORT_CONTROL_WORD_SAVE));
  g_autoptr(GString) missing = g_string_new(NULL);
  g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < names->len; i++) {
    Name *n = g_ptr_array_index(names, i);
    /* An event has a section of its own; any other name is written as `name` in the text. */
    g_autofree char *want = g_str_equal(n->kind, "EVENT") ? g_strdup_printf("### `%s`\n", n->value)
                                                          : g_strdup_printf("`%s`", n->value);
    if (strstr(doc, want) == NULL)
      g_string_append_printf(missing, " %s (%s)", n->macro, want);
    /* One constant per name and kind. */
    g_autofree char *key = g_strconcat(n->kind, ":", n->value, NULL);
    if (!g_hash_table_add(seen, g_steal_pointer(&key)))
      g_string_append_printf(missing, " %s (a second constant for \"%s\")", n->macro, n->value);
  }
  if (missing->len > 0)
    g_error("not documented in docs/progress-protocol.md:%s", missing->str);
}

static void test_documented_events_named(void)
{
  g_autoptr(GPtrArray) names = protocol_names();
  g_autofree char *doc = source_file("docs/progress-protocol.md");
  const char *events = strstr(doc, "\n## Events\n");
  g_assert_nonnull(events);
  const char *end = g_strstr_len(events + 1, -1, "\n## ");
  g_autofree char *section = g_strndup(events, end ? (gsize)(end - events) : strlen(events));
  g_autoptr(GRegex) re = g_regex_new("^### `([a-z_]+)`$", G_REGEX_MULTILINE, 0, NULL);
  g_autoptr(GMatchInfo) m = NULL;
  guint n = 0;
  for (g_regex_match(re, section, 0, &m); g_match_info_matches(m); g_match_info_next(m, NULL)) {
    g_autofree char *event = g_match_info_fetch(m, 1);
    if (!has_name(names, "EVENT", event))
      g_error("docs/progress-protocol.md describes event \"%s\", which protocol.h does not name",
              event);
    n++;
  }
  /* and every event protocol.h names has its section */
  guint named = 0;
  for (guint i = 0; i < names->len; i++)
    named += g_str_equal(((Name *)g_ptr_array_index(names, i))->kind, "EVENT");
  g_assert_cmpuint(n, ==, named);
}

/* The phases a rank reports (engine/base/phase.h) are the protocol's PHASE words, one each. */
static void test_phases_named(void)
{
  g_autoptr(GPtrArray) names = protocol_names();
  guint phases = 0;
  for (guint i = 0; i < names->len; i++)
    phases += g_str_equal(((Name *)g_ptr_array_index(names, i))->kind, "PHASE");
  g_assert_cmpuint(phases, ==, COHORT_RANK_N_PHASES);
  for (int p = 0; p < COHORT_RANK_N_PHASES; p++) {
    if (!has_name(names, "PHASE", cohort_phase_name(p)))
      g_error("phase \"%s\" has no COHORT_PHASE_ constant in protocol.h", cohort_phase_name(p));
    g_assert_cmpint(cohort_phase_from_name(cohort_phase_name(p)), ==, p);
  }
}

/* Every member name in `o` (and in the objects it holds, but not in the config) is a field. */
static void check_members(GPtrArray *names, JsonObject *o, const char *event, GString *bad)
{
  g_autoptr(GList) members = json_object_get_members(o);
  for (GList *l = members; l != NULL; l = l->next) {
    const char *name = l->data;
    if (!has_name(names, "FIELD", name))
      g_string_append_printf(bad, " %s.%s", event, name);
    JsonNode *node = json_object_get_member(o, name);
    if (g_str_equal(name, COHORT_FIELD_CONFIG))
      continue; /* the TrainConfig: docs/config.md's keys */
    if (JSON_NODE_HOLDS_OBJECT(node))
      check_members(names, json_node_get_object(node), event, bad);
    if (JSON_NODE_HOLDS_ARRAY(node))
      for (guint i = 0; i < json_array_get_length(json_node_get_array(node)); i++) {
        JsonNode *e = json_array_get_element(json_node_get_array(node), i);
        if (JSON_NODE_HOLDS_OBJECT(e))
          check_members(names, json_node_get_object(e), event, bad);
      }
  }
}

/* A short run with evaluation, samples and a checkpoint: what it writes is all named. */
static void test_run_writes_named(void)
{
  g_autoptr(GPtrArray) names = protocol_names();
  g_autofree char *dir = g_dir_make_tmp("cohort-protocol-XXXXXX", NULL);
  g_assert_nonnull(dir);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events", NULL);
  const char *extra[] = {"--set",        "max_steps=6",  "--set",
                         "eval_every=3", "--set",        "sample_every=3",
                         "--set",        "save_every=3", NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult r = run_train(args, events);
  if (r.status != 0)
    g_error("cohort-train failed (%d): %s", r.status, r.err);
  run_result_clear(&r);
  /* Two ranks: a probe first (a later run carries it), then a run with a rank that sleeps in a
   * step (a hang report) and checkpoints (health checks). */
  const char *two[] = {
      "--nproc",         "2",     "--set",        "max_steps=4", "--set", "save_every=3", "--set",
      "hang_report_s=1", "--set", "timeout_s=30", NULL};
  g_autoptr(GPtrArray) probe_args = small_args(ws, two);
  g_ptr_array_add(probe_args, g_strdup("--probe"));
  g_autofree char *probe_events = g_build_filename(dir, "probe-events", NULL);
  r = run_train(probe_args, probe_events);
  if (r.status != 0)
    g_error("cohort-train --probe failed (%d): %s", r.status, r.err);
  run_result_clear(&r);
  g_autoptr(GPtrArray) two_args = small_args(ws, two);
  g_ptr_array_add(two_args, g_strdup("--overwrite"));
  g_autofree char *two_events = g_build_filename(dir, "two-events", NULL);
  g_setenv("COHORT_TEST_HOOKS", "sleep:1:2:forward:2.5", TRUE);
  r = run_train(two_args, two_events);
  g_unsetenv("COHORT_TEST_HOOKS");
  if (r.status != 0)
    g_error("cohort-train on 2 ranks failed (%d): %s", r.status, r.err);
  run_result_clear(&r);
  g_autofree char *one = NULL, *probe = NULL, *two_text = NULL;
  g_assert_true(g_file_get_contents(events, &one, NULL, NULL));
  g_assert_true(g_file_get_contents(probe_events, &probe, NULL, NULL));
  g_assert_true(g_file_get_contents(two_events, &two_text, NULL, NULL));
  g_autofree char *text = g_strconcat(one, probe, two_text, NULL);
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  g_autoptr(GString) bad = g_string_new(NULL);
  g_autoptr(GHashTable) kinds = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; lines[i] != NULL && *lines[i] != '\0'; i++) {
    g_autoptr(JsonNode) root = json_from_string(lines[i], NULL);
    g_assert_nonnull(root);
    JsonObject *ev = json_node_get_object(root);
    const char *event = json_object_get_string_member(ev, COHORT_FIELD_EVENT);
    if (!has_name(names, "EVENT", event))
      g_string_append_printf(bad, " event \"%s\"", event);
    g_hash_table_add(kinds, g_strdup(event));
    check_members(names, ev, event, bad);
    if (g_str_equal(event, COHORT_EVENT_LOG) &&
        !has_name(names, "LEVEL", json_object_get_string_member(ev, COHORT_FIELD_LEVEL)))
      g_string_append_printf(bad, " level \"%s\"",
                             json_object_get_string_member(ev, COHORT_FIELD_LEVEL));
    if (g_str_equal(event, COHORT_EVENT_HANG))
      for (guint k = 0;
           k < json_array_get_length(json_object_get_array_member(ev, COHORT_FIELD_RANKS)); k++) {
        JsonObject *rk =
            json_array_get_object_element(json_object_get_array_member(ev, COHORT_FIELD_RANKS), k);
        const char *phase = json_object_get_string_member_with_default(rk, COHORT_FIELD_PHASE, "");
        if (!has_name(names, "PHASE", phase))
          g_string_append_printf(bad, " phase \"%s\"", phase);
      }
    if ((g_str_equal(event, COHORT_EVENT_DONE) || g_str_equal(event, COHORT_EVENT_HEALTH)) &&
        !has_name(names, "STATUS", json_object_get_string_member(ev, COHORT_FIELD_STATUS)))
      g_string_append_printf(bad, " status \"%s\"",
                             json_object_get_string_member(ev, COHORT_FIELD_STATUS));
  }
  if (bad->len > 0)
    g_error("the run wrote names protocol.h does not define:%s", bad->str);
  const char *wanted[] = {COHORT_EVENT_START,  COHORT_EVENT_STEP,       COHORT_EVENT_EVAL,
                          COHORT_EVENT_SAMPLE, COHORT_EVENT_CHECKPOINT, COHORT_EVENT_LOG,
                          COHORT_EVENT_DONE,   COHORT_EVENT_PROBE,      COHORT_EVENT_HEALTH,
                          COHORT_EVENT_HANG};
  for (guint i = 0; i < G_N_ELEMENTS(wanted); i++)
    if (!g_hash_table_contains(kinds, wanted[i]))
      g_error("the run wrote no \"%s\" event", wanted[i]);
  g_autofree char *rm = g_strdup_printf("rm -rf '%s'", dir);
  g_assert_cmpint(system(rm), ==, 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/protocol/names-documented", test_names_documented);
  g_test_add_func("/protocol/documented-events-named", test_documented_events_named);
  g_test_add_func("/protocol/run-writes-named", test_run_writes_named);
  g_test_add_func("/protocol/phases-named", test_phases_named);
  return g_test_run();
}
