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
#include "engine/presets.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/env.h"
#include "engine/distributed/launcher.h"
#include "engine/distributed/store.h"
#include "engine/explain.h"
#include "engine/cli/stop-signals.h"
#include "engine/sample-saved.h"
#include "engine/progress.h"
#include "engine/trainer.h"
#include "kernels/cpu/threading.h"

/* The signal that asked this rank to stop, 0 = none (engine/cli/stop-signals.h). */
static volatile int stop_requested;

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
 * (ranks must not spawn again), --progress-fd and --control-fd (the launcher gives them to
 * rank 0). */
static GStrv worker_command(char **argv)
{
  g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func(g_free);
  g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
  g_ptr_array_add(out, g_strdup(self ? self : argv[0]));
  for (int i = 1; argv[i]; i++) {
    const char *a = argv[i];
    gboolean with_value = g_str_equal(a, "--nproc") || g_str_equal(a, "-n") ||
                          g_str_equal(a, "--progress-fd") || g_str_equal(a, "--control-fd");
    if (with_value) {
      if (argv[i + 1])
        i++;
      continue;
    }
    if (g_str_has_prefix(a, "--nproc=") || g_str_has_prefix(a, "--progress-fd=") ||
        g_str_has_prefix(a, "--control-fd="))
      continue;
    g_ptr_array_add(out, g_strdup(a));
  }
  g_ptr_array_add(out, NULL);
  return (GStrv)g_ptr_array_free(g_steal_pointer(&out), FALSE);
}

static const char exit_codes[] =
    "Exit status:\n"
    "  0    the run completed\n"
    "  1    the run failed: a bad config, a failed rank or rendezvous, a non-finite loss,\n"
    "       a write error (in spawn mode: some rank failed)\n"
    "  2    a bad command line\n"
    "  130  stopped by SIGINT, after saving a checkpoint (--resume auto goes on)\n"
    "  143  stopped by SIGTERM, after saving a checkpoint; also a rank that stopped because\n"
    "       another rank of its job was stopped\n"
    "In spawn mode (--nproc N) a SIGINT or SIGTERM to this process stops every rank, and it\n"
    "exits 130 or 143 likewise. A second signal ends a rank at once, without a checkpoint.\n"
    "\n"
    "Environment: COHORT_JOB_TOKEN, the job secret shared by the ranks (see\n"
    "docs/launching.md); spawn mode makes one when it is not set.";

/* Rank 0 warns, once, when its store can be reached from other hosts and its token derives
 * from job ids a stranger could learn. The token itself is never printed. */
static void warn_if_exposed(CohortStore *store, const CohortDistEnv *env)
{
  CohortStoreServer *server = store ? cohort_store_get_server(store) : NULL;
  if (server == NULL || !cohort_store_server_is_exposed(server) || env->secret_source != NULL)
    return;
  fprintf(stderr,
          "cohort-train: warning: the rendezvous store listens on port %d of a network address, "
          "and no job secret is set: its token derives from job ids that others on the network "
          "may learn. Export the same %s on every node (e.g. from `openssl rand -hex 16`); see "
          "docs/launching.md.\n",
          cohort_store_server_port(server), COHORT_JOB_TOKEN_VAR);
}

/* The command line. */
typedef struct {
  char *config_path;
  char *preset;
  GStrv sets;
  char *resume;
  int progress_fd;
  int control_fd;
  gboolean explain, quiet, version, overwrite;
  char *sample; /* --sample PATH */
  char *output;
  int nproc;
} Args;

static void args_clear(Args *a)
{
  g_free(a->config_path);
  g_free(a->preset);
  g_strfreev(a->sets);
  g_free(a->resume);
  g_free(a->sample);
  g_free(a->output);
}

