/* Model families on a GPU (suite cuda): each family's model on the CUDA backend against the
 * same model on the CPU backend, through the model interface (the trainer's own calls):
 * identical initial weights, the same batches, 30 AdamW steps, per-step losses and final
 * weights compared; then whole cohort-train runs with device cuda against device cpu (the class
 * DiT, and the text layout with its encoder). Every case skips without a CUDA device.
 *
 * Tolerances (fp32, no TF32): per-step loss |gpu - cpu| <= 2e-3 * max(1, cpu), final
 * parameters max |gpu - cpu| <= 5e-3: cuBLAS and the CPU's library (and the reductions) add in
 * other orders, so the two agree to rounding and drift slowly with training (as
 * test-cuda-train). In bf16 both backends round the same operands by the same rule, but a sum
 * that differs in its last fp32 bit can round an operand of the next product the other way:
 * differences grow faster, and the bounds are five times wider (1e-2 and 2.5e-2).
 *
 * The same with finetune lora (and a ResNet's convolutions as targets): the adapters' products,
 * the folded convolution kernels and AdamW over what learns alone, on the GPU against the CPU. */
#include <math.h>
#include <string.h>

#include "engine/model/batch.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "engine/model/optim.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda-backend.h"
#include "engine/models/registry.h"
#include "test-util.h"
#include "train-run.h"

#define LOSS_TOL   2e-3
#define PARAM_TOL  5e-3
#define BF16_WIDER 5.0
enum { STEPS = 30, B = 6 };

static gboolean need_gpu(void)
{
  if (cohort_cuda_device_count() > 0 && cohort_cuda_set_device(0) == 0)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg = g_strdup_printf("no CUDA device: %s", why ? why : "none usable");
  g_test_skip(msg);
  return FALSE;
}

static CohortConfig *family_config(const char *const *sets)
{
  CohortConfig *cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  return cfg;
}

/* A batch of random images (the config's shape) with labels, or random tokens. */
static void fill(CohortBatch *b, const CohortConfig *cfg, guint32 seed)
{
  for (int i = 0; i < b->B; i++) {
    b->example_ids[i] = seed * 131u + (guint)i;
    if (b->images) {
      size_t D = (size_t)b->C * b->H * b->W;
      for (size_t k = 0; k < D; k++) {
        seed = seed * 1664525u + 1013904223u;
        b->images[i * D + k] = (float)((seed >> 8) * (1.0 / 8388608.0)) - 1.0f;
      }
      b->labels[i] = (int)(seed % (guint)MAX(cfg->num_classes, 1));
    } else {
      for (int t = 0; t < b->T; t++) {
        seed = seed * 1664525u + 1013904223u;
        b->inputs[i * b->T + t] = (int)((seed >> 8) % (guint)cfg->vocab_size);
        b->targets[i * b->T + t] = (b->inputs[i * b->T + t] * 7 + 3) % cfg->vocab_size;
      }
    }
  }
  b->epoch = 0;
}

static void train(CohortModel *m, CohortAdamW *opt, const CohortConfig *cfg, double lr,
                  double *losses)
{
  g_autoptr(CohortBatch) b =
      cfg->data_format == COHORT_DATA_IMAGES
          ? cohort_batch_new(B, 0, cfg->image_channels, cfg->image_size, cfg->image_size)
          : cohort_batch_new(B, cfg->seq_len, 0, 0, 0);
  for (int s = 0; s < STEPS; s++) {
    fill(b, cfg, (guint32)s + 1);
    cohort_model_zero_grad(m);
    losses[s] = m->ops->forward(m, b, COHORT_FORWARD_TRAIN);
    m->ops->backward(m, 1.0f);
    /* what learns: every parameter, or with finetune lora the adapters (laid out first) */
    CohortModel learn;
    cohort_model_train_view(m, &learn);
    cohort_clip_grad_norm_on(m->be, m->grads, learn.n_params, 1.0);
    cohort_adamw_step(opt, m->params, m->grads, learn.tensors, learn.n_tensors, lr, 0.9, 0.95, 1e-8,
                      0.1, s + 1);
  }
}

