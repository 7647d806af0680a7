/* The unpickler's opcodes that build tensors and containers: GLOBAL looked up in the
 * allowlist, REDUCE of the calls a state dict makes read as data, storages named by persistent
 * ids, BUILD and NEWOBJ as far as PyTorch allows them. */
#include "engine/model/torch-pickle-private.h"

#include <string.h>

/* ---- the opcodes with meaning beyond the stack ---- */

/* GLOBAL: "module\nname\n", looked up in the allowlist; nothing is imported. */
gboolean cohort_tpk_op_global(Machine *m)
{
  char parts[2][MAX_GLOBAL + 1];
  for (int k = 0; k < 2; k++) {
    const guint8 *nl = memchr(m->p, '\n', MIN((gsize)(m->end - m->p), (gsize)MAX_GLOBAL + 1));
    if (!nl)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                            "GLOBAL without a line end within %d bytes", MAX_GLOBAL);
    gsize n = (gsize)(nl - m->p);
    memcpy(parts[k], m->p, n);
    parts[k][n] = '\0';
    m->p = nl + 1;
  }
  g_autofree char *full = g_strdup_printf("%s.%s", parts[0], parts[1]);
  if (!g_utf8_validate(full, -1, NULL))
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED, "a GLOBAL whose name is not text");
  const CohortTorchGlobal *g = cohort_torch_allowlist_find(full);
  if (!g)
    return cohort_tpk_bad(
        m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
        "global \"%s\" is not allowed (torch.load(weights_only=True) refuses it too): a "
        "weights file holds tensors, storages and plain containers only",
        full);
  Value *v = cohort_tpk_new_value(m, V_GLOBAL);
  if (!v)
    return FALSE;
  v->global = g;
  return cohort_tpk_push(m, v);
}

static gboolean cohort_tpk_int_of(const Value *v, gint64 *out)
{
  if (v->kind != V_INT && v->kind != V_BOOL)
    return FALSE;
  *out = v->i;
  return TRUE;
}

/* A tuple of up to COHORT_TORCH_MAX_DIMS non-negative integers (sizes or strides). */
static gboolean cohort_tpk_dims_of(Machine *m, const Value *t, gint64 *dims, int *ndim,
                                   const char *what)
{
  if (t->kind != V_TUPLE || t->n > COHORT_TORCH_MAX_DIMS)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                          "a tensor's %s is not a tuple of at most %d integers", what,
                          COHORT_TORCH_MAX_DIMS);
  for (guint i = 0; i < t->n; i++)
    if (!cohort_tpk_int_of(t->items[i], &dims[i]) || dims[i] < 0 || dims[i] > ((gint64)1 << 48))
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a tensor's %s holds %s", what,
                            "a value that is not an integer from 0 to 2^48");
  *ndim = (int)t->n;
  return TRUE;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) and
 * _rebuild_tensor(storage, offset, size, stride): a strided view, checked to lie inside the
 * storage. */
static Value *cohort_tpk_rebuild_tensor(Machine *m, const Value *args, gboolean v2)
{
  guint want = v2 ? 6 : 4;
  if (args->n < want || args->n > want + (v2 ? 1 : 0)) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "_rebuild_tensor%s with %u arguments",
                   v2 ? "_v2" : "", args->n);
    return NULL;
  }
  const Value *st = args->items[0];
  CohortTorchTensor t = {0};
  int nd_stride;
  if (st->kind != V_STORAGE || !cohort_tpk_int_of(args->items[1], &t.offset) || t.offset < 0 ||
      !cohort_tpk_dims_of(m, args->items[2], t.shape, &t.ndim, "size") ||
      !cohort_tpk_dims_of(m, args->items[3], t.stride, &nd_stride, "stride") ||
      nd_stride != t.ndim) {
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
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
    cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                   "a tensor view reaches element %" G_GUINT64_FORMAT
                   " of storage \"%s\", which holds %" G_GUINT64_FORMAT,
                   last, s->key, s->numel);
    return NULL;
  }
  Value *v = cohort_tpk_new_value(m, V_TENSOR);
  if (!v)
    return NULL;
  v->i = m->tensors->len;
  g_array_append_val(m->tensors, t);
  return v;
}

