/* The llama family's memory plan at real shapes, and its LoRA presets (suite unit):
 *  - Qwen3-0.6B and Llama-3.2-1B (llama3 rope scaling, factor 32, theta 500000) on 2 ranks at
 *    ZeRO stages 0 to 3, full fine-tuning and LoRA with the family's default targets: the
 *    plan's parameter count is the one Hugging Face's config formula gives (and the family's
 *    tensor table, which the model allocates, has it too), the adapters are r · (in + out)
 *    over the seven projections of every block, and the parameter, gradient and optimizer bytes
 *    per rank are the stage's: whole, AdamW's moments halved at stage 1, and at stages 2 and 3
 *    the rank's pieces of every unit (an embedding, each block, the final norm and a separate
 *    head), each unit split as engine/distributed/shard-plan.h says, computed here from the
 *    formula alone; what fits 2 × 24 GiB GPUs is printed;
 *  - in bf16 on CPU ranks the working set holds the rounded copies of the largest operands;
 *  - the presets smollm2-135m-lora and qwen3-0.6b-lora parse and validate, name the folder the
 *    user brings as init_from and tokenizer, and plan with --explain while that folder is absent
 *    (the plan needs only the shape keys); a run without the folder fails at once naming it. */
#include <string.h>
#include <glib/gstdio.h>

#include "engine/config/presets.h"
#include "engine/families/family.h"
#include "engine/train/memory-plan.h"
#include "test-util.h"
#include "train-run.h"

typedef struct {
  const char *name;
  const char *arch;
  gint64 L, C, H, KV, hd, I, V;
  gboolean tied, qk_norm;
  const char *rope; /* extra sets for the rope, or NULL */
} Shape;

static const Shape qwen3_06b = {
    "Qwen3-0.6B", "Qwen3ForCausalLM", 28, 1024, 16, 8, 128, 3072, 151936, TRUE, TRUE, NULL};
static const Shape llama32_1b = {
    "Llama-3.2-1B",
    "LlamaForCausalLM",
    16,
    2048,
    32,
    8,
    64,
    8192,
    128256,
    TRUE,
    FALSE,
    "rope_scaling=llama3,rope_scaling_factor=32,rope_low_freq_factor=1,rope_high_freq_factor=4,"
    "rope_original_max_position_embeddings=8192,rope_theta=500000"};

/* The parameters of one block by Hugging Face's modules: two RMSNorms, q/k/v/o projections
 * without biases (and Qwen3's per-head q/k norms), and the SwiGLU MLP. */
static gint64 block_params(const Shape *s)
{
  gint64 Q = s->H * s->hd, KV = s->KV * s->hd;
  return 2 * s->C + s->C * Q + 2 * s->C * KV + Q * s->C + 3 * s->C * s->I +
         (s->qk_norm ? 2 * s->hd : 0);
}

/* The whole model: the embedding, the blocks, the final norm and a separate head. */
static gint64 hf_params(const Shape *s)
{
  return s->V * s->C + s->L * block_params(s) + s->C + (s->tied ? 0 : s->V * s->C);
}

/* One block's adapters of rank r on q, k, v, o, gate, up and down: r · (in + out) each. */
static gint64 block_adapters(const Shape *s, gint64 r)
{
  gint64 Q = s->H * s->hd, KV = s->KV * s->hd;
  return r * ((s->C + Q) + 2 * (s->C + KV) + (Q + s->C) + 3 * (s->C + s->I));
}

/* Rank 0's piece of a unit of `count` floats on 2 ranks (shard-plan.h): ceil(count / 2)
 * rounded up to 64 floats, or the whole unit when that is more. */
static gint64 piece(gint64 count)
{
  gint64 p = (count + 1) / 2;
  p = (p + 63) / 64 * 64;
  return MIN(p, count);
}

