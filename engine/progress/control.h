/* The control channel (docs/progress-protocol.md, "Control channel"): the reverse of the
 * progress stream. A program that watches a run (the window) writes one-word requests, one per
 * line, to the descriptor given with `cohort-train --control-fd N`; global rank 0 reads what
 * has arrived, without blocking, at each step boundary, and the ranks agree on it in the stop
 * vote (cohort_train_dist_vote), so a collective answer (a checkpoint) happens at the same
 * step everywhere. */
#pragma once

#include <glib.h>

#include "engine/progress/progress.h"

G_BEGIN_DECLS

/* What a line asks for; several can be pending at once. */
typedef enum {
  COHORT_CONTROL_SAMPLE = 1 << 0, /* "sample": a sample now (rank 0 draws it) */
  COHORT_CONTROL_SAVE = 1 << 1,   /* "save": a checkpoint now (every rank takes part) */
  COHORT_CONTROL_CHECK = 1 << 2,  /* "check": the ranks compare their weights now */
} CohortControlRequest;

/* The longest line accepted; longer ones are skipped with a warning. */
#define COHORT_CONTROL_MAX_LINE 256

typedef struct CohortControl CohortControl;

/* Reads requests from `fd` (a pipe or a socket; made non-blocking here; not closed by
 * cohort_control_free). */
CohortControl *cohort_control_new(int fd);
void cohort_control_free(CohortControl *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortControl, cohort_control_free)

/* The requests of the complete lines that arrived since the last call (a bit set of
 * CohortControlRequest), without blocking. A line that is no request, or too long, is
 * reported as a `warning` log event on `progress` (may be NULL) and skipped. After the writer
 * closed its end (or a read error) it returns 0 for good. */
guint cohort_control_poll(CohortControl *c, CohortProgress *progress);

G_END_DECLS
