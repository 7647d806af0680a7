#include "engine/progress/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/progress/tfrecord.h"

#define FILE_PREFIX  "events.out.tfevents."
#define FILE_VERSION "brain.Event:2"

struct CohortTbWriter {
  int fd;
  char *path;
};

typedef struct {
  char *tag;
  float value;
} Scalar;

struct CohortTbScalars {
  GArray *values; /* Scalar */
};

/* ---- protobuf wire format: just the three wire types the Event fields use ---- */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

static void put_varint(GByteArray *b, guint64 v)
{
  do {
    guint8 byte = (guint8)(v & 0x7f);
    v >>= 7;
    if (v)
      byte |= 0x80;
    g_byte_array_append(b, &byte, 1);
  } while (v);
}

static void put_key(GByteArray *b, guint field, guint wire)
{
  put_varint(b, (guint64)field << 3 | wire);
}

static void put_fixed(GByteArray *b, guint64 bits, int bytes)
{
  guint8 le[8];
  for (int i = 0; i < bytes; i++)
    le[i] = (guint8)(bits >> (8 * i));
  g_byte_array_append(b, le, (guint)bytes);
}

static void put_double(GByteArray *b, guint field, double v)
{
  guint64 bits;
  memcpy(&bits, &v, sizeof bits);
  put_key(b, field, WIRE_FIXED64);
  put_fixed(b, bits, 8);
}

static void put_float(GByteArray *b, guint field, float v)
{
  guint32 bits;
  memcpy(&bits, &v, sizeof bits);
  put_key(b, field, WIRE_FIXED32);
  put_fixed(b, bits, 4);
}

static void put_bytes(GByteArray *b, guint field, const void *data, gsize len)
{
  put_key(b, field, WIRE_BYTES);
  put_varint(b, len);
  g_byte_array_append(b, data, (guint)len);
}

/* int64 is a varint of the two's-complement value (negative steps take ten bytes). */
static void put_int64(GByteArray *b, guint field, gint64 v)
{
  put_key(b, field, WIRE_VARINT);
  put_varint(b, (guint64)v);
}

/* Event fields (tensorboard/compat/proto/event.proto). */
enum { EV_WALL_TIME = 1, EV_STEP = 2, EV_FILE_VERSION = 3, EV_SUMMARY = 5, EV_SESSION_LOG = 7 };
/* Summary.value = 1; Value.tag = 1, Value.simple_value = 2; SessionLog.status = 1. */
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE = 2, SESSION_STATUS = 1 };
enum { SESSION_START = 1 };

static GByteArray *event_head(double wall_time, gint64 step)
{
  GByteArray *ev = g_byte_array_new();
  put_double(ev, EV_WALL_TIME, wall_time);
  put_int64(ev, EV_STEP, step);
  return ev;
}

/* ---- the file ---- */

static gboolean write_record(CohortTbWriter *w, GByteArray *event, GError **error)
{
  g_autoptr(GByteArray) rec = g_byte_array_sized_new(event->len + 16);
  cohort_tfrecord_append(rec, event->data, event->len);
  /* One write() per record: a process killed between records leaves whole records, and
   * the file stays readable by TensorBoard while the run goes on. */
  const guint8 *p = rec->data;
  gsize left = rec->len;
  while (left > 0) {
    ssize_t n = write(w->fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: cannot write: %s", w->path,
                  g_strerror(errno));
      return FALSE;
    }
    p += n;
    left -= (gsize)n;
  }
  return TRUE;
}

/* The Unix time in an event file's name, or -1 when the name is not one. */
static gint64 name_time(const char *name)
{
  if (!g_str_has_prefix(name, FILE_PREFIX))
    return -1;
  const char *t = name + strlen(FILE_PREFIX);
  char *end = NULL;
  gint64 v = g_ascii_strtoll(t, &end, 10);
  return end != t && *end == '.' ? v : -1;
}

/* *out = the newest event file of `dir` (by the time in the name, then the name), or NULL. */
static gboolean newest_file(const char *dir, char **out, GError **error)
{
  *out = NULL;
  g_autoptr(GDir) d = g_dir_open(dir, 0, error);
  if (!d)
    return FALSE;
  const char *name;
  g_autofree char *best = NULL;
  gint64 best_t = -1;
  while ((name = g_dir_read_name(d)) != NULL) {
    gint64 t = name_time(name);
    if (t < 0)
      continue;
    if (best == NULL || t > best_t || (t == best_t && strcmp(name, best) > 0)) {
      g_free(best);
      best = g_strdup(name);
      best_t = t;
    }
  }
  if (best)
    *out = g_build_filename(dir, best, NULL);
  return TRUE;
}

static char *host_part(void)
{
  /* Host names are letters, digits, '-' and '.'; anything else would be an odd file name. */
  char *h = g_strdup(g_get_host_name());
  for (char *c = h; *c; c++)
    if (!g_ascii_isalnum(*c) && *c != '-' && *c != '.')
      *c = '_';
  return h;
}

/* The record every event file starts with. */
static gboolean write_version(CohortTbWriter *w, GError **error)
{
  g_autoptr(GByteArray) ev = event_head((double)g_get_real_time() / 1e6, 0);
  put_bytes(ev, EV_FILE_VERSION, FILE_VERSION, strlen(FILE_VERSION));
  return write_record(w, ev, error);
}

