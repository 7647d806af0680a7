/* cohort-train: one engine process (a rank). */
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cohort-build-config.h"
#include "engine/config.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/env.h"
#include "engine/distributed/launcher.h"
#include "engine/distributed/store.h"
#include "engine/explain.h"
#include "engine/progress.h"
#include "engine/trainer.h"
#include "kernels/cpu/threading.h"

static volatile int stop_requested;

static void on_stop_signal(int sig)
{
  if (stop_requested) {
    /* A second signal: the user means it. */
    signal(sig, SIG_DFL);
    raise(sig);
  }
  stop_requested = 1;
}

static void install_signal_handlers(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

static int fail(CohortProgress *progress, int rank, const char *message)
{
  if (progress) {
    cohort_progress_finish_line(progress);
    JsonObject *e = json_object_new();
    json_object_set_int_member(e, "rank", rank);
    json_object_set_string_member(e, "message", message);
    cohort_progress_emit(progress, "error", e);
    JsonObject *d = json_object_new();
    json_object_set_string_member(d, "status", "failed");
    cohort_progress_emit(progress, "done", d);
  }
  fprintf(stderr, "cohort-train: %s\n", message);
  return 1;
}

/* Like fail(), with the rank named when there are several. */
static int fail_rank(CohortProgress *progress, int rank, const char *message)
{
  g_autofree char *msg = g_strdup_printf("rank %d: %s", rank, message);
  return fail(progress, rank, rank > 0 || g_getenv("WORLD_SIZE") ? msg : message);
}

/* The command each spawned rank runs: this program with the same options, minus --nproc
 * (ranks must not spawn again) and --progress-fd (the launcher gives it to rank 0). */
static GStrv worker_command(char **argv)
{
  g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func(g_free);
  g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
  g_ptr_array_add(out, g_strdup(self ? self : argv[0]));
  for (int i = 1; argv[i]; i++) {
    const char *a = argv[i];
    gboolean with_value =
        g_str_equal(a, "--nproc") || g_str_equal(a, "-n") || g_str_equal(a, "--progress-fd");
    if (with_value) {
      if (argv[i + 1])
        i++;
      continue;
    }
    if (g_str_has_prefix(a, "--nproc=") || g_str_has_prefix(a, "--progress-fd="))
      continue;
    g_ptr_array_add(out, g_strdup(a));
  }
  g_ptr_array_add(out, NULL);
  return (GStrv)g_ptr_array_free(g_steal_pointer(&out), FALSE);
}

int main(int argc, char **argv)
{
  /* The user's locale, so arguments convert from its character set (--set
   * sample_prompt=Über); numbers stay in the C locale's spelling everywhere (0.5, never 0,5),
   * in what is parsed and in what is written. */
  setlocale(LC_ALL, "");
  setlocale(LC_NUMERIC, "C");
  cohort_cpu_threading_env(argv);
  g_autofree char *config_path = NULL;
  g_autofree char *preset = NULL;
  g_auto(GStrv) sets = NULL;
  g_autofree char *resume = NULL;
  int progress_fd = -1;
  gboolean explain = FALSE, quiet = FALSE, version = FALSE;
  int nproc = 0;
  GOptionEntry entries[] = {
      {"config", 'c', 0, G_OPTION_ARG_FILENAME, &config_path, "TrainConfig JSON file", "FILE"},
      {"preset", 'p', 0, G_OPTION_ARG_STRING, &preset,
       "Built-in or user preset (default: tiny-gpt)", "NAME"},
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &sets, "Override one key (repeatable)",
       "KEY=VALUE"},
      {"resume", 'r', 0, G_OPTION_ARG_STRING, &resume,
       "Resume from the latest checkpoint in the workspace (auto) or from a checkpoint folder",
       "auto|PATH"},
      {"progress-fd", 0, 0, G_OPTION_ARG_INT, &progress_fd,
       "Write progress events (JSON Lines) to this file descriptor", "FD"},
      {"nproc", 'n', 0, G_OPTION_ARG_INT, &nproc,
       "Spawn mode: fork N local ranks on this machine (a free port is chosen)", "N"},
      {"explain", 0, 0, G_OPTION_ARG_NONE, &explain, "Print the resolved plan as JSON and exit",
       NULL},
      {"quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "No human progress output", NULL},
      {"version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_auto(GStrv) original_argv = g_strdupv(argv);
  g_autoptr(GOptionContext) ctx = g_option_context_new("- train a model with Cohort");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
    if (error->domain == G_CONVERT_ERROR)
      fprintf(stderr,
              "cohort-train: %s: an argument is not text in the locale's character set (%s); "
              "use a UTF-8 locale, like LC_ALL=C.UTF-8\n",
              error->message, setlocale(LC_CTYPE, NULL));
    else
      fprintf(stderr, "cohort-train: %s (see --help)\n", error->message);
    return 2;
  }
  if (version) {
    printf("cohort-train %s\n", COHORT_VERSION);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "cohort-train: unexpected argument '%s' (see --help)\n", argv[1]);
    return 2;
  }
  if (config_path && preset) {
    fprintf(stderr, "cohort-train: give --config or --preset, not both\n");
    return 2;
  }
  if (progress_fd >= 0 && fcntl(progress_fd, F_GETFD) == -1) {
    fprintf(stderr, "cohort-train: --progress-fd %d is not an open file descriptor\n", progress_fd);
    return 2;
  }

  g_autoptr(CohortConfig) cfg = NULL;
  const char *source = config_path ? config_path : NULL;
  g_autofree char *preset_source = NULL;
  if (config_path) {
    cfg = cohort_config_load_file(config_path, &error);
  } else {
    preset_source = cohort_preset_path(preset ? preset : "tiny-gpt", &error);
    if (preset_source)
      cfg = cohort_config_load_file(preset_source, &error);
    source = preset_source;
  }
  if (!cfg)
    return fail(NULL, 0, error->message);
  if (sets && !cohort_config_apply_assignments(cfg, (const char *const *)sets, "--set", &error))
    return fail(NULL, 0, error->message);
  if (!cohort_config_validate(cfg, source, &error))
    return fail(NULL, 0, error->message);

  if (explain) {
    g_autofree char *plan = cohort_explain(cfg, nproc > 0 ? nproc : 1, 8, &error);
    if (!plan)
      return fail(NULL, 0, error->message);
    printf("%s\n", plan);
    return 0;
  }

  if (nproc < 0 || nproc > 1024) {
    fprintf(stderr, "cohort-train: --nproc %d is not allowed; allowed: 1 to 1024\n", nproc);
    return 2;
  }
  if (nproc > 1) {
    /* Spawn mode: this process becomes the supervisor of nproc ranks of itself. */
    if (!cohort_config_check_supported(cfg, source, &error))
      return fail(NULL, 0, error->message);
    g_auto(GStrv) worker_argv = worker_command(original_argv);
    int status = cohort_launch_spawn((const char *const *)worker_argv, nproc, progress_fd, &error);
    if (error)
      return fail(NULL, 0, error->message);
    return status;
  }

  g_autoptr(CohortDistEnv) env = cohort_dist_env_from_environ(NULL, &error);
  if (!env)
    return fail(NULL, 0, error->message);
  gboolean rank0 = env->rank == 0;
  g_autoptr(CohortProgress) progress =
      cohort_progress_new(rank0 ? progress_fd : -1, rank0 && !quiet);
  g_autoptr(CohortStore) store = NULL;
  g_autoptr(CohortComm) comm = NULL;
  /* The rank's device first: NCCL is created on it. */
  if (!cohort_config_check_supported(cfg, source, &error))
    return fail_rank(progress, env->rank, error->message);
  CohortComputeDevice device;
  if (!cohort_device_select(cfg, source, env->local_rank, env->local_world_size, &device, &error))
    return fail_rank(progress, env->rank, error->message);
  if (env->world_size > 1) {
    if (cfg->distributed_backend == COHORT_BACKEND_NCCL && device.cuda_device < 0) {
      g_autofree char *msg = g_strdup_printf(
          "%s: key \"distributed_backend\": \"nccl\" needs GPU ranks (device \"cuda\", or "
          "\"auto\" with a GPU); use \"gloo\" for CPU ranks",
          source);
      return fail(progress, env->rank, msg);
    }
    g_autofree char *token = cohort_dist_job_token(env);
    store = cohort_store_open(env, token, cfg->timeout_s, &error);
    if (!store || !cohort_dist_check_config(store, env, cfg, cfg->timeout_s, &error))
      return fail_rank(progress, env->rank, error->message);
    if (cfg->distributed_backend == COHORT_BACKEND_NCCL)
      comm = cohort_comm_new_nccl(store, env, device.cuda_device, cfg->timeout_s, &error);
    else
      comm = cohort_comm_new_gloo(store, env, cfg->timeout_s, &error);
    if (!comm)
      return fail_rank(progress, env->rank, error->message);
  }

  /* A restarted group resumes from its checkpoint, whoever restarted it (cohort-run also
   * passes --resume auto; torchrun only sets the restart count). */
  if (!resume && env->restart_count > 0)
    resume = g_strdup("auto");

  install_signal_handlers();
  CohortTrainOptions opts = {
      .config_source = source,
      .resume = resume,
      .progress = progress,
      .rank = env->rank,
      .world_size = env->world_size,
      .local_rank = env->local_rank,
      .local_world_size = env->local_world_size,
      .comm = comm,
      .device = &device,
      .stop_flag = &stop_requested,
  };
  gboolean stopped = FALSE;
  if (!cohort_train(cfg, &opts, &stopped, &error)) {
    /* Peers blocked in a collective with this rank fail now instead of at their timeout. */
    if (comm)
      cohort_comm_abort(comm, error->message);
    return fail_rank(progress, env->rank, error->message);
  }
  /* Rank 0 hosts the store: everyone is done with it before it goes away. */
  if (comm && !cohort_comm_barrier(comm, 0, &error))
    return fail_rank(progress, env->rank, error->message);
  return 0;
}
