/* ZeRO stages 2 and 3 end to end (suite dist, Gloo over loopback), each against stage 0:
 *  - 2 ranks, bit for bit: the per-step losses, the evaluations, the samples, the exported
 *    model and EMA weights and every checkpoint file (parameters, EMA, AdamW's moments: the
 *    same safetensors bytes) for GPT with clipping, weight decay and EMA; GPT with the bf16
 *    reduce-scatter; a Qwen3-shaped llama with EMA, evaluations and checkpoints (stage 1 too);
 *    DiT with EMA and image samples; ResNet with SyncBatchNorm and SGD; a GPT student distilled
 *    from a teacher and a llama student of a deeper llama teacher. Two ranks add two values,
 *    and a + b is b + a: nothing in the sharded arithmetic may differ;
 *  - 3 ranks with gradient accumulation (GPT, DiT) and SyncBatchNorm (ResNet): stages 2 and 3
 *    equal each other bit for bit, and stage 0 within rounding (the all-reduce of a unit adds
 *    three values in another order than that of a DDP bucket, and each micro-step is reduced
 *    before it is accumulated);
 *  - the ranks event: each rank holds half the gradients, optimizer state and (stage 3)
 *    parameters of stage 0, stage 3 never gathers the whole model, and every rank queued the
 *    same collectives in the same order;
 *  - a rank made slow (COHORT_TEST_SLOW_RANK) neither deadlocks nor changes a bit;
 *  - checkpoints: a stage-3 run on 3 ranks resumes on 3 at stage 3 to its own bits, and on 2
 *    ranks at stage 2 and on 1 at stage 0 within rounding (gpt and llama); a damaged one is
 *    refused;
 *  - the memory plan (--explain) for every stage, and a launch that cannot fit this machine
 *    refused before any rank starts, with the numbers and a stage that would fit;
 *  - one process at stage 3 trains as stage 0; zero_stage 4 is refused. */
#include <math.h>
#include <string.h>

#include "test-util.h"
#include "train-run.h"

static const char *const gpt_sets[] = {
    "n_layer=2",          "n_head=2",       "n_embd=32",
    "seq_len=32",         "warmup_steps=1", "eval_every=3",
    "eval_steps=2",       "sample_every=3", "sample_tokens=8",
    "save_every=3",       "keep_last=0",    "threads=1",
    "timeout_s=60",       "grad_clip=0.5",  "weight_decay=0.1",
    "learning_rate=3e-3", "max_steps=6",    NULL,
};

/* A Qwen3-shaped llama (q/k norms, grouped-query attention, a separate head) on bytes, with the
 * GPT case's optimizer, clipping, evaluations and checkpoints (the family has no samples). */
static const char *const llama_sets[] = {
    "model=llama",
    "architecture=Qwen3ForCausalLM",
    "n_layer=2",
    "n_embd=32",
    "n_head=4",
    "num_key_value_heads=2",
    "head_dim=8",
    "intermediate_size=48",
    "seq_len=16",
    "vocab_size=256",
    "tie_word_embeddings=false",
    "data_format=text",
    "warmup_steps=1",
    "eval_every=3",
    "eval_steps=2",
    "sample_every=0",
    "save_every=3",
    "keep_last=0",
    "threads=1",
    "timeout_s=60",
    "grad_clip=0.5",
    "weight_decay=0.1",
    "learning_rate=3e-3",
    "max_steps=6",
    NULL,
};

static const char *const dit_sets[] = {
    "model=dit",    "data_format=images", "train_data=builtin:glyphs/train",
    "val_data=",    "image_size=8",       "image_channels=1",
    "patch_size=2", "n_layer=2",          "n_head=2",
    "n_embd=32",    "cfg_dropout=0.2",    "warmup_steps=1",
    "eval_every=0", "sample_every=2",     "sample_steps=2",
    "save_every=0", "threads=1",          "timeout_s=60",
    "max_steps=4",  "ema_decay=0.9",      NULL,
};

static const char *const resnet_sets[] = {
    "model=resnet",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=builtin:glyphs/val",
    "image_size=16",
    "n_layer=8",
    "resnet_width=8",
    "augment=crop_flip",
    "optimizer=sgd",
    "momentum=0.9",
    "learning_rate=0.05",
    "weight_decay=0.0005",
    "warmup_steps=0",
    "grad_clip=1",
    "save_every=0",
    "eval_every=2",
    "eval_steps=1",
    "threads=1",
    "timeout_s=60",
    "max_steps=4",
    "sync_batchnorm=true",
    NULL,
};