static gboolean create_file(CohortTbWriter *w, const char *dir, GError **error)
{
  g_autofree char *host = host_part();
  gint64 now = g_get_real_time() / G_USEC_PER_SEC;
  for (int n = 0; n < 100; n++) {
    g_autofree char *name =
        n == 0 ? g_strdup_printf(FILE_PREFIX "%" G_GINT64_FORMAT ".%s", now, host)
               : g_strdup_printf(FILE_PREFIX "%" G_GINT64_FORMAT ".%s.%d", now, host, n);
    g_free(w->path);
    w->path = g_build_filename(dir, name, NULL);
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (w->fd >= 0)
      break;
    if (errno != EEXIST) {
      g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: cannot create: %s", w->path,
                  g_strerror(errno));
      return FALSE;
    }
  }
  if (w->fd < 0) {
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_EXISTS, "%s: cannot create: name taken", w->path);
    return FALSE;
  }
  return write_version(w, error);
}

/* Opens `path` to continue it. *usable is FALSE when it must be left alone (damaged). */
static gboolean continue_file(CohortTbWriter *w, const char *path, gboolean *usable, char **note,
                              GError **error)
{
  *usable = FALSE;
  int fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: cannot open: %s", path,
                g_strerror(errno));
    return FALSE;
  }
  CohortTfrecordScan scan;
  if (!cohort_tfrecord_scan(fd, path, &scan, NULL, error)) {
    close(fd);
    return FALSE;
  }
  if (scan.corrupt) {
    /* Damage inside the file: left as it is for whoever wants to look; a fresh file beside. */
    close(fd);
    if (note)
      *note =
          g_strdup_printf("%s: a record with a bad checksum; continuing in a new event file", path);
    return TRUE;
  }
  if (scan.torn_tail) {
    if (ftruncate(fd, (off_t)scan.good_length) != 0) {
      g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: cannot cut a torn tail: %s",
                  path, g_strerror(errno));
      close(fd);
      return FALSE;
    }
    if (note)
      *note = g_strdup_printf("%s: removed an incomplete last record (%" G_GUINT64_FORMAT
                              " bytes) left by a process stopped while writing",
                              path, scan.file_length - scan.good_length);
  }
  w->fd = fd;
  w->path = g_strdup(path);
  *usable = TRUE;
  /* Killed while writing its very first record: the file starts over. */
  return scan.records > 0 || write_version(w, error);
}

CohortTbWriter *cohort_tb_writer_open(const char *dir, char **note, GError **error)
{
  if (note)
    *note = NULL;
  if (g_mkdir_with_parents(dir, 0755) != 0) {
    g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: cannot create: %s", dir,
                g_strerror(errno));
    return NULL;
  }
  g_autoptr(CohortTbWriter) w = g_new0(CohortTbWriter, 1);
  w->fd = -1;
  g_autofree char *newest = NULL;
  if (!newest_file(dir, &newest, error))
    return NULL;
  gboolean usable = FALSE;
  if (newest && !continue_file(w, newest, &usable, note, error))
    return NULL;
  if (!usable && !create_file(w, dir, error))
    return NULL;
  return g_steal_pointer(&w);
}

void cohort_tb_writer_free(CohortTbWriter *w)
{
  if (!w)
    return;
  if (w->fd >= 0)
    close(w->fd);
  g_free(w->path);
  g_free(w);
}

const char *cohort_tb_writer_path(CohortTbWriter *w)
{
  return w->path;
}

static void scalar_clear(gpointer p)
{
  g_free(((Scalar *)p)->tag);
}

CohortTbScalars *cohort_tb_scalars_new(void)
{
  CohortTbScalars *s = g_new0(CohortTbScalars, 1);
  s->values = g_array_new(FALSE, FALSE, sizeof(Scalar));
  g_array_set_clear_func(s->values, scalar_clear);
  return s;
}

void cohort_tb_scalars_free(CohortTbScalars *s)
{
  if (!s)
    return;
  g_array_unref(s->values);
  g_free(s);
}

void cohort_tb_scalars_add(CohortTbScalars *s, const char *tag, double value)
{
  Scalar v = {g_strdup(tag), (float)value};
  g_array_append_val(s->values, v);
}

guint cohort_tb_scalars_count(const CohortTbScalars *s)
{
  return s->values->len;
}

gboolean cohort_tb_writer_add(CohortTbWriter *w, double wall_time, gint64 step,
                              const CohortTbScalars *s, GError **error)
{
  if (s->values->len == 0)
    return TRUE;
  g_autoptr(GByteArray) summary = g_byte_array_new();
  for (guint i = 0; i < s->values->len; i++) {
    const Scalar *v = &g_array_index(s->values, Scalar, i);
    g_autoptr(GByteArray) value = g_byte_array_new();
    put_bytes(value, VALUE_TAG, v->tag, strlen(v->tag));
    put_float(value, VALUE_SIMPLE, v->value);
    put_bytes(summary, SUMMARY_VALUE, value->data, value->len);
  }
  g_autoptr(GByteArray) ev = event_head(wall_time, step);
  put_bytes(ev, EV_SUMMARY, summary->data, summary->len);
  return write_record(w, ev, error);
}

gboolean cohort_tb_writer_session_start(CohortTbWriter *w, double wall_time, gint64 step,
                                        GError **error)
{
  g_autoptr(GByteArray) log = g_byte_array_new();
  put_key(log, SESSION_STATUS, WIRE_VARINT);
  put_varint(log, SESSION_START);
  g_autoptr(GByteArray) ev = event_head(wall_time, step);
  put_bytes(ev, EV_SESSION_LOG, log->data, log->len);
  return write_record(w, ev, error);
}