/* Learning rate 2e-3 unless the family's case asks for less (resnet50, below). */
static void check_family_lr(const char *const *sets, CohortGemmMode mode, double lr)
{
  if (!need_gpu())
    return;
  const CohortBackend *bc = cohort_backend_cpu(), *bg = cohort_backend_cuda();
  double wider = mode == COHORT_GEMM_FP32 ? 1.0 : BF16_WIDER;
  bc->set_gemm_mode(mode);
  bg->set_gemm_mode(mode);
  g_autoptr(CohortConfig) cfg = family_config(sets);
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortModel) cpu = cohort_model_new(cohort_backend_cpu(), cfg, B, &error);
  g_assert_no_error(error);
  g_autoptr(CohortModel) gpu = cohort_model_new(cohort_backend_cuda(), cfg, B, &error);
  g_assert_no_error(error);
  cohort_model_init(cpu, 3);
  cohort_model_init(gpu, 3);
  g_autofree float *init = g_memdup2(cpu->params, cpu->n_params * sizeof(float));
  g_autoptr(CohortAdamW) opt_c = cohort_adamw_new_on(cohort_backend_cpu(), cpu->n_trainable);
  g_autoptr(CohortAdamW) opt_g = cohort_adamw_new_on(cohort_backend_cuda(), gpu->n_trainable);
  double lc[STEPS], lg[STEPS];
  train(cpu, opt_c, cfg, lr, lc);
  train(gpu, opt_g, cfg, lr, lg);
  bc->set_gemm_mode(COHORT_GEMM_FP32);
  bg->set_gemm_mode(COHORT_GEMM_FP32);
  g_assert_null(cohort_cuda_last_error());
  for (int s = 0; s < STEPS; s++)
    if (fabs(lg[s] - lc[s]) > wider * LOSS_TOL * MAX(1.0, fabs(lc[s])))
      g_error("%s step %d: gpu loss %.6f, cpu %.6f", cfg->model, s + 1, lg[s], lc[s]);
  g_autofree float *pg = g_new(float, gpu->n_params);
  cohort_model_download_params(gpu, pg);
  double worst = 0;
  for (size_t k = 0; k < cpu->n_params; k++)
    worst = fmax(worst, fabs((double)pg[k] - cpu->params[k]));
  g_test_message("%s (%s): losses %.5f → %.5f (cpu), largest parameter difference %.2e", cfg->model,
                 mode == COHORT_GEMM_FP32 ? "fp32" : "bf16", lc[0], lc[STEPS - 1], worst);
  g_assert_cmpfloat(worst, <=, wider * PARAM_TOL);
  if (cfg->finetune == COHORT_FINETUNE_FULL && lr < 2e-3) {
    /* on random labels the loss need not fall in 30 small steps: the weights moved (AdamW's
     * steps are about lr each) */
    double moved = 0;
    for (size_t k = 0; k < cpu->n_params; k++)
      moved = fmax(moved, fabs((double)cpu->params[k] - init[k]));
    g_assert_cmpfloat(moved, >, 10 * lr);
    return;
  }
  if (cfg->finetune == COHORT_FINETUNE_FULL) {
    g_assert_cmpfloat(lc[STEPS - 1], <, lc[0]); /* it trained */
    return;
  }
  /* the adapters learned (lora_B starts at 0), on both */
  double moved_c = 0, moved_g = 0;
  for (guint k = 1; k < cpu->lora->n_tensors; k += 2) {
    const CohortTensorInfo *t = &cpu->lora->tensors[k];
    for (size_t i = 0; i < t->numel; i++) {
      moved_c = fmax(moved_c, fabs(cpu->params[t->offset + i]));
      moved_g = fmax(moved_g, fabs(pg[t->offset + i]));
    }
  }
  g_assert_cmpfloat(moved_c, >, 1e-3);
  g_assert_cmpfloat(moved_g, >, 1e-3);
}

