/* The model families' descriptions (engine/families/family.h), and the checklist of
 * docs/architecture.md ("A new model family") walked for every declared family: it has a
 * description, a class built from it, a preset, and a label translated in every language the
 * window ships. A model the class makes has exactly the description's tables and activation
 * bytes; and what the window counts from the config alone (engine/families/finetune-count.h)
 * equals what the engine's fine-tuning plan and layout make of the same config (adapted layers,
 * parameters with adapters, parameters that learn), at the defaults and for custom patterns; a
 * pattern the engine refuses is the one the count names. */
#include <string.h>

#include "engine/config/model-families.h"
#include "engine/families/family.h"
#include "engine/families/finetune-count.h"
#include "engine/model/finetune.h"
#include "engine/models/registry.h"
#include "kernels/backend.h"

static CohortConfig *config_of(const char *const *sets)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  cohort_config_apply_assignments(cfg, sets, "test", &error);
  g_assert_no_error(error);
  return cfg;
}

static void same_table(const CohortTensorInfo *got, guint n_got, const CohortTensorInfo *want,
                       guint n_want)
{
  g_assert_cmpuint(n_got, ==, n_want);
  for (guint i = 0; i < n_want; i++) {
    g_assert_cmpstr(got[i].name, ==, want[i].name);
    g_assert_cmpint(got[i].ndim, ==, want[i].ndim);
    for (int d = 0; d < COHORT_TENSOR_MAX_DIMS; d++)
      g_assert_cmpint(got[i].shape[d], ==, want[i].shape[d]);
    g_assert_cmpuint(got[i].numel, ==, want[i].numel);
    g_assert_cmpuint(got[i].offset, ==, want[i].offset);
    g_assert_cmpint(got[i].layer, ==, want[i].layer);
    g_assert_cmpint(got[i].adapt, ==, want[i].adapt);
    g_assert_cmpint(got[i].decay, ==, want[i].decay);
    g_assert_cmpint(got[i].int64, ==, want[i].int64);
  }
}

/* The model the class makes of `cfg` (num_classes at least 1, as the data gives it) has the
 * description's tables, and allocates the description's activation bytes, for training and
 * as a forward-only teacher. */
