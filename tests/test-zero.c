/* ZeRO stage 1 end to end (suite dist, Gloo over loopback):
 *  - zero_stage 1 trains to the bits of zero_stage 0: GPT with AdamW, weight decay and active
 *    clipping on 2 ranks, and on 3 ranks with gradient accumulation (there the parameter count
 *    leaves a tail that every rank keeps); ResNet with SGD and momentum on 2 ranks. Per-step
 *    losses and final weights are compared bit for bit, since the design (full all-reduced
 *    gradient on every rank, an element-wise update of each shard) changes no arithmetic;
 *  - the ranks event's optim_bytes: each of 2 ranks holds half of stage 0's optimizer state
 *    (and the event carries mem_bytes and mem_peak_bytes);
 *  - checkpoints: the one a stage-1 run on 2 ranks saves holds the tensors a stage-0 run saves
 *    (the moments gathered to rank 0), and it resumes on 2 ranks to the bits of the run that
 *    never stopped, and on 1 and 3 ranks at stage 0 and 1 to that run within rounding (the
 *    global batch is the same; only the order of the sums changes); on 3 ranks stage 1 resumes
 *    and saves to the bits of stage 0 (the shards scattered from rank 0 and gathered again);
 *    a stage-0 checkpoint resumes at stage 1 on 2 ranks to the bits of the stage-0 run;
 *  - one process with zero_stage 1 trains as stage 0 and says so;
 *  - zero_stage 4 is refused with a message naming the key, the value and what is allowed
 *    (stages 2 and 3 are tests/test-zero-shard.c's). */
#include "test-util.h"
#include "train-run.h"

/* GPT on the sample text; clipping at 0.5 is active (the norms are about 2). */
static const char *const gpt_sets[] = {
    "n_layer=2",          "n_head=2",           "n_embd=32",
    "seq_len=32",         "warmup_steps=1",     "eval_every=0",
    "sample_every=0",     "save_every=0",       "threads=1",
    "timeout_s=30",       "grad_clip=0.5",      "weight_decay=0.1",
    "learning_rate=3e-3", "bucket_cap_mb=0.02", NULL,
};

/* ResNet on the built-in glyphs, SGD with momentum and weight decay. */
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
    "momentum=0.9",
    "learning_rate=0.05",
    "weight_decay=0.0005",
    "warmup_steps=0",
    "grad_clip=0",
    "save_every=0",
    "eval_every=0",
    "threads=1",
    "timeout_s=30",
    NULL,
};

typedef struct {
  GArray *loss; /* per step */
  GPtrArray *events;
  GArray *weights; /* the export's tensors in file order */
  char *ws;
} Run;

static void run_clear(Run *r)
{
  g_clear_pointer(&r->loss, g_array_unref);
  g_clear_pointer(&r->events, g_ptr_array_unref);
  g_clear_pointer(&r->weights, g_array_unref);
  tu_rm_rf(r->ws);
  g_clear_pointer(&r->ws, g_free);
}

/* cohort-train with `nproc` ranks of `base` and `extra` in a new workspace, resuming from
 * `resume` when given; fails the test unless it exits 0. */
static Run train(int nproc, const char *const *base, const char *const *extra, const char *resume)
{
  Run r = {.ws = tu_mkdtemp("zero")};
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--quiet"));
  if (nproc > 1)
    g_ptr_array_add(args, g_strdup_printf("--nproc=%d", nproc));
  for (guint i = 0; base[i]; i++)
    g_ptr_array_add(args, g_strdup_printf("--set=%s", base[i]));
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(args, g_strdup_printf("--set=%s", extra[i]));
  g_ptr_array_add(args, g_strdup_printf("--set=workspace_dir=%s", r.ws));
  if (resume)
    g_ptr_array_add(args, g_strdup_printf("--resume=%s", resume));
  g_autofree char *events = g_build_filename(r.ws, "progress.jsonl", NULL);
  RunResult res = run_train(args, events);
  if (res.status != 0)
    g_error("cohort-train exited with %d: %s", res.status, res.err);
  run_result_clear(&res);
  r.events = tu_read_events(events);
  r.loss = tu_event_values(r.events, "step", "loss");
  g_autofree char *model = g_build_filename(r.ws, "model.safetensors", NULL);
  r.weights = tu_read_weights(model);
  return r;
}

