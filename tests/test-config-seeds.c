/* The seeds' spellings: a version-0 config may use every key name the seed trainers and PyTorch
 * DDP scripts use (initial_port, multi_gpu, backend, sync_bn, use_amp / mixed_precision,
 * num_gpus, gpu_ids, batch_size_per_gpu, num_epochs, gradient_clipping, lr, use_ema,
 * output_dir, data_path), each lands on its current key with its value converted, giving both
 * is an error, a version-1 file gets the current name suggested, and seed keys that mean
 * nothing in Cohort are refused with the reason, never dropped. */
#include "engine/config/config.h"

#include <string.h>

static CohortConfig *load_json(const char *json, GError **error)
{
  return cohort_config_load_data(json, -1, "seed.json", error);
}

static void test_every_spelling(void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = load_json(
      "{\"version\": 0, \"initial_port\": 29600, \"backend\": \"gloo\", \"sync_bn\": true, "
      "\"use_amp\": true, \"num_gpus\": 4, \"gpu_ids\": \"0,1,2,3\", \"batch_size_per_gpu\": 8, "
      "\"num_epochs\": 3, \"gradient_clipping\": 1.5, \"lr\": 0.01, \"use_ema\": true, "
      "\"output_dir\": \"/tmp/out\", \"data_path\": \"builtin:sample/val.txt\"}",
      &error);
  g_assert_no_error(error);
  g_assert_cmpint(cfg->master_port, ==, 29600);
  g_assert_cmpint(cfg->distributed_backend, ==, COHORT_BACKEND_GLOO);
  g_assert_true(cfg->sync_batchnorm);
  g_assert_cmpint(cfg->precision, ==, COHORT_PRECISION_FP16);
  g_assert_cmpint(cfg->nproc_per_node, ==, 4);
  g_assert_true(cfg->enable_multi_gpu); /* num_gpus 4 asked for several GPUs */
  g_assert_cmpuint(cfg->device_indexes->len, ==, 4);
  g_assert_cmpint(g_array_index(cfg->device_indexes, int, 3), ==, 3);
  g_assert_cmpint(cfg->batch_size, ==, 8);
  g_assert_cmpint(cfg->epochs, ==, 3);
  g_assert_cmpfloat(cfg->grad_clip, ==, 1.5);
  g_assert_cmpfloat(cfg->learning_rate, ==, 0.01);
  g_assert_cmpfloat(cfg->ema_decay, ==, 0.999);
  g_assert_cmpstr(cfg->workspace_dir, ==, "/tmp/out");
  g_assert_cmpstr(cfg->train_data, ==, "builtin:sample/val.txt");

  /* The other spellings of the same settings. */
  g_autoptr(CohortConfig) b =
      load_json("{\"version\": 0, \"multi_gpu\": false, \"num_gpus\": 2, \"gpu_ids\": [1, 0], "
                "\"mixed_precision\": \"bf16\", \"use_ema\": false}",
                &error);
  g_assert_no_error(error);
  g_assert_false(b->enable_multi_gpu); /* the file said so */
  g_assert_cmpint(g_array_index(b->device_indexes, int, 0), ==, 1);
  g_assert_cmpint(b->precision, ==, COHORT_PRECISION_BF16);
  g_assert_cmpfloat(b->ema_decay, ==, 0);
  g_autoptr(CohortConfig) c =
      load_json("{\"version\": 0, \"mixed_precision\": \"no\", \"use_amp\": false}", &error);
  g_assert_null(c); /* both are precision */
  g_assert_nonnull(strstr(error->message, "and both are given"));
  g_clear_error(&error);
  g_autoptr(CohortConfig) d = load_json("{\"version\": 0, \"mixed_precision\": \"no\"}", &error);
  g_assert_no_error(error);
  g_assert_cmpint(d->precision, ==, COHORT_PRECISION_FP32);
}

static void test_bad_values(void)
{
  const char *cases[][2] = {
      {"{\"version\": 0, \"mixed_precision\": \"fp8\"}",
       "key \"mixed_precision\" (version 0): \"fp8\" is not allowed; allowed: \"no\", \"fp16\""},
      {"{\"version\": 0, \"use_amp\": \"yes\"}",
       "key \"use_amp\" (version 0): \"yes\" is not allowed; allowed: true or false"},
      {"{\"version\": 0, \"use_ema\": 1}", "key \"use_ema\" (version 0): 1 is not allowed"},
      {"{\"version\": 0, \"gpu_ids\": \"0,x\"}", "\"device_indexes\""},
      {"{\"version\": 0, \"initial_port\": 70000}", "key \"master_port\": 70000"},
      {"{\"version\": 0, \"output_dir\": \"a\", \"workspace_dir\": \"b\"}",
       "\"output_dir\" is the version 0 name of \"workspace_dir\", and both are given"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autoptr(GError) error = NULL;
    g_autoptr(CohortConfig) cfg = load_json(cases[i][0], &error);
    g_assert_null(cfg);
    g_test_message("%s", error->message);
    g_assert_true(g_str_has_prefix(error->message, "seed.json: "));
    g_assert_nonnull(strstr(error->message, cases[i][1]));
  }
}

/* Version 1 uses the current names; an old one is an unknown key with the new one
 * suggested. */
static void test_current_version(void)
{
  const char *cases[][2] = {
      {"use_amp", "precision"},
      {"gpu_ids", "device_indexes"},
      {"num_epochs", "epochs"},
      {"initial_port", "master_port"},
      {"batch_size_per_gpu", "batch_size"},
      {"output_dir", "workspace_dir"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
    g_autofree char *json = g_strdup_printf("{\"version\": 1, \"%s\": 1}", cases[i][0]);
    g_autoptr(GError) error = NULL;
    g_assert_null(load_json(json, &error));
    g_assert_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_UNKNOWN_KEY);
    g_autofree char *want = g_strdup_printf("did you mean \"%s\"?", cases[i][1]);
    g_assert_nonnull(strstr(error->message, want));
  }
}

/* Keys of the seeds with no meaning here are refused with a sentence that says why, in any
 * version, from a file and from --set. */
static void test_meaningless(void)
{
  const char *keys[] = {"find_unused_parameters",  "local_rank",      "dist_url",
                        "gradient_as_bucket_view", "cudnn_benchmark", "torch_compile"};
  for (guint i = 0; i < G_N_ELEMENTS(keys); i++) {
    for (int version = 0; version <= 1; version++) {
      g_autofree char *json = g_strdup_printf("{\"version\": %d, \"%s\": true}", version, keys[i]);
      g_autoptr(GError) error = NULL;
      g_assert_null(load_json(json, &error));
      g_test_message("%s", error->message);
      g_autofree char *want = g_strdup_printf("key \"%s\" is not a Cohort setting: ", keys[i]);
      g_assert_nonnull(strstr(error->message, want));
      g_assert_true(g_str_has_suffix(error->message, "; remove it"));
    }
  }
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_config_set(cfg, "find_unused_parameters", "true", "--set", &error));
  g_assert_nonnull(strstr(error->message, "every parameter of Cohort's models gets a gradient"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/config-seeds/every-spelling", test_every_spelling);
  g_test_add_func("/config-seeds/bad-values", test_bad_values);
  g_test_add_func("/config-seeds/current-version", test_current_version);
  g_test_add_func("/config-seeds/meaningless", test_meaningless);
  return g_test_run();
}
