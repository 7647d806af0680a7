/* cohort-train: one engine process (a rank). */
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cohort-build-config.h"
#include "engine/config/config.h"
#include "engine/config/presets.h"
#include "engine/distributed/env.h"
#include "engine/distributed/group.h"
#include "engine/distributed/launcher.h"
#include "engine/train/explain.h"
#include "engine/launch/build-info.h"
#include "engine/train/memory-plan.h"
#include "engine/train/probe.h"
#include "engine/cli/stop-signals.h"
#include "engine/launch/launch-plan.h"
#include "engine/base/json-write.h"
#include "engine/train/node-check.h"
#include "engine/train/perplexity.h"
#include "engine/train/sample-saved.h"
#include "engine/progress/progress.h"
#include "engine/train/trainer.h"
#include "kernels/cpu/threading.h"

/* The signal that asked this rank to stop, 0 = none (engine/cli/stop-signals.h). */
static volatile int stop_requested;

static int fail(CohortProgress *progress, int rank, const char *raw)
{
  /* A path from a foreign system may hold bytes that are not UTF-8: shown as \xHH. */
  g_autofree char *message = cohort_utf8_escape(raw);
  if (progress) {
    cohort_progress_finish_line(progress);
    JsonObject *e = json_object_new();
    json_object_set_int_member(e, COHORT_FIELD_RANK, rank);
    json_object_set_string_member(e, COHORT_FIELD_MESSAGE, message);
    cohort_progress_emit(progress, COHORT_EVENT_ERROR, e);
    JsonObject *d = json_object_new();
    json_object_set_string_member(d, COHORT_FIELD_STATUS, COHORT_STATUS_FAILED);
    cohort_progress_emit(progress, COHORT_EVENT_DONE, d);
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

/* The command each rank of a group this process starts runs: this program with the same
 * options, minus --nproc (ranks must not spawn again), --progress-fd and --control-fd (the
 * launcher gives them to rank 0) and --explain. */
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
        g_str_has_prefix(a, "--control-fd=") || g_str_equal(a, "--explain"))
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

/* The command line. */
typedef struct {
  char *config_path;
  char *preset;
  GStrv sets;
  char *resume;
  int progress_fd;
  int control_fd;
  gboolean explain, quiet, version, overwrite, probe;
  char *sample;     /* --sample PATH */
  char *perplexity; /* --perplexity FILE */
  char *output;
  int nproc;
  int local_rank, local_rank_dash; /* --local_rank, --local-rank; -1 = not given */
} Args;

static void args_clear(Args *a)
{
  g_free(a->config_path);
  g_free(a->preset);
  g_strfreev(a->sets);
  g_free(a->resume);
  g_free(a->sample);
  g_free(a->perplexity);
  g_free(a->output);
}

/* --local_rank N (torch.distributed.launch passes it) must agree with LOCAL_RANK; without
 * LOCAL_RANK it becomes LOCAL_RANK. Returns -1 to go on, else the exit status. */
static int check_local_rank(Args *a)
{
  if (a->local_rank >= 0 && a->local_rank_dash >= 0 && a->local_rank != a->local_rank_dash) {
    fprintf(stderr, "cohort-train: --local_rank %d and --local-rank %d disagree\n", a->local_rank,
            a->local_rank_dash);
    return 2;
  }
  int given = a->local_rank >= 0 ? a->local_rank : a->local_rank_dash;
  if (given < 0)
    return -1;
  g_autofree char *text = g_strdup_printf("%d", given);
  const char *env = g_getenv("LOCAL_RANK");
  if (env != NULL && g_strcmp0(env, text) != 0) {
    fprintf(stderr,
            "cohort-train: --local_rank %d but LOCAL_RANK=%s; the launcher must give one local "
            "rank (leave out --local_rank, or make them equal)\n",
            given, env);
    return 2;
  }
  g_setenv("LOCAL_RANK", text, TRUE);
  return -1;
}

/* Parses the command line into `a`; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, Args *a)
{
  a->progress_fd = -1;
  a->control_fd = -1;
  a->local_rank = a->local_rank_dash = -1;
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
      {"local_rank", 0, 0, G_OPTION_ARG_INT, &a->local_rank,
       "This process's local rank, as torch.distributed.launch passes it; checked against "
       "LOCAL_RANK",
       "N"},
      {"local-rank", 0, 0, G_OPTION_ARG_INT, &a->local_rank_dash, "The same as --local_rank", "N"},
      {"sample", 0, 0, G_OPTION_ARG_FILENAME, &a->sample,
       "Draw a sample from a saved model (a checkpoint folder or an exported model folder) "
       "and exit; --set changes sampling keys",
       "PATH"},
      {"perplexity", 0, 0, G_OPTION_ARG_FILENAME, &a->perplexity,
       "With --sample, score FILE instead of sampling: encode it with the model's tokenizer "
       "(or as bytes), print \"loss X perplexity Y over N tokens\" (X the mean next-token "
       "cross-entropy in nats, Y = exp(X), N the tokens predicted, all but the first) and exit; "
       "a text longer than seq_len is scored in windows of seq_len that do not overlap, each "
       "token predicted from those of its window before it (text families: gpt, llama)",
       "FILE"},
      {"output", 'o', 0, G_OPTION_ARG_FILENAME, &a->output,
       "With --sample: the image file to write (default sample-step-N.png)", "FILE"},
      {"explain", 0, 0, G_OPTION_ARG_NONE, &a->explain, "Print the resolved plan as JSON and exit",
       NULL},
      {"probe", 0, 0, G_OPTION_ARG_NONE, &a->probe,
       "Start the group the config asks for, measure one step's compute and the collectives "
       "between the ranks, print the scaling forecast (and write WORKSPACE/probe.json), and "
       "exit without training",
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
  if (a->probe && a->sample) {
    fprintf(stderr, "cohort-train: give --probe or --sample, not both\n");
    return 2;
  }
  if (a->perplexity && !a->sample) {
    fprintf(stderr, "cohort-train: --perplexity scores a saved model: give --sample PATH too\n");
    return 2;
  }
  if (a->perplexity && a->output) {
    fprintf(stderr, "cohort-train: --perplexity writes no file: leave out --output\n");
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
  g_autoptr(GError) control_error = NULL;
  if (a->control_fd >= 0 && !cohort_control_check_fd(a->control_fd, &control_error)) {
    fprintf(stderr, "cohort-train: %s\n", control_error->message);
    return 2;
  }
  if (a->control_fd >= 0 && a->control_fd == a->progress_fd) {
    fprintf(stderr,
            "cohort-train: --control-fd and --progress-fd are both %d; allowed: two "
            "different descriptors\n",
            a->control_fd);
    return 2;
  }
  if (a->nproc < 0 || a->nproc > 1024) {
    fprintf(stderr, "cohort-train: --nproc %d is not allowed; allowed: 1 to 1024\n", a->nproc);
    return 2;
  }
  return check_local_rank(a);
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

/* --sample --perplexity: the saved model's loss on a text. */
static int perplexity_saved(const Args *a)
{
  g_autoptr(GError) error = NULL;
  double loss = 0;
  gint64 n = 0;
  if (!cohort_perplexity_saved(a->sample, (const char *const *)a->sets, a->perplexity, &loss, &n,
                               &error))
    return fail(NULL, 0, error->message);
  printf("loss %.6f perplexity %.6f over %" G_GINT64_FORMAT " tokens\n", loss, exp(loss), n);
  return 0;
}

/* --sample: one sample from a saved model; prints where the image went (or the text). */
static int sample_saved(const Args *a)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) f =
      cohort_sample_saved(a->sample, (const char *const *)a->sets, a->output, &error);
  if (!f)
    return fail(NULL, 0, error->message);
  if (json_object_has_member(f, COHORT_FIELD_IMAGE))
    printf("%s\n", json_object_get_string_member(f, COHORT_FIELD_IMAGE));
  else if (json_object_has_member(f, COHORT_FIELD_TEXT))
    printf("%s\n", json_object_get_string_member(f, COHORT_FIELD_TEXT));
  return 0;
}

