/* A TensorBoard event-file writer for scalars.
 *
 * A run's folder holds files named events.out.tfevents.<unix time>.<hostname>[.<n>]
 * (TensorBoard's convention; the suffix only when that name is taken). Each is a TFRecord
 * file (engine/progress/tfrecord.h) of serialized `tensorboard.Event` protobuf messages: first one
 * with file_version "brain.Event:2", then one per group of scalars. The fields written, with the
 * numbers of TensorBoard's event.proto and summary.proto:
 *
 *   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                Summary summary = 5; SessionLog session_log = 7; }
 *   Summary    { repeated Value value = 1; }
 *   Value      { string tag = 1; float simple_value = 2; }
 *   SessionLog { SessionStatus status = 1; }   (START = 1)
 *
 * The encoding is written by hand rather than with libprotobuf-c: five message fields of
 * three wire types (varint, 64/32-bit fixed, length-delimited) are some forty lines, while
 * protobuf-c would add a build-time compiler (protoc-c), generated sources and a run-time
 * library for the same bytes. The format is frozen by every event file ever written, and
 * the tests decode the files with an independent reader. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct CohortTbWriter CohortTbWriter;

/* Opens the event file of the run folder `dir` (created when missing). When the folder
 * already has event files, the newest (by the time in its name) is continued: a torn last
 * record (a process killed mid-write) is cut away first and noted in *note (may be NULL;
 * g_free it; a file whose first record was torn starts over). A file damaged elsewhere is
 * left as it is and a new file started beside it (TensorBoard reads every file of the
 * folder). Otherwise a new file is created with the file_version record. FALSE with `error` when
 * the folder or file cannot be made or read. */
CohortTbWriter *cohort_tb_writer_open(const char *dir, char **note, GError **error);
void cohort_tb_writer_free(CohortTbWriter *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTbWriter, cohort_tb_writer_free)

/* The event file being written. */
const char *cohort_tb_writer_path(CohortTbWriter *w);

/* Scalars gathered into one Event (one record). */
typedef struct CohortTbScalars CohortTbScalars;
CohortTbScalars *cohort_tb_scalars_new(void);
void cohort_tb_scalars_free(CohortTbScalars *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTbScalars, cohort_tb_scalars_free)
/* Adds the value `value` (stored as a float, as TensorBoard's simple_value is) under `tag`. */
void cohort_tb_scalars_add(CohortTbScalars *s, const char *tag, double value);
guint cohort_tb_scalars_count(const CohortTbScalars *s);

/* Appends one Event with `wall_time` (Unix seconds), `step` and the scalars, as one write().
 * Nothing is written for an empty set. FALSE with `error` when the write fails. */
gboolean cohort_tb_writer_add(CohortTbWriter *w, double wall_time, gint64 step,
                              const CohortTbScalars *s, GError **error);

/* Appends an Event holding SessionLog START at `step`: a run resumed from a checkpoint says
 * so, and TensorBoard then drops the points of steps >= `step` that the file already holds
 * from before the restart (work lost with the process, now redone). */
gboolean cohort_tb_writer_session_start(CohortTbWriter *w, double wall_time, gint64 step,
                                        GError **error);

G_END_DECLS
