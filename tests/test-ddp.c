/* Data-parallel training end to end (suite dist, loopback only):
 *  - N ranks with per-process batch b compute what one rank computes with batch N·b;
 *  - a dead rank makes the others fail with a clear error within timeout_s;
 *  - cohort-run --max-restarts 1 finishes a run whose rank died, from the checkpoint, with
 *    the weights of a run that never failed;
 *  - SIGTERM to the launcher leaves no process behind;
 *  - ranks with different configs, and a taken port, stop with messages that say so;
 *  - the engine under real torchrun and Open MPI's mpirun computes what it computes under
 *    cohort-run (skipped where those are not installed). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gio/gio.h>

#include "engine/distributed/store.h"
#include "test-util.h"

/* Small and quick, on the sample text. */
static const char *const base_sets[] = {
    "n_layer=2",      "n_head=2",     "n_embd=32",    "seq_len=32",
    "warmup_steps=1", "eval_every=0", "eval_steps=2", "sample_every=0",
    "save_every=0",   "threads=1",    "timeout_s=20", NULL,
};
#define DDP_BASE_SETS base_sets
#include "ddp-run.h"

typedef struct {
  int world;
  int batch; /* per process */
  int accum;
  gboolean drop_last;
} EquivCase;

/* Tolerance: the ranks average per-rank mean gradients, one rank takes one mean, so sums run
 * in another order and agree to float32 rounding (~1e-7 relative). AdamW divides by
 * sqrt(v): a weight whose exact gradient is 0 but whose computed one is rounding noise (the
 * attention key bias: softmax ignores a shift of all scores) still moves by up to lr per step
 * in a direction the rounding picks. So we bound the absolute difference by a thousandth of
 * the largest distance AdamW can move a weight in K steps (lr · K); a real error in the
 * reduction (a missing bucket, a wrong scale, a skipped rank) moves weights by O(lr · K). */
static void check_equivalence(const EquivCase *c)
{
  const int steps = 6;
  const double lr = 1e-3;
  g_autofree char *s_steps = g_strdup_printf("max_steps=%d", steps);
  g_autofree char *s_accum = g_strdup_printf("gradient_accumulation_steps=%d", c->accum);
  g_autofree char *s_drop = g_strdup_printf("drop_last=%s", c->drop_last ? "true" : "false");
  g_autofree char *s_lr = g_strdup_printf("learning_rate=%g", lr);
  g_autofree char *s_bn = g_strdup_printf("batch_size=%d", c->batch);
  g_autofree char *s_b1 = g_strdup_printf("batch_size=%d", c->batch * c->world);
  /* Small buckets, so several all-reduces overlap backward. */
  const char *multi[] = {s_steps, s_accum, s_drop, s_lr, s_bn, "bucket_cap_mb=0.05", NULL};
  const char *single[] = {s_steps, s_accum, s_drop, s_lr, s_b1, NULL};
  g_autoptr(GArray) wn = train_weights(c->world, multi, "ddp-n");
  g_autoptr(GArray) w1 = train_weights(1, single, "ddp-1");
  double diff = max_abs_diff(wn, w1);
  double tol = 1e-3 * lr * steps;
  g_test_message("%d ranks × batch %d (accum %d, drop_last %d) vs 1 × %d: max |Δw| = %.3g "
                 "(tolerance %.3g)",
                 c->world, c->batch, c->accum, c->drop_last, c->batch * c->world, diff, tol);
  g_assert_cmpfloat(diff, <=, tol);
  /* And the runs did train: weights moved far more than the tolerance. */
  g_autoptr(GArray) w0 = train_weights(1, (const char *[]){"max_steps=1", s_b1, NULL}, "ddp-0");
  g_assert_cmpfloat(max_abs_diff(w0, w1), >, 100 * tol);
}

static void test_equiv_2(void)
{
  check_equivalence(&(EquivCase){2, 4, 1, FALSE});
}

static void test_equiv_3(void)
{
  check_equivalence(&(EquivCase){3, 2, 1, FALSE});
}

