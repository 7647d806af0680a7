/* The chat-template parser: statements if/elif/else, for (with a filter, else, tuple
 * targets), set (a name, a namespace attribute, names of a tuple, or a block), macro, break,
 * continue; expressions with Jinja's precedence (ternary, or, and, not, comparisons and in,
 * + - ~, * / // %, **, is tests, | filters, unary signs, attribute, index, slice, call).
 * Anything else (include, extends, call blocks, filter blocks, raw, *args) is refused,
 * naming the construct and its line. */
#include "data/jinja-private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const JjTok *t;
  guint n, i;
  JjArena *arena;
  JjErrors *e;
  JjRender lit; /* makes literal values in the template's arena */
  guint depth;
} Parser;

static const JjTok *peek(Parser *p)
{
  return &p->t[MIN(p->i, p->n - 1)];
}

static gboolean is_op(Parser *p, const char *op)
{
  const JjTok *t = peek(p);
  return t->type == JT_OP && strcmp(t->text, op) == 0;
}

static gboolean is_name(Parser *p, const char *name)
{
  const JjTok *t = peek(p);
  return t->type == JT_NAME && strcmp(t->text, name) == 0;
}

static gboolean is_name_at(Parser *p, guint ahead, const char *name)
{
  const JjTok *t = &p->t[MIN(p->i + ahead, p->n - 1)];
  return t->type == JT_NAME && strcmp(t->text, name) == 0;
}

static const char *describe(const JjTok *t)
{
  switch (t->type) {
  case JT_END:
    return "the end of the template";
  case JT_CLOSE_STMT:
    return "%}";
  case JT_CLOSE_EXPR:
    return "}}";
  case JT_TEXT:
    return "text";
  default:
    return t->text;
  }
}

static gboolean expect_op(Parser *p, const char *op, const char *what)
{
  if (is_op(p, op)) {
    p->i++;
    return TRUE;
  }
  return jj_fail(p->e, peek(p)->line, "%s: expected '%s', found '%s'", what, op, describe(peek(p)));
}

static JjNode *node(Parser *p, JjNodeType type, int line)
{
  JjNode *n = jj_alloc(p->arena, sizeof *n);
  n->type = type;
  n->line = line;
  return n;
}

static GPtrArray *list_new(Parser *p)
{
  return jj_array(p->arena);
}

static JjNode *parse_expr(Parser *p);

static gboolean enter(Parser *p, int line)
{
  if (++p->depth > JJ_MAX_DEPTH)
    return jj_fail(p->e, line, "nested deeper than %d levels", JJ_MAX_DEPTH);
  return TRUE;
}

/* Call arguments up to ')': expressions and name=value. */
static GPtrArray *parse_args(Parser *p, const char *what)
{
  GPtrArray *args = list_new(p);
  p->i++; /* ( */
  while (!is_op(p, ")")) {
    if (is_op(p, "*") || is_op(p, "**")) {
      jj_fail(p->e, peek(p)->line, "%s: unpacking arguments with * or ** is not supported", what);
      return NULL;
    }
    JjNode *arg;
    if (peek(p)->type == JT_NAME && p->t[MIN(p->i + 1, p->n - 1)].type == JT_OP &&
        strcmp(p->t[MIN(p->i + 1, p->n - 1)].text, "=") == 0) {
      arg = node(p, JN_KWARG, peek(p)->line);
      arg->name = peek(p)->text;
      p->i += 2;
      if (!(arg->a = parse_expr(p)))
        return NULL;
    } else if (!(arg = parse_expr(p))) {
      return NULL;
    }
    g_ptr_array_add(args, arg);
    if (!is_op(p, ","))
      break;
    p->i++;
  }
  return expect_op(p, ")", what) ? args : NULL;
}

static JjNode *literal(Parser *p, JjValue *v, int line)
{
  JjNode *n = node(p, JN_LITERAL, line);
  n->value = v;
  return n;
}

