/* frozen_dtype bf16: the frozen base kept in bfloat16 (docs/finetuning.md, "The frozen base in
 * bf16").
 *
 * Every frozen parameter tensor with two or more dimensions (the matrices, convolution kernels
 * and embedding tables, where the memory is) is rounded once to bfloat16 (to nearest, ties to
 * even: the backend's to_bf16) into the store, and its fp32 place in the parameter vector, a
 * reserved address range (kernels/backend.h `reserve`), gives its memory back. Around each use
 * of a layer (cohort_model_layer_begin/end, which every family calls, as for ZeRO stage 3) the
 * layer's stored tensors are widened back into their places and given back again after. One-
 * dimensional frozen tensors (norms, biases) and everything that learns stay fp32 in place.
 *
 * With precision bf16 every product rounds its operands to bf16 before multiplying, so the
 * widened weights give the products the fp32 weights give; a reader that is no product (an
 * embedding lookup, the export, a merge) sees the rounded values: a run equals bit for bit the
 * fp32-stored run of the base rounded so first. */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "engine/model/model.h"

G_BEGIN_DECLS

typedef struct CohortFrozenStore CohortFrozenStore;

/* For cohort_model_alloc_tables: TRUE when models made for `cfg` keep their parameters in a
 * reserved range (frozen_dtype bf16); FALSE with the refusal when the backend `be_name` cannot
 * give one (`can_reserve` FALSE). */
gboolean cohort_frozen_store_wanted(const CohortConfig *cfg, gboolean can_reserve,
                                    const char *be_name, GError **error);

/* Moves m's frozen tensors of two or more dimensions into a new store (m->frozen_store), once
 * the whole base is in place (after the start or the resume): each is rounded to bf16 and its
 * fp32 memory given back. Needs m->params_range; FALSE with an error when the store's memory
 * cannot be had (the model is then unchanged). */
gboolean cohort_frozen_store_take(CohortModel *m, GError **error);

/* For cohort_model_layer_begin/end: widens `layer`'s stored tensors into their places at the
 * first begin of a nest, gives their memory back at its last end. A use that only adds into
 * gradients (COHORT_LAYER_GRADS) reads no weight: nothing. */
void cohort_frozen_store_layer(CohortModel *m, int layer, CohortLayerUse use, gboolean begin);

/* The bf16 bits of parameter tensor i while it is in the store, else NULL: backend memory
 * (on a GPU, device memory: read it through the backend, or take cohort_frozen_store_bits_host). */
const uint16_t *cohort_frozen_store_bits(const CohortModel *m, guint i);

/* The same bits readable by the CPU: the store's own on the CPU backend, else a copy in *tmp
 * (g_free it; NULL when nothing was copied). NULL when tensor i is not stored. */
const uint16_t *cohort_frozen_store_bits_host(const CohortModel *m, guint i, uint16_t **tmp);

/* Writes the stored tensors, widened, at their offsets into `params` (host memory holding the
 * whole parameter vector, the rest of which the caller filled): the base as the run sees it. */
void cohort_frozen_store_widen_into(const CohortModel *m, float *params);

/* Rounds m's frozen tensors of two or more dimensions to bf16 in place, keeping them fp32 (no
 * store, any backend): the base a frozen_dtype bf16 run trained on, for a model that only
 * samples (a checkpoint rebuilds its base unrounded). */
void cohort_frozen_store_round(CohortModel *m);

/* Bytes the store holds (0 without one), and floats of the parameter vector it holds. */
size_t cohort_frozen_store_bytes(const CohortModel *m);
size_t cohort_frozen_store_floats(const CohortModel *m);

void cohort_frozen_store_free(const CohortBackend *be, CohortFrozenStore *s);

G_END_DECLS
