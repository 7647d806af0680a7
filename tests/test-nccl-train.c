/* Training over NCCL with two ranks on two GPUs (suite cuda; every case skips, saying so, with
 * fewer than 2 GPUs): `cohort-train --nproc 2` with device cuda and distributed_backend nccl,
 * each rank batch b, against one rank on one GPU with batch 2b, for
 *  - GPT in fp32 with small buckets, so several all-reduces are in flight while backward runs
 *    (an ordering bug between backward and the buckets shows only with two ranks: over one
 *    rank NCCL's all-reduce does nothing);
 *  - GPT with reduce_precision bf16 (closer than bf16's rounding allows, and not the fp32
 *    reduction's weights);
 *  - GPT with zero_stage 1 (the bits of stage 0 over NCCL, and close to one rank);
 *  - GPT with precision fp16 and loss scaling;
 *  - DiT on the built-in glyphs;
 *  - ResNet with sync_batchnorm (and without it measurably different, so the check can fail).
 * Tolerances are the Gloo tests' (tests/test-ddp.c, test-reducer.c, test-dit-ddp.c,
 * test-resnet-ddp.c): sums taken in another order agree to float rounding, which AdamW can
 * amplify to at most a thousandth of the distance it moves a weight in K steps (lr · K);
 * bfloat16 and fp16 rounding to a mean of 2^-7 of it. A missing bucket, a wrong scale or a
 * bucket reduced before backward wrote it moves weights by O(lr · K). Each case also checks
 * that the runs trained (the weights moved far more than the tolerance). */
#include "kernels/cuda/cuda-backend.h"

static const char *const *base_now;
#define DDP_BASE_SETS base_now
#include "ddp-run.h"

enum { STEPS = 6 };
#define LR       1e-3
#define FP32_TOL (1e-3 * LR * STEPS)
#define MEAN_TOL (0x1p-7 * LR * STEPS)

static const char *const gpt_sets[] = {
    "n_layer=2",          "n_head=2",
    "n_embd=32",          "seq_len=32",
    "warmup_steps=1",     "eval_every=0",
    "sample_every=0",     "save_every=0",
    "threads=1",          "timeout_s=120",
    "device=cuda",        "distributed_backend=nccl",
    "max_steps=6",        "learning_rate=0.001",
    "bucket_cap_mb=0.05", NULL,
};

static const char *const dit_sets[] = {
    "model=dit",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=",
    "image_size=8",
    "image_channels=1",
    "patch_size=2",
    "n_layer=2",
    "n_head=2",
    "n_embd=32",
    "cfg_dropout=0.2",
    "warmup_steps=1",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=120",
    "device=cuda",
    "max_steps=6",
    "distributed_backend=nccl",
    "learning_rate=0.001",
    "bucket_cap_mb=0.05",
    NULL,
};

static const char *const resnet_sets[] = {
    "model=resnet",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=",
    "image_size=16",
    "n_layer=8",
    "resnet_width=8",
    "augment=crop_flip",
    "optimizer=sgd",
    "learning_rate=0.05",
    "momentum=0.9",
    "weight_decay=0.0005",
    "lr_schedule=constant",
    "warmup_steps=0",
    "grad_clip=0",
    "bn_momentum=0.5",
    "save_every=0",
    "eval_every=0",
    "sample_every=0",
    "threads=1",
    "timeout_s=120",
    "bucket_cap_mb=0.01",
    "device=cuda",
    "distributed_backend=nccl",
    "max_steps=6",
    NULL,
};

static gboolean need_two_gpus(void)
{
  int n = cohort_cuda_device_count();
  if (n >= 2)
    return TRUE;
  const char *why = cohort_cuda_probe_error();
  g_autofree char *msg =
      n == 0 ? g_strdup_printf("needs 2 CUDA devices, none visible: %s", why ? why : "none found")
             : g_strdup_printf("needs 2 CUDA devices, %d visible", n);
  g_test_skip(msg);
  return FALSE;
}

static double mean_abs_diff(GArray *a, GArray *b)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double sum = 0;
  for (guint i = 0; i < a->len; i++)
    sum += fabs((double)g_array_index(a, float, i) - g_array_index(b, float, i));
  return sum / MAX(a->len, 1);
}

/* 2 ranks × batch 4 with `extra` against 1 rank × 8 with `extra1`; the weights of both. */
static void two_and_one(const char *const *extra, const char *const *extra1, GArray **two,
                        GArray **one)
{
  g_autoptr(GPtrArray) a = g_ptr_array_new(), b = g_ptr_array_new();
  g_ptr_array_add(a, "batch_size=4");
  g_ptr_array_add(b, "batch_size=8");
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(a, (gpointer)extra[i]);
  for (guint i = 0; extra1 && extra1[i]; i++)
    g_ptr_array_add(b, (gpointer)extra1[i]);
  g_ptr_array_add(a, NULL);
  g_ptr_array_add(b, NULL);
  *two = train_weights(2, (const char *const *)a->pdata, "nccl-2");
  *one = train_weights(1, (const char *const *)b->pdata, "nccl-1");
}

/* The runs trained: one step from the same start ends far from six. */
static void assert_trained(GArray *after, double tol)
{
  g_autoptr(GArray) w0 =
      train_weights(1, (const char *[]){"batch_size=8", "max_steps=1", NULL}, "nccl-0");
  g_assert_cmpfloat(max_abs_diff(w0, after), >, 100 * tol);
}