/* ( … ), [ … ], { … }: the items up to `close`. */
static gboolean parse_items(Parser *p, const char *close, GPtrArray *keys, GPtrArray *values,
                            gboolean *comma)
{
  *comma = FALSE;
  while (!is_op(p, close)) {
    JjNode *k = parse_expr(p);
    if (!k)
      return FALSE;
    if (keys) {
      if (!expect_op(p, ":", "a dict literal"))
        return FALSE;
      JjNode *v = parse_expr(p);
      if (!v)
        return FALSE;
      g_ptr_array_add(keys, k);
      g_ptr_array_add(values, v);
    } else {
      g_ptr_array_add(values, k);
    }
    if (!is_op(p, ","))
      break;
    *comma = TRUE;
    p->i++;
  }
  return expect_op(p, close, "a literal");
}

static JjNode *parse_primary(Parser *p)
{
  const JjTok *t = peek(p);
  int line = t->line;
  if (t->type == JT_STRING) {
    /* Adjacent string literals are one string, as in Jinja and Python. */
    GString *s = g_string_new(NULL);
    while (peek(p)->type == JT_STRING)
      g_string_append_len(s, peek(p)->text, (gssize)peek(p)->len), p->i++;
    JjNode *n = literal(p, jj_string(&p->lit, s->str, s->len), line);
    g_string_free(s, TRUE);
    return n;
  }
  if (t->type == JT_INT || t->type == JT_FLOAT) {
    p->i++;
    if (t->type == JT_FLOAT)
      return literal(p, jj_float(&p->lit, g_ascii_strtod(t->text, NULL)), line);
    errno = 0;
    gint64 v = g_ascii_strtoll(t->text, NULL, 10);
    if (errno) {
      jj_fail(p->e, line, "the number %s is out of range", t->text);
      return NULL;
    }
    return literal(p, jj_int(&p->lit, v), line);
  }
  if (t->type == JT_NAME) {
    p->i++;
    const char *s = t->text;
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False"))
      return literal(p, jj_bool(&p->lit, s[0] == 't' || s[0] == 'T'), line);
    if (!strcmp(s, "none") || !strcmp(s, "None"))
      return literal(p, jj_none(&p->lit), line);
    JjNode *n = node(p, JN_NAME, line);
    n->name = s;
    return n;
  }
  if (t->type == JT_OP &&
      (!strcmp(t->text, "(") || !strcmp(t->text, "[") || !strcmp(t->text, "{"))) {
    char open = t->text[0];
    p->i++;
    gboolean comma;
    JjNode *n = node(p, open == '(' ? JN_TUPLE : open == '[' ? JN_LIST : JN_DICT, line);
    n->list = list_new(p);
    n->list2 = open == '{' ? list_new(p) : NULL;
    if (open == '{' ? !parse_items(p, "}", n->list, n->list2, &comma)
                    : !parse_items(p, open == '(' ? ")" : "]", NULL, n->list, &comma))
      return NULL;
    /* (x) is x; (x,) and () are tuples. */
    if (open == '(' && n->list->len == 1 && !comma)
      return n->list->pdata[0];
    return n;
  }
  jj_fail(p->e, line, "expected an expression, found '%s'", describe(t));
  return NULL;
}

static JjNode *parse_postfix(Parser *p)
{
  JjNode *n = parse_primary(p);
  while (n) {
    int line = peek(p)->line;
    if (is_op(p, ".")) {
      p->i++;
      const JjTok *t = peek(p);
      if (t->type != JT_NAME && t->type != JT_INT) {
        jj_fail(p->e, line, "expected a name after '.', found '%s'", describe(t));
        return NULL;
      }
      p->i++;
      JjNode *m = node(p, t->type == JT_NAME ? JN_ATTR : JN_INDEX, line);
      m->a = n;
      if (t->type == JT_NAME)
        m->name = t->text;
      else
        m->b = literal(p, jj_int(&p->lit, g_ascii_strtoll(t->text, NULL, 10)), line);
      n = m;
    } else if (is_op(p, "[")) {
      p->i++;
      JjNode *parts[3] = {NULL, NULL, NULL};
      int k = 0;
      gboolean slice = FALSE;
      for (;;) {
        if (!is_op(p, ":") && !is_op(p, "]") && !(parts[k] = parse_expr(p)))
          return NULL;
        if (!is_op(p, ":") || k == 2)
          break;
        slice = TRUE;
        p->i++;
        k++;
      }
      if (!expect_op(p, "]", "a subscript"))
        return NULL;
      JjNode *m = node(p, slice ? JN_SLICE : JN_INDEX, line);
      m->a = n;
      if (slice) {
        m->list = list_new(p);
        for (int j = 0; j < 3; j++)
          g_ptr_array_add(m->list, parts[j]);
      } else if (!(m->b = parts[0])) {
        jj_fail(p->e, line, "an empty subscript []");
        return NULL;
      }
      n = m;
    } else if (is_op(p, "(")) {
      JjNode *m = node(p, JN_CALL, line);
      m->a = n;
      if (!(m->list = parse_args(p, "a call")))
        return NULL;
      n = m;
    } else {
      break;
    }
  }
  return n;
}