static void check_model(CohortConfig *cfg)
{
  cfg->num_classes = MAX(cfg->num_classes, 1);
  const CohortFamilyDesc *f = cohort_family_desc(cfg->model);
  CohortFamilyTables t;
  g_assert_true(f->tables(cfg, &t));
  for (int frozen = 0; frozen < 2; frozen++) {
    g_autoptr(GError) error = NULL;
    const CohortBackend *cpu = cohort_backend_cpu();
    g_autoptr(CohortModel) m = frozen ? cohort_model_new_frozen(cpu, cfg, 2, &error)
                                      : cohort_model_new(cpu, cfg, 2, &error);
    g_assert_no_error(error);
    g_assert_true(m->klass->family == f);
    same_table(m->tensors, m->n_tensors, t.params, t.n_params);
    g_assert_cmpuint(m->n_params, ==, t.param_floats);
    same_table(m->buffers, m->n_buffers, t.buffers, t.n_buffers);
    g_assert_cmpuint(m->n_buffer_floats, ==, t.buffer_floats);
    g_assert_cmpuint(m->act_bytes, ==, f->act_bytes(cfg, 2, frozen));
  }
  /* activation_checkpointing: a family that honours it keeps less for the same model (one
   * input per block and one block's buffers), and the model allocates what it says; one that
   * does not refuses the key */
  cfg->activation_checkpointing = TRUE;
  g_autoptr(GError) error = NULL;
  if (!f->activation_checkpointing) {
    g_assert_false(cohort_family_check_config(cfg, "test", &error));
    g_assert_nonnull(strstr(error->message, "activation_checkpointing"));
    cfg->activation_checkpointing = FALSE;
    cohort_family_tables_clear(&t);
    return;
  }
  g_assert_true(cohort_family_check_config(cfg, "test", &error));
  g_autoptr(CohortModel) m = cohort_model_new(cohort_backend_cpu(), cfg, 2, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(m->act_bytes, ==, f->act_bytes(cfg, 2, FALSE));
  g_autoptr(CohortModel) teacher = cohort_model_new_frozen(cohort_backend_cpu(), cfg, 2, &error);
  g_assert_no_error(error);
  g_assert_cmpuint(teacher->act_bytes, ==, f->act_bytes(cfg, 2, TRUE));
  cfg->activation_checkpointing = FALSE;
  g_assert_cmpuint(m->act_bytes, <, f->act_bytes(cfg, 2, FALSE));
  cohort_family_tables_clear(&t);
}

/* Whether po/<lang>.po translates `msgid` (a one-line msgid with a non-empty msgstr). */
static gboolean po_translates(const char *po, const char *msgid)
{
  g_autofree char *entry = g_strdup_printf("\nmsgid \"%s\"\nmsgstr \"", msgid);
  const char *at = strstr(po, entry);
  return at && at[strlen(entry)] != '"';
}

/* docs/architecture.md's checklist, for every family engine/config/model-families.h declares. */
static void test_checklist(void)
{
  guint n, n_descs;
  const CohortFamily *families = cohort_families(&n);
  const CohortFamilyDesc *const *descs = cohort_family_descs(&n_descs);
  g_assert_cmpuint(n_descs, ==, n);
  g_autofree char *linguas_path = g_test_build_filename(G_TEST_DIST, "..", "po", "LINGUAS", NULL);
  g_autofree char *linguas = NULL;
  g_assert_true(g_file_get_contents(linguas_path, &linguas, NULL, NULL));
  g_auto(GStrv) languages = g_regex_split_simple("\\s+", g_strstrip(linguas), 0, 0);
  g_autofree char *preset_dir = g_build_filename(cohort_data_dir(), "presets", NULL);
  for (guint i = 0; i < n; i++) {
    const char *name = families[i].name;
    g_test_message("family %s", name);
    /* a description, in the declared order, and a class built from it */
    g_assert_cmpstr(descs[i]->name, ==, name);
    g_assert_true(cohort_family_desc(name) == descs[i]);
    const CohortModelClass *k = cohort_model_class_find(name);
    g_assert_nonnull(k);
    g_assert_true(k->family == descs[i]);
    /* a label, translated in every language */
    g_assert_true(families[i].label && *families[i].label);
    for (guint l = 0; languages[l]; l++) {
      g_autofree char *po_name = g_strdup_printf("%s.po", languages[l]);
      g_autofree char *po_path = g_test_build_filename(G_TEST_DIST, "..", "po", po_name, NULL);
      g_autofree char *po = NULL;
      g_assert_true(g_file_get_contents(po_path, &po, NULL, NULL));
      if (!po_translates(po, families[i].label))
        g_error("model %s: label \"%s\" not translated in po/%s", name, families[i].label, po_name);
    }
    /* a preset; the smallest in pixel space makes a model that matches the description */
    g_autoptr(GDir) dir = g_dir_open(preset_dir, 0, NULL);
    g_assert_nonnull(dir);
    g_autoptr(CohortConfig) smallest = NULL;
    guint presets = 0;
    for (const char *file; (file = g_dir_read_name(dir));) {
      if (!g_str_has_suffix(file, ".json"))
        continue;
      g_autofree char *path = g_build_filename(preset_dir, file, NULL);
      g_autoptr(GError) error = NULL;
      g_autoptr(CohortConfig) cfg = cohort_config_load_file(path, &error);
      g_assert_no_error(error);
      if (g_strcmp0(cfg->model, name) != 0)
        continue;
      presets++;
      if (cfg->vae_from && *cfg->vae_from)
        continue;
      if (!smallest || cohort_family_count_params(cfg) < cohort_family_count_params(smallest)) {
        g_clear_pointer(&smallest, cohort_config_free);
        smallest = g_steal_pointer(&cfg);
      }
    }
    g_assert_cmpuint(presets, >, 0);
    g_assert_nonnull(smallest);
    check_model(smallest);
  }
}

/* The descriptions from the config alone: the window's view counts num_classes 0 as 1, and the
 * engine's (cohort_model_*) is the same without vae_from. */
static void test_config_alone(void)
{
  const char *const sets[] = {"model=resnet", "data_format=images", "n_layer=8", "num_classes=0",
                              NULL};
  g_autoptr(CohortConfig) cfg = config_of(sets);
  guint n = 0;
  size_t floats = 0;
  CohortTensorInfo *t = cohort_family_param_table(cfg, &n, &floats);
  g_assert_nonnull(t);
  g_assert_cmpint(t[n - 2].shape[0], ==, 1); /* fc.weight [1, 16] */
  g_assert_cmpint(cohort_family_count_params(cfg), ==, (gint64)floats);
  g_assert_cmpint(cohort_model_count_params(cfg), ==, (gint64)floats);
  g_assert_cmpuint(cohort_model_act_bytes(cfg, 4), ==, cohort_family_act_bytes(cfg, 4));
  g_assert_cmpstr(cohort_family_lora_targets(cfg), ==, "fc");
  cohort_family_table_free(t, n);
  /* the description's rules are the model's: a depth that is not 6n+2 */
  cfg->n_layer = 9;
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_family_check_config(cfg, "test", &error));
  g_assert_nonnull(strstr(error->message, "n_layer"));
  g_clear_error(&error);
  g_assert_false(cohort_model_check_config(cfg, "test", &error));
  g_assert_nonnull(strstr(error->message, "n_layer"));
  /* an unknown family has no description */
  g_assert_null(cohort_family_desc("vae"));
}

