/* The restricted unpickler (torch-pickle.h): PyTorch 1.13's weights-only opcode set and
 * allowlist, interpreted as data. */
#include "engine/model/torch-pickle-private.h"

#include <string.h>

const char *const cohort_tpk_kind_names[] = {"None",   "bool",    "int",    "str",
                                             "tuple",  "list",    "dict",   "set",
                                             "global", "storage", "tensor", "layout"};

/* clang-format off */
G_DEFINE_QUARK(cohort-torch-pickle-error-quark, cohort_torch_pickle_error)
/* clang-format on */

gboolean cohort_tpk_bad(Machine *m, CohortTorchPickleError code, const char *fmt, ...)
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

Value *cohort_tpk_new_value(Machine *m, Kind kind)
{
  if (m->values->len >= MAX_VALUES) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                   "more than %d values; allowed: a state dict's few", MAX_VALUES);
    return NULL;
  }
  Value *v = g_new0(Value, 1);
  v->kind = kind;
  g_ptr_array_add(m->values, v);
  return v;
}

/* Adds `item` to container `c`, keeping the caps on slots and depth. */
gboolean cohort_tpk_add_item(Machine *m, Value *c, Value *item)
{
  if (m->items >= MAX_ITEMS)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "more than %d container items",
                          MAX_ITEMS);
  if (item->depth + 1 > MAX_DEPTH)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "containers nested deeper than %d",
                          MAX_DEPTH);
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 4;
    c->items = g_renew(Value *, c->items, c->cap);
  }
  c->items[c->n++] = item;
  m->items++;
  c->depth = MAX(c->depth, item->depth + 1);
  return TRUE;
}

gboolean cohort_tpk_push(Machine *m, Value *v)
{
  if (!v)
    return FALSE;
  if (m->stacked >= MAX_STACK)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a stack deeper than %d", MAX_STACK);
  g_ptr_array_add(m->stack, v);
  m->stacked++;
  return TRUE;
}

Value *cohort_tpk_pop(Machine *m)
{
  if (m->stack->len == 0) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "pops an empty stack");
    return NULL;
  }
  m->stacked--;
  return g_ptr_array_steal_index(m->stack, m->stack->len - 1);
}

Value *cohort_tpk_top(Machine *m)
{
  if (m->stack->len == 0) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "reads an empty stack");
    return NULL;
  }
  return g_ptr_array_index(m->stack, m->stack->len - 1);
}

/* The values pushed since the last MARK, which is removed (Python's pop_mark). */
static GPtrArray *pop_mark(Machine *m)
{
  if (m->marks->len == 0) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "no MARK to go back to");
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
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                          "truncated (the pickle ends inside an opcode)");
  return TRUE;
}

static guint32 rd_le32(const guint8 *p)
{
  return (guint32)p[0] | (guint32)p[1] << 8 | (guint32)p[2] << 16 | (guint32)p[3] << 24;
}

Value *cohort_tpk_int_value(Machine *m, gint64 i)
{
  Value *v = cohort_tpk_new_value(m, V_INT);
  if (v)
    v->i = i;
  return v;
}

static Value *str_value(Machine *m, const guint8 *p, gsize n, gboolean utf8)
{
  if (n > MAX_STRING) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a string of %zu bytes; allowed: up to %zu",
                   n, MAX_STRING);
    return NULL;
  }
  if (utf8 && !g_utf8_validate((const char *)p, (gssize)n, NULL)) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a BINUNICODE string that is not UTF-8");
    return NULL;
  }
  Value *v = cohort_tpk_new_value(m, V_STR);
  if (v) {
    v->s = g_strndup((const char *)p, n);
    v->len = n;
  }
  return v;
}

gboolean cohort_tpk_is_str(const Value *v, const char *s)
{
  return v->kind == V_STR && v->len == strlen(s) && memcmp(v->s, s, v->len) == 0;
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
      return cohort_tpk_bad(
          m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
          "opcode %s (0x%02x) is not allowed (torch.load(weights_only=True) refuses it "
          "too)",
          op_names[i].name, m->op);
  return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "byte 0x%02x is not a pickle opcode",
                        m->op);
}

static gboolean op_memo(Machine *m, gboolean put, gsize width)
{
  if (!need(m, width))
    return FALSE;
  guint32 idx = width == 1 ? m->p[0] : rd_le32(m->p);
  m->p += width;
  if (put) {
    Value *v = cohort_tpk_top(m);
    if (!v)
      return FALSE;
    if (!g_hash_table_contains(m->memo, GUINT_TO_POINTER(idx)) &&
        g_hash_table_size(m->memo) >= MAX_MEMO)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "more than %d memo entries",
                            MAX_MEMO);
    g_hash_table_insert(m->memo, GUINT_TO_POINTER(idx), v);
    return TRUE;
  }
  Value *v = g_hash_table_lookup(m->memo, GUINT_TO_POINTER(idx));
  if (!v)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "memo entry %u was never stored",
                          idx);
  return cohort_tpk_push(m, v);
}

