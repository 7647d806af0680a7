/* --explain's JSON between the engine that writes it and the window that reads it
 * (engine/progress/explain-json.h), as tests/test-protocol.c holds the progress protocol: every
 * name is documented in docs/launching.md; the writer spells no member by hand and a plan
 * writes no member without a constant (and every constant, in one of two plans); every member
 * the window reads is in a CPU plan, where the window's reader finds its numbers; and the reader
 * names the member a plan lacks instead of showing 0 bytes. */
#include <json-glib/json-glib.h>
#include <string.h>

#include "engine/base/json-write.h"
#include "engine/progress/explain-json.h"
#include "tests/ui/ui-test.h"
#include "ui/explain-plan.h"
#include "ui/programs.h"

static char *tmp_dir;

static char *source_file(const char *rel)
{
  g_autofree char *path = g_test_build_filename(G_TEST_DIST, "..", rel, NULL);
  char *text = NULL;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, &error));
  g_assert_no_error(error);
  return text;
}

/* name -> macro, from every `#define COHORT_EXPLAIN_… "name"` of the header. */
static GHashTable *explain_names(void)
{
  g_autofree char *header = source_file("engine/progress/explain-json.h");
  g_autoptr(GRegex) re = g_regex_new("^#define (COHORT_EXPLAIN_\\w+)\\s+\"([^\"]*)\"\\s*$",
                                     G_REGEX_MULTILINE, 0, NULL);
  GHashTable *names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  g_autoptr(GMatchInfo) m = NULL;
  for (g_regex_match(re, header, 0, &m); g_match_info_matches(m); g_match_info_next(m, NULL)) {
    char *value = g_match_info_fetch(m, 2);
    if (!g_hash_table_insert(names, value, g_match_info_fetch(m, 1)))
      g_error("two constants for \"%s\"", value);
  }
  return names;
}

/* cohort-train --explain on tiny-gpt with `sets` (NULL-terminated "key=value") and `nproc`. */
static char *explain(const char *const *sets, int nproc)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *train = cohort_ui_find_program("cohort-train", &error);
  g_assert_no_error(error);
  g_autofree char *ws = g_build_filename(tmp_dir, "ws", NULL);
  g_autofree char *wset = g_strconcat("workspace_dir=", ws, NULL);
  g_autofree char *np = g_strdup_printf("%d", nproc);
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  const char *head[] = {train,   "--preset",   "tiny-gpt", "--set", wset,
                        "--set", "device=cpu", "--nproc",  np,      "--explain"};
  for (guint i = 0; i < G_N_ELEMENTS(head); i++)
    g_ptr_array_add(argv, (gpointer)head[i]);
  for (guint i = 0; sets[i] != NULL; i++) {
    g_ptr_array_add(argv, "--set");
    g_ptr_array_add(argv, (gpointer)sets[i]);
  }
  g_ptr_array_add(argv, NULL);
  char *out = NULL, *err = NULL;
  int status = 0;
  g_assert_true(g_spawn_sync(NULL, (char **)argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                             &err, &status, &error));
  g_assert_no_error(error);
  if (!g_spawn_check_wait_status(status, NULL))
    g_error("--explain failed: %s", err);
  g_free(err);
  return out;
}

/* A plan of one process (a LoRA run: frozen_bytes at stage 0) and one of two at ZeRO stage 3
 * (units, why_not). */
static char *plan_one(void)
{
  const char *sets[] = {"finetune=lora", NULL};
  return explain(sets, 1);
}

static char *plan_two(void)
{
  const char *sets[] = {"finetune=lora", "enable_multi_gpu=true", "zero_stage=3", NULL};
  return explain(sets, 2);
}

/* The member names of `o`, and of the objects in it, into `seen`; the config (docs/config.md's
 * keys), the probe (the progress protocol's) and the last health event are others' words. */
static void collect(JsonObject *o, GHashTable *seen)
{
  g_autoptr(GList) members = json_object_get_members(o);
  for (GList *l = members; l != NULL; l = l->next) {
    const char *name = l->data;
    g_hash_table_add(seen, g_strdup(name));
    if (g_str_equal(name, COHORT_EXPLAIN_CONFIG) || g_str_equal(name, COHORT_EXPLAIN_PROBE) ||
        g_str_equal(name, COHORT_EXPLAIN_LAST))
      continue;
    JsonNode *n = json_object_get_member(o, name);
    if (JSON_NODE_HOLDS_OBJECT(n))
      collect(json_node_get_object(n), seen);
    if (JSON_NODE_HOLDS_ARRAY(n))
      for (guint i = 0; i < json_array_get_length(json_node_get_array(n)); i++) {
        JsonNode *e = json_array_get_element(json_node_get_array(n), i);
        if (JSON_NODE_HOLDS_OBJECT(e))
          collect(json_node_get_object(e), seen);
      }
  }
}