/* The count against the engine's plan and layout; returns the count (cleared by the caller). */
static void check_count(const CohortConfig *cfg, CohortFinetuneCount *c)
{
  const CohortModelClass *k = cohort_model_class_find(cfg->model);
  guint n = 0;
  size_t floats = 0;
  CohortTensorInfo *t = cohort_model_param_table(cfg, &n, &floats);
  g_assert_true(cohort_finetune_count(cfg, c));
  g_assert_cmpint(c->base_params, ==, (gint64)floats);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortFinetunePlan) plan = cohort_finetune_plan_new(
      cfg, k->name, cohort_family_desc_lora_targets(k->family, cfg), t, n, &error);
  if (plan == NULL) {
    /* the engine refuses: the count names the same pattern or layer */
    g_assert_true(c->targets_nothing || c->targets_refused || c->trainable_nothing);
    const char *named = c->trainable_nothing && cfg->finetune != COHORT_FINETUNE_FULL
                            ? c->trainable_nothing
                        : c->targets_nothing ? c->targets_nothing
                                             : c->targets_refused;
    g_assert_nonnull(strstr(error->message, named));
    cohort_tensor_table_free(t, n);
    return;
  }
  g_assert_no_error(error);
  g_assert_null(c->targets_nothing);
  g_assert_null(c->targets_refused);
  g_assert_null(c->trainable_nothing);
  CohortFinetuneLayout lay = {0};
  cohort_finetune_layout(plan, t, n, &lay);
  g_assert_cmpint(c->params, ==, (gint64)lay.n_params);
  g_assert_cmpint(c->learning, ==, (gint64)lay.n_trainable);
  if (cfg->finetune == COHORT_FINETUNE_LORA)
    g_assert_cmpuint(c->n_targets, ==, plan->n_adapters);
  cohort_finetune_layout_clear(&lay);
  cohort_tensor_table_free(t, n);
}

/* A model (sets), then each fine-tuning variation over it. */
static void check_family(const char *const *model_sets, const char *const *const *variations,
                         guint n_variations)
{
  g_autoptr(CohortConfig) base = config_of(model_sets);
  check_model(base);
  for (guint v = 0; v < n_variations; v++) {
    g_autoptr(CohortConfig) cfg = config_of(model_sets);
    g_autoptr(GError) error = NULL;
    cohort_config_apply_assignments(cfg, variations[v], "test", &error);
    g_assert_no_error(error);
    CohortFinetuneCount c;
    check_count(cfg, &c);
    cohort_finetune_count_clear(&c);
  }
}

