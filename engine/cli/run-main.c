/* cohort-run: torchrun's equivalent. Starts this node's ranks of a program with torchrun's
 * environment and supervises them; or prints the cluster launch commands for a config. */
#include "cohort-build-config.h"
#include "engine/config/config.h"
#include "engine/distributed/env.h"
#include "engine/distributed/launcher.h"
#include "engine/launch/launch-commands.h"
#include "engine/launch/launch-plan.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "Usage: cohort-run [OPTIONS] PROGRAM [ARGS...]\n"
    "       cohort-run --print-commands --config FILE\n"
    "\n"
    "Starts nproc-per-node ranks of PROGRAM on this node with torchrun's environment (RANK,\n"
    "LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...) and supervises them: when one fails, the others\n"
    "are stopped and the group is restarted up to --max-restarts times (with --resume auto).\n"
    "Options take '-' or '_' (--nproc-per-node, --nproc_per_node) and '--opt VALUE' or\n"
    "'--opt=VALUE'.\n"
    "\n"
    "  --nnodes N              number of nodes (default 1; static membership only)\n"
    "  --nproc-per-node N      ranks on this node: a number, auto, cpu or gpu (default 1)\n"
    "  --node-rank N           this node's index, 0 to nnodes-1 (default 0)\n"
    "  --master-addr HOST      host of global rank 0 (default 127.0.0.1)\n"
    "  --master-port PORT      port of rank 0's store (default 29500)\n"
    "  --rdzv-endpoint H:P     same as --master-addr H --master-port P\n"
    "  --rdzv-backend static   the only membership this launcher supports (c10d is taken\n"
    "                          as static)\n"
    "  --rdzv-id ID            the job id (TORCHELASTIC_RUN_ID; default: random on one node,\n"
    "                          none on several)\n"
    "  --standalone            one node, a free port on 127.0.0.1, a random run id\n"
    "  --max-restarts N        restarts of the whole group after a failure (default 0)\n"
    "  --monitor-interval S    seconds between checks of the workers (default 0.1)\n"
    "  --grace-period S        seconds from SIGTERM to SIGKILL when stopping (default 10)\n"
    "  --log-dir DIR           per-rank logs in DIR/attempt_K/rank_N/{stdout,stderr}.log\n"
    "  --progress-fd N         pass this descriptor (and --progress-fd N) to global rank 0\n"
    "  --control-fd N          pass this descriptor (and --control-fd N) to global rank 0:\n"
    "                          the run's control channel (docs/progress-protocol.md)\n"
    "  --hold-port             hold the store's port for the whole job and give it to rank 0\n"
    "                          (COHORT_STORE_FDS); the default when PROGRAM is cohort-train\n"
    "  --no-python             accepted for torchrun compatibility (always the case)\n"
    "  --quiet                 no launcher messages except failures\n"
    "  --probe                 give the workers --probe: they measure compute and the\n"
    "                          collectives between them and print the scaling forecast\n"
    "                          instead of training (cohort-train --help); no restarts\n"
    "  --print-commands        print the cohort-run, torchrun, srun, sbatch and mpirun\n"
    "                          commands for --config FILE and exit\n"
    "  --config FILE           the config for --print-commands\n"
    "  --version, --help\n"
    "\n"
    "Environment: COHORT_JOB_TOKEN, the job secret from which the ranks derive the\n"
    "rendezvous store's token (16 to 4096 characters). On one node cohort-run makes a random\n"
    "one when it is not set; with --nnodes > 1 export the same one on every node. It reaches\n"
    "the workers through their environment, never their command line.\n"
    "\n"
    "Exit status:\n"
    "  0    every worker exited 0\n"
    "  1    the group failed (a worker exited non-zero or was killed, including a worker\n"
    "       stopped by a signal cohort-run did not send) after any restarts, or could not\n"
    "       start: e.g. the store's port is taken (not retried)\n"
    "  2    a bad command line or COHORT_JOB_TOKEN\n"
    "  129, 130, 143  stopped by SIGHUP, SIGINT or SIGTERM to cohort-run (128 + the signal);\n"
    "       the workers got SIGTERM and saved a checkpoint\n";

static int fail(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static int fail(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  fprintf(stderr, "cohort-run: %s\n", msg);
  return 2;
}

static gboolean parse_int(const char *flag, const char *text, int min, int max, int *out)
{
  char *end = NULL;
  gint64 v = g_ascii_strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > max) {
    fail("%s \"%s\" is not allowed; expected a whole number from %d to %d", flag, text, min, max);
    return FALSE;
  }
  *out = (int)v;
  return TRUE;
}

