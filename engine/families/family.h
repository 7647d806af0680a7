/* Each model family's description from the config alone: the tensors it builds (names, shapes,
 * order, layer ids, LoRA kinds), its buffers, its default LoRA targets, the bytes of its
 * activations, the rules across keys that need nothing but the config, and how it takes its
 * init_from. The engine's family classes (engine/models/) build their models from these
 * descriptions, and the window, which links no model, reads the same ones to count what learns;
 * so a family is described once.
 *
 * The families themselves are declared in engine/config/model-families.h (the `model` key's
 * choices and the window's labels): family.c builds its table of descriptions from that list,
 * so each family `x` there must define `const CohortFamilyDesc cohort_family_x` here (the build
 * fails otherwise). Functions and data of this library are named cohort_family_*: the window
 * links it, and tests/ui/links.sh refuses any model symbol (cohort_gpt_*, cohort_model_*, …) in
 * the window's binary. */
#pragma once

#include <glib.h>

#include "engine/base/tensor.h"
#include "engine/config/config.h"

G_BEGIN_DECLS

/* A model's tables: its parameters in forward order (each layer's tensors together, offsets
 * in floats into one vector) and its buffers (running statistics, a fixed position table:
 * saved and exported, never optimised). Names are owned. */
typedef struct CohortFamilyTables {
  CohortTensorInfo *params;
  guint n_params;
  size_t param_floats;
  CohortTensorInfo *buffers;
  guint n_buffers;
  size_t buffer_floats;
} CohortFamilyTables;

/* Frees the tables' names and arrays and zeroes `t`. */
void cohort_family_tables_clear(CohortFamilyTables *t);

/* What a model's activations keep for backward, which its layout function lays out. The first
 * two are FALSE and TRUE of the older `forward_only` flag. */
typedef enum {
  COHORT_ACTS_ALL = 0,     /* training: every block keeps what its backward reads */
  COHORT_ACTS_FORWARD = 1, /* forward only (a distillation teacher): one set of block buffers
                              that every block writes, no backward scratch */
  /* activation_checkpointing: each block keeps only its input (the residual stream before it)
   * and every block writes one set of block buffers; backward runs each block's forward again
   * from its input, into that set, just before the block's backward */
  COHORT_ACTS_CHECKPOINT = 2,
} CohortActKeep;

/* One family's description. */
typedef struct CohortFamilyDesc {
  const char *name; /* the `model` key's value */
  /* The layers that get LoRA adapters when lora_targets is "" (comma-separated, as
   * lora_targets); NULL: the family takes no adapters. */
  const char *lora_targets;
  /* For a family whose layouts differ by a key (the dit's text_encoder): the default targets
   * for `cfg`, in place of lora_targets. Optional. */
  const char *(*lora_targets_of)(const CohortConfig *cfg);
  /* init_from is usually a folder (a Hugging Face folder with config.json and a tokenizer),
   * so the window's chooser for it picks folders; otherwise a weights file. */
  gboolean init_from_folder;
  /* Rules across keys that only this family has and that need only the config (a ResNet depth
   * of 6n+2, a patch that divides the image); errors name the key. Optional. Rules that need
   * more (a file to read) are the class's (engine/models). */
  gboolean (*check_config)(const CohortConfig *cfg, const char *source, GError **error);
  /* The tables of the model `cfg` describes, exactly as the family's class builds it (with
   * num_classes as set); FALSE (and `out` empty) when the shape is none the family builds. */
  gboolean (*tables)(const CohortConfig *cfg, CohortFamilyTables *out);
  /* Bytes of activations and backward scratch the model allocates for micro-batches of
   * max_batch (a forward-only model, a distillation teacher, needs less); 0 when the shape is
   * none the family builds. */
  size_t (*act_bytes)(const CohortConfig *cfg, int max_batch, gboolean forward_only);
  /* The largest operands of the model's matrix products for micro-batches of max_batch, in
   * floats: *a of the first (always an activation), *b of the second (a weight, or an activation
   * in a weight's gradient). A CPU rank in bf16 or fp16 rounds each product's operands into one
   * buffer per operand that grows to the largest (kernels/cpu/precision.c): the memory plan
   * counts these. Optional: a family without it counts none. */
  void (*gemm_operands)(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b);
  /* TRUE when the family honours activation_checkpointing: act_bytes and the model's layout
   * follow cohort_family_act_keep, and backward recomputes each block from its kept input
   * (inside the block's COHORT_LAYER_BACKWARD layer hook, drawing the same randomness, and
   * without updating any running statistic a second time). A family without it refuses the
   * key (cohort_family_check_config). */
  gboolean activation_checkpointing;
} CohortFamilyDesc;