static const char *const lora_default[] = {"finetune=lora", NULL};
static const char *const frozen_bias[] = {"finetune=frozen", "trainable=*.bias", NULL};
static const char *const full[] = {NULL};

static void test_gpt(void)
{
  const char *const tiny[] = {"model=gpt", NULL};
  const char *const own[] = {"finetune=lora", "lora_rank=4", "lora_targets=h.1.*,c_fc",
                             "trainable=ln_f", NULL};
  const char *const nothing[] = {"finetune=lora", "lora_targets=c_attn,q_proj", NULL};
  const char *const norm[] = {"finetune=lora", "lora_targets=ln_1", NULL};
  const char *const *vars[] = {full, lora_default, frozen_bias, own, nothing, norm};
  check_family(tiny, vars, G_N_ELEMENTS(vars));

  /* GPT-2 124M's shape: 1 179 648 of 124 439 808 parameters learn at rank 8 (the figures of
   * docs/finetuning.md) */
  const char *const gpt2[] = {"model=gpt",          "n_layer=12",    "n_embd=768",
                              "n_head=12",          "seq_len=1024",  "vocab_size=50257",
                              "data_format=tokens", "finetune=lora", NULL};
  g_autoptr(CohortConfig) cfg = config_of(gpt2);
  CohortFinetuneCount c;
  check_count(cfg, &c);
  g_assert_cmpint(c.base_params, ==, 124439808);
  g_assert_cmpint(c.learning, ==, 1179648);
  g_assert_cmpuint(c.n_targets, ==, 48);
  cohort_finetune_count_clear(&c);

  /* the count names the pattern that matched nothing, and the layer that takes no adapter */
  g_autoptr(CohortConfig) bad = config_of(tiny);
  const char *const both[] = {"finetune=lora", "lora_targets=ln_2,xyz", "trainable=abc", NULL};
  g_assert_true(cohort_config_apply_assignments(bad, both, "test", NULL));
  g_assert_true(cohort_finetune_count(bad, &c));
  g_assert_cmpstr(c.targets_nothing, ==, "xyz");
  g_assert_cmpstr(c.targets_refused, ==, "h.0.ln_2");
  g_assert_cmpstr(c.trainable_nothing, ==, "abc");
  g_assert_cmpuint(c.n_targets, ==, 0);
  cohort_finetune_count_clear(&c);
}

static void test_llama(void)
{
  const char *const tiny[] = {"model=llama", "num_key_value_heads=2", NULL};
  const char *const qwen2[] = {"model=llama", "architecture=Qwen2ForCausalLM",
                               "num_key_value_heads=1", "tie_word_embeddings=false", NULL};
  const char *const qwen3[] = {"model=llama", "architecture=Qwen3ForCausalLM", "head_dim=128",
                               "attention_bias=true", NULL};
  const char *const own[] = {"finetune=lora", "lora_rank=4", "lora_targets=model.layers.1.*,q_proj",
                             "trainable=model.norm.*", NULL};
  const char *const norm[] = {"finetune=lora", "lora_targets=q_norm", NULL};
  const char *const *vars[] = {full, lora_default, frozen_bias, own, norm};
  check_family(tiny, vars, G_N_ELEMENTS(vars));
  check_family(qwen2, vars, G_N_ELEMENTS(vars));
  check_family(qwen3, vars, G_N_ELEMENTS(vars));

  /* SmolLM2-135M's shape: 2 442 240 of 134 515 008 parameters learn at rank 8 on the seven
   * projections of its 30 layers (PEFT counts r·(in + out) for each) */
  const char *const smol[] = {"model=llama",
                              "n_layer=30",
                              "n_embd=576",
                              "n_head=9",
                              "num_key_value_heads=3",
                              "intermediate_size=1536",
                              "vocab_size=49152",
                              "seq_len=2048",
                              "rope_theta=100000",
                              "data_format=tokens",
                              "finetune=lora",
                              NULL};
  g_autoptr(CohortConfig) cfg = config_of(smol);
  CohortFinetuneCount c;
  check_count(cfg, &c);
  g_assert_cmpint(c.base_params, ==, 134515008);
  g_assert_cmpint(c.learning, ==, 2442240);
  g_assert_cmpuint(c.n_targets, ==, 7 * 30);
  cohort_finetune_count_clear(&c);
  g_assert_cmpstr(cohort_family_lora_targets(cfg), ==,
                  "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");

  /* the description's rules, named by the config's keys */
  const char *const bad_kv[] = {"model=llama", "n_head=4", "num_key_value_heads=3", NULL};
  g_autoptr(CohortConfig) kv = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_false(cohort_config_apply_assignments(kv, bad_kv, "test", &error) &&
                 cohort_model_check_config(kv, "test", &error));
  g_assert_nonnull(strstr(error->message, "\"num_key_value_heads\": 3 does not divide n_head 4"));
  g_clear_error(&error);
  const char *const odd[] = {"model=llama", "n_head=4", "head_dim=7", NULL};
  g_autoptr(CohortConfig) hd = cohort_config_new();
  g_assert_false(cohort_config_apply_assignments(hd, odd, "test", &error) &&
                 cohort_model_check_config(hd, "test", &error));
  g_assert_nonnull(strstr(error->message, "\"head_dim\": 7"));
}

