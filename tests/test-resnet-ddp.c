/* The resnet family trained data-parallel end to end (suite dist, loopback only), on the
 * built-in glyphs at 16×16 with crop-and-flip augmentation, SGD with momentum:
 *  - SyncBatchNorm is global BatchNorm: 2 and 3 ranks with sync_batchnorm give one process's
 *    per-step losses, gradient norms, weights and running statistics on the combined batch;
 *    the same runs without it differ measurably (the test asserts both); so do 2 ranks with
 *    gradient accumulation (each micro-batch normalised over all ranks' k-th micro-batches
 *    together) against one process with twice the micro-batch; the ranks event
 *    reports each rank's time in SyncBatchNorm's collectives;
 *  - without SyncBatchNorm the engine does what PyTorch DDP over Gloo does with 2 processes
 *    (tests/torch_resnet_ddp.py on the same initial weights and the same per-rank batches):
 *    the same per-step losses and rank 0's final running statistics and weights, which
 *    broadcast_buffers (rank 0's buffers to all before each forward) decides; with
 *    broadcast_buffers false the running statistics no longer match.
 * The PyTorch comparison skips without torch. */
#include "data/sampler.h"
#include "engine/models/registry.h"
#include "engine/model/model-io.h"
#include "engine/models/resnet.h"
#include "engine/model/data-source.h"
#include "kernels/backend.h"
#include "test-util.h"
#include "train-run.h"

/* Few steps: a ReLU input that rounding puts on the other side of 0 in one of two runs makes
 * their gradients differ by ~1e-5 from then on; in these runs that first happens at step 7. */
enum { STEPS = 6 };

static const char *const base_sets[] = {
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
    "threads=1",
    "timeout_s=60",
    "bucket_cap_mb=0.01",
    NULL,
};

typedef struct {
  GArray *loss, *norm;         /* per step */
  GArray *val_loss, *accuracy; /* per evaluation */
  GPtrArray *events;
  char *model; /* the export */
  char *ws;
} Run;

/* Frees what a run read, keeping its workspace. */
static void run_clear_results(Run *r)
{
  g_clear_pointer(&r->loss, g_array_unref);
  g_clear_pointer(&r->norm, g_array_unref);
  g_clear_pointer(&r->val_loss, g_array_unref);
  g_clear_pointer(&r->accuracy, g_array_unref);
  g_clear_pointer(&r->events, g_ptr_array_unref);
  g_clear_pointer(&r->model, g_free);
}

static void run_clear(Run *r)
{
  run_clear_results(r);
  tu_rm_rf(r->ws);
  g_clear_pointer(&r->ws, g_free);
}

/* cohort-train with `nproc` ranks (spawn mode) of the base config and `extra`, `steps`
 * steps, in workspace `ws` (NULL: a new one) with `resume` (NULL: a fresh run). */
static Run train_in(int nproc, const char *const *extra, int steps, const char *ws,
                    const char *resume)
{
  Run r = {.ws = ws ? g_strdup(ws) : tu_mkdtemp("resnet-ddp")};
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--quiet"));
  if (nproc > 1)
    g_ptr_array_add(args, g_strdup_printf("--nproc=%d", nproc));
  for (guint i = 0; base_sets[i]; i++)
    g_ptr_array_add(args, g_strdup_printf("--set=%s", base_sets[i]));
  for (guint i = 0; extra && extra[i]; i++)
    g_ptr_array_add(args, g_strdup_printf("--set=%s", extra[i]));
  g_ptr_array_add(args, g_strdup_printf("--set=workspace_dir=%s", r.ws));
  g_ptr_array_add(args, g_strdup_printf("--set=max_steps=%d", steps));
  if (resume)
    g_ptr_array_add(args, g_strdup_printf("--resume=%s", resume));
  g_autofree char *events = g_build_filename(r.ws, "progress.jsonl", NULL);
  RunResult res = run_train(args, events);
  if (res.status != 0)
    g_error("cohort-train exited with %d: %s", res.status, res.err);
  run_result_clear(&res);
  GPtrArray *ev = r.events = tu_read_events(events);
  r.loss = tu_event_values(ev, "step", "loss");
  r.norm = tu_event_values(ev, "step", "grad_norm");
  r.val_loss = tu_event_values(ev, "eval", "val_loss");
  r.accuracy = tu_event_values(ev, "eval", "accuracy");
  g_assert_cmpuint(r.loss->len, <=, (guint)steps);
  r.model = g_build_filename(r.ws, "model.safetensors", NULL);
  return r;
}

static Run train_steps(int nproc, const char *const *extra, int steps)
{
  Run r = train_in(nproc, extra, steps, NULL, NULL);
  g_assert_cmpuint(r.loss->len, ==, (guint)steps);
  return r;
}

static Run train(int nproc, const char *const *extra)
{
  return train_steps(nproc, extra, STEPS);
}

static double rel_series(GArray *a, GArray *b)
{
  double worst = 0;
  for (guint i = 0; i < a->len; i++) {
    double x = g_array_index(a, double, i), y = g_array_index(b, double, i);
    worst = fmax(worst, fabs(x - y) / fabs(y));
  }
  return worst;
}

