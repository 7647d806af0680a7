/* Filters, tests and globals of the chat-template renderer (see data/jinja-builtins.c). */
#include "data/jinja-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef JjValue *(*FilterFunc)(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                               int line);

static gint64 length(const JjValue *v)
{
  if (v->type == JV_STRING)
    return g_utf8_strlen(v->s, (gssize)v->len);
  if (v->type == JV_LIST || v->type == JV_DICT || v->type == JV_NAMESPACE)
    return v->items->len;
  return -1;
}

static JjValue *f_length(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                         int line)
{
  (void)a, (void)kn, (void)kv;
  gint64 n = v->type == JV_UNDEFINED ? 0 : length(v);
  return n < 0 ? jj_bad(r, line, "length", v) : jj_int(r, n);
}

static JjValue *f_tojson(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                         int line)
{
  JjValue *indent = jj_arg(a, 0, kn, kv, "indent");
  if (jj_arg(NULL, 0, kn, kv, "separators") || jj_arg(NULL, 0, kn, kv, "sort_keys"))
    return jj_fail(r->errors, line, "tojson: separators and sort_keys are not supported"), NULL;
  if (indent && indent->type != JV_INT && indent->type != JV_NONE)
    return jj_bad(r, line, "tojson's indent", indent);
  GString *s = g_string_new(NULL);
  gboolean ok = jj_append_json(s, v, indent && indent->type == JV_INT ? (int)indent->i : 0, 0);
  JjValue *out = ok ? jj_string(r, s->str, s->len) : NULL;
  g_string_free(s, TRUE);
  return ok ? out : jj_bad(r, line, "tojson", v);
}

static JjValue *f_trim(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                       int line)
{
  JjValue *chars = jj_arg(a, 0, kn, kv, "chars");
  if (v->type != JV_STRING)
    v = jj_str_of(r, v);
  if (chars && chars->type != JV_STRING && chars->type != JV_NONE)
    return jj_bad(r, line, "trim's chars", chars);
  return jj_strip_chars(r, v, chars, TRUE, TRUE);
}

static JjValue *f_string(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                         int line)
{
  (void)a, (void)kn, (void)kv, (void)line;
  return jj_str_of(r, v);
}

static JjValue *f_case(JjRender *r, JjValue *v, int how, int line, const char *name)
{
  if (v->type != JV_STRING && v->type != JV_UNDEFINED)
    return jj_bad(r, line, name, v);
  return jj_change_case(r, jj_str_of(r, v), how);
}

static JjValue *f_upper(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv;
  return f_case(r, v, 0, l, "upper");
}

static JjValue *f_lower(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv;
  return f_case(r, v, 1, l, "lower");
}

static JjValue *f_title(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv;
  return f_case(r, v, 2, l, "title");
}

static JjValue *f_capitalize(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                             int l)
{
  (void)a, (void)kn, (void)kv;
  return f_case(r, v, 3, l, "capitalize");
}

static JjValue *f_default(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                          int line)
{
  (void)line;
  JjValue *d = jj_arg(a, 0, kn, kv, "default_value"), *b = jj_arg(a, 1, kn, kv, "boolean");
  gboolean use = v->type == JV_UNDEFINED || (b && jj_truthy(b) && !jj_truthy(v));
  return use ? (d ? d : jj_string(r, "", 0)) : v;
}

static JjValue *f_join(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                       int line)
{
  JjValue *sep = jj_arg(a, 0, kn, kv, "d"), *attr = jj_arg(a, 1, kn, kv, "attribute");
  if (v->type != JV_LIST || (sep && sep->type != JV_STRING))
    return jj_bad(r, line, "join", v->type != JV_LIST ? v : sep);
  GString *s = g_string_new(NULL);
  for (guint i = 0; i < v->items->len; i++) {
    JjValue *x = v->items->pdata[i];
    if (attr && attr->type == JV_STRING && x->type == JV_DICT) {
      x = jj_dict_get(x, attr->s);
      x = x ? x : jj_undefined(r, NULL);
    }
    if (i && sep)
      g_string_append_len(s, sep->s, (gssize)sep->len);
    jj_append_str(s, x);
  }
  JjValue *out = jj_string(r, s->str, s->len);
  g_string_free(s, TRUE);
  return out;
}

static JjValue *f_pick(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                       int line, int which)
{
  (void)a, (void)kn, (void)kv;
  if (v->type == JV_STRING)
    v = jj_filter(r, "list", v, NULL, NULL, NULL, line);
  if (!v || v->type != JV_LIST)
    return jj_bad(r, line, which ? "last" : "first", v);
  if (v->items->len == 0)
    return jj_undefined(r, NULL);
  return v->items->pdata[which ? v->items->len - 1 : 0];
}

static JjValue *f_first(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  return f_pick(r, v, a, kn, kv, l, 0);
}

static JjValue *f_last(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  return f_pick(r, v, a, kn, kv, l, 1);
}