static void test_dit(void)
{
  const char *const tiny[] = {"model=dit", "data_format=images", "num_classes=10", NULL};
  const char *const own[] = {"finetune=lora", "lora_targets=qkv,t_embedder.mlp.0", NULL};
  const char *const patch[] = {"finetune=lora", "lora_targets=x_embedder.proj", NULL};
  const char *const *vars[] = {full, lora_default, frozen_bias, own, patch};
  check_family(tiny, vars, G_N_ELEMENTS(vars));
}

static void test_resnet(void)
{
  const char *const cifar[] = {"model=resnet", "data_format=images", "n_layer=8", "num_classes=10",
                               NULL};
  const char *const fc[] = {"finetune=frozen", "trainable=fc.*", NULL};
  const char *const late[] = {"finetune=lora", "trainable=layer3.*,*.bias", NULL};
  /* convolutions take adapters (on the flattened kernel), BatchNorm none */
  const char *const conv[] = {"finetune=lora", "lora_targets=conv1,downsample.0", NULL};
  const char *const bn[] = {"finetune=lora", "lora_targets=bn1", NULL};
  const char *const *vars[] = {full, lora_default, fc, late, conv, bn};
  check_family(cifar, vars, G_N_ELEMENTS(vars));
  const char *const variants[][6] = {
      {"model=resnet", "data_format=images", "resnet_variant=resnet18", "image_channels=3",
       "num_classes=5", NULL},
      {"model=resnet", "data_format=images", "resnet_variant=resnet50", "image_channels=3",
       "image_size=64", NULL},
      {"model=resnet", "data_format=images", "resnet_variant=resnet101", "image_channels=3", NULL},
      {"model=resnet", "data_format=images", "n_layer=20", "resnet_width=8", NULL},
  };
  for (guint i = 0; i < G_N_ELEMENTS(variants); i++)
    check_family(variants[i], vars, G_N_ELEMENTS(vars));
}

/* No table for a shape the family does not build; the engine has none either. */
static void test_no_table(void)
{
  const char *const depth[] = {"model=resnet", "data_format=images", "n_layer=9", NULL};
  g_autoptr(CohortConfig) cfg = config_of(depth);
  CohortFinetuneCount c;
  g_assert_false(cohort_finetune_count(cfg, &c));
  guint n = 0;
  size_t floats = 0;
  g_assert_null(cohort_model_param_table(cfg, &n, &floats));
  g_assert_cmpint(cohort_model_count_params(cfg), ==, 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/families/checklist", test_checklist);
  g_test_add_func("/families/config-alone", test_config_alone);
  g_test_add_func("/families/count/gpt", test_gpt);
  g_test_add_func("/families/count/llama", test_llama);
  g_test_add_func("/families/count/dit", test_dit);
  g_test_add_func("/families/count/resnet", test_resnet);
  g_test_add_func("/families/count/no-table", test_no_table);
  return g_test_run();
}
