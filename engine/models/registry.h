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
/* Checks that the config's data_format suits the family, then the family's own rules. */
gboolean cohort_model_check_config(const CohortConfig *cfg, const char *source, GError **error);

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
