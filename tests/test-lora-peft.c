/* adapter_from reads adapter_config.json whole (engine/model/lora-peft.h): an adapter Cohort
 * exported loads back; use_rslora is applied (and must be the run's lora_rslora, written back
 * by the export); target_modules must select exactly the adapted layers (an entry that names
 * nothing, a layer without an adapter, an adapted layer left out are refused, exclude_modules
 * is honoured); and every key that would change what the adapter computes and that Cohort
 * does not implement (use_dora, bias, modules_to_save, layers_to_transform, per-module
 * alpha_pattern and rank_pattern, ...) is refused by name with the value and what is allowed,
 * leaving the model unchanged. */
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>
#include <json-glib/json-glib.h>

#include "engine/base/fileio.h"
#include "engine/base/json-write.h"
#include "engine/model/lora-io.h"
#include "engine/models/registry.h"
#include "kernels/backend.h"

enum { L = 2, H = 2, C = 16, T = 8, V = 40, B = 2, RANK = 4 };

static CohortConfig *gpt_cfg(const char *targets, gboolean rslora)
{
  CohortConfig *cfg = cohort_config_new();
  cfg->n_layer = L, cfg->n_head = H, cfg->n_embd = C, cfg->seq_len = T, cfg->vocab_size = V;
  cfg->finetune = COHORT_FINETUNE_LORA;
  cfg->lora_rank = RANK;
  cfg->lora_alpha = 8.0;
  cfg->lora_rslora = rslora;
  g_free(cfg->lora_targets);
  cfg->lora_targets = g_strdup(targets);
  return cfg;
}

static CohortModel *make(const char *targets, gboolean rslora, guint64 seed)
{
  g_autoptr(CohortConfig) cfg = gpt_cfg(targets, rslora);
  g_autoptr(GError) error = NULL;
  CohortModel *m = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_no_error(error);
  cohort_model_init(m, seed);
  return m;
}

/* An adapter folder exported from a c_attn-only model with lora_B set. */
static char *export_adapter(gboolean rslora)
{
  g_autoptr(CohortModel) m = make("c_attn", rslora, 1);
  g_autofree float *p = g_new(float, m->n_params);
  cohort_model_download_params(m, p);
  for (guint k = 1; k < m->lora->n_tensors; k += 2)
    for (size_t i = 0; i < m->lora->tensors[k].numel; i++)
      p[m->lora->tensors[k].offset + i] = 0.01f * (float)(i % 7) - 0.02f;
  cohort_model_upload_params(m, p);
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp("cohort-test-lora-peft-XXXXXX", &error);
  g_assert_no_error(error);
  g_assert_true(cohort_lora_export(m, p, dir, "base", &error));
  g_assert_no_error(error);
  return dir;
}

static char *config_path(const char *dir)
{
  return g_build_filename(dir, "adapter_config.json", NULL);
}

/* adapter_config.json with member `key` set to the JSON `value` (NULL: removed). */
static void set_member(const char *dir, const char *key, const char *value)
{
  g_autofree char *path = config_path(dir), *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_autoptr(JsonNode) root = json_from_string(text, NULL);
  JsonObject *o = json_node_get_object(root);
  if (json_object_has_member(o, key))
    json_object_remove_member(o, key);
  if (value) {
    g_autoptr(GError) error = NULL;
    JsonNode *v = json_from_string(value, &error);
    g_assert_no_error(error);
    json_object_set_member(o, key, v);
  }
  g_autofree char *out = cohort_json_to_string(root, TRUE);
  g_assert_true(g_file_set_contents(path, out, -1, NULL));
}

/* The folder loads into a fresh model of `targets`. */
static void loads(const char *dir, const char *targets, gboolean rslora)
{
  g_autoptr(CohortModel) m = make(targets, rslora, 2);
  g_autoptr(GError) error = NULL;
  if (!cohort_lora_load(m, dir, &error))
    g_error("refused: %s", error->message);
}

/* Refused in one line naming adapter_config.json and `needle`; the model's adapters as they
 * were. */
