/* Values of the chat-template renderer, with Python's meanings as Jinja2 (which transformers
 * renders with) gives them: truth, ==, str() and json.dumps. They live in an arena that one
 * render frees at once. */
#include "data/jinja-private.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "data/tokenizer.h"

#define BLOCK (64u << 10)

struct JjArena {
  GPtrArray *blocks; /* g_malloc'd */
  GPtrArray *arrays; /* GPtrArray to free */
  guint8 *at;
  gsize left, used;
};

JjArena *jj_arena_new(void)
{
  JjArena *a = g_new0(JjArena, 1);
  a->blocks = g_ptr_array_new_with_free_func(g_free);
  a->arrays = g_ptr_array_new_with_free_func((GDestroyNotify)g_ptr_array_unref);
  return a;
}

void jj_arena_free(JjArena *a)
{
  if (!a)
    return;
  g_ptr_array_unref(a->blocks);
  g_ptr_array_unref(a->arrays);
  g_free(a);
}

gpointer jj_alloc(JjArena *a, gsize n)
{
  n = (n + 15) & ~(gsize)15;
  a->used += n;
  if (n > BLOCK / 4) {
    gpointer p = g_malloc0(n);
    g_ptr_array_add(a->blocks, p);
    return p;
  }
  if (n > a->left) {
    a->at = g_malloc0(BLOCK);
    a->left = BLOCK;
    g_ptr_array_add(a->blocks, a->at);
  }
  gpointer p = a->at;
  a->at += n;
  a->left -= n;
  return p;
}