static void test_equiv_accum(void)
{
  check_equivalence(&(EquivCase){2, 2, 3, FALSE});
}

static void test_equiv_drop_last(void)
{
  check_equivalence(&(EquivCase){3, 2, 2, TRUE});
}

/* With bucket_cap_mb 0 the buckets are sized from the model (several of them), and the ranks
 * event says for each rank how long the gradient all-reduce took and what share of it ran
 * while backward was still computing. */
static void test_ranks_report(void)
{
  g_autofree char *ws = tu_mkdtemp("ddp-ranks");
  g_autofree char *events = g_build_filename(ws, "progress.jsonl", NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  g_ptr_array_add(argv, g_strdup("--nproc"));
  g_ptr_array_add(argv, g_strdup("2"));
  add_sets(argv, ws, (const char *[]){"max_steps=20", "batch_size=4", "bucket_cap_mb=0", NULL});
  Result r = run(argv, events, NULL);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autoptr(GPtrArray) ev = tu_read_events(events);
  guint reports = 0;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (!g_str_equal(json_object_get_string_member(o, "event"), "ranks"))
      continue;
    reports++;
    JsonArray *ranks = json_object_get_array_member(o, "ranks");
    g_assert_cmpuint(json_array_get_length(ranks), ==, 2);
    for (guint k = 0; k < 2; k++) {
      JsonObject *rk = json_array_get_object_element(ranks, k);
      double busy = json_object_get_double_member(rk, "allreduce_s");
      double hidden = json_object_get_double_member(rk, "allreduce_hidden");
      g_assert_cmpfloat(busy, >, 0);
      g_assert_cmpfloat(hidden, >=, 0);
      g_assert_cmpfloat(hidden, <=, 1);
    }
  }
  g_assert_cmpuint(reports, ==, 2); /* every 10 steps */
  tu_rm_rf(ws);
}

/* Without distributed_data_loading rank 0 prepares the data (one index under cache/) and
 * the others reuse it; with it, each rank keeps its own index under cache/rank-N. */
static void test_data_preparation(void)
{
  for (int ddl = 0; ddl <= 1; ddl++) {
    g_autofree char *ws = tu_mkdtemp("prep");
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
    g_ptr_array_add(argv, g_strdup("--quiet"));
    g_ptr_array_add(argv, g_strdup("--nproc=2"));
    const char *extra[] = {"max_steps=2", "batch_size=2",
                           ddl ? "distributed_data_loading=true" : "distributed_data_loading=false",
                           NULL};
    add_sets(argv, ws, extra);
    Result r = run(argv, NULL, NULL);
    g_assert_cmpint(r.status, ==, 0);
    g_free(r.err);
    g_autofree char *shared = g_build_filename(ws, "cache", "data-index.txt", NULL);
    g_autofree char *rank0 = g_build_filename(ws, "cache", "rank-0", "data-index.txt", NULL);
    g_autofree char *rank1 = g_build_filename(ws, "cache", "rank-1", "data-index.txt", NULL);
    g_assert_cmpint(g_file_test(shared, G_FILE_TEST_EXISTS), ==, !ddl);
    g_assert_cmpint(g_file_test(rank0, G_FILE_TEST_EXISTS), ==, ddl);
    g_assert_cmpint(g_file_test(rank1, G_FILE_TEST_EXISTS), ==, ddl);
    tu_rm_rf(ws);
  }
}

