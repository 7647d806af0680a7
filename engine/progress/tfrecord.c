#include "engine/progress/tfrecord.h"

#include <errno.h>
#include <gio/gio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static guint32 crc_table[256];

static gpointer build_table(gpointer unused)
{
  (void)unused;
  for (guint32 i = 0; i < 256; i++) {
    guint32 c = i;
    for (int k = 0; k < 8; k++)
      c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc_table[i] = c;
  }
  return NULL;
}

guint32 cohort_crc32c(guint32 crc, const void *data, gsize len)
{
  static GOnce once = G_ONCE_INIT;
  g_once(&once, build_table, NULL);
  const guint8 *p = data;
  crc = ~crc;
  for (gsize i = 0; i < len; i++)
    crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

guint32 cohort_tfrecord_mask(guint32 crc)
{
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(guint8 *p, guint32 v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (guint8)(v >> (8 * i));
}

static guint32 get_le32(const guint8 *p)
{
  return (guint32)p[0] | (guint32)p[1] << 8 | (guint32)p[2] << 16 | (guint32)p[3] << 24;
}

void cohort_tfrecord_append(GByteArray *out, const void *data, gsize len)
{
  guint8 head[12], tail[4];
  guint64 n = len;
  for (int i = 0; i < 8; i++)
    head[i] = (guint8)(n >> (8 * i));
  put_le32(head + 8, cohort_tfrecord_mask(cohort_crc32c(0, head, 8)));
  put_le32(tail, cohort_tfrecord_mask(cohort_crc32c(0, data, len)));
  g_byte_array_append(out, head, sizeof head);
  g_byte_array_append(out, data, (guint)len);
  g_byte_array_append(out, tail, sizeof tail);
}

/* Reads exactly `len` bytes at `off`; FALSE at the end of the file or on an error (errno
 * 0 for the end). */
static gboolean read_at(int fd, void *buf, gsize len, guint64 off)
{
  gsize got = 0;
  while (got < len) {
    ssize_t n = pread(fd, (guint8 *)buf + got, len - got, (off_t)(off + got));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = 0;
      return FALSE;
    }
    got += (gsize)n;
  }
  return TRUE;
}

enum { CHUNK = 65536 };

/* CRC-32C of `len` bytes at `off`, read in chunks: an event file may be larger than memory
 * should hold at once. */
static gboolean crc_at(int fd, guint64 off, guint64 len, guint8 *chunk, guint32 *crc)
{
  *crc = 0;
  for (guint64 done = 0; done < len;) {
    gsize n = (gsize)MIN((guint64)CHUNK, len - done);
    if (!read_at(fd, chunk, n, off + done))
      return FALSE;
    *crc = cohort_crc32c(*crc, chunk, n);
    done += n;
  }
  return TRUE;
}

/* TRUE when the bytes from `off` to `end` are all zero. */
static gboolean zeros_at(int fd, guint64 off, guint64 end, guint8 *chunk)
{
  for (; off < end;) {
    gsize n = (gsize)MIN((guint64)CHUNK, end - off);
    if (!read_at(fd, chunk, n, off))
      return FALSE;
    for (gsize i = 0; i < n; i++)
      if (chunk[i] != 0)
        return FALSE;
    off += n;
  }
  return TRUE;
}

static gboolean io_error(const char *path, GError **error)
{
  int e = errno;
  g_set_error(error, G_IO_ERROR, e ? g_io_error_from_errno(e) : G_IO_ERROR_FAILED,
              "%s: cannot read: %s", path, e ? g_strerror(e) : "the file shrank while being read");
  return FALSE;
}

gboolean cohort_tfrecord_scan(int fd, const char *path, CohortTfrecordScan *out, GBytes **first,
                              GError **error)
{
  memset(out, 0, sizeof *out);
  if (first)
    *first = NULL;
  struct stat st;
  if (fstat(fd, &st) != 0)
    return io_error(path, error);
  guint64 size = (guint64)st.st_size, at = 0;
  out->file_length = size;
  g_autofree guint8 *chunk = g_malloc(CHUNK);
  while (at < size) {
    /* A record that fails to check ends the scan; what follows is a torn tail when the
     * record is incomplete or the rest is zeros, else damage. */
    gboolean complete = FALSE;
    guint8 head[12], tail[4];
    guint64 len = 0;
    guint32 crc = 0;
    if (size - at < 12)
      goto bad;
    if (!read_at(fd, head, 12, at))
      return io_error(path, error);
    for (int i = 0; i < 8; i++)
      len |= (guint64)head[i] << (8 * i);
    complete = TRUE;
    if (get_le32(head + 8) != cohort_tfrecord_mask(cohort_crc32c(0, head, 8)))
      goto bad;
    complete = len <= size - at - 12 && size - at - 12 - len >= 4;
    if (!complete)
      goto bad;
    if (!crc_at(fd, at + 12, len, chunk, &crc) || !read_at(fd, tail, 4, at + 12 + len))
      return io_error(path, error);
    if (get_le32(tail) != cohort_tfrecord_mask(crc))
      goto bad;
    if (first && out->records == 0 && len <= CHUNK && read_at(fd, chunk, (gsize)len, at + 12))
      *first = g_bytes_new(chunk, (gsize)len);
    out->records++;
    at += 12 + len + 4;
    out->good_length = at;
    continue;
  bad:
    errno = 0;
    if (!complete || zeros_at(fd, at, size, chunk))
      out->torn_tail = TRUE;
    else if (errno != 0)
      return io_error(path, error);
    else
      out->corrupt = TRUE;
    break;
  }
  return TRUE;
}