static JjValue *f_list(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                       int line)
{
  (void)a, (void)kn, (void)kv;
  JjValue *out = jj_list(r);
  if (v->type == JV_LIST) {
    for (guint i = 0; i < v->items->len; i++)
      jj_list_add(out, v->items->pdata[i]);
  } else if (v->type == JV_STRING) {
    for (const char *p = v->s; p < v->s + v->len; p = g_utf8_next_char(p))
      jj_list_add(out, jj_string(r, p, (gsize)(g_utf8_next_char(p) - p)));
  } else if (v->type == JV_DICT) {
    for (guint i = 0; i < v->keys->len; i++)
      jj_list_add(out, jj_string(r, v->keys->pdata[i], strlen(v->keys->pdata[i])));
  } else if (v->type != JV_UNDEFINED) {
    return jj_bad(r, line, "list", v);
  }
  return out;
}

static JjValue *f_reverse(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                          int line)
{
  JjValue *l = f_list(r, v, a, kn, kv, line);
  if (!l)
    return NULL;
  JjValue *out = jj_list(r);
  for (guint i = l->items->len; i-- > 0;)
    jj_list_add(out, l->items->pdata[i]);
  if (v->type != JV_STRING)
    return out;
  return jj_filter(r, "join", out, NULL, NULL, NULL, line);
}

static JjValue *f_items(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                        int line)
{
  if (v->type == JV_UNDEFINED)
    return jj_list(r);
  if (v->type != JV_DICT)
    return jj_bad(r, line, "items", v);
  JjValue *m = jj_method(r, v, "items");
  return jj_call(r, m, a, kn, kv, line);
}

static JjValue *f_replace(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                          int line)
{
  JjValue *c = jj_arg(a, 2, kn, kv, "count");
  return jj_replace(r, jj_str_of(r, v), jj_arg(a, 0, kn, kv, "old"), jj_arg(a, 1, kn, kv, "new"),
                    c && c->type == JV_INT ? c->i : -1, line);
}

static JjValue *f_number(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                         int line, gboolean integer)
{
  (void)line;
  JjValue *d = jj_arg(a, 0, kn, kv, "default");
  double x = 0;
  gboolean ok = TRUE;
  if (v->type == JV_INT || v->type == JV_BOOL)
    x = v->type == JV_INT ? (double)v->i : v->b;
  else if (v->type == JV_FLOAT)
    x = v->f;
  else if (v->type == JV_STRING) {
    char *end = NULL;
    g_autofree char *t = g_strstrip(g_strdup(v->s));
    x = g_ascii_strtod(t, &end);
    ok = end != t && *end == 0;
  } else
    ok = FALSE;
  if (!ok)
    return d ? d : integer ? jj_int(r, 0) : jj_float(r, 0);
  if (integer && v->type == JV_INT)
    return v;
  return integer ? jj_int(r, (gint64)trunc(x)) : jj_float(r, x);
}

static JjValue *f_int(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  return f_number(r, v, a, kn, kv, l, TRUE);
}

static JjValue *f_float(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  return f_number(r, v, a, kn, kv, l, FALSE);
}

static JjValue *f_abs(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv;
  if (v->type == JV_INT)
    return jj_int(r, v->i < 0 ? -v->i : v->i);
  if (v->type == JV_FLOAT)
    return jj_float(r, fabs(v->f));
  return jj_bad(r, l, "abs", v);
}

static JjValue *f_safe(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)r, (void)a, (void)kn, (void)kv, (void)l;
  return v;
}

static JjValue *f_indent(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                         int line)
{
  JjValue *w = jj_arg(a, 0, kn, kv, "width"), *first = jj_arg(a, 1, kn, kv, "first");
  JjValue *blank = jj_arg(a, 2, kn, kv, "blank");
  if (v->type != JV_STRING || (w && w->type != JV_INT && w->type != JV_STRING))
    return jj_bad(r, line, "indent", v->type != JV_STRING ? v : w);
  g_autofree char *pad = w && w->type == JV_STRING
                             ? g_strdup(w->s)
                             : g_strnfill(w ? (gsize)CLAMP(w->i, 0, 256) : 4, ' ');
  GString *s = g_string_new(NULL);
  gboolean line_start = first && jj_truthy(first);
  for (gsize i = 0; i < v->len; i++) {
    gboolean empty = v->s[i] == '\n';
    if (line_start && (!empty || (blank && jj_truthy(blank))))
      g_string_append(s, pad);
    g_string_append_c(s, v->s[i]);
    line_start = v->s[i] == '\n';
  }
  JjValue *out = jj_string(r, s->str, s->len);
  g_string_free(s, TRUE);
  return out;
}

