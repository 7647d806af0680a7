/* Filters, tests, methods and global functions of the chat-template renderer, with the
 * meanings Jinja2 and Python give them (transformers' tojson: json.dumps without ASCII
 * escapes). Anything else is refused by name when the template is read. */
#include "data/jinja-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

JjValue *jj_arg(GPtrArray *a, guint i, GPtrArray *kn, GPtrArray *kv, const char *name)
{
  if (a && i < a->len)
    return a->pdata[i];
  for (guint k = 0; kn && k < kn->len; k++)
    if (strcmp(kn->pdata[k], name) == 0)
      return kv->pdata[k];
  return NULL;
}

JjValue *jj_bad(JjRender *r, int line, const char *what, const JjValue *v)
{
  jj_fail(r->errors, line, "%s does not take a %s", what, v ? jj_type_name(v) : "missing value");
  return NULL;
}

gboolean jj_py_space(gunichar c)
{
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

JjValue *jj_str_of(JjRender *r, const JjValue *v)
{
  if (v->type == JV_STRING)
    return (JjValue *)v;
  GString *s = g_string_new(NULL);
  jj_append_str(s, v);
  JjValue *o = jj_string(r, s->str, s->len);
  g_string_free(s, TRUE);
  return o;
}

JjValue *jj_strip_chars(JjRender *r, const JjValue *s, const JjValue *chars, gboolean left,
                        gboolean right)
{
  const char *a = s->s, *b = s->s + s->len;
  gboolean any = !chars || chars->type == JV_NONE;
  while (left && a < b) {
    gunichar c = g_utf8_get_char(a);
    gboolean strip = any ? jj_py_space(c) : g_utf8_strchr(chars->s, (gssize)chars->len, c) != NULL;
    if (!strip)
      break;
    a = g_utf8_next_char(a);
  }
  while (right && b > a) {
    const char *p = g_utf8_prev_char(b);
    gunichar c = g_utf8_get_char(p);
    gboolean strip = any ? jj_py_space(c) : g_utf8_strchr(chars->s, (gssize)chars->len, c) != NULL;
    if (!strip)
      break;
    b = p;
  }
  return jj_substring(r, s, a, (gsize)(b - a));
}

static JjValue *m_strip(JjRender *r, JjValue *self, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                        int line, gboolean left, gboolean right)
{
  JjValue *chars = jj_arg(a, 0, kn, kv, "chars");
  if (chars && chars->type != JV_STRING && chars->type != JV_NONE)
    return jj_bad(r, line, "strip()", chars);
  return jj_strip_chars(r, self, chars, left, right);
}

static JjValue *m_strip_both(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                             int line)
{
  return m_strip(r, s, a, kn, kv, line, TRUE, TRUE);
}

static JjValue *m_lstrip(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                         int line)
{
  return m_strip(r, s, a, kn, kv, line, TRUE, FALSE);
}

static JjValue *m_rstrip(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                         int line)
{
  return m_strip(r, s, a, kn, kv, line, FALSE, TRUE);
}

static JjValue *m_split(JjRender *r, JjValue *self, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                        int line)
{
  JjValue *sep = jj_arg(a, 0, kn, kv, "sep"), *max = jj_arg(a, 1, kn, kv, "maxsplit");
  gint64 limit = max && max->type == JV_INT ? max->i : -1;
  JjValue *out = jj_list(r);
  const char *p = self->s, *end = self->s + self->len;
  if (!sep || sep->type == JV_NONE) {
    while (p < end) {
      while (p < end && jj_py_space(g_utf8_get_char(p)))
        p = g_utf8_next_char(p);
      if (p >= end)
        break;
      const char *q = p;
      if (limit >= 0 && (gint64)out->items->len >= limit) {
        const char *e = end;
        while (e > q && jj_py_space(g_utf8_get_char(g_utf8_prev_char(e))))
          e = g_utf8_prev_char(e);
        jj_list_add(out, jj_substring(r, self, q, (gsize)(e - q)));
        break;
      }
      while (q < end && !jj_py_space(g_utf8_get_char(q)))
        q = g_utf8_next_char(q);
      jj_list_add(out, jj_substring(r, self, p, (gsize)(q - p)));
      p = q;
    }
    return out;
  }
  if (sep->type != JV_STRING || sep->len == 0)
    return jj_fail(r->errors, line, "split(): the separator must be a non-empty string"), NULL;
  for (;;) {
    const char *hit = limit < 0 || (gint64)out->items->len < limit
                          ? g_strstr_len(p, (gssize)(end - p), sep->s)
                          : NULL;
    if (!hit) {
      jj_list_add(out, jj_substring(r, self, p, (gsize)(end - p)));
      return out;
    }
    jj_list_add(out, jj_substring(r, self, p, (gsize)(hit - p)));
    p = hit + sep->len;
  }
}

/* startswith / endswith: a string or a tuple (list) of strings. */
static JjValue *affix(JjRender *r, JjValue *self, GPtrArray *a, int line, gboolean start)
{
  JjValue *x = a && a->len ? a->pdata[0] : NULL;
  if (!x)
    return jj_bad(r, line, start ? "startswith()" : "endswith()", NULL);
  guint n = x->type == JV_LIST ? x->items->len : 1;
  for (guint i = 0; i < n; i++) {
    JjValue *p = x->type == JV_LIST ? x->items->pdata[i] : x;
    if (p->type != JV_STRING)
      return jj_bad(r, line, start ? "startswith()" : "endswith()", p);
    if (p->len <= self->len &&
        memcmp(start ? self->s : self->s + self->len - p->len, p->s, p->len) == 0)
      return jj_bool(r, TRUE);
  }
  return jj_bool(r, FALSE);
}

static JjValue *m_startswith(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                             int line)
{
  (void)kn, (void)kv;
  return affix(r, s, a, line, TRUE);
}

static JjValue *m_endswith(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                           int line)
{
  (void)kn, (void)kv;
  return affix(r, s, a, line, FALSE);
}

JjValue *jj_change_case(JjRender *r, const JjValue *s, int how)
{
  GString *o = g_string_new(NULL);
  gboolean word = FALSE;
  for (const char *p = s->s; p < s->s + s->len; p = g_utf8_next_char(p)) {
    gunichar c = g_utf8_get_char(p);
    gboolean cased = g_unichar_isupper(c) || g_unichar_islower(c) || g_unichar_istitle(c);
    gunichar d = how == 0   ? g_unichar_toupper(c)
                 : how == 1 ? g_unichar_tolower(c)
                 : how == 2 ? (word ? g_unichar_tolower(c) : g_unichar_totitle(c))
                            : (p == s->s ? g_unichar_totitle(c) : g_unichar_tolower(c));
    g_string_append_unichar(o, d);
    word = cased;
  }
  JjValue *v = jj_string(r, o->str, o->len);
  g_string_free(o, TRUE);
  return v;
}

static JjValue *m_upper(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv, (void)l;
  return jj_change_case(r, s, 0);
}

static JjValue *m_lower(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv, (void)l;
  return jj_change_case(r, s, 1);
}

static JjValue *m_title(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv, (void)l;
  return jj_change_case(r, s, 2);
}

static JjValue *m_capitalize(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                             int l)
{
  (void)a, (void)kn, (void)kv, (void)l;
  return jj_change_case(r, s, 3);
}

JjValue *jj_replace(JjRender *r, const JjValue *s, const JjValue *from, const JjValue *to,
                    gint64 count, int line)
{
  if (!from || !to || from->type != JV_STRING || to->type != JV_STRING)
    return jj_fail(r->errors, line, "replace() takes two strings"), NULL;
  GString *o = g_string_new(NULL);
  const char *p = s->s, *end = s->s + s->len;
  for (gint64 done = 0; count < 0 || done < count; done++) {
    const char *hit = from->len ? g_strstr_len(p, (gssize)(end - p), from->s) : NULL;
    if (!hit)
      break;
    g_string_append_len(o, p, hit - p);
    g_string_append_len(o, to->s, (gssize)to->len);
    p = hit + from->len;
    if (o->len > JJ_MAX_OUTPUT)
      break;
  }
  g_string_append_len(o, p, end - p);
  JjValue *v = jj_string(r, o->str, o->len);
  g_string_free(o, TRUE);
  return v;
}

static JjValue *m_replace(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                          int line)
{
  JjValue *c = jj_arg(a, 2, kn, kv, "count");
  return jj_replace(r, s, jj_arg(a, 0, kn, kv, "old"), jj_arg(a, 1, kn, kv, "new"),
                    c && c->type == JV_INT ? c->i : -1, line);
}

static JjValue *m_join(JjRender *r, JjValue *s, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                       int line)
{
  JjValue *items = jj_arg(a, 0, kn, kv, "iterable");
  if (!items || items->type != JV_LIST)
    return jj_bad(r, line, "join()", items);
  GString *o = g_string_new(NULL);
  for (guint i = 0; i < items->items->len; i++) {
    JjValue *x = items->items->pdata[i];
    if (x->type != JV_STRING) {
      g_string_free(o, TRUE);
      return jj_bad(r, line, "str.join()", x);
    }
    if (i)
      g_string_append_len(o, s->s, (gssize)s->len);
    g_string_append_len(o, x->s, (gssize)x->len);
  }
  JjValue *v = jj_string(r, o->str, o->len);
  g_string_free(o, TRUE);
  return v;
}

static JjValue *m_get(JjRender *r, JjValue *d, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)l;
  JjValue *k = jj_arg(a, 0, kn, kv, "key"), *dflt = jj_arg(a, 1, kn, kv, "default");
  JjValue *v = k && k->type == JV_STRING ? jj_dict_get(d, k->s) : NULL;
  return v ? v : dflt ? dflt : jj_none(r);
}