/* The launch plan of `cfg` here: a rank of the launcher that started this process, or the
 * group the config (or --nproc, spawn mode) asks for on this machine. */
static CohortLaunchPlan *make_plan(const Args *a, const CohortConfig *cfg, const char *source,
                                   const CohortDistEnv *env, GError **error)
{
  g_autoptr(CohortConfig) planned = cohort_config_copy(cfg);
  if (a->nproc > 0) {
    planned->enable_multi_gpu = TRUE;
    planned->nproc_per_node = a->nproc;
    planned->use_torchrun = FALSE;
  }
  gboolean launched = !g_str_equal(env->source, "single");
  CohortMachine machine = {
      .launched_by = launched ? env->source : NULL,
      .launched_world_size = env->world_size,
      .launched_local_size = env->local_world_size,
  };
  /* Counting GPUs runs nvidia-smi: only when the count decides something. */
  if (!launched && planned->enable_multi_gpu && planned->device != COHORT_DEVICE_CPU)
    machine.gpus = cohort_machine_count_gpus();
  return cohort_launch_plan_new(planned, source, &machine, error);
}

/* `name` next to this program (an installed or built cohort-train has cohort-run beside it),
 * else on PATH; NULL when neither has it. */
static char *sibling_program(const char *name)
{
  g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
  if (self != NULL) {
    g_autofree char *dir = g_path_get_dirname(self);
    g_autofree char *beside = g_build_filename(dir, name, NULL);
    if (g_file_test(beside, G_FILE_TEST_IS_EXECUTABLE))
      return g_steal_pointer(&beside);
  }
  return g_find_program_in_path(name);
}

