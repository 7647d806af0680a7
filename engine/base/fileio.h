/* Durable file writes, the one way the engine puts files on disk: a temporary file in the
 * destination's folder ("<path>.tmp-XXXXXX"), written completely, fsync'ed, renamed over the
 * destination, and the folder fsync'ed, so a kill or a full disk at any moment leaves either
 * the old file or the new one, never half of one. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Writes the whole buffer to fd, retrying short writes and EINTR. FALSE with errno set. */
gboolean cohort_write_all(int fd, const void *buf, gsize len);

/* Writes the content of a file being saved to `fd`; FALSE with errno set on failure. */
typedef gboolean (*CohortWriteFunc)(int fd, gpointer user_data);

/* Creates `path` atomically with what `writer` puts into the temporary file. Errors
 * (G_FILE_ERROR) are one line: "<path>: cannot <what>: <reason>". */
gboolean cohort_write_atomic(const char *path, CohortWriteFunc writer, gpointer user_data,
                             GError **error);

/* cohort_write_atomic of a buffer. */
gboolean cohort_write_file_atomic(const char *path, const void *data, gsize len, GError **error);

/* fsync of a folder, so renames and new entries in it are on disk. Best effort. */
void cohort_fsync_dir(const char *dir);

/* Removes a file, or a folder and everything in it (symbolic links are removed, never
 * followed). Best effort. */
void cohort_remove_tree(const char *path);

/* Removes "<name>.tmp-XXXXXX" files that a killed save left in `dir` for the file names in
 * `names` (NULL-terminated); returns how many were removed. */
guint cohort_remove_stale_temporaries(const char *dir, const char *const *names);

G_END_DECLS