static void check_family(const char *const *sets, CohortGemmMode mode)
{
  check_family_lr(sets, mode, 2e-3);
}

static const char *const dit_sets[] = {
    "model=dit",     "data_format=images", "n_layer=2",    "n_head=2",
    "n_embd=32",     "image_size=8",       "patch_size=2", "image_channels=1",
    "num_classes=3", "cfg_dropout=0.3",    NULL,
};

static const char *const resnet_sets[] = {
    "model=resnet", "data_format=images", "n_layer=8",     "resnet_width=4",
    "image_size=8", "image_channels=1",   "num_classes=3", NULL,
};

/* torchvision's resnet50: the 7×7 stem, max-pooling and Bottlenecks, on cuDNN. */
static const char *const resnet50_sets[] = {
    "model=resnet",     "data_format=images", "resnet_variant=resnet50", "image_size=32",
    "image_channels=3", "num_classes=3",      "zero_init_residual=true", NULL,
};

static const char *const gpt_sets[] = {
    "model=gpt", "n_layer=2", "n_head=2", "n_embd=32", "seq_len=16", NULL,
};

/* A Qwen3-shaped llama (q/k norms, grouped-query attention with head_dim above n_embd / n_head,
 * a separate head) on tokens; with rope llama3 scaling in the LoRA case. */
static const char *const llama_sets[] = {
    "model=llama",
    "data_format=tokens",
    "architecture=Qwen3ForCausalLM",
    "n_layer=2",
    "n_embd=32",
    "n_head=4",
    "num_key_value_heads=2",
    "head_dim=16",
    "intermediate_size=48",
    "seq_len=16",
    "vocab_size=64",
    "tie_word_embeddings=false",
    NULL,
};

static const char *const llama_lora_sets[] = {
    "model=llama",
    "data_format=tokens",
    "n_layer=2",
    "n_embd=32",
    "n_head=4",
    "num_key_value_heads=2",
    "intermediate_size=48",
    "seq_len=16",
    "vocab_size=64",
    "rope_scaling=llama3",
    "rope_scaling_factor=8",
    "finetune=lora",
    "lora_rank=4",
    "lora_alpha=8",
    "trainable=model.norm.*",
    NULL,
};

static const char *const gpt_lora_sets[] = {
    "model=gpt",     "n_layer=2",   "n_head=2",     "n_embd=32", "seq_len=16",
    "finetune=lora", "lora_rank=4", "lora_alpha=8", NULL,
};

static const char *const dit_lora_sets[] = {
    "model=dit",
    "data_format=images",
    "n_layer=2",
    "n_head=2",
    "n_embd=32",
    "image_size=8",
    "patch_size=2",
    "image_channels=1",
    "num_classes=3",
    "finetune=lora",
    "lora_rank=4",
    "lora_alpha=8",
    "trainable=final_layer.linear.*",
    NULL,
};

static const char *const resnet_lora_sets[] = {
    "model=resnet",
    "data_format=images",
    "n_layer=8",
    "resnet_width=4",
    "image_size=8",
    "image_channels=1",
    "num_classes=3",
    "finetune=lora",
    "lora_rank=2",
    "lora_alpha=4",
    "lora_targets=conv1,downsample.0,fc",
    NULL,
};

/* finetune lora: the adapters (gpt's Conv1D layout, dit's linear layers, a ResNet's folded
 * convolution kernels) on the GPU against the CPU. A fresh DiT's output layer is zero (adaLN-
 * Zero), so nothing upstream would get a gradient: it learns too. */
static void test_lora(void)
{
  check_family(gpt_lora_sets, COHORT_GEMM_FP32);
  check_family(dit_lora_sets, COHORT_GEMM_FP32);
  check_family(resnet_lora_sets, COHORT_GEMM_FP32);
}