static JjNode *parse_unary(Parser *p)
{
  if (is_op(p, "-") || is_op(p, "+")) {
    JjNode *n = node(p, JN_UNARY, peek(p)->line);
    n->name = peek(p)->text;
    p->i++;
    if (!enter(p, n->line) || !(n->a = parse_unary(p)))
      return NULL;
    p->depth--;
    return n;
  }
  return parse_postfix(p);
}

static JjNode *parse_filtered(Parser *p)
{
  JjNode *n = parse_unary(p);
  while (n && is_op(p, "|")) {
    p->i++;
    const JjTok *t = peek(p);
    if (t->type != JT_NAME) {
      jj_fail(p->e, t->line, "expected a filter's name after '|', found '%s'", describe(t));
      return NULL;
    }
    if (!jj_known_filter(t->text)) {
      jj_fail(p->e, t->line, "the filter \"%s\" is not one Cohort's renderer has", t->text);
      return NULL;
    }
    JjNode *f = node(p, JN_FILTER, t->line);
    f->name = t->text;
    f->a = n;
    p->i++;
    f->list = is_op(p, "(") ? parse_args(p, "a filter's arguments") : list_new(p);
    if (!f->list)
      return NULL;
    n = f;
  }
  return n;
}

static JjNode *parse_tested(Parser *p)
{
  JjNode *n = parse_filtered(p);
  while (n && is_name(p, "is")) {
    p->i++;
    JjNode *t = node(p, JN_TEST, peek(p)->line);
    t->a = n;
    if (is_name(p, "not")) {
      t->negate = TRUE;
      p->i++;
    }
    const JjTok *name = peek(p);
    /* "is none" and "is true": the words are also literals. */
    if (name->type != JT_NAME) {
      jj_fail(p->e, name->line, "expected a test's name after 'is', found '%s'", describe(name));
      return NULL;
    }
    if (!jj_known_test(name->text)) {
      jj_fail(p->e, name->line, "the test \"%s\" is not one Cohort's renderer has", name->text);
      return NULL;
    }
    t->name = name->text;
    p->i++;
    if (is_op(p, "(")) {
      if (!(t->list = parse_args(p, "a test's arguments")))
        return NULL;
    } else {
      t->list = list_new(p);
      const JjTok *arg = peek(p);
      /* A bare literal argument: "is divisibleby 3", "is eq 'a'". */
      if (arg->type == JT_INT || arg->type == JT_FLOAT || arg->type == JT_STRING)
        g_ptr_array_add(t->list, parse_primary(p));
    }
    n = t;
  }
  return n;
}

typedef JjNode *(*Level)(Parser *p);

static JjNode *binary_level(Parser *p, Level next, const char *const *ops)
{
  JjNode *n = next(p);
  while (n) {
    const char *op = NULL;
    for (guint k = 0; ops[k] && !op; k++)
      if (is_op(p, ops[k]))
        op = ops[k];
    if (!op)
      break;
    JjNode *b = node(p, JN_BINARY, peek(p)->line);
    b->name = op;
    p->i++;
    b->a = n;
    if (!(b->b = next(p)))
      return NULL;
    n = b;
  }
  return n;
}

static JjNode *parse_power(Parser *p)
{
  static const char *const ops[] = {"**", NULL};
  return binary_level(p, parse_tested, ops);
}

static JjNode *parse_mult(Parser *p)
{
  static const char *const ops[] = {"*", "//", "/", "%", NULL};
  return binary_level(p, parse_power, ops);
}

static JjNode *parse_add(Parser *p)
{
  static const char *const ops[] = {"+", "-", "~", NULL};
  return binary_level(p, parse_mult, ops);
}