/* The tensors (parameters, buffers, optimizer state) of a run's checkpoint at `step`. */
static GArray *checkpoint_tensors(const Run *r, int step)
{
  g_autofree char *name = g_strdup_printf("step-%08d", step);
  g_autofree char *path = g_build_filename(r->ws, "checkpoints", name, "model.safetensors", NULL);
  return tu_read_weights(path);
}

static gboolean same_floats(GArray *a, GArray *b, guint elt)
{
  return a->len == b->len && memcmp(a->data, b->data, (gsize)a->len * elt) == 0;
}

/* Stage 1 against stage 0 on `world` ranks: the same losses and weights, bit for bit. */
static void check_equal(int world, const char *const *base, const char *const *extra)
{
  g_autoptr(GPtrArray) sets = g_ptr_array_new();
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(sets, (gpointer)extra[i]);
  g_ptr_array_add(sets, "zero_stage=0");
  g_ptr_array_add(sets, NULL);
  Run s0 = train(world, base, (const char *const *)sets->pdata, NULL);
  g_ptr_array_index(sets, sets->len - 2) = "zero_stage=1";
  Run s1 = train(world, base, (const char *const *)sets->pdata, NULL);
  g_assert_cmpuint(s0.loss->len, >, 0);
  g_assert_true(same_floats(s1.loss, s0.loss, sizeof(double)));
  g_assert_true(same_floats(s1.weights, s0.weights, sizeof(float)));
  g_test_message("%d ranks: %u steps, losses and %u weights bit for bit equal", world, s0.loss->len,
                 s0.weights->len);
  /* And the run did train: the weights moved from the first step's. */
  Run one = train(world, base, (const char *const *)(const char *[]){"max_steps=1", NULL}, NULL);
  g_assert_cmpfloat(tu_max_rel_diff(one.weights, s0.weights, 1e-3), >, 1e-3);
  run_clear(&one);
  run_clear(&s0);
  run_clear(&s1);
}

static void test_gpt_2_ranks(void)
{
  check_equal(2, gpt_sets, (const char *[]){"max_steps=6", "batch_size=2", NULL});
}

/* 34688 parameters over 3 ranks: shards of 11562 and a tail of 2 that every rank keeps. */
static void test_gpt_3_ranks_accum(void)
{
  check_equal(
      3, gpt_sets,
      (const char *[]){"max_steps=5", "batch_size=2", "gradient_accumulation_steps=2", NULL});
}

static void test_resnet_sgd(void)
{
  check_equal(2, resnet_sets, (const char *[]){"max_steps=4", "batch_size=4", NULL});
}

/* optim_bytes of each rank in the run's first ranks event (whose memory figures must be
 * there too). */
static GArray *optim_bytes(const Run *r)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(gint64));
  for (guint i = 0; i < r->events->len && out->len == 0; i++) {
    JsonObject *o = g_ptr_array_index(r->events, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "ranks"))
      continue;
    JsonArray *ranks = json_object_get_array_member(o, "ranks");
    for (guint k = 0; k < json_array_get_length(ranks); k++) {
      JsonObject *rk = json_array_get_object_element(ranks, k);
      gint64 b = json_object_get_int_member(rk, "optim_bytes");
      g_assert_cmpint(json_object_get_int_member(rk, "mem_peak_bytes"), >=,
                      json_object_get_int_member(rk, "mem_bytes"));
      g_assert_cmpint(json_object_get_int_member(rk, "mem_bytes"), >, b);
      g_array_append_val(out, b);
    }
  }
  return out;
}

/* AdamW's two moments of 34688 parameters: 277504 bytes per rank at stage 0, 138752 at
 * stage 1 on 2 ranks (34688 is even: no tail). */
