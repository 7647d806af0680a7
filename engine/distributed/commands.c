/* Launch commands for a config on a cluster: cohort-run, torchrun, srun, sbatch, mpirun. */
#include "engine/distributed/commands.h"
#include "engine/distributed/env.h"

#include <string.h>

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

/* What every launcher's command is made of. */
typedef struct {
  const CohortConfig *cfg;
  const char *runner; /* the cohort-run program */
  int nodes;
  int nproc;          /* processes per node, a number for the launchers that need one */
  gboolean gpus;      /* ask the scheduler for GPUs */
  const char *worker; /* "cohort-train --config /abs/path" */
  const char *shared; /* "COHORT_JOB_TOKEN=<hex>", the same on every node; NULL on one node */
  const char *drawn;  /* "COHORT_JOB_TOKEN=$(…)", drawn by the shell that runs the command */
  const char *shared_note;
  const char *auto_note;
} Plan;

static CohortLaunchCommand *cohort_run_commands(const Plan *p)
{
  const CohortConfig *cfg = p->cfg;
  GPtrArray *lines = g_ptr_array_new();
  for (int n = 0; n < p->nodes; n++) {
    g_autoptr(GString) s = g_string_new(p->shared);
    word(s, p->runner);
    word(s, "--nnodes");
    wordf(s, "%d", p->nodes);
    word(s, "--nproc-per-node");
    if (cfg->nproc_per_node > 0)
      wordf(s, "%d", cfg->nproc_per_node);
    else
      word(s, "auto");
    word(s, "--node-rank");
    wordf(s, "%d", n);
    word(s, "--master-addr");
    word(s, cfg->master_addr);
    word(s, "--master-port");
    wordf(s, "%d", cfg->master_port);
    if (cfg->max_restarts > 0) {
      word(s, "--max-restarts");
      wordf(s, "%d", cfg->max_restarts);
    }
    g_string_append_printf(s, " %s", p->worker);
    g_ptr_array_add(lines, g_string_free(g_steal_pointer(&s), FALSE));
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
    word(s, "torchrun");
    wordf(s, "--nnodes=%d", p->nodes);
    if (cfg->nproc_per_node > 0)
      wordf(s, "--nproc-per-node=%d", cfg->nproc_per_node);
    else
      word(s, p->gpus ? "--nproc-per-node=gpu" : "--nproc-per-node=auto");
    wordf(s, "--node-rank=%d", n);
    wordf(s, "--master-addr=%s", cfg->master_addr);
    wordf(s, "--master-port=%d", cfg->master_port);
    if (cfg->max_restarts > 0)
      wordf(s, "--max-restarts=%d", cfg->max_restarts);
    word(s, "--no-python");
    g_string_append_printf(s, " %s", p->worker);
    g_ptr_array_add(lines, g_string_free(g_steal_pointer(&s), FALSE));
  }
  g_autofree char *note =
      g_strdup_printf("%s%storchrun restarts workers without --resume auto; they see "
                      "TORCHELASTIC_RESTART_COUNT > 0 instead.",
                      p->shared_note, p->shared_note[0] ? " " : "");
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
  if (p->gpus)
    wordf(s, "--gpus-per-node=%d", p->nproc);
  g_string_append_printf(s, " %s", p->worker);
  GPtrArray *lines = g_ptr_array_new();
  g_ptr_array_add(lines, g_string_free(g_steal_pointer(&s), FALSE));
  g_autofree char *note = g_strdup_printf(
      "Run inside an allocation (salloc); each task is one rank and the first node of "
      "SLURM_NODELIST hosts the store.%s%s",
      p->auto_note[0] ? " " : "", p->auto_note);
  return command("srun", "srun (SLURM, inside an allocation)", note, lines);
}

