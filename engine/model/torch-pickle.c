/* The restricted unpickler (torch-pickle.h): PyTorch 1.13's weights-only opcode set and
 * allowlist, interpreted as data. */
#include "engine/model/torch-pickle.h"
#include "engine/model/torch-allowlist.h"

#include <string.h>

/* clang-format off */
G_DEFINE_QUARK(cohort-torch-pickle-error-quark, cohort_torch_pickle_error)
/* clang-format on */

/* Caps: far above any real state dict (a ResNet-101's pickle makes ~10^4 values), low enough
 * that a hostile pickle cannot take more than a few hundred MiB. */
#define MAX_PICKLE ((gsize)64 << 20)
#define MAX_VALUES (1 << 21)
#define MAX_ITEMS  (1 << 22) /* container slots, over all containers */
#define MAX_STACK  (1 << 20) /* values on the stack and the marked stacks together */
#define MAX_MARKS  1024
#define MAX_MEMO   (1 << 20)
#define MAX_DEPTH  32
#define MAX_STRING ((gsize)1 << 20)
#define MAX_GLOBAL 256

/* ---- values ---- */
typedef enum {
  V_NONE,
  V_BOOL,
  V_INT,
  V_STR,
  V_TUPLE,
  V_LIST,
  V_DICT, /* items: key, value, key, value … */
  V_SET,
  V_GLOBAL,
  V_STORAGE,
  V_TENSOR,
  V_LAYOUT,
} Kind;

static const char *const kind_names[] = {"None", "bool", "int",    "str",     "tuple",  "list",
                                         "dict", "set",  "global", "storage", "tensor", "layout"};

typedef struct Value Value;
struct Value {
  Kind kind;
  int depth;
  gint64 i; /* V_BOOL, V_INT; V_STORAGE: the storage index; V_TENSOR: the tensor */
  char *s;  /* V_STR (NUL-terminated, may hold NULs: len) */
  gsize len;
  Value **items; /* V_TUPLE, V_LIST, V_DICT */
  guint n, cap;
  const CohortTorchGlobal *global; /* V_GLOBAL */
};

typedef struct {
  const guint8 *p, *end, *start;
  GPtrArray *values; /* every value, freed at the end */
  gsize items;       /* container slots in use */
  GPtrArray *stack;
  GPtrArray *marks;         /* of GPtrArray: the stacks under each MARK */
  gsize stacked;            /* values on every stack */
  GHashTable *memo;         /* index → Value */
  GHashTable *storage_keys; /* key → index + 1 */
  CohortTorchPickle *out;
  GArray *tensors; /* of CohortTorchTensor (names unset) */
  GError **error;
  guint8 op;
  gsize op_at;
} Machine;

static gboolean bad(Machine *m, CohortTorchPickleError code, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

static gboolean bad(Machine *m, CohortTorchPickleError code, const char *fmt, ...)
{
  if (m->error && *m->error)
    return FALSE;
  va_list ap;
  va_start(ap, fmt);
  g_autofree char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(m->error, COHORT_TORCH_PICKLE_ERROR, code, "data.pkl, byte %zu: %s", m->op_at, msg);
  return FALSE;
}

static void value_free(gpointer p)
{
  Value *v = p;
  g_free(v->s);
  g_free(v->items);
  g_free(v);
}

static Value *new_value(Machine *m, Kind kind)
{
  if (m->values->len >= MAX_VALUES) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "more than %d values; allowed: a state dict's few",
        MAX_VALUES);
    return NULL;
  }
  Value *v = g_new0(Value, 1);
  v->kind = kind;
  g_ptr_array_add(m->values, v);
  return v;
}

/* Adds `item` to container `c`, keeping the caps on slots and depth. */
static gboolean add_item(Machine *m, Value *c, Value *item)
{
  if (m->items >= MAX_ITEMS)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "more than %d container items", MAX_ITEMS);
  if (item->depth + 1 > MAX_DEPTH)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "containers nested deeper than %d", MAX_DEPTH);
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 4;
    c->items = g_renew(Value *, c->items, c->cap);
  }
  c->items[c->n++] = item;
  m->items++;
  c->depth = MAX(c->depth, item->depth + 1);
  return TRUE;
}

