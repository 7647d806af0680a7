/* Fine-tuning modes over any model's parameter table (docs/finetuning.md): which parameters
 * learn (`finetune` full, lora or frozen, and the `trainable` patterns), which weights get a
 * LoRA adapter (`lora_targets`), and the layout that puts everything that learns at the start
 * of the parameter vector:
 *
 *   [ trainable tensors and adapters, in forward order | frozen tensors, in table order ]
 *     0 ............................. n_trainable ........................... n_params
 *
 * An adapter's lora_A and lora_B sit right after the weight they adapt (whether that weight
 * learns or not), with the weight's `layer`, so the trainable part is in forward order and
 * each layer's gradients are one contiguous range: the DDP reducer's buckets, ZeRO's units
 * and the optimizer need nothing else. Gradients, optimizer state and EMA weights exist for
 * [0, n_trainable) only. With finetune full nothing moves. */
#pragma once

#include <glib.h>

#include "engine/base/tensor.h"
#include "engine/config/config.h"
#include "engine/config/finetune-patterns.h"

G_BEGIN_DECLS

/* What a config makes of a parameter table. */
typedef struct {
  CohortFinetune mode;
  guint n;          /* tensors of the table */
  gboolean *frozen; /* [n] */
  int *adapter;     /* [n]: the index of the weight's adapter in targets, or -1 */
  guint n_adapters;
  guint *targets; /* [n_adapters]: the adapted weights, in table order */
  int rank;
  double alpha, dropout;
  gboolean rslora; /* scale alpha / sqrt(rank) (PEFT's use_rslora), not alpha / rank */
} CohortFinetunePlan;

/* The plan of `cfg` (finetune, lora_*, trainable) for the table of model family `family`,
 * whose default targets are `default_targets` (comma-separated; NULL: the family takes no
 * adapters). Errors name the key, the pattern that matched nothing and what it could have
 * matched. With finetune full every tensor learns and no adapter is made. */
CohortFinetunePlan *cohort_finetune_plan_new(const CohortConfig *cfg, const char *family,
                                             const char *default_targets,
                                             const CohortTensorInfo *tensors, guint n,
                                             GError **error);
void cohort_finetune_plan_free(CohortFinetunePlan *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(CohortFinetunePlan, cohort_finetune_plan_free)

/* The plan laid out (see the top of this file). */
typedef struct {
  CohortTensorInfo *adapters; /* 2 per adapter: lora_A [r, in], lora_B [out, r]; names owned */
  guint n_adapter_tensors;
  CohortTensorInfo *train; /* the trainable part in increasing offsets; names borrowed */
  guint n_train;
  int *train_source;    /* entry k: the table index (>= 0), or -1 - its adapters-table index */
  size_t *moved_from;   /* [n]: each tensor's offset before the layout */
  size_t n_trainable;   /* floats of the trainable part */
  size_t n_params;      /* floats of the whole vector, adapters included */
  size_t n_base_floats; /* floats of the table alone (the family's vector) */
} CohortFinetuneLayout;

/* Lays the plan out over `tensors` (n entries, the family's layout): sets each tensor's
 * `frozen` and new offset, and fills `out`. */
void cohort_finetune_layout(const CohortFinetunePlan *p, CohortTensorInfo *tensors, guint n,
                            CohortFinetuneLayout *out);
/* Frees what cohort_finetune_layout allocated (not the names of `train`). */
void cohort_finetune_layout_clear(CohortFinetuneLayout *l);

/* The rules of the fine-tuning keys across other keys, checked when a run starts: frozen
 * needs trainable patterns and adapter_from needs lora (every zero_stage applies: ZeRO shards
 * what learns alone, the frozen base stays whole on every rank). `source` names the config in
 * messages. */
gboolean cohort_finetune_check_config(const CohortConfig *cfg, const char *source, GError **error);

G_END_DECLS