typedef struct {
  GPtrArray *events;
  GArray *loss;
  char *ws;
} Run;

static void run_clear(Run *r)
{
  g_clear_pointer(&r->events, g_ptr_array_unref);
  g_clear_pointer(&r->loss, g_array_unref);
  tu_rm_rf(r->ws);
  g_clear_pointer(&r->ws, g_free);
}

/* cohort-train on `nproc` ranks with base, extra and `env` ("NAME=value" or NULL); the
 * test fails unless it exits 0. */
static Run train_env(int nproc, const char *const *base, const char *const *extra,
                     const char *resume, const char *env)
{
  Run r = {.ws = tu_mkdtemp("zero-shard")};
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--quiet"));
  if (nproc > 1)
    g_ptr_array_add(args, g_strdup_printf("--nproc=%d", nproc));
  for (int k = 0; k < 2; k++)
    for (const char *const *s = k ? extra : base; s && *s; s++)
      g_ptr_array_add(args, g_strdup_printf("--set=%s", *s));
  g_ptr_array_add(args, g_strdup_printf("--set=workspace_dir=%s", r.ws));
  if (resume)
    g_ptr_array_add(args, g_strdup_printf("--resume=%s", resume));
  g_autofree char *events = g_build_filename(r.ws, "progress.jsonl", NULL);
  if (env) {
    g_auto(GStrv) kv = g_strsplit(env, "=", 2);
    g_setenv(kv[0], kv[1], TRUE);
  }
  RunResult res = run_train(args, events);
  if (env) {
    g_auto(GStrv) kv = g_strsplit(env, "=", 2);
    g_unsetenv(kv[0]);
  }
  if (res.status != 0)
    g_error("cohort-train exited with %d: %s", res.status, res.err);
  run_result_clear(&res);
  r.events = tu_read_events(events);
  r.loss = tu_event_values(r.events, "step", "loss");
  return r;
}

static Run train(int nproc, const char *const *base, const char *const *extra)
{
  return train_env(nproc, base, extra, NULL, NULL);
}

/* "zero_stage=N" added to extra. */
static Run train_stage(int nproc, const char *const *base, const char *const *extra, int stage)
{
  g_autoptr(GPtrArray) sets = g_ptr_array_new();
  for (const char *const *s = extra; s && *s; s++)
    g_ptr_array_add(sets, (gpointer)*s);
  g_autofree char *z = g_strdup_printf("zero_stage=%d", stage);
  g_ptr_array_add(sets, z);
  g_ptr_array_add(sets, NULL);
  return train(nproc, base, (const char *const *)sets->pdata);
}

/* The file's bytes, with an export's run id (which names the run, so differs between any two)
 * blanked out. */
static GBytes *file_bytes(const Run *r, const char *rel)
{
  g_autofree char *path = g_build_filename(r->ws, rel, NULL);
  char *data = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &data, &len, NULL))
    return NULL;
  const char key[] = "\"cohort.run_id\":\"";
  char *at = memmem(data, MIN(len, 4096), key, sizeof key - 1);
  if (at && at + sizeof key - 1 + 32 <= data + len)
    memset(at + sizeof key - 1, '0', 32);
  return g_bytes_new_take(data, len);
}

/* An export records the run it belongs to (cohort.run_id in the safetensors header), which
 * differs between two runs by design: blanked before comparing. */
static GBytes *without_run_id(GBytes *b)
{
  gsize len = 0;
  const char *src = g_bytes_get_data(b, &len);
  if (len == 0)
    return g_bytes_ref(b);
  char *data = g_memdup2(src, len);
  static const char key[] = "\"cohort.run_id\":\"";
  /* memmem: the header's 8-byte length holds zero bytes that would end a string search. */
  char *hit = memmem(data, MIN(len, (gsize)1 << 20), key, sizeof key - 1);
  if (hit && (gsize)(hit - data) + sizeof key - 1 + 32 <= len)
    memset(hit + sizeof key - 1, '0', 32);
  return g_bytes_new_take(data, len);
}

