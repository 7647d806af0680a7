/* The Jinja subset of chat templates (internal to data/): the lexer (data/jinja-lex.c), the
 * parser (data/jinja-parse.c), values (data/jinja-value.c), the interpreter
 * (data/jinja-eval.c) and the filters, tests and methods (data/jinja-builtins.c). Values and
 * syntax trees live in arenas freed at once; every size, depth and step is bounded. */
#pragma once

#include <glib.h>

/* ---- limits ---- */
#define JJ_MAX_TEMPLATE (1u << 20)  /* bytes of template text */
#define JJ_MAX_DEPTH    64          /* nesting of blocks, expressions and macro calls */
#define JJ_MAX_STEPS    20000000u   /* evaluation steps of one render */
#define JJ_MAX_OUTPUT   (64u << 20) /* bytes of text one render may make or hold */
#define JJ_MAX_RANGE    1000000     /* items range() may make */

/* ---- arena ---- */
typedef struct JjArena JjArena;
JjArena *jj_arena_new(void);
void jj_arena_free(JjArena *a);
gpointer jj_alloc(JjArena *a, gsize n); /* zeroed */
char *jj_strndup(JjArena *a, const char *s, gsize n);
/* A pointer array freed with the arena. */
GPtrArray *jj_array(JjArena *a);
/* Bytes allocated so far. */
gsize jj_arena_used(const JjArena *a);

/* ---- errors: "SOURCE: line N: message" ---- */
typedef struct {
  const char *source; /* "tokenizer_config.json: chat_template" */
  GError *error;
} JjErrors;
gboolean jj_fail(JjErrors *e, int line, const char *fmt, ...) G_GNUC_PRINTF(3, 4);

/* ---- tokens ---- */
typedef enum {
  JT_TEXT,
  JT_OPEN_EXPR,  /* {{ */
  JT_CLOSE_EXPR, /* }} */
  JT_OPEN_STMT,  /* {% */
  JT_CLOSE_STMT, /* %} */
  JT_NAME,
  JT_STRING,
  JT_INT,
  JT_FLOAT,
  JT_OP, /* punctuation and operators, in `text` */
  JT_COMMENT,
  JT_END,
} JjTokType;

typedef struct {
  JjTokType type;
  const char *text; /* NUL-terminated (arena) */
  gsize len;
  int line;
} JjTok;

/* The template's tokens (with the end token), after the preprocessing transformers and
 * @huggingface/jinja apply (trim_blocks, lstrip_blocks, the generation tag) and whitespace
 * control. Line numbers are those of the template as written. */
GArray *jj_lex(const char *src, gsize len, JjArena *arena, JjErrors *e);

/* ---- syntax ---- */
typedef struct JjNode JjNode;
typedef enum {
  /* statements */
  JN_TEXT,
  JN_OUTPUT,
  JN_IF,
  JN_FOR,
  JN_SET,
  JN_SET_BLOCK,
  JN_MACRO,
  JN_BREAK,
  JN_CONTINUE,
  /* expressions */
  JN_LITERAL,
  JN_LIST,
  JN_TUPLE,
  JN_DICT,
  JN_NAME,
  JN_ATTR,
  JN_INDEX,
  JN_SLICE,
  JN_CALL,
  JN_FILTER,
  JN_TEST,
  JN_UNARY,
  JN_BINARY,
  JN_TERNARY,
  JN_KWARG, /* name=value in a call's arguments */
} JjNodeType;

typedef struct JjValue JjValue;

struct JjNode {
  JjNodeType type;
  int line;
  const char *name;  /* NAME, ATTR, FILTER, TEST, MACRO, KWARG, UNARY/BINARY operator */
  JjNode *a, *b, *c; /* operands; IF: cond, body, else; FOR: target, iter, filter */
  GPtrArray *list;   /* children: bodies, items, arguments, elif chain */
  GPtrArray *list2;  /* FOR's else body, MACRO's defaults, DICT's values */
  JjValue *value;    /* LITERAL */
  gboolean negate;   /* TEST: is not */
};

/* The template as a list of statements. */
GPtrArray *jj_parse(GArray *tokens, JjArena *arena, JjErrors *e);

/* ---- values ---- */
typedef enum {
  JV_UNDEFINED,
  JV_NONE,
  JV_BOOL,
  JV_INT,
  JV_FLOAT,
  JV_STRING,
  JV_LIST,
  JV_DICT,
  JV_NAMESPACE,
  JV_MACRO,
  JV_BUILTIN,
  JV_LOOP, /* a for loop's `loop`: items and i (the index0) */
} JjType;

typedef struct JjEnv JjEnv;
typedef struct JjRender JjRender;

/* A stretch of a string that is message `msg`'s content, byte for byte (data/jinja-marks.c):
 * how a render reports where each message's content lands in its output. */
typedef struct {
  gsize start, len;
  guint msg;
} JjMark;
typedef JjValue *(*JjBuiltinFunc)(JjRender *r, JjValue *self, GPtrArray *args, GPtrArray *kwnames,
                                  GPtrArray *kwvalues, int line);

struct JjValue {
  JjType type;
  gboolean b;
  gint64 i;
  double f;
  const char *s; /* STRING (UTF-8, NUL-terminated), UNDEFINED: the name, if known */
  gsize len;
  GPtrArray *items; /* LIST: values; DICT/NAMESPACE: values in key order */
  GPtrArray *keys;  /* DICT/NAMESPACE: key strings (char *), insertion order */
  const JjNode *macro;
  JjEnv *closure;
  JjBuiltinFunc func;
  JjValue *self; /* BUILTIN: the bound object of a method */
  const char *fname;
  JjMark *marks; /* STRING: the stretches that are a message's content (arena), ascending */
  guint n_marks;
};

