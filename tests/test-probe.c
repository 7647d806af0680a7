/* The probe end to end (issue 28 items 1 and 5): cohort-train --probe on 2 ranks (spawn mode)
 * prints the forecast, emits a `probe` event with what it measured and the forecast at 2, 4 and
 * 8 ranks, writes WORKSPACE/probe.json, and --explain shows it (and the health plan); one
 * process probes its compute only; cohort-run --probe passes --probe to its workers; and on two
 * network namespaces joined by a veth pair limited to 100 Mbit/s (root only), the printed
 * cohort-run commands with --probe measure an all-reduce bandwidth of that link, not of
 * loopback. */
#include "commands-run.h"
#include "netns.h"
#include "train-run.h"

#include <json-glib/json-glib.h>
#include <string.h>

static JsonObject *probe_event(const char *events)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(events, &text, NULL, NULL));
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  for (int i = 0; lines[i]; i++) {
    if (strstr(lines[i], "\"event\":\"probe\"") == NULL)
      continue;
    g_autoptr(JsonNode) node = json_from_string(lines[i], NULL);
    g_assert_nonnull(node);
    return json_object_ref(json_node_get_object(node));
  }
  g_error("no probe event in %s:\n%s", events, text);
  return NULL;
}

static JsonObject *collective(JsonObject *probe, const char *name)
{
  JsonArray *c =
      json_object_get_array_member(json_object_get_object_member(probe, "measured"), "collectives");
  for (guint i = 0; c && i < json_array_get_length(c); i++) {
    JsonObject *o = json_array_get_object_element(c, i);
    if (g_str_equal(json_object_get_string_member(o, "collective"), name))
      return o;
  }
  return NULL;
}

/* What every probe of `world` ranks has. */
static void check_probe(JsonObject *p, int world)
{
  g_assert_cmpint(json_object_get_int_member(p, "world_size"), ==, world);
  JsonObject *m = json_object_get_object_member(p, "measured");
  g_assert_cmpfloat(json_object_get_double_member(m, "forward_s"), >, 0);
  g_assert_cmpfloat(json_object_get_double_member(m, "backward_s"), >, 0);
  g_assert_cmpint(json_object_get_int_member(m, "half_batch"), ==, 2);
  JsonArray *b = json_object_get_array_member(m, "buckets");
  g_assert_cmpuint(json_array_get_length(b), >=, 1);
  for (guint i = 0; i < json_array_get_length(b); i++) {
    double ready = json_object_get_double_member(json_array_get_object_element(b, i), "ready");
    g_assert_cmpfloat(ready, >=, 0);
    g_assert_cmpfloat(ready, <=, 1);
  }
  JsonArray *rows = json_object_get_array_member(p, "forecast");
  g_assert_cmpuint(json_array_get_length(rows), ==, world > 1 ? 3 : 1);
  for (guint i = 0; i < json_array_get_length(rows); i++) {
    JsonObject *r = json_array_get_object_element(rows, i);
    g_assert_cmpint(json_object_get_int_member(r, "world_size"), ==, world << i);
    double e = json_object_get_double_member(r, "efficiency");
    g_assert_cmpfloat(e, >, 0);
    g_assert_cmpfloat(e, <=, 1);
    g_assert_cmpfloat(json_object_get_double_member(r, "step_s"), >, 0);
    g_assert_cmpfloat(json_object_get_double_member(r, "tokens_per_s"), >, 0);
    double h = json_object_get_double_member(r, "hidden");
    g_assert_cmpfloat(h, >=, 0);
    g_assert_cmpfloat(h, <=, 1);
  }
  if (world > 1) {
    JsonObject *ar = collective(p, "all_reduce");
    g_assert_nonnull(ar);
    g_assert_cmpfloat(json_object_get_double_member(ar, "alpha_s"), >=, 0);
    g_assert_cmpuint(json_array_get_length(json_object_get_array_member(ar, "points")), >=, 3);
    g_assert_true(json_object_has_member(p, "min_batch_limit"));
    /* Passes with the buckets in flight, and the contention that explains them. */
    g_assert_cmpfloat(json_object_get_double_member(m, "synced_pass_s"), >, 0);
    double c = json_object_get_double_member(p, "contention");
    g_assert_cmpfloat(c, >=, 0);
    g_assert_cmpfloat(c, <=, 2);
    for (guint i = 0; i < json_array_get_length(rows); i++)
      g_assert_cmpfloat(
          json_object_get_double_member(json_array_get_object_element(rows, i), "stretch_s"), >=,
          0);
  }
}