/* The same file in both runs, byte for byte but for the run id (both must have it). */
static void assert_same_file(const Run *a, const Run *b, const char *rel)
{
  g_autoptr(GBytes) x0 = file_bytes(a, rel);
  g_autoptr(GBytes) y0 = file_bytes(b, rel);
  if (!x0 || !y0)
    g_error("%s is missing from a run", rel);
  g_autoptr(GBytes) x = without_run_id(x0);
  g_autoptr(GBytes) y = without_run_id(y0);
  if (!g_bytes_equal(x, y)) {
    gsize nx = 0, ny = 0;
    const guint8 *px = g_bytes_get_data(x, &nx), *py = g_bytes_get_data(y, &ny);
    gsize at = 0;
    while (at < MIN(nx, ny) && px[at] == py[at])
      at++;
    g_error("%s differs between the runs (%" G_GSIZE_FORMAT " and %" G_GSIZE_FORMAT
            " bytes, first at byte %" G_GSIZE_FORMAT ")",
            rel, nx, ny, at);
  }
}

static GArray *weights(const Run *r, const char *rel)
{
  g_autofree char *path = g_build_filename(r->ws, rel, NULL);
  return tu_read_weights(path);
}

/* Each event's `member`, as text (JSON), in order: evaluations, samples. */
static char *members(const Run *r, const char *event, const char *member)
{
  GString *s = g_string_new(NULL);
  for (guint i = 0; i < r->events->len; i++) {
    JsonObject *o = g_ptr_array_index(r->events, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), event) ||
        !json_object_has_member(o, member))
      continue;
    JsonNode *n = json_object_get_member(o, member);
    g_autofree char *t = json_to_string(n, FALSE);
    g_string_append_printf(s, "%s;", t);
  }
  return g_string_free(s, FALSE);
}

/* The first ranks event's ranks array (they come every 10 steps), or NULL. */
static JsonArray *ranks_or_null(const Run *r)
{
  for (guint i = 0; i < r->events->len; i++) {
    JsonObject *o = g_ptr_array_index(r->events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "ranks"))
      return json_object_get_array_member(o, "ranks");
  }
  return NULL;
}

static JsonArray *ranks_of(const Run *r)
{
  JsonArray *a = ranks_or_null(r);
  if (!a)
    g_error("no ranks event");
  return a;
}

/* Every rank reports the same digest of its collectives' order (runs of 10 steps or more). */
static void assert_same_order(const Run *r)
{
  JsonArray *ranks = ranks_or_null(r);
  if (!ranks)
    return;
  const char *first =
      json_object_get_string_member(json_array_get_object_element(ranks, 0), "zero_order");
  g_assert_nonnull(first);
  for (guint k = 1; k < json_array_get_length(ranks); k++)
    g_assert_cmpstr(
        json_object_get_string_member(json_array_get_object_element(ranks, k), "zero_order"), ==,
        first);
}

static gboolean same_floats(GArray *a, GArray *b)
{
  return a->len == b->len &&
         memcmp(a->data, b->data, (gsize)a->len * g_array_get_element_size(a)) == 0;
}

/* Stages `first` to 3 against stage 0 on 2 ranks: every number and every file the same. */
static void check_bitwise_from(int first, const char *const *base, const char *const *extra,
                               const char *const *files)
{
  Run s0 = train_stage(2, base, extra, 0);
  g_assert_cmpuint(s0.loss->len, >, 0);
  for (int stage = first; stage <= 3; stage++) {
    Run s = train_stage(2, base, extra, stage);
    g_assert_true(same_floats(s.loss, s0.loss));
    g_autofree char *e0 = members(&s0, "eval", "val_loss");
    g_autofree char *e = members(&s, "eval", "val_loss");
    g_assert_cmpstr(e, ==, e0);
    g_autofree char *t0 = members(&s0, "sample", "text");
    g_autofree char *t = members(&s, "sample", "text");
    g_assert_cmpstr(t, ==, t0);
    for (const char *const *f = files; *f; f++)
      assert_same_file(&s, &s0, *f);
    assert_same_order(&s);
    g_test_message("stage %d on 2 ranks: %u losses, evaluations, samples and %u files equal "
                   "stage 0's bit for bit",
                   stage, s.loss->len, g_strv_length((char **)files));
    run_clear(&s);
  }
  run_clear(&s0);
}

