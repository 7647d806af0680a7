/* activation_checkpointing end to end (suite dist, Gloo over loopback): each block keeps only
 * its input in forward and is computed again in backward, which must change no number. Every
 * case trains 5 steps with the key on and off from the same seed and compares the per-step
 * losses (relative difference at most 1e-6) and the exported weights, buffers included (BatchNorm
 * running statistics and counters: a recompute that updated them again would show here):
 *  - gpt, fp32; with LoRA and lora_dropout on 2 ranks (the recomputed forward draws the same
 *    masks; DDP's buckets are all-reduced from the grad-ready hooks while backward recomputes)
 *    and with LoRA over a frozen base kept in bf16 (frozen_dtype, precision bf16);
 *    under precision bf16 and fp16; as a distillation student;
 *  - llama (Qwen3-shaped): the same bits, also with LoRA and lora_dropout on 2 ranks and at ZeRO
 *    stage 3;
 *  - dit (each example's noise, timestep and label dropout);
 *  - resnet with SyncBatchNorm on 2 ranks (the recompute normalises with the statistics the
 *    forward saved and issues no collective), and torchvision's resnet50 (Bottlenecks, the
 *    max-pooled stem);
 *  - ZeRO stage 1 (gpt) and 2 (dit) on 2 ranks (gradients reduce-scattered from the grad-ready
 *    hooks while backward recomputes), and stage 3 for gpt and resnet (each layer is gathered
 *    by the backward's layer hook around the recompute);
 *  - 2 ranks with the key against 1 process on the combined batch without it (DDP's bounds);
 * and --explain's memory plan: the activations of a GPT at L8 C512 T1024 batch 4 are the
 * family's bytes with and without the key (bench/act-ckpt-memory measures the peak). */
#include "test-util.h"
#include "train-run.h"

#include "engine/progress/explain-json.h"
#include "engine/models/registry.h"

static char *root;

static const char *const gpt_sets[] = {
    "n_layer=3",    "n_head=2",       "n_embd=32",          "seq_len=32",   "batch_size=4",
    "max_steps=5",  "warmup_steps=1", "learning_rate=3e-3", "eval_every=0", "sample_every=0",
    "save_every=0", "threads=1",      "timeout_s=60",       NULL,
};

static const char *const dit_sets[] = {
    "model=dit",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=",
    "image_size=16",
    "patch_size=4",
    "n_layer=3",
    "n_embd=32",
    "n_head=2",
    "batch_size=4",
    "max_steps=5",
    "warmup_steps=1",
    "cfg_dropout=0.3",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=60",
    NULL,
};

static const char *const resnet_sets[] = {
    "model=resnet",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=",
    "image_size=16",
    "n_layer=14",
    "resnet_width=4",
    "augment=crop_flip",
    "batch_size=4",
    "max_steps=5",
    "optimizer=sgd",
    "momentum=0.9",
    "learning_rate=0.05",
    "warmup_steps=0",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=60",
    NULL,
};

/* A Qwen3-shaped llama (q/k norms, grouped-query attention, a separate head) on bytes. */
static const char *const llama_sets[] = {
    "model=llama",
    "architecture=Qwen3ForCausalLM",
    "tie_word_embeddings=false",
    "n_layer=3",
    "n_embd=32",
    "n_head=4",
    "num_key_value_heads=2",
    "head_dim=8",
    "intermediate_size=48",
    "seq_len=16",
    "vocab_size=256",
    "data_format=text",
    "train_data=builtin:sample/train.txt",
    "val_data=",
    "batch_size=4",
    "max_steps=5",
    "warmup_steps=1",
    "learning_rate=3e-3",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=60",
    NULL,
};

typedef struct {
  GArray *loss;    /* per step */
  GArray *weights; /* the export's tensors (parameters and buffers) in file order */
} Run;

static void run_clear(Run *r)
{
  g_clear_pointer(&r->loss, g_array_unref);
  g_clear_pointer(&r->weights, g_array_unref);
}