static GHashTable *members_of(const char *json)
{
  g_autoptr(JsonNode) root = json_from_string(json, NULL);
  g_assert_nonnull(root);
  GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  collect(json_node_get_object(root), seen);
  return seen;
}

static void test_names_documented(void)
{
  g_autoptr(GHashTable) names = explain_names();
  g_assert_cmpuint(g_hash_table_size(names), >=, 50);
  g_autofree char *doc = source_file("docs/launching.md");
  const char *section = strstr(doc, "### What `--explain` prints");
  g_assert_nonnull(section);
  GHashTableIter it;
  gpointer value, macro;
  g_hash_table_iter_init(&it, names);
  while (g_hash_table_iter_next(&it, &value, &macro)) {
    g_autofree char *want = g_strdup_printf("`%s`", (char *)value);
    if (strstr(section, want) == NULL)
      g_error("%s (%s) is not in docs/launching.md's \"What --explain prints\"", (char *)macro,
              want);
  }
}

/* The writer's files name members only through the constants. */
static void test_writer_uses_constants(void)
{
  const char *files[] = {"engine/train/explain.c", "engine/train/memory-plan.c"};
  g_autoptr(GRegex) bare =
      g_regex_new("(set_member_name|\\bmember)\\(b, \"", G_REGEX_MULTILINE, 0, NULL);
  for (guint i = 0; i < G_N_ELEMENTS(files); i++) {
    g_autofree char *text = source_file(files[i]);
    g_assert_nonnull(strstr(text, "COHORT_EXPLAIN_"));
    g_autoptr(GMatchInfo) m = NULL;
    if (g_regex_match(bare, text, 0, &m))
      g_error("%s names a member by hand: %s…", files[i], g_match_info_fetch(m, 0));
  }
}

/* What two plans write is all named, and every name is written by one of them (but `last` and
 * `probe`, which need a workspace with a history, and `train_windows_estimated`, text through a
 * tokenizer's: tests/test-explain-windows.c). */
static void test_plans_written_named(void)
{
  g_autoptr(GHashTable) names = explain_names();
  g_autofree char *one = plan_one(), *two = plan_two();
  g_autoptr(GHashTable) seen = members_of(one);
  g_autoptr(GHashTable) seen_two = members_of(two);
  GHashTableIter it;
  gpointer name, macro;
  g_hash_table_iter_init(&it, seen_two);
  while (g_hash_table_iter_next(&it, &name, NULL))
    g_hash_table_add(seen, g_strdup(name));
  g_hash_table_iter_init(&it, seen);
  while (g_hash_table_iter_next(&it, &name, NULL))
    if (!g_hash_table_contains(names, name))
      g_error("--explain wrote \"%s\", which explain-json.h does not name", (char *)name);
  g_hash_table_iter_init(&it, names);
  while (g_hash_table_iter_next(&it, &name, &macro))
    if (!g_hash_table_contains(seen, name) && !g_str_equal(name, COHORT_EXPLAIN_LAST) &&
        !g_str_equal(name, COHORT_EXPLAIN_PROBE) &&
        !g_str_equal(name, COHORT_EXPLAIN_TRAIN_WINDOWS_ESTIMATED))
      g_error("no plan wrote %s (\"%s\")", (char *)macro, (char *)name);
}

/* Every constant the window's sources use is in a CPU plan (the window's case), and the reader
 * finds its numbers there. */