/* Stages 2 and 3 (stage 1 is tests/test-zero.c's) against stage 0. */
static void check_bitwise(const char *const *base, const char *const *extra,
                          const char *const *files)
{
  check_bitwise_from(2, base, extra, files);
}

static const char *const gpt_files[] = {"model.safetensors", "model-ema.safetensors",
                                        "checkpoints/step-00000003/model.safetensors",
                                        "checkpoints/step-00000006/model.safetensors", NULL};

static void test_gpt_bitwise(void)
{
  check_bitwise(gpt_sets, (const char *[]){"batch_size=2", "ema_decay=0.9", NULL}, gpt_files);
}

static void test_gpt_bf16(void)
{
  const char *files[] = {"model.safetensors", NULL};
  check_bitwise(gpt_sets,
                (const char *[]){"batch_size=2", "reduce_precision=bf16", "save_every=0", NULL},
                files);
}

static void test_dit_bitwise(void)
{
  const char *files[] = {"model.safetensors", "model-ema.safetensors", "samples/step-00000002.png",
                         "samples/step-00000004.png", NULL};
  check_bitwise(dit_sets, (const char *[]){"batch_size=4", NULL}, files);
}

static void test_resnet_bitwise(void)
{
  const char *files[] = {"model.safetensors", NULL};
  check_bitwise(resnet_sets, (const char *[]){"batch_size=4", NULL}, files);
}

/* llama at stages 1, 2 and 3 against stage 0, with EMA and checkpoints at steps 3 and 6. */
static void test_llama_bitwise(void)
{
  check_bitwise_from(1, llama_sets, (const char *[]){"batch_size=2", "ema_decay=0.9", NULL},
                     gpt_files);
}

/* A student of a teacher of its family with `teacher_layers` trained here; the teacher stays
 * whole on every rank. */
static void check_distill(const char *const *sets, const char *teacher_layers)
{
  Run teacher = train(1, sets,
                      (const char *[]){teacher_layers, "max_steps=2", "eval_every=0",
                                       "sample_every=0", "save_every=0", NULL});
  g_autofree char *from = g_strdup_printf("teacher_from=%s", teacher.ws);
  const char *extra[] = {from,
                         "batch_size=2",
                         "distill_alpha=0.6",
                         "distill_temperature=2",
                         "sample_every=0",
                         "max_steps=4",
                         "save_every=0",
                         NULL};
  const char *files[] = {"model.safetensors", NULL};
  check_bitwise(sets, extra, files);
  run_clear(&teacher);
}

/* A GPT student of a one-layer teacher. */
static void test_distill_bitwise(void)
{
  check_distill(gpt_sets, "n_layer=1");
}

/* A llama student (2 layers) of a larger llama teacher (3 layers). */
static void test_distill_llama(void)
{
  check_distill(llama_sets, "n_layer=3");
}

static double max_abs(GArray *a, GArray *b)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0;
  for (guint i = 0; i < a->len; i++)
    worst = MAX(worst, fabs((double)g_array_index(a, float, i) - g_array_index(b, float, i)));
  return worst;
}

static double loss_rel(GArray *a, GArray *b)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0;
  for (guint i = 0; i < a->len; i++) {
    double x = g_array_index(a, double, i), y = g_array_index(b, double, i);
    worst = MAX(worst, fabs(x - y) / fabs(y));
  }
  return worst;
}

/* 3 ranks: stages 2 and 3 equal each other bit for bit and stage 0 within rounding: losses
 * within 1e-6 relative, weights within `tol`. */
static void check_three(const char *const *base, const char *const *extra, double tol)
{
  Run s0 = train_stage(3, base, extra, 0);
  Run s2 = train_stage(3, base, extra, 2);
  Run s3 = train_stage(3, base, extra, 3);
  g_assert_true(same_floats(s3.loss, s2.loss));
  assert_same_file(&s3, &s2, "model.safetensors");
  g_autoptr(GArray) w0 = weights(&s0, "model.safetensors");
  g_autoptr(GArray) w3 = weights(&s3, "model.safetensors");
  double dl = loss_rel(s3.loss, s0.loss), dw = max_abs(w3, w0);
  g_test_message("3 ranks: stage 2 = stage 3 bit for bit; against stage 0 losses within %.2g "
                 "relative, weights within %.2g (tolerance %.2g)",
                 dl, dw, tol);
  g_assert_cmpfloat(dl, <=, 1e-6);
  g_assert_cmpfloat(dw, <=, tol);
  assert_same_order(&s3);
  run_clear(&s0);
  run_clear(&s2);
  run_clear(&s3);
}

