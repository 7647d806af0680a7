/* The config's own parameter tables (engine/config/param-table.h, which the window uses to say
 * what lora_targets and trainable match and how many parameters learn) against the engine's:
 * each family's class param_table gives the same names, shapes, offsets and LoRA kinds, and
 * the counts equal what the engine's fine-tuning plan and layout make of the same config
 * (adapted layers, parameters with adapters, parameters that learn), at the defaults and for
 * custom patterns; a pattern the engine refuses is the one the count names. */
#include <string.h>

#include "engine/config/param-table.h"
#include "engine/model/finetune.h"
#include "engine/models/registry.h"

static CohortConfig *config_of(const char *const *sets)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  cohort_config_apply_assignments(cfg, sets, "test", &error);
  g_assert_no_error(error);
  return cfg;
}

/* The engine's table of cfg's family, tensor by tensor. */
static void check_table(const CohortConfig *cfg)
{
  const CohortModelClass *k = cohort_model_class_find(cfg->model);
  g_assert_nonnull(k);
  g_assert_cmpstr(k->lora_targets, ==, cohort_config_lora_default_targets(cfg->model));
  guint n = 0, m = 0;
  size_t floats = 0;
  gint64 params = 0;
  CohortTensorInfo *want = k->param_table(cfg, &n, &floats);
  CohortTensorInfo *got = cohort_config_param_table(cfg, &m, &params);
  g_assert_nonnull(want);
  g_assert_nonnull(got);
  g_assert_cmpuint(m, ==, n);
  g_assert_cmpint(params, ==, (gint64)floats);
  g_assert_cmpint(params, ==, k->count_params(cfg));
  for (guint i = 0; i < n; i++) {
    g_assert_cmpstr(got[i].name, ==, want[i].name);
    g_assert_cmpint(got[i].ndim, ==, want[i].ndim);
    for (int d = 0; d < COHORT_TENSOR_MAX_DIMS; d++)
      g_assert_cmpint(got[i].shape[d], ==, want[i].shape[d]);
    g_assert_cmpuint(got[i].numel, ==, want[i].numel);
    g_assert_cmpuint(got[i].offset, ==, want[i].offset);
    g_assert_cmpint(got[i].adapt, ==, want[i].adapt);
    g_assert_cmpint(got[i].decay, ==, want[i].decay);
  }
  cohort_config_param_table_free(got, m);
  cohort_tensor_table_free(want, n);
}

/* The count against the engine's plan and layout; returns the count (cleared by the caller). */
static void check_count(const CohortConfig *cfg, CohortFinetuneCount *c)
{
  const CohortModelClass *k = cohort_model_class_find(cfg->model);
  guint n = 0;
  size_t floats = 0;
  CohortTensorInfo *t = k->param_table(cfg, &n, &floats);
  g_assert_true(cohort_finetune_count(cfg, c));
  g_assert_cmpint(c->base_params, ==, (gint64)floats);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortFinetunePlan) plan =
      cohort_finetune_plan_new(cfg, k->name, k->lora_targets, t, n, &error);
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
  check_table(base);
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
  check_table(cfg);
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
  g_assert_null(cohort_model_class_find("resnet")->param_table(cfg, &n, &floats));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/param-table/gpt", test_gpt);
  g_test_add_func("/param-table/dit", test_dit);
  g_test_add_func("/param-table/resnet", test_resnet);
  g_test_add_func("/param-table/no-table", test_no_table);
  return g_test_run();
}