static void test_optim_bytes_halved(void)
{
  const char *s0[] = {"max_steps=10", "batch_size=2", "zero_stage=0", NULL};
  const char *s1[] = {"max_steps=10", "batch_size=2", "zero_stage=1", NULL};
  Run a = train(2, gpt_sets, s0, NULL);
  Run b = train(2, gpt_sets, s1, NULL);
  g_autoptr(GArray) full = optim_bytes(&a);
  g_autoptr(GArray) half = optim_bytes(&b);
  g_assert_cmpuint(full->len, ==, 2);
  g_assert_cmpuint(half->len, ==, 2);
  for (guint r = 0; r < 2; r++) {
    g_test_message("rank %u: optim_bytes %" G_GINT64_FORMAT " at stage 0, %" G_GINT64_FORMAT
                   " at stage 1",
                   r, g_array_index(full, gint64, r), g_array_index(half, gint64, r));
    g_assert_cmpint(g_array_index(full, gint64, r), ==, 2 * 34688 * 4);
    g_assert_cmpint(g_array_index(half, gint64, r) * 2, ==, g_array_index(full, gint64, r));
  }
  run_clear(&a);
  run_clear(&b);
}

/* Largest |a - b| over two loss series. */
static double loss_rel_diff(GArray *a, guint a_from, GArray *b, guint b_from, guint n)
{
  double worst = 0;
  for (guint i = 0; i < n; i++) {
    double x = g_array_index(a, double, a_from + i), y = g_array_index(b, double, b_from + i);
    worst = MAX(worst, fabs(x - y) / fabs(y));
  }
  return worst;
}

static double weights_max_abs(GArray *a, GArray *b)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0;
  for (guint i = 0; i < a->len; i++)
    worst =
        MAX(worst, fabs((double)g_array_index(a, float, i) - (double)g_array_index(b, float, i)));
  return worst;
}

enum { STEPS = 6, SAVED = 3, GLOBAL_BATCH = 6 };

/* Resumes `ckpt` on `world` ranks at `stage` (the same global batch). */
static Run resume_on(int world, int stage, const char *ckpt)
{
  g_autofree char *batch = g_strdup_printf("batch_size=%d", GLOBAL_BATCH / world);
  g_autofree char *zero = g_strdup_printf("zero_stage=%d", stage);
  g_autofree char *steps = g_strdup_printf("max_steps=%d", STEPS);
  return train(world, gpt_sets, (const char *[]){steps, batch, zero, "save_every=3", NULL}, ckpt);
}

static void test_checkpoint_world_sizes(void)
{
  g_autofree char *steps = g_strdup_printf("max_steps=%d", STEPS);
  g_autofree char *batch = g_strdup_printf("batch_size=%d", GLOBAL_BATCH / 2);
  const char *ref_sets[] = {steps, batch, "save_every=3", "keep_last=0", "zero_stage=1", NULL};
  Run ref = train(2, gpt_sets, ref_sets, NULL);
  const char *s0_sets[] = {steps, batch, "save_every=3", "keep_last=0", "zero_stage=0", NULL};
  Run ref0 = train(2, gpt_sets, s0_sets, NULL);
  g_assert_cmpuint(ref.loss->len, ==, STEPS);

  /* The saved state is stage 0's: the moments gathered whole, in the same order. */
  g_autoptr(GArray) c1 = checkpoint_tensors(&ref, SAVED);
  g_autoptr(GArray) c0 = checkpoint_tensors(&ref0, SAVED);
  g_assert_cmpuint(c1->len, ==, 3 * ref.weights->len); /* weights, m, v */
  g_assert_true(same_floats(c1, c0, sizeof(float)));

  g_autofree char *ckpt = g_build_filename(ref.ws, "checkpoints", "step-00000003", NULL);
  /* The same world size: the run that never stopped, bit for bit. */
  Run again = resume_on(2, 1, ckpt);
  g_assert_cmpuint(again.loss->len, ==, STEPS - SAVED);
  g_assert_true(memcmp(again.loss->data, &g_array_index(ref.loss, double, SAVED),
                       (STEPS - SAVED) * sizeof(double)) == 0);
  g_assert_true(same_floats(again.weights, ref.weights, sizeof(float)));
  run_clear(&again);
  /* A stage-0 checkpoint resumes at stage 1 (its state scattered) to the same bits. */
  g_autofree char *ckpt0 = g_build_filename(ref0.ws, "checkpoints", "step-00000003", NULL);
  Run cross = resume_on(2, 1, ckpt0);
  g_assert_true(same_floats(cross.weights, ref0.weights, sizeof(float)));
  run_clear(&cross);

  /* Other world sizes: the same global batch, sums in another order. AdamW divides by
   * sqrt(v), so a weight whose gradient is rounding noise moves by up to lr per step either
   * way: weights are bounded by a thousandth of lr times the steps (as tests/test-ddp.c). */
  const double tol_w = 1e-3 * 3e-3 * (STEPS - SAVED);
  Run at3[2];
  for (int world = 1; world <= 3; world += 2)
    for (int stage = 0; stage <= 1; stage++) {
      Run r = resume_on(world, stage, ckpt);
      g_assert_cmpuint(r.loss->len, ==, STEPS - SAVED);
      double dl = loss_rel_diff(r.loss, 0, ref.loss, SAVED, STEPS - SAVED);
      double dw = weights_max_abs(r.weights, ref.weights);
      g_test_message("resumed on %d rank%s at stage %d: losses within %.2g relative, weights "
                     "within %.2g (tolerance %.2g)",
                     world, world > 1 ? "s" : "", stage, dl, dw, tol_w);
      g_assert_cmpfloat(dl, <=, 1e-6);
      g_assert_cmpfloat(dw, <=, tol_w);
      if (world == 3)
        at3[stage] = r;
      else
        run_clear(&r);
    }
  /* On 3 ranks (a tail of 2 parameters) stage 1 scatters, trains and gathers to stage 0's
   * bits: the final weights, and the checkpoint's moments at the last step. */
  g_assert_true(same_floats(at3[1].loss, at3[0].loss, sizeof(double)));
  g_assert_true(same_floats(at3[1].weights, at3[0].weights, sizeof(float)));
  g_autoptr(GArray) e1 = checkpoint_tensors(&at3[1], STEPS);
  g_autoptr(GArray) e0 = checkpoint_tensors(&at3[0], STEPS);
  g_assert_true(same_floats(e1, e0, sizeof(float)));
  run_clear(&at3[0]);
  run_clear(&at3[1]);
  run_clear(&ref);
  run_clear(&ref0);
}

