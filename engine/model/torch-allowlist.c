/* PyTorch 1.13's weights-only allowlist, as the table torch-allowlist.h describes. The lists of
 * dtypes, tensor classes and storage classes are those of torch 1.13's _get_allowed_globals
 * (its dtypes, torch._tensor_classes and torch._storage_classes); tests/test-torch-file.c
 * compares them with the running PyTorch's. */
#include "engine/model/torch-allowlist.h"

#include <string.h>

static GHashTable *table; /* full name → CohortTorchGlobal */

static void allow(char *name, CohortTorchGlobalKind kind, CohortTorchDtype dtype)
{
  CohortTorchGlobal *g = g_new(CohortTorchGlobal, 1);
  *g = (CohortTorchGlobal){.name = name, .kind = kind, .dtype = dtype};
  g_hash_table_insert(table, name, g);
}

static void allow_storages(void)
{
  static const struct {
    const char *name;
    CohortTorchDtype dtype;
    gboolean cuda; /* also under torch.cuda */
  } storages[] = {
      {"Float", COHORT_TORCH_F32, TRUE},
      {"Double", COHORT_TORCH_F64, TRUE},
      {"Half", COHORT_TORCH_F16, TRUE},
      {"BFloat16", COHORT_TORCH_BF16, TRUE},
      {"Long", COHORT_TORCH_I64, TRUE},
      {"Int", COHORT_TORCH_I32, TRUE},
      {"Short", COHORT_TORCH_I16, TRUE},
      {"Char", COHORT_TORCH_I8, TRUE},
      {"Byte", COHORT_TORCH_U8, TRUE},
      {"Bool", COHORT_TORCH_BOOL, TRUE},
      {"ComplexFloat", COHORT_TORCH_OTHER, TRUE},
      {"ComplexDouble", COHORT_TORCH_OTHER, TRUE},
      {"QInt32", COHORT_TORCH_OTHER, FALSE},
      {"QInt8", COHORT_TORCH_OTHER, FALSE},
      {"QUInt2x4", COHORT_TORCH_OTHER, FALSE},
      {"QUInt4x2", COHORT_TORCH_OTHER, FALSE},
      {"QUInt8", COHORT_TORCH_OTHER, FALSE},
  };
  for (guint i = 0; i < G_N_ELEMENTS(storages); i++) {
    allow(g_strconcat("torch.", storages[i].name, "Storage", NULL), COHORT_TORCH_STORAGE,
          storages[i].dtype);
    if (storages[i].cuda)
      allow(g_strconcat("torch.cuda.", storages[i].name, "Storage", NULL), COHORT_TORCH_STORAGE,
            storages[i].dtype);
  }
  allow(g_strdup("torch.storage.TypedStorage"), COHORT_TORCH_NOT_WEIGHTS, 0);
  allow(g_strdup("torch.storage.UntypedStorage"), COHORT_TORCH_NOT_WEIGHTS, 0);
}

static gpointer build(gpointer unused)
{
  (void)unused;
  table = g_hash_table_new(g_str_hash, g_str_equal);
  allow(g_strdup("collections.OrderedDict"), COHORT_TORCH_ORDERED_DICT, 0);
  allow(g_strdup("torch.nn.parameter.Parameter"), COHORT_TORCH_PARAMETER, 0);
  allow(g_strdup("torch.serialization._get_layout"), COHORT_TORCH_LAYOUT_FN, 0);
  allow(g_strdup("torch.Size"), COHORT_TORCH_SIZE, 0);
  allow(g_strdup("torch.Tensor"), COHORT_TORCH_TYPE_ONLY, 0);
  allow(g_strdup("torch._utils._rebuild_tensor_v2"), COHORT_TORCH_REBUILD_V2, 0);
  allow(g_strdup("torch._utils._rebuild_tensor"), COHORT_TORCH_REBUILD, 0);
  allow(g_strdup("torch._utils._rebuild_parameter"), COHORT_TORCH_REBUILD_PARAMETER, 0);
  allow(g_strdup("torch._utils._rebuild_sparse_tensor"), COHORT_TORCH_NOT_WEIGHTS, 0);
  allow(g_strdup("torch._utils._rebuild_sparse_csr_tensor"), COHORT_TORCH_NOT_WEIGHTS, 0);
  allow(g_strdup("torch._utils._rebuild_meta_tensor_no_storage"), COHORT_TORCH_NOT_WEIGHTS, 0);
  const char *dtypes[] = {"complex32", "complex64", "complex128", "float16", "float32",
                          "float64",   "int8",      "int16",      "int32",   "int64"};
  for (guint i = 0; i < G_N_ELEMENTS(dtypes); i++)
    allow(g_strconcat("torch.", dtypes[i], NULL), COHORT_TORCH_TYPE_ONLY, 0);
  allow_storages();
  const char *tensors[] = {"BFloat16", "Byte", "Char", "Double", "Float",
                           "Half",     "Int",  "Long", "Short",  "Bool"};
  const char *prefixes[] = {"torch.", "torch.cuda.", "torch.sparse.", "torch.cuda.sparse."};
  for (guint p = 0; p < G_N_ELEMENTS(prefixes); p++)
    for (guint i = 0; i < G_N_ELEMENTS(tensors); i++)
      if (p < 2 || strcmp(tensors[i], "Bool") != 0) /* no sparse bool tensor class */
        allow(g_strconcat(prefixes[p], tensors[i], "Tensor", NULL), COHORT_TORCH_TYPE_ONLY, 0);
  return NULL;
}

static void ensure(void)
{
  static GOnce once = G_ONCE_INIT;
  g_once(&once, build, NULL);
}

const CohortTorchGlobal *cohort_torch_allowlist_find(const char *full_name)
{
  ensure();
  return g_hash_table_lookup(table, full_name);
}

guint cohort_torch_allowlist_count(void)
{
  ensure();
  return g_hash_table_size(table);
}

guint cohort_torch_dtype_size(CohortTorchDtype dtype)
{
  static const guint sizes[] = {4, 8, 2, 2, 8, 4, 2, 1, 1, 1, 0};
  return (guint)dtype < G_N_ELEMENTS(sizes) ? sizes[dtype] : 0;
}