/* Starts one rank by hand with torchrun's variables. */
static GSubprocess *start_rank(int rank, int world, int port, const char *ws,
                               const char *const *extra, GError **error)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, die_with_parent, NULL, NULL);
  g_autofree char *r = g_strdup_printf("%d", rank);
  g_autofree char *w = g_strdup_printf("%d", world);
  g_autofree char *p = g_strdup_printf("%d", port);
  g_subprocess_launcher_setenv(l, "RANK", r, TRUE);
  g_subprocess_launcher_setenv(l, "LOCAL_RANK", r, TRUE);
  g_subprocess_launcher_setenv(l, "WORLD_SIZE", w, TRUE);
  g_subprocess_launcher_setenv(l, "LOCAL_WORLD_SIZE", w, TRUE);
  g_subprocess_launcher_setenv(l, "MASTER_ADDR", "127.0.0.1", TRUE);
  g_subprocess_launcher_setenv(l, "MASTER_PORT", p, TRUE);
  g_subprocess_launcher_setenv(l, "TORCHELASTIC_RUN_ID", "test-ddp", TRUE);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, extra);
  g_ptr_array_add(argv, NULL);
  return g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, error);
}

static char *wait_stderr(GSubprocess *p, int *status)
{
  char *err = NULL;
  g_autoptr(GError) error = NULL;
  g_subprocess_communicate_utf8(p, NULL, NULL, NULL, &err, &error);
  g_assert_no_error(error);
  *status = g_subprocess_get_if_signaled(p) ? 128 + g_subprocess_get_term_sig(p)
                                            : g_subprocess_get_exit_status(p);
  return err;
}

/* A rank that dies mid-run: the survivor fails with an error naming the collective, well
 * within timeout_s, instead of hanging. */
static void test_dead_rank(void)
{
  g_autofree char *ws = tu_mkdtemp("dead");
  int port = cohort_store_find_free_port(0);
  const char *extra[] = {"max_steps=3000", "warmup_steps=1", "batch_size=2", NULL};
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) r0 = start_rank(0, 2, port, ws, extra, &error);
  g_assert_no_error(error);
  g_autoptr(GSubprocess) r1 = start_rank(1, 2, port, ws, extra, &error);
  g_assert_no_error(error);
  g_usleep(3 * G_USEC_PER_SEC);                      /* both are training by now */
  g_assert_nonnull(g_subprocess_get_identifier(r0)); /* still running */
  gint64 t0 = g_get_monotonic_time();
  g_subprocess_force_exit(r1);
  int st1 = 0, st0 = 0;
  g_autofree char *e1 = wait_stderr(r1, &st1);
  g_autofree char *e0 = wait_stderr(r0, &st0);
  double secs = (double)(g_get_monotonic_time() - t0) / 1e6;
  g_test_message("survivor exited %d after %.2f s: %s", st0, secs, e0);
  g_assert_cmpint(st0, ==, 1);
  g_assert_cmpfloat(secs, <, 20);
  g_assert_nonnull(strstr(e0, "rank 0"));
  g_assert_true(strstr(e0, "all_reduce") || strstr(e0, "all_gather") || strstr(e0, "barrier") ||
                strstr(e0, "broadcast"));
  tu_rm_rf(ws);
}

/* Ranks started with different configs stop at start with the keys named. */
static void test_config_mismatch(void)
{
  g_autofree char *ws = tu_mkdtemp("mismatch");
  int port = cohort_store_find_free_port(0);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) r0 = start_rank(
      0, 2, port, ws, (const char *[]){"max_steps=3", "learning_rate=0.001", NULL}, &error);
  g_autoptr(GSubprocess) r1 = start_rank(
      1, 2, port, ws, (const char *[]){"max_steps=3", "learning_rate=0.002", NULL}, &error);
  int st0, st1;
  g_autofree char *e0 = wait_stderr(r0, &st0);
  g_autofree char *e1 = wait_stderr(r1, &st1);
  g_test_message("rank 0: %s", e0);
  g_test_message("rank 1: %s", e1);
  g_assert_cmpint(st0, !=, 0);
  g_assert_cmpint(st1, !=, 0);
  g_assert_nonnull(strstr(e0, "learning_rate"));
  g_assert_nonnull(strstr(e1, "learning_rate"));
  tu_rm_rf(ws);
}