/* AdamW moves a weight whose gradient is rounding noise by up to lr a step: weights are
 * bounded by a thousandth of lr per step, as tests/test-ddp.c bounds N ranks against one. */
static void test_gpt_three_accum(void)
{
  check_three(
      gpt_sets,
      (const char *[]){"batch_size=2", "gradient_accumulation_steps=2", "ema_decay=0.9", NULL},
      1e-3 * 3e-3 * 6);
}

static void test_dit_three_accum(void)
{
  check_three(dit_sets, (const char *[]){"batch_size=2", "gradient_accumulation_steps=2", NULL},
              1e-3 * 1e-4 * 4 + 1e-6);
}

/* Two steps: from the third on, the summation orders of a reduce-scatter and an all-reduce,
 * amplified by BatchNorm over small batches, drift apart with the compiler's floating-point
 * contractions (4 steps: 1.3e-4 in the sanitizer build, within 1e-5 in the release build). */
static void test_resnet_three(void)
{
  check_three(resnet_sets, (const char *[]){"batch_size=4", "max_steps=2", NULL}, 1e-5);
}

/* Each rank's shares in the first ranks event: stage 0's optimizer state halved, the shards
 * (gradients at stage 2; gradients and parameters at stage 3) each half the model, and stage
 * 3's gathers never the whole model. */
static void test_ranks_event(void)
{
  const char *extra[] = {"batch_size=2",   "max_steps=10", "eval_every=0",
                         "sample_every=0", "save_every=0", NULL};
  Run s0 = train_stage(2, gpt_sets, extra, 0);
  Run s3 = train_stage(2, gpt_sets, extra, 3);
  const gint64 params = 34688, bytes = 4 * params;
  JsonArray *r0 = ranks_of(&s0), *r3 = ranks_of(&s3);
  gint64 total_shard = 0;
  for (guint k = 0; k < 2; k++) {
    JsonObject *a = json_array_get_object_element(r0, k), *b = json_array_get_object_element(r3, k);
    gint64 optim0 = json_object_get_int_member(a, "optim_bytes");
    gint64 optim3 = json_object_get_int_member(b, "optim_bytes");
    gint64 shard = json_object_get_int_member(b, "shard_bytes");
    gint64 gathered = json_object_get_int_member(b, "gathered_peak_bytes");
    g_test_message("rank %u: optimizer %" G_GINT64_FORMAT " bytes at stage 0, %" G_GINT64_FORMAT
                   " at stage 3; shards %" G_GINT64_FORMAT ", at most %" G_GINT64_FORMAT
                   " bytes of parameters gathered (the model: %" G_GINT64_FORMAT ")",
                   k, optim0, optim3, shard, gathered, bytes);
    g_assert_cmpint(optim0, ==, 2 * bytes);
    g_assert_cmpint(optim3, <=, optim0 / 2 + 2 * 4 * 64 * 8);
    total_shard += shard;
    g_assert_cmpint(gathered, >, 0);
    g_assert_cmpint(gathered, <, bytes);
    g_assert_cmpint(json_object_get_int_member(b, "mem_peak_bytes"), >, 0);
  }
  /* gradients and parameters, each split over the two ranks */
  g_assert_cmpint(total_shard, ==, 2 * bytes);
  assert_same_order(&s3);
  run_clear(&s0);
  run_clear(&s3);
}

/* A rank that takes 3 ms before each of its collectives: the others wait for it, and the
 * result is the one without it, bit for bit. */
