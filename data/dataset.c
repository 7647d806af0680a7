/* Dataset readers: byte-level text and llm.c token shards, each a file or a folder of them.
 * Files are memory-mapped and kept as segments of one token stream, so a folder of large
 * shards costs address space, not memory. */
#include "data/dataset.h"
#include "data/file-list.h"
#include "engine/base/phase.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gio/gio.h>
#include <glib/gstdio.h>

#include "data/fingerprint.h"
#include "engine/base/fileio.h"

#define SHARD_MAGIC       COHORT_SHARD_MAGIC
#define SHARD_VERSION     COHORT_SHARD_VERSION
#define SHARD_HEADER_SIZE COHORT_SHARD_HEADER_BYTES

/* clang-format off */
G_DEFINE_QUARK(cohort-data-error-quark, cohort_data_error)
/* clang-format on */

typedef struct {
  GMappedFile *map;
  char *path;
  const guint8 *data; /* first token */
  gsize count;        /* tokens in this segment */
  gsize start;        /* index of the first token in the whole stream */
  gsize offset;       /* byte offset of the first token in the file */
  int width;          /* bytes per token: 1 (text), 2 or 4 (shards) */
} Segment;

struct CohortDataset {
  GArray *segments; /* of Segment */
  int vocab_size;
  gsize n_tokens;
  int seq_len;
};

static void segment_clear(gpointer p)
{
  Segment *s = p;
  g_clear_pointer(&s->map, g_mapped_file_unref);
  g_clear_pointer(&s->path, g_free);
}

void cohort_dataset_free(CohortDataset *ds)
{
  if (!ds)
    return;
  g_array_unref(ds->segments);
  g_free(ds);
}

static gboolean add_text_file(CohortDataset *ds, Segment seg, int vocab_size, gboolean scan,
                              GError **error)
{
  const char *path = seg.path;
  seg.data = (const guint8 *)g_mapped_file_get_contents(seg.map);
  seg.count = g_mapped_file_get_length(seg.map);
  seg.width = 1;
  g_array_append_val(ds->segments, seg);

  const char *end = NULL;
  if (scan && seg.count > 0 && !g_utf8_validate((const char *)seg.data, (gssize)seg.count, &end)) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: not UTF-8 text (invalid byte 0x%02x at offset %" G_GSIZE_FORMAT
                "); use data_format \"tokens\" for .bin shards",
                path, (guint8)*end, (gsize)(end - (const char *)seg.data));
    return FALSE;
  }
  if (scan && vocab_size < 256) {
    for (gsize i = 0; i < seg.count; i++) {
      if (seg.data[i] >= vocab_size) {
        g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_VOCAB,
                    "%s: byte %u at offset %" G_GSIZE_FORMAT
                    " is not below vocab_size %d (byte-level text needs vocab_size 256)",
                    path, seg.data[i], i, vocab_size);
        return FALSE;
      }
    }
  }
  ds->n_tokens += seg.count;
  return TRUE;
}

int cohort_shard_width(int vocab_size)
{
  return vocab_size > 65536 ? 4 : 2;
}

gboolean cohort_token_shard_check_width(const guint8 *bytes, gsize size, const char *path,
                                        gsize *n_tokens, int *width, GError **error)
{
  if (size < SHARD_HEADER_SIZE) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: %" G_GSIZE_FORMAT " bytes is shorter than the %" G_GSIZE_FORMAT
                "-byte header of an llm.c token shard",
                path, size, (gsize)SHARD_HEADER_SIZE);
    return FALSE;
  }
  gint32 header[3];
  memcpy(header, bytes, sizeof header);
  gint32 magic = GINT32_FROM_LE(header[0]);
  gint32 version = GINT32_FROM_LE(header[1]);
  gint32 count = GINT32_FROM_LE(header[2]);
  if (magic != SHARD_MAGIC && magic != COHORT_SHARD32_MAGIC) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: bad magic %d in the header (an llm.c token shard starts with %d, or %d for "
                "32-bit tokens)",
                path, magic, SHARD_MAGIC, COHORT_SHARD32_MAGIC);
    return FALSE;
  }
  int w = magic == SHARD_MAGIC ? 2 : 4;
  int want = w == 2 ? SHARD_VERSION : COHORT_SHARD32_VERSION;
  if (version != want) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: unsupported shard version %d after magic %d (read: version 1, uint16 tokens, "
                "after 20240520; version 7, uint32 tokens, after 20240801)",
                path, version, magic);
    return FALSE;
  }
  if (count < 0) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: negative token count %d in the header", path, count);
    return FALSE;
  }
  gsize expect = SHARD_HEADER_SIZE + (gsize)count * (gsize)w;
  if (size != expect) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_FORMAT,
                "%s: the header says %d tokens (%" G_GSIZE_FORMAT
                " bytes) but the file has %" G_GSIZE_FORMAT " bytes (%s)",
                path, count, expect, size, size < expect ? "truncated" : "trailing data");
    return FALSE;
  }
  *n_tokens = (gsize)count;
  if (width)
    *width = w;
  return TRUE;
}

