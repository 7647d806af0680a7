/* TrainConfig: defaults, JSON round trip, every key's validation, versions, --set, atomic
 * save, presets, hashing and diffs. */
#include "cohort-build-config.h"
#include "engine/config/config.h"
#include "engine/config/model-families.h"
#include "engine/config/presets.h"

#include <glib/gstdio.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char *user_config_home;

static CohortConfig *load_json(const char *json, GError **error)
{
  return cohort_config_load_data(json, -1, "run.json", error);
}

/* The value of `key` set to `value` through JSON. */
static CohortConfig *load_one(const char *key, const char *value, GError **error)
{
  g_autofree char *json = g_strdup_printf("{\"version\": 1, \"%s\": %s}", key, value);
  return load_json(json, error);
}

/* The `model` key's choices and the family tags of keys are the declared families. */
static void test_families(void)
{
  guint n_families;
  const CohortFamily *families = cohort_families(&n_families);
  g_assert_cmpuint(n_families, >=, 3);
  const CohortConfigKey *model = cohort_config_find_key("model");
  g_assert_cmpuint(g_strv_length((char **)model->choices), ==, n_families);
  g_autoptr(GString) names = g_string_new(NULL);
  for (guint i = 0; i < n_families; i++) {
    g_assert_cmpstr(model->choices[i], ==, families[i].name);
    g_assert_true(cohort_family_find(families[i].name) == &families[i]);
    g_assert_nonnull(families[i].label);
    g_string_append_printf(names, "%s%s", i ? ", " : "", families[i].name);
    g_autoptr(CohortConfig) cfg = cohort_config_new();
    g_assert_true(cohort_config_set(cfg, "model", families[i].name, "test", NULL));
  }
  g_assert_cmpstr(model->allowed, ==, names->str);
  g_assert_null(cohort_family_find("vae"));
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_config_set(cfg, "model", "vae", "test", &error));
  g_assert_nonnull(strstr(error->message, names->str));
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    if (keys[i].models == NULL)
      continue;
    g_auto(GStrv) tags = g_strsplit(keys[i].models, ",", -1);
    for (guint t = 0; tags[t] != NULL; t++)
      if (cohort_family_find(tags[t]) == NULL)
        g_error("key \"%s\" names family \"%s\", which is not declared", keys[i].name, tags[t]);
  }
}

/* A key that depends on another names a key and some of its values, and is in effect only
 * under those values (SGD's momentum with optimizer sgd; StepLR's step size with step; the
 * trainable patterns with finetune lora or frozen). */
static void test_key_conditions(void)
{
  guint n, conditional = 0;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    const CohortConfigKey *k = &keys[i];
    if (k->when_key == NULL) {
      g_assert_null(k->when_value);
      continue;
    }
    conditional++;
    const CohortConfigKey *on = cohort_config_find_key(k->when_key);
    g_assert_nonnull(on);
    g_assert_nonnull(on->choices);
    g_auto(GStrv) values = g_strsplit(k->when_value, ",", -1);
    for (guint v = 0; values[v]; v++)
      g_assert_true(g_strv_contains(on->choices, values[v]));
    g_autoptr(CohortConfig) cfg = cohort_config_new();
    if (k->models) { /* a family's key: in effect only with that family */
      g_auto(GStrv) fams = g_strsplit(k->models, ",", 2);
      g_assert_true(cohort_config_set(cfg, "model", fams[0], "test", NULL));
    }
    for (const char *const *c = on->choices; *c != NULL; c++) {
      g_assert_true(cohort_config_set(cfg, on->name, *c, "test", NULL));
      g_assert_true(cohort_config_key_in_effect(k, cfg) ==
                    g_strv_contains((const char *const *)values, *c));
    }
  }
  g_assert_cmpuint(conditional, >=, 4);
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_assert_false(cohort_config_key_in_effect(cohort_config_find_key("momentum"), cfg));
  g_assert_true(cohort_config_set(cfg, "optimizer", "sgd", "test", NULL));
  g_assert_true(cohort_config_key_in_effect(cohort_config_find_key("momentum"), cfg));
  g_assert_false(cohort_config_key_in_effect(cohort_config_find_key("lr_gamma"), cfg));
  g_assert_true(cohort_config_key_in_effect(cohort_config_find_key("n_layer"), cfg));
  /* A family's own key is in effect only with that family. */
  g_assert_false(cohort_config_key_in_effect(cohort_config_find_key("patch_size"), cfg));
  g_assert_true(cohort_config_set(cfg, "model", "dit", "test", NULL));
  g_assert_true(cohort_config_key_in_effect(cohort_config_find_key("patch_size"), cfg));
}