/* One process: nothing to shard; it trains as stage 0 (the same bits) and logs why. */
static void test_one_process(void)
{
  Run s0 = train(1, gpt_sets, (const char *[]){"max_steps=3", "zero_stage=0", NULL}, NULL);
  Run s1 = train(1, gpt_sets, (const char *[]){"max_steps=3", "zero_stage=1", NULL}, NULL);
  g_assert_true(same_floats(s1.weights, s0.weights, sizeof(float)));
  gboolean said = FALSE;
  for (guint i = 0; i < s1.events->len; i++) {
    JsonObject *o = g_ptr_array_index(s1.events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "log") &&
        strstr(json_object_get_string_member(o, "message"), "trains as stage 0"))
      said = TRUE;
  }
  g_assert_true(said);
  run_clear(&s0);
  run_clear(&s1);
}

static void test_bad_stage(void)
{
  g_autofree char *ws = tu_mkdtemp("zero-bad");
  g_autoptr(GPtrArray) args = small_args(ws, (const char *[]){"--set", "zero_stage=4", NULL});
  RunResult r = run_train(args, NULL);
  g_assert_cmpint(r.status, !=, 0);
  g_assert_nonnull(strstr(r.err, "\"zero_stage\": 4 is not allowed; allowed: 0 to 3"));
  g_assert_null(strstr(r.err, "\n\n"));
  run_result_clear(&r);
  /* Nothing was written. */
  g_autofree char *ckpts = g_build_filename(ws, "checkpoints", NULL);
  g_assert_false(g_file_test(ckpts, G_FILE_TEST_EXISTS));
  tu_rm_rf(ws);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/zero/gpt/2-ranks", test_gpt_2_ranks);
  g_test_add_func("/zero/gpt/3-ranks-accum", test_gpt_3_ranks_accum);
  g_test_add_func("/zero/resnet/sgd-2-ranks", test_resnet_sgd);
  g_test_add_func("/zero/optim-bytes-halved", test_optim_bytes_halved);
  g_test_add_func("/zero/checkpoint/world-sizes", test_checkpoint_world_sizes);
  g_test_add_func("/zero/one-process", test_one_process);
  g_test_add_func("/zero/bad-stage", test_bad_stage);
  return g_test_run();
}