/* Worst difference over the tensors of two files, each relative to the largest value of its
 * tensor in `ref`; *stats_out gets the worst over the running statistics alone. */
static double compare_files(const char *path, const char *ref_path, double *stats_out)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortStFile) f = cohort_safetensors_open(path, &error);
  g_autoptr(CohortStFile) ref = cohort_safetensors_open(ref_path, &error);
  g_assert_no_error(error);
  double worst = 0, stats = 0;
  for (const char *const *name = cohort_safetensors_names(ref); *name; name++) {
    int64_t shape[8];
    int nd = cohort_safetensors_shape(ref, *name, shape);
    size_t n = 1;
    for (int d = 0; d < nd; d++)
      n *= (size_t)shape[d];
    g_autofree float *a = g_new(float, n), *b = g_new(float, n);
    g_assert_true(cohort_safetensors_read_f32(f, *name, nd, shape, a, &error));
    g_assert_true(cohort_safetensors_read_f32(ref, *name, nd, shape, b, &error));
    double mx = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
      mx = fmax(mx, fabs(b[i]));
      e = fmax(e, fabs((double)a[i] - b[i]));
    }
    double rel = mx > 0 ? e / mx : e;
    worst = fmax(worst, rel);
    if (g_str_has_suffix(*name, "running_mean") || g_str_has_suffix(*name, "running_var"))
      stats = fmax(stats, rel);
  }
  if (stats_out)
    *stats_out = stats;
  return worst;
}

/* The ranks event (every ten steps) has each rank's SyncBatchNorm time, above 0, exactly when
 * SyncBatchNorm is on. */
static void check_syncbn_time(int world, gboolean sync)
{
  Run run = train_steps(
      world,
      (const char *[]){"batch_size=4", sync ? "sync_batchnorm=true" : "sync_batchnorm=false", NULL},
      10);
  const Run *r = &run;
  guint seen = 0;
  for (guint i = 0; i < r->events->len; i++) {
    JsonObject *o = g_ptr_array_index(r->events, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "ranks"))
      continue;
    JsonArray *ranks = json_object_get_array_member(o, "ranks");
    g_assert_cmpuint(json_array_get_length(ranks), ==, world);
    for (guint k = 0; k < json_array_get_length(ranks); k++) {
      JsonObject *rk = json_array_get_object_element(ranks, k);
      g_assert_cmpint(json_object_has_member(rk, "syncbn_s"), ==, sync);
      if (sync)
        g_assert_cmpfloat(json_object_get_double_member(rk, "syncbn_s"), >, 0);
    }
    seen++;
  }
  g_assert_cmpuint(seen, ==, 1);
  run_clear(&run);
}

static void test_syncbn_time(void)
{
  check_syncbn_time(2, TRUE);
  check_syncbn_time(2, FALSE);
}

/* `world` ranks × batch `per_rank` against 1 × world·per_rank, with and without SyncBN, the
 * base config with `model` (a variant's keys; NULL: the base's CIFAR ResNet-8), `steps` steps;
 * with SyncBN within `tol`. */
static void check_syncbn_of(int world, int per_rank, const char *const *model, int steps,
                            double tol)
{
  g_autofree char *bn = g_strdup_printf("batch_size=%d", per_rank);
  g_autofree char *b1 = g_strdup_printf("batch_size=%d", per_rank * world);
  const char *sets[3][8] = {{b1}, {bn, "sync_batchnorm=true"}, {bn, "sync_batchnorm=false"}};
  for (int k = 0; k < 3; k++)
    for (int i = 0, j = k ? 2 : 1; model && model[i]; i++, j++)
      sets[k][j] = model[i];
  Run one = train_steps(1, sets[0], steps);
  Run sync = train_steps(world, sets[1], steps);
  Run local = train_steps(world, sets[2], steps);
  double stats_sync, stats_local;
  double d_loss = rel_series(sync.loss, one.loss), d_norm = rel_series(sync.norm, one.norm);
  double d_w = compare_files(sync.model, one.model, &stats_sync);
  g_test_message("%d × %d with SyncBN vs 1 × %d: losses %.2e, gradient norms %.2e, weights and "
                 "buffers %.2e, running statistics %.2e (relative)",
                 world, per_rank, world * per_rank, d_loss, d_norm, d_w, stats_sync);
  g_assert_cmpfloat(d_loss, <=, tol);
  g_assert_cmpfloat(d_norm, <=, tol);
  g_assert_cmpfloat(d_w, <=, tol);
  double l_loss = rel_series(local.loss, one.loss), l_norm = rel_series(local.norm, one.norm);
  double l_w = compare_files(local.model, one.model, &stats_local);
  g_test_message("%d × %d without SyncBN vs 1 × %d: losses %.2e, gradient norms %.2e, weights "
                 "and buffers %.2e, running statistics %.2e",
                 world, per_rank, world * per_rank, l_loss, l_norm, l_w, stats_local);
  g_assert_cmpfloat(l_loss, >, 1e-3);
  g_assert_cmpfloat(l_norm, >, 1e-3);
  g_assert_cmpfloat(stats_local, >, 1e-2);
  run_clear(&one);
  run_clear(&sync);
  run_clear(&local);
}