static CohortConfig *shape_config(const Shape *s, gboolean lora, int stage)
{
  g_autoptr(GPtrArray) sets = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(sets, g_strdup("model=llama"));
  g_ptr_array_add(sets, g_strdup("data_format=tokens"));
  g_ptr_array_add(sets, g_strdup_printf("architecture=%s", s->arch));
  g_ptr_array_add(sets, g_strdup_printf("n_layer=%" G_GINT64_FORMAT, s->L));
  g_ptr_array_add(sets, g_strdup_printf("n_embd=%" G_GINT64_FORMAT, s->C));
  g_ptr_array_add(sets, g_strdup_printf("n_head=%" G_GINT64_FORMAT, s->H));
  g_ptr_array_add(sets, g_strdup_printf("num_key_value_heads=%" G_GINT64_FORMAT, s->KV));
  g_ptr_array_add(sets, g_strdup_printf("head_dim=%" G_GINT64_FORMAT, s->hd));
  g_ptr_array_add(sets, g_strdup_printf("intermediate_size=%" G_GINT64_FORMAT, s->I));
  g_ptr_array_add(sets, g_strdup_printf("vocab_size=%" G_GINT64_FORMAT, s->V));
  g_ptr_array_add(sets, g_strdup_printf("tie_word_embeddings=%s", s->tied ? "true" : "false"));
  g_ptr_array_add(sets, g_strdup("seq_len=512"));
  g_ptr_array_add(sets, g_strdup("batch_size=4"));
  g_ptr_array_add(sets, g_strdup("device=cpu"));
  g_ptr_array_add(sets, g_strdup_printf("zero_stage=%d", stage));
  if (lora) {
    g_ptr_array_add(sets, g_strdup("finetune=lora"));
    g_ptr_array_add(sets, g_strdup("lora_rank=16"));
  }
  g_auto(GStrv) rope = g_strsplit(s->rope ? s->rope : "", ",", -1);
  for (guint i = 0; rope[i] && *rope[i]; i++)
    g_ptr_array_add(sets, g_strdup(rope[i]));
  g_ptr_array_add(sets, NULL);
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  cohort_config_apply_assignments(cfg, (const char *const *)sets->pdata, s->name, &error);
  g_assert_no_error(error);
  cohort_family_check_config(cfg, s->name, &error);
  g_assert_no_error(error);
  return cfg;
}

static double gib(gint64 b)
{
  return (double)b / 1073741824.0;
}

