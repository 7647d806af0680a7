/* Every place Cohort reads JSON from outside goes through the one strict, depth-limited
 * reader (engine/base/json-read.h): each call site is given a document nested a million deep
 * and must refuse it with an error naming the file, never overflow the stack (json-glib
 * alone recurses once per level). The sites: a config file, a user preset, a checkpoint's
 * state.json, a safetensors header, classes.json, a teacher folder's cohort-config.json,
 * classes.json and Hugging Face config.json, a --sample folder's classes.json, and a rank's
 * config read back from the rendezvous store. (The window's replay of events.jsonl is
 * tests/test-ui-run.c's.) */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

#include "data/images.h"
#include "engine/config/presets.h"
#include "engine/distributed/store.h"
#include "engine/model/safetensors.h"
#include "engine/progress/workspace.h"
#include "engine/train/sample-saved.h"
#include "engine/train/teacher.h"
#include "kernels/backend.h"
#include "test-util.h"

#define DEPTH 1000000

static char *tmp;

/* `prefix`, DEPTH '[', DEPTH ']', `suffix`. */
static GString *deep(const char *prefix, const char *suffix)
{
  GString *s = g_string_new(prefix);
  for (int i = 0; i < DEPTH; i++)
    g_string_append_c(s, '[');
  for (int i = 0; i < DEPTH; i++)
    g_string_append_c(s, ']');
  g_string_append(s, suffix);
  return s;
}

static char *write_deep(const char *dir, const char *name, const char *prefix, const char *suffix)
{
  g_assert_cmpint(g_mkdir_with_parents(dir, 0755), ==, 0);
  char *path = g_build_filename(dir, name, NULL);
  g_autoptr(GString) s = deep(prefix, suffix);
  g_assert_true(g_file_set_contents(path, s->str, (gssize)s->len, NULL));
  return path;
}

/* The refusal names the file and says the nesting is too deep. */
static void expect_deep_refused(const GError *error, const char *file)
{
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, file));
  g_assert_nonnull(strstr(error->message, "deep"));
  g_assert_null(strchr(error->message, '\n'));
}

static void test_config_and_preset(void)
{
  g_autofree char *dir = g_build_filename(tmp, "config", NULL);
  g_autofree char *path = write_deep(dir, "run.json", "{\"device_indexes\": ", "}");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_config_load_file(path, &error);
  g_assert_null(cfg);
  expect_deep_refused(error, path);

  g_autofree char *presets = cohort_user_preset_dir();
  g_autofree char *preset = write_deep(presets, "deep.json", "{\"device_indexes\": ", "}");
  g_clear_error(&error);
  g_autoptr(CohortConfig) p = cohort_preset_load("deep", &error);
  g_assert_null(p);
  expect_deep_refused(error, preset);
}

static void test_state_json(void)
{
  g_autofree char *dir = g_build_filename(tmp, "checkpoints", "step-00000001", NULL);
  g_autofree char *path = write_deep(dir, "state.json", "{\"version\": 1, \"rng\": ", "}");
  CohortTrainState st;
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_checkpoint_read_state(dir, &st, NULL, &error));
  expect_deep_refused(error, path);
}

static void test_safetensors_header(void)
{
  g_autoptr(GString) header = deep("{\"__metadata__\": {}, \"x\": ", "}");
  guint64 n = GUINT64_TO_LE(header->len);
  g_autoptr(GByteArray) file = g_byte_array_new();
  g_byte_array_append(file, (const guint8 *)&n, 8);
  g_byte_array_append(file, (const guint8 *)header->str, header->len);
  g_autofree char *path = g_build_filename(tmp, "deep.safetensors", NULL);
  g_assert_true(g_file_set_contents(path, (const char *)file->data, file->len, NULL));
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_assert_null(f);
  expect_deep_refused(error, path);
}

static void test_classes_json(void)
{
  g_autofree char *dir = g_build_filename(tmp, "classes", NULL);
  g_autofree char *path = write_deep(dir, "classes.json", "{\"classes\": ", "}");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = cohort_image_classes_read(path, &error);
  g_assert_null(names);
  expect_deep_refused(error, path);
}

/* A student config of `model` on images (dit) or text (gpt). */
static CohortConfig *student(const char *model)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_set(cfg, "model", model, "test", &error));
  if (g_str_equal(model, "dit"))
    g_assert_true(cohort_config_set(cfg, "data_format", "images", "test", &error));
  g_assert_no_error(error);
  return cfg;
}