static gboolean push(Machine *m, Value *v)
{
  if (!v)
    return FALSE;
  if (m->stacked >= MAX_STACK)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a stack deeper than %d", MAX_STACK);
  g_ptr_array_add(m->stack, v);
  m->stacked++;
  return TRUE;
}

static Value *pop(Machine *m)
{
  if (m->stack->len == 0) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "pops an empty stack");
    return NULL;
  }
  m->stacked--;
  return g_ptr_array_steal_index(m->stack, m->stack->len - 1);
}

static Value *top(Machine *m)
{
  if (m->stack->len == 0) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "reads an empty stack");
    return NULL;
  }
  return g_ptr_array_index(m->stack, m->stack->len - 1);
}

/* The values pushed since the last MARK, which is removed (Python's pop_mark). */
static GPtrArray *pop_mark(Machine *m)
{
  if (m->marks->len == 0) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "no MARK to go back to");
    return NULL;
  }
  GPtrArray *items = m->stack;
  m->stack = g_ptr_array_steal_index(m->marks, m->marks->len - 1);
  m->stacked -= items->len;
  return items;
}

static gboolean need(Machine *m, gsize n)
{
  if ((gsize)(m->end - m->p) < n)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "truncated (the pickle ends inside an opcode)");
  return TRUE;
}

static guint32 rd_le32(const guint8 *p)
{
  return (guint32)p[0] | (guint32)p[1] << 8 | (guint32)p[2] << 16 | (guint32)p[3] << 24;
}

static Value *int_value(Machine *m, gint64 i)
{
  Value *v = new_value(m, V_INT);
  if (v)
    v->i = i;
  return v;
}

static Value *str_value(Machine *m, const guint8 *p, gsize n, gboolean utf8)
{
  if (n > MAX_STRING) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a string of %zu bytes; allowed: up to %zu", n,
        MAX_STRING);
    return NULL;
  }
  if (utf8 && !g_utf8_validate((const char *)p, (gssize)n, NULL)) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a BINUNICODE string that is not UTF-8");
    return NULL;
  }
  Value *v = new_value(m, V_STR);
  if (v) {
    v->s = g_strndup((const char *)p, n);
    v->len = n;
  }
  return v;
}

static gboolean is_str(const Value *v, const char *s)
{
  return v->kind == V_STR && v->len == strlen(s) && memcmp(v->s, s, v->len) == 0;
}

/* ---- the opcodes with meaning beyond the stack ---- */

/* GLOBAL: "module\nname\n", looked up in the allowlist; nothing is imported. */
static gboolean op_global(Machine *m)
{
  char parts[2][MAX_GLOBAL + 1];
  for (int k = 0; k < 2; k++) {
    const guint8 *nl = memchr(m->p, '\n', MIN((gsize)(m->end - m->p), (gsize)MAX_GLOBAL + 1));
    if (!nl)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "GLOBAL without a line end within %d bytes",
                 MAX_GLOBAL);
    gsize n = (gsize)(nl - m->p);
    memcpy(parts[k], m->p, n);
    parts[k][n] = '\0';
    m->p = nl + 1;
  }
  g_autofree char *full = g_strdup_printf("%s.%s", parts[0], parts[1]);
  if (!g_utf8_validate(full, -1, NULL))
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED, "a GLOBAL whose name is not text");
  const CohortTorchGlobal *g = cohort_torch_allowlist_find(full);
  if (!g)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
               "global \"%s\" is not allowed (torch.load(weights_only=True) refuses it too): a "
               "weights file holds tensors, storages and plain containers only",
               full);
  Value *v = new_value(m, V_GLOBAL);
  if (!v)
    return FALSE;
  v->global = g;
  return push(m, v);
}

static gboolean int_of(const Value *v, gint64 *out)
{
  if (v->kind != V_INT && v->kind != V_BOOL)
    return FALSE;
  *out = v->i;
  return TRUE;
}

/* A tuple of up to COHORT_TORCH_MAX_DIMS non-negative integers (sizes or strides). */
static gboolean dims_of(Machine *m, const Value *t, gint64 *dims, int *ndim, const char *what)
{
  if (t->kind != V_TUPLE || t->n > COHORT_TORCH_MAX_DIMS)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
               "a tensor's %s is not a tuple of at most %d integers", what, COHORT_TORCH_MAX_DIMS);
  for (guint i = 0; i < t->n; i++)
    if (!int_of(t->items[i], &dims[i]) || dims[i] < 0 || dims[i] > ((gint64)1 << 48))
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a tensor's %s holds %s", what,
                 "a value that is not an integer from 0 to 2^48");
  *ndim = (int)t->n;
  return TRUE;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) and
 * _rebuild_tensor(storage, offset, size, stride): a strided view, checked to lie inside the
 * storage. */
