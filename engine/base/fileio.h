/* Durable file writes, the one way the engine puts files on disk: a temporary file in the
 * destination's folder ("<path>.tmp-XXXXXX"), written completely, fsync'ed, renamed over the
 * destination, and the folder fsync'ed, so a kill or a full disk at any moment leaves either
 * the old file or the new one, never half of one.
 *
 * And the one way files are opened by name for reading: every file from outside is checked
 * to be a regular file of a sane size before a byte is read, so a FIFO never blocks a reader,
 * a device (/dev/zero) never feeds one without end, and a folder is named as such. */
#pragma once

#include <sys/stat.h>
#include <glib.h>

G_BEGIN_DECLS

/* No size limit for cohort_file_open_regular and cohort_file_map_regular. */
#define COHORT_FILE_ANY_SIZE G_MAXUINT64

/* Opens `path` read-only when it is a regular file of at most `max_bytes` bytes; returns the
 * descriptor (close it) and fills *st when not NULL. The open itself never blocks (a FIFO is
 * opened non-blocking, then refused). Errors (G_FILE_ERROR) are one line naming the file:
 *   "<path>: cannot read: No such file or directory",
 *   "<path>: cannot read: it is a FIFO (named pipe), not a regular file" (a folder, a device,
 *   a socket likewise),
 *   "<path>: cannot read: it is N bytes, more than the M allowed for <what>".
 * `what` names the kind of file in that last message ("a config file"). The codes: the
 * errno's for a failed open, G_FILE_ERROR_ISDIR for a folder, G_FILE_ERROR_NXIO for any
 * other file that is not regular, G_FILE_ERROR_INVAL for one that is too large. */
int cohort_file_open_regular(const char *path, guint64 max_bytes, const char *what, struct stat *st,
                             GError **error);

/* The whole content of such a file, NUL-terminated (the NUL not counted in *len); a file
 * that grows past `max_bytes` while it is read is refused too. g_free the result. */
char *cohort_file_read_regular(const char *path, gsize max_bytes, const char *what, gsize *len,
                               GError **error);

/* Such a file mapped read-only (g_mapped_file_unref it); an empty file maps to no bytes. */
GMappedFile *cohort_file_map_regular(const char *path, guint64 max_bytes, const char *what,
                                     GError **error);

/* Lowercase hex SHA-256 of a regular file (of any size), read in chunks; NULL with a
 * G_FILE_ERROR naming it. */
char *cohort_file_sha256(const char *path, GError **error);

/* What `mode` is, for messages: "a folder", "a FIFO (named pipe)", "a device", "a socket",
 * "a regular file". */
const char *cohort_file_kind(mode_t mode);

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
