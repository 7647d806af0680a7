/* The "gpt" family's description (engine/families/family.h): a GPT-2-style decoder's shape, its
 * tensors with Hugging Face GPT-2's names and layouts, and where its activations go. The model
 * itself is engine/models/gpt*.c. */
#pragma once

#include "engine/families/family.h"

G_BEGIN_DECLS

/* The "gpt" family's description. */
extern const CohortFamilyDesc cohort_family_gpt;

typedef struct {
  int n_layer;
  int n_head;
  int n_embd;
  int seq_len; /* maximum context, the size of wpe */
  int vocab_size;
} CohortGptShape;

/* Tensors of one block, in the order of HF GPT-2's state dict. */
enum {
  GPT_LN1_W,
  GPT_LN1_B,
  GPT_ATTN_W,
  GPT_ATTN_B,
  GPT_ATTN_PROJ_W,
  GPT_ATTN_PROJ_B,
  GPT_LN2_W,
  GPT_LN2_B,
  GPT_FC_W,
  GPT_FC_B,
  GPT_FC_PROJ_W,
  GPT_FC_PROJ_B,
  GPT_BLOCK_COUNT
};

/* The table: wte, wpe (layer -1), then block l's GPT_BLOCK_COUNT tensors (layer l), then ln_f
 * (layer n_layer). The index of block l's tensor p. */
static inline guint cohort_family_gpt_index(int l, int p)
{
  return 2 + (guint)l * GPT_BLOCK_COUNT + (guint)p;
}

/* What one block keeps from forward for backward, each [B·T, width]. */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd;
  float *qkv;
  float *atty, *att_lse;
  float *res2;
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu;
  float *res3;
} CohortGptBlockActs;

/* A GPT's activations (backend memory) for max_batch sequences of seq_len tokens. */
typedef struct {
  int *tokens, *targets;
  float *encoded;
  CohortGptBlockActs *blocks; /* n_layer entries, allocated by the caller; NULL to count */
  float *lnf, *lnf_mean, *lnf_rstd;
  float *logits, *lse, *losses;
  /* backward scratch (NULL in a forward-only model) */
  float *dres, *dln, *dqkv, *datty, *dfch, *dlogits;
} CohortGptActs;

/* The shape `cfg` describes. */
CohortGptShape cohort_family_gpt_shape(const CohortConfig *cfg);
/* The tables of a GPT of shape `s` (it has no buffers). */
void cohort_family_gpt_tables(const CohortGptShape *s, CohortFamilyTables *out);
/* Lays the activations out from `base` (NULL: only counts) and returns their bytes. A
 * forward-only model (a distillation teacher) has no backward scratch, and every block writes
 * the same buffers (a block reads its input before it overwrites them). */
size_t cohort_family_gpt_layout(CohortGptActs *a, const CohortGptShape *s, int max_batch,
                                gboolean forward_only, char *base);

G_END_DECLS