static Value *rebuild_tensor(Machine *m, const Value *args, gboolean v2)
{
  guint want = v2 ? 6 : 4;
  if (args->n < want || args->n > want + (v2 ? 1 : 0)) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "_rebuild_tensor%s with %u arguments", v2 ? "_v2" : "",
        args->n);
    return NULL;
  }
  const Value *st = args->items[0];
  CohortTorchTensor t = {0};
  int nd_stride;
  if (st->kind != V_STORAGE || !int_of(args->items[1], &t.offset) || t.offset < 0 ||
      !dims_of(m, args->items[2], t.shape, &t.ndim, "size") ||
      !dims_of(m, args->items[3], t.stride, &nd_stride, "stride") || nd_stride != t.ndim) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
        "_rebuild_tensor's arguments are not (storage, offset, size, stride)");
    return NULL;
  }
  t.storage = (guint)st->i;
  const CohortTorchStorage *s = &g_array_index(m->out->storages, CohortTorchStorage, t.storage);
  /* The last element the view reaches, in 128 bits' worth of care: every term is below 2^96. */
  guint64 numel = 1, last = (guint64)t.offset;
  for (int d = 0; d < t.ndim; d++) {
    if (t.shape[d] == 0)
      numel = 0;
    else
      last += (guint64)(t.shape[d] - 1) * (guint64)t.stride[d];
  }
  if (numel != 0 && last >= s->numel) {
    bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
        "a tensor view reaches element %" G_GUINT64_FORMAT
        " of storage \"%s\", which holds %" G_GUINT64_FORMAT,
        last, s->key, s->numel);
    return NULL;
  }
  Value *v = new_value(m, V_TENSOR);
  if (!v)
    return NULL;
  v->i = m->tensors->len;
  g_array_append_val(m->tensors, t);
  return v;
}

/* REDUCE: the allowlist's callables that a state dict uses, interpreted. */
static gboolean op_reduce(Machine *m)
{
  Value *args = pop(m), *fn = args ? top(m) : NULL, *out = NULL;
  if (!fn)
    return FALSE;
  if (args->kind != V_TUPLE)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "REDUCE with arguments that are not a tuple");
  if (fn->kind != V_GLOBAL)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED, "REDUCE calls a %s, not an allowed global",
               kind_names[fn->kind]);
  switch (fn->global->kind) {
  case COHORT_TORCH_ORDERED_DICT:
    if (args->n != 0)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "OrderedDict() with arguments");
    out = new_value(m, V_DICT);
    break;
  case COHORT_TORCH_SIZE:
    if (args->n != 1 || args->items[0]->kind != V_TUPLE)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "torch.Size() of something not a tuple");
    out = args->items[0];
    break;
  case COHORT_TORCH_REBUILD_V2:
  case COHORT_TORCH_REBUILD:
    out = rebuild_tensor(m, args, fn->global->kind == COHORT_TORCH_REBUILD_V2);
    break;
  case COHORT_TORCH_REBUILD_PARAMETER:
    if (args->n < 1 || args->items[0]->kind != V_TENSOR)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "_rebuild_parameter of a non-tensor");
    out = args->items[0];
    break;
  case COHORT_TORCH_LAYOUT_FN:
    out = new_value(m, V_LAYOUT);
    break;
  default:
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
               "REDUCE of \"%s\": torch.load(weights_only=True) allows it, but it builds no "
               "dense tensor (sparse, meta or quantized); Cohort reads dense weights only",
               fn->global->name);
  }
  if (!out)
    return FALSE;
  g_ptr_array_index(m->stack, m->stack->len - 1) = out;
  return TRUE;
}