gboolean cohort_token_shard_check(const guint8 *bytes, gsize size, const char *path,
                                  gsize *n_tokens, GError **error)
{
  return cohort_token_shard_check_width(bytes, size, path, n_tokens, NULL, error);
}

static gboolean add_shard_file(CohortDataset *ds, Segment seg, int vocab_size, gboolean scan,
                               GError **error)
{
  const char *path = seg.path;
  const guint8 *bytes = (const guint8 *)g_mapped_file_get_contents(seg.map);
  gsize size = g_mapped_file_get_length(seg.map);
  g_array_append_val(ds->segments, seg);
  gsize count = 0;
  int width = 2;
  if (!cohort_token_shard_check_width(bytes, size, path, &count, &width, error))
    return FALSE;

  Segment *s = &g_array_index(ds->segments, Segment, ds->segments->len - 1);
  s->data = bytes + SHARD_HEADER_SIZE;
  s->offset = SHARD_HEADER_SIZE;
  s->count = count;
  s->width = width;
  /* A scan of many shards is a long phase: ranks waiting for this one see it move. */
  cohort_phase_tick();
  for (gsize i = 0; scan && i < s->count; i++) {
    guint32 tok = cohort_shard_token(s->data, width, i);
    if (tok >= (guint32)vocab_size) {
      g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_VOCAB,
                  "%s: token %u at position %" G_GSIZE_FORMAT " is not below vocab_size %d", path,
                  tok, i, vocab_size);
      return FALSE;
    }
  }
  ds->n_tokens += s->count;
  return TRUE;
}

/* The prepared-data index: files whose content scan passed, so later opens (other ranks,
 * later runs) skip the scan. A file is known by its path, device and inode, size, mtime and
 * ctime to the nanosecond, and a SHA-256 of its first 64 KiB, its last 4 KiB and 16 blocks
 * of 4 KiB spread between; with the format and vocab. A rewrite that keeps size and mtime
 * still changes ctime (which no program can set back), and the hash catches a different
 * file restored with the same times. Whatever slips through (a file changed while mapped)
 * meets the range check on every window (cohort_dataset_window). */
static char *index_entry_key(const Segment *seg, const struct stat *st, CohortDataFormat format,
                             int vocab_size)
{
  const guint8 *bytes = (const guint8 *)g_mapped_file_get_contents(seg->map);
  gsize size = g_mapped_file_get_length(seg->map);
  char fingerprint[COHORT_FINGERPRINT_LEN];
  cohort_fingerprint_bytes(bytes, size, fingerprint);
  g_autofree char *abs = g_canonicalize_filename(seg->path, NULL);
  return g_strdup_printf("%s|%" G_GUINT64_FORMAT "|%" G_GUINT64_FORMAT "|%" G_GINT64_FORMAT
                         "|%" G_GINT64_FORMAT ".%09ld|%" G_GINT64_FORMAT ".%09ld|%s|%d|%s",
                         abs, (guint64)st->st_dev, (guint64)st->st_ino, (gint64)st->st_size,
                         (gint64)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
                         (gint64)st->st_ctim.tv_sec, st->st_ctim.tv_nsec,
                         format == COHORT_DATA_TEXT ? "text" : "tokens", vocab_size, fingerprint);
}

static GHashTable *index_load(const char *index_path)
{
  GHashTable *set = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  /* One line per prepared file: a few MiB for a million files; anything else is no index. */
  g_autofree char *text =
      index_path ? cohort_file_read_regular(index_path, 256u << 20, NULL, NULL, NULL) : NULL;
  if (!text)
    return set;
  g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
  /* A damaged index only costs a scan: unknown lines are ignored. */
  for (guint i = 0; lines[i]; i++)
    if (*lines[i])
      g_hash_table_add(set, g_strdup(lines[i]));
  return set;
}

CohortDataset *cohort_dataset_open(const char *path, CohortDataFormat format, int vocab_size,
                                   int seq_len, GError **error)
{
  return cohort_dataset_open_prepared(path, format, vocab_size, seq_len, NULL, NULL, error);
}

