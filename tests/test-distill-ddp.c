/* Distillation under data parallelism (suite dist, loopback only): every rank runs the teacher
 * on its own micro-batch, and N ranks with per-process batch b end with the weights of one
 * process with batch N·b, for a GPT (KL to the teacher's logits), a DiT (the teacher's
 * guided velocity, with label dropout) and a ResNet (KL to the logits of a teacher in
 * evaluation mode, the student's BatchNorm synchronised: without sync_batchnorm each rank
 * normalises its own batch, and N ranks differ from one process by design). The `ranks` event
 * reports each rank's teacher memory, the figure the start event gives. Tolerance as in
 * tests/test-ddp.c: a thousandth of the distance AdamW can move a weight in the run (lr · steps).
 */
#include "test-util.h"
#include "train-run.h"

static char *root;
static char *gpt_teacher, *dit_teacher, *resnet_teacher;

static const char *const gpt_sets[] = {
    "n_layer=1",
    "n_head=2",
    "n_embd=32",
    "seq_len=32",
    "warmup_steps=1",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=60",
    "distill_alpha=0.6",
    "distill_temperature=2",
    NULL,
};

static const char *const dit_sets[] = {
    "model=dit",         "data_format=images",  "train_data=builtin:glyphs/train",
    "val_data=",         "image_size=16",       "patch_size=4",
    "n_layer=1",         "n_embd=16",           "n_head=2",
    "warmup_steps=1",    "eval_every=0",        "sample_every=0",
    "save_every=0",      "threads=1",           "timeout_s=60",
    "distill_alpha=0.7", "distill_cfg_scale=2", NULL,
};

static const char *const resnet_sets[] = {
    "model=resnet",
    "data_format=images",
    "train_data=builtin:glyphs/train",
    "val_data=",
    "image_size=16",
    "n_layer=8",
    "resnet_width=4",
    "augment=crop",
    "sync_batchnorm=true",
    "warmup_steps=1",
    "eval_every=0",
    "sample_every=0",
    "save_every=0",
    "threads=1",
    "timeout_s=60",
    "distill_alpha=0.6",
    "distill_temperature=2",
    NULL,
};

static RunResult train(int nproc, const char *ws, const char *const *base, const char *const *extra,
                       const char *events)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(args, g_strdup("--quiet"));
  if (nproc > 1)
    g_ptr_array_add(args, g_strdup_printf("--nproc=%d", nproc));
  for (int k = 0; k < 2; k++)
    for (const char *const *s = k ? extra : base; s && *s; s++) {
      g_ptr_array_add(args, g_strdup("--set"));
      g_ptr_array_add(args, g_strdup(*s));
    }
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  RunResult r = run_train(args, events);
  if (r.status != 0)
    g_test_message("exit %d: %s", r.status, r.err);
  return r;
}