/* BINPERSID: ("storage", storage class, key, location, numel), as torch.save writes. */
static gboolean op_persid(Machine *m)
{
  Value *pid = pop(m);
  if (!pid)
    return FALSE;
  if (pid->kind != V_TUPLE || pid->n == 0 || !is_str(pid->items[0], "storage"))
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
               "a persistent id that is not a storage (only storages may be loaded)");
  gint64 numel;
  if (pid->n != 5 || pid->items[1]->kind != V_GLOBAL ||
      pid->items[1]->global->kind != COHORT_TORCH_STORAGE || pid->items[2]->kind != V_STR ||
      pid->items[3]->kind != V_STR || !int_of(pid->items[4], &numel) || numel < 0)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
               "a storage id that is not (\"storage\", storage class, key, location, size)");
  const Value *key = pid->items[2];
  if (key->len == 0 || key->len > 64 || strlen(key->s) != key->len || strchr(key->s, '/'))
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a storage key that is not a short name");
  const CohortTorchGlobal *type = pid->items[1]->global;
  guint idx = GPOINTER_TO_UINT(g_hash_table_lookup(m->storage_keys, key->s));
  if (idx == 0) {
    CohortTorchStorage s = {.key = g_strdup(key->s),
                            .type_name = g_strdup(pid->items[1]->global->name),
                            .dtype = type->dtype,
                            .numel = (guint64)numel};
    g_array_append_val(m->out->storages, s);
    idx = m->out->storages->len;
    g_hash_table_insert(m->storage_keys, s.key, GUINT_TO_POINTER(idx));
  } else {
    const CohortTorchStorage *s = &g_array_index(m->out->storages, CohortTorchStorage, idx - 1);
    if (s->dtype != type->dtype || s->numel != (guint64)numel)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                 "storage \"%s\" is named twice with different types or sizes", s->key);
  }
  Value *v = new_value(m, V_STORAGE);
  if (!v)
    return FALSE;
  v->i = idx - 1;
  return push(m, v);
}

/* BUILD: PyTorch builds tensors, parameters and ordered dicts only. An ordered dict's state is
 * its attributes (a state dict's _metadata), which weights do not need. */
static gboolean op_build(Machine *m)
{
  Value *state = pop(m), *inst = state ? top(m) : NULL;
  if (!inst)
    return FALSE;
  if (inst->kind == V_DICT && (state->kind == V_DICT || state->kind == V_NONE))
    return TRUE;
  return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
             "BUILD of a %s with a %s; allowed: the attributes of an ordered dict (a tensor "
             "rebuilt by BUILD is PyTorch's legacy pickling, which Cohort does not read)",
             kind_names[inst->kind], kind_names[state->kind]);
}

/* NEWOBJ: only torch.nn.Parameter(tensor[, requires_grad]). */
static gboolean op_newobj(Machine *m)
{
  Value *args = pop(m), *cls = args ? pop(m) : NULL;
  if (!cls)
    return FALSE;
  if (cls->kind != V_GLOBAL || cls->global->kind != COHORT_TORCH_PARAMETER)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
               "NEWOBJ of \"%s\"; allowed: torch.nn.parameter.Parameter",
               cls->kind == V_GLOBAL ? cls->global->name : kind_names[cls->kind]);
  if (args->kind != V_TUPLE || args->n < 1 || args->items[0]->kind != V_TENSOR)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "Parameter() of something not a tensor");
  return push(m, args->items[0]);
}

static gboolean set_items(Machine *m, Value *dict, Value **kv, guint n)
{
  if (dict->kind != V_DICT)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED, "SETITEM on a %s; allowed: a dict",
               kind_names[dict->kind]);
  if (n % 2)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "SETITEMS with an odd number of values");
  for (guint i = 0; i < n; i += 2) {
    if (kv[i]->kind != V_STR && kv[i]->kind != V_INT)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a dict key that is a %s",
                 kind_names[kv[i]->kind]);
    if (!add_item(m, dict, kv[i]) || !add_item(m, dict, kv[i + 1]))
      return FALSE;
  }
  return TRUE;
}

static gboolean append_items(Machine *m, Value *list, Value **items, guint n)
{
  if (list->kind != V_LIST)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED, "APPEND to a %s; allowed: a list",
               kind_names[list->kind]);
  for (guint i = 0; i < n; i++)
    if (!add_item(m, list, items[i]))
      return FALSE;
  return TRUE;
}

static Value *tuple_of(Machine *m, Value **items, guint n)
{
  Value *t = new_value(m, V_TUPLE);
  for (guint i = 0; t && i < n; i++)
    if (!add_item(m, t, items[i]))
      return NULL;
  return t;
}

