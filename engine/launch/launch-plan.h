/* The launch plan: what a config means on one machine. How many processes there are on this
 * node and in all, what starts them (nothing, cohort-train's spawn mode, cohort-run, or a
 * launcher that already did), the global batch, the learning rate after lr_scaling, and the
 * command line that starts them.
 *
 * The window's summary and its Start button, `cohort-train --config` and `--explain`, and
 * `cohort-run --print-commands` all ask the plan, so they cannot disagree. It sits on the config
 * part alone: the caller describes the machine (GPUs, whether a launcher started this process).
 *
 * Processes per node, the one rule: nproc_per_node when set; else the length of
 * device_indexes; else world_size / num_nodes when world_size is set; else, on device "cpu",
 * 1; else one per GPU of the machine, at least 1 (cohort_launch_auto_processes, which
 * `cohort-run --nproc-per-node auto` uses too). 1 when enable_multi_gpu is off.
 *
 * Who starts the processes: a process started by a launcher (torchrun, srun, mpirun,
 * cohort-run, spawn mode) is one rank of that launcher's job. Otherwise one process and one
 * node is a plain run; more start through cohort-run when use_torchrun is set, else through
 * cohort-train's spawn mode (one node only).
 *
 * Refused, with a message naming the file, the keys and what would work: spawn mode with
 * num_nodes > 1; num_nodes > 1 without enable_multi_gpu; more processes per node than
 * device_indexes lists; a world_size that is not num_nodes × processes per node (or not a
 * multiple of num_nodes); "nccl" in a build without the NCCL backend, with device "cpu", on a
 * machine without a GPU or with fewer GPUs than processes; and what
 * cohort_config_check_supported refuses (device "cuda" in a build without CUDA). */
#pragma once

#include <glib.h>

#include "engine/config/config.h"

G_BEGIN_DECLS

typedef enum {
  COHORT_LAUNCH_SINGLE,     /* one process, no group */
  COHORT_LAUNCH_SPAWN,      /* cohort-train --nproc N forks this node's ranks */
  COHORT_LAUNCH_COHORT_RUN, /* cohort-run starts this node's ranks (torchrun style) */
  COHORT_LAUNCH_EXTERNAL,   /* a launcher started this process: it is one rank of its job */
} CohortLaunchKind;

/* What the plan needs to know about the machine it plans for. */
typedef struct {
  /* NVIDIA GPUs on this machine; -1 = a machine not known here (commands printed for other
   * machines): then what needs the count or the build (device "cuda", "nccl") is left to the
   * nodes, and an automatic count stays "auto". */
  int gpus;
  /* Set when a launcher started this process: its name ("torchrun", "slurm", "mpi"), the
   * world size and the processes on this node it gives. NULL otherwise. */
  const char *launched_by;
  int launched_world_size;
  int launched_local_size;
} CohortMachine;

typedef struct {
  CohortLaunchKind kind;
  int num_nodes;
  int node_rank;
  int local_processes;  /* on this node; with gpus -1 and an automatic count, 0 = "auto" */
  int world_size;       /* every node's processes; 0 when local_processes is 0 */
  int global_batch;     /* global micro-batch × gradient_accumulation_steps */
  char *split;          /* rank_batch_sizes: NULL (even), "12,4" or "auto" */
  double learning_rate; /* as configured */
  double scaled_lr;     /* after lr_scaling for world_size */
  CohortLrScaling lr_scaling;
  char *master_addr; /* for cohort-run on several nodes */
  int master_port;
  int max_restarts;
  gboolean gpu_processes; /* the ranks run on GPUs (device not "cpu", backend "nccl") */
} CohortLaunchPlan;

/* The plan of `cfg` on `machine`; NULL with a COHORT_CONFIG_ERROR (INVALID for combinations
 * that cannot run, UNSUPPORTED for what this build or machine lacks) whose message starts
 * with `source` (the config file, as the config API's messages do). */
CohortLaunchPlan *cohort_launch_plan_new(const CohortConfig *cfg, const char *source,
                                         const CohortMachine *machine, GError **error);
void cohort_launch_plan_free(CohortLaunchPlan *plan);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortLaunchPlan, cohort_launch_plan_free)

