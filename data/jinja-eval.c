/* The chat-template interpreter, with Jinja2's meanings (as transformers renders): a for loop
 * has its own scope (a set inside it stays inside; namespace() objects carry values out),
 * with loop.index, index0, revindex, revindex0, first, last, length, previtem, nextitem;
 * if does not; macros see the scope they were defined in. Attributes of dicts are their keys
 * (then methods); an undefined value prints as nothing, tests as undefined, and fails when
 * used further (an attribute of it, arithmetic), as Jinja2's Undefined does. */
#include "data/jinja-private.h"

#include <math.h>
#include <string.h>

struct JjEnv {
  GHashTable *vars; /* name → JjValue */
  JjEnv *parent;
};

JjEnv *jj_env_new(JjRender *r, JjEnv *parent)
{
  JjEnv *e = jj_alloc(r->arena, sizeof *e);
  e->vars = g_hash_table_new(g_str_hash, g_str_equal);
  /* The table is freed with the arena, through an array holding it. */
  GPtrArray *holder = jj_array(r->arena);
  g_ptr_array_set_free_func(holder, (GDestroyNotify)g_hash_table_unref);
  g_ptr_array_add(holder, e->vars);
  e->parent = parent;
  return e;
}

JjValue *jj_env_get(JjEnv *env, const char *name)
{
  for (JjEnv *e = env; e; e = e->parent) {
    JjValue *v = g_hash_table_lookup(e->vars, name);
    if (v)
      return v;
  }
  return NULL;
}

void jj_env_set(JjRender *r, JjEnv *env, const char *name, JjValue *v)
{
  gpointer key;
  if (g_hash_table_lookup_extended(env->vars, name, &key, NULL))
    g_hash_table_insert(env->vars, key, v);
  else
    g_hash_table_insert(env->vars, jj_strndup(r->arena, name, strlen(name)), v);
}

gboolean jj_step(JjRender *r, int line)
{
  if (++r->steps > JJ_MAX_STEPS)
    return jj_fail(r->errors, line, "the render takes more than %u steps (a loop without end?)",
                   JJ_MAX_STEPS);
  if (r->out->len > JJ_MAX_OUTPUT || jj_arena_used(r->arena) > 4 * (gsize)JJ_MAX_OUTPUT)
    return jj_fail(r->errors, line, "the render makes more than %u MiB", JJ_MAX_OUTPUT >> 20);
  return TRUE;
}

static JjValue *undefined_use(JjRender *r, const JjValue *v, int line, const char *what)
{
  jj_fail(r->errors, line, "%s%s%s is undefined (%s)", v->s ? "'" : "", v->s ? v->s : "the value",
          v->s ? "'" : "", what);
  return NULL;
}

static JjValue *loop_attribute(JjRender *r, const JjValue *loop, const char *name)
{
  gint64 i = loop->i, n = loop->items->len;
  static const char *const ints[] = {"index", "index0", "revindex", "revindex0", "length"};
  gint64 vals[] = {i + 1, i, n - i, n - i - 1, n};
  for (guint k = 0; k < G_N_ELEMENTS(ints); k++)
    if (strcmp(name, ints[k]) == 0)
      return jj_int(r, vals[k]);
  if (strcmp(name, "first") == 0 || strcmp(name, "last") == 0)
    return jj_bool(r, name[0] == 'f' ? i == 0 : i + 1 == n);
  if (strcmp(name, "previtem") == 0 && i > 0)
    return loop->items->pdata[i - 1];
  if (strcmp(name, "nextitem") == 0 && i + 1 < n)
    return loop->items->pdata[i + 1];
  return jj_undefined(r, "loop attribute");
}

static JjValue *attribute(JjRender *r, JjValue *obj, const char *name, int line)
{
  if (obj->type == JV_UNDEFINED)
    return undefined_use(r, obj, line, "an attribute of it is asked for");
  if (obj->type == JV_LOOP)
    return loop_attribute(r, obj, name);
  if (obj->type == JV_DICT || obj->type == JV_NAMESPACE) {
    JjValue *v = jj_dict_get(obj, name);
    if (v)
      return v;
  }
  JjValue *m = jj_method(r, obj, name);
  if (m)
    return m;
  g_autofree char *full =
      g_strdup_printf("%s.%s", obj->type == JV_DICT ? "dict" : jj_type_name(obj), name);
  return jj_undefined(r, jj_strndup(r->arena, full, strlen(full)));
}