/* select / reject / selectattr / rejectattr: items for which a test holds (or not). */
static JjValue *choose(JjRender *r, JjValue *v, GPtrArray *a, int line, gboolean attr,
                       gboolean keep)
{
  if (v->type == JV_UNDEFINED)
    return jj_list(r);
  if (v->type != JV_LIST)
    return jj_bad(r, line, "select", v);
  guint at = 0;
  JjValue *name = attr && a && a->len > 0 ? a->pdata[at++] : NULL;
  if (attr && (!name || name->type != JV_STRING))
    return jj_fail(r->errors, line, "selectattr/rejectattr need an attribute's name"), NULL;
  JjValue *test = a && a->len > at ? a->pdata[at++] : NULL;
  if (test && test->type != JV_STRING)
    return jj_bad(r, line, "a test's name", test);
  g_autoptr(GPtrArray) rest = g_ptr_array_new();
  for (guint i = at; a && i < a->len; i++)
    g_ptr_array_add(rest, a->pdata[i]);
  JjValue *out = jj_list(r);
  for (guint i = 0; i < v->items->len; i++) {
    JjValue *x = v->items->pdata[i], *y = x;
    if (attr) {
      y = x->type == JV_DICT ? jj_dict_get(x, name->s) : NULL;
      y = y ? y : jj_undefined(r, name->s);
    }
    int t = test ? jj_test(r, test->s, y, rest, line) : jj_truthy(y);
    if (t < 0)
      return NULL;
    if (t == keep)
      jj_list_add(out, x);
  }
  return out;
}

static JjValue *f_select(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)kn, (void)kv;
  return choose(r, v, a, l, FALSE, TRUE);
}

static JjValue *f_reject(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)kn, (void)kv;
  return choose(r, v, a, l, FALSE, FALSE);
}

static JjValue *f_selectattr(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                             int l)
{
  (void)kn, (void)kv;
  return choose(r, v, a, l, TRUE, TRUE);
}

static JjValue *f_rejectattr(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                             int l)
{
  (void)kn, (void)kv;
  return choose(r, v, a, l, TRUE, FALSE);
}

static JjValue *f_map(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  JjValue *attr = jj_arg(NULL, 0, kn, kv, "attribute");
  if (v->type != JV_LIST)
    return jj_bad(r, l, "map", v);
  JjValue *out = jj_list(r);
  for (guint i = 0; i < v->items->len; i++) {
    JjValue *x = v->items->pdata[i];
    if (attr && attr->type == JV_STRING) {
      JjValue *y = x->type == JV_DICT ? jj_dict_get(x, attr->s) : NULL;
      JjValue *d = jj_arg(NULL, 0, kn, kv, "default");
      jj_list_add(out, y ? y : d ? d : jj_undefined(r, attr->s));
    } else if (a && a->len > 0 && ((JjValue *)a->pdata[0])->type == JV_STRING) {
      g_autoptr(GPtrArray) rest = g_ptr_array_new();
      for (guint k = 1; k < a->len; k++)
        g_ptr_array_add(rest, a->pdata[k]);
      JjValue *y = jj_filter(r, ((JjValue *)a->pdata[0])->s, x, rest, NULL, NULL, l);
      if (!y)
        return NULL;
      jj_list_add(out, y);
    } else {
      return jj_fail(r->errors, l, "map needs attribute= or a filter's name"), NULL;
    }
  }
  return out;
}

static JjValue *f_unique(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv, int l)
{
  (void)a, (void)kn, (void)kv;
  if (v->type != JV_LIST)
    return jj_bad(r, l, "unique", v);
  JjValue *out = jj_list(r);
  for (guint i = 0; i < v->items->len; i++) {
    gboolean seen = FALSE;
    for (guint k = 0; k < out->items->len && !seen; k++)
      seen = jj_equal(out->items->pdata[k], v->items->pdata[i]);
    if (!seen)
      jj_list_add(out, v->items->pdata[i]);
  }
  return out;
}

static JjValue *f_wordcount(JjRender *r, JjValue *v, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                            int l)
{
  JjValue *words = jj_method(r, jj_str_of(r, v), "split");
  JjValue *list = jj_call(r, words, a, kn, kv, l);
  return list ? jj_int(r, list->items->len) : NULL;
}

static const struct {
  const char *name;
  FilterFunc f;
} filters[] = {
    {"length", f_length},
    {"count", f_length},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"string", f_string},
    {"upper", f_upper},
    {"lower", f_lower},
    {"title", f_title},
    {"capitalize", f_capitalize},
    {"default", f_default},
    {"d", f_default},
    {"join", f_join},
    {"first", f_first},
    {"last", f_last},
    {"list", f_list},
    {"reverse", f_reverse},
    {"items", f_items},
    {"replace", f_replace},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"safe", f_safe},
    {"indent", f_indent},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"map", f_map},
    {"unique", f_unique},
    {"wordcount", f_wordcount},
};

gboolean jj_known_filter(const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS(filters); i++)
    if (strcmp(filters[i].name, name) == 0)
      return TRUE;
  return FALSE;
}

JjValue *jj_filter(JjRender *r, const char *name, JjValue *v, GPtrArray *args, GPtrArray *kwnames,
                   GPtrArray *kwvalues, int line)
{
  for (guint i = 0; i < G_N_ELEMENTS(filters); i++)
    if (strcmp(filters[i].name, name) == 0)
      return filters[i].f(r, v, args, kwnames, kwvalues, line);
  jj_fail(r->errors, line, "the filter \"%s\" is not one Cohort's renderer has", name);
  return NULL;
}