static JjNode *parse_compare(Parser *p)
{
  static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
  JjNode *n = parse_add(p);
  while (n) {
    const char *op = NULL;
    guint skip = 1;
    for (guint k = 0; ops[k] && !op; k++)
      if (is_op(p, ops[k]))
        op = ops[k];
    if (!op && is_name(p, "in"))
      op = "in";
    if (!op && is_name(p, "not") && is_name_at(p, 1, "in"))
      op = "not in", skip = 2;
    if (!op)
      break;
    JjNode *b = node(p, JN_BINARY, peek(p)->line);
    b->name = op;
    p->i += skip;
    b->a = n;
    if (!(b->b = parse_add(p)))
      return NULL;
    n = b;
  }
  return n;
}

static JjNode *parse_not(Parser *p)
{
  if (is_name(p, "not")) {
    JjNode *n = node(p, JN_UNARY, peek(p)->line);
    n->name = "not";
    p->i++;
    if (!enter(p, n->line) || !(n->a = parse_not(p)))
      return NULL;
    p->depth--;
    return n;
  }
  return parse_compare(p);
}

static JjNode *parse_and(Parser *p)
{
  JjNode *n = parse_not(p);
  while (n && is_name(p, "and")) {
    JjNode *b = node(p, JN_BINARY, peek(p)->line);
    b->name = "and";
    p->i++;
    b->a = n;
    if (!(b->b = parse_not(p)))
      return NULL;
    n = b;
  }
  return n;
}

static JjNode *parse_or(Parser *p)
{
  JjNode *n = parse_and(p);
  while (n && is_name(p, "or")) {
    JjNode *b = node(p, JN_BINARY, peek(p)->line);
    b->name = "or";
    p->i++;
    b->a = n;
    if (!(b->b = parse_and(p)))
      return NULL;
    n = b;
  }
  return n;
}

static JjNode *parse_expr(Parser *p)
{
  if (!enter(p, peek(p)->line))
    return NULL;
  JjNode *n = parse_or(p);
  if (n && is_name(p, "if")) {
    JjNode *t = node(p, JN_TERNARY, peek(p)->line);
    p->i++;
    t->a = n;
    if (!(t->b = parse_or(p)))
      return NULL;
    if (is_name(p, "else")) {
      p->i++;
      if (!(t->c = parse_expr(p)))
        return NULL;
    }
    n = t;
  }
  p->depth--;
  return n;
}

/* ---- statements ---- */

static GPtrArray *parse_body(Parser *p, const char *const *ends, const char **ended);

static gboolean close_stmt(Parser *p, const char *what)
{
  if (peek(p)->type == JT_CLOSE_STMT) {
    p->i++;
    return TRUE;
  }
  return jj_fail(p->e, peek(p)->line, "%s: expected %%}, found '%s'", what, describe(peek(p)));
}

/* A target of for or set: a name, or names separated by commas (with or without parens). */
static JjNode *parse_target(Parser *p, gboolean attr)
{
  int line = peek(p)->line;
  gboolean paren = is_op(p, "(");
  if (paren)
    p->i++;
  JjNode *tuple = node(p, JN_TUPLE, line);
  tuple->list = list_new(p);
  for (;;) {
    const JjTok *t = peek(p);
    if (t->type != JT_NAME) {
      jj_fail(p->e, t->line, "expected a variable's name, found '%s'", describe(t));
      return NULL;
    }
    p->i++;
    JjNode *n = node(p, JN_NAME, t->line);
    n->name = t->text;
    if (attr && is_op(p, ".")) {
      p->i++;
      const JjTok *a = peek(p);
      if (a->type != JT_NAME) {
        jj_fail(p->e, a->line, "expected an attribute's name after '.'");
        return NULL;
      }
      p->i++;
      JjNode *m = node(p, JN_ATTR, a->line);
      m->a = n;
      m->name = a->text;
      return m;
    }
    g_ptr_array_add(tuple->list, n);
    if (!is_op(p, ","))
      break;
    p->i++;
  }
  if (paren && !expect_op(p, ")", "a target"))
    return NULL;
  return tuple->list->len == 1 ? tuple->list->pdata[0] : tuple;
}