/* activation_checkpointing: each block recomputed in backward from its kept input, on the GPU
 * (the same model code over the CUDA backend) against the CPU; on the CPU the key changes no
 * bit (tests/test-act-ckpt.c). */
static void test_act_ckpt(void)
{
  check_family((const char *const[]){"model=gpt", "n_layer=2", "n_head=2", "n_embd=32",
                                     "seq_len=16", "activation_checkpointing=true", NULL},
               COHORT_GEMM_FP32);
  check_family((const char *const[]){"model=dit", "data_format=images", "n_layer=2", "n_head=2",
                                     "n_embd=32", "image_size=8", "patch_size=2",
                                     "image_channels=1", "num_classes=3", "cfg_dropout=0.3",
                                     "activation_checkpointing=true", NULL},
               COHORT_GEMM_FP32);
  check_family((const char *const[]){"model=resnet", "data_format=images", "n_layer=8",
                                     "resnet_width=4", "image_size=8", "image_channels=1",
                                     "num_classes=3", "activation_checkpointing=true", NULL},
               COHORT_GEMM_FP32);
}

/* llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU and the q/k norms on the
 * GPU against the CPU, in fp32 and bf16, with LoRA on the default targets (and llama3 rope
 * scaling), and with activation_checkpointing. */
static void test_llama(void)
{
  check_family(llama_sets, COHORT_GEMM_FP32);
  check_family(llama_sets, COHORT_GEMM_BF16);
  check_family(llama_lora_sets, COHORT_GEMM_FP32);
  g_autoptr(GPtrArray) ckpt = g_ptr_array_new();
  for (const char *const *k = llama_sets; *k; k++)
    g_ptr_array_add(ckpt, (gpointer)*k);
  g_ptr_array_add(ckpt, "activation_checkpointing=true");
  g_ptr_array_add(ckpt, NULL);
  check_family((const char *const *)ckpt->pdata, COHORT_GEMM_FP32);
}

static void test_dit(void)
{
  check_family(dit_sets, COHORT_GEMM_FP32);
}

static void test_dit_bf16(void)
{
  check_family(dit_sets, COHORT_GEMM_BF16);
}

static void test_gpt_bf16(void)
{
  check_family(gpt_sets, COHORT_GEMM_BF16);
}

/* The ResNet: convolutions (cuDNN, or im2col + GEMM), BatchNorm's split ops, pooling and the
 * classifier on the GPU against the CPU (training mode, batch statistics). */
static void test_resnet(void)
{
  check_family(resnet_sets, COHORT_GEMM_FP32);
}

/* At 2e-3 this ResNet-50 (batch 6, 1×1 maps in its last stage: BatchNorm over 6 values) trains
 * chaotically: on the CPU alone, weights moved by 1e-7 relative give losses 1e-4 apart at step 5
 * and 1.6e-3 at step 8, so any two correct backends part (the first H200 run: the GPU's step-5
 * loss 2.826685, a Zen 3 CPU's 2.826725, that machine's Xeon's 2.869358). At 5e-5 the same
 * perturbation stays within 4e-6 over the 30 steps and the loss still falls, so the bounds
 * measure the backends rather than the chaos. */
static void test_resnet50(void)
{
  check_family_lr(resnet50_sets, COHORT_GEMM_FP32, 5e-5);
}

/* cohort-train with `common` and device cuda, then device cpu: the same step losses (within the
 * tolerance), and the sample grid of step 20 from each. */
