/* Launch commands for a config on a cluster: cohort-train, cohort-run, torchrun, srun, sbatch,
 * mpirun. */
#include "engine/launch/launch-commands.h"

#include <string.h>

#include "engine/launch/launch-plan.h"
#include "engine/base/secret.h"

/* A fresh secret drawn by the shell that runs a command once (srun, sbatch, mpirun, a
 * single-node torchrun): never shown, never stored. */
#define SHELL_SECRET "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')"

void cohort_launch_command_free(CohortLaunchCommand *cmd)
{
  if (cmd == NULL)
    return;
  g_free(cmd->launcher);
  g_free(cmd->title);
  g_free(cmd->note);
  g_strfreev(cmd->commands);
  g_free(cmd);
}

static gboolean is_loopback(const char *addr)
{
  return g_str_has_prefix(addr, "127.") || strcmp(addr, "localhost") == 0 ||
         strcmp(addr, "::1") == 0;
}

/* Appends ' ' + the shell-quoted word; words that need no quoting stay bare for readability. */
static void word(GString *s, const char *w)
{
  gboolean plain = w[0] != '\0';
  for (const char *p = w; *p && plain; p++)
    plain = g_ascii_isalnum(*p) || strchr("-_./=:,@+%", *p) != NULL;
  if (s->len > 0)
    g_string_append_c(s, ' ');
  if (plain) {
    g_string_append(s, w);
  } else {
    g_autofree char *q = g_shell_quote(w);
    g_string_append(s, q);
  }
}