static gboolean parse_double(const char *flag, const char *text, double min, double *out)
{
  char *end = NULL;
  double v = g_ascii_strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= min) || v > 1e9) {
    fail("%s \"%s\" is not allowed; expected a number of seconds, at least %g", flag, text, min);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

static int print_commands(const char *config_path)
{
  if (config_path == NULL)
    return fail("--print-commands needs --config FILE");
  g_autoptr(GError) error = NULL;
  g_autoptr(CohortConfig) cfg = cohort_config_load_file(config_path, &error);
  if (cfg == NULL)
    return fail("%s", error->message);
  g_autoptr(GPtrArray) cmds = cohort_launch_commands(cfg, config_path, NULL, NULL, &error);
  if (cmds == NULL)
    return fail("%s", error->message);
  /* The plan the commands carry out, on nodes whose GPUs are not known here. */
  CohortMachine nodes = {.gpus = -1};
  g_autoptr(CohortLaunchPlan) plan = cohort_launch_plan_new(cfg, config_path, &nodes, &error);
  g_assert(plan != NULL); /* cohort_launch_commands made the same plan */
  g_autofree char *summary = cohort_launch_plan_describe(plan);
  g_autofree char *text = cohort_launch_commands_to_text(cmds);
  printf("# Plan: %s\n\n%s", summary, text);
  return 0;
}

/* Flags that take a value, by their dashed name. */
static const char *const valued[] = {"--nnodes",
                                     "--nproc-per-node",
                                     "--node-rank",
                                     "--master-addr",
                                     "--master-port",
                                     "--max-restarts",
                                     "--monitor-interval",
                                     "--log-dir",
                                     "--progress-fd",
                                     "--control-fd",
                                     "--rdzv-id",
                                     "--run-id",
                                     "--rdzv-endpoint",
                                     "--rdzv-backend",
                                     "--grace-period",
                                     "--config",
                                     NULL};

/* What the options set beside the launch options. */
typedef struct {
  gboolean standalone, print, port_given, probe;
  const char *nproc_text;
  char *config_path;
} Parsed;

static void parsed_clear(Parsed *p)
{
  g_free(p->config_path);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Parsed, parsed_clear)

/* Applies option `name` (dashed, e.g. "--nnodes") with `value` (NULL for a flag; `arg` is
 * the option as given, for messages). Returns -1 to go on, else the exit status. */
static int apply_option(CohortLaunchOptions *o, Parsed *st, const char *arg, const char *name,
                        const char *value)
{
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
    fputs(usage, stdout);
    return 0;
  } else if (strcmp(name, "--version") == 0) {
    printf("cohort-run %s\n", COHORT_VERSION);
    return 0;
  } else if (strcmp(name, "--nnodes") == 0) {
    if (strchr(value, ':') != NULL)
      return fail("--nnodes %s: elastic ranges (MIN:MAX) are not supported; membership is "
                  "static, give one number",
                  value);
    if (!parse_int(name, value, 1, 100000, &o->nnodes))
      return 2;
  } else if (strcmp(name, "--nproc-per-node") == 0) {
    st->nproc_text = value;
  } else if (strcmp(name, "--node-rank") == 0) {
    if (!parse_int(name, value, 0, 100000, &o->node_rank))
      return 2;
  } else if (strcmp(name, "--master-addr") == 0) {
    if (value[0] == '\0')
      return fail("--master-addr is empty; give a host name or address");
    g_free(o->master_addr);
    o->master_addr = g_strdup(value);
  } else if (strcmp(name, "--master-port") == 0) {
    if (!parse_int(name, value, 1, 65535, &o->master_port))
      return 2;
    st->port_given = TRUE;
  } else if (strcmp(name, "--rdzv-endpoint") == 0) {
    const char *colon = strrchr(value, ':');
    if (colon == NULL || colon == value)
      return fail("--rdzv-endpoint \"%s\" is not HOST:PORT", value);
    g_autofree char *host = g_strndup(value, colon - value);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
      char *inner = g_strndup(host + 1, strlen(host) - 2);
      g_free(host);
      host = inner;
    }
    if (!parse_int(name, colon + 1, 1, 65535, &o->master_port))
      return 2;
    st->port_given = TRUE;
    g_free(o->master_addr);
    o->master_addr = g_steal_pointer(&host);
  } else if (strcmp(name, "--rdzv-backend") == 0) {
    if (strcmp(value, "static") != 0 && strcmp(value, "c10d") != 0)
      return fail("--rdzv-backend %s is not supported; membership is static (static, or c10d "
                  "taken as static)",
                  value);
  } else if (strcmp(name, "--rdzv-id") == 0 || strcmp(name, "--run-id") == 0) {
    g_free(o->run_id);
    o->run_id = g_strdup(value);
  } else if (strcmp(name, "--standalone") == 0) {
    st->standalone = TRUE;
  } else if (strcmp(name, "--max-restarts") == 0) {
    if (!parse_int(name, value, 0, 100000, &o->max_restarts))
      return 2;
  } else if (strcmp(name, "--monitor-interval") == 0) {
    if (!parse_double(name, value, 0.001, &o->monitor_interval))
      return 2;
  } else if (strcmp(name, "--grace-period") == 0) {
    if (!parse_double(name, value, 0, &o->grace_period))
      return 2;
  } else if (strcmp(name, "--log-dir") == 0) {
    g_free(o->log_dir);
    o->log_dir = g_strdup(value);
  } else if (strcmp(name, "--progress-fd") == 0) {
    if (!parse_int(name, value, 0, 1 << 20, &o->progress_fd))
      return 2;
  } else if (strcmp(name, "--control-fd") == 0) {
    if (!parse_int(name, value, 0, 1 << 20, &o->control_fd))
      return 2;
  } else if (strcmp(name, "--hold-port") == 0) {
    o->hold_port = TRUE;
  } else if (strcmp(name, "--no-python") == 0) {
    /* our workers are always programs */
  } else if (strcmp(name, "--quiet") == 0) {
    o->quiet = TRUE;
  } else if (strcmp(name, "--print-commands") == 0) {
    st->print = TRUE;
  } else if (strcmp(name, "--probe") == 0) {
    st->probe = TRUE;
  } else if (strcmp(name, "--config") == 0) {
    g_free(st->config_path);
    st->config_path = g_strdup(value);
  } else {
    return fail("unknown option %s (see --help)", arg);
  }
  return -1;
}

