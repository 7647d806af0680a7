/* Tests (x is defined, x is string, …) and the global functions of the chat-template
 * renderer: range, namespace, raise_exception, strftime_now. */
#include "data/jinja-private.h"

#include <math.h>
#include <string.h>
#include <time.h>

static const char *const tests[] = {
    "defined", "undefined", "none",        "string",   "number",   "integer", "float",
    "boolean", "mapping",   "iterable",    "sequence", "callable", "true",    "false",
    "odd",     "even",      "divisibleby", "eq",       "equalto",  "==",      "ne",
    "!=",      "lt",        "<",           "le",       "<=",       "gt",      ">",
    "ge",      ">=",        "in",          "lower",    "upper",    "sameas",  NULL};

gboolean jj_known_test(const char *name)
{
  for (guint i = 0; tests[i]; i++)
    if (strcmp(tests[i], name) == 0)
      return TRUE;
  return FALSE;
}

static int compare_test(JjRender *r, const char *name, JjValue *v, JjValue *o, int line)
{
  if (!o) {
    jj_fail(r->errors, line, "the test \"%s\" needs a value to compare with", name);
    return -1;
  }
  if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "=="))
    return jj_equal(v, o);
  if (!strcmp(name, "ne") || !strcmp(name, "!="))
    return !jj_equal(v, o);
  if (!strcmp(name, "sameas"))
    return v == o ||
           (v->type == o->type && (v->type == JV_NONE || (v->type == JV_BOOL && v->b == o->b)));
  gboolean num =
      (v->type == JV_INT || v->type == JV_FLOAT) && (o->type == JV_INT || o->type == JV_FLOAT);
  if (!num) {
    jj_fail(r->errors, line, "the test \"%s\" compares numbers, not a %s and a %s", name,
            jj_type_name(v), jj_type_name(o));
    return -1;
  }
  double a = v->type == JV_INT ? (double)v->i : v->f, b = o->type == JV_INT ? (double)o->i : o->f;
  if (name[0] == 'l' || name[0] == '<')
    return strchr(name, 'e') || strchr(name, '=') ? a <= b : a < b;
  return strchr(name, 'e') || strchr(name, '=') ? a >= b : a > b;
}

int jj_test(JjRender *r, const char *name, JjValue *v, GPtrArray *args, int line)
{
  JjValue *o = args && args->len ? args->pdata[0] : NULL;
  JjType t = v->type;
  if (!strcmp(name, "defined"))
    return t != JV_UNDEFINED;
  if (!strcmp(name, "undefined"))
    return t == JV_UNDEFINED;
  if (!strcmp(name, "none"))
    return t == JV_NONE;
  if (!strcmp(name, "string"))
    return t == JV_STRING;
  if (!strcmp(name, "number"))
    return t == JV_INT || t == JV_FLOAT;
  if (!strcmp(name, "integer"))
    return t == JV_INT;
  if (!strcmp(name, "float"))
    return t == JV_FLOAT;
  if (!strcmp(name, "boolean"))
    return t == JV_BOOL;
  if (!strcmp(name, "mapping"))
    return t == JV_DICT;
  if (!strcmp(name, "iterable") || !strcmp(name, "sequence"))
    return t == JV_LIST || t == JV_STRING || t == JV_DICT;
  if (!strcmp(name, "callable"))
    return t == JV_MACRO || t == JV_BUILTIN;
  if (!strcmp(name, "true") || !strcmp(name, "false"))
    return t == JV_BOOL && v->b == (name[0] == 't');
  if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
    if (t != JV_STRING)
      return FALSE;
    JjValue *c = jj_change_case(r, v, name[0] == 'l' ? 1 : 0);
    return jj_equal(c, v);
  }
  if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
    gint64 d = name[0] == 'd' ? (o && o->type == JV_INT ? o->i : 0) : 2;
    if (t != JV_INT || d == 0) {
      jj_fail(r->errors, line, "the test \"%s\" needs whole numbers", name);
      return -1;
    }
    gint64 m = v->i % d;
    return name[0] == 'o' ? m != 0 : m == 0;
  }
  if (!strcmp(name, "in")) {
    if (!o || (o->type != JV_LIST && o->type != JV_STRING && o->type != JV_DICT)) {
      jj_fail(r->errors, line, "the test \"in\" needs a list, string or dict");
      return -1;
    }
    if (o->type == JV_STRING)
      return v->type == JV_STRING && g_strstr_len(o->s, (gssize)o->len, v->s) != NULL;
    if (o->type == JV_DICT)
      return v->type == JV_STRING && jj_dict_get(o, v->s) != NULL;
    for (guint i = 0; i < o->items->len; i++)
      if (jj_equal(v, o->items->pdata[i]))
        return TRUE;
    return FALSE;
  }
  return compare_test(r, name, v, o, line);
}

