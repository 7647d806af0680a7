/* The model families' registry: every family Cohort trains, found by the config's `model`. */
#pragma once

#include "engine/model/distill.h"
#include "engine/model/model.h"

G_BEGIN_DECLS

/* The registered families, NULL-terminated, in a stable order. */
const CohortModelClass *const *cohort_model_classes(void);
/* The family named `name`, or NULL. */
const CohortModelClass *cohort_model_class_find(const char *name);
/* The family cfg->model names; an error naming the key and the registered names when none. */
const CohortModelClass *cohort_model_class_for(const CohortConfig *cfg, const char *source,
                                               GError **error);
/* Checks that the config's data_format suits the family, then the family's own rules: the
 * description's (engine/families/family.h), then the class's. */
gboolean cohort_model_check_config(const CohortConfig *cfg, const char *source, GError **error);

/* The model `cfg` describes before it is made and before its data is read (num_classes 0
 * counts as 1), for --explain's memory plan: its parameters, parameter table (free with
 * cohort_tensor_table_free) and bytes of activations for micro-batches of max_batch. The
 * family's description over the shape its class builds (a DiT's vae_from latents); 0 or NULL
 * for an unknown family or a shape it does not build. */
gint64 cohort_model_count_params(const CohortConfig *cfg);
CohortTensorInfo *cohort_model_param_table(const CohortConfig *cfg, guint *n_tensors,
                                           size_t *n_floats);
size_t cohort_model_act_bytes(const CohortConfig *cfg, int max_batch);
/* The largest operands of its matrix products, in floats, over the same shape
 * (engine/families/family.h's gemm_operands; 0 and 0 for a family without them). */
void cohort_model_gemm_operands(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b);

/* Creates the model the config describes on backend `be` (class lookup + create). */
CohortModel *cohort_model_new(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                              GError **error);
/* The same without a gradient buffer, for forward only (a distillation teacher): m->frozen is
 * set and m->grads is NULL. Families need nothing for it: cohort_model_alloc_tables skips the
 * gradients while this call creates the model. */
CohortModel *cohort_model_new_frozen(const CohortBackend *be, const CohortConfig *cfg,
                                     int max_batch, GError **error);
/* The rules of distillation that involve several keys, checked when a run starts (not on
 * load, so a preset can be edited key by key): student_init teacher_layers needs teacher_from,
 * no init_from and a family whose class copies_blocks, and the student's family must be one
 * that distils. `source` names the config in messages. */
gboolean cohort_distill_check_config(const CohortConfig *cfg, const char *source, GError **error);

G_END_DECLS
