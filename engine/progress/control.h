/* The control channel (docs/progress-protocol.md, "Control channel"): the reverse of the
 * progress stream. A program that watches a run (the window) writes one-word requests, one per
 * line, to the descriptor given with `cohort-train --control-fd N`; global rank 0 reads what
 * has arrived (a bounded amount), without blocking, at each step boundary, and the ranks agree on
 * it in the stop vote (cohort_train_dist_vote), so a collective answer (a checkpoint) happens at
 * the same step everywhere. */
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
/* What one poll (one step) reads at most: a writer that floods the channel (`yes garbage`,
 * `cat /dev/zero |`) costs each step a bounded moment and the rest waits in the pipe. */
#define COHORT_CONTROL_MAX_BYTES_PER_POLL 4096
/* Warnings about lines that are no request: the first at once, then at most one summary line
 * (with a count) per this many seconds, so a flood cannot fill the disk with events. */
#define COHORT_CONTROL_WARN_INTERVAL_S 10.0

typedef struct CohortControl CohortControl;

/* FALSE with an error naming "--control-fd N" (and what the descriptor points to) when `fd`
 * cannot be a control channel: it must be a pipe or a socket. A regular file (the run's own
 * events.jsonl would feed back on itself), a device (/dev/zero never ends) or a folder is
 * refused. */
gboolean cohort_control_check_fd(int fd, GError **error);

/* Reads requests from `fd` (cohort_control_check_fd first; NULL with its error). The
 * descriptor's flags are left as they are (it may share its file description with the
 * watcher: no O_NONBLOCK is set on it) and it is not closed by cohort_control_free. */
CohortControl *cohort_control_new(int fd, GError **error);
void cohort_control_free(CohortControl *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortControl, cohort_control_free)

/* Another interval between warning summaries than COHORT_CONTROL_WARN_INTERVAL_S (tests). */
void cohort_control_set_warn_interval(CohortControl *c, double seconds);

/* The requests of the complete lines that arrived since the last call (a bit set of
 * CohortControlRequest), without blocking (poll, then at most one bounded read). A line that
 * is no request, or too long, is skipped and reported as a `warning` log event on `progress`
 * (may be NULL), rate-limited as said above. After the writer closed its end (or a read
 * error) it returns 0 for good. */
guint cohort_control_poll(CohortControl *c, CohortProgress *progress);

G_END_DECLS