static GArray *weights_of(int nproc, const char *const *base, const char *const *extra,
                          const char *name)
{
  g_autofree char *ws = g_build_filename(root, name, NULL);
  RunResult r = train(nproc, ws, base, extra, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  GArray *w = tu_read_weights(path);
  tu_rm_rf(ws);
  return w;
}

static double max_abs_diff(GArray *a, GArray *b)
{
  g_assert_cmpuint(a->len, ==, b->len);
  double worst = 0;
  for (guint i = 0; i < a->len; i++)
    worst = MAX(worst, fabs((double)g_array_index(a, float, i) - g_array_index(b, float, i)));
  return worst;
}

/* `split`: NULL (every rank `batch`), or rank_batch_sizes summing to 2 × batch. */
static void check_split(const char *const *base, const char *teacher, int batch, const char *split)
{
  const int steps = 6;
  const double lr = 1e-3;
  g_autofree char *t = g_strdup_printf("teacher_from=%s", teacher);
  g_autofree char *b2 = g_strdup_printf("batch_size=%d", batch);
  g_autofree char *b1 = g_strdup_printf("batch_size=%d", 2 * batch);
  g_autofree char *s = g_strdup_printf("max_steps=%d", steps);
  g_autofree char *shares = split ? g_strdup_printf("rank_batch_sizes=%s", split) : NULL;
  const char *two[] = {t, b2, s, "learning_rate=0.001", "bucket_cap_mb=0.05", shares, NULL};
  const char *one[] = {t, b1, s, "learning_rate=0.001", NULL};
  g_autoptr(GArray) w2 = weights_of(2, base, two, "two-ranks");
  g_autoptr(GArray) w1 = weights_of(1, base, one, "one-process");
  double diff = max_abs_diff(w2, w1), tol = 1e-3 * lr * steps;
  g_test_message("2 ranks × batch %s vs 1 × %d: max |Δw| = %.3g (tolerance %.3g)",
                 split ? split : b2, 2 * batch, diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* the runs did train: far from the weights after one step */
  const char *first[] = {t, b1, "max_steps=1", "learning_rate=0.001", NULL};
  g_autoptr(GArray) w0 = weights_of(1, base, first, "one-step");
  g_assert_cmpfloat(max_abs_diff(w0, w1), >, 100 * tol);
}

static void check_equivalence(const char *const *base, const char *teacher, int batch)
{
  check_split(base, teacher, batch, NULL);
}

/* rank_batch_sizes: the teacher's term, like the task's, weighted by examples. */
static void test_gpt_uneven(void)
{
  check_split(gpt_sets, gpt_teacher, 4, "6,2");
}

static void test_resnet_uneven(void)
{
  check_split(resnet_sets, resnet_teacher, 4, "3,5");
}

static void test_gpt_equivalence(void)
{
  check_equivalence(gpt_sets, gpt_teacher, 4);
}

static void test_dit_equivalence(void)
{
  check_equivalence(dit_sets, dit_teacher, 4);
}

static void test_resnet_equivalence(void)
{
  check_equivalence(resnet_sets, resnet_teacher, 4);
}

static void test_ranks_report_teacher(void)
{
  g_autofree char *ws = g_build_filename(root, "ranks", NULL);
  g_autofree char *events = g_build_filename(root, "ranks.jsonl", NULL);
  g_autofree char *t = g_strdup_printf("teacher_from=%s", gpt_teacher);
  const char *extra[] = {t, "batch_size=2", "max_steps=10", NULL};
  RunResult r = train(2, ws, gpt_sets, extra, events);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  gint64 bytes = -1;
  guint reports = 0;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    const char *name = json_object_get_string_member(o, "event");
    if (g_str_equal(name, "start"))
      bytes = json_object_get_int_member(json_object_get_object_member(o, "teacher"), "bytes");
    if (!g_str_equal(name, "ranks"))
      continue;
    JsonArray *ranks = json_object_get_array_member(o, "ranks");
    g_assert_cmpuint(json_array_get_length(ranks), ==, 2);
    for (guint k = 0; k < 2; k++)
      g_assert_cmpint(
          json_object_get_int_member(json_array_get_object_element(ranks, k), "teacher_bytes"), ==,
          bytes);
    reports++;
  }
  g_assert_cmpint(bytes, >, 0);
  g_assert_cmpuint(reports, >=, 1);
  tu_rm_rf(ws);
}

static char *train_teacher(const char *name, const char *const *base, const char *const *extra)
{
  char *ws = g_build_filename(root, name, NULL);
  RunResult r = train(1, ws, base, extra, NULL);
  g_assert_cmpint(r.status, ==, 0);
  run_result_clear(&r);
  return ws;
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  root = tu_mkdtemp("distill-ddp");
  gpt_teacher = train_teacher("gpt-teacher", gpt_sets,
                              (const char *[]){"n_layer=2", "batch_size=4", "max_steps=30", NULL});
  dit_teacher = train_teacher(
      "dit-teacher", dit_sets,
      (const char *[]){"n_layer=2", "n_embd=32", "batch_size=8", "max_steps=20", NULL});
  resnet_teacher =
      train_teacher("resnet-teacher", resnet_sets,
                    (const char *[]){"n_layer=14", "resnet_width=8", "batch_size=8",
                                     "optimizer=sgd", "learning_rate=0.05", "max_steps=10", NULL});
  g_test_add_func("/distill-ddp/gpt-2-ranks-equal-1", test_gpt_equivalence);
  g_test_add_func("/distill-ddp/dit-2-ranks-equal-1", test_dit_equivalence);
  g_test_add_func("/distill-ddp/resnet-2-ranks-equal-1", test_resnet_equivalence);
  g_test_add_func("/distill-ddp/ranks-report-teacher", test_ranks_report_teacher);
  g_test_add_func("/distill-ddp/gpt-uneven-split", test_gpt_uneven);
  g_test_add_func("/distill-ddp/resnet-uneven-split", test_resnet_uneven);
  int status = g_test_run();
  tu_rm_rf(root);
  g_free(root), g_free(gpt_teacher), g_free(dit_teacher), g_free(resnet_teacher);
  return status;
}
