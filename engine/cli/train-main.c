/* cohort-train: one engine process (a rank). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cohort-build-config.h"
#include "engine/config.h"
#include "engine/explain.h"
#include "engine/progress.h"
#include "engine/trainer.h"

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

int main(int argc, char **argv)
{
  g_autofree char *config_path = NULL;
  g_autofree char *preset = NULL;
  g_auto(GStrv) sets = NULL;
  g_autofree char *resume = NULL;
  int progress_fd = -1;
  gboolean explain = FALSE, quiet = FALSE, version = FALSE;
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
      {"explain", 0, 0, G_OPTION_ARG_NONE, &explain, "Print the resolved plan as JSON and exit",
       NULL},
      {"quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "No human progress output", NULL},
      {"version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  g_autoptr(GOptionContext) ctx = g_option_context_new("- train a model with Cohort");
  g_option_context_add_main_entries(ctx, entries, NULL);
  g_autoptr(GError) error = NULL;
  if (!g_option_context_parse(ctx, &argc, &argv, &error)) {
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
    fprintf(stderr, "cohort-train: --progress-fd %d is not an open file descriptor\n",
            progress_fd);
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
  for (guint i = 0; sets && sets[i]; i++) {
    if (!cohort_config_set_assignment(cfg, sets[i], "--set", &error))
      return fail(NULL, 0, error->message);
  }
  if (!cohort_config_validate(cfg, source, &error))
    return fail(NULL, 0, error->message);

  if (explain) {
    g_autofree char *plan = cohort_explain(cfg, 1, 8, &error);
    if (!plan)
      return fail(NULL, 0, error->message);
    printf("%s\n", plan);
    return 0;
  }

  install_signal_handlers();
  g_autoptr(CohortProgress) progress = cohort_progress_new(progress_fd, !quiet);
  CohortTrainOptions opts = {
      .config_source = source,
      .resume = resume,
      .progress = progress,
      .rank = 0,
      .world_size = 1,
      .local_rank = 0,
      .local_world_size = 1,
      .comm = NULL,
      .stop_flag = &stop_requested,
  };
  gboolean stopped = FALSE;
  if (!cohort_train(cfg, &opts, &stopped, &error))
    return fail(progress, 0, error->message);
  return 0;
}