static void test_reader_members_written(void)
{
  g_autoptr(GHashTable) names = explain_names();
  g_autofree char *one = plan_one();
  g_autoptr(GHashTable) seen = members_of(one);
  g_autofree char *ui_dir = g_test_build_filename(G_TEST_DIST, "..", "ui", NULL);
  g_autoptr(GDir) dir = g_dir_open(ui_dir, 0, NULL);
  g_assert_nonnull(dir);
  g_autoptr(GRegex) re = g_regex_new("COHORT_EXPLAIN_\\w+", 0, 0, NULL);
  guint used = 0;
  const char *file;
  while ((file = g_dir_read_name(dir)) != NULL) {
    if (!g_str_has_suffix(file, ".c"))
      continue;
    g_autofree char *rel = g_build_filename("ui", file, NULL);
    g_autofree char *text = source_file(rel);
    g_autoptr(GMatchInfo) m = NULL;
    for (g_regex_match(re, text, 0, &m); g_match_info_matches(m); g_match_info_next(m, NULL)) {
      g_autofree char *macro = g_match_info_fetch(m, 0);
      const char *value = NULL;
      GHashTableIter it;
      gpointer v, mac;
      g_hash_table_iter_init(&it, names);
      while (value == NULL && g_hash_table_iter_next(&it, &v, &mac))
        if (g_str_equal(mac, macro))
          value = v;
      if (value == NULL)
        g_error("%s uses %s, which explain-json.h does not define", rel, macro);
      if (!g_hash_table_contains(seen, value))
        g_error("%s reads %s (\"%s\"), which a CPU plan does not write", rel, macro, value);
      used++;
    }
  }
  g_assert_cmpuint(used, >=, 15);

  CohortExplainMemory m;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_explain_memory_read(one, &m, &error));
  g_assert_no_error(error);
  g_autoptr(JsonNode) root = json_from_string(one, NULL);
  JsonObject *mem = json_object_get_object_member(json_node_get_object(root), "memory");
  JsonObject *pr = json_object_get_object_member(mem, "per_rank");
  g_assert_cmpint(m.params, ==, json_object_get_int_member(pr, "params_bytes"));
  g_assert_cmpint(m.optim, ==, json_object_get_int_member(pr, "optim_bytes"));
  g_assert_cmpint(m.startup, ==, json_object_get_int_member(pr, "startup_bytes"));
  g_assert_cmpint(m.machine, ==, json_object_get_int_member(mem, "machine_bytes"));
  g_assert_cmpint(m.local_ranks, ==, 1);
  g_assert_cmpint(m.params, >, 0);
  g_assert_cmpint(m.machine, >, 0);
  g_assert_true(m.fits);
}

/* A plan without a member the window needs is an error that names it; one without the
 * machine's figures (a GPU run's) is not. */
static void test_reader_names_missing(void)
{
  g_autofree char *one = plan_one();
  g_autoptr(JsonNode) root = json_from_string(one, NULL);
  JsonObject *mem = json_object_get_object_member(json_node_get_object(root), "memory");
  json_object_remove_member(json_object_get_object_member(mem, "per_rank"), "grads_bytes");
  /* the engine's writer: json-glib's writes 1e-08 as "1e-08.0" */
  g_autofree char *lacking = cohort_json_to_string(root, FALSE);
  CohortExplainMemory m;
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_explain_memory_read(lacking, &m, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "memory.per_rank.grads_bytes"));
  g_clear_error(&error);

  g_autoptr(JsonNode) gpu_root = json_from_string(one, NULL);
  JsonObject *gmem = json_object_get_object_member(json_node_get_object(gpu_root), "memory");
  json_object_remove_member(gmem, "machine_bytes");
  json_object_remove_member(gmem, "machine_need_bytes");
  json_object_remove_member(gmem, "fits");
  g_autofree char *gpu = cohort_json_to_string(gpu_root, FALSE);
  g_assert_true(cohort_explain_memory_read(gpu, &m, &error));
  g_assert_no_error(error);
  g_assert_cmpint(m.machine, ==, 0);
  g_assert_true(m.fits);
  g_assert_false(cohort_explain_memory_read("{\"memory\": 3}", &m, &error));
  g_assert_nonnull(strstr(error->message, "memory"));
}

int main(int argc, char **argv)
{
  tmp_dir = ui_test_init(&argc, &argv);
  g_test_add_func("/ui/explain/names-documented", test_names_documented);
  g_test_add_func("/ui/explain/writer-uses-constants", test_writer_uses_constants);
  g_test_add_func("/ui/explain/plans-written-named", test_plans_written_named);
  g_test_add_func("/ui/explain/reader-members-written", test_reader_members_written);
  g_test_add_func("/ui/explain/reader-names-missing", test_reader_names_missing);
  int rc = g_test_run();
  ui_test_rmtree(tmp_dir);
  return rc;
}