static void wordf(GString *s, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void wordf(GString *s, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *w = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  word(s, w);
}

static CohortLaunchCommand *command(const char *launcher, const char *title, const char *note,
                                    GPtrArray *lines)
{
  CohortLaunchCommand *c = g_new0(CohortLaunchCommand, 1);
  c->launcher = g_strdup(launcher);
  c->title = g_strdup(title);
  c->note = g_strdup(note);
  g_ptr_array_add(lines, NULL);
  c->commands = (GStrv)g_ptr_array_free(lines, FALSE);
  return c;
}

static GPtrArray *one_line(GString *s)
{
  GPtrArray *lines = g_ptr_array_new();
  g_ptr_array_add(lines, g_string_free(s, FALSE));
  return lines;
}

/* What every launcher's command is made of. */
typedef struct {
  const CohortConfig *cfg;
  const CohortLaunchPlan *plan;
  const CohortLaunchArgs *args; /* the programs and cohort-train's arguments */
  int nodes;
  int nproc;          /* processes per node, a number for the launchers that need one */
  const char *worker; /* "cohort-train --config /abs/path", quoted */
  const char *cfg_dir;
  GStrv hosts;        /* node_hosts, possibly empty */
  const char *shared; /* "COHORT_JOB_TOKEN=<hex>", the same on every node; NULL on one node */
  const char *drawn;  /* "COHORT_JOB_TOKEN=$(…)", drawn by the shell that runs the command */
  const char *shared_note;
  const char *auto_note;
} Plan;

static char *join_argv(const char *prefix, GStrv argv)
{
  GString *s = g_string_new(prefix);
  for (guint i = 0; argv[i] != NULL; i++)
    word(s, argv[i]);
  return g_string_free(s, FALSE);
}

/* Spawn mode: this machine only, the plan's own command when the plan is spawn mode. */
static CohortLaunchCommand *spawn_command(const Plan *p)
{
  CohortLaunchPlan spawn = *p->plan;
  spawn.kind = spawn.local_processes == 1 ? COHORT_LAUNCH_SINGLE : COHORT_LAUNCH_SPAWN;
  g_auto(GStrv) argv = cohort_launch_plan_argv(&spawn, 0, p->args);
  GPtrArray *lines = g_ptr_array_new();
  g_ptr_array_add(lines, join_argv(NULL, argv));
  return command("cohort-train", "cohort-train (spawn mode: this machine only)",
                 "Starts the processes itself and draws the job secret itself.", lines);
}

static CohortLaunchCommand *cohort_run_commands(const Plan *p)
{
  /* Whatever the config's use_torchrun says: the plan's numbers, started by cohort-run. */
  CohortLaunchPlan run = *p->plan;
  run.kind = COHORT_LAUNCH_COHORT_RUN;
  GPtrArray *lines = g_ptr_array_new();
  for (int n = 0; n < p->nodes; n++) {
    g_auto(GStrv) argv = cohort_launch_plan_argv(&run, n, p->args);
    g_ptr_array_add(lines, join_argv(p->shared, argv));
  }
  return command("cohort-run",
                 p->nodes > 1 ? "cohort-run (run the command for node N on node N)" : "cohort-run",
                 p->shared_note, lines);
}

static CohortLaunchCommand *torchrun_commands(const Plan *p)
{
  const CohortConfig *cfg = p->cfg;
  GPtrArray *lines = g_ptr_array_new();
  for (int n = 0; n < p->nodes; n++) {
    g_autoptr(GString) s = g_string_new(p->nodes > 1 ? p->shared : p->drawn);
    /* Underscores: torch 1.x knows only these, 2.x accepts both. */
    word(s, "torchrun");
    wordf(s, "--nnodes=%d", p->nodes);
    if (p->plan->local_processes > 0)
      wordf(s, "--nproc_per_node=%d", p->plan->local_processes);
    else
      word(s, "--nproc_per_node=gpu");
    wordf(s, "--node_rank=%d", n);
    wordf(s, "--master_addr=%s", cfg->master_addr);
    wordf(s, "--master_port=%d", cfg->master_port);
    if (cfg->max_restarts > 0)
      wordf(s, "--max_restarts=%d", cfg->max_restarts);
    word(s, "--no_python");
    g_string_append_printf(s, " %s", p->worker);
    g_ptr_array_add(lines, g_string_free(g_steal_pointer(&s), FALSE));
  }
  g_autofree char *note = g_strdup_printf(
      "%s%sUnder torchrun, Cohort's store listens on master_port + 1 (%d; torchrun's agent "
      "holds %d), so both ports must be open between the nodes. torchrun restarts workers "
      "without --resume auto; they see TORCHELASTIC_RESTART_COUNT > 0 instead. Debian "
      "bookworm's torchrun (PyTorch 1.13 on Python 3.11) needs -r 1 -t 1 after \"torchrun\" to "
      "start.",
      p->shared_note, p->shared_note[0] ? " " : "", cfg->master_port + 1, cfg->master_port);
  return command("torchrun",
                 p->nodes > 1 ? "torchrun (PyTorch's launcher; the command for node N on node N)"
                              : "torchrun (PyTorch's launcher)",
                 note, lines);
}

static CohortLaunchCommand *srun_command(const Plan *p)
{
  g_autoptr(GString) s = g_string_new(p->drawn);
  wordf(s, "MASTER_PORT=%d", p->cfg->master_port);
  word(s, "srun");
  wordf(s, "--nodes=%d", p->nodes);
  wordf(s, "--ntasks-per-node=%d", p->nproc);
  if (p->plan->gpu_processes)
    wordf(s, "--gpus-per-node=%d", p->nproc);
  g_string_append_printf(s, " %s", p->worker);
  g_autofree char *note = g_strdup_printf(
      "Run inside an allocation (salloc); each task is one rank and the first node of "
      "SLURM_NODELIST hosts the store.%s%s",
      p->auto_note[0] ? " " : "", p->auto_note);
  return command("srun", "srun (SLURM, inside an allocation)", note, one_line(g_steal_pointer(&s)));
}

static CohortLaunchCommand *sbatch_command(const Plan *p)
{
  g_autoptr(GString) sb = g_string_new("#!/bin/bash\n");
  g_string_append(sb, "#SBATCH --job-name=cohort\n");
  g_string_append_printf(sb, "#SBATCH --nodes=%d\n", p->nodes);
  g_string_append_printf(sb, "#SBATCH --ntasks-per-node=%d\n", p->nproc);
  if (p->plan->gpu_processes)
    g_string_append_printf(sb, "#SBATCH --gpus-per-node=%d\n", p->nproc);
  g_string_append(sb, "# Every task reads its rank from SLURM; rank 0's store listens on the\n"
                      "# first node of the allocation.\n");
  g_string_append(sb,
                  "# A secret for this job's rendezvous store; srun passes it to every task.\n");
  g_string_append_printf(sb, "export %s\n", p->drawn);
  g_string_append_printf(sb, "export MASTER_PORT=%d\n", p->cfg->master_port);
  g_string_append_printf(sb, "srun %s\n", p->worker);
  return command("sbatch", "sbatch (SLURM batch script: save it, then sbatch it)", p->auto_note,
                 one_line(g_steal_pointer(&sb)));
}

static CohortLaunchCommand *mpirun_command(const Plan *p)
{
  g_autoptr(GString) s = g_string_new(NULL);
  g_autofree char *hostfile = cohort_launch_hostfile(p->cfg, p->nproc);
  g_autofree char *hostfile_path = g_build_filename(p->cfg_dir, "hostfile", NULL);
  if (hostfile != NULL && p->nodes > 1) {
    /* The file the command names, written by the command itself, so it runs as printed. */
    g_string_append(s, "cat >");
    word(s, hostfile_path);
    g_string_append_printf(s, " <<'EOF'\n%sEOF\n", hostfile);
  }
  g_string_append(s, p->drawn);
  word(s, "mpirun");
  word(s, "-np");
  wordf(s, "%d", p->nodes * p->nproc);
  if (p->nodes > 1) {
    word(s, "--hostfile");
    word(s, hostfile != NULL ? hostfile_path : "hostfile");
  }
  word(s, "--map-by");
  wordf(s, "ppr:%d:node", p->nproc);
  word(s, "-x");
  wordf(s, "MASTER_ADDR=%s", p->cfg->master_addr);
  word(s, "-x");
  wordf(s, "MASTER_PORT=%d", p->cfg->master_port);
  /* By name: mpirun passes the value from its environment, off its command line. */
  word(s, "-x");
  word(s, COHORT_JOB_TOKEN_VAR);
  g_string_append_printf(s, " %s", p->worker);
  const char *hosts_note = p->nodes == 1 ? ""
                           : hostfile != NULL
                               ? "The command writes the hostfile (node_hosts, one line per node) "
                                 "beside the config first; the window's Export writes it too."
                               : "The file hostfile lists the nodes, one per line, the master_addr "
                                 "node first (or set node_hosts and generate the commands again).";
  g_autofree char *note = g_strdup_printf(
      "%s%s%s", hosts_note, hosts_note[0] && p->auto_note[0] ? " " : "", p->auto_note);
  return command("mpirun", "mpirun (Open MPI)", note, one_line(g_steal_pointer(&s)));
}

GStrv cohort_launch_node_hosts(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *s = source ? source : "config";
  if (cfg->node_hosts == NULL || cfg->node_hosts[0] == '\0')
    return g_new0(char *, 1);
  g_auto(GStrv) hosts = g_strsplit(cfg->node_hosts, ",", -1);
  for (guint i = 0; hosts[i] != NULL; i++) {
    g_strstrip(hosts[i]);
    gboolean ok = hosts[i][0] != '\0';
    for (const char *c = hosts[i]; *c && ok; c++)
      ok = g_ascii_isalnum(*c) || strchr(".-_:", *c) != NULL;
    if (!ok) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"node_hosts\": host %u is \"%s\"; allowed: host names or addresses "
                  "(letters, digits, '.', '-', '_', ':') separated by commas",
                  s, i, hosts[i]);
      return NULL;
    }
  }
  if (g_strv_length(hosts) != (guint)cfg->num_nodes) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"node_hosts\" names %u host%s but \"num_nodes\" is %d; allowed: one "
                "host per node, node 0 first, or \"\"",
                s, g_strv_length(hosts), g_strv_length(hosts) == 1 ? "" : "s", cfg->num_nodes);
    return NULL;
  }
  return g_steal_pointer(&hosts);
}