/* Rank 0 cannot host the store on a taken port: the message names it and suggests another. */
static void test_port_taken(void)
{
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  g_assert_cmpint(bind(sock, (struct sockaddr *)&addr, sizeof addr), ==, 0);
  g_assert_cmpint(listen(sock, 1), ==, 0);
  socklen_t len = sizeof addr;
  getsockname(sock, (struct sockaddr *)&addr, &len);
  int port = ntohs(addr.sin_port);
  g_autofree char *ws = tu_mkdtemp("port");
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) r0 =
      start_rank(0, 2, port, ws, (const char *[]){"max_steps=3", "timeout_s=3", NULL}, &error);
  int st;
  g_autofree char *e0 = wait_stderr(r0, &st);
  close(sock);
  g_test_message("rank 0: %s", e0);
  g_assert_cmpint(st, ==, 1);
  g_autofree char *port_text = g_strdup_printf("%d", port);
  g_assert_nonnull(strstr(e0, port_text));
  tu_rm_rf(ws);
}

/* The launcher's children (the ranks), from /proc. */
static GArray *children_of(GPid pid)
{
  GArray *out = g_array_new(FALSE, FALSE, sizeof(int));
  g_autofree char *path = g_strdup_printf("/proc/%d/task/%d/children", pid, pid);
  g_autofree char *text = NULL;
  if (!g_file_get_contents(path, &text, NULL, NULL))
    return out;
  g_auto(GStrv) parts = g_strsplit(g_strstrip(text), " ", -1);
  for (guint i = 0; parts[i]; i++)
    if (*parts[i]) {
      int c = atoi(parts[i]);
      g_array_append_val(out, c);
    }
  return out;
}

static int rank_of(int pid)
{
  g_autofree char *path = g_strdup_printf("/proc/%d/environ", pid);
  g_autofree char *env = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &env, &len, NULL))
    return -1;
  for (gsize i = 0; i < len; i += strlen(env + i) + 1)
    if (g_str_has_prefix(env + i, "RANK="))
      return atoi(env + i + 5);
  return -1;
}

static GSubprocess *start_cohort_run(const char *ws, const char *events, int max_restarts,
                                     const char *const *extra)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_set_child_setup(l, die_with_parent, NULL, NULL);
  int fd = open(events, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  g_subprocess_launcher_take_fd(l, fd, 3);
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup(program("COHORT_RUN")));
  g_ptr_array_add(argv, g_strdup("--standalone"));
  g_ptr_array_add(argv, g_strdup("--nproc-per-node=2"));
  g_ptr_array_add(argv, g_strdup_printf("--max-restarts=%d", max_restarts));
  g_ptr_array_add(argv, g_strdup("--progress-fd=3"));
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, extra);
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  GSubprocess *p = g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  return p;
}

static void wait_for_text(const char *path, const char *needle)
{
  gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;
  for (;;) {
    g_autofree char *text = NULL;
    g_file_get_contents(path, &text, NULL, NULL);
    if (text && strstr(text, needle))
      return;
    g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    g_usleep(20000);
  }
}

/* Rank 1 is killed after the first checkpoint; with --max-restarts 1 the launcher restarts
 * the group, which resumes and ends with the weights of a run that never failed. */
