/* Where every rank is, without a store round trip on any collective's path (internal to
 * engine/distributed; users see it through comm.h's hang report and error messages).
 *
 * Each rank's heartbeat thread publishes, every `interval` and only when it changed, one record
 * under the store key "progress/<rank>": the rank's phase and step (engine/base/phase.h), the
 * collective it is in (kind, sequence number, label such as "bucket 2 of 4", time waited) and
 * the last one it completed. The collectives themselves only update this record in memory.
 *
 * When a rank's collective has waited past `watch_after` (the hang threshold, or half the
 * timeout when that is shorter), the rank counts it once in "progress/stalled". Global rank 0's
 * thread notices, reads every rank's record each interval while the stall lasts, and
 *  - publishes "progress/summary": a generation number that grows whenever a rank that has not
 *    arrived shows progress (a new phase, a tick of a long phase, a collective reached); every
 *    waiting rank reads it and extends its collective's deadline on each new generation
 *    (cohort_watchdog_progress), so a rank busy alone keeps the others waiting while it moves;
 *  - once the wait passes the hang threshold, hands a CohortHangReport to the hang function
 *    (the trainer's `hang` event), again every threshold while it lasts, and once more,
 *    `resolved`, when the collective completes.
 * Records are at most one interval old. The store's keys never grow with the steps: one record
 * per rank, one counter, one summary. */
#pragma once

#include <glib.h>

#include "engine/distributed/comm.h"
#include "engine/distributed/watchdog.h"

G_BEGIN_DECLS

typedef struct CohortHeartbeat CohortHeartbeat;

/* `store` may be NULL (then there is no thread and the record stays in memory). `wd` (may be
 * NULL) is the communicator's watchdog, told of progress. */
CohortHeartbeat *cohort_heartbeat_new(CohortStore *store, int rank, int world_size,
                                      CohortWatchdog *wd, double timeout_s);
void cohort_heartbeat_free(CohortHeartbeat *hb);

/* See cohort_comm_set_hang_report. */
void cohort_heartbeat_set_report(CohortHeartbeat *hb, double report_s, CohortHangFunc func,
                                 gpointer user);

/* The collective `seq` of `kind` (a static string) starts on this rank; `label` may be NULL;
 * `timeout_s` is its timeout (for the watch threshold). In memory only. */
void cohort_heartbeat_enter(CohortHeartbeat *hb, const char *kind, guint64 seq, const char *label,
                            double timeout_s);
/* The current collective ended (completed or failed). */
void cohort_heartbeat_leave(CohortHeartbeat *hb);

/* For a failed collective `seq`: "ranks 2, 3 did not arrive (rank 2 last completed all_reduce
 * #41 (bucket 1 of 3), now in forward for 12 s at step 7; …)" from the records in the store,
 * plus any abort reason a peer left; "" when the store cannot tell. Reads the store: not for a
 * collective's path. */
char *cohort_heartbeat_describe_missing(CohortHeartbeat *hb, guint64 seq);

/* The record text of `r` as published (tests and the failure message). */
char *cohort_rank_record_format(const CohortRankRecord *r);
/* Parses a published record into *r (its `rank` left as it is); FALSE when malformed. */
gboolean cohort_rank_record_parse(const char *text, gsize len, CohortRankRecord *r);

G_END_DECLS