/* ---- the interpreter ---- */

static const struct {
  guint8 op;
  const char *name;
} op_names[] = {
    {'(', "MARK"},
    {'.', "STOP"},
    {'0', "POP"},
    {'1', "POP_MARK"},
    {'2', "DUP"},
    {'F', "FLOAT"},
    {'I', "INT"},
    {'J', "BININT"},
    {'K', "BININT1"},
    {'L', "LONG"},
    {'M', "BININT2"},
    {'N', "NONE"},
    {'P', "PERSID"},
    {'Q', "BINPERSID"},
    {'R', "REDUCE"},
    {'S', "STRING"},
    {'T', "BINSTRING"},
    {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"},
    {'X', "BINUNICODE"},
    {'a', "APPEND"},
    {'b', "BUILD"},
    {'c', "GLOBAL"},
    {'d', "DICT"},
    {'}', "EMPTY_DICT"},
    {'e', "APPENDS"},
    {'g', "GET"},
    {'h', "BINGET"},
    {'i', "INST"},
    {'j', "LONG_BINGET"},
    {'l', "LIST"},
    {']', "EMPTY_LIST"},
    {'o', "OBJ"},
    {'p', "PUT"},
    {'q', "BINPUT"},
    {'r', "LONG_BINPUT"},
    {'s', "SETITEM"},
    {'t', "TUPLE"},
    {')', "EMPTY_TUPLE"},
    {'u', "SETITEMS"},
    {'G', "BINFLOAT"},
    {0x80, "PROTO"},
    {0x81, "NEWOBJ"},
    {0x82, "EXT1"},
    {0x83, "EXT2"},
    {0x84, "EXT4"},
    {0x85, "TUPLE1"},
    {0x86, "TUPLE2"},
    {0x87, "TUPLE3"},
    {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"},
    {0x8a, "LONG1"},
    {0x8b, "LONG4"},
    {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"},
    {0x8c, "SHORT_BINUNICODE"},
    {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"},
    {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"},
    {0x91, "FROZENSET"},
    {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"},
    {0x94, "MEMOIZE"},
    {0x95, "FRAME"},
    {0x96, "BYTEARRAY8"},
    {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};

static gboolean refuse_op(Machine *m)
{
  for (guint i = 0; i < G_N_ELEMENTS(op_names); i++)
    if (op_names[i].op == m->op)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
                 "opcode %s (0x%02x) is not allowed (torch.load(weights_only=True) refuses it "
                 "too)",
                 op_names[i].name, m->op);
  return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "byte 0x%02x is not a pickle opcode", m->op);
}

static gboolean op_memo(Machine *m, gboolean put, gsize width)
{
  if (!need(m, width))
    return FALSE;
  guint32 idx = width == 1 ? m->p[0] : rd_le32(m->p);
  m->p += width;
  if (put) {
    Value *v = top(m);
    if (!v)
      return FALSE;
    if (!g_hash_table_contains(m->memo, GUINT_TO_POINTER(idx)) &&
        g_hash_table_size(m->memo) >= MAX_MEMO)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "more than %d memo entries", MAX_MEMO);
    g_hash_table_insert(m->memo, GUINT_TO_POINTER(idx), v);
    return TRUE;
  }
  Value *v = g_hash_table_lookup(m->memo, GUINT_TO_POINTER(idx));
  if (!v)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "memo entry %u was never stored", idx);
  return push(m, v);
}

static gboolean op_long1(Machine *m)
{
  if (!need(m, 1) || !need(m, 1 + (gsize)m->p[0]))
    return FALSE;
  guint n = m->p[0];
  const guint8 *b = m->p + 1;
  m->p += 1 + n;
  if (n > 8)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "an integer of %u bytes; allowed: up to 8", n);
  guint64 u = 0;
  for (guint i = 0; i < n; i++)
    u |= (guint64)b[i] << (8 * i);
  if (n > 0 && n < 8 && (b[n - 1] & 0x80)) /* sign-extend */
    u |= ~(guint64)0 << (8 * n);
  return push(m, int_value(m, (gint64)u));
}

static gboolean op_tuple_n(Machine *m, guint n)
{
  if (m->stack->len < n)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "TUPLE%u on a stack of %u", n, m->stack->len);
  Value **items = (Value **)m->stack->pdata + m->stack->len - n;
  Value *t = tuple_of(m, items, n);
  if (!t)
    return FALSE;
  g_ptr_array_set_size(m->stack, m->stack->len - n);
  m->stacked -= n;
  return push(m, t);
}

/* One opcode; *done at STOP. */
static gboolean step(Machine *m, Value **root)
{
  m->op_at = (gsize)(m->p - m->start);
  if (!need(m, 1))
    return FALSE;
  m->op = *m->p++;
  switch (m->op) {
  case 0x80: /* PROTO */
    return need(m, 1) && (m->p++, TRUE);
  case 'c':
    return op_global(m);
  case 0x81:
    return op_newobj(m);
  case 'R':
    return op_reduce(m);
  case 'b':
    return op_build(m);
  case 'Q':
    return op_persid(m);
  case 'a': {
    Value *item = pop(m), *list = item ? top(m) : NULL;
    return list && append_items(m, list, &item, 1);
  }
  case 's': {
    Value *kv[2];
    kv[1] = pop(m);
    kv[0] = kv[1] ? pop(m) : NULL;
    Value *dict = kv[0] ? top(m) : NULL;
    return dict && set_items(m, dict, kv, 2);
  }
  case 'e':
  case 'u':
  case 't': {
    g_autoptr(GPtrArray) items = pop_mark(m);
    if (!items)
      return FALSE;
    if (m->op == 't')
      return push(m, tuple_of(m, (Value **)items->pdata, items->len));
    Value *c = top(m);
    if (!c)
      return FALSE;
    return m->op == 'e' ? append_items(m, c, (Value **)items->pdata, items->len)
                        : set_items(m, c, (Value **)items->pdata, items->len);
  }
  case '(':
    if (m->marks->len >= MAX_MARKS)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "MARKs nested deeper than %d", MAX_MARKS);
    g_ptr_array_add(m->marks, m->stack);
    m->stack = g_ptr_array_new();
    return TRUE;
  case 0x85:
  case 0x86:
  case 0x87:
    return op_tuple_n(m, m->op - 0x84);
  case 'N':
    return push(m, new_value(m, V_NONE));
  case 0x88:
  case 0x89: {
    Value *v = new_value(m, V_BOOL);
    if (v)
      v->i = m->op == 0x88;
    return push(m, v);
  }
  case ')':
    return push(m, new_value(m, V_TUPLE));
  case ']':
    return push(m, new_value(m, V_LIST));
  case '}':
    return push(m, new_value(m, V_DICT));
  case 0x8f:
    return push(m, new_value(m, V_SET));
  case 'J':
    if (!need(m, 4))
      return FALSE;
    m->p += 4;
    return push(m, int_value(m, (gint32)rd_le32(m->p - 4)));
  case 'K':
    return need(m, 1) && push(m, int_value(m, *m->p++));
  case 'M':
    if (!need(m, 2))
      return FALSE;
    m->p += 2;
    return push(m, int_value(m, m->p[-2] | m->p[-1] << 8));
  case 'X':
  case 'U': {
    gsize w = m->op == 'X' ? 4 : 1;
    if (!need(m, w))
      return FALSE;
    gsize n = w == 4 ? rd_le32(m->p) : m->p[0];
    m->p += w;
    if (!need(m, n))
      return FALSE;
    m->p += n;
    return push(m, str_value(m, m->p - n, n, m->op == 'X'));
  }
  case 'h':
  case 'j':
    return op_memo(m, FALSE, m->op == 'h' ? 1 : 4);
  case 'q':
  case 'r':
    return op_memo(m, TRUE, m->op == 'q' ? 1 : 4);
  case 0x8a:
    return op_long1(m);
  case '.':
    *root = pop(m);
    return *root != NULL;
  default:
    return refuse_op(m);
  }
}