/* Python's index into a list or string (negative from the end); undefined out of range. */
static JjValue *item(JjRender *r, JjValue *obj, JjValue *key, int line)
{
  if (obj->type == JV_UNDEFINED)
    return undefined_use(r, obj, line, "it is subscripted");
  if (obj->type == JV_DICT || obj->type == JV_NAMESPACE) {
    if (key->type != JV_STRING)
      return jj_undefined(r, NULL);
    JjValue *v = jj_dict_get(obj, key->s);
    return v ? v : attribute(r, obj, key->s, line);
  }
  if (key->type == JV_STRING)
    return attribute(r, obj, key->s, line);
  if ((obj->type == JV_LIST || obj->type == JV_STRING) && key->type == JV_INT) {
    if (obj->type == JV_LIST) {
      gint64 n = obj->items->len, i = key->i < 0 ? key->i + n : key->i;
      return i >= 0 && i < n ? obj->items->pdata[i] : jj_undefined(r, NULL);
    }
    glong n = g_utf8_strlen(obj->s, (gssize)obj->len);
    gint64 i = key->i < 0 ? key->i + n : key->i;
    if (i < 0 || i >= n)
      return jj_undefined(r, NULL);
    const char *p = g_utf8_offset_to_pointer(obj->s, (glong)i);
    return jj_string(r, p, (gsize)(g_utf8_next_char(p) - p));
  }
  jj_fail(r->errors, line, "a %s cannot be subscripted with a %s", jj_type_name(obj),
          jj_type_name(key));
  return NULL;
}

/* Python's slice indices for a sequence of n items. */
static void slice_bounds(gint64 n, JjValue **sv, gint64 *start, gint64 *stop, gint64 *step)
{
  *step = sv[2] ? sv[2]->i : 1;
  gint64 lo = *step < 0 ? -1 : 0, hi = *step < 0 ? n - 1 : n;
  for (int k = 0; k < 2; k++) {
    gint64 *out = k ? stop : start;
    if (!sv[k]) {
      *out = (*step < 0) == (k == 0) ? hi : lo;
      continue;
    }
    gint64 v = sv[k]->i;
    if (v < 0)
      v = MAX(v + n, lo);
    *out = MIN(v, hi);
  }
}

static JjValue *slice(JjRender *r, JjEnv *env, const JjNode *n)
{
  JjValue *obj = jj_eval(r, env, n->a);
  if (!obj)
    return NULL;
  JjValue *sv[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++) {
    const JjNode *e = n->list->pdata[k];
    if (!e)
      continue;
    if (!(sv[k] = jj_eval(r, env, e)))
      return NULL;
    if (sv[k]->type == JV_NONE)
      sv[k] = NULL;
    else if (sv[k]->type != JV_INT)
      return jj_fail(r->errors, n->line, "slice bounds must be whole numbers"), NULL;
  }
  if (sv[2] && sv[2]->i == 0)
    return jj_fail(r->errors, n->line, "a slice step cannot be zero"), NULL;
  if (obj->type != JV_LIST && obj->type != JV_STRING)
    return jj_fail(r->errors, n->line, "a %s cannot be sliced", jj_type_name(obj)), NULL;
  gboolean str = obj->type == JV_STRING;
  gint64 len = str ? g_utf8_strlen(obj->s, (gssize)obj->len) : obj->items->len;
  gint64 start, stop, step;
  slice_bounds(len, sv, &start, &stop, &step);
  JjValue *res = jj_list(r);
  GString *s = str ? g_string_new(NULL) : NULL;
  for (gint64 i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (str) {
      const char *p = g_utf8_offset_to_pointer(obj->s, (glong)i);
      g_string_append_len(s, p, g_utf8_next_char(p) - p);
    } else {
      jj_list_add(res, obj->items->pdata[i]);
    }
  }
  if (!str)
    return res;
  JjValue *v = jj_string(r, s->str, s->len);
  g_string_free(s, TRUE);
  return v;
}