static void test_defaults(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_validate(cfg, "defaults", &error));
  g_assert_no_error(error);
  g_assert_true(cohort_config_check_supported(cfg, "defaults", &error));
  g_assert_cmpint(cfg->version, ==, COHORT_CONFIG_VERSION);
  g_assert_cmpstr(cfg->model, ==, "gpt");
  g_assert_cmpint(cfg->n_embd, ==, 256);
  g_assert_cmpfloat(cfg->learning_rate, ==, 0.002);
  g_assert_cmpint(cfg->lr_schedule, ==, COHORT_LR_COSINE);
  g_assert_cmpint(cfg->distributed_backend, ==, COHORT_BACKEND_GLOO);
  g_assert_cmpint(cfg->master_port, ==, 29500);
  g_assert_cmpfloat(cfg->bucket_cap_mb, ==, 0); /* sized from the model */
  g_assert_cmpfloat(cfg->timeout_s, ==, 300);
  g_assert_true(cfg->use_torchrun);
  g_assert_cmpuint(cfg->device_indexes->len, ==, 0);
  g_assert_cmpstr(cfg->sample_prompt, ==, "This License");
  g_assert_cmpstr(cfg->init_from, ==, "");
  g_assert_cmpstr(cfg->tokenizer, ==, "bytes");
  g_assert_false(cfg->allow_tf32);
  g_assert_cmpfloat(cfg->loss_scale_init, ==, 65536);
  g_assert_cmpint(cfg->loss_scale_growth_interval, ==, 2000);
  g_assert_cmpint(cfg->reduce_precision, ==, COHORT_REDUCE_FP32);

  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  g_assert_null(cohort_config_find_key("version"));
  for (guint i = 0; i < n; i++)
    g_assert_true(cohort_config_find_key(keys[i].name) == &keys[i]);
  g_assert_cmpstr(cohort_config_find_key("lr_schedule")->allowed, ==,
                  "constant, cosine, linear, step");
  g_assert_cmpstr(cohort_config_find_key("learning_rate")->allowed, ==, "a number > 0 and <= 10");
  g_assert_cmpstr(cohort_config_find_key("beta2")->allowed, ==, "a number >= 0 and < 1");
  g_assert_cmpstr(cohort_config_find_key("n_layer")->allowed, ==, "an integer from 1 to 96");
  g_assert_cmpstr(cohort_config_find_key("max_steps")->allowed, ==, "an integer >= 0");
  const char *pages[] = {"model", "data", "training", "output", "distributed"};
  guint g = 0;
  for (guint i = 0; i < n; i++) {
    g_assert_nonnull(keys[i].help);
    g_assert_nonnull(keys[i].allowed);
    /* Groups come in one block each, in struct order. */
    while (g < G_N_ELEMENTS(pages) && strcmp(keys[i].page, pages[g]) != 0)
      g++;
    g_assert_cmpuint(g, <, G_N_ELEMENTS(pages));
  }
}

/* A valid value other than the current one, taken from the key's table row. */
static char *other_value(const CohortConfig *cfg, const CohortConfigKey *k)
{
  g_autofree char *cur = cohort_config_get(cfg, k->name);
  switch (k->type) {
  case COHORT_KEY_INT:
  case COHORT_KEY_INT64: {
    /* The least allowed value, else the next, else the largest (image_channels: 1, 3). */
    gint64 tries[] = {(gint64)k->min, (gint64)k->min + 1, (gint64)MIN(k->max, 1e15)};
    for (guint i = 0; i < G_N_ELEMENTS(tries); i++) {
      g_autofree char *v = g_strdup_printf("%" G_GINT64_FORMAT, tries[i]);
      g_autoptr(CohortConfig) probe = cohort_config_copy(cfg);
      if (g_ascii_strtoll(cur, NULL, 10) != tries[i] &&
          cohort_config_set(probe, k->name, v, "test", NULL))
        return g_steal_pointer(&v);
    }
    g_assert_not_reached();
  }
  case COHORT_KEY_DOUBLE: {
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    double cur_v = g_ascii_strtod(cur, NULL);
    double v = cur_v != k->min ? k->min : k->max;
    return g_strdup(g_ascii_formatd(buf, sizeof buf, "%.17g", v));
  }
  case COHORT_KEY_BOOL:
    return g_strdup(strcmp(cur, "true") == 0 ? "false" : "true");
  case COHORT_KEY_STRING:
    /* per-channel number lists (checked across keys): another list */
    if (g_str_has_prefix(k->name, "image_"))
      return g_strdup("0.25");
    /* one share per rank (checked when the config is): another split */
    if (g_str_equal(k->name, "rank_batch_sizes"))
      return g_strdup("5,2,9");
    return g_strconcat(cur, " \"é\"\n\t\\x\001", NULL);
  case COHORT_KEY_CHOICE: {
    guint n = g_strv_length((char **)k->choices);
    for (guint i = 0; i < n; i++)
      if (strcmp(k->choices[i], cur) == 0)
        return g_strdup(k->choices[(i + 1) % n]);
    g_assert_not_reached();
  }
  case COHORT_KEY_INT_LIST:
    return g_strdup("3,1,2");
  }
  g_assert_not_reached();
}

static void test_round_trip(void)
{
  g_autoptr(CohortConfig) defaults = cohort_config_new();
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);

  /* vocab_size may leave 256 only with token data. */
  g_assert_true(cohort_config_set(cfg, "data_format", "tokens", "test", &error));
  for (guint i = 0; i < n; i++) {
    if (strcmp(keys[i].name, "model") == 0 || strcmp(keys[i].name, "data_format") == 0)
      continue;
    g_autofree char *v = other_value(cfg, &keys[i]);
    if (!cohort_config_set(cfg, keys[i].name, v, "test", &error))
      g_error("setting %s to %s: %s", keys[i].name, v, error->message);
  }
  g_auto(GStrv) changed = cohort_config_diff(defaults, cfg);
  g_assert_cmpuint(g_strv_length(changed), ==, n - 1); /* every key but model */
  g_assert_cmpfloat(cfg->ema_decay, >, 0.99);
  g_assert_cmpfloat(cfg->eps, >, 0);
  g_assert_cmpfloat(cfg->eps, <, 1e-300);

  g_autofree char *dir = g_dir_make_tmp("cohort-config-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *path = g_build_filename(dir, "run.json", NULL);
  g_assert_true(cohort_config_save_file(cfg, path, &error));
  g_assert_no_error(error);

  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_assert_true(g_str_has_prefix(text, "{\n  \"version\": 1,\n  \"model\": \"gpt\",\n"));
  g_assert_true(g_str_has_suffix(text, "\n}\n"));
  g_assert_nonnull(strstr(text, "\"device_indexes\": [3, 1, 2]"));

  g_autoptr(CohortConfig) back = cohort_config_load_file(path, &error);
  g_assert_no_error(error);
  g_auto(GStrv) diff = cohort_config_diff(cfg, back);
  g_assert_cmpuint(g_strv_length(diff), ==, 0);
  g_autofree char *h1 = cohort_config_hash(cfg);
  g_autofree char *h2 = cohort_config_hash(back);
  g_assert_cmpstr(h1, ==, h2);

  /* json-glib reads what we write, escapes and all. */
  g_autoptr(CohortConfig) copy = cohort_config_copy(back);
  g_assert_cmpstr(copy->sample_prompt, ==, cfg->sample_prompt);
  g_assert_cmpuint(copy->device_indexes->len, ==, 3);
  g_assert_cmpint(g_array_index(copy->device_indexes, int, 2), ==, 2);

  /* Defaults write short numbers. */
  g_autofree char *json = cohort_config_to_json(defaults, TRUE);
  g_assert_nonnull(strstr(json, "\"beta2\": 0.95,"));
  g_assert_nonnull(strstr(json, "\"eps\": 1e-08,"));
  g_assert_nonnull(strstr(json, "\"grad_clip\": 1.0,"));

  g_unlink(path);
  g_rmdir(dir);
}