/* ---- the state dict ---- */

/* The dict's entries as named tensors, in order; a later entry of the same name replaces an
 * earlier one in its place, as a Python dict does. */
static gboolean collect(Machine *m, const Value *dict, const char *path)
{
  g_autoptr(GHashTable) seen = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < dict->n; i += 2) {
    const Value *k = dict->items[i], *v = dict->items[i + 1];
    if (k->kind != V_STR || strlen(k->s) != k->len)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "%s has a key that is not a name",
                 *path ? path : "the state dict");
    if (v->kind != V_TENSOR)
      return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "entry \"%s\" of %s is a %s, not a tensor",
                 k->s, *path ? path : "the state dict", kind_names[v->kind]);
    CohortTorchTensor t = g_array_index(m->tensors, CohortTorchTensor, v->i);
    gpointer at;
    if (g_hash_table_lookup_extended(seen, k->s, NULL, &at)) {
      CohortTorchTensor *old =
          &g_array_index(m->out->tensors, CohortTorchTensor, GPOINTER_TO_UINT(at));
      t.name = old->name;
      *old = t;
      continue;
    }
    t.name = g_strdup(k->s);
    g_hash_table_insert(seen, t.name, GUINT_TO_POINTER(m->out->tensors->len));
    g_array_append_val(m->out->tensors, t);
  }
  return TRUE;
}

