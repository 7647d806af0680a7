/* TFRecord framing, the container of TensorBoard event files:
 *
 *   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) |
 *   data[length]                   | uint32 masked_crc32c(data)
 *
 * where masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c = CRC-32C(x), the
 * Castagnoli polynomial (reflected 0x82f63b78). Debian ships no C library for CRC-32C (zlib's
 * crc32 is the IEEE polynomial; google's crc32c is packaged for Python only), so it is a
 * table-driven byte-at-a-time loop here: TensorBoard records are tens of bytes, written once
 * per progress event, and the table costs 1 KiB. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* CRC-32C of `len` bytes, continuing from `crc` (0 to start): the standard CRC-32C, so
 * cohort_crc32c(0, "123456789", 9) == 0xe3069283. */
guint32 cohort_crc32c(guint32 crc, const void *data, gsize len);

/* The masked form TFRecord stores, so a CRC over data that itself holds CRCs stays strong. */
guint32 cohort_tfrecord_mask(guint32 crc);

/* Appends one framed record holding `data` to `out`. */
void cohort_tfrecord_append(GByteArray *out, const void *data, gsize len);

/* What a scan of a TFRecord file found. */
typedef struct {
  guint64 records;     /* complete records whose both CRCs match, from the start */
  guint64 good_length; /* bytes those records span: where the next record would go */
  guint64 file_length;
  /* Bytes after good_length that are an incomplete record or all zeros: the tail a process
   * killed mid-write (or a crash before the data reached the disk) leaves. Safe to cut. */
  gboolean torn_tail;
  /* Bytes after good_length that hold a complete record with a bad CRC: damage, not a torn
   * write; do not cut (later records may be intact). */
  gboolean corrupt;
} CohortTfrecordScan;

/* Reads the records of the open file `fd` from offset 0 (in 64 KiB pieces) and checks every
 * CRC. When `first` is not NULL it gets a copy of the first record's data (NULL when there is
 * none, or it is over 64 KiB). FALSE with `error` set only when the file cannot be read. */
gboolean cohort_tfrecord_scan(int fd, const char *path, CohortTfrecordScan *out, GBytes **first,
                              GError **error);

G_END_DECLS