/* One step (forward with the global batch's statistics, backward, the all-reduce, the
 * update) within 1e-5; measured 7e-7 for 2 ranks, 8e-7 for 3. Over 6 steps the weights drift
 * to 4.5e-4 apart: oneDNN's convolutions choose their blocking and reduction order by batch
 * size, so a batch of 4 and one of 8 round differently from the first step, and training
 * amplifies that (the losses stay within 1.3e-7). With the earlier im2col convolutions, whose
 * arithmetic per image did not depend on the batch, 6 steps stayed within 5e-7. */
static void test_syncbn_2(void)
{
  check_syncbn_of(2, 4, NULL, 1, 1e-5);
}

static void test_syncbn_3(void)
{
  check_syncbn_of(3, 2, NULL, 1, 1e-5);
}

/* torchvision's resnet18 (max-pooling, four stages, 11 million parameters) on RGB glyphs of
 * 32×32: 2 ranks × 4 with SyncBN equal 1 × 8 over a step (forward with the global batch's
 * statistics, backward, the all-reduce, the update): 1e-5 measured, 1e-4 asked as of the
 * comparisons with torchvision. One step: its last stage normalises 8 values per channel, and
 * from the second step on the two runs' float32 rounding, amplified there and at ReLU kinks
 * (tests/test-resnet-tv.c), grows to 1e-3 and more. */
static void test_syncbn_resnet18(void)
{
  const char *const model[] = {"resnet_variant=resnet18", "image_size=32", "image_channels=3",
                               NULL};
  check_syncbn_of(2, 4, model, 1, 1e-4);
}

/* With gradient accumulation each micro-batch is normalised over the global micro-batch (all
 * ranks' k-th micro-batches together, as torch.nn.SyncBatchNorm does per forward): 2 ranks ×
 * 4 × 2 micro-batches with SyncBN give what one process gives with micro-batches of 8. */
static void test_syncbn_accum(void)
{
  Run one = train(1, (const char *[]){"batch_size=8", "gradient_accumulation_steps=2", NULL});
  Run sync = train(2, (const char *[]){"batch_size=4", "gradient_accumulation_steps=2",
                                       "sync_batchnorm=true", NULL});
  double stats;
  double d_loss = rel_series(sync.loss, one.loss), d_norm = rel_series(sync.norm, one.norm);
  double d_w = compare_files(sync.model, one.model, &stats);
  g_test_message("2 × 4 × accumulation 2 with SyncBN vs 1 × 8 × 2: losses %.2e, gradient norms "
                 "%.2e, weights and buffers %.2e, running statistics %.2e",
                 d_loss, d_norm, d_w, stats);
  g_assert_cmpfloat(d_loss, <=, 1e-5);
  g_assert_cmpfloat(d_norm, <=, 1e-5);
  g_assert_cmpfloat(d_w, <=, 1e-5);
  /* and per-rank statistics would not (so the comparison can fail) */
  Run local = train(2, (const char *[]){"batch_size=4", "gradient_accumulation_steps=2",
                                        "sync_batchnorm=false", NULL});
  g_assert_cmpfloat(rel_series(local.loss, one.loss), >, 1e-3);
  run_clear(&one);
  run_clear(&sync);
  run_clear(&local);
}

/* Checkpoints hold what the next steps need (the running statistics and counters, the SGD
 * momentum buffers): 2 ranks with SyncBN stopped after 3 steps and resumed to 6 end with the
 * weights and buffers of a run that never stopped. */
static void test_resume(void)
{
  const char *extra[] = {"batch_size=4", "sync_batchnorm=true", "save_every=3", NULL};
  Run whole = train(2, extra);
  Run first = train_in(2, extra, 3, NULL, NULL);
  run_clear_results(&first);
  Run rest = train_in(2, extra, STEPS, first.ws, "auto");
  g_assert_cmpuint(rest.loss->len, ==, STEPS - 3);
  double stats;
  double d = compare_files(rest.model, whole.model, &stats);
  g_test_message("resumed at step 3 vs uninterrupted: weights and buffers %.2e (relative)", d);
  g_assert_cmpfloat(d, ==, 0);
  run_clear(&whole);
  run_clear(&rest);
  g_free(first.ws);
}

#include "test-resnet-ddp-torch.h"

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/resnet-ddp/syncbn-2-ranks", test_syncbn_2);
  g_test_add_func("/resnet-ddp/syncbn-3-ranks", test_syncbn_3);
  g_test_add_func("/resnet-ddp/syncbn-2-ranks-resnet18", test_syncbn_resnet18);
  g_test_add_func("/resnet-ddp/syncbn-accumulation", test_syncbn_accum);
  g_test_add_func("/resnet-ddp/syncbn-time-in-ranks-event", test_syncbn_time);
  g_test_add_func("/resnet-ddp/resume", test_resume);
  g_test_add_func("/resnet-ddp/against-torch-ddp", test_against_torch_ddp);
  return g_test_run();
}