/* Parses the command line into `a`; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, Args *a)
{
  a->progress_fd = -1;
  a->control_fd = -1;
  GOptionEntry entries[] = {
      {"config", 'c', 0, G_OPTION_ARG_FILENAME, &a->config_path, "TrainConfig JSON file", "FILE"},
      {"preset", 'p', 0, G_OPTION_ARG_STRING, &a->preset,
       "Built-in or user preset (default: tiny-gpt)", "NAME"},
      {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &a->sets, "Override one key (repeatable)",
       "KEY=VALUE"},
      {"resume", 'r', 0, G_OPTION_ARG_STRING, &a->resume,
       "Resume from the latest checkpoint in the workspace (auto) or from a checkpoint folder",
       "auto|PATH"},
      {"overwrite", 0, 0, G_OPTION_ARG_NONE, &a->overwrite,
       "Start a new run in a workspace that holds an earlier run's checkpoints, moving that "
       "run's outputs to WORKSPACE/previous/RUN-ID/",
       NULL},
      {"progress-fd", 0, 0, G_OPTION_ARG_INT, &a->progress_fd,
       "Write progress events (JSON Lines) to this file descriptor", "FD"},
      {"control-fd", 0, 0, G_OPTION_ARG_INT, &a->control_fd,
       "Read requests (\"sample\", \"save\", one per line) from this file descriptor; "
       "global rank 0 answers them at the next step",
       "FD"},
      {"nproc", 'n', 0, G_OPTION_ARG_INT, &a->nproc,
       "Spawn mode: fork N local ranks on this machine (a free port is chosen)", "N"},
      {"sample", 0, 0, G_OPTION_ARG_FILENAME, &a->sample,
       "Draw a sample from a saved model (a checkpoint folder or an exported model folder) "
       "and exit; --set changes sampling keys",
       "PATH"},
      {"output", 'o', 0, G_OPTION_ARG_FILENAME, &a->output,
       "With --sample: the image file to write (default sample-step-N.png)", "FILE"},
      {"explain", 0, 0, G_OPTION_ARG_NONE, &a->explain, "Print the resolved plan as JSON and exit",
       NULL},
      {"quiet", 'q', 0, G_OPTION_ARG_NONE, &a->quiet, "No human progress output", NULL},
      {"version", 0, 0, G_OPTION_ARG_NONE, &a->version, "Print the version and exit", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- train a model with Cohort");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_option_context_set_description(ctx, exit_codes);
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
  if (a->version) {
    printf("cohort-train %s\n", COHORT_VERSION);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "cohort-train: unexpected argument '%s' (see --help)\n", argv[1]);
    return 2;
  }
  if (a->config_path && a->preset) {
    fprintf(stderr, "cohort-train: give --config or --preset, not both\n");
    return 2;
  }
  if (a->progress_fd >= 0 && fcntl(a->progress_fd, F_GETFD) == -1) {
    fprintf(stderr, "cohort-train: --progress-fd %d is not an open file descriptor\n",
            a->progress_fd);
    return 2;
  }
  if (a->control_fd >= 0 && fcntl(a->control_fd, F_GETFD) == -1) {
    fprintf(stderr, "cohort-train: --control-fd %d is not an open file descriptor\n",
            a->control_fd);
    return 2;
  }
  if (a->control_fd >= 0 && a->control_fd == a->progress_fd) {
    fprintf(stderr,
            "cohort-train: --control-fd and --progress-fd are both %d; allowed: two "
            "different descriptors\n",
            a->control_fd);
    return 2;
  }
  return -1;
}

/* The config the command line names, with its --set overrides, validated; *source gets the
 * file it came from. */
static CohortConfig *load_config(const Args *a, char **source, GError **error)
{
  *source = a->config_path ? g_strdup(a->config_path)
                           : cohort_preset_path(a->preset ? a->preset : "tiny-gpt", error);
  if (*source == NULL)
    return NULL;
  g_autoptr(CohortConfig) cfg = cohort_config_load_file(*source, error);
  if (!cfg)
    return NULL;
  if (a->sets &&
      !cohort_config_apply_assignments(cfg, (const char *const *)a->sets, "--set", error))
    return NULL;
  if (!cohort_config_validate(cfg, *source, error))
    return NULL;
  return g_steal_pointer(&cfg);
}

/* Meets the job's other ranks: the store (rank 0 hosts it), the config check, then the
 * collectives on `cuda_device` (NCCL) or the CPU (Gloo). */
static gboolean join_job(const CohortDistEnv *env, const CohortConfig *cfg, int cuda_device,
                         CohortStore **store, CohortComm **comm, GError **error)
{
  g_autofree char *token = cohort_dist_job_token(env);
  *store = cohort_store_open(env, token, cfg->timeout_s, error);
  explicit_bzero(token, strlen(token));
  if (*store == NULL)
    return FALSE;
  warn_if_exposed(*store, env);
  if (!cohort_dist_check_config(*store, env, cfg, cfg->timeout_s, error))
    return FALSE;
  if (cfg->distributed_backend == COHORT_BACKEND_NCCL)
    *comm = cohort_comm_new_nccl(*store, env, cuda_device, cfg->timeout_s, error);
  else
    *comm = cohort_comm_new_gloo(*store, env, cfg->timeout_s, error);
  return *comm != NULL;
}

