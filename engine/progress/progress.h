/* Progress events (docs/progress-protocol.md) and the human view of a run.
 *
 * JSON Lines go to the --progress-fd descriptor; the human view goes to stdout: on a
 * terminal one live line that rewrites itself, piped plain lines. Only global rank 0 makes
 * a CohortProgress that writes anything; other ranks pass fd = -1 and human = FALSE.
 *
 * Thread-safe: emitting, logging and the live line may be called from several threads (each
 * event is one whole line). Setting the recorder and opening the record are not. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "engine/progress/protocol.h"
#include "engine/progress/run-record.h"

G_BEGIN_DECLS

typedef struct CohortProgress CohortProgress;

/* `fd` < 0: no JSON events. `human`: print to stdout (live line when stdout is a tty).
 * A reader that went away (EPIPE) turns the JSON stream off, never the run. */
CohortProgress *cohort_progress_new(int fd, gboolean human);
void cohort_progress_free(CohortProgress *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortProgress, cohort_progress_free)

/* Gives `rec` to `p` (freed with it; NULL removes it): from now on every event `p` emits,
 * `log`, `error` and `done` included, also goes to the run record, whether or not there is a
 * JSON stream. Global rank 0 sets one; the record holds events until
 * cohort_progress_open_record. */
void cohort_progress_set_recorder(CohortProgress *p, CohortRunRecord *rec);

/* The recorder set on `p`, or NULL. */
CohortRunRecord *cohort_progress_get_recorder(CohortProgress *p);

/* Opens the recorder's files for run `run_id` in `workspace` (cohort_run_record_open) and logs
 * what it repaired as `warning` events. TRUE at once when `p` has no recorder. Fails when the
 * JSON stream goes to the record's own events.jsonl (the two writers would interleave). */
gboolean cohort_progress_open_record(CohortProgress *p, const char *workspace, const char *run_id,
                                     GError **error);

/* Writes {"event": event, "time": now, …fields} as one line; takes ownership of `fields`
 * (may be NULL). */
void cohort_progress_emit(CohortProgress *p, const char *event, JsonObject *fields);

/* A human message on its own line (clears the live line first). Also sent as a `log` event
 * with `level` ("info", "warning", "error"). */
void cohort_progress_log(CohortProgress *p, const char *level, const char *format, ...)
    G_GNUC_PRINTF(3, 4);

/* The live status: on a terminal it replaces the previous live line; piped, it is printed as
 * a plain line only when `force_line` is set (the caller throttles). */
void cohort_progress_status(CohortProgress *p, gboolean force_line, const char *format, ...)
    G_GNUC_PRINTF(3, 4);

/* Ends the live line (newline) so following output starts clean. */
void cohort_progress_finish_line(CohortProgress *p);

/* Formats seconds as "1h02m", "3m05s", "42s". */
char *cohort_format_duration(double seconds);

G_END_DECLS
