/* Message content followed through a render: a string value carries the stretches of it that
 * are a message's content (JjMark), through substrings (strip, trim, split), concatenation
 * (+, ~), macro calls and set blocks, into the output, so a chat template's render says where
 * each message's content lands (data/chat-template.h) without searching the text for it. */
#include "data/jinja-private.h"

#include <string.h>

static void set_marks(JjRender *r, JjValue *v, const GArray *marks)
{
  v->n_marks = marks->len;
  v->marks = marks->len ? jj_alloc(r->arena, marks->len * sizeof(JjMark)) : NULL;
  if (marks->len)
    memcpy(v->marks, marks->data, marks->len * sizeof(JjMark));
}

/* v's marks within [from, from + len), moved to begin at `at`, appended to `dst`. */
static void copy_marks(GArray *dst, const JjValue *v, gsize from, gsize len, gsize at)
{
  if (v->type != JV_STRING)
    return;
  for (guint i = 0; i < v->n_marks; i++) {
    const JjMark *m = &v->marks[i];
    gsize a = MAX(m->start, from), b = MIN(m->start + m->len, from + len);
    if (a >= b)
      continue;
    JjMark out = {a - from + at, b - a, m->msg};
    JjMark *last = dst->len ? &g_array_index(dst, JjMark, dst->len - 1) : NULL;
    if (last && last->msg == out.msg && last->start + last->len == out.start)
      last->len += out.len; /* one stretch, not two */
    else
      g_array_append_val(dst, out);
  }
}

void jj_mark_all(JjRender *r, JjValue *v, guint msg)
{
  if (v->type != JV_STRING || v->len == 0)
    return;
  v->marks = jj_alloc(r->arena, sizeof(JjMark));
  *v->marks = (JjMark){0, v->len, msg};
  v->n_marks = 1;
}

JjValue *jj_substring(JjRender *r, const JjValue *v, const char *p, gsize len)
{
  JjValue *out = jj_string(r, p, len);
  if (v->n_marks == 0)
    return out;
  g_autoptr(GArray) marks = g_array_new(FALSE, FALSE, sizeof(JjMark));
  copy_marks(marks, v, (gsize)(p - v->s), len, 0);
  set_marks(r, out, marks);
  return out;
}

void jj_join_marks(JjRender *r, JjValue *v, const JjValue *x, gsize xat, const JjValue *y,
                   gsize yat)
{
  if (x->n_marks == 0 && y->n_marks == 0)
    return;
  g_autoptr(GArray) marks = g_array_new(FALSE, FALSE, sizeof(JjMark));
  copy_marks(marks, x, 0, x->len, xat);
  copy_marks(marks, y, 0, y->len, yat);
  set_marks(r, v, marks);
}

void jj_out(JjRender *r, const JjValue *v)
{
  gsize at = r->out->len;
  jj_append_str(r->out, v);
  if (r->marks && v->type == JV_STRING)
    copy_marks(r->marks, v, 0, v->len, at);
}

void jj_capture_begin(JjRender *r, JjCapture *c)
{
  c->out = r->out;
  c->marks = r->marks;
  r->out = g_string_new(NULL);
  r->marks = c->marks ? g_array_new(FALSE, FALSE, sizeof(JjMark)) : NULL;
}

JjValue *jj_capture_end(JjRender *r, JjCapture *c, gboolean ok)
{
  JjValue *v = ok ? jj_string(r, r->out->str, r->out->len) : NULL;
  if (v && r->marks)
    set_marks(r, v, r->marks);
  g_string_free(r->out, TRUE);
  if (r->marks)
    g_array_unref(r->marks);
  r->out = c->out;
  r->marks = c->marks;
  return v;
}