static void check_run(const char *const *common, const char *what)
{
  GArray *losses[2];
  for (int dev = 0; dev < 2; dev++) {
    g_autofree char *ws = tu_mkdtemp(what);
    g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
    g_autoptr(GPtrArray) a = small_args(ws, common);
    g_ptr_array_add(a, g_strdup("--set"));
    g_ptr_array_add(a, g_strdup(dev ? "device=cuda" : "device=cpu"));
    RunResult r = run_train(a, events);
    if (r.status != 0)
      g_error("cohort-train (%s, %s) exited %d: %s", what, dev ? "cuda" : "cpu", r.status, r.err);
    g_autoptr(GPtrArray) ev = tu_read_events(events);
    losses[dev] = tu_event_values(ev, "step", "loss");
    /* The GPU rank's batches come through page-locked memory (pin_memory, loader threads on
     * by default); the CPU's need none. */
    g_autoptr(GArray) pinned = tu_event_values(ev, "start", "pin_memory");
    g_assert_cmpuint(pinned->len, ==, 1);
    g_assert_cmpfloat(g_array_index(pinned, double, 0), ==, dev ? 1 : 0);
    g_autofree char *grid = g_build_filename(ws, "samples", "step-00000020.png", NULL);
    g_assert_true(g_file_test(grid, G_FILE_TEST_IS_REGULAR));
    run_result_clear(&r);
    tu_rm_rf(ws);
  }
  g_assert_cmpuint(losses[0]->len, ==, losses[1]->len);
  for (guint s = 0; s < losses[0]->len; s++) {
    double c = g_array_index(losses[0], double, s), g = g_array_index(losses[1], double, s);
    g_assert_cmpfloat(fabs(g - c), <=, LOSS_TOL * MAX(1.0, fabs(c)));
  }
  g_test_message("%s: %u step losses within %.0e, last %.5f (cpu) %.5f (cuda)", what,
                 losses[0]->len, LOSS_TOL, g_array_index(losses[0], double, losses[0]->len - 1),
                 g_array_index(losses[1], double, losses[1]->len - 1));
  g_array_unref(losses[0]);
  g_array_unref(losses[1]);
}

/* The class DiT on the glyphs. */
static void test_dit_run(void)
{
  if (!need_gpu())
    return;
  const char *common[] = {"--set", "model=dit",
                          "--set", "data_format=images",
                          "--set", "train_data=builtin:glyphs/train",
                          "--set", "val_data=builtin:glyphs/val",
                          "--set", "image_size=16",
                          "--set", "patch_size=4",
                          "--set", "n_embd=64",
                          "--set", "n_head=4",
                          "--set", "sample_every=10",
                          "--set", "sample_steps=4",
                          "--set", "max_steps=20",
                          NULL};
  check_run(common, "cuda-dit");
}

/* The text layout (PixArt blocks, cross-attention with the padding mask, the built-in text
 * encoder run on the device at set-up and for the prompts) on the captioned glyphs. */
static void test_dit_text_run(void)
{
  if (!need_gpu())
    return;
  const char *common[] = {"--set", "model=dit",
                          "--set", "data_format=images",
                          "--set", "train_data=builtin:t2i-glyphs/train",
                          "--set", "val_data=builtin:t2i-glyphs/val",
                          "--set", "text_encoder=builtin",
                          "--set", "max_text_tokens=16",
                          "--set", "image_size=16",
                          "--set", "image_channels=3",
                          "--set", "patch_size=2",
                          "--set", "n_embd=64",
                          "--set", "n_head=4",
                          "--set", "sample_every=10",
                          "--set", "sample_steps=4",
                          "--set", "sample_prompts=red A|blue S",
                          "--set", "max_steps=20",
                          NULL};
  check_run(common, "cuda-dit-text");
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/cuda-models/llama", test_llama);
  g_test_add_func("/cuda-models/dit", test_dit);
  g_test_add_func("/cuda-models/dit-bf16", test_dit_bf16);
  g_test_add_func("/cuda-models/gpt-bf16", test_gpt_bf16);
  g_test_add_func("/cuda-models/resnet", test_resnet);
  g_test_add_func("/cuda-models/resnet50", test_resnet50);
  g_test_add_func("/cuda-models/dit-run", test_dit_run);
  g_test_add_func("/cuda-models/dit-text-run", test_dit_text_run);
  g_test_add_func("/cuda-models/lora", test_lora);
  g_test_add_func("/cuda-models/activation-checkpointing", test_act_ckpt);
  return g_test_run();
}