static CohortLaunchCommand *sbatch_command(const Plan *p)
{
  g_autoptr(GString) sb = g_string_new("#!/bin/bash\n");
  g_string_append(sb, "#SBATCH --job-name=cohort\n");
  g_string_append_printf(sb, "#SBATCH --nodes=%d\n", p->nodes);
  g_string_append_printf(sb, "#SBATCH --ntasks-per-node=%d\n", p->nproc);
  if (p->gpus)
    g_string_append_printf(sb, "#SBATCH --gpus-per-node=%d\n", p->nproc);
  g_string_append(sb, "# Every task reads its rank from SLURM; rank 0's store listens on the\n"
                      "# first node of the allocation.\n");
  g_string_append(sb,
                  "# A secret for this job's rendezvous store; srun passes it to every task.\n");
  g_string_append_printf(sb, "export %s\n", p->drawn);
  g_string_append_printf(sb, "export MASTER_PORT=%d\n", p->cfg->master_port);
  g_string_append_printf(sb, "srun %s\n", p->worker);
  GPtrArray *lines = g_ptr_array_new();
  g_ptr_array_add(lines, g_string_free(g_steal_pointer(&sb), FALSE));
  return command("sbatch", "sbatch (SLURM batch script: save it, then sbatch it)", p->auto_note,
                 lines);
}

static CohortLaunchCommand *mpirun_command(const Plan *p)
{
  g_autoptr(GString) s = g_string_new(p->drawn);
  word(s, "mpirun");
  word(s, "-np");
  wordf(s, "%d", p->nodes * p->nproc);
  if (p->nodes > 1) {
    word(s, "--hostfile");
    word(s, "hostfile");
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
  GPtrArray *lines = g_ptr_array_new();
  g_ptr_array_add(lines, g_string_free(g_steal_pointer(&s), FALSE));
  g_autofree char *note =
      g_strdup_printf("%s%s%s",
                      p->nodes > 1 ? "The file hostfile lists the nodes, one per line, "
                                     "the master_addr node first."
                                   : "",
                      p->nodes > 1 && p->auto_note[0] ? " " : "", p->auto_note);
  return command("mpirun", "mpirun (Open MPI)", note, lines);
}

GPtrArray *cohort_launch_commands(const CohortConfig *cfg, const char *config_path,
                                  const char *train_program, const char *run_program,
                                  GError **error)
{
  int nodes = cfg->num_nodes;
  if (nodes > 1 && is_loopback(cfg->master_addr)) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "master_addr \"%s\" is a loopback address, but num_nodes is %d: set master_addr "
                "to the host name or address of the first node, which the other nodes can reach",
                cfg->master_addr, nodes);
    return NULL;
  }
  Plan p = {.cfg = cfg, .runner = run_program ? run_program : "cohort-run", .nodes = nodes};
  p.nproc = cfg->nproc_per_node > 0                               ? cfg->nproc_per_node
            : cfg->device_indexes && cfg->device_indexes->len > 0 ? (int)cfg->device_indexes->len
                                                                  : 1;
  p.gpus = cfg->device != COHORT_DEVICE_CPU && cfg->distributed_backend == COHORT_BACKEND_NCCL;
  g_autofree char *auto_note =
      cfg->nproc_per_node > 0
          ? g_strdup("")
          : g_strdup_printf("nproc_per_node is auto: srun, sbatch and mpirun assume %d process%s "
                            "per node; set nproc_per_node to the GPUs per node.",
                            p.nproc, p.nproc > 1 ? "es" : "");
  p.auto_note = auto_note;
  g_autofree char *cfg_abs = g_canonicalize_filename(config_path, NULL);
  g_autoptr(GString) worker = g_string_new(NULL);
  word(worker, train_program ? train_program : "cohort-train");
  word(worker, "--config");
  word(worker, cfg_abs);
  p.worker = worker->str;

  /* Nodes that run one command each must share a secret: drawn here, the same in every
   * node's command (and only there). On one node cohort-run draws its own. */
  g_autofree char *shared = NULL;
  if (nodes > 1) {
    g_autofree char *secret = cohort_dist_new_secret(error);
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
