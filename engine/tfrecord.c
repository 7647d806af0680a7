#include "tfrecord.h"

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

static gboolean all_zero(const guint8 *p, gsize n)
{
  for (gsize i = 0; i < n; i++)
    if (p[i] != 0)
      return FALSE;
  return TRUE;
}

/* Classifies the bytes from `at` to the end once a record there failed to check. */
static void classify_tail(const guint8 *buf, gsize size, gsize at, gboolean complete,
                          CohortTfrecordScan *out)
{
  if (!complete || all_zero(buf + at, size - at))
    out->torn_tail = TRUE;
  else
    out->corrupt = TRUE;
}

gboolean cohort_tfrecord_scan(int fd, const char *path, CohortTfrecordScan *out, GBytes **first,
                              GError **error)
{
  memset(out, 0, sizeof *out);
  if (first)
    *first = NULL;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: %s", path, g_strerror(errno));
    return FALSE;
  }
  /* Event files of one run are small (about 100 bytes per progress event): read whole. */
  gsize size = (gsize)st.st_size;
  g_autofree guint8 *buf = g_malloc(MAX(size, 1));
  gsize got = 0;
  while (got < size) {
    ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, "%s: cannot read: %s", path,
                  n < 0 ? g_strerror(errno) : "the file shrank while being read");
      return FALSE;
    }
    got += (gsize)n;
  }
  out->file_length = size;
  gsize at = 0;
  while (at < size) {
    if (size - at < 12) {
      classify_tail(buf, size, at, FALSE, out);
      break;
    }
    guint64 len = 0;
    for (int i = 0; i < 8; i++)
      len |= (guint64)buf[at + i] << (8 * i);
    if (get_le32(buf + at + 8) != cohort_tfrecord_mask(cohort_crc32c(0, buf + at, 8))) {
      classify_tail(buf, size, at, TRUE, out);
      break;
    }
    if (len > size - at - 12 || size - at - 12 - len < 4) {
      classify_tail(buf, size, at, FALSE, out);
      break;
    }
    const guint8 *data = buf + at + 12;
    if (get_le32(data + len) != cohort_tfrecord_mask(cohort_crc32c(0, data, (gsize)len))) {
      classify_tail(buf, size, at, TRUE, out);
      break;
    }
    if (first && out->records == 0)
      *first = g_bytes_new(data, (gsize)len);
    out->records++;
    at += 12 + (gsize)len + 4;
    out->good_length = at;
  }
  return TRUE;
}
