/* Internal to the unpickler (torch-pickle.c: values, the stack, the interpreter, the state
 * dict; torch-pickle-ops.c: the opcodes that build tensors and containers). */
#pragma once

#include "engine/model/torch-allowlist.h"
#include "engine/model/torch-pickle.h"

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

extern const char *const cohort_tpk_kind_names[];

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

/* torch-pickle.c */
gboolean cohort_tpk_bad(Machine *m, CohortTorchPickleError code, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
Value *cohort_tpk_new_value(Machine *m, Kind kind);
/* Adds `item` to container `c`, keeping the caps on slots and depth. */
gboolean cohort_tpk_add_item(Machine *m, Value *c, Value *item);
gboolean cohort_tpk_push(Machine *m, Value *v);
Value *cohort_tpk_pop(Machine *m);
Value *cohort_tpk_top(Machine *m);
Value *cohort_tpk_int_value(Machine *m, gint64 i);
gboolean cohort_tpk_is_str(const Value *v, const char *s);

/* torch-pickle-ops.c: GLOBAL, REDUCE, BINPERSID, BUILD, NEWOBJ and the container ops */
gboolean cohort_tpk_op_global(Machine *m);
gboolean cohort_tpk_op_reduce(Machine *m);
gboolean cohort_tpk_op_persid(Machine *m);
gboolean cohort_tpk_op_build(Machine *m);
gboolean cohort_tpk_op_newobj(Machine *m);
gboolean cohort_tpk_set_items(Machine *m, Value *dict, Value **kv, guint n);
gboolean cohort_tpk_append_items(Machine *m, Value *list, Value **items, guint n);
Value *cohort_tpk_tuple_of(Machine *m, Value **items, guint n);
