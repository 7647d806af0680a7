/* A rank's process group, brought up in one call: from the rank's environment (env.h) the
 * store that global rank 0 hosts (with the job token derived from the job secret), the check
 * that every rank runs the same config, and the collectives backend the config names (NCCL on
 * the rank's GPU, or Gloo). cohort-train calls it once per rank, after choosing the rank's
 * device, since NCCL is created on it. */
#pragma once

#include <glib.h>

#include "engine/config/config.h"
#include "engine/distributed/comm.h"
#include "engine/distributed/env.h"
#include "engine/distributed/store.h"

G_BEGIN_DECLS

typedef struct {
  CohortStore *store; /* NULL for a world of one */
  CohortComm *comm;   /* NULL for a world of one */
} CohortDistGroup;

/* Joins the job `env` describes. A world of one gives an empty group. Otherwise: refuses
 * "nccl" without a GPU (`cuda_device` < 0) with COHORT_CONFIG_ERROR_UNSUPPORTED naming
 * `source` and the key; opens the store (rank 0 hosts it; rank 0 warns on stderr, once, when it
 * listens on a network address and the job secret derives from guessable job ids); checks the
 * config across ranks (COHORT_DIST_ERROR_MISMATCH names the ranks and keys); creates the
 * backend. Every wait is bounded by cfg->timeout_s. Errors are those of the step that
 * failed. */
CohortDistGroup *cohort_dist_group_join(const CohortDistEnv *env, const CohortConfig *cfg,
                                        const char *source, int cuda_device, GError **error);

/* Frees the communicator, then the store (rank 0's store serves the others until then). */
void cohort_dist_group_free(CohortDistGroup *group);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortDistGroup, cohort_dist_group_free)

G_END_DECLS