static void test_gpt_fp32(void)
{
  if (!need_two_gpus())
    return;
  base_now = gpt_sets;
  g_autoptr(GArray) two = NULL, one = NULL;
  two_and_one(NULL, NULL, &two, &one);
  double d = max_abs_diff(two, one);
  g_test_message("GPT fp32, 2 × 4 over NCCL vs 1 × 8: max |Δw| %.3g (tolerance %.3g)", d, FP32_TOL);
  g_assert_cmpfloat(d, <=, FP32_TOL);
  assert_trained(one, FP32_TOL);
}

static void test_gpt_bf16_reduce(void)
{
  if (!need_two_gpus())
    return;
  base_now = gpt_sets;
  g_autoptr(GArray) two = NULL, one = NULL;
  two_and_one((const char *[]){"reduce_precision=bf16", NULL}, NULL, &two, &one);
  g_autoptr(GArray) fp32 = train_weights(2, (const char *[]){"batch_size=4", NULL}, "nccl-32");
  double d16 = mean_abs_diff(two, one), d32 = mean_abs_diff(fp32, one);
  g_test_message("GPT, bf16 reduction over NCCL vs 1 rank: mean |Δw| %.3g (tolerance %.3g); "
                 "fp32 reduction %.3g",
                 d16, MEAN_TOL, d32);
  g_assert_cmpfloat(d16, <=, MEAN_TOL);
  g_assert_cmpint(memcmp(two->data, fp32->data, two->len * sizeof(float)), !=, 0);
  g_assert_cmpfloat(d16, >, d32);
}

static void test_gpt_zero1(void)
{
  if (!need_two_gpus())
    return;
  base_now = gpt_sets;
  g_autoptr(GArray) two = NULL, one = NULL;
  two_and_one((const char *[]){"zero_stage=1", NULL}, NULL, &two, &one);
  g_autoptr(GArray) stage0 =
      train_weights(2, (const char *[]){"batch_size=4", "zero_stage=0", NULL}, "nccl-z0");
  double d = max_abs_diff(two, one);
  g_test_message("GPT zero_stage 1 over NCCL vs 1 rank: max |Δw| %.3g (tolerance %.3g)", d,
                 FP32_TOL);
  g_assert_cmpfloat(d, <=, FP32_TOL);
  /* each rank updates its shard with the same element-wise AdamW: stage 0's bits */
  g_assert_cmpmem(two->data, two->len * sizeof(float), stage0->data, stage0->len * sizeof(float));
}

static void test_gpt_fp16(void)
{
  if (!need_two_gpus())
    return;
  base_now = gpt_sets;
  g_autoptr(GArray) two = NULL, one = NULL;
  two_and_one((const char *[]){"precision=fp16", NULL}, (const char *[]){"precision=fp16", NULL},
              &two, &one);
  double mean = mean_abs_diff(two, one), most = max_abs_diff(two, one);
  g_test_message("GPT fp16 (loss scaling) over NCCL vs 1 rank: mean |Δw| %.3g (tolerance %.3g), "
                 "max %.3g",
                 mean, MEAN_TOL, most);
  g_assert_cmpfloat(mean, <=, MEAN_TOL);
  g_assert_cmpfloat(most, <=, 2 * LR * STEPS);
}

static void test_dit(void)
{
  if (!need_two_gpus())
    return;
  base_now = dit_sets;
  g_autoptr(GArray) two = NULL, one = NULL;
  two_and_one(NULL, NULL, &two, &one);
  double d = max_abs_diff(two, one);
  g_test_message("DiT, 2 × 4 over NCCL vs 1 × 8: max |Δw| %.3g (tolerance %.3g)", d, FP32_TOL);
  g_assert_cmpfloat(d, <=, FP32_TOL);
  assert_trained(one, FP32_TOL);
}

/* SyncBatchNorm's all-gather and all-reduce on device buffers, between the reducer's buckets
 * on the communication thread: global statistics, so one rank's weights (1e-3 relative, the
 * Gloo two-ranks-one-GPU bound); without it the ranks normalise their own halves and the
 * weights differ measurably. */
static void test_resnet_syncbn(void)
{
  if (!need_two_gpus())
    return;
  base_now = resnet_sets;
  g_autoptr(GArray) two = NULL, one = NULL;
  two_and_one((const char *[]){"sync_batchnorm=true", NULL}, NULL, &two, &one);
  g_autoptr(GArray) local = train_weights(
      2, (const char *[]){"batch_size=4", "sync_batchnorm=false", NULL}, "nccl-local");
  double d = tu_max_rel_diff(two, one, 1e-2), l = tu_max_rel_diff(local, one, 1e-2);
  g_test_message("ResNet SyncBN over NCCL vs 1 rank: max relative |Δw| %.3g; without SyncBN %.3g",
                 d, l);
  g_assert_cmpfloat(d, <=, 1e-3);
  g_assert_cmpfloat(l, >, 10 * d);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/nccl-train/gpt-fp32-buckets", test_gpt_fp32);
  g_test_add_func("/nccl-train/gpt-bf16-reduce", test_gpt_bf16_reduce);
  g_test_add_func("/nccl-train/gpt-zero1", test_gpt_zero1);
  g_test_add_func("/nccl-train/gpt-fp16", test_gpt_fp16);
  g_test_add_func("/nccl-train/dit", test_dit);
  g_test_add_func("/nccl-train/resnet-syncbn", test_resnet_syncbn);
  return g_test_run();
}