/* What a model of `cfg` keeps: COHORT_ACTS_FORWARD for a forward-only model, else
 * COHORT_ACTS_CHECKPOINT with activation_checkpointing, else COHORT_ACTS_ALL. */
static inline CohortActKeep cohort_family_act_keep(const CohortConfig *cfg, gboolean forward_only)
{
  if (forward_only)
    return COHORT_ACTS_FORWARD;
  return cfg->activation_checkpointing ? COHORT_ACTS_CHECKPOINT : COHORT_ACTS_ALL;
}

/* The descriptions, in the order engine/config/model-families.h declares the families;
 * *n_families gets their number. */
const CohortFamilyDesc *const *cohort_family_descs(guint *n_families);
/* The description of family `name`, or NULL. */
const CohortFamilyDesc *cohort_family_desc(const char *name);

/* From the config alone, as the window and the memory plan see a model before any data is
 * read: num_classes 0 (from the data, unknown here) counts as 1, and a DiT's image keys as set
 * (before any vae_from latents). Each returns nothing (FALSE, NULL, 0) when the family is
 * unknown or the shape is none it builds. */
gboolean cohort_family_tables_of(const CohortConfig *cfg, CohortFamilyTables *out);
/* The parameter table alone (free with cohort_family_table_free); *n_floats gets the size of
 * the parameter vector. */
CohortTensorInfo *cohort_family_param_table(const CohortConfig *cfg, guint *n_tensors,
                                            size_t *n_floats);
void cohort_family_table_free(CohortTensorInfo *t, guint n);
gint64 cohort_family_count_params(const CohortConfig *cfg);
size_t cohort_family_act_bytes(const CohortConfig *cfg, int max_batch);
/* The family's gemm_operands (0 and 0 without one, or for an unknown family). */
void cohort_family_gemm_operands(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b);
/* The default LoRA targets of cfg's family, or NULL. */
const char *cohort_family_lora_targets(const CohortConfig *cfg);
/* The default LoRA targets of family `f` for `cfg` (its lora_targets_of, else its
 * lora_targets), or NULL. */
const char *cohort_family_desc_lora_targets(const CohortFamilyDesc *f, const CohortConfig *cfg);
/* The family's own rules (check_config), and activation_checkpointing refused for a family
 * that does not honour it; TRUE for a family without any, or unknown. */
gboolean cohort_family_check_config(const CohortConfig *cfg, const char *source, GError **error);

/* For the families' builders: the tables as they grow. */
typedef struct {
  GArray *params, *buffers; /* of CohortTensorInfo */
  size_t param_floats, buffer_floats;
} CohortTableBuilder;

void cohort_table_builder_init(CohortTableBuilder *b);
/* Appends a tensor named `name` (taken) of `shape` to `arr` at *offset, which it advances;
 * weight decay on tensors of two or more dimensions. Returns the new entry (valid until the
 * next append). */
CohortTensorInfo *cohort_table_add(GArray *arr, char *name, int ndim, const int *shape, int layer,
                                   size_t *offset);
/* Moves the tables into `out` (emptying the builder). */
void cohort_table_builder_finish(CohortTableBuilder *b, CohortFamilyTables *out);
/* Frees what the builder holds. */
void cohort_table_builder_clear(CohortTableBuilder *b);

/* Activation memory carved out of one allocation in two passes: the first (base NULL) only
 * counts. Each piece is 64-byte aligned. */
typedef struct {
  char *base;
  size_t used;
} CohortActCarver;

static inline void *cohort_act_take(CohortActCarver *c, size_t bytes)
{
  void *p = c->base ? c->base + c->used : NULL;
  c->used += (bytes + 63) / 64 * 64;
  return p;
}
#define COHORT_ACT_TAKE(carver, ptr, count, type)                                                  \
  ((ptr) = (type *)cohort_act_take((carver), (size_t)(count) * sizeof(type)))

G_END_DECLS