static JjNode *parse_if(Parser *p, int line)
{
  JjNode *n = node(p, JN_IF, line);
  if (!(n->a = parse_expr(p)) || !close_stmt(p, "if"))
    return NULL;
  static const char *const ends[] = {"elif", "else", "endif", NULL};
  const char *ended = NULL;
  if (!(n->list = parse_body(p, ends, &ended)))
    return NULL;
  if (strcmp(ended, "elif") == 0) {
    n->list2 = list_new(p);
    JjNode *e = parse_if(p, peek(p)->line);
    if (!e)
      return NULL;
    g_ptr_array_add(n->list2, e);
    return n;
  }
  if (strcmp(ended, "else") == 0) {
    static const char *const only_end[] = {"endif", NULL};
    if (!close_stmt(p, "else") || !(n->list2 = parse_body(p, only_end, &ended)))
      return NULL;
  }
  return close_stmt(p, "endif") ? n : NULL;
}

static JjNode *parse_for(Parser *p, int line)
{
  JjNode *n = node(p, JN_FOR, line);
  if (!(n->a = parse_target(p, FALSE)))
    return NULL;
  if (!is_name(p, "in")) {
    jj_fail(p->e, peek(p)->line, "for: expected 'in', found '%s'", describe(peek(p)));
    return NULL;
  }
  p->i++;
  /* The iterable stops before a loop filter's "if". */
  if (!(n->b = parse_or(p)))
    return NULL;
  if (is_name(p, "if")) {
    p->i++;
    if (!(n->c = parse_or(p)))
      return NULL;
  }
  if (is_name(p, "recursive")) {
    jj_fail(p->e, peek(p)->line, "for ... recursive is not supported by Cohort's renderer");
    return NULL;
  }
  static const char *const ends[] = {"else", "endfor", NULL};
  const char *ended = NULL;
  if (!close_stmt(p, "for") || !(n->list = parse_body(p, ends, &ended)))
    return NULL;
  if (strcmp(ended, "else") == 0) {
    static const char *const only_end[] = {"endfor", NULL};
    if (!close_stmt(p, "else") || !(n->list2 = parse_body(p, only_end, &ended)))
      return NULL;
  }
  return close_stmt(p, "endfor") ? n : NULL;
}

static JjNode *parse_set(Parser *p, int line)
{
  JjNode *target = parse_target(p, TRUE);
  if (!target)
    return NULL;
  if (is_op(p, "=")) {
    p->i++;
    JjNode *n = node(p, JN_SET, line);
    n->a = target;
    if (!(n->b = parse_expr(p)))
      return NULL;
    /* set x = a, b: a tuple. */
    if (is_op(p, ",")) {
      JjNode *t = node(p, JN_TUPLE, line);
      t->list = list_new(p);
      g_ptr_array_add(t->list, n->b);
      while (is_op(p, ",")) {
        p->i++;
        JjNode *x = parse_expr(p);
        if (!x)
          return NULL;
        g_ptr_array_add(t->list, x);
      }
      n->b = t;
    }
    return close_stmt(p, "set") ? n : NULL;
  }
  if (target->type != JN_NAME) {
    jj_fail(p->e, line, "set: a block assignment takes one variable's name");
    return NULL;
  }
  if (is_op(p, "|")) {
    jj_fail(p->e, line, "set: a filtered block assignment is not supported by Cohort's renderer");
    return NULL;
  }
  JjNode *n = node(p, JN_SET_BLOCK, line);
  n->name = target->name;
  static const char *const ends[] = {"endset", NULL};
  const char *ended;
  if (!close_stmt(p, "set") || !(n->list = parse_body(p, ends, &ended)))
    return NULL;
  return close_stmt(p, "endset") ? n : NULL;
}