/* Every stage of `s` on 2 ranks, full and LoRA r 16, against the figures from the formula. */
static void check_shape(const Shape *s, gint64 want_params)
{
  gint64 P = hf_params(s);
  g_assert_cmpint(P, ==, want_params);
  /* units: the embedding, each block, and the final norm with a separate head */
  gint64 s_full = piece(s->V * s->C) + s->L * piece(block_params(s)) +
                  piece(s->C + (s->tied ? 0 : s->V * s->C));
  gint64 A = s->L * block_adapters(s, 16), s_lora = s->L * piece(block_adapters(s, 16));
  for (int lora = 0; lora <= 1; lora++)
    for (int stage = 0; stage <= 3; stage++) {
      g_autoptr(CohortConfig) cfg = shape_config(s, lora, stage);
      g_assert_cmpint(cohort_family_count_params(cfg), ==, P); /* the model's own table */
      CohortMemoryPlan p;
      g_autoptr(GError) error = NULL;
      g_assert_true(cohort_memory_plan(cfg, 2, 2, &p, &error));
      g_assert_no_error(error);
      g_assert_cmpint(p.params, ==, P);
      gint64 T = lora ? A : P, S = lora ? s_lora : s_full, frozen = lora ? P : 0;
      g_assert_cmpint(p.trainable, ==, T);
      gint64 grads = stage >= 2 ? 4 * S : 4 * T;
      gint64 optim = stage >= 2 ? 8 * S : stage == 1 ? 8 * (T / 2 + T % 2) : 8 * T;
      gint64 params = 4 * frozen + (stage == 3 ? 4 * S : 4 * T);
      g_assert_cmpint(p.grad_bytes, ==, grads);
      g_assert_cmpint(p.optim_bytes, ==, optim);
      g_assert_cmpint(p.param_bytes, ==, params);
      g_assert_cmpint(p.act_bytes, ==, (gint64)cohort_family_act_bytes(cfg, 4));
      g_assert_cmpint(p.total_bytes, ==,
                      p.param_bytes + p.grad_bytes + p.optim_bytes + p.ema_bytes + p.act_bytes +
                          p.working_bytes + p.teacher_bytes);
      /* the same plan for CUDA ranks: what one 24 GiB GPU of two holds */
      cfg->device = COHORT_DEVICE_CUDA;
      CohortMemoryPlan g;
      g_assert_true(cohort_memory_plan(cfg, 2, 2, &g, NULL));
      gboolean fits = cohort_memory_plan_check_device(&g, cfg, 0, (guint64)24 << 30, NULL);
      g_test_message("%s %s stage %d on 2 ranks: %.0f trainable; per rank parameters %.2f GiB, "
                     "gradients %.2f, optimizer %.2f, activations %.2f, working %.2f: %.2f GiB "
                     "(GPU %.2f GiB: %s 24 GiB)",
                     s->name, lora ? "LoRA r16" : "full", stage, (double)T, gib(p.param_bytes),
                     gib(p.grad_bytes), gib(p.optim_bytes), gib(p.act_bytes), gib(p.working_bytes),
                     gib(p.total_bytes), gib(g.startup_bytes), fits ? "fits" : "does not fit");
    }
}

static void test_qwen3_06b(void)
{
  check_shape(&qwen3_06b, 596049920); /* Qwen3-0.6B's safetensors: 596,049,920 values */
}

static void test_llama32_1b(void)
{
  check_shape(&llama32_1b, 1235814400); /* Llama-3.2-1B's: 1,235,814,400 */
}

/* precision bf16 on a CPU rank: the plan's working set holds the rounded copies of the largest
 * operands of the products (kernels/cpu/precision.c), for a Qwen3-0.6B the logits' gradient
 * [4 · 512, 151936] and the tied embedding [151936, 1024] as the head; none in fp32, none on a
 * GPU (native bf16). LoRA at stage 0, so nothing else is in the working set. */
static void test_cpu_bf16_operands(void)
{
  const Shape *s = &qwen3_06b;
  g_autoptr(CohortConfig) cfg = shape_config(s, TRUE, 0);
  CohortMemoryPlan p;
  g_assert_true(cohort_memory_plan(cfg, 2, 2, &p, NULL));
  g_assert_cmpint(p.working_bytes, ==, 0);
  cfg->precision = COHORT_PRECISION_BF16;
  g_assert_true(cohort_memory_plan(cfg, 2, 2, &p, NULL));
  gint64 N = 4 * 512;
  g_assert_cmpint(p.working_bytes, ==, 4 * (N * s->V + MAX(s->V * s->C, N * s->I)));
  g_test_message("%s, LoRA, bf16 on the CPU: %.1f MiB of rounded operands per rank", s->name,
                 p.working_bytes / 1048576.0);
  cfg->device = COHORT_DEVICE_CUDA;
  g_assert_true(cohort_memory_plan(cfg, 2, 2, &p, NULL));
  g_assert_cmpint(p.working_bytes, ==, 0);
}

