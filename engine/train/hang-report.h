/* The `hang` event: global rank 0's report of a collective that has waited past hang_report_s
 * (docs/progress-protocol.md), from the communicator's heartbeat records (comm.h). */
#pragma once

#include "engine/config/config.h"
#include "engine/distributed/comm.h"
#include "engine/progress/progress.h"

G_BEGIN_DECLS

/* Sets every rank's hang threshold from the config; on global rank 0 the reports go to
 * `progress` as `hang` events and log lines. `progress` must outlive `comm`'s use of it (free the
 * communicator first). Nothing with comm NULL. */
void cohort_hang_report_attach(CohortComm *comm, const CohortConfig *cfg, int rank,
                               CohortProgress *progress);

/* The event's members for `report` (exposed for tests). */
JsonObject *cohort_hang_report_fields(const CohortHangReport *report);
/* Its one-line text: "rank 1 has not reached all_reduce #42 (bucket 1 of 3) after 61 s: …". */
char *cohort_hang_report_text(const CohortHangReport *report);

G_END_DECLS
