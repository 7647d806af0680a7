/* Sampled content hashes; see fingerprint.h. */
#include "data/fingerprint.h"

#include <errno.h>
#include <unistd.h>

#define HEAD   65536
#define BLOCK  4096
#define BLOCKS 16

/* The sampled ranges, in order: [offsets[i], offsets[i] + lengths[i]); returns how many. */
static guint ranges(gsize size, gsize offsets[BLOCKS + 1], gsize lengths[BLOCKS + 1])
{
  offsets[0] = 0;
  lengths[0] = MIN(size, HEAD);
  if (size <= HEAD)
    return 1;
  gsize span = size - BLOCK;
  for (gsize b = 1; b <= BLOCKS; b++) {
    offsets[b] = span / BLOCKS * b;
    lengths[b] = BLOCK;
  }
  return BLOCKS + 1;
}

void cohort_fingerprint_bytes(const guint8 *bytes, gsize size, char out[COHORT_FINGERPRINT_LEN])
{
  gsize off[BLOCKS + 1], len[BLOCKS + 1];
  guint n = ranges(size, off, len);
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  for (guint i = 0; i < n; i++)
    g_checksum_update(sum, bytes + off[i], (gssize)len[i]);
  g_strlcpy(out, g_checksum_get_string(sum), COHORT_FINGERPRINT_LEN);
}

gboolean cohort_fingerprint_fd(int fd, gsize size, char out[COHORT_FINGERPRINT_LEN])
{
  gsize off[BLOCKS + 1], len[BLOCKS + 1];
  guint n = ranges(size, off, len);
  g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
  g_autofree guint8 *buf = g_malloc(HEAD);
  for (guint i = 0; i < n; i++) {
    gsize done = 0;
    while (done < len[i]) {
      ssize_t got = pread(fd, buf + done, len[i] - done, (off_t)(off[i] + done));
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        return FALSE;
      done += (gsize)got;
    }
    g_checksum_update(sum, buf, (gssize)len[i]);
  }
  g_strlcpy(out, g_checksum_get_string(sum), COHORT_FINGERPRINT_LEN);
  return TRUE;
}