/* cohort-train on `nproc` ranks with `base`, `extra` and activation_checkpointing `on`. */
static Run train(int nproc, const char *const *base, const char *const *extra, gboolean on)
{
  g_autofree char *ws = tu_mkdtemp("act-ckpt");
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--quiet"));
  if (nproc > 1)
    g_ptr_array_add(args, g_strdup_printf("--nproc=%d", nproc));
  for (int k = 0; k < 2; k++)
    for (const char *const *s = k ? extra : base; s && *s; s++)
      g_ptr_array_add(args, g_strdup_printf("--set=%s", *s));
  g_ptr_array_add(args,
                  g_strdup_printf("--set=activation_checkpointing=%s", on ? "true" : "false"));
  g_ptr_array_add(args, g_strdup_printf("--set=workspace_dir=%s", ws));
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  RunResult res = run_train(args, events);
  if (res.status != 0)
    g_error("cohort-train exited with %d: %s", res.status, res.err);
  run_result_clear(&res);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  Run r = {.loss = tu_event_values(ev, "step", "loss")};
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  r.weights = tu_read_weights(model);
  tu_rm_rf(ws);
  return r;
}

/* The same run with and without activation_checkpointing: 5 steps of losses within 1e-6
 * relative, the exported tensors within 1e-6 (relative, above 1e-3 in magnitude). Returns the
 * larger of the two differences (0: the same bits). */
static double check_same(const char *what, int nproc, const char *const *base,
                         const char *const *extra)
{
  Run off = train(nproc, base, extra, FALSE);
  Run on = train(nproc, base, extra, TRUE);
  g_assert_cmpuint(off.loss->len, ==, 5);
  g_assert_cmpuint(on.loss->len, ==, off.loss->len);
  double loss_diff = 0;
  for (guint s = 0; s < off.loss->len; s++) {
    double a = g_array_index(on.loss, double, s), b = g_array_index(off.loss, double, s);
    g_assert_true(isfinite(a) && isfinite(b));
    loss_diff = MAX(loss_diff, fabs(a - b) / MAX(fabs(b), 1e-12));
  }
  double w_diff = tu_max_rel_diff(on.weights, off.weights, 1e-3);
  g_test_message("%s: %u steps, losses %.6f -> %.6f; largest relative difference with "
                 "checkpointing: losses %.3g, %u exported values %.3g",
                 what, off.loss->len, g_array_index(off.loss, double, 0),
                 g_array_index(off.loss, double, off.loss->len - 1), loss_diff, off.weights->len,
                 w_diff);
  g_assert_cmpfloat(loss_diff, <=, 1e-6);
  g_assert_cmpfloat(w_diff, <=, 1e-6);
  run_clear(&off);
  run_clear(&on);
  return MAX(loss_diff, w_diff);
}

static void test_gpt(void)
{
  check_same("gpt fp32", 1, gpt_sets, NULL);
}

static void test_gpt_lora_dropout(void)
{
  const char *extra[] = {
      "finetune=lora",    "lora_rank=4",         "lora_alpha=8", "lora_dropout=0.25",
      "trainable=ln_f.*", "bucket_cap_mb=0.002", "batch_size=2", NULL};
  check_same("gpt lora, lora_dropout 0.25, 2 ranks", 2, gpt_sets, extra);
  /* the frozen base in bf16: each layer widened by its layer hook, around the recompute too */
  check_same("gpt lora, frozen_dtype bf16", 1, gpt_sets,
             (const char *[]){"finetune=lora", "lora_rank=4", "lora_alpha=8", "frozen_dtype=bf16",
                              "precision=bf16", NULL});
}

static void test_gpt_precision(void)
{
  check_same("gpt bf16", 1, gpt_sets, (const char *[]){"precision=bf16", NULL});
  check_same("gpt fp16", 1, gpt_sets, (const char *[]){"precision=fp16", NULL});
}

/* A student of a frozen teacher (a GPT of its shape trained 5 steps; forward only). */
static void test_gpt_distill(void)
{
  g_autofree char *teacher = g_build_filename(root, "gpt-teacher", NULL);
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--quiet"));
  for (const char *const *s = gpt_sets; *s; s++)
    g_ptr_array_add(args, g_strdup_printf("--set=%s", *s));
  g_ptr_array_add(args, g_strdup_printf("--set=workspace_dir=%s", teacher));
  RunResult r = run_train(args, NULL);
  if (r.status != 0)
    g_error("the teacher's run exited with %d: %s", r.status, r.err);
  run_result_clear(&r);
  g_autofree char *t = g_strdup_printf("teacher_from=%s", teacher);
  check_same("gpt student of a teacher", 1, gpt_sets,
             (const char *[]){t, "distill_alpha=0.6", "distill_temperature=2", NULL});
}