static void refused(const char *dir, const char *targets, gboolean rslora, const char *needle)
{
  g_autoptr(CohortModel) m = make(targets, rslora, 2);
  g_autofree float *before = g_new(float, m->n_params), *after = g_new(float, m->n_params);
  cohort_model_download_params(m, before);
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_lora_load(m, dir, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_null(strchr(error->message, '\n'));
  g_autofree char *path = config_path(dir);
  if (!strstr(error->message, needle) || !strstr(error->message, path))
    g_error("\"%s\" lacks \"%s\" or the file", error->message, needle);
  cohort_model_download_params(m, after);
  g_assert_cmpmem(before, m->n_params * sizeof(float), after, m->n_params * sizeof(float));
}

/* Keys that change what the adapter computes: refused with the key and its value. */
static void test_unsupported_keys(void)
{
  g_autofree char *dir = export_adapter(FALSE);
  loads(dir, "c_attn", FALSE);
  const struct {
    const char *key, *value, *needle;
  } bad[] = {
      {"use_dora", "true", "field \"use_dora\": true is not supported"},
      {"bias", "\"all\"", "field \"bias\": \"all\" is not supported"},
      {"bias", "\"lora_only\"", "allowed: \"none\""},
      {"modules_to_save", "[\"lm_head\"]", "field \"modules_to_save\": [\"lm_head\"]"},
      {"layers_to_transform", "[0]", "field \"layers_to_transform\": [0]"},
      {"lora_bias", "true", "field \"lora_bias\": true"},
      {"layer_replication", "[[0, 2]]", "field \"layer_replication\""},
      {"trainable_token_indices", "[1, 2]", "field \"trainable_token_indices\""},
      {"alpha_pattern", "{\"c_attn\": 32}", "field \"alpha_pattern\": \"c_attn\": 32 differs"},
      {"rank_pattern", "{\"h.0.attn.c_attn\": 2}", "field \"rank_pattern\""},
      {"use_rslora", "\"yes\"", "field \"use_rslora\" is not true or false"},
  };
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    set_member(dir, bad[i].key, bad[i].value);
    refused(dir, "c_attn", FALSE, bad[i].needle);
    set_member(dir, bad[i].key, NULL);
  }
  /* their "off" values, and patterns that repeat the adapter's own r and alpha, change
   * nothing */
  const struct {
    const char *key, *value;
  } off[] = {
      {"use_dora", "false"},
      {"bias", "\"none\""},
      {"modules_to_save", "null"},
      {"layers_to_transform", "null"},
      {"alpha_pattern", "{}"},
      {"rank_pattern", "{\"c_attn\": 4}"},
      {"alpha_pattern", "{\"c_attn\": 8}"},
      {"layers_pattern", "\"h\""},
  };
  for (guint i = 0; i < G_N_ELEMENTS(off); i++) {
    set_member(dir, off[i].key, off[i].value);
    loads(dir, "c_attn", FALSE);
  }
  cohort_remove_tree(dir);
}

/* target_modules against the model's layers, by PEFT's matching rule. */
static void test_target_modules(void)
{
  g_autofree char *dir = export_adapter(FALSE);
  /* what the export wrote: the full module names */
  g_autofree char *path = config_path(dir), *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "\"transformer.h.0.attn.c_attn\""));
  /* PEFT's other spellings of the same layers */
  set_member(dir, "target_modules", "[\"c_attn\"]");
  loads(dir, "c_attn", FALSE);
  set_member(dir, "target_modules", "\"transformer\\\\.h\\\\.\\\\d+\\\\.attn\\\\.c_attn\"");
  loads(dir, "c_attn", FALSE);
  set_member(dir, "target_modules", "[\"c_attn\", \"c_fc\"]");
  set_member(dir, "exclude_modules", "[\"c_fc\"]");
  loads(dir, "c_attn", FALSE);
  set_member(dir, "exclude_modules", NULL);
  /* an entry that names no layer (another architecture's name) */
  set_member(dir, "target_modules", "[\"c_attn\", \"q_proj\"]");
  refused(dir, "c_attn", FALSE, "\"q_proj\" names no layer of this gpt model");
  /* a layer that has no adapter in this run, and an adapted layer left out */
  set_member(dir, "target_modules", "[\"c_attn\", \"c_fc\"]");
  refused(dir, "c_attn", FALSE, "selects \"transformer.h.0.mlp.c_fc\", which has no adapter");
  set_member(dir, "target_modules", "[\"h.0.attn.c_attn\"]");
  refused(dir, "c_attn", FALSE, "does not select \"transformer.h.1.attn.c_attn\"");
  set_member(dir, "target_modules", "\"nothing\\\\.here\"");
  refused(dir, "c_attn", FALSE, "does not select");
  set_member(dir, "target_modules", "[]");
  refused(dir, "c_attn", FALSE, "does not select");
  set_member(dir, "target_modules", "\"(unclosed\"");
  refused(dir, "c_attn", FALSE, "is not a regular expression");
  set_member(dir, "target_modules", NULL);
  refused(dir, "c_attn", FALSE, "field \"target_modules\" is missing");
  cohort_remove_tree(dir);
}

/* use_rslora: exported as the run's lora_rslora, read back, and refused when the run's
 * differs (the adapter would act at another scale). */
static void test_rslora(void)
{
  g_autofree char *plain = export_adapter(FALSE), *rs = export_adapter(TRUE);
  g_autofree char *path = config_path(rs), *text = NULL;
  g_assert_true(g_file_get_contents(path, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "\"use_rslora\": true"));
  loads(rs, "c_attn", TRUE);
  loads(plain, "c_attn", FALSE);
  refused(rs, "c_attn", FALSE, "field \"use_rslora\": true, but the run's lora_rslora is false");
  refused(plain, "c_attn", TRUE, "field \"use_rslora\": false, but the run's lora_rslora is true");
  /* a PEFT file without the key is plain LoRA */
  set_member(plain, "use_rslora", NULL);
  loads(plain, "c_attn", FALSE);
  cohort_remove_tree(plain);
  cohort_remove_tree(rs);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/lora-peft/unsupported-keys", test_unsupported_keys);
  g_test_add_func("/lora-peft/target-modules", test_target_modules);
  g_test_add_func("/lora-peft/rslora", test_rslora);
  return g_test_run();
}