static void assert_invalid(GError *error, const char *key, const char *shown)
{
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_autofree char *want = g_strdup_printf("key \"%s\": %s is not allowed; allowed: ", key, shown);
  if (!strstr(error->message, want))
    g_error("message \"%s\" lacks \"%s\"", error->message, want);
  g_assert_nonnull(strstr(error->message, cohort_config_find_key(key)->allowed));
}

/* Bad values for one key, each as JSON and as its message shows it. */
static void check_bad(const char *key, const char *json_value)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = load_one(key, json_value, &error);
  g_assert_null(cfg);
  assert_invalid(error, key, json_value);
  g_assert_true(g_str_has_prefix(error->message, "run.json: "));
}

/* eval_steps has an upper bound: a billion validation batches would run for ever. */
static void test_eval_steps_bound(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) huge = load_one("eval_steps", "1000000000", &error);
  g_assert_null(huge);
  g_assert_nonnull(error);
  g_assert_nonnull(strstr(error->message, "eval_steps"));
  g_assert_nonnull(strstr(error->message, "1000000000"));
  g_assert_nonnull(strstr(error->message, "100000"));
  g_clear_error(&error);
  g_autoptr(CohortConfig) most = load_one("eval_steps", "100000", &error);
  g_assert_no_error(error);
  g_assert_cmpint(most->eval_steps, ==, 100000);
}

static void test_invalid_values(void)
{
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    const CohortConfigKey *k = &keys[i];
    check_bad(k->name, "null");
    check_bad(k->name, "{\"a\":1}");
    switch (k->type) {
    case COHORT_KEY_INT:
    case COHORT_KEY_INT64: {
      check_bad(k->name, "\"7\"");
      check_bad(k->name, "1.5");
      check_bad(k->name, "true");
      g_autofree char *below = g_strdup_printf("%" G_GINT64_FORMAT, (gint64)k->min - 1);
      check_bad(k->name, below);
      if (k->max < G_MAXINT || k->type == COHORT_KEY_INT64) {
        g_autofree char *above = g_strdup_printf("%" G_GINT64_FORMAT, (gint64)k->max + 1);
        check_bad(k->name, above);
      } else {
        check_bad(k->name, "2147483648");
      }
      break;
    }
    case COHORT_KEY_DOUBLE: {
      check_bad(k->name, "\"0.5\"");
      check_bad(k->name, "[1]");
      check_bad(k->name, k->min > 0 ? "0" : "-1");
      check_bad(k->name, "-0.5");
      if (k->max < 1)
        check_bad(k->name, "1");
      else if (k->max < 1e300) {
        g_autofree char *above = g_strdup_printf("%.0f", k->max * 2);
        check_bad(k->name, above);
      }
      {
        /* A number beyond a double's range is refused by the strict reader, where json-glib
         * would read it as infinity. */
        g_autoptr(GError) error = NULL;
        g_autoptr(CohortConfig) inf = load_one(k->name, "1e999", &error);
        g_assert_null(inf);
        g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_PARSE);
        g_assert_nonnull(strstr(error->message, "\"1e999\" is too large"));
      }
      break;
    }
    case COHORT_KEY_BOOL:
      check_bad(k->name, "1");
      check_bad(k->name, "\"true\"");
      break;
    case COHORT_KEY_STRING:
      check_bad(k->name, "5");
      check_bad(k->name, "false");
      if (k->min >= 1)
        check_bad(k->name, "\"\"");
      break;
    case COHORT_KEY_CHOICE:
      check_bad(k->name, "\"nope\"");
      check_bad(k->name, "1");
      check_bad(k->name, "[\"gloo\"]");
      break;
    case COHORT_KEY_INT_LIST:
      check_bad(k->name, "0");
      check_bad(k->name, "\"0,1\"");
      check_bad(k->name, "[0.5]");
      check_bad(k->name, "[\"a\"]");
      break;
    }

    /* The same through --set, which leaves the config unchanged. */
    if (k->type != COHORT_KEY_STRING || k->min >= 1) {
      g_autoptr(CohortConfig) cfg = cohort_config_new();
      g_autofree char *before = cohort_config_hash(cfg);
      g_autoptr(GError) error = NULL;
      const char *bad = k->type == COHORT_KEY_STRING ? "" : "bogus";
      g_assert_false(cohort_config_set(cfg, k->name, bad, "--set", &error));
      g_autofree char *shown = g_strdup_printf("\"%s\"", bad);
      assert_invalid(error, k->name, shown);
      g_assert_true(g_str_has_prefix(error->message, "--set: "));
      g_autofree char *after = cohort_config_hash(cfg);
      g_assert_cmpstr(before, ==, after);
    }
  }

  /* The messages users see, verbatim. */
  g_autoptr(GError) error = NULL;
  g_assert_null(load_one("learning_rate", "-1", &error));
  g_assert_cmpstr(error->message, ==,
                  "run.json: key \"learning_rate\": -1 is not allowed; allowed: a number > 0 and "
                  "<= 10");
  g_clear_error(&error);
  g_assert_null(load_one("lr_schedule", "\"cosin\"", &error));
  g_assert_cmpstr(error->message, ==,
                  "run.json: key \"lr_schedule\": \"cosin\" is not allowed; allowed: constant, "
                  "cosine, linear, step");
  g_clear_error(&error);
  g_assert_null(load_one("n_layer", "4.0", &error));
  g_assert_cmpstr(
      error->message, ==,
      "run.json: key \"n_layer\": 4.0 is not allowed; allowed: an integer from 1 to 96");
}