/* ---- globals ---- */

static JjValue *g_range(JjRender *r, JjValue *self, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                        int line)
{
  (void)self, (void)kn, (void)kv;
  gint64 v[3] = {0, 0, 1};
  guint n = a ? a->len : 0;
  if (n < 1 || n > 3)
    return jj_fail(r->errors, line, "range() takes 1 to 3 whole numbers"), NULL;
  for (guint i = 0; i < n; i++) {
    JjValue *x = a->pdata[i];
    if (x->type != JV_INT)
      return jj_bad(r, line, "range()", x);
  }
  if (n == 1)
    v[1] = ((JjValue *)a->pdata[0])->i;
  for (guint i = 0; n > 1 && i < n; i++)
    v[i] = ((JjValue *)a->pdata[i])->i;
  if (v[2] == 0)
    return jj_fail(r->errors, line, "range() step cannot be zero"), NULL;
  JjValue *out = jj_list(r);
  for (gint64 x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) {
    if (out->items->len >= JJ_MAX_RANGE)
      return jj_fail(r->errors, line, "range() makes more than %d numbers", JJ_MAX_RANGE), NULL;
    jj_list_add(out, jj_int(r, x));
  }
  return out;
}

static JjValue *g_namespace(JjRender *r, JjValue *self, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                            int line)
{
  (void)self;
  JjValue *ns = jj_dict(r);
  ns->type = JV_NAMESPACE;
  if (a && a->len > 1)
    return jj_fail(r->errors, line, "namespace() takes at most one dict"), NULL;
  if (a && a->len == 1) {
    JjValue *d = a->pdata[0];
    if (d->type != JV_DICT)
      return jj_bad(r, line, "namespace()", d);
    for (guint i = 0; i < d->keys->len; i++)
      jj_dict_set(r, ns, d->keys->pdata[i], d->items->pdata[i]);
  }
  for (guint i = 0; kn && i < kn->len; i++)
    jj_dict_set(r, ns, kn->pdata[i], kv->pdata[i]);
  return ns;
}

static JjValue *g_raise(JjRender *r, JjValue *self, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                        int line)
{
  (void)self, (void)kn, (void)kv;
  GString *s = g_string_new(NULL);
  if (a && a->len)
    jj_append_str(s, a->pdata[0]);
  jj_fail(r->errors, line, "the template refuses the conversation (raise_exception): %s", s->str);
  g_string_free(s, TRUE);
  return NULL;
}

static JjValue *g_strftime(JjRender *r, JjValue *self, GPtrArray *a, GPtrArray *kn, GPtrArray *kv,
                           int line)
{
  (void)self, (void)kn, (void)kv;
  JjValue *fmt = a && a->len ? a->pdata[0] : NULL;
  if (!fmt || fmt->type != JV_STRING)
    return jj_bad(r, line, "strftime_now()", fmt);
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  char buf[256];
  gsize n = strftime(buf, sizeof buf, fmt->s, &tm);
  return jj_string(r, buf, n);
}

void jj_add_globals(JjRender *r, JjEnv *env)
{
  jj_env_set(r, env, "range", jj_builtin(r, "range", g_range, NULL));
  jj_env_set(r, env, "namespace", jj_builtin(r, "namespace", g_namespace, NULL));
  jj_env_set(r, env, "raise_exception", jj_builtin(r, "raise_exception", g_raise, NULL));
  jj_env_set(r, env, "strftime_now", jj_builtin(r, "strftime_now", g_strftime, NULL));
}
