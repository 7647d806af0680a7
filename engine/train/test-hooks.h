/* Faults that tests inject into a real run (never used otherwise): the environment variable
 * COHORT_TEST_HOOKS holds hooks separated by ';':
 *   sleep:RANK:STEP:PHASE:SECONDS[:still]
 *       global rank RANK sleeps SECONDS during step STEP (1 = the first step). PHASE
 *       "forward": inside the step's forward (a rank stuck in compute). Any other phase name of
 *       engine/base/phase.h ("caching", "checkpoint", …): before the step's vote, in that phase,
 *       ticking its progress every 0.25 s (a long one-rank phase that shows progress) unless
 *       ":still" is added;
 *   perturb:RANK:STEP:TENSOR
 *       after step STEP, global rank RANK adds 1e-3 to the first value of parameter TENSOR (its
 *       weights now differ from the other ranks');
 *   slow:RANK:MICROSECONDS
 *       every training forward of global rank RANK sleeps MICROSECONDS per example of its
 *       micro-batch first (a slower device, for rank_batch_sizes auto);
 *   kill:RANK:COUNT:WHERE
 *       global rank RANK kills itself with SIGKILL (a crash, nothing cleaned up) when it reaches
 *       COUNT at point WHERE: "captions", right after its COUNT-th caption embedding is appended
 *       to the cache (engine/train/text-embeds.c).
 * A malformed hook is reported on stderr once and ignored. */
#pragma once

#include <glib.h>

#include "engine/model/model.h"

G_BEGIN_DECLS

/* Runs the sleep hooks for (rank, step) at `where` ("forward", or "step" before the vote). */
void cohort_test_hooks_sleep(int rank, gint64 step, const char *where);
/* Runs the slow hooks of `rank` for a micro-batch of `examples`. */
void cohort_test_hooks_slow(int rank, int examples);
/* Runs the kill hooks for (rank, count) at `where`. */
void cohort_test_hooks_kill(int rank, gint64 count, const char *where);
/* Runs the perturb hooks for (rank, step) on `m`'s parameters in backend memory of `be`. */
void cohort_test_hooks_perturb(int rank, gint64 step, CohortModel *m, const CohortBackend *be);

G_END_DECLS
