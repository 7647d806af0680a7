/* cohort-train --probe (and cohort-run --probe, the window's Test connection): know before the
 * launch what speed-up the links and the batch allow (issue 28 item 1). Every rank of the group
 * the real launch would make joins it, then:
 *  - computes one forward and backward of the configured model, batch and precision (at the
 *    batch and at half of it), noting when each gradient bucket becomes final, one optimizer
 *    step and the wait for data, all ranks at once without communicating (as they would share
 *    the machine in training); the slowest rank's figures count;
 *  - times each collective the run uses (all-reduce of every bucket size in the reduction's
 *    number format, and of a few small sizes; all-gather for SyncBatchNorm and ZeRO; broadcast
 *    for the buffers) between the actual ranks and nodes, and fits α + β·bytes to each;
 *  - forecasts (engine/launch/forecast.h) the step, throughput and efficiency at this world
 *    size and at 2× and 4× it on the same links, the share of the buckets' communication that
 *    backward hides, and the smallest per-rank batch for 90 % efficiency.
 * Global rank 0 prints it, emits it as a `probe` event (docs/progress-protocol.md) and writes
 * it to <workspace>/probe.json, which --explain shows and a later run's events.jsonl carries. */
#pragma once

#include <json-glib/json-glib.h>

#include "engine/train/trainer.h"

G_BEGIN_DECLS

/* The probe on this rank; FALSE with an error when the group, the data or a collective fails.
 * `opts` as for cohort_train (its resume and overwrite are ignored: nothing is trained or
 * saved but probe.json). */
gboolean cohort_probe(const CohortConfig *cfg, const CohortTrainOptions *opts, GError **error);

/* <workspace>/probe.json, the last probe of this workspace, with "matches_config" added (TRUE
 * when it was made for a config that hashes like `cfg`); NULL when there is none or it cannot be
 * read. */
JsonObject *cohort_probe_load_saved(const CohortConfig *cfg);

/* The human text of a probe's result (the `probe` event's members). */
char *cohort_probe_text(JsonObject *result);

G_END_DECLS
