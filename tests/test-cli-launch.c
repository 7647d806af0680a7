/* cohort-train and the launch plan (suite dist, loopback only): `--config F` outside any
 * launcher starts the group F asks for (spawn mode, or cohort-run when use_torchrun), like
 * `accelerate launch --config_file`; under a launcher it is one rank; --local_rank /
 * --local-rank (as torch.distributed.launch passes it) is checked against LOCAL_RANK; what
 * cannot run is refused in one line; and a run shorter than its warm-up just runs, with the
 * warm-up shortened. */
#include <gio/gio.h>
#include <math.h>
#include <unistd.h>

#include "engine/config/config.h"
#include "test-util.h"
#include "train-run.h"

/* A small config with `extra` in a fresh folder; returns the file, the folder in *dir. */
static char *write_config(const char *const *extra, char **dir)
{
  *dir = tu_mkdtemp("cli-launch");
  g_autoptr(CohortConfig) cfg = cohort_config_new();
  g_autoptr(GError) error = NULL;
  const char *base[] = {
      "n_layer=1",   "n_head=2",       "n_embd=32",    "seq_len=32",     "batch_size=4",
      "max_steps=4", "warmup_steps=1", "eval_every=0", "sample_every=0", "threads=1",
      NULL};
  g_assert_true(cohort_config_apply_assignments(cfg, base, "test", &error));
  if (extra)
    g_assert_true(cohort_config_apply_assignments(cfg, extra, "test", &error));
  g_assert_no_error(error);
  g_free(cfg->workspace_dir);
  cfg->workspace_dir = g_build_filename(*dir, "ws", NULL);
  char *path = g_build_filename(*dir, "run.json", NULL);
  g_assert_true(cohort_config_save_file(cfg, path, &error));
  return path;
}

/* cohort-train ARGS with the environment changed by `env` (NAME, VALUE pairs; VALUE NULL
 * unsets), progress to `progress` when given. */
