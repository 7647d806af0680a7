/* Data loading off the critical path (engine/train/prefetch.h): every micro-batch holds what its
 * position asks for, in order across epochs and after a jump, with several loader threads; an
 * artificially slow reader costs the consumer nearly nothing once the threads keep up (the
 * wait the trainer reports as data_s), where loading on the training thread costs all of it;
 * the queue is bounded; a failed load reaches the consumer; and cohort-train trains to the same
 * weights with num_workers 0 and 3, reporting data_s in its ranks events. */
#include <gio/gio.h>
#include <math.h>

#include "engine/config/config.h"
#include "engine/train/prefetch.h"
#include "test-util.h"
#include "train-run.h"

#define PER_EPOCH 5

typedef struct {
  gint64 load_us;      /* how long each load takes */
  gint64 fail_at;      /* position whose load fails, -1 = none */
  gint64 consumer_pos; /* what the consumer holds now */
  gint64 max_ahead;    /* the furthest a load ran ahead of it while `tracking` */
  gboolean tracking;
  GMutex lock;
  int loads;
} Reader;

static gboolean slow_load(gpointer data, CohortBatch *b, gint64 epoch, gint64 micro, GError **error)
{
  Reader *r = data;
  gint64 pos = epoch * PER_EPOCH + micro;
  g_mutex_lock(&r->lock);
  if (r->tracking)
    r->max_ahead = MAX(r->max_ahead, pos - r->consumer_pos);
  r->loads++;
  g_mutex_unlock(&r->lock);
  if (r->load_us > 0)
    g_usleep((gulong)r->load_us);
  if (pos == r->fail_at) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, "data changed at micro-batch %d", (int)pos);
    return FALSE;
  }
  b->epoch = epoch;
  b->inputs[0] = (int)epoch;
  b->inputs[1] = (int)micro;
  return TRUE;
}

static CohortBatch *new_batch(gpointer data)
{
  (void)data;
  return cohort_batch_new(1, 2, 0, 0, 0);
}

static CohortPrefetch *make(Reader *r, int workers, int batches)
{
  g_mutex_init(&r->lock);
  r->consumer_pos = 0;
  return cohort_prefetch_new(workers, batches, PER_EPOCH, slow_load, new_batch, cohort_batch_free,
                             r);
}

static void get_and_check(CohortPrefetch *p, Reader *r, gint64 epoch, gint64 micro, gint64 *waited)
{
  g_autoptr(GError) error = NULL;
  g_mutex_lock(&r->lock);
  r->consumer_pos = epoch * PER_EPOCH + micro;
  g_mutex_unlock(&r->lock);
  CohortBatch *b = cohort_prefetch_get(p, epoch, micro, waited, &error);
  g_assert_no_error(error);
  g_assert_cmpint(b->inputs[0], ==, epoch);
  g_assert_cmpint(b->inputs[1], ==, micro);
  g_assert_cmpint(b->epoch, ==, epoch);
}

static void test_order(void)
{
  for (int workers = 1; workers <= 3; workers++) {
    Reader r = {.load_us = 300, .fail_at = -1, .tracking = TRUE};
    CohortPrefetch *p = make(&r, workers, 2 * workers + 1);
    /* Three epochs in order, then a jump (a resumed run), then on from there. */
    for (gint64 e = 0; e < 3; e++)
      for (gint64 m = 0; m < PER_EPOCH; m++)
        get_and_check(p, &r, e, m, NULL);
    /* Loads of the order the jumps leave are dropped, not bounded by the new position. */
    g_mutex_lock(&r.lock);
    r.tracking = FALSE;
    g_mutex_unlock(&r.lock);
    get_and_check(p, &r, 7, 3, NULL);
    get_and_check(p, &r, 7, 4, NULL);
    get_and_check(p, &r, 8, 0, NULL);
    get_and_check(p, &r, 1, 1, NULL);
    cohort_prefetch_free(p);
    /* Bounded: never more than the batches it has ahead of what the consumer holds. */
    g_test_message("%d workers: %d loads, at most %" G_GINT64_FORMAT " ahead", workers, r.loads,
                   r.max_ahead);
    g_assert_cmpint(r.max_ahead, <=, 2 * workers + 1);
    g_mutex_clear(&r.lock);
  }
}

/* The consumer's waits over `n` batches that each take `compute_us` to use. */
static gint64 waits(CohortPrefetch *p, Reader *r, int n, gint64 compute_us, gint64 *first)
{
  gint64 total = 0;
  for (int i = 0; i < n; i++) {
    gint64 w = 0;
    get_and_check(p, r, i / PER_EPOCH, i % PER_EPOCH, &w);
    if (i == 0)
      *first = w;
    else
      total += w;
    g_usleep((gulong)compute_us);
  }
  return total;
}

/* A reader of 20 ms a batch behind steps of 30 ms: after the first batch the loader thread
 * keeps ahead and the steps wait for (nearly) nothing; loading on the step's thread would cost
 * 20 ms each. A reader of 40 ms needs two threads to keep up with 30 ms steps. */
