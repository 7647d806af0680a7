/* Launch commands for a TrainConfig on a cluster: what the GUI shows and
 * `cohort-run --print-commands --config F` prints.
 *
 * From the config's distributed keys (num_nodes, nproc_per_node, master_addr, master_port,
 * max_restarts) it builds, for each launcher, the command(s) to run. Every argument is
 * shell-quoted. The commands target real clusters; they do not carry workarounds for one
 * distribution's packaging (Debian bookworm's torchrun, for one, needs `-r 1 -t 1` to start;
 * see docs/launching.md). nproc_per_node 0 ("auto") becomes `auto` for cohort-run and
 * torchrun, and for srun/sbatch/mpirun (which need a number) the length of device_indexes,
 * else 1 — the note says so.
 *
 * The job secret (COHORT_JOB_TOKEN, see env.h) travels in each command's environment, never
 * on a launcher's command line: commands run once (srun, sbatch, mpirun, and torchrun on one
 * node) draw a fresh one in the shell that runs them (`COHORT_JOB_TOKEN=$(od … /dev/urandom
 * …)`; mpirun passes it on with `-x COHORT_JOB_TOKEN`, by name); commands run once per node
 * (cohort-run and torchrun on several nodes) carry the same secret, drawn when the commands
 * are generated, as a `COHORT_JOB_TOKEN=<32 hex digits>` prefix, so each call gives a new
 * one. A single-node cohort-run draws its own and needs none. */
#pragma once

#include <glib.h>

#include "engine/config.h"

G_BEGIN_DECLS

typedef struct {
  char *launcher; /* "cohort-run", "torchrun", "srun", "sbatch", "mpirun" */
  char *title;    /* one line for humans, e.g. "cohort-run (run one command on each node)" */
  char *note;     /* caveats, may be "" */
  GStrv commands; /* shell commands: one per node (index = node rank) for cohort-run and
                   * torchrun; one for srun and mpirun (run once); for sbatch, one item
                   * holding the whole batch script */
} CohortLaunchCommand;

void cohort_launch_command_free(CohortLaunchCommand *cmd);

/* The commands for every launcher, in the order above (a GPtrArray of CohortLaunchCommand*,
 * freeing its elements). Several nodes get a fresh shared secret in their commands (see
 * above), so two calls differ. `config_path` is the config file as the nodes will see it (made
 * absolute when relative); `train_program` and `run_program` are the cohort-train and
 * cohort-run commands to write (NULL = "cohort-train" and "cohort-run"). Returns NULL with a
 * COHORT_CONFIG_ERROR_INVALID error when the config cannot be launched as it stands (e.g.
 * num_nodes > 1 with master_addr "127.0.0.1"). */
GPtrArray *cohort_launch_commands(const CohortConfig *cfg, const char *config_path,
                                  const char *train_program, const char *run_program,
                                  GError **error);

/* All of them as text (titles, notes, commands), as --print-commands prints it. */
char *cohort_launch_commands_to_text(GPtrArray *commands);

G_END_DECLS