JjValue *jj_undefined(JjRender *r, const char *name);
JjValue *jj_none(JjRender *r);
JjValue *jj_bool(JjRender *r, gboolean b);
JjValue *jj_int(JjRender *r, gint64 i);
JjValue *jj_float(JjRender *r, double f);
JjValue *jj_string(JjRender *r, const char *s, gsize len);
JjValue *jj_list(JjRender *r);
JjValue *jj_dict(JjRender *r);
JjValue *jj_builtin(JjRender *r, const char *name, JjBuiltinFunc f, JjValue *self);
void jj_list_add(JjValue *list, JjValue *v);
/* DICT/NAMESPACE: the value of `key`, or NULL; setting replaces or appends. */
JjValue *jj_dict_get(const JjValue *d, const char *key);
void jj_dict_set(JjRender *r, JjValue *d, const char *key, JjValue *v);

gboolean jj_truthy(const JjValue *v);
const char *jj_type_name(const JjValue *v);
/* Python's ==. */
gboolean jj_equal(const JjValue *x, const JjValue *y);
/* Appends str(v) as Jinja prints it (Python's str: None, True, 1.0, ['a']). */
void jj_append_str(GString *out, const JjValue *v);
/* tojson as transformers defines it (json.dumps: ", " and ": ", ensure_ascii off; `indent` >
 * 0 pretty-prints); FALSE for a value JSON cannot hold. */
gboolean jj_append_json(GString *out, const JjValue *v, int indent, int depth);

/* ---- the interpreter ---- */
struct JjRender {
  JjArena *arena;
  JjErrors *errors;
  GString *out;
  guint64 steps;
  guint depth;
  int loop_control; /* 1 break, 2 continue */
  GArray *marks;    /* JjMark: the stretches of `out` that are a message's content */
};

/* ---- marks (data/jinja-marks.c): message content followed through strings ---- */
/* Marks all of string v as message msg's content. */
void jj_mark_all(JjRender *r, JjValue *v, guint msg);
/* v[p - v->s .. + len) as a new string with v's marks there. */
JjValue *jj_substring(JjRender *r, const JjValue *v, const char *p, gsize len);
/* Gives v (x's text at xat, then y's at yat) the marks of x and y that are strings. */
void jj_join_marks(JjRender *r, JjValue *v, const JjValue *x, gsize xat, const JjValue *y,
                   gsize yat);
/* Prints str(v) to r->out, with its marks. */
void jj_out(JjRender *r, const JjValue *v);
/* A block whose output becomes a value (macro calls, set blocks): r->out and r->marks are set
 * aside until _end, which returns the output as a string with its marks (NULL when !ok). */
typedef struct {
  GString *out;
  GArray *marks;
} JjCapture;
void jj_capture_begin(JjRender *r, JjCapture *c);
JjValue *jj_capture_end(JjRender *r, JjCapture *c, gboolean ok);

JjEnv *jj_env_new(JjRender *r, JjEnv *parent);
JjValue *jj_env_get(JjEnv *env, const char *name);
void jj_env_set(JjRender *r, JjEnv *env, const char *name, JjValue *v);

/* Runs statements into r->out; FALSE when an error was set. */
gboolean jj_exec(JjRender *r, JjEnv *env, GPtrArray *body);
JjValue *jj_eval(JjRender *r, JjEnv *env, const JjNode *n);
/* Calls a macro or builtin with evaluated arguments. */
JjValue *jj_call(JjRender *r, JjValue *fn, GPtrArray *args, GPtrArray *kwnames, GPtrArray *kwvalues,
                 int line);
/* Counts one step; FALSE (with an error) past the limits. */
gboolean jj_step(JjRender *r, int line);

/* ---- builtins (data/jinja-builtins.c, data/jinja-filters.c) ---- */
/* Argument i, or the keyword `name`, or NULL. */
JjValue *jj_arg(GPtrArray *a, guint i, GPtrArray *kn, GPtrArray *kv, const char *name);
/* An error "WHAT does not take a TYPE"; returns NULL. */
JjValue *jj_bad(JjRender *r, int line, const char *what, const JjValue *v);
/* Python's str.isspace for one character. */
gboolean jj_py_space(gunichar c);
/* str(v) as a value. */
JjValue *jj_str_of(JjRender *r, const JjValue *v);
/* Python's strip, lstrip, rstrip (chars NULL or none: white space). */
JjValue *jj_strip_chars(JjRender *r, const JjValue *s, const JjValue *chars, gboolean left,
                        gboolean right);
/* 0 upper, 1 lower, 2 title, 3 capitalize, as Python's str methods. */
JjValue *jj_change_case(JjRender *r, const JjValue *s, int how);
/* Python's str.replace (count < 0: all). */
JjValue *jj_replace(JjRender *r, const JjValue *s, const JjValue *from, const JjValue *to,
                    gint64 count, int line);
/* The filter `name` on v with arguments; NULL with an error for an unknown filter. */
JjValue *jj_filter(JjRender *r, const char *name, JjValue *v, GPtrArray *args, GPtrArray *kwnames,
                   GPtrArray *kwvalues, int line);
/* The test `name`; -1 with an error for an unknown test. */
int jj_test(JjRender *r, const char *name, JjValue *v, GPtrArray *args, int line);
/* The method `name` of v (a bound builtin), or NULL when v has none. */
JjValue *jj_method(JjRender *r, JjValue *v, const char *name);
/* The global functions: range, namespace, raise_exception, strftime_now. */
void jj_add_globals(JjRender *r, JjEnv *env);
/* Whether a filter, test or global of that name exists (checked when parsing). */
gboolean jj_known_filter(const char *name);
gboolean jj_known_test(const char *name);
