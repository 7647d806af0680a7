/* The run record: what rank 0 leaves in the workspace so a run's metrics outlive the window
 * that watched it (docs/progress-protocol.md, "What a run leaves in its workspace"):
 *
 *   <workspace>/events.jsonl                every progress event of every run, one per line,
 *                                           with "run_id" added; appended to, never rewritten
 *   <workspace>/tensorboard/<run id>/       TensorBoard event files of the run's scalars
 *
 * The progress stream feeds it (cohort_progress_set_recorder). Events emitted before the run
 * id is known (set-up messages) are held and written when the record opens, so the files get
 * every event from the first on. Each events.jsonl line is one write() on an O_APPEND file
 * with no buffering in the process, so a killed process leaves whole lines; a torn last line
 * (a crash of the machine, a full disk) is cut away when the next run opens the file, so it
 * is never glued onto the next line. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "engine/progress/tensorboard.h"

G_BEGIN_DECLS

typedef struct CohortRunRecord CohortRunRecord;

/* A record that holds events until cohort_run_record_open. */
CohortRunRecord *cohort_run_record_new(void);
void cohort_run_record_free(CohortRunRecord *rec);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortRunRecord, cohort_run_record_free)

/* Opens (creates) <workspace>/events.jsonl and the event file of
 * <workspace>/tensorboard/<run_id>/ (continuing the newest one there, so a resumed run with
 * the same id goes on in the same files), then writes the events held so far. Repairs made
 * on the way (a torn last line or record cut away) are appended to `notes` (may be NULL) as
 * one-line messages for the log. FALSE with `error` when `run_id` is not a valid id, a file
 * cannot be created, or the record is open already; a record that was closed stays closed. */
gboolean cohort_run_record_open(CohortRunRecord *rec, const char *workspace, const char *run_id,
                                GPtrArray *notes, GError **error);

gboolean cohort_run_record_is_open(CohortRunRecord *rec);

/* The run id once open, else NULL. */
const char *cohort_run_record_run_id(CohortRunRecord *rec);

/* <workspace>/events.jsonl once open, else NULL. */
const char *cohort_run_record_events_path(CohortRunRecord *rec);

/* The TensorBoard event file once open, else NULL. */
const char *cohort_run_record_tb_path(CohortRunRecord *rec);

/* Records one progress event (an object with "event" and "time"): sets its "run_id" member
 * (in place when the event has one: the same id, never a second member) and appends it to
 * events.jsonl, and writes its scalars (cohort_run_record_scalars) to
 * TensorBoard at its "step". Before the record is open the event is held (a reference is
 * kept; the first 1000). A write that fails is reported once on stderr and that file is
 * then left alone; training goes on. */
void cohort_run_record_event(CohortRunRecord *rec, JsonObject *ev);

/* The TensorBoard scalars of a progress event, or NULL when it has none:
 *   step   train/loss, train/lr, train/grad_norm, train/tokens_per_s, train/samples_per_s,
 *          train/loss_scale (those present);
 *   eval   eval/<name> for every numeric member but step and time (eval/val_loss, …);
 *   ranks  rank/<r>/<name> for every numeric member of each rank but "rank"
 *          (rank/0/step_s, rank/0/comm_s, rank/0/data_s, rank/0/mem_bytes, …). */
CohortTbScalars *cohort_run_record_scalars(JsonObject *ev);

/* TRUE when `id` can name a run (and its TensorBoard folder): 1 to 128 characters from
 * A-Z a-z 0-9 . _ -, not starting with '.'. Else FALSE with a one-line `error` naming it. */
gboolean cohort_run_id_check(const char *id, GError **error);

G_END_DECLS