static gboolean op_long1(Machine *m)
{
  if (!need(m, 1) || !need(m, 1 + (gsize)m->p[0]))
    return FALSE;
  guint n = m->p[0];
  const guint8 *b = m->p + 1;
  m->p += 1 + n;
  if (n > 8)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                          "an integer of %u bytes; allowed: up to 8", n);
  guint64 u = 0;
  for (guint i = 0; i < n; i++)
    u |= (guint64)b[i] << (8 * i);
  if (n > 0 && n < 8 && (b[n - 1] & 0x80)) /* sign-extend */
    u |= ~(guint64)0 << (8 * n);
  return cohort_tpk_push(m, cohort_tpk_int_value(m, (gint64)u));
}

static gboolean op_tuple_n(Machine *m, guint n)
{
  if (m->stack->len < n)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "TUPLE%u on a stack of %u", n,
                          m->stack->len);
  Value **items = (Value **)m->stack->pdata + m->stack->len - n;
  Value *t = cohort_tpk_tuple_of(m, items, n);
  if (!t)
    return FALSE;
  g_ptr_array_set_size(m->stack, m->stack->len - n);
  m->stacked -= n;
  return cohort_tpk_push(m, t);
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
    return cohort_tpk_op_global(m);
  case 0x81:
    return cohort_tpk_op_newobj(m);
  case 'R':
    return cohort_tpk_op_reduce(m);
  case 'b':
    return cohort_tpk_op_build(m);
  case 'Q':
    return cohort_tpk_op_persid(m);
  case 'a': {
    Value *item = cohort_tpk_pop(m), *list = item ? cohort_tpk_top(m) : NULL;
    return list && cohort_tpk_append_items(m, list, &item, 1);
  }
  case 's': {
    Value *kv[2];
    kv[1] = cohort_tpk_pop(m);
    kv[0] = kv[1] ? cohort_tpk_pop(m) : NULL;
    Value *dict = kv[0] ? cohort_tpk_top(m) : NULL;
    return dict && cohort_tpk_set_items(m, dict, kv, 2);
  }
  case 'e':
  case 'u':
  case 't': {
    g_autoptr(GPtrArray) items = pop_mark(m);
    if (!items)
      return FALSE;
    if (m->op == 't')
      return cohort_tpk_push(m, cohort_tpk_tuple_of(m, (Value **)items->pdata, items->len));
    Value *c = cohort_tpk_top(m);
    if (!c)
      return FALSE;
    return m->op == 'e' ? cohort_tpk_append_items(m, c, (Value **)items->pdata, items->len)
                        : cohort_tpk_set_items(m, c, (Value **)items->pdata, items->len);
  }
  case '(':
    if (m->marks->len >= MAX_MARKS)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "MARKs nested deeper than %d",
                            MAX_MARKS);
    g_ptr_array_add(m->marks, m->stack);
    m->stack = g_ptr_array_new();
    return TRUE;
  case 0x85:
  case 0x86:
  case 0x87:
    return op_tuple_n(m, m->op - 0x84);
  case 'N':
    return cohort_tpk_push(m, cohort_tpk_new_value(m, V_NONE));
  case 0x88:
  case 0x89: {
    Value *v = cohort_tpk_new_value(m, V_BOOL);
    if (v)
      v->i = m->op == 0x88;
    return cohort_tpk_push(m, v);
  }
  case ')':
    return cohort_tpk_push(m, cohort_tpk_new_value(m, V_TUPLE));
  case ']':
    return cohort_tpk_push(m, cohort_tpk_new_value(m, V_LIST));
  case '}':
    return cohort_tpk_push(m, cohort_tpk_new_value(m, V_DICT));
  case 0x8f:
    return cohort_tpk_push(m, cohort_tpk_new_value(m, V_SET));
  case 'J':
    if (!need(m, 4))
      return FALSE;
    m->p += 4;
    return cohort_tpk_push(m, cohort_tpk_int_value(m, (gint32)rd_le32(m->p - 4)));
  case 'K':
    return need(m, 1) && cohort_tpk_push(m, cohort_tpk_int_value(m, *m->p++));
  case 'M':
    if (!need(m, 2))
      return FALSE;
    m->p += 2;
    return cohort_tpk_push(m, cohort_tpk_int_value(m, m->p[-2] | m->p[-1] << 8));
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
    return cohort_tpk_push(m, str_value(m, m->p - n, n, m->op == 'X'));
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
    *root = cohort_tpk_pop(m);
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
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "%s has a key that is not a name",
                            *path ? path : "the state dict");
    if (v->kind != V_TENSOR)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                            "entry \"%s\" of %s is a %s, not a tensor", k->s,
                            *path ? path : "the state dict", cohort_tpk_kind_names[v->kind]);
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
    return cohort_tpk_bad(
        m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
        "the file holds a %s, not a state dict (save model.state_dict(), not the model)",
        cohort_tpk_kind_names[root->kind]);
  if (all_tensors(root)) {
    m->out->dict_path = g_strdup("");
    return collect(m, root, "");
  }
  const char *nested[] = {"state_dict", "model"};
  for (guint j = 0; j < G_N_ELEMENTS(nested); j++)
    for (guint i = 0; i < root->n; i += 2)
      if (cohort_tpk_is_str(root->items[i], nested[j]) && root->items[i + 1]->kind == V_DICT) {
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