/* llama: the recompute runs the same kernels on the same inputs, so losses and weights are
 * the same bits; with LoRA and lora_dropout on 2 ranks (the masks drawn again), and at ZeRO
 * stage 3 (each block gathered by the backward's layer hook around the recompute). */
static void test_llama(void)
{
  g_assert_cmpfloat(check_same("llama (Qwen3) fp32", 1, llama_sets, NULL), ==, 0.0);
  const char *lora[] = {
      "finetune=lora", "lora_rank=4",         "lora_alpha=8",           "lora_dropout=0.25",
      "batch_size=2",  "bucket_cap_mb=0.002", "trainable=model.norm.*", NULL};
  g_assert_cmpfloat(check_same("llama lora, lora_dropout 0.25, 2 ranks", 2, llama_sets, lora), ==,
                    0.0);
  g_assert_cmpfloat(check_same("llama ZeRO-3, 2 ranks", 2, llama_sets,
                               (const char *[]){"zero_stage=3", "batch_size=2", NULL}),
                    ==, 0.0);
}

static void test_dit(void)
{
  check_same("dit", 1, dit_sets, NULL);
}

static void test_resnet_syncbn(void)
{
  check_same("resnet-14 SyncBatchNorm, 2 ranks", 2, resnet_sets,
             (const char *[]){"sync_batchnorm=true", "batch_size=2", NULL});
}

static void test_resnet50(void)
{
  check_same("resnet50", 1, resnet_sets,
             (const char *[]){"resnet_variant=resnet50", "image_size=32", "image_channels=3",
                              "batch_size=2", NULL});
}

/* ZeRO stages 1 and 2: the optimizer state and the gradients sharded, the gradients
 * reduce-scattered from the grad-ready hooks while backward recomputes the blocks. */
static void test_zero12(void)
{
  check_same("gpt ZeRO-1, 2 ranks", 2, gpt_sets,
             (const char *[]){"zero_stage=1", "batch_size=2", NULL});
  check_same("dit ZeRO-2, 2 ranks", 2, dit_sets,
             (const char *[]){"zero_stage=2", "batch_size=2", NULL});
}

static void test_zero3(void)
{
  check_same("gpt ZeRO-3, 2 ranks", 2, gpt_sets,
             (const char *[]){"zero_stage=3", "batch_size=2", NULL});
  check_same("resnet ZeRO-3 SyncBatchNorm, 2 ranks", 2, resnet_sets,
             (const char *[]){"zero_stage=3", "sync_batchnorm=true", "batch_size=2", NULL});
}

/* 2 ranks with activation_checkpointing against 1 process on the combined batch without it:
 * the ranks average per-rank mean gradients, one process takes one mean, so the sums run in
 * another order and agree to float32 rounding; as tests/test-ddp.c, the losses within 1e-5
 * relative and the weights within a thousandth of what AdamW can move them in the run
 * (lr · steps), while steps 2 to 5 moved them by far more than that. */
static void test_two_ranks_one(void)
{
  const double lr = 3e-3, steps = 5, tol = 1e-3 * lr * steps;
  Run one = train(1, gpt_sets, NULL, FALSE);
  Run two = train(2, gpt_sets, (const char *[]){"batch_size=2", NULL}, TRUE);
  Run start = train(1, gpt_sets, (const char *[]){"max_steps=1", NULL}, FALSE);
  g_assert_cmpuint(two.loss->len, ==, one.loss->len);
  double loss_diff = 0, w_diff = 0, moved = 0;
  for (guint s = 0; s < one.loss->len; s++) {
    double a = g_array_index(two.loss, double, s), b = g_array_index(one.loss, double, s);
    loss_diff = MAX(loss_diff, fabs(a - b) / fabs(b));
  }
  g_assert_cmpuint(two.weights->len, ==, one.weights->len);
  for (guint i = 0; i < one.weights->len; i++) {
    double b = g_array_index(one.weights, float, i);
    w_diff = MAX(w_diff, fabs(g_array_index(two.weights, float, i) - b));
    moved = MAX(moved, fabs(b - g_array_index(start.weights, float, i)));
  }
  g_test_message("gpt 2 ranks × 2 with checkpointing vs 1 × 4 without: losses %.3g relative, "
                 "weights %.3g absolute (tolerance %.3g; the run moved them up to %.3g)",
                 loss_diff, w_diff, tol, moved);
  g_assert_cmpfloat(loss_diff, <=, 1e-5);
  g_assert_cmpfloat(w_diff, <=, tol);
  g_assert_cmpfloat(moved, >, 100 * tol);
  run_clear(&one);
  run_clear(&two);
  run_clear(&start);
}