static void test_unknown_key(void)
{
  g_autoptr(GError) error = NULL;
  g_assert_null(load_one("learnig_rate", "0.1", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY);
  g_assert_cmpstr(error->message, ==,
                  "run.json: unknown key \"learnig_rate\"; did you mean \"learning_rate\"?");
  g_clear_error(&error);

  g_assert_null(load_one("frobnicate", "1", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY);
  g_assert_null(strstr(error->message, "did you mean"));
  g_assert_nonnull(strstr(error->message, "\"frobnicate\""));
  g_clear_error(&error);

  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_assert_false(cohort_config_set(cfg, "n_embed", "64", "--set", &error));
  g_assert_cmpstr(error->message, ==, "--set: unknown key \"n_embed\"; did you mean \"n_embd\"?");
  g_clear_error(&error);

  g_assert_cmpstr(cohort_config_suggest_key("gradient_accumulation"), ==,
                  "gradient_accumulation_steps");
  g_assert_cmpstr(cohort_config_suggest_key("Batch_Size"), ==, "batch_size");
  g_assert_cmpstr(cohort_config_suggest_key("epoch"), ==, "epochs");
  g_assert_cmpstr(cohort_config_suggest_key("lr"), ==, "learning_rate");
  g_assert_null(cohort_config_suggest_key("foo"));
  g_assert_null(cohort_config_suggest_key("temp"));
  g_assert_null(cohort_config_suggest_key(""));
}

static void test_bad_json(void)
{
  const char *cases[] = {"{\"version\": 1,\n \"n_layer\": }", "{\"version\": 1", "nonsense"};
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autoptr(GError) error = NULL;
    g_assert_null(load_json(cases[i], &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_PARSE);
    g_assert_true(g_str_has_prefix(error->message, "run.json: not valid JSON: "));
    g_test_message("%s", error->message);
  }
  g_autoptr(GError) error = NULL;
  g_assert_null(load_json("{\"version\": 1,\n \"n_layer\": }", &error));
  /* json-glib's line:column survives. */
  g_assert_true(g_str_has_prefix(error->message, "run.json: not valid JSON: 2:"));
  g_clear_error(&error);

  const char *not_objects[] = {"[1, 2]", "3", ""};
  for (guint i = 0; i < G_N_ELEMENTS(not_objects); i++) {
    g_assert_null(load_json(not_objects[i], &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_PARSE);
    g_clear_error(&error);
  }

  g_assert_null(load_json("{\"version\": 1, \"n_layer\": 2, \"seed\": 1, \"n_layer\": 3}", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_assert_cmpstr(
      error->message, ==,
      "run.json: key \"n_layer\" is given more than once (at 1:41); allowed: each key once");
  g_clear_error(&error);
  /* The same name in different objects is no repeat (the value is still refused). */
  g_assert_null(load_json("{\"version\": 1, \"seed\": {\"seed\": 1}}", &error));
  assert_invalid(error, "seed", "{\"seed\":1}");
  g_clear_error(&error);

  g_assert_null(cohort_config_load_file("/nonexistent/run.json", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO);
  g_assert_cmpstr(error->message, ==,
                  "/nonexistent/run.json: cannot read: No such file or directory");
  g_clear_error(&error);
  g_assert_null(cohort_config_load_file(g_get_tmp_dir(), &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO);
}

static void test_versions(void)
{
  g_autoptr(GError) error = NULL;
  g_assert_null(load_json("{\"n_layer\": 2}", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION);
  g_assert_nonnull(strstr(error->message, "add \"version\": 1"));
  g_clear_error(&error);

  g_assert_null(load_json("{\"version\": 2}", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION);
  g_assert_cmpstr(error->message, ==,
                  "run.json: \"version\" 2 is newer than this build's version 1; use a newer "
                  "Cohort to read it");
  g_clear_error(&error);

  const char *bad[] = {"\"1\"", "1.0", "-1", "null"};
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    g_autofree char *json = g_strdup_printf("{\"version\": %s}", bad[i]);
    g_assert_null(load_json(json, &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_VERSION);
    g_assert_nonnull(strstr(error->message, bad[i]));
    g_clear_error(&error);
  }

  g_autoptr(CohortConfig) v1 = load_json("{\"version\": 1}", &error);
  g_assert_no_error(error);
  g_autoptr(CohortConfig) defaults = cohort_config_new();
  g_auto(GStrv) none = cohort_config_diff(v1, defaults);
  g_assert_cmpuint(g_strv_length(none), ==, 0);
}

static void test_migration(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = load_json(
      "{\"version\": 0, \"multi_gpu\": true, \"backend\": \"nccl\", \"lr\": 0.02, \"seed\": 7}",
      &error);
  g_assert_no_error(error);
  g_assert_cmpint(cfg->version, ==, 1);
  g_assert_true(cfg->enable_multi_gpu);
  g_assert_cmpint(cfg->distributed_backend, ==, COHORT_BACKEND_NCCL);
  g_assert_cmpfloat(cfg->learning_rate, ==, 0.02);
  g_assert_cmpint(cfg->seed, ==, 7);
  g_autofree char *json = cohort_config_to_json(cfg, FALSE);
  g_assert_true(g_str_has_prefix(json, "{\"version\":1,"));
  g_assert_null(strstr(json, "\"lr\""));

  /* Migrated values are validated like any other. */
  g_assert_null(load_json("{\"version\": 0, \"lr\": -1}", &error));
  assert_invalid(error, "learning_rate", "-1");
  g_clear_error(&error);

  g_assert_null(load_json("{\"version\": 0, \"lr\": 0.1, \"learning_rate\": 0.2}", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_assert_nonnull(strstr(error->message, "\"lr\""));
  g_assert_nonnull(strstr(error->message, "\"learning_rate\""));
  g_clear_error(&error);

  /* Version 1 uses the new names only. */
  g_assert_null(load_json("{\"version\": 1, \"backend\": \"nccl\"}", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY);
  g_assert_nonnull(strstr(error->message, "did you mean \"distributed_backend\"?"));
}

static void check_cross(const char *json, const char *const *needles)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = load_json(json, &error);
  g_assert_null(cfg);
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  for (const char *const *n = needles; *n; n++)
    if (!strstr(error->message, *n))
      g_error("message \"%s\" lacks \"%s\"", error->message, *n);
}

static void test_cross_rules(void)
{
  check_cross("{\"version\": 1, \"n_embd\": 250, \"n_head\": 4}",
              (const char *[]){"\"n_embd\": 250", "\"n_head\": 4", NULL});
  check_cross("{\"version\": 1, \"num_nodes\": 2, \"node_rank\": 2}",
              (const char *[]){"\"node_rank\": 2", "\"num_nodes\": 2", NULL});
  check_cross("{\"version\": 1, \"device_indexes\": [0, 1, 0]}",
              (const char *[]){"\"device_indexes\": [0,1,0]", "appears twice", NULL});
  check_cross("{\"version\": 1, \"device_indexes\": [0, -2]}",
              (const char *[]){"\"device_indexes\": [0,-2]", "negative", NULL});
  check_cross("{\"version\": 1, \"model\": \"vgg\"}",
              (const char *[]){"\"model\": \"vgg\"", "allowed: gpt", NULL});
  check_cross("{\"version\": 1, \"vocab_size\": 50257}",
              (const char *[]){"\"vocab_size\": 50257", "\"data_format\": \"text\"", NULL});
  /* image normalisation: one value per channel or one for all; std above 0; the resize side */
  check_cross("{\"version\": 1, \"image_channels\": 3, \"image_mean\": \"0.4,0.5\"}",
              (const char *[]){"\"image_mean\": \"0.4,0.5\"", "3 numbers", NULL});
  check_cross("{\"version\": 1, \"image_std\": \"0\"}",
              (const char *[]){"\"image_std\": \"0\"", "above 0", NULL});
  check_cross("{\"version\": 1, \"image_mean\": \"0.5x\"}",
              (const char *[]){"\"image_mean\": \"0.5x\"", NULL});
  check_cross("{\"version\": 1, \"image_size\": 224, \"image_resize\": 200}",
              (const char *[]){"\"image_resize\": 200", "\"image_size\": 224", NULL});

  /* The same shapes are fine when the other key agrees. */
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) ok =
      load_json("{\"version\": 1, \"max_steps\": 0, \"warmup_steps\": 500, \"vocab_size\": 50257, "
                "\"data_format\": \"tokens\", \"num_nodes\": 3, \"node_rank\": 2, \"n_embd\": 384, "
                "\"n_head\": 6, \"device_indexes\": [3, 0]}",
                &error);
  g_assert_no_error(error);
  g_assert_nonnull(ok);
  g_autoptr(CohortConfig) imagenet = load_json(
      "{\"version\": 1, \"image_channels\": 3, \"image_size\": 224, \"image_resize\": "
      "256, \"image_mean\": \"0.485, 0.456,0.406\", \"image_std\": \"0.229,0.224,0.225\"}",
      &error);
  g_assert_no_error(error);
  float mean[3], std[3];
  g_assert_true(cohort_config_image_normalisation(imagenet, NULL, mean, std, &error));
  g_assert_cmpfloat(mean[1], ==, 0.456f);
  g_assert_cmpfloat(std[2], ==, 0.225f);
  imagenet->image_channels = 1; /* one value stands for all channels; three for one do not fit */
  g_assert_false(cohort_config_image_normalisation(imagenet, NULL, mean, std, &error));
  g_clear_error(&error);

  /* Code that edits the struct directly gets caught too. */
  ok->batch_size = 0;
  g_assert_false(cohort_config_validate(ok, "gui", &error));
  assert_invalid(error, "batch_size", "0");
  g_clear_error(&error);
  ok->batch_size = 8;
  ok->lr_schedule = 7;
  g_assert_false(cohort_config_validate(ok, "gui", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
}

static void test_set(void)
{
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_set(cfg, "n_layer", "8", "--set", &error));
  g_assert_cmpint(cfg->n_layer, ==, 8);
  g_assert_true(cohort_config_set(cfg, "seed", "9007199254740991", "--set", &error));
  g_assert_cmpint(cfg->seed, ==, G_GINT64_CONSTANT(9007199254740991));
  g_assert_true(cohort_config_set(cfg, "learning_rate", "3e-4", "--set", &error));
  g_assert_cmpfloat(cfg->learning_rate, ==, 3e-4);
  g_assert_true(cohort_config_set(cfg, "grad_clip", "2", "--set", &error));
  g_assert_cmpfloat(cfg->grad_clip, ==, 2.0);
  g_assert_true(cohort_config_set(cfg, "shuffle", "FALSE", "--set", &error));
  g_assert_false(cfg->shuffle);
  g_assert_true(cohort_config_set(cfg, "sample_prompt", " Once upon a time", "--set", &error));
  g_assert_cmpstr(cfg->sample_prompt, ==, " Once upon a time");
  g_assert_true(cohort_config_set(cfg, "lr_schedule", "linear", "--set", &error));
  g_assert_cmpint(cfg->lr_schedule, ==, COHORT_LR_LINEAR);
  g_assert_true(cohort_config_set(cfg, "device_indexes", "0,1", "--set", &error));
  g_assert_cmpuint(cfg->device_indexes->len, ==, 2);
  g_assert_cmpint(g_array_index(cfg->device_indexes, int, 1), ==, 1);
  g_assert_true(cohort_config_set(cfg, "device_indexes", "[2, 3, 5]", "--set", &error));
  g_assert_cmpuint(cfg->device_indexes->len, ==, 3);
  g_assert_cmpint(g_array_index(cfg->device_indexes, int, 2), ==, 5);
  g_autofree char *list = cohort_config_get(cfg, "device_indexes");
  g_assert_cmpstr(list, ==, "2,3,5");
  g_assert_true(cohort_config_set(cfg, "device_indexes", "", "--set", &error));
  g_assert_cmpuint(cfg->device_indexes->len, ==, 0);
  g_assert_no_error(error);

  g_assert_true(cohort_config_set_assignment(cfg, " warmup_steps = 5", "--set", &error));
  g_assert_cmpint(cfg->warmup_steps, ==, 5);
  g_assert_true(cohort_config_set_assignment(cfg, "sample_prompt=a=b", "--set", &error));
  g_assert_cmpstr(cfg->sample_prompt, ==, "a=b");
  g_assert_no_error(error);

  g_assert_false(cohort_config_set_assignment(cfg, "learning_rate", "--set", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_assert_nonnull(strstr(error->message, "key=value"));
  g_clear_error(&error);
  g_assert_false(cohort_config_set(cfg, "version", "2", "--set", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_clear_error(&error);
  g_assert_false(cohort_config_set(cfg, "learning_rate", "nan", "--set", &error));
  assert_invalid(error, "learning_rate", "\"nan\"");
  g_clear_error(&error);
  g_assert_false(cohort_config_set(cfg, "master_addr", "host\xff", "--set", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_assert_true(g_utf8_validate(error->message, -1, NULL));
  g_clear_error(&error);
  g_assert_false(cohort_config_set(cfg, "device_indexes", "0,x", "--set", &error));
  assert_invalid(error, "device_indexes", "\"0,x\"");
  g_clear_error(&error);
  /* A cross-key rule refuses the edit and keeps the old value. */
  g_assert_false(cohort_config_set(cfg, "n_head", "3", "--set", &error));
  g_assert_nonnull(strstr(error->message, "\"n_embd\": 256"));
  g_assert_cmpint(cfg->n_head, ==, 4);
  g_clear_error(&error);

  /* get gives what set takes, for every key. */
  g_autoptr(CohortConfig) other = cohort_config_new();
  guint n;
  const CohortConfigKey *keys = cohort_config_keys(&n);
  for (guint i = 0; i < n; i++) {
    g_autofree char *v = cohort_config_get(cfg, keys[i].name);
    if (!cohort_config_set(other, keys[i].name, v, "--set", &error))
      g_error("%s", error->message);
  }
  g_auto(GStrv) diff = cohort_config_diff(cfg, other);
  g_assert_cmpuint(g_strv_length(diff), ==, 0);
  g_assert_null(cohort_config_get(cfg, "nope"));
}

static char *tmp_env_dir(void)
{
  return g_strdup(g_getenv("COHORT_TEST_SAVE_DIR"));
}

/* Containers may run tests as a root that cannot setuid. */
static gboolean can_drop_root(void)
{
  pid_t pid = fork();
  if (pid == 0)
    _exit(setgid(65534) == 0 && setuid(65534) == 0 ? 0 : 1);
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

static void test_save_readonly(void)
{
  if (g_test_subprocess()) {
    g_autofree char *dir = tmp_env_dir();
    g_autofree char *path = g_build_filename(dir, "run.json", NULL);
    /* Root writes anywhere; a plain user is what a read-only folder stops. */
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
      g_error("cannot drop root to test a read-only folder");
    g_autoptr(CohortConfig) cfg = cohort_config_new();
    g_autoptr(GError) error = NULL;
    g_assert_false(cohort_config_save_file(cfg, path, &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO);
    g_assert_true(g_str_has_prefix(error->message, path));
    g_test_message("%s", error->message);
    return;
  }
  if (geteuid() == 0 && !can_drop_root()) {
    g_test_skip("running as root without the right to become another user");
    return;
  }
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-config-XXXXXX", &error);
  g_assert_no_error(error);
  g_autofree char *path = g_build_filename(dir, "run.json", NULL);
  g_assert_true(g_file_set_contents(path, "old contents\n", -1, NULL));
  g_assert_cmpint(g_chmod(dir, 0555), ==, 0);
  g_setenv("COHORT_TEST_SAVE_DIR", dir, TRUE);
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed();
  g_assert_cmpint(g_chmod(dir, 0700), ==, 0);

  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_assert_cmpstr(text, ==, "old contents\n");
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_assert_cmpstr(g_dir_read_name(d), ==, "run.json");
  g_assert_null(g_dir_read_name(d));
  g_unlink(path);
  g_rmdir(dir);
}

/* A write that fails halfway (here: the file size limit, as a full disk would) leaves the old
 * file whole, which only a temporary file plus rename can promise. */
static void test_save_fails_midway(void)
{
  if (g_test_subprocess()) {
    g_autofree char *dir = tmp_env_dir();
    g_autofree char *path = g_build_filename(dir, "run.json", NULL);
    struct rlimit limit = {.rlim_cur = 100, .rlim_max = 100};
    signal(SIGXFSZ, SIG_IGN);
    g_assert_cmpint(setrlimit(RLIMIT_FSIZE, &limit), ==, 0);
    g_autoptr(CohortConfig) cfg = cohort_config_new();
    g_autoptr(GError) error = NULL;
    g_assert_false(cohort_config_save_file(cfg, path, &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO);
    g_assert_nonnull(strstr(error->message, "File too large"));
    return;
  }
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-config-XXXXXX", &error);
  g_autofree char *path = g_build_filename(dir, "run.json", NULL);
  g_autoptr(CohortConfig) old = cohort_config_new();
  g_assert_true(cohort_config_set(old, "n_layer", "7", "test", &error));
  g_assert_true(cohort_config_save_file(old, path, &error));
  g_setenv("COHORT_TEST_SAVE_DIR", dir, TRUE);
  g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed();

  g_autoptr(CohortConfig) back = cohort_config_load_file(path, &error);
  g_assert_no_error(error);
  g_assert_cmpint(back->n_layer, ==, 7);
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_assert_cmpstr(g_dir_read_name(d), ==, "run.json");
  g_assert_null(g_dir_read_name(d));
  g_unlink(path);
  g_rmdir(dir);
}

static void test_save_onto_folder(void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp("cohort-config-XXXXXX", &error);
  g_autofree char *target = g_build_filename(dir, "run.json", NULL);
  g_autofree char *inside = g_build_filename(target, "keep.txt", NULL);
  g_assert_cmpint(g_mkdir(target, 0700), ==, 0);
  g_assert_true(g_file_set_contents(inside, "keep\n", -1, NULL));

  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_assert_false(cohort_config_save_file(cfg, target, &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_IO);
  g_assert_true(g_str_has_prefix(error->message, target));
  g_clear_error(&error);
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents(inside, &text, NULL, NULL));
  g_assert_cmpstr(text, ==, "keep\n");
  g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
  g_assert_cmpstr(g_dir_read_name(d), ==, "run.json");
  g_assert_null(g_dir_read_name(d));

  /* A file saved twice is replaced whole. */
  g_autofree char *file = g_build_filename(dir, "b.json", NULL);
  g_assert_true(cohort_config_save_file(cfg, file, &error));
  g_assert_true(cohort_config_set(cfg, "n_layer", "2", "test", &error));
  g_assert_true(cohort_config_save_file(cfg, file, &error));
  g_autoptr(CohortConfig) back = cohort_config_load_file(file, &error);
  g_assert_no_error(error);
  g_assert_cmpint(back->n_layer, ==, 2);

  g_unlink(file);
  g_unlink(inside);
  g_rmdir(target);
  g_rmdir(dir);
}

static void test_presets(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) tiny = cohort_preset_load("tiny-gpt", &error);
  g_assert_no_error(error);
  g_autoptr(CohortConfig) defaults = cohort_config_new();
  g_auto(GStrv) diff = cohort_config_diff(tiny, defaults);
  if (diff[0])
    g_error("tiny-gpt differs from the defaults in %s", diff[0]);
  g_assert_true(cohort_config_check_supported(tiny, "tiny-gpt", &error));

  g_autoptr(CohortConfig) big = cohort_preset_load("gpt2-124m", &error);
  g_assert_no_error(error);
  g_assert_cmpint(big->n_layer, ==, 12);
  g_assert_cmpint(big->n_embd, ==, 768);
  g_assert_cmpint(big->vocab_size, ==, 50257);
  g_assert_cmpint(big->seq_len, ==, 1024);
  g_assert_cmpint(big->data_format, ==, COHORT_DATA_TOKENS);
  g_assert_cmpint(big->gradient_accumulation_steps, ==, 32);
  g_assert_cmpfloat(big->learning_rate, ==, 6e-4);
  g_assert_cmpint(big->max_steps, ==, 18865);
  g_assert_true(big->enable_multi_gpu);
  g_assert_cmpint(big->distributed_backend, ==, COHORT_BACKEND_NCCL);
  g_assert_true(cohort_config_validate(big, "gpt2-124m", &error));
  /* device "cuda" needs the CUDA path (a GPU is the trainer's check); bf16 runs everywhere. */
  g_assert_cmpint(big->precision, ==, COHORT_PRECISION_BF16);
  if (COHORT_HAVE_CUDA) {
    g_assert_true(cohort_config_check_supported(big, "gpt2-124m", &error));
  } else {
    g_assert_false(cohort_config_check_supported(big, "gpt2-124m", &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNSUPPORTED);
    g_assert_nonnull(strstr(error->message, "no CUDA path"));
    g_clear_error(&error);
  }
  big->device = COHORT_DEVICE_CPU;
  g_assert_true(cohort_config_check_supported(big, "gpt2-124m", &error));
  g_assert_no_error(error);

  /* Fine-tuning GPT-2 from a Hugging Face folder, with its tokenizer, on a folder of text. */
  g_autoptr(CohortConfig) ft = cohort_preset_load("gpt2-finetune", &error);
  g_assert_no_error(error);
  g_assert_cmpint(ft->data_format, ==, COHORT_DATA_TEXT);
  g_assert_cmpint(ft->vocab_size, ==, 50257);
  g_assert_cmpstr(ft->tokenizer, ==, "bytes");
  g_assert_cmpstr(ft->init_from, ==, "gpt2");
  g_assert_true(ft->enable_multi_gpu);
  g_assert_cmpint(ft->nproc_per_node, ==, 0);
  g_assert_cmpfloat(ft->learning_rate, ==, 5e-5);
  g_assert_true(cohort_config_validate(ft, "gpt2-finetune", &error));
  /* vocab_size 50257 on text needs a tokenizer: an init_from file cannot supply one. */
  g_autofree char *file = g_build_filename(g_get_tmp_dir(), "cohort-test-init.safetensors", NULL);
  g_assert_true(g_file_set_contents(file, "x", 1, NULL));
  g_free(ft->init_from);
  ft->init_from = g_strdup(file);
  g_assert_false(cohort_config_validate(ft, "gpt2-finetune", &error));
  g_assert_nonnull(strstr(error->message, "a tokenizer (key \"tokenizer\""));
  g_clear_error(&error);
  g_unlink(file);

  g_auto(GStrv) names = cohort_preset_list(FALSE);
  g_assert_true(g_strv_contains((const char *const *)names, "gpt2-finetune"));
  g_assert_true(g_strv_contains((const char *const *)names, "tiny-gpt"));
  g_assert_true(g_strv_contains((const char *const *)names, "gpt2-124m"));
  g_assert_true(g_strv_contains((const char *const *)names, "tiny-resnet"));
  g_auto(GStrv) mine = cohort_preset_list(TRUE);
  g_assert_cmpuint(g_strv_length(mine), ==, 0);

  g_assert_null(cohort_preset_load("tiny-gtp", &error));
  g_assert_nonnull(strstr(error->message, "\"tiny-gtp\""));
  g_autofree char *available = g_strjoinv(", ", names);
  g_autofree char *want = g_strdup_printf("available: %s", available);
  g_assert_nonnull(strstr(error->message, want));
  g_clear_error(&error);
  g_assert_null(cohort_preset_path("../tiny-gpt", &error));
  g_clear_error(&error);

  /* A user preset of the same name wins; a new name joins the list. */
  g_autofree char *user_dir = cohort_user_preset_dir();
  g_assert_true(g_str_has_prefix(user_dir, user_config_home));
  g_assert_cmpint(g_mkdir_with_parents(user_dir, 0700), ==, 0);
  g_autofree char *user_tiny = g_build_filename(user_dir, "tiny-gpt.json", NULL);
  g_autofree char *user_new = g_build_filename(user_dir, "my-run.json", NULL);
  g_assert_true(cohort_config_set(tiny, "n_layer", "2", "test", &error));
  g_assert_true(cohort_config_save_file(tiny, user_tiny, &error));
  g_assert_true(cohort_config_save_file(tiny, user_new, &error));
  g_autoptr(CohortConfig) overridden = cohort_preset_load("tiny-gpt", &error);
  g_assert_no_error(error);
  g_assert_cmpint(overridden->n_layer, ==, 2);
  g_autofree char *path = cohort_preset_path("tiny-gpt.json", &error);
  g_assert_cmpstr(path, ==, user_tiny);
  g_auto(GStrv) all = cohort_preset_list(FALSE);
  g_assert_cmpuint(g_strv_length(all), ==, g_strv_length(names) + 1);
  g_assert_true(g_strv_contains((const char *const *)all, "my-run"));
  g_auto(GStrv) user_only = cohort_preset_list(TRUE);
  g_assert_cmpuint(g_strv_length(user_only), ==, 2);
  g_unlink(user_tiny);
  g_unlink(user_new);
}

static void test_paths(void)
{
  g_assert_cmpstr(cohort_data_dir(), ==, g_getenv("COHORT_DATA_DIR"));
  g_autofree char *train = cohort_resolve_path("builtin:sample/train.txt");
  g_assert_true(g_file_test(train, G_FILE_TEST_IS_REGULAR));
  g_autofree char *plain = cohort_resolve_path("data/x.txt");
  g_assert_cmpstr(plain, ==, "data/x.txt");
}

static void test_hash_and_diff(void)
{
  g_autoptr(CohortConfig) a = cohort_config_new();
  g_autoptr(CohortConfig) b = cohort_config_copy(a);
  g_autofree char *ha = cohort_config_hash(a);
  g_autofree char *hb = cohort_config_hash(b);
  g_assert_cmpuint(strlen(ha), ==, 64);
  g_assert_cmpstr(ha, ==, hb);
  g_auto(GStrv) none = cohort_config_diff(a, b);
  g_assert_cmpuint(g_strv_length(none), ==, 0);

  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_set(b, "seed", "1338", "test", &error));
  g_assert_true(cohort_config_set(b, "master_port", "29501", "test", &error));
  g_autofree char *hb2 = cohort_config_hash(b);
  g_assert_cmpstr(ha, !=, hb2);
  g_auto(GStrv) two = cohort_config_diff(a, b);
  g_assert_cmpuint(g_strv_length(two), ==, 2);
  g_assert_cmpstr(two[0], ==, "seed");
  g_assert_cmpstr(two[1], ==, "master_port");

  g_assert_true(cohort_config_set(b, "learning_rate", "0.0010000000000000002", "test", &error));
  g_auto(GStrv) three = cohort_config_diff(a, b);
  g_assert_cmpuint(g_strv_length(three), ==, 3);
}

int main(int argc, char **argv)
{
  /* Before anything asks GLib for the user's config folder, which it caches. */
  user_config_home = g_dir_make_tmp("cohort-xdg-XXXXXX", NULL);
  g_setenv("XDG_CONFIG_HOME", user_config_home, TRUE);
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/config/defaults", test_defaults);
  g_test_add_func("/config/families", test_families);
  g_test_add_func("/config/key-conditions", test_key_conditions);
  g_test_add_func("/config/round-trip", test_round_trip);
  g_test_add_func("/config/invalid-values", test_invalid_values);
  g_test_add_func("/config/eval-steps-bound", test_eval_steps_bound);
  g_test_add_func("/config/unknown-key", test_unknown_key);
  g_test_add_func("/config/bad-json", test_bad_json);
  g_test_add_func("/config/versions", test_versions);
  g_test_add_func("/config/migration", test_migration);
  g_test_add_func("/config/cross-rules", test_cross_rules);
  g_test_add_func("/config/set", test_set);
  g_test_add_func("/config/save-readonly", test_save_readonly);
  g_test_add_func("/config/save-fails-midway", test_save_fails_midway);
  g_test_add_func("/config/save-onto-folder", test_save_onto_folder);
  g_test_add_func("/config/presets", test_presets);
  g_test_add_func("/config/paths", test_paths);
  g_test_add_func("/config/hash-and-diff", test_hash_and_diff);
  int rc = g_test_run();
  g_autofree char *presets = g_build_filename(user_config_home, "cohort", "presets", NULL);
  g_autofree char *cohort = g_build_filename(user_config_home, "cohort", NULL);
  g_rmdir(presets);
  g_rmdir(cohort);
  g_rmdir(user_config_home);
  g_free(user_config_home);
  return rc;
}
