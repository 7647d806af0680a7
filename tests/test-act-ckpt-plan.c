/* The memory plan counts activation_checkpointing (suite unit): for every family that honours
 * the key, the planned activations drop to what the family's layout keeps (one input per block
 * and one block's buffers) and nothing else in the plan moves; a GPT at L8 C512 T1024 batch 4
 * keeps less than half; a plan refused for the machine's memory because of its activations
 * names the key when turning it on would fit. tests/test-act-ckpt.c trains with the key. */
#include <glib.h>
#include <string.h>

#include "engine/families/family.h"
#include "engine/train/memory-plan.h"

static CohortConfig *config_of(const char *const *sets)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  return cfg;
}

/* The plans without and with the key for `sets` (named `what`) on one rank; returns on's act /
 * off's act. */
static double check_drop(const char *what, const char *const *sets, CohortMemoryPlan *off,
                         CohortMemoryPlan *on)
{
  g_autoptr(CohortConfig) cfg = config_of(sets);
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_memory_plan(cfg, 1, 1, off, &error));
  g_assert_no_error(error);
  cfg->activation_checkpointing = TRUE;
  cohort_family_check_config(cfg, "test", &error);
  g_assert_no_error(error);
  g_assert_true(cohort_memory_plan(cfg, 1, 1, on, &error));
  g_assert_no_error(error);
  /* the family's own count of what its layout keeps, for the config's batch */
  g_assert_cmpint(on->act_bytes, ==, (gint64)cohort_family_act_bytes(cfg, cfg->batch_size));
  g_assert_cmpint(on->act_bytes, >, 0);
  g_assert_cmpint(on->act_bytes, <, off->act_bytes);
  /* only the activations change */
  g_assert_cmpint(on->param_bytes, ==, off->param_bytes);
  g_assert_cmpint(on->grad_bytes, ==, off->grad_bytes);
  g_assert_cmpint(on->optim_bytes, ==, off->optim_bytes);
  g_assert_cmpint(off->total_bytes - on->total_bytes, ==, off->act_bytes - on->act_bytes);
  double ratio = (double)on->act_bytes / (double)off->act_bytes;
  g_test_message("%s: activations %.2f MiB, %.2f MiB with activation_checkpointing (%.0f%% less)",
                 what, off->act_bytes / 1048576.0, on->act_bytes / 1048576.0,
                 100.0 * (1.0 - ratio));
  return ratio;
}

static void test_families(void)
{
  CohortMemoryPlan off, on;
  check_drop("gpt L4 C64 T64",
             (const char *const[]){"model=gpt", "n_layer=4", "n_embd=64", "n_head=2", "seq_len=64",
                                   "batch_size=4", NULL},
             &off, &on);
  check_drop("dit L4 C64 16x16/2",
             (const char *const[]){"model=dit", "data_format=images", "image_size=16",
                                   "patch_size=2", "n_layer=4", "n_embd=64", "n_head=2",
                                   "batch_size=4", NULL},
             &off, &on);
  check_drop("llama (Qwen3) L4 C64 T64",
             (const char *const[]){"model=llama", "architecture=Qwen3ForCausalLM", "n_layer=4",
                                   "n_embd=64", "n_head=4", "num_key_value_heads=2", "head_dim=16",
                                   "intermediate_size=128", "seq_len=64", "vocab_size=256",
                                   "batch_size=4", NULL},
             &off, &on);
  check_drop("resnet-20 32x32",
             (const char *const[]){"model=resnet", "data_format=images", "image_size=32",
                                   "n_layer=20", "batch_size=4", NULL},
             &off, &on);
  check_drop("resnet50 64x64",
             (const char *const[]){"model=resnet", "data_format=images", "image_size=64",
                                   "resnet_variant=resnet50", "image_channels=3", "batch_size=2",
                                   NULL},
             &off, &on);
}

/* The benchmark's shape (bench/run-act-ckpt-bench): the plan keeps less than half. */
static void test_gpt_l8(void)
{
  CohortMemoryPlan off, on;
  double ratio =
      check_drop("gpt L8 C512 T1024",
                 (const char *const[]){"model=gpt", "n_layer=8", "n_head=8", "n_embd=512",
                                       "seq_len=1024", "batch_size=4", NULL},
                 &off, &on);
  g_assert_cmpfloat(ratio, <, 0.5);
}

/* A machine between the two plans' needs: refused without the key, and the refusal says the
 * key would fit; with the key the same machine takes it. */
static void test_refusal_names_key(void)
{
  g_autoptr(CohortConfig) cfg = config_of((const char *const[]){
      "model=gpt", "n_layer=8", "n_head=8", "n_embd=512", "seq_len=1024", "batch_size=4", NULL});
  CohortMemoryPlan off, on;
  g_assert_true(cohort_memory_plan(cfg, 1, 1, &off, NULL));
  cfg->activation_checkpointing = TRUE;
  g_assert_true(cohort_memory_plan(cfg, 1, 1, &on, NULL));
  guint64 machine = (guint64)(on.startup_bytes + off.startup_bytes) / 2;
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_memory_plan_check_host(&on, cfg, machine, &error));
  g_assert_no_error(error);
  cfg->activation_checkpointing = FALSE;
  g_assert_false(cohort_memory_plan_check_host(&off, cfg, machine, &error));
  g_assert_nonnull(error);
  g_test_message("%s", error->message);
  g_assert_nonnull(strstr(error->message, "activation_checkpointing true would need"));
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/act-ckpt-plan/families", test_families);
  g_test_add_func("/act-ckpt-plan/gpt-l8-c512-t1024", test_gpt_l8);
  g_test_add_func("/act-ckpt-plan/refusal-names-key", test_refusal_names_key);
  return g_test_run();
}