static RunResult run_env(const char *const *args, const char *const *env, const char *progress)
{
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  for (guint i = 0; env && env[i]; i += 2) {
    if (env[i + 1])
      g_subprocess_launcher_setenv(l, env[i], env[i + 1], TRUE);
    else
      g_subprocess_launcher_unsetenv(l, env[i]);
  }
  g_autoptr(GPtrArray) argv = g_ptr_array_new();
  g_ptr_array_add(argv, (gpointer)train_program());
  if (progress) {
    int fd = open(progress, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    g_assert_cmpint(fd, >=, 0);
    g_subprocess_launcher_take_fd(l, fd, 3);
    g_ptr_array_add(argv, "--progress-fd=3");
  }
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add(argv, (gpointer)args[i]);
  g_ptr_array_add(argv, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) p =
      g_subprocess_launcher_spawnv(l, (const char *const *)argv->pdata, &error);
  g_assert_no_error(error);
  return finish_train(p);
}

/* The world size of the run's start event. */
static int started_world(const char *progress)
{
  g_autoptr(GPtrArray) ev = tu_read_events(progress);
  g_autoptr(GArray) w = tu_event_values(ev, "start", "world_size");
  g_assert_cmpuint(w->len, ==, 1);
  return (int)g_array_index(w, double, 0);
}

/* The "launch" object of --explain. */
static char *explained_kind(const char *const *args, const char *const *env)
{
  RunResult r = run_env(args, env, NULL);
  if (r.status != 0)
    g_error("--explain exited %d: %s", r.status, r.err);
  g_autoptr(JsonNode) node = json_from_string(r.out, NULL);
  JsonObject *launch = json_object_get_object_member(json_node_get_object(node), "launch");
  char *kind = g_strdup(json_object_get_string_member(launch, "kind"));
  run_result_clear(&r);
  return kind;
}

static void check_starts_group(gboolean torchrun)
{
  const char *extra[] = {"enable_multi_gpu=true", "nproc_per_node=2",
                         torchrun ? "use_torchrun=true" : "use_torchrun=false", NULL};
  g_autofree char *dir = NULL;
  g_autofree char *config = write_config(extra, &dir);
  const char *explain[] = {"--config", config, "--explain", NULL};
  g_autofree char *kind = explained_kind(explain, NULL);
  g_assert_cmpstr(kind, ==, torchrun ? "cohort-run" : "spawn");
  g_autofree char *progress = g_build_filename(dir, "progress.jsonl", NULL);
  const char *args[] = {"--quiet", "--config", config, NULL};
  RunResult r = run_env(args, NULL, progress);
  if (r.status != 0)
    g_error("exit %d: %s", r.status, r.err);
  g_assert_cmpint(started_world(progress), ==, 2);
  run_result_clear(&r);

  /* The group's supervisor is the one the plan names: its report says who it is. */
  /* A fresh workspace: the first run's checkpoints would be refused before the data is read. */
  g_autofree char *ws2 = g_strdup_printf("workspace_dir=%s/ws-broken", dir);
  const char *broken[] = {"--config", config, "--set", "train_data=/nonexistent/data.txt",
                          "--set",    ws2,    NULL};
  RunResult f = run_env(broken, NULL, NULL);
  g_test_message("%s", f.err);
  g_assert_cmpint(f.status, ==, 1);
  g_assert_nonnull(strstr(f.err, torchrun ? "cohort-run: rank " : "cohort-train: rank "));
  g_assert_nonnull(strstr(f.err, "/nonexistent/data.txt"));
  run_result_clear(&f);
  tu_rm_rf(dir);
}

static void test_starts_spawn(void)
{
  check_starts_group(FALSE);
}

static void test_starts_cohort_run(void)
{
  check_starts_group(TRUE);
}

/* Under a launcher the process is one of its ranks, whatever the config asks for. */
static void test_under_launcher(void)
{
  const char *extra[] = {"enable_multi_gpu=true", "nproc_per_node=2", "use_torchrun=false", NULL};
  g_autofree char *dir = NULL;
  g_autofree char *config = write_config(extra, &dir);
  const char *env[] = {
      "RANK", "0",           "WORLD_SIZE", "1",           "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE",
      "1",    "MASTER_ADDR", "127.0.0.1",  "MASTER_PORT", "29999",      NULL};
  const char *explain[] = {"--config", config, "--explain", NULL};
  g_autofree char *kind = explained_kind(explain, env);
  g_assert_cmpstr(kind, ==, "external");
  g_autofree char *progress = g_build_filename(dir, "progress.jsonl", NULL);
  const char *args[] = {"--quiet", "--config", config, NULL};
  RunResult r = run_env(args, env, progress);
  g_assert_cmpint(r.status, ==, 0);
  g_assert_cmpint(started_world(progress), ==, 1);
  run_result_clear(&r);
  /* --nproc would start ranks inside a rank. */
  const char *nested[] = {"--config", config, "--nproc", "2", NULL};
  RunResult n = run_env(nested, env, NULL);
  g_assert_cmpint(n.status, ==, 2);
  g_assert_nonnull(strstr(n.err, "leave out --nproc under a launcher"));
  run_result_clear(&n);
  tu_rm_rf(dir);
}

/* torch.distributed.launch passes --local_rank=N (torch 2 also --local-rank). */
static void test_local_rank(void)
{
  g_autofree char *dir = NULL;
  g_autofree char *config = write_config(NULL, &dir);
  const char *launch_env[] = {"RANK",        "0",         "WORLD_SIZE",  "1",
                              "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "29999",
                              "LOCAL_RANK",  NULL,        NULL};
  /* Without LOCAL_RANK, the option gives it. */
  const char *given[] = {"--config", config, "--local_rank=0", "--explain", NULL};
  g_autofree char *k1 = explained_kind(given, launch_env);
  g_assert_cmpstr(k1, ==, "external");
  const char *env0[] = {"LOCAL_RANK", "0", NULL};
  const char *dash[] = {"--config", config, "--local-rank", "0", "--explain", NULL};
  g_autofree char *k2 = explained_kind(dash, env0);
  g_assert_cmpstr(k2, ==, "single");
  /* Disagreeing with the environment, or with each other: a bad command line. */
  const char *wrong[] = {"--config", config, "--local_rank", "1", "--explain", NULL};
  RunResult r = run_env(wrong, env0, NULL);
  g_assert_cmpint(r.status, ==, 2);
  g_assert_nonnull(strstr(r.err, "--local_rank 1 but LOCAL_RANK=0"));
  run_result_clear(&r);
  const char *both[] = {"--config", config, "--local_rank=1", "--local-rank=0", "--explain", NULL};
  RunResult b = run_env(both, NULL, NULL);
  g_assert_cmpint(b.status, ==, 2);
  g_assert_nonnull(strstr(b.err, "disagree"));
  run_result_clear(&b);
  tu_rm_rf(dir);
}

/* What the plan refuses stops cohort-train before anything starts, in one line naming the file
 * and the keys. */
static void test_refused(void)
{
  const char *extra[] = {"enable_multi_gpu=true", "nproc_per_node=2",     "use_torchrun=false",
                         "num_nodes=2",           "master_addr=10.0.0.1", NULL};
  g_autofree char *dir = NULL;
  g_autofree char *config = write_config(extra, &dir);
  const char *args[] = {"--config", config, NULL};
  RunResult r = run_env(args, NULL, NULL);
  g_test_message("%s", r.err);
  g_assert_cmpint(r.status, ==, 1);
  g_assert_true(g_str_has_prefix(r.err, "cohort-train: "));
  g_assert_nonnull(strstr(r.err, config));
  g_assert_nonnull(strstr(r.err, "key \"use_torchrun\""));
  g_assert_cmpint(strchr(r.err, '\n') - r.err, ==, (long)strlen(r.err) - 1);
  g_autofree char *ws = g_build_filename(dir, "ws", NULL);
  g_assert_false(g_file_test(ws, G_FILE_TEST_EXISTS));
  run_result_clear(&r);
  tu_rm_rf(dir);
}

/* A preset's warm-up (20 steps) longer than a 5-step run: the run goes on, warming up over its
 * 5 steps, and says so. */
static void test_short_run_warmup(void)
{
  g_autofree char *dir = tu_mkdtemp("cli-warmup");
  g_autofree char *ws = g_strdup_printf("workspace_dir=%s/ws", dir);
  g_autofree char *progress = g_build_filename(dir, "progress.jsonl", NULL);
  const char *args[] = {"--preset",       "tiny-gpt", "--quiet",   "--set",
                        "max_steps=5",    "--set",    "n_layer=1", "--set",
                        "sample_every=0", "--set",    ws,          NULL};
  RunResult r = run_env(args, NULL, progress);
  if (r.status != 0)
    g_error("exit %d: %s", r.status, r.err);
  run_result_clear(&r);
  g_autoptr(GPtrArray) ev = tu_read_events(progress);
  gboolean said = FALSE;
  for (guint i = 0; i < ev->len; i++) {
    JsonObject *o = g_ptr_array_index(ev, i);
    if (g_str_equal(json_object_get_string_member(o, "event"), "log"))
      said |= strstr(json_object_get_string_member(o, "message"),
                     "warmup_steps 20 is longer than the run's 5 steps") != NULL;
  }
  g_assert_true(said);
  g_autoptr(GArray) lr = tu_event_values(ev, "step", "lr");
  g_assert_cmpuint(lr->len, ==, 5);
  /* Linear warm-up over 5 steps: the last reaches the full rate (tiny-gpt's 0.002). */
  for (guint i = 0; i < 5; i++)
    g_assert_cmpfloat_with_epsilon(g_array_index(lr, double, i), 0.002 * (i + 1) / 5, 1e-12);
  tu_rm_rf(dir);
}

/* cohort-run with more ranks than this machine can take: more CPU ranks than cores run,
 * with a warning; ranks whose weights, gradients and optimizer state alone (estimated from
 * the parameter count and the batch) exceed the machine's memory are refused before any
 * allocates them, with the numbers. */
static RunResult run_cohort_run(int nproc, const char *const *extra)
{
  g_autofree char *dir = NULL;
  g_autofree char *cfg = write_config(extra, &dir);
  g_autofree char *np = g_strdup_printf("%d", nproc);
  g_autoptr(GSubprocessLauncher) l =
      g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_setenv(l, "OMP_NUM_THREADS", "1", TRUE);
  const char *argv[] = {g_getenv("COHORT_RUN"),
                        "--standalone",
                        "--nproc-per-node",
                        np,
                        train_program(),
                        "--config",
                        cfg,
                        NULL};
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocess) p = g_subprocess_launcher_spawnv(l, argv, &error);
  g_assert_no_error(error);
  RunResult r = finish_train(p);
  tu_rm_rf(dir);
  return r;
}