static gboolean all_tensors(const Value *dict)
{
  for (guint i = 1; i < dict->n; i += 2)
    if (dict->items[i]->kind != V_TENSOR)
      return FALSE;
  return TRUE;
}

static gboolean find_state_dict(Machine *m, const Value *root)
{
  if (root->kind != V_DICT)
    return bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
               "the file holds a %s, not a state dict (save model.state_dict(), not the model)",
               kind_names[root->kind]);
  if (all_tensors(root)) {
    m->out->dict_path = g_strdup("");
    return collect(m, root, "");
  }
  const char *nested[] = {"state_dict", "model"};
  for (guint j = 0; j < G_N_ELEMENTS(nested); j++)
    for (guint i = 0; i < root->n; i += 2)
      if (is_str(root->items[i], nested[j]) && root->items[i + 1]->kind == V_DICT) {
        m->out->dict_path = g_strdup(nested[j]);
        return collect(m, root->items[i + 1], nested[j]);
      }
  return collect(m, root, ""); /* names the first entry that is not a tensor */
}

static void storage_clear(gpointer p)
{
  CohortTorchStorage *s = p;
  g_free(s->key);
  g_free(s->type_name);
}

static void tensor_clear(gpointer p)
{
  g_free(((CohortTorchTensor *)p)->name);
}

void cohort_torch_pickle_free(CohortTorchPickle *p)
{
  if (!p)
    return;
  if (p->storages)
    g_array_free(p->storages, TRUE);
  if (p->tensors)
    g_array_free(p->tensors, TRUE);
  g_free(p->dict_path);
  g_free(p);
}

static void free_stack(gpointer p)
{
  g_ptr_array_free(p, TRUE);
}

CohortTorchPickle *cohort_torch_pickle_load(const guint8 *data, gsize len, GError **error)
{
  if (len > MAX_PICKLE) {
    g_set_error(error, COHORT_TORCH_PICKLE_ERROR, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                "data.pkl is %zu bytes; allowed: up to %zu", len, MAX_PICKLE);
    return NULL;
  }
  g_autoptr(CohortTorchPickle) out = g_new0(CohortTorchPickle, 1);
  out->storages = g_array_new(FALSE, TRUE, sizeof(CohortTorchStorage));
  g_array_set_clear_func(out->storages, storage_clear);
  out->tensors = g_array_new(FALSE, TRUE, sizeof(CohortTorchTensor));
  g_array_set_clear_func(out->tensors, tensor_clear);
  Machine m = {.p = data,
               .start = data,
               .end = data + len,
               .values = g_ptr_array_new_with_free_func(value_free),
               .stack = g_ptr_array_new(),
               .marks = g_ptr_array_new_with_free_func(free_stack),
               .memo = g_hash_table_new(g_direct_hash, g_direct_equal),
               .storage_keys = g_hash_table_new(g_str_hash, g_str_equal),
               .out = out,
               .tensors = g_array_new(FALSE, TRUE, sizeof(CohortTorchTensor)),
               .error = error};
  Value *root = NULL;
  gboolean ok = TRUE;
  while (ok && !root)
    ok = step(&m, &root);
  ok = ok && find_state_dict(&m, root);
  g_ptr_array_free(m.stack, TRUE);
  g_ptr_array_free(m.marks, TRUE);
  g_hash_table_destroy(m.memo);
  g_hash_table_destroy(m.storage_keys);
  g_array_free(m.tensors, TRUE);
  g_ptr_array_free(m.values, TRUE);
  return ok ? g_steal_pointer(&out) : NULL;
}