static void test_local(void)
{
  g_autofree char *dir = g_dir_make_tmp("cohort-probe-XXXXXX", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events.jsonl", NULL);
  const char *extra[] = {"--nproc", "2", "--probe", NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult res = run_train(args, events);
  g_test_message("stdout: %s\nstderr: %s", res.out, res.err);
  g_assert_cmpint(res.status, ==, 0);
  g_assert_nonnull(strstr(res.out, "Forecast (per-rank batch 4"));
  g_assert_nonnull(strstr(res.out, "all_reduce: "));
  g_autoptr(JsonObject) p = probe_event(events);
  check_probe(p, 2);
  g_assert_cmpstr(json_object_get_string_member(p, "backend"), ==, "gloo");
  /* Nothing was trained: no checkpoint, no model. */
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  g_assert_false(g_file_test(model, G_FILE_TEST_EXISTS));
  /* probe.json, and --explain with the same settings shows it as this config's. */
  g_autofree char *saved = g_build_filename(ws, "probe.json", NULL);
  g_assert_true(g_file_test(saved, G_FILE_TEST_IS_REGULAR));
  const char *explain[] = {"--nproc", "2", "--explain", NULL};
  g_autoptr(GPtrArray) eargs = small_args(ws, explain);
  RunResult ex = run_train(eargs, NULL);
  g_assert_cmpint(ex.status, ==, 0);
  g_autoptr(JsonNode) node = json_from_string(ex.out, NULL);
  JsonObject *o = json_node_get_object(node);
  JsonObject *ep = json_object_get_object_member(o, "probe");
  g_assert_nonnull(ep);
  g_assert_true(json_object_get_boolean_member(ep, "matches_config"));
  JsonObject *h = json_object_get_object_member(o, "health");
  g_assert_true(json_object_get_boolean_member(h, "compared"));
  /* Another batch size is another config: the saved probe no longer matches it. */
  const char *other[] = {"--nproc", "2", "--explain", "--set", "batch_size=8", NULL};
  g_autoptr(GPtrArray) oargs = small_args(ws, other);
  RunResult ox = run_train(oargs, NULL);
  g_autoptr(JsonNode) onode = json_from_string(ox.out, NULL);
  g_assert_false(json_object_get_boolean_member(
      json_object_get_object_member(json_node_get_object(onode), "probe"), "matches_config"));
  run_result_clear(&ox);
  run_result_clear(&ex);
  run_result_clear(&res);
  tu_rm_rf(dir);
}

static void test_one_process(void)
{
  g_autofree char *dir = g_dir_make_tmp("cohort-probe-XXXXXX", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events.jsonl", NULL);
  const char *extra[] = {"--probe", NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult res = run_train(args, events);
  g_assert_cmpint(res.status, ==, 0);
  g_assert_nonnull(strstr(res.out, "One process: nothing to measure between ranks"));
  g_autoptr(JsonObject) p = probe_event(events);
  check_probe(p, 1);
  run_result_clear(&res);
  tu_rm_rf(dir);
}

/* With LoRA only the adapters' gradients travel: the probe times those buckets, not the whole
 * model's (it planned the whole model's, and its optimizer step read past the gradients). */
static void test_lora(void)
{
  g_autofree char *dir = g_dir_make_tmp("cohort-probe-XXXXXX", NULL);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_autofree char *events = g_build_filename(dir, "events.jsonl", NULL);
  const char *extra[] = {"--nproc",       "2",     "--probe",     "--set",
                         "finetune=lora", "--set", "lora_rank=4", NULL};
  g_autoptr(GPtrArray) args = small_args(ws, extra);
  RunResult res = run_train(args, events);
  g_test_message("stdout: %s\nstderr: %s", res.out, res.err);
  g_assert_cmpint(res.status, ==, 0);
  g_autoptr(JsonObject) p = probe_event(events);
  check_probe(p, 2);
  gint64 params = json_object_get_int_member(p, "params");
  gint64 trainable = json_object_get_int_member(p, "trainable");
  g_assert_cmpint(trainable, >, 0);
  g_assert_cmpint(trainable, <, params / 4);
  JsonArray *b =
      json_object_get_array_member(json_object_get_object_member(p, "measured"), "buckets");
  double bytes = 0;
  for (guint i = 0; i < json_array_get_length(b); i++)
    bytes += json_object_get_double_member(json_array_get_object_element(b, i), "bytes");
  g_assert_cmpfloat(bytes, ==, 4.0 * (double)trainable);
  run_result_clear(&res);
  tu_rm_rf(dir);
}

static void test_cohort_run(void)
{
  g_autofree char *dir = tu_mkdtemp("probe-run");
  const char *extra[] = {"batch_size=4", NULL};
  g_autofree char *config = cr_write_config(dir, extra);
  g_autofree char *cmd = g_strdup_printf(
      "cohort-run --standalone --nproc-per-node 2 cohort-train --config %s --probe", config);
  g_auto(GStrv) env = cr_environ(NULL);
  g_autoptr(GSubprocess) p = cr_start(NULL, cmd, env);
  g_autofree char *err = NULL;
  g_assert_cmpint(cr_finish(p, &err), ==, 0);
  g_autofree char *saved = g_build_filename(dir, "ws", "probe.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(saved, &text, NULL, NULL));
  g_autoptr(JsonNode) node = json_from_string(text, NULL);
  check_probe(json_node_get_object(node), 2);
  tu_rm_rf(dir);
}

static void test_two_nodes(void)
{
  g_auto(Netns) n = {0};
  g_autofree char *why = NULL;
  if (!netns_make(&n, &why)) {
    g_test_skip(why);
    return;
  }
  if (!netns_limit(&n, "100mbit")) {
    g_test_skip("this kernel has no tbf qdisc (tc … tbf) to limit the link");
    return;
  }
  g_autofree char *dir = tu_mkdtemp("probe-two-nodes");
  const char *extra[] = {"nproc_per_node=1",
                         "num_nodes=2",
                         "master_addr=" NETNS_ADDR0,
                         "master_port=29577",
                         "batch_size=4",
                         "timeout_s=60",
                         NULL};
  g_autofree char *config = cr_write_config(dir, extra);
  g_autofree char *text = cr_print(config);
  g_auto(GStrv) env = cr_environ(NULL);
  GSubprocess *nodes[2];
  for (int i = 1; i >= 0; i--) {
    g_autofree char *cmd = cr_command(text, "cohort-run", i);
    g_strchomp(cmd);
    g_autofree char *probe = g_strdup_printf("%s --probe", cmd);
    g_test_message("node %d: %s", i, probe);
    const char *prefix[] = {"ip", "netns", "exec", n.ns[i], NULL};
    nodes[i] = cr_start(prefix, probe, env);
  }
  for (int i = 0; i < 2; i++) {
    g_autofree char *err = NULL;
    int status = cr_finish(nodes[i], &err);
    if (status != 0)
      g_error("node %d exited %d:\n%s", i, status, err);
    g_object_unref(nodes[i]);
  }
  g_autofree char *saved = g_build_filename(dir, "ws", "probe.json", NULL);
  g_autofree char *json = NULL;
  g_assert_true(g_file_get_contents(saved, &json, NULL, NULL));
  g_autoptr(JsonNode) node = json_from_string(json, NULL);
  JsonObject *p = json_node_get_object(node);
  check_probe(p, 2);
  g_assert_cmpint(json_object_get_int_member(p, "num_nodes"), ==, 2);
  double gbit = json_object_get_double_member(collective(p, "all_reduce"), "gbit_s");
  g_test_message("all_reduce between the namespaces: %.3f Gbit/s (link limited to 0.1)", gbit);
  g_assert_cmpfloat(gbit, >, 0.02);
  g_assert_cmpfloat(gbit, <, 0.2);
  tu_rm_rf(dir);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/probe/local", test_local);
  g_test_add_func("/probe/one-process", test_one_process);
  g_test_add_func("/probe/lora", test_lora);
  g_test_add_func("/probe/cohort-run", test_cohort_run);
  g_test_add_func("/probe/two-nodes", test_two_nodes);
  return g_test_run();
}
