/* The GPT family's model struct, shared by its files (gpt.c: set-up, initialisation, the
 * class; gpt-forward.c: forward and backward; gpt-io.c: Hugging Face files and init_from;
 * gpt-generate.c: sampling; gpt-distill.c: the teacher's rules). Its tables and activations are
 * laid out by the family's description (engine/families/gpt.h). */
#pragma once

#include "engine/families/gpt.h"
#include "engine/models/gpt.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

#define GPT_LN_EPS 1e-5f /* GPT-2's LayerNorm epsilon */

/* Errors of cohort_gpt_new: 0 = invalid shape, 1 = out of memory. */
#define GPT_ERROR g_quark_from_static_string("cohort-gpt-error")

/* The family's model: the shared base first, so a CohortModel * is a Gpt *. */
typedef struct {
  CohortModel base;
  CohortGptShape shape;

  void *act_mem;
  CohortGptActs acts;
  float *host_losses;

  int last_B, last_T;
  gboolean have_targets;
  size_t counted;  /* the last forward's targets that count (not ignored) */
  double loss_div; /* what its loss sum was divided by (engine/model/batch.h's loss_norm) */
  /* A frozen model (a distillation teacher): no backward scratch, and every block writes the
   * same activation buffers (a block reads its input before it overwrites them). */
  gboolean forward_only;
  /* activation_checkpointing (COHORT_ACTS_CHECKPOINT): the blocks share one set of buffers,
   * which holds block acts_block's activations (-1: none); backward recomputes each block
   * into it from the block's input before going through it. */
  gboolean checkpoint;
  int acts_block;
} Gpt;

static inline Gpt *gpt_of(const CohortModel *m)
{
  g_return_val_if_fail(cohort_is_gpt(m), NULL);
  return (Gpt *)m;
}

/* Parameter pointer of block `l`, tensor `p` (in `base`: the parameters or a copy laid out
 * like them). */
static inline float *gpt_bp(const Gpt *gpt, float *base, int l, int p)
{
  return base + gpt->base.tensors[cohort_family_gpt_index(l, p)].offset;
}

/* Its gradient, or NULL when it is frozen (engine/model/finetune.h). */
static inline float *gpt_bg(const Gpt *gpt, int l, int p)
{
  return cohort_model_grad(&gpt->base, cohort_family_gpt_index(l, p));
}

/* gpt-forward.c: the model interface's forward, backward, evaluation and logits. */
float cohort_gpt_forward_batch(CohortModel *m, const CohortBatch *b, CohortForwardMode mode);
void cohort_gpt_backward_op(CohortModel *m, float grad_scale);
void cohort_gpt_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                CohortLogitsGradFunc add, gpointer user_data);
const float *cohort_gpt_logits_op(const CohortModel *m, int *rows, int *classes);
void cohort_gpt_eval_batch(CohortModel *m, const CohortBatch *b, double *sums);
double cohort_gpt_flops_per_example(const CohortModel *m);

/* gpt-io.c: the class's import_weights (a .safetensors file, or a Hugging Face folder whose
 * config.json must describe this model) and import_file. */
gboolean cohort_gpt_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error);
char *cohort_gpt_import_file(const char *path);

G_END_DECLS
