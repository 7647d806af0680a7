/* Finding the files of a data path (internal to data/): a file, a folder's files with given
 * suffixes, or the files a glob pattern matches; regular files only; and a file's
 * fingerprint for caches that must notice a changed file without reading all of it. */
#pragma once

#include <glib.h>
#include <sys/stat.h>

G_BEGIN_DECLS

/* The regular files of `path`, sorted by name: the file itself; a folder's files whose names
 * end in one of `suffixes` (NULL-terminated; hidden files and sub-folders are passed over);
 * or, when nothing has the path's own name and it holds *, ? or [, the files the pattern
 * matches. A FIFO, device or socket among them is an error (COHORT_DATA_ERROR_IO) naming it,
 * as is a folder or pattern without a single file. */
GPtrArray *cohort_list_data_files(const char *path, const char *const *suffixes, GError **error);

/* Maps `path` after checking, on the open file, that it is a regular file (a FIFO would
 * block the reader forever and a device never ends); *st gets its status. */
GMappedFile *cohort_map_regular_file(const char *path, struct stat *st, GError **error);

/* "ABSOLUTE-PATH|device|inode|size|mtime|ctime|fingerprint": the file's identity and times to
 * the nanosecond, and its sampled content hash (data/fingerprint.h, the image cache's rule). */
char *cohort_file_fingerprint(const char *path, const struct stat *st, GMappedFile *map);

G_END_DECLS