static void test_slow_rank(void)
{
  const char *extra[] = {"batch_size=2", "zero_stage=3", "max_steps=10", "save_every=0", NULL};
  Run fast = train(3, gpt_sets, extra);
  Run slow = train_env(3, gpt_sets, extra, NULL, "COHORT_TEST_SLOW_RANK=1:3000");
  Run slow0 = train_env(3, gpt_sets, extra, NULL, "COHORT_TEST_SLOW_RANK=0:3000");
  g_assert_true(same_floats(slow.loss, fast.loss));
  g_assert_true(same_floats(slow0.loss, fast.loss));
  assert_same_file(&slow, &fast, "model.safetensors");
  assert_same_file(&slow0, &fast, "model.safetensors");
  g_assert_nonnull(ranks_or_null(&slow));
  assert_same_order(&slow);
  assert_same_order(&slow0);
  run_clear(&fast);
  run_clear(&slow);
  run_clear(&slow0);
}

/* A stage-3 checkpoint of 3 ranks: on 3 ranks at stage 3 it continues to the bits of the run
 * that never stopped; on 2 ranks at stage 2 and on 1 at stage 0 (the same global batch of 6)
 * within rounding. */
static void check_resume_across(const char *const *family_sets)
{
  const char *sets[] = {"eval_every=0", "sample_every=0", "ema_decay=0.9", NULL};
  g_autoptr(GPtrArray) base = g_ptr_array_new();
  for (const char *const *s = family_sets; *s; s++)
    g_ptr_array_add(base, (gpointer)*s);
  for (const char *const *s = sets; *s; s++)
    g_ptr_array_add(base, (gpointer)*s);
  g_ptr_array_add(base, NULL);
  const char *const *b = (const char *const *)base->pdata;
  Run ref = train(3, b, (const char *[]){"batch_size=2", "zero_stage=3", NULL});
  g_autofree char *ckpt = g_build_filename(ref.ws, "checkpoints", "step-00000003", NULL);
  Run again = train_env(3, b, (const char *[]){"batch_size=2", "zero_stage=3", NULL}, ckpt, NULL);
  g_assert_cmpuint(again.loss->len, ==, 3);
  g_assert_true(memcmp(again.loss->data, &g_array_index(ref.loss, double, 3), 3 * sizeof(double)) ==
                0);
  assert_same_file(&again, &ref, "model.safetensors");
  assert_same_file(&again, &ref, "model-ema.safetensors");
  g_autoptr(GArray) wref = weights(&ref, "model.safetensors");
  const struct {
    int world, stage;
    const char *batch;
  } others[] = {{2, 2, "batch_size=3"}, {1, 0, "batch_size=6"}};
  for (guint i = 0; i < G_N_ELEMENTS(others); i++) {
    g_autofree char *z = g_strdup_printf("zero_stage=%d", others[i].stage);
    Run r = train_env(others[i].world, b, (const char *[]){others[i].batch, z, NULL}, ckpt, NULL);
    g_autoptr(GArray) w = weights(&r, "model.safetensors");
    g_autoptr(GArray) tail = g_array_new(FALSE, FALSE, sizeof(double));
    g_array_append_vals(tail, &g_array_index(ref.loss, double, 3), 3);
    double dl = loss_rel(r.loss, tail), dw = max_abs(w, wref);
    g_test_message("resumed on %d rank%s at stage %d: losses within %.2g, weights within %.2g",
                   others[i].world, others[i].world > 1 ? "s" : "", others[i].stage, dl, dw);
    g_assert_cmpfloat(dl, <=, 1e-6);
    g_assert_cmpfloat(dw, <=, 1e-3 * 3e-3 * 3);
    run_clear(&r);
  }
  run_clear(&again);
  run_clear(&ref);
}

static void test_resume_across(void)
{
  check_resume_across(gpt_sets);
}

static void test_llama_resume_across(void)
{
  check_resume_across(llama_sets);
}

/* A damaged stage-3 checkpoint: rank 0's check (the sha256 in state.json) refuses it on every
 * rank with one line naming the file, before any rank reads its pieces. */