/* Arguments: positional values, keyword names and values. */
static gboolean eval_args(JjRender *r, JjEnv *env, GPtrArray *nodes, GPtrArray *args,
                          GPtrArray *kwn, GPtrArray *kwv)
{
  for (guint i = 0; i < nodes->len; i++) {
    const JjNode *a = nodes->pdata[i];
    JjValue *v = jj_eval(r, env, a->type == JN_KWARG ? a->a : a);
    if (!v)
      return FALSE;
    if (a->type == JN_KWARG) {
      g_ptr_array_add(kwn, (gpointer)a->name);
      g_ptr_array_add(kwv, v);
    } else {
      g_ptr_array_add(args, v);
    }
  }
  return TRUE;
}

JjValue *jj_call(JjRender *r, JjValue *fn, GPtrArray *args, GPtrArray *kwn, GPtrArray *kwv,
                 int line)
{
  if (fn->type == JV_BUILTIN)
    return fn->func(r, fn->self, args, kwn, kwv, line);
  if (fn->type != JV_MACRO) {
    if (fn->type == JV_UNDEFINED)
      return undefined_use(r, fn, line, "it is called");
    return jj_fail(r->errors, line, "a %s cannot be called", jj_type_name(fn)), NULL;
  }
  const JjNode *m = fn->macro;
  if (args->len > m->list2->len)
    return jj_fail(r->errors, line, "macro %s takes at most %u arguments", m->name, m->list2->len),
           NULL;
  if (++r->depth > JJ_MAX_DEPTH)
    return jj_fail(r->errors, line, "macros call each other deeper than %d", JJ_MAX_DEPTH), NULL;
  JjEnv *scope = jj_env_new(r, fn->closure);
  for (guint i = 0; i < m->list2->len; i++) {
    const JjNode *param = m->list2->pdata[i];
    JjValue *v = i < args->len ? args->pdata[i] : NULL;
    for (guint k = 0; !v && kwn && k < kwn->len; k++)
      if (strcmp(kwn->pdata[k], param->name) == 0)
        v = kwv->pdata[k];
    if (!v && param->a && !(v = jj_eval(r, scope, param->a)))
      return NULL;
    jj_env_set(r, scope, param->name, v ? v : jj_undefined(r, param->name));
  }
  for (guint k = 0; kwn && k < kwn->len; k++) {
    gboolean known = FALSE;
    for (guint i = 0; i < m->list2->len && !known; i++)
      known = strcmp(((JjNode *)m->list2->pdata[i])->name, kwn->pdata[k]) == 0;
    if (!known)
      return jj_fail(r->errors, line, "macro %s has no parameter '%s'", m->name,
                     (const char *)kwn->pdata[k]),
             NULL;
  }
  JjCapture cap;
  jj_capture_begin(r, &cap);
  JjValue *v = jj_capture_end(r, &cap, jj_exec(r, scope, m->list));
  r->depth--;
  return v;
}

static JjValue *call(JjRender *r, JjEnv *env, const JjNode *n)
{
  JjValue *fn = jj_eval(r, env, n->a);
  if (!fn)
    return NULL;
  g_autoptr(GPtrArray) args = g_ptr_array_new();
  g_autoptr(GPtrArray) kwn = g_ptr_array_new();
  g_autoptr(GPtrArray) kwv = g_ptr_array_new();
  if (!eval_args(r, env, n->list, args, kwn, kwv))
    return NULL;
  return jj_call(r, fn, args, kwn, kwv, n->line);
}

static gboolean numeric(const JjValue *v)
{
  return v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL;
}

static double as_double(const JjValue *v)
{
  return v->type == JV_FLOAT ? v->f : v->type == JV_INT ? (double)v->i : (double)v->b;
}

static gint64 as_int(const JjValue *v)
{
  return v->type == JV_INT ? v->i : (gint64)v->b;
}