/* The programs and arguments of a plan's command line. */
typedef struct {
  const char *train_program;     /* cohort-train as the command should name it */
  const char *run_program;       /* cohort-run likewise */
  const char *const *train_args; /* cohort-train's arguments, e.g. {"--config", path, NULL} */
  int progress_fd;               /* -1 = none; else "--progress-fd N" (to rank 0) */
  /* > 0: "--control-fd N" after the progress fd (to rank 0; engine/progress/control.h); 0 or -1 =
   * none, so initialisers that leave it out pass none (fd 0 is stdin, never a control channel). */
  int control_fd;
} CohortLaunchArgs;

/* The command line that starts `plan` on node `node_rank` (the plan's own node when -1), where
 * [--progress-fd N] also stands for the control fd's [--control-fd M]:
 *   SINGLE, EXTERNAL:  TRAIN ARGS [--progress-fd N]
 *   SPAWN:             TRAIN ARGS [--progress-fd N] --nproc P
 *   COHORT_RUN:        RUN --standalone --nproc-per-node P [--max-restarts R]
 *                          [--progress-fd N] TRAIN ARGS                        (one node)
 *                      RUN --nnodes K --nproc-per-node P --node-rank R --master-addr A
 *                          --master-port M [--max-restarts R] [--progress-fd N] TRAIN ARGS
 * P is "auto" when the plan's count is (see local_processes). */
GStrv cohort_launch_plan_argv(const CohortLaunchPlan *plan, int node_rank,
                              const CohortLaunchArgs *args);

/* One line for people (and --print-commands' first line), e.g. "2 nodes × 2 processes = world
 * size 4 · global batch 32 · learning rate 0.002 → 0.004 (lr_scaling linear) · started by
 * cohort-run". An automatic count on an unknown machine reads "one process per GPU". */
char *cohort_launch_plan_describe(const CohortLaunchPlan *plan);

/* "single", "spawn", "cohort-run" or "external". */
const char *cohort_launch_kind_name(CohortLaunchKind kind);

/* The number of processes an automatic count gives on a machine with `gpus` GPUs. */
int cohort_launch_auto_processes(int gpus);

/* The NVIDIA GPUs this process can use: those `nvidia-smi -L` lists (0 when it is missing or
 * fails; $COHORT_NVIDIA_SMI names another program), as CUDA_VISIBLE_DEVICES leaves them
 * (cohort_visible_gpu_count). Counted without initialising CUDA, which the launcher must
 * not do before it forks. */
int cohort_machine_count_gpus(void);

/* The devices a CUDA process sees, from `nvidia-smi -L`'s output `smi_list` ("GPU 0: … (UUID:
 * GPU-…)" lines, MIG instances indented below their GPU) and CUDA_VISIBLE_DEVICES's value
 * (NULL: unset, every GPU), read as the CUDA runtime reads it: comma-separated indexes or
 * (prefixes of) UUIDs, cut at the first entry that names no device or one already named,
 * one MIG instance at most; "" and "-1" hide every GPU. */
int cohort_visible_gpu_count(const char *smi_list, const char *cuda_visible_devices);

/* Turns a --nproc-per-node text into a count: a positive integer up to 4096; "cpu" = 1;
 * "gpu" = cohort_machine_count_gpus() (an error when it is 0); "auto" =
 * cohort_launch_auto_processes of that count. Returns -1 with a COHORT_CONFIG_ERROR_INVALID
 * naming `flag` and the value otherwise. */
int cohort_launch_resolve_nproc(const char *text, const char *flag, GError **error);

/* Examples one optimizer step consumes across `world_size` processes: the global micro-batch
 * (batch_size × world_size, or the sum of a rank_batch_sizes list) × gradient_accumulation_steps
 * (saturates at G_MAXINT). */
int cohort_launch_global_batch(const CohortConfig *cfg, int world_size);
/* The learning rate after lr_scaling for `world_size` processes: scaled by the global
 * micro-batch over batch_size (the world size unless a rank_batch_sizes list sets the shares). */
double cohort_launch_scaled_lr(const CohortConfig *cfg, int world_size);

G_END_DECLS