static JjNode *parse_macro(Parser *p, int line)
{
  const JjTok *t = peek(p);
  if (t->type != JT_NAME) {
    jj_fail(p->e, line, "macro: expected a name, found '%s'", describe(t));
    return NULL;
  }
  p->i++;
  JjNode *n = node(p, JN_MACRO, line);
  n->name = t->text;
  n->list2 = list_new(p);
  if (!expect_op(p, "(", "macro"))
    return NULL;
  while (!is_op(p, ")")) {
    const JjTok *a = peek(p);
    if (a->type != JT_NAME) {
      jj_fail(p->e, a->line, "macro %s: expected a parameter's name, found '%s'", n->name,
              describe(a));
      return NULL;
    }
    p->i++;
    JjNode *param = node(p, JN_KWARG, a->line);
    param->name = a->text;
    if (is_op(p, "=")) {
      p->i++;
      if (!(param->a = parse_expr(p)))
        return NULL;
    }
    g_ptr_array_add(n->list2, param);
    if (!is_op(p, ","))
      break;
    p->i++;
  }
  static const char *const ends[] = {"endmacro", NULL};
  const char *ended;
  if (!expect_op(p, ")", "macro") || !close_stmt(p, "macro") ||
      !(n->list = parse_body(p, ends, &ended)))
    return NULL;
  if (peek(p)->type == JT_NAME)
    p->i++; /* endmacro name */
  return close_stmt(p, "endmacro") ? n : NULL;
}

/* One {% … %} statement (the {% is consumed); *end gets an ending keyword instead. */
static JjNode *parse_stmt(Parser *p, const char *const *ends, const char **end)
{
  const JjTok *t = peek(p);
  int line = t->line;
  if (t->type != JT_NAME) {
    jj_fail(p->e, line, "expected a statement after {%%, found '%s'", describe(t));
    return NULL;
  }
  for (guint k = 0; ends && ends[k]; k++) {
    if (strcmp(t->text, ends[k]) == 0) {
      p->i++;
      *end = ends[k];
      return NULL;
    }
  }
  p->i++;
  const char *w = t->text;
  if (!strcmp(w, "if"))
    return parse_if(p, line);
  if (!strcmp(w, "for"))
    return parse_for(p, line);
  if (!strcmp(w, "set"))
    return parse_set(p, line);
  if (!strcmp(w, "macro"))
    return parse_macro(p, line);
  if (!strcmp(w, "break") || !strcmp(w, "continue")) {
    JjNode *n = node(p, w[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
    return close_stmt(p, w) ? n : NULL;
  }
  jj_fail(p->e, line, "the statement {%% %s %%} is %s", w,
          !strcmp(w, "elif") || !strcmp(w, "else") || !strncmp(w, "end", 3)
              ? "not where it belongs"
              : "not one Cohort's renderer has (allowed: if, for, set, macro, break, "
                "continue)");
  return NULL;
}

static GPtrArray *parse_body(Parser *p, const char *const *ends, const char **ended)
{
  GPtrArray *body = list_new(p);
  if (!enter(p, peek(p)->line))
    return NULL;
  for (;;) {
    const JjTok *t = peek(p);
    if (t->type == JT_END) {
      if (ends) {
        guint last = 0;
        while (ends[last + 1])
          last++;
        jj_fail(p->e, t->line, "the template ends before {%% %s %%}", ends[last]);
        return NULL;
      }
      break;
    }
    p->i++;
    if (t->type == JT_COMMENT)
      continue;
    if (t->type == JT_TEXT) {
      JjNode *n = node(p, JN_TEXT, t->line);
      n->value = jj_string(&p->lit, t->text, t->len);
      g_ptr_array_add(body, n);
    } else if (t->type == JT_OPEN_EXPR) {
      JjNode *n = node(p, JN_OUTPUT, t->line);
      if (!(n->a = parse_expr(p)))
        return NULL;
      if (peek(p)->type != JT_CLOSE_EXPR) {
        jj_fail(p->e, peek(p)->line, "expected }}, found '%s'", describe(peek(p)));
        return NULL;
      }
      p->i++;
      g_ptr_array_add(body, n);
    } else if (t->type == JT_OPEN_STMT) {
      const char *end = NULL;
      JjNode *n = parse_stmt(p, ends, &end);
      if (end) {
        *ended = end;
        break;
      }
      if (!n)
        return NULL;
      g_ptr_array_add(body, n);
    } else {
      jj_fail(p->e, t->line, "'%s' outside a tag", describe(t));
      return NULL;
    }
  }
  p->depth--;
  return body;
}

GPtrArray *jj_parse(GArray *tokens, JjArena *arena, JjErrors *e)
{
  Parser p = {.t = (const JjTok *)tokens->data, .n = tokens->len, .arena = arena, .e = e};
  p.lit.arena = arena;
  p.lit.errors = e;
  return parse_body(&p, NULL, NULL);
}