/* `x in y`: a substring, a list's item, a dict's key. */
static int contains(JjRender *r, JjValue *y, JjValue *x, int line)
{
  if (y->type == JV_STRING) {
    if (x->type != JV_STRING)
      return jj_fail(r->errors, line, "'in <string>' needs a string on the left, not a %s",
                     jj_type_name(x)),
             -1;
    return x->len == 0 || g_strstr_len(y->s, (gssize)y->len, x->s) != NULL;
  }
  if (y->type == JV_LIST) {
    for (guint i = 0; i < y->items->len; i++)
      if (jj_equal(x, y->items->pdata[i]))
        return 1;
    return 0;
  }
  if (y->type == JV_DICT || y->type == JV_NAMESPACE)
    return x->type == JV_STRING && jj_dict_get(y, x->s) != NULL;
  if (y->type == JV_UNDEFINED)
    return undefined_use(r, y, line, "'in' looks into it") ? 0 : -1;
  return jj_fail(r->errors, line, "'in' cannot look into a %s", jj_type_name(y)), -1;
}

static int compare(JjRender *r, const char *op, JjValue *x, JjValue *y, int line)
{
  int c;
  if (numeric(x) && numeric(y)) {
    double a = as_double(x), b = as_double(y);
    c = a < b ? -1 : a > b;
  } else if (x->type == JV_STRING && y->type == JV_STRING) {
    c = strcmp(x->s, y->s);
    c = c < 0 ? -1 : c > 0;
  } else {
    return jj_fail(r->errors, line, "'%s' cannot compare a %s with a %s", op, jj_type_name(x),
                   jj_type_name(y)),
           -1;
  }
  if (!strcmp(op, "<"))
    return c < 0;
  if (!strcmp(op, ">"))
    return c > 0;
  if (!strcmp(op, "<="))
    return c <= 0;
  return c >= 0;
}

static JjValue *arithmetic(JjRender *r, const char *op, JjValue *x, JjValue *y, int line)
{
  gboolean ints = x->type != JV_FLOAT && y->type != JV_FLOAT;
  double a = as_double(x), b = as_double(y);
  switch (op[0]) {
  case '+':
    return ints ? jj_int(r, as_int(x) + as_int(y)) : jj_float(r, a + b);
  case '-':
    return ints ? jj_int(r, as_int(x) - as_int(y)) : jj_float(r, a - b);
  case '*':
    if (op[1] == '*') {
      if (ints && as_int(y) >= 0)
        return jj_int(r, (gint64)pow(a, b));
      return jj_float(r, pow(a, b));
    }
    return ints ? jj_int(r, as_int(x) * as_int(y)) : jj_float(r, a * b);
  default:
    break;
  }
  if (b == 0)
    return jj_fail(r->errors, line, "division by zero"), NULL;
  if (!strcmp(op, "/"))
    return jj_float(r, a / b);
  if (!strcmp(op, "//")) {
    if (ints) {
      gint64 q = as_int(x) / as_int(y);
      if ((as_int(x) % as_int(y) != 0) && ((as_int(x) < 0) != (as_int(y) < 0)))
        q--;
      return jj_int(r, q);
    }
    return jj_float(r, floor(a / b));
  }
  if (ints) {
    gint64 m = as_int(x) % as_int(y);
    if (m != 0 && ((m < 0) != (as_int(y) < 0)))
      m += as_int(y);
    return jj_int(r, m);
  }
  double m = fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0)))
    m += b;
  return jj_float(r, m);
}

