/* TrainConfig input that json-glib alone would misread (issue items 9 and 10): strict JSON
 * refused with the position and what is wrong, keys compared after unescaping, and
 * device_indexes capped at 1024 entries from 0 to 1023, checked in linear time. */
#include "engine/config/config.h"

#include <string.h>

static CohortConfig *load_json(const char *json, GError **error)
{
  return cohort_config_load_data(json, -1, "run.json", error);
}

static CohortConfig *load_one(const char *key, const char *value, GError **error)
{
  g_autofree char *json = g_strdup_printf("{\"version\": 1, \"%s\": %s}", key, value);
  return load_json(json, error);
}

static void test_lenient_json(void)
{
  g_autoptr(GError) error = NULL;
  /* Spelled differently, the same key: names are compared unescaped. */
  g_assert_null(load_json("{\"version\": 1, \"seed\": 1, \"s\\u0065ed\": 2}", &error));
  g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
  g_assert_nonnull(strstr(error->message, "key \"seed\" is given more than once"));
  g_clear_error(&error);

  /* What json-glib alone would accept and read with another meaning: refused, with the
   * position and what is wrong. */
  const char *lenient[][2] = {
      {"{\"version\": 1}\n{\"n_layer\": 1}", "2:1: '{' after the end of the value"},
      {"{\"version\": 1, \"workspace_dir\": \"ws\\u0000/etc\"}", "1:36: \\u0000"},
      {"{\"version\": 1, // comment\n \"n_layer\": 2}", "1:16: comments are not allowed"},
      {"{\"version\": 1, \"n_layer\": 01}", "1:27: a number with a leading zero"},
      {"{\"version\": 1, \"n_layer\": 0x10}", "1:27: hexadecimal numbers"},
      {"\xEF\xBB\xBF{\"version\": 1}", "1:1: a byte order mark"},
      {"{\"version\": 1, \"sample_prompt\": \"a\tb\"}", "1:35: a raw control character"},
      {"{\"version\": 1, 'n_layer': 2}", "1:16: keys must be in double quotes"},
      {"{\"version\": 1, \"n_layer\": 2,}", "1:28: a comma before '}'"},
      {"{\"version\": 1, \"learning_rate\": NaN}", "1:33: NaN and Infinity"},
      {"{\"version\": 1, \"seed\": 18446744073709551617}", "outside the 64-bit range"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(lenient); i++) {
    g_assert_null(load_json(lenient[i][0], &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_PARSE);
    g_test_message("%s", error->message);
    g_assert_true(g_str_has_prefix(error->message, "run.json: not valid JSON: "));
    g_assert_nonnull(strstr(error->message, lenient[i][1]));
    g_clear_error(&error);
  }
}

/* device_indexes: at most 1024 distinct GPUs from 0 to 1023; a huge list is refused in linear
 * time (it used to take a minute: every entry was compared with every other). */
static GString *index_list(guint n, gboolean json)
{
  GString *out = g_string_new(json ? "[" : "");
  for (guint i = 0; i < n; i++)
    g_string_append_printf(out, "%s%u", i ? "," : "", i % 1024);
  if (json)
    g_string_append_c(out, ']');
  return out;
}

static void test_device_indexes(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) all = index_list(1024, TRUE);
  g_autoptr(CohortConfig) ok = load_one("device_indexes", all->str, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(ok->device_indexes->len, ==, 1024);
  g_assert_cmpint(g_array_index(ok->device_indexes, int, 1023), ==, 1023);

  const char *bad[][2] = {
      {"[1024]", "(1024 is above 1023)"},
      {"[0, 5, 7, 5]", "(5 appears twice)"},
      {"[3, -1]", "(-1 is negative)"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    g_assert_null(load_one("device_indexes", bad[i][0], &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID);
    g_assert_nonnull(strstr(error->message, bad[i][1]));
    g_assert_nonnull(strstr(error->message, "allowed: at most 1024 distinct integers"));
    g_clear_error(&error);
  }

  /* 1025 entries, and 400,000 (every index repeated): refused by their count, fast, from a
   * file and from --set. */
  guint counts[] = {1025, 400000};
  for (guint i = 0; i < G_N_ELEMENTS(counts); i++) {
    g_autoptr(GString) json = index_list(counts[i], TRUE);
    g_autoptr(GString) text = index_list(counts[i], FALSE);
    gint64 t0 = g_get_monotonic_time();
    g_assert_null(load_one("device_indexes", json->str, &error));
    g_autofree char *want = g_strdup_printf("(%u entries, more than 1024)", counts[i]);
    g_assert_nonnull(strstr(error->message, want));
    /* The value is shown cut short, the message stays one short line. */
    g_assert_cmpuint(strlen(error->message), <, 400);
    g_clear_error(&error);
    g_autoptr(CohortConfig) cfg = cohort_config_new();
    g_assert_false(cohort_config_set(cfg, "device_indexes", text->str, "--set", &error));
    g_assert_nonnull(strstr(error->message, want));
    g_clear_error(&error);
    double secs = (double)(g_get_monotonic_time() - t0) / 1e6;
    g_test_message("%u entries refused in %.3f s", counts[i], secs);
    g_assert_cmpfloat(secs, <, 5.0);
  }
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/config-input/lenient-json", test_lenient_json);
  g_test_add_func("/config-input/device-indexes", test_device_indexes);
  return g_test_run();
}