CohortDataset *cohort_dataset_open_prepared(const char *path, CohortDataFormat format,
                                            int vocab_size, int seq_len, const char *index_dir,
                                            guint *n_scanned, GError **error)
{
  g_return_val_if_fail(path != NULL, NULL);
  g_return_val_if_fail(seq_len > 0 && vocab_size > 0, NULL);

  g_autoptr(CohortDataset) ds = g_new0(CohortDataset, 1);
  ds->segments = g_array_new(FALSE, TRUE, sizeof(Segment));
  g_array_set_clear_func(ds->segments, segment_clear);
  ds->vocab_size = vocab_size;
  ds->seq_len = seq_len;
  const char *const suffixes[] = {format == COHORT_DATA_TEXT ? ".txt" : ".bin", NULL};

  g_autoptr(GPtrArray) files = cohort_list_data_files(path, suffixes, error);
  if (!files)
    return NULL;

  g_autofree char *index_path =
      index_dir ? g_build_filename(index_dir, "data-index.txt", NULL) : NULL;
  g_autoptr(GHashTable) known = index_load(index_path);
  g_autoptr(GString) index = g_string_new(NULL);
  guint scanned = 0;
  for (guint i = 0; i < files->len; i++) {
    const char *file = files->pdata[i];
    struct stat st;
    Segment seg = {.map = cohort_map_regular_file(file, &st, error), .start = ds->n_tokens};
    if (!seg.map)
      return NULL;
    seg.path = g_strdup(file);
    g_autofree char *key = index_entry_key(&seg, &st, format, vocab_size);
    gboolean scan = !g_hash_table_contains(known, key);
    gboolean ok = format == COHORT_DATA_TEXT ? add_text_file(ds, seg, vocab_size, scan, error)
                                             : add_shard_file(ds, seg, vocab_size, scan, error);
    if (!ok)
      return NULL;
    scanned += scan;
    g_string_append_printf(index, "%s\n", key);
  }
  if (n_scanned)
    *n_scanned = scanned;
  if (index_path && scanned > 0) {
    /* Best effort: without an index the next open scans again, nothing worse. */
    if (g_mkdir_with_parents(index_dir, 0755) == 0)
      g_file_set_contents(index_path, index->str, (gssize)index->len, NULL);
  }

  if (ds->n_tokens < (gsize)seq_len + 1) {
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_TOO_SMALL,
                "%s: %" G_GSIZE_FORMAT " tokens, fewer than one window of seq_len + 1 = %d", path,
                ds->n_tokens, seq_len + 1);
    return NULL;
  }
  return g_steal_pointer(&ds);
}

gsize cohort_dataset_num_tokens(const CohortDataset *ds)
{
  return ds->n_tokens;
}

gsize cohort_dataset_num_windows(const CohortDataset *ds)
{
  return (ds->n_tokens - 1) / (gsize)ds->seq_len;
}

int cohort_dataset_seq_len(const CohortDataset *ds)
{
  return ds->seq_len;
}

/* The segment holding token `pos` (binary search on start). */
static guint find_segment(const CohortDataset *ds, gsize pos)
{
  guint lo = 0, hi = ds->segments->len;
  while (hi - lo > 1) {
    guint mid = lo + (hi - lo) / 2;
    if (g_array_index(ds->segments, Segment, mid).start <= pos)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Copies `count` tokens from stream position `pos`, crossing segments as needed. */
static void copy_tokens(const CohortDataset *ds, gsize pos, int count, int *out)
{
  guint si = find_segment(ds, pos);
  for (int t = 0; t < count; t++, pos++) {
    const Segment *s = &g_array_index(ds->segments, Segment, si);
    while (pos >= s->start + s->count) {
      si++;
      s = &g_array_index(ds->segments, Segment, si);
    }
    gsize k = pos - s->start;
    /* Ids above INT_MAX become negative and fail the range check, as they must. */
    out[t] = s->width == 1 ? s->data[k] : (int)cohort_shard_token(s->data, s->width, k);
  }
}

/* Fails with the file and offset of the first token in buf[0..n) at or above vocab_size. */
static gboolean range_error(const CohortDataset *ds, gsize pos, const int *buf, int n,
                            GError **error)
{
  for (int t = 0; t < n; t++, pos++) {
    if ((guint)buf[t] < (guint)ds->vocab_size)
      continue;
    const Segment *s = &g_array_index(ds->segments, Segment, find_segment(ds, pos));
    gsize k = pos - s->start;
    g_set_error(error, COHORT_DATA_ERROR, COHORT_DATA_ERROR_VOCAB,
                "%s: token %u at position %" G_GSIZE_FORMAT " (byte offset %" G_GSIZE_FORMAT
                ") is not below vocab_size %d; the file changed after it was checked",
                s->path, (guint)buf[t], k, s->offset + k * (gsize)s->width, ds->vocab_size);
    return FALSE;
  }
  return TRUE;
}

gboolean cohort_dataset_window(const CohortDataset *ds, gsize index, int *inputs, int *targets,
                               GError **error)
{
  g_return_val_if_fail(index < cohort_dataset_num_windows(ds), FALSE);
  int T = ds->seq_len;
  g_autofree int *buf = g_new(int, T + 1);
  copy_tokens(ds, index * (gsize)T, T + 1, buf);
  /* The open scanned every token (or the index vouched for the file), but a mapped file can
   * change under a run: no id outside the vocabulary may reach a kernel. One pass for the
   * maximum (it vectorises), a second only to name the culprit. */
  guint max = 0;
  for (int t = 0; t <= T; t++)
    max = MAX(max, (guint)buf[t]);
  if (max >= (guint)ds->vocab_size)
    return range_error(ds, index * (gsize)T, buf, T + 1, error);
  memcpy(inputs, buf, sizeof(int) * T);
  memcpy(targets, buf + 1, sizeof(int) * T);
  return TRUE;
}

int *cohort_text_encode(const char *text, int *n_tokens)
{
  gsize n = text ? strlen(text) : 0;
  int *out = g_new(int, n > 0 ? n : 1);
  for (gsize i = 0; i < n; i++)
    out[i] = (guint8)text[i];
  *n_tokens = (int)n;
  return out;
}