static JjValue *binary(JjRender *r, JjEnv *env, const JjNode *n)
{
  const char *op = n->name;
  JjValue *x = jj_eval(r, env, n->a);
  if (!x)
    return NULL;
  if (!strcmp(op, "and") || !strcmp(op, "or")) {
    gboolean t = jj_truthy(x);
    if ((op[0] == 'a') != t)
      return x;
    return jj_eval(r, env, n->b);
  }
  JjValue *y = jj_eval(r, env, n->b);
  if (!y)
    return NULL;
  if (!strcmp(op, "=="))
    return jj_bool(r, jj_equal(x, y));
  if (!strcmp(op, "!="))
    return jj_bool(r, !jj_equal(x, y));
  if (!strcmp(op, "in") || !strcmp(op, "not in")) {
    int c = contains(r, y, x, n->line);
    return c < 0 ? NULL : jj_bool(r, op[0] == 'i' ? c : !c);
  }
  if (!strcmp(op, "~")) {
    GString *s = g_string_new(NULL);
    jj_append_str(s, x);
    gsize yat = s->len;
    jj_append_str(s, y);
    JjValue *v = jj_string(r, s->str, s->len);
    g_string_free(s, TRUE);
    jj_join_marks(r, v, x, 0, y, yat);
    return v;
  }
  if (x->type == JV_UNDEFINED || y->type == JV_UNDEFINED)
    return undefined_use(r, x->type == JV_UNDEFINED ? x : y, n->line, op);
  if (op[0] == '<' || op[0] == '>') {
    int c = compare(r, op, x, y, n->line);
    return c < 0 ? NULL : jj_bool(r, c);
  }
  if (numeric(x) && numeric(y))
    return arithmetic(r, op, x, y, n->line);
  if (!strcmp(op, "+") && x->type == JV_STRING && y->type == JV_STRING) {
    if (x->len + y->len > JJ_MAX_OUTPUT)
      return jj_fail(r->errors, n->line, "a string grows past %u MiB", JJ_MAX_OUTPUT >> 20), NULL;
    char *s = jj_alloc(r->arena, x->len + y->len + 1);
    memcpy(s, x->s, x->len);
    memcpy(s + x->len, y->s, y->len);
    JjValue *v = jj_string(r, "", 0);
    v->s = s;
    v->len = x->len + y->len;
    jj_join_marks(r, v, x, 0, y, x->len);
    return v;
  }
  if (!strcmp(op, "+") && x->type == JV_LIST && y->type == JV_LIST) {
    JjValue *v = jj_list(r);
    for (guint i = 0; i < x->items->len; i++)
      jj_list_add(v, x->items->pdata[i]);
    for (guint i = 0; i < y->items->len; i++)
      jj_list_add(v, y->items->pdata[i]);
    return v;
  }
  if (!strcmp(op, "*") && ((x->type == JV_STRING && y->type == JV_INT) ||
                           (x->type == JV_INT && y->type == JV_STRING))) {
    JjValue *s = x->type == JV_STRING ? x : y;
    gint64 k = MAX(x->type == JV_INT ? x->i : y->i, 0);
    if ((guint64)k * s->len > JJ_MAX_OUTPUT)
      return jj_fail(r->errors, n->line, "a string grows past %u MiB", JJ_MAX_OUTPUT >> 20), NULL;
    GString *o = g_string_new(NULL);
    for (gint64 i = 0; i < k; i++)
      g_string_append_len(o, s->s, (gssize)s->len);
    JjValue *v = jj_string(r, o->str, o->len);
    g_string_free(o, TRUE);
    return v;
  }
  return jj_fail(r->errors, n->line, "'%s' is not defined between a %s and a %s", op,
                 jj_type_name(x), jj_type_name(y)),
         NULL;
}

static JjValue *unary(JjRender *r, JjEnv *env, const JjNode *n)
{
  JjValue *x = jj_eval(r, env, n->a);
  if (!x)
    return NULL;
  if (!strcmp(n->name, "not"))
    return jj_bool(r, !jj_truthy(x));
  if (!numeric(x))
    return jj_fail(r->errors, n->line, "unary '%s' needs a number, not a %s", n->name,
                   jj_type_name(x)),
           NULL;
  gboolean neg = n->name[0] == '-';
  if (x->type == JV_FLOAT)
    return jj_float(r, neg ? -x->f : x->f);
  return jj_int(r, neg ? -as_int(x) : as_int(x));
}

static JjValue *collection(JjRender *r, JjEnv *env, const JjNode *n)
{
  JjValue *v = n->type == JN_DICT ? jj_dict(r) : jj_list(r);
  for (guint i = 0; i < n->list->len; i++) {
    JjValue *x = jj_eval(r, env, n->list->pdata[i]);
    if (!x)
      return NULL;
    if (n->type != JN_DICT) {
      jj_list_add(v, x);
      continue;
    }
    if (x->type != JV_STRING)
      return jj_fail(r->errors, n->line, "a dict literal's keys must be strings"), NULL;
    JjValue *y = jj_eval(r, env, n->list2->pdata[i]);
    if (!y)
      return NULL;
    jj_dict_set(r, v, x->s, y);
  }
  return v;
}

