/* Writing token shards; see token-shards.h. */
#include "data/token-shards.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "data/dataset.h"
#include "engine/base/fileio.h"

#define BUFFER_TOKENS (1u << 16)

struct CohortShardWriter {
  char *out;      /* DIR/NAME.bin */
  char *tmp_path; /* where the collected tokens were made (unlinked at once) */
  int fd;
  int vocab_size;
  int width; /* bytes per token: 2 (llm.c's GPT-2 shards) or 4 (its Llama 3 shards) */
  guint64 count;
  guint8 *buf;
  guint n_buf;
};

static gboolean io_error(GError **error, const char *path, const char *what, int e)
{
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO, "%s: cannot %s: %s", path, what,
              g_strerror(e));
  return FALSE;
}

/* An existing path that is not a regular file (a device such as /dev/null, a FIFO, a
 * folder) is never written over: the rename that completes a shard would replace it. */
static gboolean check_target(const char *path, GError **error)
{
  GStatBuf st;
  if (g_lstat(path, &st) != 0 || S_ISREG(st.st_mode))
    return TRUE;
  g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
              "%s: it is %s; allowed: a new or regular file for the shard", path,
              cohort_file_kind(st.st_mode));
  return FALSE;
}

CohortShardWriter *cohort_shard_writer_new(const char *out, int vocab_size, GError **error)
{
  if (!check_target(out, error))
    return NULL;
  if (!g_str_has_suffix(out, ".bin") || strlen(out) == 4) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_IO,
                "%s: not a shard's name; allowed: a path ending in .bin (NAME.bin; with "
                "--shard-tokens or --val-fraction NAME_000000.bin, NAME_val.bin, … beside it)",
                out);
    return NULL;
  }
  g_autofree char *tmpl = g_strdup_printf("%s.tmp-XXXXXX", out);
  int fd = g_mkstemp(tmpl);
  if (fd < 0) {
    io_error(error, out, "create a temporary file beside it", errno);
    return NULL;
  }
  /* The collected tokens live in a file without a name: whatever ends the process (a signal,
   * a crash) leaves nothing behind. */
  g_unlink(tmpl);
  CohortShardWriter *w = g_new0(CohortShardWriter, 1);
  w->out = g_strdup(out);
  w->tmp_path = g_steal_pointer(&tmpl);
  w->fd = fd;
  w->vocab_size = vocab_size;
  w->width = cohort_shard_width(vocab_size);
  w->buf = g_malloc((gsize)BUFFER_TOKENS * 4);
  return w;
}

void cohort_shard_writer_free(CohortShardWriter *w)
{
  if (!w)
    return;
  if (w->fd >= 0)
    close(w->fd);
  g_free(w->tmp_path);
  g_free(w->out);
  g_free(w->buf);
  g_free(w);
}

static gboolean flush(CohortShardWriter *w, GError **error)
{
  if (w->n_buf && !cohort_write_all(w->fd, w->buf, (gsize)w->n_buf * w->width))
    return io_error(error, w->tmp_path, "write", errno);
  w->n_buf = 0;
  return TRUE;
}

gboolean cohort_shard_writer_add(CohortShardWriter *w, const gint32 *ids, gsize n, GError **error)
{
  for (gsize i = 0; i < n; i++) {
    g_return_val_if_fail(ids[i] >= 0 && ids[i] < w->vocab_size, FALSE);
    if (w->width == 2) {
      guint16 v = GUINT16_TO_LE((guint16)ids[i]);
      memcpy(w->buf + 2 * w->n_buf++, &v, 2);
    } else {
      guint32 v = GUINT32_TO_LE((guint32)ids[i]);
      memcpy(w->buf + 4 * w->n_buf++, &v, 4);
    }
    if (w->n_buf == BUFFER_TOKENS && !flush(w, error))
      return FALSE;
  }
  w->count += n;
  return TRUE;
}

guint64 cohort_shard_writer_count(const CohortShardWriter *w)
{
  return w->count;
}

typedef struct {
  const guint8 *tokens; /* little-endian, `width` bytes each */
  guint64 n;
  int width;
} ShardBody;

static gboolean write_shard(int fd, gpointer data)
{
  const ShardBody *b = data;
  gint32 header[256] = {0};
  header[0] = GINT32_TO_LE(b->width == 2 ? COHORT_SHARD_MAGIC : COHORT_SHARD32_MAGIC);
  header[1] = GINT32_TO_LE(b->width == 2 ? COHORT_SHARD_VERSION : COHORT_SHARD32_VERSION);
  header[2] = GINT32_TO_LE((gint32)b->n);
  return cohort_write_all(fd, header, sizeof header) &&
         cohort_write_all(fd, b->tokens, b->n * (guint64)b->width);
}

/* NAME + suffix + ".bin" beside the output. */
static char *shard_name(const char *out, const char *suffix)
{
  g_autofree char *stem =
      g_str_has_suffix(out, ".bin") ? g_strndup(out, strlen(out) - 4) : g_strdup(out);
  return g_strdup_printf("%s%s.bin", stem, suffix);
}

/* Tokens [0, n) of `tokens` as NAME<tag>.bin, or cut into numbered shards. */
static gboolean write_set(const char *out, const char *tag, const guint8 *tokens, int width,
                          guint64 n, guint64 shard_tokens, GPtrArray *written, GError **error)
{
  guint64 per = shard_tokens > 0 ? shard_tokens : MAX(n, 1);
  if (per > COHORT_SHARD_MAX_TOKENS) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: %" G_GUINT64_FORMAT " tokens do not fit one shard (its header counts at most "
                "%d); split them with --shard-tokens",
                out, per, COHORT_SHARD_MAX_TOKENS);
    return FALSE;
  }
  guint64 n_shards = shard_tokens > 0 ? MAX((n + per - 1) / per, 1) : 1;
  for (guint64 k = 0; k < n_shards; k++) {
    g_autofree char *suffix =
        shard_tokens > 0 ? g_strdup_printf("%s_%06" G_GUINT64_FORMAT, tag, k) : g_strdup(tag);
    g_autofree char *path = shard_name(out, suffix);
    guint64 first = k * per;
    ShardBody body = {tokens ? tokens + first * (guint64)width : NULL, MIN(per, n - first), width};
    if (!check_target(path, error) || !cohort_write_atomic(path, write_shard, &body, error))
      return FALSE;
    if (written)
      g_ptr_array_add(written, g_steal_pointer(&path));
  }
  return TRUE;
}

gboolean cohort_shard_writer_finish(CohortShardWriter *w, guint64 shard_tokens, double val_fraction,
                                    GPtrArray *written, GError **error)
{
  if (!flush(w, error))
    return FALSE;
  g_autoptr(GError) local = NULL;
  g_autoptr(GMappedFile) map = NULL;
  if (w->count > 0) {
    map = g_mapped_file_new_from_fd(w->fd, FALSE, &local);
    if (!map)
      return io_error(error, w->tmp_path, "read back", EIO);
  }
  const guint8 *tokens = map ? (const guint8 *)g_mapped_file_get_contents(map) : NULL;
  guint64 n_val = (guint64)llround(CLAMP(val_fraction, 0.0, 1.0) * (double)w->count);
  if (val_fraction > 0 &&
      !write_set(w->out, "_val", tokens, w->width, n_val, shard_tokens, written, error))
    return FALSE;
  const guint8 *train = tokens ? tokens + n_val * (guint64)w->width : NULL;
  return write_set(w->out, "", train, w->width, w->count - n_val, shard_tokens, written, error);
}