/* --sample: one sample from a saved model; prints where the image went (or the text). */
static int sample_saved(const Args *a)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) f =
      cohort_sample_saved(a->sample, (const char *const *)a->sets, a->output, &error);
  if (!f)
    return fail(NULL, 0, error->message);
  if (json_object_has_member(f, "image"))
    printf("%s\n", json_object_get_string_member(f, "image"));
  else if (json_object_has_member(f, "text"))
    printf("%s\n", json_object_get_string_member(f, "text"));
  return 0;
}

/* Everything after the command line: spawn mode, or this rank's run. */
static int run(const Args *a, char **original_argv)
{
  if (a->sample)
    return sample_saved(a);
  g_autoptr(GError) error = NULL;
  g_autofree char *source = NULL;
  g_autoptr(CohortConfig) cfg = load_config(a, &source, &error);
  if (!cfg)
    return fail(NULL, 0, error->message);
  int nproc = a->nproc;
  int progress_fd = a->progress_fd;

  if (a->explain) {
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
    int status = cohort_launch_spawn_fds((const char *const *)worker_argv, nproc, progress_fd,
                                         a->control_fd, &error);
    if (error)
      return fail(NULL, 0, error->message);
    return status;
  }

  /* Before the first thread of this rank (progress recorder, Gloo, OpenMP) starts. */
  cohort_stop_signals_start();
  signal(SIGPIPE, SIG_IGN);
  g_autoptr(CohortDistEnv) env = cohort_dist_env_from_environ(NULL, &error);
  if (!env)
    return fail(NULL, 0, error->message);
  gboolean rank0 = env->rank == 0;
  g_autoptr(CohortProgress) progress =
      cohort_progress_new(rank0 ? progress_fd : -1, rank0 && !a->quiet);
  /* Rank 0 keeps the run record: events.jsonl and TensorBoard scalars in the workspace. */
  if (rank0)
    cohort_progress_set_recorder(progress, cohort_run_record_new());
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
    if (!join_job(env, cfg, device.cuda_device, &store, &comm, &error))
      return fail_rank(progress, env->rank, error->message);
  }

  /* A restarted group resumes from its checkpoint, whoever restarted it (cohort-run also
   * passes --resume auto; torchrun only sets the restart count). */
  const char *resume = a->resume;
  if (!resume && env->restart_count > 0)
    resume = "auto";

  cohort_stop_signals_arm(&stop_requested);
  /* Only global rank 0 answers requests; the others learn of them in the step vote. */
  g_autoptr(CohortControl) control =
      rank0 && a->control_fd >= 0 ? cohort_control_new(a->control_fd) : NULL;
  CohortTrainOptions opts = {
      .config_source = source,
      .resume = resume,
      /* A restart of the group (cohort-run adds --resume auto) continues the run it started. */
      .overwrite = a->overwrite && !resume,
      .progress = progress,
      .rank = env->rank,
      .world_size = env->world_size,
      .local_rank = env->local_rank,
      .local_world_size = env->local_world_size,
      .comm = comm,
      .device = &device,
      .stop_flag = &stop_requested,
      .control = control,
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
  /* A stopped run is not a completed one: 128 + the signal, as a shell reports it. A rank
   * stopped by its peers' vote, without a signal of its own, says SIGTERM. */
  if (stopped)
    return 128 + (stop_requested ? stop_requested : SIGTERM);
  return 0;
}

int main(int argc, char **argv)
{
  /* The user's locale, so arguments convert from its character set (--set
   * sample_prompt=Über); numbers stay in the C locale's spelling everywhere (0.5, never 0,5),
   * in what is parsed and in what is written. */
  setlocale(LC_ALL, "");
  setlocale(LC_NUMERIC, "C");
  cohort_cpu_threading_env(argv);
  g_auto(GStrv) original_argv = g_strdupv(argv);
  Args args = {0};
  int status = parse_args(argc, argv, &args);
  if (status >= 0) {
    args_clear(&args);
    return status;
  }
  status = run(&args, original_argv);
  args_clear(&args);
  return status;
}