/* The plan's command line, starting this command's ranks (the worker command). */
static GStrv plan_argv(const CohortLaunchPlan *plan, GStrv worker, const char *run_program,
                       int progress_fd, int control_fd)
{
  CohortLaunchArgs args = {.train_program = worker[0],
                           .run_program = run_program,
                           .train_args = (const char *const *)worker + 1,
                           .progress_fd = progress_fd,
                           .control_fd = control_fd};
  return cohort_launch_plan_argv(plan, -1, &args);
}

/* One rank: its device, its group, the training. */
static int run_rank(const Args *a, const CohortConfig *cfg, const char *source,
                    const CohortDistEnv *env)
{
  g_autoptr(GError) error = NULL;
  /* Before the first thread of this rank (progress recorder, Gloo, OpenMP) starts. */
  cohort_stop_signals_start();
  signal(SIGPIPE, SIG_IGN);
  gboolean rank0 = env->rank == 0;
  g_autoptr(CohortProgress) progress =
      cohort_progress_new(rank0 ? a->progress_fd : -1, rank0 && !a->quiet);
  /* Rank 0 keeps the run record: events.jsonl and TensorBoard scalars in the workspace. */
  if (rank0)
    cohort_progress_set_recorder(progress, cohort_run_record_new());
  /* The rank's device first: NCCL is created on it. */
  CohortComputeDevice device;
  if (!cohort_device_select(cfg, source, env->local_rank, env->local_world_size, &device, &error))
    return fail_rank(progress, env->rank, error->message);
  /* Before the rendezvous and before anything large is allocated: every rank of the node
   * finds the same, and local rank 0 tells. */
  g_autofree char *crowded = NULL;
  if (!cohort_node_check(cfg, source, device.cuda_device < 0, env->local_world_size, &crowded,
                         &error))
    return fail_rank(progress, env->rank, error->message);
  if (crowded && rank0)
    cohort_progress_log(progress, COHORT_LEVEL_WARNING, "%s", crowded);
  else if (crowded && env->local_rank == 0)
    fprintf(stderr, "cohort-train: rank %d: warning: %s\n", env->rank, crowded);
  g_autoptr(CohortDistGroup) group =
      cohort_dist_group_join(env, cfg, source, device.cuda_device, &error);
  if (group == NULL)
    return fail_rank(progress, env->rank, error->message);

  /* A restarted group resumes from its checkpoint, whoever restarted it (cohort-run also
   * passes --resume auto; torchrun only sets the restart count). */
  const char *resume = a->resume;
  if (!resume && env->restart_count > 0)
    resume = "auto";

  cohort_stop_signals_arm(&stop_requested);
  /* Only global rank 0 answers requests; the others learn of them in the step vote. */
  g_autoptr(CohortControl) control =
      rank0 && a->control_fd >= 0 ? cohort_control_new(a->control_fd, NULL) : NULL;
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
      .comm = group->comm,
      .store = group->store,
      .device = &device,
      .stop_flag = &stop_requested,
      .control = control,
  };
  gboolean stopped = FALSE;
  if (a->probe ? !cohort_probe(cfg, &opts, &error) : !cohort_train(cfg, &opts, &stopped, &error)) {
    /* Peers blocked in a collective with this rank fail now instead of at their timeout. */
    if (group->comm)
      cohort_comm_abort(group->comm, error->message);
    return fail_rank(progress, env->rank, error->message);
  }
  /* Rank 0 hosts the store: everyone is done with it before it goes away. */
  if (group->comm && !cohort_comm_barrier(group->comm, 0, &error))
    return fail_rank(progress, env->rank, error->message);
  /* A stopped run is not a completed one: 128 + the signal, as a shell reports it. A rank
   * stopped by its peers' vote, without a signal of its own, says SIGTERM. */
  if (stopped)
    return 128 + (stop_requested ? stop_requested : SIGTERM);
  return 0;
}