char *jj_strndup(JjArena *a, const char *s, gsize n)
{
  char *d = jj_alloc(a, n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

GPtrArray *jj_array(JjArena *a)
{
  GPtrArray *arr = g_ptr_array_new();
  g_ptr_array_add(a->arrays, arr);
  a->used += 64;
  return arr;
}

gsize jj_arena_used(const JjArena *a)
{
  return a->used;
}

gboolean jj_fail(JjErrors *e, int line, const char *fmt, ...)
{
  if (e->error)
    return FALSE;
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(&e->error, COHORT_TOKENIZER_ERROR, COHORT_TOKENIZER_ERROR_FORMAT, "%s: line %d: %s",
              e->source, line, msg);
  return FALSE;
}

static JjValue *value(JjRender *r, JjType t)
{
  JjValue *v = jj_alloc(r->arena, sizeof *v);
  v->type = t;
  return v;
}

JjValue *jj_undefined(JjRender *r, const char *name)
{
  JjValue *v = value(r, JV_UNDEFINED);
  v->s = name;
  return v;
}

JjValue *jj_none(JjRender *r)
{
  return value(r, JV_NONE);
}

JjValue *jj_bool(JjRender *r, gboolean b)
{
  JjValue *v = value(r, JV_BOOL);
  v->b = b != 0;
  return v;
}

JjValue *jj_int(JjRender *r, gint64 i)
{
  JjValue *v = value(r, JV_INT);
  v->i = i;
  return v;
}

JjValue *jj_float(JjRender *r, double f)
{
  JjValue *v = value(r, JV_FLOAT);
  v->f = f;
  return v;
}

JjValue *jj_string(JjRender *r, const char *s, gsize len)
{
  JjValue *v = value(r, JV_STRING);
  v->s = jj_strndup(r->arena, s, len);
  v->len = len;
  return v;
}

JjValue *jj_list(JjRender *r)
{
  JjValue *v = value(r, JV_LIST);
  v->items = jj_array(r->arena);
  return v;
}

JjValue *jj_dict(JjRender *r)
{
  JjValue *v = value(r, JV_DICT);
  v->items = jj_array(r->arena);
  v->keys = jj_array(r->arena);
  return v;
}

JjValue *jj_builtin(JjRender *r, const char *name, JjBuiltinFunc f, JjValue *self)
{
  JjValue *v = value(r, JV_BUILTIN);
  v->func = f;
  v->self = self;
  v->fname = name;
  return v;
}

void jj_list_add(JjValue *list, JjValue *v)
{
  g_ptr_array_add(list->items, v);
}

JjValue *jj_dict_get(const JjValue *d, const char *key)
{
  for (guint i = 0; i < d->keys->len; i++)
    if (strcmp(d->keys->pdata[i], key) == 0)
      return d->items->pdata[i];
  return NULL;
}

void jj_dict_set(JjRender *r, JjValue *d, const char *key, JjValue *v)
{
  for (guint i = 0; i < d->keys->len; i++) {
    if (strcmp(d->keys->pdata[i], key) == 0) {
      d->items->pdata[i] = v;
      return;
    }
  }
  g_ptr_array_add(d->keys, jj_strndup(r->arena, key, strlen(key)));
  g_ptr_array_add(d->items, v);
}

gboolean jj_truthy(const JjValue *v)
{
  switch (v->type) {
  case JV_UNDEFINED:
  case JV_NONE:
    return FALSE;
  case JV_BOOL:
    return v->b;
  case JV_INT:
    return v->i != 0;
  case JV_FLOAT:
    return v->f != 0;
  case JV_STRING:
    return v->len > 0;
  case JV_LIST:
  case JV_DICT:
    return v->items->len > 0;
  default:
    return TRUE;
  }
}

const char *jj_type_name(const JjValue *v)
{
  static const char *const names[] = {"undefined", "none",   "bool",     "int",
                                      "float",     "string", "list",     "dict",
                                      "namespace", "macro",  "function", "loop"};
  return names[v->type];
}

static gboolean numeric(const JjValue *v)
{
  return v->type == JV_INT || v->type == JV_FLOAT || v->type == JV_BOOL;
}

static double number(const JjValue *v)
{
  return v->type == JV_FLOAT ? v->f : v->type == JV_INT ? (double)v->i : (double)v->b;
}

gboolean jj_equal(const JjValue *x, const JjValue *y)
{
  if (numeric(x) && numeric(y)) {
    if (x->type != JV_FLOAT && y->type != JV_FLOAT)
      return (x->type == JV_INT ? x->i : x->b) == (y->type == JV_INT ? y->i : y->b);
    return number(x) == number(y);
  }
  if (x->type != y->type)
    return FALSE;
  switch (x->type) {
  case JV_UNDEFINED:
  case JV_NONE:
    return TRUE;
  case JV_STRING:
    return x->len == y->len && memcmp(x->s, y->s, x->len) == 0;
  case JV_LIST:
    if (x->items->len != y->items->len)
      return FALSE;
    for (guint i = 0; i < x->items->len; i++)
      if (!jj_equal(x->items->pdata[i], y->items->pdata[i]))
        return FALSE;
    return TRUE;
  case JV_DICT:
    if (x->keys->len != y->keys->len)
      return FALSE;
    for (guint i = 0; i < x->keys->len; i++) {
      const JjValue *o = jj_dict_get(y, x->keys->pdata[i]);
      if (!o || !jj_equal(x->items->pdata[i], o))
        return FALSE;
    }
    return TRUE;
  default:
    return x == y;
  }
}

/* Python's repr of a float: the shortest digits that read back, with ".0" when whole. */
static void append_float(GString *out, double f)
{
  if (isnan(f)) {
    g_string_append(out, "nan");
    return;
  }
  if (isinf(f)) {
    g_string_append(out, f < 0 ? "-inf" : "inf");
    return;
  }
  char buf[40];
  for (int prec = 1; prec <= 17; prec++) {
    g_snprintf(buf, sizeof buf, "%.*g", prec, f);
    if (g_ascii_strtod(buf, NULL) == f)
      break;
  }
  /* Python writes 1e+16 as 1e+16 and 1e-05 as 1e-05: printf's %g agrees; whole numbers below
   * 1e16 get ".0". */
  if (!strpbrk(buf, ".einn"))
    g_strlcat(buf, ".0", sizeof buf);
  g_string_append(out, buf);
}

/* Python's repr of a string: single quotes unless it holds one and no double quote. */
static void append_repr_string(GString *out, const JjValue *v)
{
  gboolean dq = memchr(v->s, '\'', v->len) && !memchr(v->s, '"', v->len);
  char q = dq ? '"' : '\'';
  g_string_append_c(out, q);
  for (gsize i = 0; i < v->len; i++) {
    char c = v->s[i];
    if (c == q || c == '\\')
      g_string_append_printf(out, "\\%c", c);
    else if (c == '\n')
      g_string_append(out, "\\n");
    else if (c == '\r')
      g_string_append(out, "\\r");
    else if (c == '\t')
      g_string_append(out, "\\t");
    else if ((guint8)c < 0x20 || c == 0x7f)
      g_string_append_printf(out, "\\x%02x", (guint8)c);
    else
      g_string_append_c(out, c);
  }
  g_string_append_c(out, q);
}

static void append_repr(GString *out, const JjValue *v)
{
  if (v->type == JV_STRING)
    append_repr_string(out, v);
  else
    jj_append_str(out, v);
}

void jj_append_str(GString *out, const JjValue *v)
{
  switch (v->type) {
  case JV_UNDEFINED:
    return;
  case JV_NONE:
    g_string_append(out, "None");
    return;
  case JV_BOOL:
    g_string_append(out, v->b ? "True" : "False");
    return;
  case JV_INT:
    g_string_append_printf(out, "%" G_GINT64_FORMAT, v->i);
    return;
  case JV_FLOAT:
    append_float(out, v->f);
    return;
  case JV_STRING:
    g_string_append_len(out, v->s, (gssize)v->len);
    return;
  case JV_LIST:
    g_string_append_c(out, '[');
    for (guint i = 0; i < v->items->len; i++) {
      if (i)
        g_string_append(out, ", ");
      append_repr(out, v->items->pdata[i]);
    }
    g_string_append_c(out, ']');
    return;
  case JV_DICT:
  case JV_NAMESPACE:
    g_string_append(out, v->type == JV_DICT ? "{" : "<Namespace {");
    for (guint i = 0; i < v->keys->len; i++) {
      JjValue k = {.type = JV_STRING, .s = v->keys->pdata[i], .len = strlen(v->keys->pdata[i])};
      if (i)
        g_string_append(out, ", ");
      append_repr_string(out, &k);
      g_string_append(out, ": ");
      append_repr(out, v->items->pdata[i]);
    }
    g_string_append(out, v->type == JV_DICT ? "}" : "}>");
    return;
  default:
    g_string_append_printf(out, "<%s %s>", jj_type_name(v), v->fname ? v->fname : "");
  }
}

static void json_string(GString *out, const char *s, gsize n)
{
  g_string_append_c(out, '"');
  for (gsize i = 0; i < n; i++) {
    guint8 c = (guint8)s[i];
    switch (c) {
    case '"':
      g_string_append(out, "\\\"");
      break;
    case '\\':
      g_string_append(out, "\\\\");
      break;
    case '\n':
      g_string_append(out, "\\n");
      break;
    case '\r':
      g_string_append(out, "\\r");
      break;
    case '\t':
      g_string_append(out, "\\t");
      break;
    case '\b':
      g_string_append(out, "\\b");
      break;
    case '\f':
      g_string_append(out, "\\f");
      break;
    default:
      if (c < 0x20)
        g_string_append_printf(out, "\\u%04x", c);
      else
        g_string_append_c(out, (char)c);
    }
  }
  g_string_append_c(out, '"');
}

static void newline(GString *out, int indent, int depth)
{
  g_string_append_c(out, '\n');
  for (int i = 0; i < indent * depth; i++)
    g_string_append_c(out, ' ');
}

gboolean jj_append_json(GString *out, const JjValue *v, int indent, int depth)
{
  const char *sep = indent > 0 ? "," : ", ";
  switch (v->type) {
  case JV_UNDEFINED:
  case JV_NONE:
    g_string_append(out, "null");
    return TRUE;
  case JV_BOOL:
    g_string_append(out, v->b ? "true" : "false");
    return TRUE;
  case JV_INT:
    g_string_append_printf(out, "%" G_GINT64_FORMAT, v->i);
    return TRUE;
  case JV_FLOAT:
    if (!isfinite(v->f))
      g_string_append(out, isnan(v->f) ? "NaN" : v->f < 0 ? "-Infinity" : "Infinity");
    else
      append_float(out, v->f);
    return TRUE;
  case JV_STRING:
    json_string(out, v->s, v->len);
    return TRUE;
  case JV_LIST:
  case JV_DICT:
  case JV_NAMESPACE: {
    gboolean list = v->type == JV_LIST;
    g_string_append_c(out, list ? '[' : '{');
    for (guint i = 0; i < v->items->len; i++) {
      if (i)
        g_string_append(out, sep);
      if (indent > 0)
        newline(out, indent, depth + 1);
      if (!list) {
        json_string(out, v->keys->pdata[i], strlen(v->keys->pdata[i]));
        g_string_append(out, ": ");
      }
      if (!jj_append_json(out, v->items->pdata[i], indent, depth + 1))
        return FALSE;
    }
    if (indent > 0 && v->items->len > 0)
      newline(out, indent, depth);
    g_string_append_c(out, list ? ']' : '}');
    return TRUE;
  }
  default:
    return FALSE;
  }
}