static JjValue *filter_or_test(JjRender *r, JjEnv *env, const JjNode *n)
{
  JjValue *x = jj_eval(r, env, n->a);
  if (!x)
    return NULL;
  g_autoptr(GPtrArray) args = g_ptr_array_new();
  g_autoptr(GPtrArray) kwn = g_ptr_array_new();
  g_autoptr(GPtrArray) kwv = g_ptr_array_new();
  if (!eval_args(r, env, n->list, args, kwn, kwv))
    return NULL;
  if (n->type == JN_FILTER)
    return jj_filter(r, n->name, x, args, kwn, kwv, n->line);
  int t = jj_test(r, n->name, x, args, n->line);
  return t < 0 ? NULL : jj_bool(r, n->negate ? !t : t);
}

JjValue *jj_eval(JjRender *r, JjEnv *env, const JjNode *n)
{
  if (!jj_step(r, n->line))
    return NULL;
  switch (n->type) {
  case JN_LITERAL:
    return n->value;
  case JN_NAME: {
    JjValue *v = jj_env_get(env, n->name);
    return v ? v : jj_undefined(r, n->name);
  }
  case JN_LIST:
  case JN_TUPLE:
  case JN_DICT:
    return collection(r, env, n);
  case JN_ATTR: {
    JjValue *o = jj_eval(r, env, n->a);
    return o ? attribute(r, o, n->name, n->line) : NULL;
  }
  case JN_INDEX: {
    JjValue *o = jj_eval(r, env, n->a), *k = o ? jj_eval(r, env, n->b) : NULL;
    return k ? item(r, o, k, n->line) : NULL;
  }
  case JN_SLICE:
    return slice(r, env, n);
  case JN_CALL:
    return call(r, env, n);
  case JN_FILTER:
  case JN_TEST:
    return filter_or_test(r, env, n);
  case JN_UNARY:
    return unary(r, env, n);
  case JN_BINARY:
    return binary(r, env, n);
  case JN_TERNARY: {
    JjValue *c = jj_eval(r, env, n->b);
    if (!c)
      return NULL;
    if (jj_truthy(c))
      return jj_eval(r, env, n->a);
    return n->c ? jj_eval(r, env, n->c) : jj_undefined(r, NULL);
  }
  default:
    jj_fail(r->errors, n->line, "this is not an expression");
    return NULL;
  }
}

/* ---- statements ---- */

static gboolean assign(JjRender *r, JjEnv *env, const JjNode *target, JjValue *v, int line)
{
  if (target->type == JN_NAME) {
    jj_env_set(r, env, target->name, v);
    return TRUE;
  }
  if (target->type == JN_ATTR) {
    JjValue *ns = jj_eval(r, env, target->a);
    if (!ns)
      return FALSE;
    if (ns->type != JV_NAMESPACE)
      return jj_fail(r->errors, line, "set %s.%s: only a namespace() takes attributes, not a %s",
                     target->a->name, target->name, jj_type_name(ns));
    jj_dict_set(r, ns, target->name, v);
    return TRUE;
  }
  guint n = target->list->len;
  if (v->type != JV_LIST || v->items->len != n)
    return jj_fail(r->errors, line, "cannot unpack a %s into %u names", jj_type_name(v), n);
  for (guint i = 0; i < n; i++)
    if (!assign(r, env, target->list->pdata[i], v->items->pdata[i], line))
      return FALSE;
  return TRUE;
}

/* The items a for loop walks: a list's, a dict's keys, a string's characters; none for an
 * undefined value (as Jinja2's Undefined iterates). */
static JjValue *iterable(JjRender *r, JjValue *v, int line)
{
  if (v->type == JV_LIST || v->type == JV_UNDEFINED) {
    if (v->type == JV_LIST)
      return v;
    return jj_list(r);
  }
  JjValue *out = jj_list(r);
  if (v->type == JV_DICT) {
    for (guint i = 0; i < v->keys->len; i++)
      jj_list_add(out, jj_string(r, v->keys->pdata[i], strlen(v->keys->pdata[i])));
    return out;
  }
  if (v->type == JV_STRING) {
    for (const char *p = v->s; p < v->s + v->len; p = g_utf8_next_char(p))
      jj_list_add(out, jj_string(r, p, (gsize)(g_utf8_next_char(p) - p)));
    return out;
  }
  jj_fail(r->errors, line, "for: a %s cannot be looped over", jj_type_name(v));
  return NULL;
}