static void test_resume_damaged(void)
{
  const char *extra[] = {"batch_size=2", "zero_stage=3",   "max_steps=3",
                         "eval_every=0", "sample_every=0", NULL};
  Run ref = train(2, gpt_sets, extra);
  g_autofree char *ckpt = g_build_filename(ref.ws, "checkpoints", "step-00000003", NULL);
  g_autofree char *model = g_build_filename(ckpt, "model.safetensors", NULL);
  char *data = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(model, &data, &len, NULL));
  data[len - 5] ^= 0x40; /* a bit of the last optimizer moment */
  g_assert_true(g_file_set_contents(model, data, (gssize)len, NULL));
  g_free(data);
  g_autofree char *ws = tu_mkdtemp("zero-damaged");
  g_autoptr(GPtrArray) args = small_args(
      ws, (const char *[]){"--nproc=2", "--set=zero_stage=3", "--set=max_steps=6", NULL});
  g_ptr_array_add(args, g_strdup_printf("--resume=%s", ckpt));
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_test_message("%s", r.err);
  g_assert_nonnull(strstr(r.err, "does not match"));
  g_assert_nonnull(strstr(r.err, "model.safetensors"));
  run_result_clear(&r);
  tu_rm_rf(ws);
  run_clear(&ref);
}

/* cohort-train with `args` and the GPT-2-large shape on token data; its stdout (JSON). */
static JsonObject *explain(int nproc, int stage, const char *tokens)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--explain"));
  g_ptr_array_add(args, g_strdup_printf("--nproc=%d", nproc));
  const char *sets[] = {"data_format=tokens", "val_data=",   "n_layer=36",       "n_embd=1280",
                        "n_head=20",          "seq_len=128", "vocab_size=50257", "batch_size=1",
                        "device=cpu",         NULL};
  for (const char *const *s = sets; *s; s++)
    g_ptr_array_add(args, g_strdup_printf("--set=%s", *s));
  g_ptr_array_add(args, g_strdup_printf("--set=train_data=%s", tokens));
  g_ptr_array_add(args, g_strdup_printf("--set=zero_stage=%d", stage));
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_autoptr(JsonParser) p = json_parser_new();
  g_assert_true(json_parser_load_from_data(p, r.out, -1, NULL));
  JsonObject *o = json_object_ref(json_node_get_object(json_parser_get_root(p)));
  run_result_clear(&r);
  return o;
}

/* A token shard of n random tokens below 50257 (llm.c's format). */
static char *token_file(const char *dir, int n)
{
  g_autofree gint32 *header = g_new0(gint32, 256);
  header[0] = GINT32_TO_LE(20240520);
  header[1] = GINT32_TO_LE(1);
  header[2] = GINT32_TO_LE(n);
  GByteArray *b = g_byte_array_new();
  g_byte_array_append(b, (guint8 *)header, 256 * 4);
  for (int i = 0; i < n; i++) {
    guint16 t = GUINT16_TO_LE((guint16)((i * 7919) % 50257));
    g_byte_array_append(b, (guint8 *)&t, 2);
  }
  char *path = g_build_filename(dir, "train.bin", NULL);
  g_assert_true(g_file_set_contents(path, (const char *)b->data, b->len, NULL));
  g_byte_array_unref(b);
  return path;
}

