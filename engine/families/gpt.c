/* The "gpt" family's description (see gpt.h). */
#include "engine/families/gpt.h"

static const char *const block_names[GPT_BLOCK_COUNT] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias",
};

CohortGptShape cohort_family_gpt_shape(const CohortConfig *cfg)
{
  return (CohortGptShape){cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->vocab_size};
}

void cohort_family_gpt_tables(const CohortGptShape *s, CohortFamilyTables *out)
{
  CohortTableBuilder b;
  cohort_table_builder_init(&b);
  int C = s->n_embd;
  size_t *off = &b.param_floats;
  cohort_table_add(b.params, g_strdup("wte.weight"), 2, (int[]){s->vocab_size, C}, -1, off);
  cohort_table_add(b.params, g_strdup("wpe.weight"), 2, (int[]){s->seq_len, C}, -1, off);
  /* [in, out] for the four projections: HF's Conv1D */
  const int dims[GPT_BLOCK_COUNT][2] = {
      {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
      {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0},
  };
  for (int l = 0; l < s->n_layer; l++)
    for (int p = 0; p < GPT_BLOCK_COUNT; p++) {
      gboolean matrix = dims[p][1] > 0;
      CohortTensorInfo *t = cohort_table_add(
          b.params, g_strdup_printf("h.%d.%s", l, block_names[p]), matrix ? 2 : 1, dims[p], l, off);
      t->adapt = matrix ? COHORT_ADAPT_CONV1D : COHORT_ADAPT_NONE;
    }
  cohort_table_add(b.params, g_strdup("ln_f.weight"), 1, &C, s->n_layer, off);
  cohort_table_add(b.params, g_strdup("ln_f.bias"), 1, &C, s->n_layer, off);
  cohort_table_builder_finish(&b, out);
}

size_t cohort_family_gpt_layout(CohortGptActs *a, const CohortGptShape *s, int max_batch,
                                CohortActKeep keep, char *base)
{
  gboolean forward_only = keep == COHORT_ACTS_FORWARD;
  size_t N = (size_t)max_batch * s->seq_len;
  size_t C = s->n_embd, V = s->vocab_size, NH = s->n_head;
  CohortActCarver k = {.base = base};
  COHORT_ACT_TAKE(&k, a->tokens, N, int);
  COHORT_ACT_TAKE(&k, a->targets, N, int);
  COHORT_ACT_TAKE(&k, a->encoded, N * C, float);
  CohortGptBlockActs counted;
  for (int l = 0; l < s->n_layer; l++) {
    CohortGptBlockActs *b = a->blocks ? &a->blocks[l] : &counted;
    if (keep != COHORT_ACTS_ALL && l > 0) {
      *b = a->blocks ? a->blocks[0] : counted;
      if (keep == COHORT_ACTS_CHECKPOINT)
        COHORT_ACT_TAKE(&k, b->res3, N * C, float);
      continue;
    }
    COHORT_ACT_TAKE(&k, b->ln1, N * C, float);
    COHORT_ACT_TAKE(&k, b->ln1_mean, N, float);
    COHORT_ACT_TAKE(&k, b->ln1_rstd, N, float);
    COHORT_ACT_TAKE(&k, b->qkv, N * 3 * C, float);
    COHORT_ACT_TAKE(&k, b->atty, N * C, float);
    COHORT_ACT_TAKE(&k, b->att_lse, N * NH, float);
    COHORT_ACT_TAKE(&k, b->res2, N * C, float);
    COHORT_ACT_TAKE(&k, b->ln2, N * C, float);
    COHORT_ACT_TAKE(&k, b->ln2_mean, N, float);
    COHORT_ACT_TAKE(&k, b->ln2_rstd, N, float);
    COHORT_ACT_TAKE(&k, b->fch, N * 4 * C, float);
    COHORT_ACT_TAKE(&k, b->fch_gelu, N * 4 * C, float);
    COHORT_ACT_TAKE(&k, b->res3, N * C, float);
  }
  COHORT_ACT_TAKE(&k, a->lnf, N * C, float);
  COHORT_ACT_TAKE(&k, a->lnf_mean, N, float);
  COHORT_ACT_TAKE(&k, a->lnf_rstd, N, float);
  COHORT_ACT_TAKE(&k, a->logits, N * V, float);
  COHORT_ACT_TAKE(&k, a->lse, N, float);
  COHORT_ACT_TAKE(&k, a->losses, N, float);
  if (!forward_only) {
    COHORT_ACT_TAKE(&k, a->dres, N * C, float);
    COHORT_ACT_TAKE(&k, a->dln, N * C, float);
    COHORT_ACT_TAKE(&k, a->dqkv, N * 3 * C, float);
    COHORT_ACT_TAKE(&k, a->datty, N * C, float);
    COHORT_ACT_TAKE(&k, a->dfch, N * 4 * C, float);
    COHORT_ACT_TAKE(&k, a->dlogits, N * V, float);
  }
  return k.used;
}

static gboolean gpt_tables(const CohortConfig *cfg, CohortFamilyTables *out)
{
  CohortGptShape s = cohort_family_gpt_shape(cfg);
  cohort_family_gpt_tables(&s, out);
  return TRUE;
}

static size_t gpt_act_bytes(const CohortConfig *cfg, int max_batch, gboolean forward_only)
{
  CohortGptShape s = cohort_family_gpt_shape(cfg);
  CohortGptActs a = {0};
  return cohort_family_gpt_layout(&a, &s, max_batch, cohort_family_act_keep(cfg, forward_only),
                                  NULL);
}

/* engine/models/gpt-forward.c: a linear's weight is [in, out]; forward multiplies x [N, in]
 * by it, the input's gradient dy [N, out] by its transpose, its own gradient x by dy; the head
 * multiplies by the token embedding [V, C] (the logits' gradient [N, V] first in backward).
 * LoRA's products are no larger (rank < C). */
static void gpt_gemm_operands(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b)
{
  CohortGptShape s = cohort_family_gpt_shape(cfg);
  size_t N = (size_t)max_batch * s.seq_len, C = s.n_embd, V = s.vocab_size;
  *a = N * MAX(V, 4 * C);
  *b = MAX(MAX(V * C, 4 * C * C), N * 4 * C);
}

const CohortFamilyDesc cohort_family_gpt = {
    .name = "gpt",
    .lora_targets = "attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj",
    .init_from_folder = TRUE,
    .tables = gpt_tables,
    .act_bytes = gpt_act_bytes,
    .gemm_operands = gpt_gemm_operands,
    .activation_checkpointing = TRUE,
};
