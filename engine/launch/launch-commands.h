/* Launch commands for a TrainConfig on a cluster: what the window's Multi-node dialog shows
 * and `cohort-run --print-commands --config F` prints.
 *
 * The counts come from the launch plan (engine/launch/launch-plan.h) for a machine not known here
 * (the commands run on the nodes), so they are the numbers the window's summary shows; the
 * cohort-run commands are the plan's own command lines, one per node. Every argument is
 * shell-quoted, and each command runs as printed:
 *  - cohort-train: spawn mode (one node only);
 *  - cohort-run: one command per node (node_rank = index); on one node `--standalone`;
 *  - torchrun: PyTorch's launcher with the underscore spellings (--nproc_per_node,
 *    --master_port, --no_python), which torch 1.x and 2.x both accept. Debian bookworm's
 *    torch 1.13 needs `-r 1 -t 1` to start; the note says so. Under torchrun's agent Cohort's
 *    store listens on master_port + 1; the note says so;
 *  - srun, sbatch: SLURM, inside an allocation / as a batch script;
 *  - mpirun: Open MPI. With node_hosts set, the command first writes the hostfile beside the
 *    config (`cat > DIR/hostfile <<'EOF' … EOF`, one "HOST slots=N" line per node, node 0
 *    first) and names it; without, on several nodes it names `hostfile` and the note asks for
 *    one.
 * Processes per node: the plan's number; an automatic count (nproc_per_node 0 on GPUs) stays
 * `auto` for cohort-run and `gpu` for torchrun (each node counts its own), and srun, sbatch
 * and mpirun, which need a number, assume 1 — the note says so.
 *
 * The job secret (COHORT_JOB_TOKEN, see engine/base/secret.h) travels in each command's
 * environment, never on a launcher's command line: commands run once (srun, sbatch, mpirun,
 * and torchrun on one node) draw a fresh one in the shell that runs them (`COHORT_JOB_TOKEN=$(od
 * … /dev/urandom …)`; mpirun passes it on with `-x COHORT_JOB_TOKEN`, by name); commands run
 * once per node (cohort-run and torchrun on several nodes) carry the same secret, drawn when
 * the commands are generated, as a `COHORT_JOB_TOKEN=<32 hex digits>` prefix, so each call
 * gives a new one. cohort-train's spawn mode and a single-node cohort-run draw their own. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

typedef struct {
  char *launcher; /* "cohort-train", "cohort-run", "torchrun", "srun", "sbatch", "mpirun" */
  char *title;    /* one line for humans, e.g. "cohort-run (run one command on each node)" */
  char *note;     /* caveats, may be "" */
  GStrv commands; /* shell commands: one per node (index = node rank) for cohort-run and
                   * torchrun; one for cohort-train, srun and mpirun (run once); for sbatch,
                   * one item holding the whole batch script */
} CohortLaunchCommand;

void cohort_launch_command_free(CohortLaunchCommand *cmd);

/* The commands for every launcher, in the order above (cohort-train only for one node): a
 * GPtrArray of CohortLaunchCommand*, freeing its elements. Several nodes get a fresh shared
 * secret in their commands (see above), so two calls differ. `config_path` is the config file
 * as the nodes will see it (made absolute when relative); `train_program` and `run_program` are
 * the cohort-train and cohort-run commands to write (NULL = "cohort-train" and "cohort-run").
 * Returns NULL with a COHORT_CONFIG_ERROR when the config cannot be launched as it stands: what
 * the launch plan refuses, num_nodes > 1 with a loopback master_addr, or a node_hosts that does
 * not name num_nodes hosts. */
GPtrArray *cohort_launch_commands(const CohortConfig *cfg, const char *config_path,
                                  const char *train_program, const char *run_program,
                                  GError **error);

/* All of them as text (titles, notes, commands), as --print-commands prints it. */
char *cohort_launch_commands_to_text(GPtrArray *commands);

/* The hostfile mpirun reads for `cfg`: one "HOST slots=N" line per name of node_hosts, or
 * NULL when node_hosts is empty. `slots` is the processes per node. */
char *cohort_launch_hostfile(const CohortConfig *cfg, int slots);

/* The host names of cfg->node_hosts (empty when it is ""), or NULL with a
 * COHORT_CONFIG_ERROR_INVALID naming the key when a name is empty or holds anything but
 * letters, digits, '.', '-', '_' and ':', or when there are not num_nodes of them. */
GStrv cohort_launch_node_hosts(const CohortConfig *cfg, const char *source, GError **error);

G_END_DECLS