static guint64 mem_total(void)
{
  g_autofree char *text = NULL;
  g_assert_true(g_file_get_contents("/proc/meminfo", &text, NULL, NULL));
  return g_ascii_strtoull(strstr(text, "MemTotal:") + 9, NULL, 10) << 10;
}

static void test_oversubscribed(void)
{
  int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (cores + 1 > 8) {
    g_test_skip("more than 7 cores: too many ranks to start for the core check");
  } else {
    const char *one_step[] = {"max_steps=1", NULL};
    RunResult r = run_cohort_run(cores + 1, one_step);
    g_test_message("%d ranks on %d cores: exit %d\n%s", cores + 1, cores, r.status, r.err);
    g_assert_cmpint(r.status, ==, 0);
    g_autofree char *warning =
        g_strdup_printf("%d ranks on this node but %d CPU cores", cores + 1, cores);
    g_assert_nonnull(strstr(r.err, warning));
    run_result_clear(&r);
  }

  /* A GPT whose AdamW training state alone (16 bytes a parameter) on two ranks exceeds the
   * machine: n_embd 4096 has about 201 million parameters a layer. */
  guint64 total = mem_total();
  guint64 per_layer = 12ull * 4096 * 4096 * 16;
  guint64 layers = total / (2 * per_layer) + 1;
  if (layers > 96) {
    g_test_skip("too much memory here for a GPT of at most 96 layers to exceed it");
    return;
  }
  g_autofree char *n_layer = g_strdup_printf("n_layer=%" G_GUINT64_FORMAT, layers);
  const char *huge[] = {n_layer, "n_embd=4096", "n_head=32", "max_steps=1", NULL};
  gint64 t0 = g_get_monotonic_time();
  RunResult h = run_cohort_run(2, huge);
  double secs = (g_get_monotonic_time() - t0) / 1e6;
  g_test_message("2 ranks of %s: exit %d after %.1f s\n%s", n_layer, h.status, secs, h.err);
  g_assert_cmpint(h.status, !=, 0);
  /* the node check, or the memory plan when it runs first (both count the ranks' memory) */
  g_assert_true(strstr(h.err, "2 ranks on this node need") != NULL ||
                strstr(h.err, "2 processes on this machine") != NULL);
  g_assert_nonnull(strstr(h.err, "memory"));
  g_assert_nonnull(strstr(h.err, "parameters"));
  g_assert_cmpfloat(secs, <, 60);
  run_result_clear(&h);
}

int main(int argc, char **argv)
{
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/cli-launch/starts-spawn", test_starts_spawn);
  g_test_add_func("/cli-launch/starts-cohort-run", test_starts_cohort_run);
  g_test_add_func("/cli-launch/under-launcher", test_under_launcher);
  g_test_add_func("/cli-launch/local-rank", test_local_rank);
  g_test_add_func("/cli-launch/refused", test_refused);
  g_test_add_func("/cli-launch/short-run-warmup", test_short_run_warmup);
  g_test_add_func("/cli-launch/oversubscribed", test_oversubscribed);
  return g_test_run();
}
