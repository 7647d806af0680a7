/* An independent reader of TensorBoard event files for the tests (header-only): TFRecord
 * framing with a bit-by-bit CRC-32C (not the engine's table), and a protobuf decoder that
 * knows only the fields the engine may write and fails on anything else. Field numbers as
 * in TensorBoard's event.proto / summary.proto. */
#pragma once

#include <glib.h>
#include <string.h>

typedef struct {
  double wall_time;
  gint64 step;
  char *file_version; /* NULL when absent */
  int session_status; /* SessionLog.status; 0 when there is no session_log */
  GPtrArray *tags;    /* char * */
  GArray *values;     /* double (the float read, widened) */
} TbrEvent;

static inline TbrEvent *tbr_event_new(void)
{
  TbrEvent *e = g_new0(TbrEvent, 1);
  e->tags = g_ptr_array_new_with_free_func(g_free);
  e->values = g_array_new(FALSE, FALSE, sizeof(double));
  return e;
}

static inline void tbr_event_free(gpointer p)
{
  TbrEvent *e = p;
  g_free(e->file_version);
  g_ptr_array_unref(e->tags);
  g_array_unref(e->values);
  g_free(e);
}

/* Takes `tag`. */
static inline void tbr_event_add(TbrEvent *e, char *tag, double v)
{
  g_ptr_array_add(e->tags, tag);
  g_array_append_val(e->values, v);
}

static inline gboolean tbr_event_lookup(const TbrEvent *e, const char *tag, float *v)
{
  for (guint i = 0; i < e->tags->len; i++)
    if (g_str_equal(g_ptr_array_index(e->tags, i), tag)) {
      *v = (float)g_array_index(e->values, double, i);
      return TRUE;
    }
  return FALSE;
}

static inline guint32 tbr_crc32c(const void *data, gsize len)
{
  const guint8 *p = data;
  guint32 crc = 0xffffffffu;
  for (gsize i = 0; i < len; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++)
      crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
  }
  return ~crc;
}

static inline guint32 tbr_masked(const void *data, gsize len)
{
  guint32 c = tbr_crc32c(data, len);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static inline guint64 tbr_le(const guint8 *p, int n)
{
  guint64 v = 0;
  for (int i = 0; i < n; i++)
    v |= (guint64)p[i] << (8 * i);
  return v;
}

/* A protobuf field: number, wire type and payload. */
typedef struct {
  guint field, wire;
  guint64 num; /* varint, fixed64, fixed32 */
  const guint8 *data;
  gsize len; /* length-delimited */
} TbrField;

static inline guint64 tbr_varint(const guint8 **p, const guint8 *end)
{
  guint64 v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    g_assert_true(*p < end);
    guint8 b = *(*p)++;
    v |= (guint64)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return v;
  }
  g_error("varint longer than 10 bytes");
}

static inline gboolean tbr_next(const guint8 **p, const guint8 *end, TbrField *f)
{
  memset(f, 0, sizeof *f);
  if (*p >= end)
    return FALSE;
  guint64 key = tbr_varint(p, end);
  f->field = (guint)(key >> 3);
  f->wire = (guint)(key & 7);
  switch (f->wire) {
  case 0:
    f->num = tbr_varint(p, end);
    break;
  case 1:
  case 5: {
    int n = f->wire == 1 ? 8 : 4;
    g_assert_cmpint(end - *p, >=, n);
    f->num = tbr_le(*p, n);
    *p += n;
    break;
  }
  case 2:
    f->len = (gsize)tbr_varint(p, end);
    g_assert_cmpuint(f->len, <=, (gsize)(end - *p));
    f->data = *p;
    *p += f->len;
    break;
  default:
    g_error("wire type %u (field %u) is not one the engine writes", f->wire, f->field);
  }
  return TRUE;
}

static inline void tbr_value(TbrEvent *e, const guint8 *p, const guint8 *end)
{
  TbrField f;
  char *tag = NULL;
  gboolean have = FALSE;
  float v = 0;
  while (tbr_next(&p, end, &f)) {
    if (f.field == 1 && f.wire == 2) {
      g_assert_null(tag);
      tag = g_strndup((const char *)f.data, f.len);
    } else if (f.field == 2 && f.wire == 5) {
      guint32 bits = (guint32)f.num;
      memcpy(&v, &bits, 4);
      have = TRUE;
    } else {
      g_error("Summary.Value: unexpected field %u (wire %u)", f.field, f.wire);
    }
  }
  g_assert_nonnull(tag);
  g_assert_true(have);
  tbr_event_add(e, tag, v);
}

static inline TbrEvent *tbr_event_decode(const guint8 *p, gsize len)
{
  const guint8 *end = p + len;
  TbrEvent *e = tbr_event_new();
  TbrField f;
  while (tbr_next(&p, end, &f)) {
    if (f.field == 1 && f.wire == 1) {
      memcpy(&e->wall_time, &f.num, 8);
    } else if (f.field == 2 && f.wire == 0) {
      e->step = (gint64)f.num;
    } else if (f.field == 3 && f.wire == 2) {
      e->file_version = g_strndup((const char *)f.data, f.len);
    } else if (f.field == 5 && f.wire == 2) {
      const guint8 *s = f.data, *send = f.data + f.len;
      TbrField v;
      while (tbr_next(&s, send, &v)) {
        g_assert_cmpuint(v.field, ==, 1);
        g_assert_cmpuint(v.wire, ==, 2);
        tbr_value(e, v.data, v.data + v.len);
      }
    } else if (f.field == 7 && f.wire == 2) {
      const guint8 *s = f.data, *send = f.data + f.len;
      TbrField v;
      while (tbr_next(&s, send, &v)) {
        g_assert_cmpuint(v.field, ==, 1);
        g_assert_cmpuint(v.wire, ==, 0);
        e->session_status = (int)v.num;
      }
      g_assert_cmpint(e->session_status, !=, 0);
    } else {
      g_error("Event: unexpected field %u (wire %u)", f.field, f.wire);
    }
  }
  return e;
}

/* Every record of the file `path`, decoded; fails the test on any bad CRC, torn record or
 * field the engine does not write. */
static inline GPtrArray *tbr_read_file(const char *path)
{
  g_autofree char *text = NULL;
  gsize size = 0;
  g_autoptr(GError) error = NULL;
  g_assert_true(g_file_get_contents(path, &text, &size, &error));
  g_assert_no_error(error);
  const guint8 *buf = (const guint8 *)text;
  GPtrArray *out = g_ptr_array_new_with_free_func(tbr_event_free);
  gsize at = 0;
  while (at < size) {
    g_assert_cmpuint(size - at, >=, 12);
    guint64 len = tbr_le(buf + at, 8);
    if (tbr_le(buf + at + 8, 4) != tbr_masked(buf + at, 8))
      g_error("%s: record %u at %zu: length CRC mismatch", path, out->len, at);
    g_assert_cmpuint(len + 16, <=, size - at);
    const guint8 *data = buf + at + 12;
    if (tbr_le(data + len, 4) != tbr_masked(data, (gsize)len))
      g_error("%s: record %u at %zu: data CRC mismatch", path, out->len, at);
    g_ptr_array_add(out, tbr_event_decode(data, (gsize)len));
    at += 12 + (gsize)len + 4;
  }
  return out;
}