/* Everything after the command line: the plan, then this rank's run, or the group it asks
 * for (spawn mode, or cohort-run in this process's place). */
static int run(const Args *a, char **original_argv)
{
  if (a->sample)
    return a->perplexity ? perplexity_saved(a) : sample_saved(a);
  g_autoptr(GError) error = NULL;
  g_autofree char *source = NULL;
  g_autoptr(CohortConfig) cfg = load_config(a, &source, &error);
  if (!cfg)
    return fail(NULL, 0, error->message);
  g_autoptr(CohortDistEnv) env = cohort_dist_env_from_environ(NULL, &error);
  if (!env)
    return fail(NULL, 0, error->message);
  if (a->nproc > 0 && !g_str_equal(env->source, "single")) {
    fprintf(stderr,
            "cohort-train: --nproc %d starts processes itself, but %s started this one as rank "
            "%d of %d; leave out --nproc under a launcher\n",
            a->nproc, env->source, env->rank, env->world_size);
    return 2;
  }
  g_autoptr(CohortLaunchPlan) plan = make_plan(a, cfg, source, env, &error);
  if (!plan)
    return fail(NULL, 0, error->message);
  g_auto(GStrv) worker = worker_command(original_argv);
  g_autofree char *run_program =
      plan->kind == COHORT_LAUNCH_COHORT_RUN || a->explain ? sibling_program("cohort-run") : NULL;

  if (a->explain) {
    g_auto(GStrv) argv = plan_argv(plan, worker, run_program ? run_program : "cohort-run",
                                   a->progress_fd, a->control_fd);
    g_autofree char *text = cohort_explain(cfg, plan, (const char *const *)argv, 8, &error);
    if (!text)
      return fail(NULL, 0, error->message);
    printf("%s\n", text);
    return 0;
  }
  /* CPU ranks that cannot fit in this machine's memory together are refused before any
   * starts (GPU ranks check their device when they start). */
  if (cfg->device == COHORT_DEVICE_CPU || !cohort_build_has_cuda()) {
    CohortMemoryPlan mem;
    if (!cohort_memory_plan(cfg, plan->world_size, plan->local_processes, &mem, &error) ||
        !cohort_memory_plan_check_host(&mem, cfg, cohort_machine_memory_bytes(), &error))
      return fail(NULL, 0, error->message);
  }
  if (plan->kind == COHORT_LAUNCH_SPAWN) {
    /* Spawn mode: this process becomes the supervisor of the local ranks. */
    int status = cohort_launch_spawn_fds((const char *const *)worker, plan->local_processes,
                                         a->progress_fd, a->control_fd, &error);
    if (error)
      return fail(NULL, 0, error->message);
    return status;
  }
  if (plan->kind == COHORT_LAUNCH_COHORT_RUN) {
    if (run_program == NULL)
      return fail(NULL, 0,
                  "use_torchrun is true but cohort-run is neither next to cohort-train nor on "
                  "PATH; install it, or set use_torchrun false (spawn mode)");
    /* cohort-run takes this process's place: its exit status and signals are the run's. */
    g_auto(GStrv) argv = plan_argv(plan, worker, run_program, a->progress_fd, a->control_fd);
    fflush(NULL);
    execv(argv[0], argv);
    g_autofree char *msg = g_strdup_printf("cannot run %s: %s", argv[0], g_strerror(errno));
    return fail(NULL, 0, msg);
  }
  return run_rank(a, cfg, source, env);
}

int main(int argc, char **argv)
{
  /* The user's locale, so arguments convert from its character set (--set
   * sample_prompt=Über); numbers stay in the C locale's spelling everywhere (0.5, never 0,5),
   * in what is parsed and in what is written. */
  setlocale(LC_ALL, "");
  setlocale(LC_NUMERIC, "C");
  cohort_cpu_threading_env(argv);
  /* GPU numbers (device_indexes, CUDA_VISIBLE_DEVICES, the logs) are nvidia-smi's, in PCI bus
   * order, unless the user chose otherwise: CUDA's default order puts the fastest GPU first,
   * so on a machine with two kinds of GPU CUDA's device 1 is not the user's GPU 1. Before the
   * first CUDA call; the ranks this process starts inherit it. */
  g_setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", FALSE);
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