static void test_restart_completes(void)
{
  g_autofree char *ws_ok = tu_mkdtemp("restart-ref");
  g_autofree char *ws = tu_mkdtemp("restart");
  g_autofree char *ev_ok = g_build_filename(ws_ok, "progress.jsonl", NULL);
  g_autofree char *ev = g_build_filename(ws, "progress.jsonl", NULL);
  const char *extra[] = {"max_steps=40", "save_every=5", "batch_size=2", NULL};

  g_autoptr(GSubprocess) ref = start_cohort_run(ws_ok, ev_ok, 0, extra);
  int st;
  g_autofree char *e_ref = wait_stderr(ref, &st);
  g_assert_cmpint(st, ==, 0);

  g_autoptr(GSubprocess) p = start_cohort_run(ws, ev, 1, extra);
  wait_for_text(ev, "\"event\":\"checkpoint\"");
  GPid launcher = atoi(g_subprocess_get_identifier(p));
  g_autoptr(GArray) kids = children_of(launcher);
  int victim = -1;
  for (guint i = 0; i < kids->len; i++)
    if (rank_of(g_array_index(kids, int, i)) == 1)
      victim = g_array_index(kids, int, i);
  g_assert_cmpint(victim, >, 0);
  kill(victim, SIGKILL);
  g_autofree char *err = wait_stderr(p, &st);
  g_test_message("launcher stderr:\n%s", err);
  g_assert_cmpint(st, ==, 0);
  g_assert_nonnull(strstr(err, "SIGKILL"));

  g_autoptr(GPtrArray) events = tu_read_events(ev);
  int starts = 0;
  gint64 resumed_at = -1;
  for (guint i = 0; i < events->len; i++) {
    JsonObject *o = g_ptr_array_index(events, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "start")) {
      starts++;
      resumed_at = json_object_get_int_member(o, "start_step");
    }
  }
  g_assert_cmpint(starts, ==, 2);
  g_assert_cmpint(resumed_at, >=, 5);

  g_autofree char *w_ok = g_build_filename(ws_ok, "model.safetensors", NULL);
  g_autofree char *w = g_build_filename(ws, "model.safetensors", NULL);
  g_autoptr(GArray) a = tu_read_weights(w_ok);
  g_autoptr(GArray) b = tu_read_weights(w);
  g_assert_cmpint(memcmp(a->data, b->data, a->len * sizeof(float)), ==, 0);
  tu_rm_rf(ws_ok);
  tu_rm_rf(ws);
}

/* SIGTERM to cohort-run stops the group; no rank survives it. */
static void test_sigterm_launcher(void)
{
  g_autofree char *ws = tu_mkdtemp("sigterm");
  g_autofree char *ev = g_build_filename(ws, "progress.jsonl", NULL);
  const char *extra[] = {"max_steps=3000", "batch_size=2", NULL};
  g_autoptr(GSubprocess) p = start_cohort_run(ws, ev, 0, extra);
  wait_for_text(ev, "\"step\":3,");
  GPid launcher = atoi(g_subprocess_get_identifier(p));
  g_autoptr(GArray) kids = children_of(launcher);
  g_assert_cmpuint(kids->len, ==, 2);
  g_subprocess_send_signal(p, SIGTERM);
  int st;
  g_autofree char *err = wait_stderr(p, &st);
  for (guint i = 0; i < kids->len; i++) {
    int pid = g_array_index(kids, int, i);
    g_autofree char *stat = g_strdup_printf("/proc/%d", pid);
    g_assert_false(kill(pid, 0) == 0 && g_file_test(stat, G_FILE_TEST_EXISTS));
  }
  tu_rm_rf(ws);
}