static JjValue *dict_view(JjRender *r, JjValue *d, int which)
{
  JjValue *out = jj_list(r);
  for (guint i = 0; i < d->keys->len; i++) {
    JjValue *k = jj_string(r, d->keys->pdata[i], strlen(d->keys->pdata[i]));
    if (which == 0) {
      JjValue *pair = jj_list(r);
      jj_list_add(pair, k);
      jj_list_add(pair, d->items->pdata[i]);
      jj_list_add(out, pair);
    } else {
      jj_list_add(out, which == 1 ? k : d->items->pdata[i]);
    }
  }
  return out;
}

static JjValue *m_items(JjRender *r, JjValue *d, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv, (void)l;
  return dict_view(r, d, 0);
}

static JjValue *m_keys(JjRender *r, JjValue *d, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv, (void)l;
  return dict_view(r, d, 1);
}

static JjValue *m_values(JjRender *r, JjValue *d, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv, (void)l;
  return dict_view(r, d, 2);
}

JjValue *jj_method(JjRender *r, JjValue *v, const char *name)
{
  static const struct {
    JjType type;
    const char *name;
    JjBuiltinFunc f;
  } methods[] = {
      {JV_STRING, "strip", m_strip_both},
      {JV_STRING, "lstrip", m_lstrip},
      {JV_STRING, "rstrip", m_rstrip},
      {JV_STRING, "split", m_split},
      {JV_STRING, "startswith", m_startswith},
      {JV_STRING, "endswith", m_endswith},
      {JV_STRING, "upper", m_upper},
      {JV_STRING, "lower", m_lower},
      {JV_STRING, "title", m_title},
      {JV_STRING, "capitalize", m_capitalize},
      {JV_STRING, "replace", m_replace},
      {JV_STRING, "join", m_join},
      {JV_DICT, "get", m_get},
      {JV_DICT, "items", m_items},
      {JV_DICT, "keys", m_keys},
      {JV_DICT, "values", m_values},
  };
  for (guint i = 0; i < G_N_ELEMENTS(methods); i++)
    if (methods[i].type == v->type && strcmp(methods[i].name, name) == 0)
      return jj_builtin(r, methods[i].name, methods[i].f, v);
  return NULL;
}