char *cohort_launch_hostfile(const CohortConfig *cfg, int slots)
{
  g_auto(GStrv) hosts = cohort_launch_node_hosts(cfg, NULL, NULL);
  if (hosts == NULL || hosts[0] == NULL)
    return NULL;
  GString *s = g_string_new(NULL);
  for (guint i = 0; hosts[i] != NULL; i++)
    g_string_append_printf(s, "%s slots=%d\n", hosts[i], slots);
  return g_string_free(s, FALSE);
}

/* Refuses what no launcher could run: the plan's refusals, and nodes meeting at loopback. */
static CohortLaunchPlan *plan_for_nodes(const CohortConfig *cfg, const char *source, GError **error)
{
  if (cfg->num_nodes > 1 && is_loopback(cfg->master_addr)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"master_addr\": \"%s\" is a loopback address, but num_nodes is %d: set "
                "master_addr to the host name or address of the first node, which the other "
                "nodes can reach",
                source, cfg->master_addr, cfg->num_nodes);
    return NULL;
  }
  g_auto(GStrv) hosts = cohort_launch_node_hosts(cfg, source, error);
  if (hosts == NULL)
    return NULL;
  /* The commands run on the nodes, whose GPUs are not known here. */
  CohortMachine nodes = {.gpus = -1};
  return cohort_launch_plan_new(cfg, source, &nodes, error);
}