/* REDUCE: the allowlist's callables that a state dict uses, interpreted. */
gboolean cohort_tpk_op_reduce(Machine *m)
{
  Value *args = cohort_tpk_pop(m), *fn = args ? cohort_tpk_top(m) : NULL, *out = NULL;
  if (!fn)
    return FALSE;
  if (args->kind != V_TUPLE)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                          "REDUCE with arguments that are not a tuple");
  if (fn->kind != V_GLOBAL)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
                          "REDUCE calls a %s, not an allowed global",
                          cohort_tpk_kind_names[fn->kind]);
  switch (fn->global->kind) {
  case COHORT_TORCH_ORDERED_DICT:
    if (args->n != 0)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "OrderedDict() with arguments");
    out = cohort_tpk_new_value(m, V_DICT);
    break;
  case COHORT_TORCH_SIZE:
    if (args->n != 1 || args->items[0]->kind != V_TUPLE)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                            "torch.Size() of something not a tuple");
    out = args->items[0];
    break;
  case COHORT_TORCH_REBUILD_V2:
  case COHORT_TORCH_REBUILD:
    out = cohort_tpk_rebuild_tensor(m, args, fn->global->kind == COHORT_TORCH_REBUILD_V2);
    break;
  case COHORT_TORCH_REBUILD_PARAMETER:
    if (args->n < 1 || args->items[0]->kind != V_TENSOR)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                            "_rebuild_parameter of a non-tensor");
    out = args->items[0];
    break;
  case COHORT_TORCH_LAYOUT_FN:
    out = cohort_tpk_new_value(m, V_LAYOUT);
    break;
  default:
    return cohort_tpk_bad(
        m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
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
gboolean cohort_tpk_op_persid(Machine *m)
{
  Value *pid = cohort_tpk_pop(m);
  if (!pid)
    return FALSE;
  if (pid->kind != V_TUPLE || pid->n == 0 || !cohort_tpk_is_str(pid->items[0], "storage"))
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
                          "a persistent id that is not a storage (only storages may be loaded)");
  gint64 numel;
  if (pid->n != 5 || pid->items[1]->kind != V_GLOBAL ||
      pid->items[1]->global->kind != COHORT_TORCH_STORAGE || pid->items[2]->kind != V_STR ||
      pid->items[3]->kind != V_STR || !cohort_tpk_int_of(pid->items[4], &numel) || numel < 0)
    return cohort_tpk_bad(
        m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
        "a storage id that is not (\"storage\", storage class, key, location, size)");
  const Value *key = pid->items[2];
  if (key->len == 0 || key->len > 64 || strlen(key->s) != key->len || strchr(key->s, '/'))
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                          "a storage key that is not a short name");
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
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                            "storage \"%s\" is named twice with different types or sizes", s->key);
  }
  Value *v = cohort_tpk_new_value(m, V_STORAGE);
  if (!v)
    return FALSE;
  v->i = idx - 1;
  return cohort_tpk_push(m, v);
}

/* BUILD: PyTorch builds tensors, parameters and ordered dicts only. An ordered dict's state is
 * its attributes (a state dict's _metadata), which weights do not need. */
gboolean cohort_tpk_op_build(Machine *m)
{
  Value *state = cohort_tpk_pop(m), *inst = state ? cohort_tpk_top(m) : NULL;
  if (!inst)
    return FALSE;
  if (inst->kind == V_DICT && (state->kind == V_DICT || state->kind == V_NONE))
    return TRUE;
  return cohort_tpk_bad(
      m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
      "BUILD of a %s with a %s; allowed: the attributes of an ordered dict (a tensor "
      "rebuilt by BUILD is PyTorch's legacy pickling, which Cohort does not read)",
      cohort_tpk_kind_names[inst->kind], cohort_tpk_kind_names[state->kind]);
}

/* NEWOBJ: only torch.nn.Parameter(tensor[, requires_grad]). */
gboolean cohort_tpk_op_newobj(Machine *m)
{
  Value *args = cohort_tpk_pop(m), *cls = args ? cohort_tpk_pop(m) : NULL;
  if (!cls)
    return FALSE;
  if (cls->kind != V_GLOBAL || cls->global->kind != COHORT_TORCH_PARAMETER)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED,
                          "NEWOBJ of \"%s\"; allowed: torch.nn.parameter.Parameter",
                          cls->kind == V_GLOBAL ? cls->global->name
                                                : cohort_tpk_kind_names[cls->kind]);
  if (args->kind != V_TUPLE || args->n < 1 || args->items[0]->kind != V_TENSOR)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                          "Parameter() of something not a tensor");
  return cohort_tpk_push(m, args->items[0]);
}

gboolean cohort_tpk_set_items(Machine *m, Value *dict, Value **kv, guint n)
{
  if (dict->kind != V_DICT)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED, "SETITEM on a %s; allowed: a dict",
                          cohort_tpk_kind_names[dict->kind]);
  if (n % 2)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT,
                          "SETITEMS with an odd number of values");
  for (guint i = 0; i < n; i += 2) {
    if (kv[i]->kind != V_STR && kv[i]->kind != V_INT)
      return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_FORMAT, "a dict key that is a %s",
                            cohort_tpk_kind_names[kv[i]->kind]);
    if (!cohort_tpk_add_item(m, dict, kv[i]) || !cohort_tpk_add_item(m, dict, kv[i + 1]))
      return FALSE;
  }
  return TRUE;
}

gboolean cohort_tpk_append_items(Machine *m, Value *list, Value **items, guint n)
{
  if (list->kind != V_LIST)
    return cohort_tpk_bad(m, COHORT_TORCH_PICKLE_ERROR_REFUSED, "APPEND to a %s; allowed: a list",
                          cohort_tpk_kind_names[list->kind]);
  for (guint i = 0; i < n; i++)
    if (!cohort_tpk_add_item(m, list, items[i]))
      return FALSE;
  return TRUE;
}

Value *cohort_tpk_tuple_of(Machine *m, Value **items, guint n)
{
  Value *t = cohort_tpk_new_value(m, V_TUPLE);
  for (guint i = 0; t && i < n; i++)
    if (!cohort_tpk_add_item(m, t, items[i]))
      return NULL;
  return t;
}