static void test_memory_plan(void)
{
  g_autofree char *dir = tu_mkdtemp("zero-plan");
  g_autofree char *tokens = token_file(dir, 4096);
  gint64 totals[4];
  for (int stage = 0; stage <= 3; stage++) {
    g_autoptr(JsonObject) o = explain(4, stage, tokens);
    JsonObject *m = json_object_get_object_member(o, "memory");
    JsonObject *pr = json_object_get_object_member(m, "per_rank");
    gint64 params = json_object_get_int_member(o, "params");
    g_assert_cmpint(params, ==, 772883200);
    g_assert_cmpint(json_object_get_int_member(m, "zero_stage"), ==, stage);
    totals[stage] = json_object_get_int_member(pr, "total_bytes");
    g_test_message("stage %d: %.2f GiB per rank (parameters %.2f, gradients %.2f, optimizer "
                   "%.2f, working set %.2f)",
                   stage, totals[stage] / 1073741824.0,
                   json_object_get_int_member(pr, "params_bytes") / 1073741824.0,
                   json_object_get_int_member(pr, "grads_bytes") / 1073741824.0,
                   json_object_get_int_member(pr, "optim_bytes") / 1073741824.0,
                   json_object_get_int_member(pr, "working_bytes") / 1073741824.0);
    gint64 p4 = 4 * params;
    g_assert_cmpint(json_object_get_int_member(pr, "optim_bytes"), <=,
                    stage == 0 ? 2 * p4 : 2 * p4 / 4 + 2 * 4 * 64 * 4 * 40);
    g_assert_cmpint(json_object_get_int_member(pr, "grads_bytes"), <=,
                    stage < 2 ? p4 : p4 / 4 + 4 * 64 * 4 * 40);
    g_assert_cmpint(json_object_get_int_member(pr, "params_bytes"), <=,
                    stage < 3 ? p4 : p4 / 4 + 4 * 64 * 4 * 40);
    if (stage > 0)
      g_assert_cmpint(totals[stage], <, totals[stage - 1]);
  }
  /* A model no machine here holds at stage 0 on 4 ranks: refused before any rank starts,
   * with the numbers and what would fit. */
  g_autoptr(GPtrArray) args =
      small_args(dir, (const char *[]){"--nproc=4", "--set=data_format=tokens",
                                       "--set=val_data=", "--set=n_layer=48", "--set=n_embd=4096",
                                       "--set=n_head=32", "--set=vocab_size=50257",
                                       "--set=device=cpu", "--set=zero_stage=0", NULL});
  g_ptr_array_add(args, g_strdup_printf("--set=train_data=%s", tokens));
  gint64 t0 = g_get_monotonic_time();
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_test_message("%s", r.err);
  g_assert_nonnull(strstr(r.err, "memory: 4 processes on this machine at zero_stage 0 need"));
  g_assert_nonnull(strstr(r.err, "GiB together, and this machine has"));
  g_assert_cmpint(g_get_monotonic_time() - t0, <, 30 * G_USEC_PER_SEC);
  run_result_clear(&r);
  g_autofree char *ckpts = g_build_filename(dir, "checkpoints", NULL);
  g_assert_false(g_file_test(ckpts, G_FILE_TEST_EXISTS));
  tu_rm_rf(dir);
}

static void test_one_process(void)
{
  Run s = train(1, gpt_sets,
                (const char *[]){"max_steps=2", "zero_stage=3", "eval_every=0", "sample_every=0",
                                 "save_every=0", NULL});
  gboolean said = FALSE;
  for (guint i = 0; i < s.events->len; i++) {
    JsonObject *o = g_ptr_array_index(s.events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "log") &&
        strstr(json_object_get_string_member(o, "message"), "zero_stage 3 with one process"))
      said = TRUE;
  }
  g_assert_true(said);
  run_clear(&s);
}

static void test_bad_stage(void)
{
  g_autofree char *ws = tu_mkdtemp("zero-bad");
  g_autoptr(GPtrArray) args = small_args(ws, (const char *[]){"--set", "zero_stage=4", NULL});
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "\"zero_stage\": 4 is not allowed; allowed: 0 to 3"));
  run_result_clear(&r);
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/zero-shard/gpt/2-ranks-bitwise", test_gpt_bitwise);
  g_test_add_func("/zero-shard/gpt/bf16-2-ranks", test_gpt_bf16);
  g_test_add_func("/zero-shard/llama/2-ranks-bitwise", test_llama_bitwise);
  g_test_add_func("/zero-shard/dit/2-ranks-bitwise", test_dit_bitwise);
  g_test_add_func("/zero-shard/resnet/syncbn-2-ranks", test_resnet_bitwise);
  g_test_add_func("/zero-shard/distill/gpt-student", test_distill_bitwise);
  g_test_add_func("/zero-shard/distill/llama-student", test_distill_llama);
  g_test_add_func("/zero-shard/gpt/3-ranks-accum", test_gpt_three_accum);
  g_test_add_func("/zero-shard/dit/3-ranks-accum", test_dit_three_accum);
  g_test_add_func("/zero-shard/resnet/syncbn-3-ranks", test_resnet_three);
  g_test_add_func("/zero-shard/ranks-event", test_ranks_event);
  g_test_add_func("/zero-shard/slow-rank", test_slow_rank);
  g_test_add_func("/zero-shard/checkpoint/resume-across", test_resume_across);
  g_test_add_func("/zero-shard/checkpoint/llama-resume-across", test_llama_resume_across);
  g_test_add_func("/zero-shard/checkpoint/damaged", test_resume_damaged);
  g_test_add_func("/zero-shard/memory-plan", test_memory_plan);
  g_test_add_func("/zero-shard/one-process", test_one_process);
  g_test_add_func("/zero-shard/bad-stage", test_bad_stage);
  return g_test_run();
}