/* A preset: its keys, then --explain without the folder, then a run refused naming it. */
static void check_preset(const char *name, const Shape *s, const char *folder)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_preset_load(name, &error);
  g_assert_no_error(error);
  g_assert_true(cohort_config_validate(cfg, name, &error));
  g_assert_no_error(error);
  g_assert_cmpstr(cfg->model, ==, "llama");
  g_assert_cmpint(cfg->n_layer, ==, s->L);
  g_assert_cmpint(cfg->n_embd, ==, s->C);
  g_assert_cmpint(cfg->vocab_size, ==, s->V);
  g_assert_cmpstr(cfg->init_from, ==, folder);
  g_assert_cmpstr(cfg->tokenizer, ==, folder);
  g_assert_cmpint(cfg->data_format, ==, COHORT_DATA_TEXT);
  g_assert_cmpint(cfg->finetune, ==, COHORT_FINETUNE_LORA);
  g_assert_cmpstr(cfg->lora_targets, ==, ""); /* the family's seven projections */
  g_assert_cmpint(cohort_family_count_params(cfg), ==, hf_params(s));
  g_assert_false(g_file_test(folder, G_FILE_TEST_EXISTS));

  g_autofree char *ws = tu_mkdtemp("llama-preset-plan");
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  const char *argv[] = {"--preset", name,        "--set", "train_data=builtin:sample/train.txt",
                        "--set",    "val_data=", "--set", "device=cpu",
                        NULL};
  for (guint i = 0; argv[i]; i++)
    g_ptr_array_add(args, g_strdup(argv[i]));
  g_ptr_array_add(args, g_strdup_printf("--set=workspace_dir=%s", ws));
  g_ptr_array_add(args, g_strdup("--explain"));
  RunResult r = run_train(args, NULL);
  if (r.status != 0)
    g_error("--explain with %s exited %d: %s", name, r.status, r.err);
  g_autoptr(JsonNode) node = json_from_string(r.out, &error);
  g_assert_no_error(error);
  JsonObject *o = json_node_get_object(node);
  g_assert_cmpint(json_object_get_int_member(o, "params"), ==, hf_params(s));
  JsonObject *mem = json_object_get_object_member(o, "memory");
  gint64 trainable = json_object_get_int_member(mem, "trainable");
  g_assert_cmpint(trainable, ==, s->L * block_adapters(s, cfg->lora_rank));
  run_result_clear(&r);

  /* the run itself needs the folder: refused before anything is allocated, naming it */
  g_ptr_array_remove_index(args, args->len - 1);
  r = run_train(args, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_test_message("%s: %" G_GINT64_FORMAT " parameters, %" G_GINT64_FORMAT
                 " in the adapters; --explain plans without %s; the run says: %s",
                 name, hf_params(s), trainable, folder, g_strstrip(r.err));
  g_assert_nonnull(strstr(r.err, folder));
  g_assert_nonnull(strstr(r.err, "no such file or folder"));
  run_result_clear(&r);
  tu_rm_rf(ws);
}

static void test_presets(void)
{
  /* a folder of their names where the test runs would be read: run where none is */
  g_autofree char *here = g_get_current_dir();
  g_autofree char *empty = tu_mkdtemp("llama-preset-cwd");
  g_assert_cmpint(g_chdir(empty), ==, 0);
  /* SmolLM2-135M: LlamaForCausalLM, 30 × 576, 9 heads over 3, tied */
  const Shape smollm2 = {
      "SmolLM2-135M", "LlamaForCausalLM", 30, 576, 9, 3, 64, 1536, 49152, TRUE, FALSE, NULL};
  g_assert_cmpint(hf_params(&smollm2), ==, 134515008); /* its safetensors' values */
  check_preset("smollm2-135m-lora", &smollm2, "SmolLM2-135M");
  check_preset("qwen3-0.6b-lora", &qwen3_06b, "Qwen3-0.6B");
  g_assert_cmpint(g_chdir(here), ==, 0);
  tu_rm_rf(empty);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/llama-plan/qwen3-0.6b", test_qwen3_06b);
  g_test_add_func("/llama-plan/llama-3.2-1b", test_llama32_1b);
  g_test_add_func("/llama-plan/cpu-bf16-operands", test_cpu_bf16_operands);
  g_test_add_func("/llama-plan/presets", test_presets);
  return g_test_run();
}
