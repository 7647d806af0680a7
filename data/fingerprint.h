/* A file's sampled content hash (internal to data/): SHA-256 of its first 64 KiB, then of 16
 * blocks of 4 KiB spread evenly up to its end. With the file's size, mtime and ctime it is how
 * the prepared-data index (dataset.c) and the image cache (image-cache.c) know a file is the
 * one they saw: a rewrite in place that keeps size and mtime still changes ctime (which no
 * program can set back), and the hash catches another file restored with the same times. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Hex digits of a fingerprint, and its terminator. */
#define COHORT_FINGERPRINT_LEN 65

/* The fingerprint of `size` bytes in memory (a mapped file), as 64 hex digits. */
void cohort_fingerprint_bytes(const guint8 *bytes, gsize size, char out[COHORT_FINGERPRINT_LEN]);

/* The fingerprint of the file open as `fd`, `size` bytes long, read with pread (the offset is
 * not moved). FALSE when a read fails or comes up short (the file changed). */
gboolean cohort_fingerprint_fd(int fd, gsize size, char out[COHORT_FINGERPRINT_LEN]);

G_END_DECLS