/* The loop object: its attributes are made when asked for (attribute()), so a long loop
 * costs no memory per iteration. */
static JjValue *loop_value(JjRender *r, GPtrArray *items)
{
  JjValue *loop = jj_none(r);
  loop->type = JV_LOOP;
  loop->items = items;
  return loop;
}

static gboolean exec_for(JjRender *r, JjEnv *env, const JjNode *n)
{
  JjValue *src = jj_eval(r, env, n->b);
  if (!src || !(src = iterable(r, src, n->line)))
    return FALSE;
  JjEnv *scope = jj_env_new(r, env);
  g_autoptr(GPtrArray) items = g_ptr_array_new();
  for (guint i = 0; i < src->items->len; i++) {
    if (!jj_step(r, n->line))
      return FALSE;
    if (n->c) {
      if (!assign(r, scope, n->a, src->items->pdata[i], n->line))
        return FALSE;
      JjValue *keep = jj_eval(r, scope, n->c);
      if (!keep)
        return FALSE;
      if (!jj_truthy(keep))
        continue;
    }
    g_ptr_array_add(items, src->items->pdata[i]);
  }
  JjValue *loop = loop_value(r, items);
  jj_env_set(r, scope, "loop", loop);
  for (guint i = 0; i < items->len; i++) {
    if (!jj_step(r, n->line))
      return FALSE;
    loop->i = i;
    if (!assign(r, scope, n->a, items->pdata[i], n->line) || !jj_exec(r, scope, n->list))
      return FALSE;
    int control = r->loop_control;
    r->loop_control = 0;
    if (control == 1)
      break;
  }
  if (items->len == 0 && n->list2)
    return jj_exec(r, scope, n->list2);
  return TRUE;
}

static gboolean exec_one(JjRender *r, JjEnv *env, const JjNode *n)
{
  switch (n->type) {
  case JN_TEXT:
    g_string_append_len(r->out, n->value->s, (gssize)n->value->len);
    return jj_step(r, n->line);
  case JN_OUTPUT: {
    JjValue *v = jj_eval(r, env, n->a);
    if (!v)
      return FALSE;
    jj_out(r, v);
    return TRUE;
  }
  case JN_IF: {
    JjValue *c = jj_eval(r, env, n->a);
    if (!c)
      return FALSE;
    GPtrArray *body = jj_truthy(c) ? n->list : n->list2;
    return !body || jj_exec(r, env, body);
  }
  case JN_FOR:
    return exec_for(r, env, n);
  case JN_SET: {
    JjValue *v = jj_eval(r, env, n->b);
    return v && assign(r, env, n->a, v, n->line);
  }
  case JN_SET_BLOCK: {
    JjCapture cap;
    jj_capture_begin(r, &cap);
    JjValue *v = jj_capture_end(r, &cap, jj_exec(r, env, n->list));
    if (v)
      jj_env_set(r, env, n->name, v);
    return v != NULL;
  }
  case JN_MACRO: {
    JjValue *m = jj_none(r);
    m->type = JV_MACRO;
    m->macro = n;
    m->closure = env;
    m->fname = n->name;
    jj_env_set(r, env, n->name, m);
    return TRUE;
  }
  case JN_BREAK:
  case JN_CONTINUE:
    r->loop_control = n->type == JN_BREAK ? 1 : 2;
    return TRUE;
  default:
    return jj_fail(r->errors, n->line, "this is not a statement");
  }
}

gboolean jj_exec(JjRender *r, JjEnv *env, GPtrArray *body)
{
  if (++r->depth > JJ_MAX_DEPTH)
    return jj_fail(r->errors, body->len ? ((JjNode *)body->pdata[0])->line : 0,
                   "blocks nest deeper than %d", JJ_MAX_DEPTH);
  for (guint i = 0; i < body->len && !r->loop_control; i++) {
    if (!exec_one(r, env, body->pdata[i])) {
      r->depth--;
      return FALSE;
    }
  }
  r->depth--;
  return TRUE;
}
