/* The restricted unpickler of PyTorch weight files: it accepts exactly the pickle opcodes and
 * globals that torch.load(weights_only=True) of PyTorch 1.13 accepts
 * (torch/_weights_only_unpickler.py) and refuses everything else, naming the opcode or the
 * global. Nothing is ever called or imported: globals are names looked up in a fixed table,
 * and the few calls a state dict makes (OrderedDict(), torch.Size(...), torch._utils.
 * _rebuild_tensor_v2(...) and _rebuild_parameter(...)) are interpreted as data. Globals the
 * allowlist has that build no dense tensor (sparse, meta and quantized tensors) are refused
 * with their name too.
 *
 * Strangers' input: the pickle, the values it creates, the items of containers, the stack,
 * the memo and the nesting depth all have caps; every read is bounds-checked. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Element types of PyTorch storages (the allowlist's storage classes). */
typedef enum {
  COHORT_TORCH_F32,
  COHORT_TORCH_F64,
  COHORT_TORCH_F16,
  COHORT_TORCH_BF16,
  COHORT_TORCH_I64,
  COHORT_TORCH_I32,
  COHORT_TORCH_I16,
  COHORT_TORCH_I8,
  COHORT_TORCH_U8,
  COHORT_TORCH_BOOL,
  COHORT_TORCH_OTHER, /* complex and quantized storages: listed, never converted */
} CohortTorchDtype;

#define COHORT_TORCH_MAX_DIMS 8

/* A storage named by the pickle's persistent id: its record is "<archive>/data/<key>". */
typedef struct {
  char *key;
  char *type_name; /* "torch.FloatStorage" */
  CohortTorchDtype dtype;
  guint64 numel;
} CohortTorchStorage;

/* A tensor of the state dict: a strided view of a storage. */
typedef struct {
  char *name;
  guint storage;
  gint64 offset;
  int ndim;
  gint64 shape[COHORT_TORCH_MAX_DIMS], stride[COHORT_TORCH_MAX_DIMS];
} CohortTorchTensor;

typedef struct {
  GArray *storages; /* of CohortTorchStorage */
  GArray *tensors;  /* of CohortTorchTensor, in the dict's order */
  char *dict_path;  /* "" for a plain state dict, "state_dict" or "model" when nested */
} CohortTorchPickle;

/* Unpickles data.pkl and finds the state dict: the top-level dict when all its values are
 * tensors, else its "state_dict" or "model" entry (a training checkpoint). Errors are one line
 * without the file's name: the refused opcode (by name and byte offset) or global, or what is
 * malformed. */
CohortTorchPickle *cohort_torch_pickle_load(const guint8 *data, gsize len, GError **error);
void cohort_torch_pickle_free(CohortTorchPickle *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortTorchPickle, cohort_torch_pickle_free)

/* Bytes per element of a dtype; 0 for COHORT_TORCH_OTHER. */
guint cohort_torch_dtype_size(CohortTorchDtype dtype);

#define COHORT_TORCH_PICKLE_ERROR (cohort_torch_pickle_error_quark())
GQuark cohort_torch_pickle_error_quark(void);
typedef enum {
  COHORT_TORCH_PICKLE_ERROR_FORMAT,  /* malformed, truncated, over a cap */
  COHORT_TORCH_PICKLE_ERROR_REFUSED, /* an opcode or global outside the allowlist */
} CohortTorchPickleError;

G_END_DECLS
