/* The globals torch.load(weights_only=True) of PyTorch 1.13 allows
 * (torch/_weights_only_unpickler.py, _get_allowed_globals), by their full names, with what
 * Cohort's unpickler (torch-pickle.c) makes of each. Internal to engine/model. */
#pragma once

#include "engine/model/torch-pickle.h"

G_BEGIN_DECLS

typedef enum {
  COHORT_TORCH_ORDERED_DICT,      /* collections.OrderedDict */
  COHORT_TORCH_PARAMETER,         /* torch.nn.parameter.Parameter */
  COHORT_TORCH_LAYOUT_FN,         /* torch.serialization._get_layout */
  COHORT_TORCH_SIZE,              /* torch.Size */
  COHORT_TORCH_REBUILD_V2,        /* torch._utils._rebuild_tensor_v2 */
  COHORT_TORCH_REBUILD,           /* torch._utils._rebuild_tensor */
  COHORT_TORCH_REBUILD_PARAMETER, /* torch._utils._rebuild_parameter */
  COHORT_TORCH_STORAGE,           /* a storage class, with its element type */
  COHORT_TORCH_NOT_WEIGHTS,       /* allowed, but builds no dense tensor: sparse, meta, untyped */
  COHORT_TORCH_TYPE_ONLY,         /* a dtype, torch.Tensor or a tensor class: nothing to call */
} CohortTorchGlobalKind;

typedef struct {
  const char *name; /* "torch.FloatStorage" */
  CohortTorchGlobalKind kind;
  CohortTorchDtype dtype; /* COHORT_TORCH_STORAGE */
} CohortTorchGlobal;

/* The allowlist's entry for "module.name", or NULL: not allowed. */
const CohortTorchGlobal *cohort_torch_allowlist_find(const char *full_name);
/* How many globals the table allows. */
guint cohort_torch_allowlist_count(void);

G_END_DECLS