static void test_slow_reader(void)
{
  const int n = 12;
  Reader r1 = {.load_us = 20000, .fail_at = -1};
  CohortPrefetch *p1 = make(&r1, 1, 3);
  gint64 first = 0;
  gint64 w1 = waits(p1, &r1, n, 30000, &first);
  cohort_prefetch_free(p1);
  gint64 sync = (n - 1) * r1.load_us;
  g_test_message("20 ms reader, 1 thread: first batch %.1f ms, then %.1f ms of waiting in all "
                 "(%.1f ms on the training thread)",
                 first / 1e3, w1 / 1e3, sync / 1e3);
  g_assert_cmpint(first, >=, r1.load_us / 2);
  g_assert_cmpint(w1, <, sync / 5);

  Reader r2 = {.load_us = 40000, .fail_at = -1};
  CohortPrefetch *one = make(&r2, 1, 3);
  gint64 w_one = waits(one, &r2, n, 30000, &first);
  cohort_prefetch_free(one);
  Reader r3 = {.load_us = 40000, .fail_at = -1};
  CohortPrefetch *two = make(&r3, 2, 5);
  gint64 w_two = waits(two, &r3, n, 30000, &first);
  cohort_prefetch_free(two);
  g_test_message("40 ms reader: 1 thread waits %.1f ms, 2 threads %.1f ms", w_one / 1e3,
                 w_two / 1e3);
  /* One thread falls 10 ms behind per step; two keep up. */
  g_assert_cmpint(w_one, >, (n - 1) * 10000 / 2);
  g_assert_cmpint(w_two, <, w_one / 4);
  g_mutex_clear(&r1.lock);
  g_mutex_clear(&r2.lock);
  g_mutex_clear(&r3.lock);
}

static void test_failure(void)
{
  Reader r = {.load_us = 100, .fail_at = 3};
  CohortPrefetch *p = make(&r, 2, 5);
  for (int m = 0; m < 3; m++)
    get_and_check(p, &r, 0, m, NULL);
  g_autoptr(GError) error = NULL;
  g_assert_null(cohort_prefetch_get(p, 0, 3, NULL, &error));
  g_assert_error(error, G_IO_ERROR, G_IO_ERROR_FAILED);
  g_assert_cmpstr(error->message, ==, "data changed at micro-batch 3");
  /* Another position still loads. */
  get_and_check(p, &r, 2, 0, NULL);
  /* Freed with loads under way: the threads finish theirs and stop. */
  r.load_us = 50000;
  get_and_check(p, &r, 2, 1, NULL);
  cohort_prefetch_free(p);
  g_mutex_clear(&r.lock);
}

/* cohort-train loads on loader threads to the same numbers as on its own thread, across epochs
 * and accumulation, and reports data_s. */
static GArray *train(const char *workers, const char *name, GPtrArray **events)
{
  g_autofree char *ws = tu_mkdtemp(name);
  g_autofree char *progress = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func(g_free);
  const char *sets[] = {"n_layer=1",
                        "n_head=2",
                        "n_embd=32",
                        "seq_len=256",
                        "batch_size=16",
                        "gradient_accumulation_steps=2",
                        "max_steps=0",
                        "epochs=2",
                        "eval_every=0",
                        "sample_every=0",
                        "threads=1",
                        "warmup_steps=1",
                        "enable_multi_gpu=true",
                        "nproc_per_node=2",
                        "use_torchrun=false",
                        workers,
                        NULL};
  for (guint i = 0; sets[i]; i++) {
    g_ptr_array_add(args, g_strdup("--set"));
    g_ptr_array_add(args, g_strdup(sets[i]));
  }
  g_ptr_array_add(args, g_strdup("--quiet"));
  g_ptr_array_add(args, g_strdup("--set"));
  g_ptr_array_add(args, g_strdup_printf("workspace_dir=%s", ws));
  RunResult r = run_train(args, progress);
  if (r.status != 0)
    g_error("cohort-train exited %d: %s", r.status, r.err);
  run_result_clear(&r);
  *events = tu_read_events(progress);
  g_autofree char *model = g_build_filename(ws, "model.safetensors", NULL);
  GArray *w = tu_read_weights(model);
  tu_rm_rf(ws);
  return w;
}

static void test_trainer_same(void)
{
  g_autoptr(GPtrArray) e0 = NULL, e3 = NULL;
  g_autoptr(GArray) w0 = train("num_workers=0", "prefetch-0", &e0);
  g_autoptr(GArray) w3 = train("num_workers=3", "prefetch-3", &e3);
  g_assert_cmpuint(w0->len, ==, w3->len);
  g_assert_cmpint(memcmp(w0->data, w3->data, w0->len * sizeof(float)), ==, 0);
  g_autoptr(GArray) workers = tu_event_values(e3, "start", "num_workers");
  g_assert_cmpfloat(g_array_index(workers, double, 0), ==, 3);
  /* Two epochs, so the threads crossed into the next one. */
  g_autoptr(GArray) steps = tu_event_values(e3, "step", "epoch");
  gboolean second = FALSE;
  for (guint i = 0; i < steps->len; i++)
    second |= g_array_index(steps, double, i) == 1;
  g_assert_true(second);
  /* Every ranks event has each rank's data_s. */
  guint ranks = 0;
  for (guint i = 0; i < e3->len; i++) {
    JsonObject *o = g_ptr_array_index(e3, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "ranks"))
      continue;
    JsonArray *a = json_object_get_array_member(o, "ranks");
    g_assert_cmpuint(json_array_get_length(a), ==, 2);
    for (guint k = 0; k < 2; k++)
      g_assert_true(json_object_has_member(json_array_get_object_element(a, k), "data_s"));
    ranks++;
  }
  g_assert_cmpuint(ranks, >, 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/prefetch/order", test_order);
  g_test_add_func("/prefetch/slow-reader", test_slow_reader);
  g_test_add_func("/prefetch/failure", test_failure);
  g_test_add_func("/prefetch/trainer-same", test_trainer_same);
  return g_test_run();
}