/* Final weights of a 2-rank run under another launcher, or NULL when it is not installed. */
static GArray *weights_under(const char *launcher, const char *const *extra)
{
  g_autofree char *ws = tu_mkdtemp("launcher");
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
  /* Under torchrun our store takes MASTER_PORT + 1: both free, and below the ephemeral range
   * (32768 and up), where a connection of torchrun's own could take the second. */
  int port = 0;
  for (int tries = 0; port == 0 || port > 32000; tries++) {
    g_assert_cmpint(tries, <, 100);
    port = cohort_store_find_free_port(20000 + g_random_int_range(0, 12000));
    if (port > 0 && cohort_store_find_free_port(port) != port + 1)
      port = 0;
  }
  g_autofree char *port_text = g_strdup_printf("%d", port);
  const char *env[12] = {NULL};
  if (g_str_equal(launcher, "torchrun")) {
    /* Debian's torchrun needs -r 1 -t 1 (FACTS.md: Python 3.11 breaks its default). */
    const char *pre[] = {"/usr/bin/python3",
                         "-m",
                         "torch.distributed.run",
                         "-r",
                         "1",
                         "-t",
                         "1",
                         "--no_python",
                         "--nnodes=1",
                         "--nproc_per_node=2",
                         "--master_addr=127.0.0.1",
                         NULL};
    for (guint i = 0; pre[i]; i++)
      g_ptr_array_add(argv, g_strdup(pre[i]));
    g_ptr_array_add(argv, g_strdup_printf("--master_port=%d", port));
  } else if (g_str_equal(launcher, "mpirun")) {
    const char *pre[] = {"mpirun",    "-np",
                         "2",         "--oversubscribe",
                         "--bind-to", "none",
                         "-x",        "MASTER_ADDR=127.0.0.1",
                         "-x",        "OMP_NUM_THREADS=1",
                         "-x",        "COHORT_DATA_DIR",
                         NULL};
    for (guint i = 0; pre[i]; i++)
      g_ptr_array_add(argv, g_strdup(pre[i]));
    g_ptr_array_add(argv, g_strdup("-x"));
    g_ptr_array_add(argv, g_strdup_printf("MASTER_PORT=%d", port));
    const char *e[] = {"OMPI_ALLOW_RUN_AS_ROOT", "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", NULL};
    memcpy(env, e, sizeof e);
  } else {
    g_ptr_array_add(argv, g_strdup(program("COHORT_RUN")));
    g_ptr_array_add(argv, g_strdup("--standalone"));
    g_ptr_array_add(argv, g_strdup("--nproc-per-node=2"));
  }
  g_ptr_array_add(argv, g_strdup(program("COHORT_TRAIN")));
  g_ptr_array_add(argv, g_strdup("--quiet"));
  add_sets(argv, ws, extra);
  Result r = run(argv, NULL, env);
  g_assert_cmpint(r.status, ==, 0);
  g_free(r.err);
  g_autofree char *path = g_build_filename(ws, "model.safetensors", NULL);
  GArray *w = tu_read_weights(path);
  tu_rm_rf(ws);
  return w;
}

static const char *const launcher_sets[] = {"max_steps=5", "batch_size=2", NULL};

static void test_torchrun_agrees(void)
{
  if (system("/usr/bin/python3 -c 'import torch.distributed.run' >/dev/null 2>&1") != 0) {
    g_test_skip("Debian's python3-torch (torchrun) is not installed");
    return;
  }
  g_autoptr(GArray) ours = weights_under("cohort-run", launcher_sets);
  g_autoptr(GArray) theirs = weights_under("torchrun", launcher_sets);
  g_assert_cmpint(memcmp(ours->data, theirs->data, ours->len * sizeof(float)), ==, 0);
}

static void test_mpirun_agrees(void)
{
  if (system("command -v mpirun >/dev/null 2>&1") != 0) {
    g_test_skip("Open MPI's mpirun is not installed");
    return;
  }
  g_autoptr(GArray) ours = weights_under("cohort-run", launcher_sets);
  g_autoptr(GArray) theirs = weights_under("mpirun", launcher_sets);
  g_assert_cmpint(memcmp(ours->data, theirs->data, ours->len * sizeof(float)), ==, 0);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/ddp/equivalence/2-ranks", test_equiv_2);
  g_test_add_func("/ddp/equivalence/3-ranks", test_equiv_3);
  g_test_add_func("/ddp/equivalence/accumulation", test_equiv_accum);
  g_test_add_func("/ddp/equivalence/drop-last", test_equiv_drop_last);
  g_test_add_func("/ddp/data-preparation", test_data_preparation);
  g_test_add_func("/ddp/ranks-report", test_ranks_report);
  g_test_add_func("/ddp/dead-rank", test_dead_rank);
  g_test_add_func("/ddp/config-mismatch", test_config_mismatch);
  g_test_add_func("/ddp/port-taken", test_port_taken);
  g_test_add_func("/ddp/restart-completes", test_restart_completes);
  g_test_add_func("/ddp/sigterm-launcher", test_sigterm_launcher);
  g_test_add_func("/ddp/torchrun-agrees", test_torchrun_agrees);
  g_test_add_func("/ddp/mpirun-agrees", test_mpirun_agrees);
  return g_test_run();
}