int main(int argc, char **argv)
{
  /* The user's locale for messages and character sets; numbers keep the C spelling. */
  setlocale(LC_ALL, "");
  setlocale(LC_NUMERIC, "C");
  g_set_prgname("cohort-run");
  g_autoptr(CohortLaunchOptions) o = cohort_launch_options_new();
  o->master_port = 29500;
  g_auto(Parsed) st = {.nproc_text = "1"};
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-')
      break;
    /* --opt_name=value → --opt-name, value */
    g_autofree char *name = NULL;
    const char *value = NULL;
    const char *eq = strchr(a, '=');
    name = eq ? g_strndup(a, eq - a) : g_strdup(a);
    for (char *p = name + 2; *p; p++)
      if (*p == '_')
        *p = '-';
    gboolean takes_value = g_strv_contains(valued, name);
    if (takes_value) {
      if (eq != NULL)
        value = eq + 1;
      else if (i + 1 < argc)
        value = argv[++i];
      else
        return fail("%s needs a value (see --help)", name);
    } else if (eq != NULL) {
      return fail("%s takes no value", name);
    }

    int status = apply_option(o, &st, a, name, value);
    if (status >= 0)
      return status;
  }
  if (st.print)
    return print_commands(st.config_path);
  if (i >= argc)
    return fail("no program given; usage: cohort-run [OPTIONS] PROGRAM [ARGS...]");

  g_autoptr(GError) error = NULL;
  o->nproc_per_node = cohort_launch_resolve_nproc(st.nproc_text, "--nproc-per-node", &error);
  if (o->nproc_per_node < 0)
    return fail("%s", error->message);
  if (st.standalone) {
    if (o->nnodes != 1)
      return fail("--standalone runs one node, but --nnodes is %d", o->nnodes);
    if (st.port_given)
      return fail("--standalone picks a free port itself; leave out --master-port");
    g_free(o->master_addr);
    o->master_addr = g_strdup("127.0.0.1");
    o->master_port = 0;
    if (o->run_id == NULL)
      o->run_id = g_uuid_string_random();
  }
  o->argv = g_strdupv(argv + i);
  /* cohort-train serves on the port the launcher holds; another program (a PyTorch script
   * with its own TCPStore) binds MASTER_PORT itself, so the port is only checked for it. */
  g_autofree char *program = g_path_get_basename(o->argv[0]);
  if (g_str_equal(program, "cohort-train"))
    o->hold_port = TRUE;
  if (st.probe) {
    /* A probe measures and exits: nothing to restart, and the workers are told. */
    guint n = g_strv_length(o->argv);
    o->argv = g_renew(char *, o->argv, n + 2);
    o->argv[n] = g_strdup("--probe");
    o->argv[n + 1] = NULL;
    o->max_restarts = 0;
  }
  g_autoptr(CohortLaunchResult) r = cohort_launch_run(o, &error);
  if (r == NULL) {
    int status = fail("%s", error->message);
    /* Bad input is 2; a launch that could not start (a taken port, a system error) is 1. */
    gboolean bad_input = g_error_matches(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_INVALID) ||
                         g_error_matches(error, COHORT_DIST_ERROR, COHORT_DIST_ERROR_ENV);
    return bad_input ? status : 1;
  }
  return cohort_launch_exit_status(r);
}
