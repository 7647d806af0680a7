/* The training loop: one rank's run of a TrainConfig, from data and model set-up through
 * optimizer steps, evaluation, samples and checkpoints to the exported model. */
#pragma once

#include <glib.h>
#include "engine/config/config.h"
#include "engine/progress/control.h"
#include "engine/progress/progress.h"

G_BEGIN_DECLS

#include "engine/distributed/comm.h"
#include "engine/train/device.h"

typedef struct {
  /* Where the config came from, for messages. */
  const char *config_source;
  /* NULL: a new run; "auto": the latest checkpoint in the workspace when there is one (else
   * a new run); else a checkpoint folder. Only rank 0 reads it. */
  const char *resume;
  /* Without `resume`, a workspace that holds checkpoints is refused (runs are never mixed);
   * with `overwrite` the earlier run's outputs move to <workspace>/previous/<run id>/. */
  gboolean overwrite;
  /* Events and the human view; rank 0 only (others get a silent one). Not owned. */
  CohortProgress *progress;
  /* Distributed: rank, world and collectives; comm NULL = one process. Not owned. */
  int rank;
  int world_size;
  int local_rank;
  int local_world_size;
  CohortComm *comm;
  /* The rendezvous store (rank 0 hosts it); NULL = one process. Ranks wait on it where a
   * collective could time out: while the latent cache is being made. Not owned. */
  CohortStore *store;
  /* Where this rank computes (see cohort_device_select); NULL = chosen from the config and
   * local_rank. `comm` must fit it: "nccl" on that GPU, or "gloo"/"local" (host buffers). */
  const CohortComputeDevice *device;
  /* Set asynchronously (signal handler) to stop at the next step boundary with a
   * checkpoint. */
  volatile int *stop_flag;
  /* Requests from the control channel (engine/progress/control.h): sample and save now. Rank 0's;
   * NULL = none. Not owned. */
  CohortControl *control;
} CohortTrainOptions;

/* Runs the whole training. Returns FALSE with `error` set on failure (bad data, bad
 * checkpoint, a collective that failed). A stop requested through stop_flag returns TRUE
 * after saving a checkpoint; *stopped (may be NULL) tells which. */
gboolean cohort_train(const CohortConfig *cfg, const CohortTrainOptions *opts, gboolean *stopped,
                      GError **error);

/* The number of threads a rank uses: cfg->threads, else OMP_NUM_THREADS, else the
 * processors divided among the local ranks. */
int cohort_train_threads(const CohortConfig *cfg, int local_world_size);

G_END_DECLS