/* --explain's activations for `sets` with activation_checkpointing `on`. */
static gint64 explained_activations(const char *const *sets, gboolean on)
{
  g_autoptr(GPtrArray) a = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(a, g_strdup("--explain"));
  for (const char *const *s = sets; *s; s++)
    g_ptr_array_add(a, g_strdup_printf("--set=%s", *s));
  g_ptr_array_add(a, g_strdup_printf("--set=activation_checkpointing=%s", on ? "true" : "false"));
  RunResult r = run_train(a, NULL);
  if (r.status != 0)
    g_error("cohort-train --explain exited with %d: %s", r.status, r.err);
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) node = json_from_string(r.out, &error);
  g_assert_no_error(error);
  JsonObject *mem =
      json_object_get_object_member(json_node_get_object(node), COHORT_EXPLAIN_MEMORY);
  JsonObject *rank = json_object_get_object_member(mem, COHORT_EXPLAIN_PER_RANK);
  gint64 bytes = json_object_get_int_member(rank, COHORT_EXPLAIN_ACTIVATIONS_BYTES);
  run_result_clear(&r);
  return bytes;
}

/* The plan counts the key: a GPT at L8 C512 T1024, batch 4, keeps one input per block and one
 * block's buffers, and the plan's figure is the family's. */
static void test_memory_plan(void)
{
  const char *sets[] = {"n_layer=8",    "n_head=8",     "n_embd=512",
                        "seq_len=1024", "batch_size=4", NULL};
  gint64 off = explained_activations(sets, FALSE), on = explained_activations(sets, TRUE);
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  g_assert_true(cohort_config_apply_assignments(cfg, sets, "test", &error));
  g_assert_cmpint(off, ==, (gint64)cohort_model_act_bytes(cfg, 4));
  cfg->activation_checkpointing = TRUE;
  g_assert_cmpint(on, ==, (gint64)cohort_model_act_bytes(cfg, 4));
  g_test_message("GPT L8 C512 T1024 batch 4: activations %.1f MiB, %.1f MiB with "
                 "activation_checkpointing (%.0f%% less)",
                 off / 1048576.0, on / 1048576.0, 100.0 * (1.0 - (double)on / (double)off));
  g_assert_cmpint(on, <, off / 2);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  root = tu_mkdtemp("act-ckpt-root");
  g_test_add_func("/act-ckpt/gpt", test_gpt);
  g_test_add_func("/act-ckpt/gpt/lora-dropout-2-ranks", test_gpt_lora_dropout);
  g_test_add_func("/act-ckpt/gpt/bf16-fp16", test_gpt_precision);
  g_test_add_func("/act-ckpt/gpt/distill", test_gpt_distill);
  g_test_add_func("/act-ckpt/llama", test_llama);
  g_test_add_func("/act-ckpt/dit", test_dit);
  g_test_add_func("/act-ckpt/resnet/syncbn-2-ranks", test_resnet_syncbn);
  g_test_add_func("/act-ckpt/resnet/resnet50", test_resnet50);
  g_test_add_func("/act-ckpt/zero1-2", test_zero12);
  g_test_add_func("/act-ckpt/zero3", test_zero3);
  g_test_add_func("/act-ckpt/gpt/2-ranks-equal-1", test_two_ranks_one);
  g_test_add_func("/act-ckpt/memory-plan", test_memory_plan);
  int status = g_test_run();
  tu_rm_rf(root);
  g_free(root);
  return status;
}