static void expect_teacher_refused(const char *folder, const char *model, const char *file)
{
  g_autoptr(CohortConfig) cfg = student(model);
  g_free(cfg->teacher_from);
  cfg->teacher_from = g_strdup(folder);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortTeacher) t = cohort_teacher_load(cohort_backend_cpu(), cfg, NULL, 1, &error);
  g_assert_null(t);
  expect_deep_refused(error, file);
}

static void test_teacher_folder(void)
{
  /* cohort-config.json */
  g_autofree char *a = g_build_filename(tmp, "teacher-cfg", NULL);
  g_autofree char *a_cfg = write_deep(a, "cohort-config.json", "{\"device_indexes\": ", "}");
  expect_teacher_refused(a, "gpt", a_cfg);

  /* classes.json beside a valid image model config */
  g_autofree char *b = g_build_filename(tmp, "teacher-classes", NULL);
  g_autofree char *b_classes = write_deep(b, "classes.json", "{\"classes\": ", "}");
  g_autofree char *b_cfg = g_build_filename(b, "cohort-config.json", NULL);
  g_autoptr(CohortConfig) dit = student("dit");
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_save_file(dit, b_cfg, &error));
  expect_teacher_refused(b, "dit", b_classes);

  /* a Hugging Face config.json */
  g_autofree char *c = g_build_filename(tmp, "teacher-hf", NULL);
  g_autofree char *c_cfg = write_deep(c, "config.json", "{\"model_type\": \"gpt2\", \"x\": ", "}");
  expect_teacher_refused(c, "gpt", c_cfg);
}

static void test_sample_folder(void)
{
  g_autofree char *dir = g_build_filename(tmp, "sample", NULL);
  g_autofree char *classes = write_deep(dir, "classes.json", "{\"classes\": ", "}");
  g_autofree char *cfg_path = g_build_filename(dir, "cohort-config.json", NULL);
  g_autoptr(CohortConfig) dit = student("dit");
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_save_file(dit, cfg_path, &error));
  g_autofree char *out = g_build_filename(tmp, "sample.png", NULL);
  g_autoptr(JsonObject) f = cohort_sample_saved(dir, NULL, out, &error);
  g_assert_null(f);
  expect_deep_refused(error, classes);
}

/* Rank 0 reads another rank's config from the store when the hashes differ. */
static void test_store_value(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStoreServer) server =
      cohort_store_server_new("127.0.0.1", 0, "token", NULL, &error);
  g_assert_no_error(error);
  int port = cohort_store_server_port(server);
  g_autoptr(CohortStore) store = cohort_store_connect("127.0.0.1", port, "token", 5, &error);
  g_assert_no_error(error);
  g_autoptr(GString) json = deep("{\"device_indexes\": ", "}");
  g_assert_true(cohort_store_set(store, "config/json/1", json->str, json->len, &error));
  g_assert_true(cohort_store_set(store, "config/hash/1", "other", 5, &error));
  g_autoptr(CohortDistEnv) env = cohort_dist_env_new_single();
  env->world_size = 2;
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_assert_false(cohort_dist_check_config(store, env, cfg, 1.0, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "rank 1's config"));
  g_assert_nonnull(strstr(error->message, "deep"));
}

int main(int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  tmp = g_dir_make_tmp("cohort-json-sites-XXXXXX", &error);
  g_assert_no_error(error);
  /* Before GLib caches it: the user's presets live under the test's folder. */
  g_autofree char *xdg = g_build_filename(tmp, "xdg", NULL);
  g_setenv("XDG_CONFIG_HOME", xdg, TRUE);
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/json-sites/config-and-preset", test_config_and_preset);
  g_test_add_func("/json-sites/state-json", test_state_json);
  g_test_add_func("/json-sites/safetensors-header", test_safetensors_header);
  g_test_add_func("/json-sites/classes-json", test_classes_json);
  g_test_add_func("/json-sites/teacher-folder", test_teacher_folder);
  g_test_add_func("/json-sites/sample-folder", test_sample_folder);
  g_test_add_func("/json-sites/store-value", test_store_value);
  int rc = g_test_run();
  tu_rm_rf(tmp);
  g_free(tmp);
  return rc;
}