GPtrArray *cohort_launch_commands(const CohortConfig *cfg, const char *config_path,
                                  const char *train_program, const char *run_program,
                                  GError **error)
{
  g_autoptr(CohortLaunchPlan) plan = plan_for_nodes(cfg, config_path, error);
  if (plan == NULL)
    return NULL;
  int nodes = plan->num_nodes;
  g_autofree char *cfg_abs = g_canonicalize_filename(config_path, NULL);
  g_autofree char *cfg_dir = g_path_get_dirname(cfg_abs);
  const char *train_args[] = {"--config", cfg_abs, NULL};
  CohortLaunchArgs args = {.train_program = train_program ? train_program : "cohort-train",
                           .run_program = run_program ? run_program : "cohort-run",
                           .train_args = train_args,
                           .progress_fd = -1};
  Plan p = {.cfg = cfg, .plan = plan, .args = &args, .nodes = nodes, .cfg_dir = cfg_dir};
  p.nproc = MAX(plan->local_processes, 1);
  g_autofree char *auto_note =
      plan->local_processes > 0
          ? g_strdup("")
          : g_strdup("nproc_per_node is auto: srun, sbatch and mpirun assume 1 process per node; "
                     "set nproc_per_node to the GPUs per node.");
  p.auto_note = auto_note;
  g_autoptr(GString) worker = g_string_new(NULL);
  word(worker, args.train_program);
  word(worker, "--config");
  word(worker, cfg_abs);
  p.worker = worker->str;

  /* Nodes that run one command each must share a secret: drawn here, the same in every
   * node's command (and only there). On one node cohort-run draws its own. */
  g_autofree char *shared = NULL;
  if (nodes > 1) {
    g_autofree char *secret = cohort_secret_new(error);
    if (secret == NULL)
      return NULL;
    shared = g_strdup_printf("%s=%s", COHORT_JOB_TOKEN_VAR, secret);
  }
  g_autofree char *drawn = g_strdup_printf("%s=%s", COHORT_JOB_TOKEN_VAR, SHELL_SECRET);
  p.shared = shared;
  p.drawn = drawn;
  p.shared_note = nodes > 1 ? "Every node's command carries the same COHORT_JOB_TOKEN, a secret "
                              "made for this job (in the environment, not the command line): "
                              "keep these commands private, and generate them again for another "
                              "job."
                            : "";

  GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)cohort_launch_command_free);
  if (nodes == 1)
    g_ptr_array_add(out, spawn_command(&p));
  g_ptr_array_add(out, cohort_run_commands(&p));
  g_ptr_array_add(out, torchrun_commands(&p));
  g_ptr_array_add(out, srun_command(&p));
  g_ptr_array_add(out, sbatch_command(&p));
  g_ptr_array_add(out, mpirun_command(&p));
  return out;
}

char *cohort_launch_commands_to_text(GPtrArray *commands)
{
  g_autoptr(GString) s = g_string_new(NULL);
  for (guint i = 0; i < commands->len; i++) {
    const CohortLaunchCommand *c = commands->pdata[i];
    g_string_append_printf(s, "%s# %s\n", i ? "\n" : "", c->title);
    if (c->note != NULL && c->note[0] != '\0')
      g_string_append_printf(s, "# %s\n", c->note);
    guint n = g_strv_length(c->commands);
    for (guint k = 0; k < n; k++) {
      if (n > 1)
        g_string_append_printf(s, "# node %u:\n", k);
      g_string_append_printf(s, "%s%s", c->commands[k],
                             g_str_has_suffix(c->commands[k], "\n") ? "" : "\n");
    }
  }
  return g_string_free(g_steal_pointer(&s), FALSE);
}
