/* The "llama" family's description (see llama.h). */
#include "engine/families/llama.h"

#include <math.h>

#include "engine/base/error.h"

const char *const cohort_family_llama_archs[COHORT_LLAMA_ARCH_COUNT + 1] = {
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", NULL};

static const char *const block_names[LB_COUNT] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.q_proj.bias",
    "self_attn.k_proj.weight", "self_attn.k_proj.bias",   "self_attn.v_proj.weight",
    "self_attn.v_proj.bias",   "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "self_attn.o_proj.weight", "self_attn.o_proj.bias",   "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
};

CohortLlamaShape cohort_family_llama_shape(const CohortConfig *cfg)
{
  CohortLlamaArch arch = (CohortLlamaArch)cfg->architecture;
  /* attention_bias means something for Llama and Qwen3 only (the key table's condition) */
  gboolean bias =
      cfg->attention_bias && (arch == COHORT_LLAMA_ARCH_LLAMA || arch == COHORT_LLAMA_ARCH_QWEN3);
  CohortLlamaShape s = {
      .n_layer = cfg->n_layer,
      .hidden = cfg->n_embd,
      .intermediate = cfg->intermediate_size,
      .n_head = cfg->n_head,
      .n_kv_head = cfg->num_key_value_heads > 0 ? cfg->num_key_value_heads : cfg->n_head,
      .head_dim = cfg->head_dim > 0 ? cfg->head_dim : cfg->n_embd / MAX(cfg->n_head, 1),
      .vocab_size = cfg->vocab_size,
      .seq_len = cfg->seq_len,
      .rms_eps = cfg->rms_norm_eps,
      .qkv_bias = bias || arch == COHORT_LLAMA_ARCH_QWEN2,
      .o_bias = bias,
      .qk_norm = arch == COHORT_LLAMA_ARCH_QWEN3,
      .tied = cfg->tie_word_embeddings,
  };
  s.rope.type = (CohortRopeType)cfg->rope_scaling;
  s.rope.theta = cfg->rope_theta;
  if (s.rope.type != COHORT_ROPE_DEFAULT)
    s.rope.factor = cfg->rope_scaling_factor;
  if (s.rope.type == COHORT_ROPE_LLAMA3) {
    s.rope.low_freq_factor = cfg->rope_low_freq_factor;
    s.rope.high_freq_factor = cfg->rope_high_freq_factor;
    s.rope.original_max_positions = cfg->rope_original_max_position_embeddings;
  }
  return s;
}

/* The fields' names in the config and in config.json. */
enum { F_LAYERS, F_HIDDEN, F_INTER, F_HEADS, F_KV, F_HD, F_VOCAB, F_SEQ, F_EPS, F_THETA, F_COUNT };
static const char *const field_names[2][F_COUNT] = {
    {"n_layer", "n_embd", "intermediate_size", "n_head", "num_key_value_heads", "head_dim",
     "vocab_size", "seq_len", "rms_norm_eps", "rope_theta"},
    {"num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
     "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps",
     "rope_theta"},
};

static gboolean check_rope(const CohortRope *r, const char *const *f, const char *src,
                           CohortLlamaNames names, GError **error)
{
  gboolean hf = names == COHORT_LLAMA_NAMES_HF;
  if (!(r->theta > 1.0 && isfinite(r->theta)))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"%s\": %g is not allowed; allowed: a finite number above 1", src,
                       f[F_THETA], r->theta);
  if (r->type != COHORT_ROPE_DEFAULT && !(r->factor >= 1.0 && isfinite(r->factor)))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"%s\": %g is not allowed; allowed: a finite number >= 1", src,
                       hf ? "rope_scaling.factor" : "rope_scaling_factor", r->factor);
  if (r->type == COHORT_ROPE_LLAMA3 &&
      !(r->low_freq_factor > 0.0 && r->high_freq_factor > r->low_freq_factor &&
        isfinite(r->high_freq_factor) && r->original_max_positions > 0))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"%s\": llama3 scaling with low_freq_factor %g, high_freq_factor "
                       "%g, original_max_position_embeddings %d is not allowed; allowed: 0 < "
                       "low_freq_factor < high_freq_factor and a positive original length",
                       src, hf ? "rope_scaling" : "rope_high_freq_factor", r->low_freq_factor,
                       r->high_freq_factor, r->original_max_positions);
  return TRUE;
}

gboolean cohort_family_llama_check_shape(const CohortLlamaShape *s, CohortLlamaNames names,
                                         const char *source, GError **error)
{
  const char *const *f = field_names[names == COHORT_LLAMA_NAMES_HF];
  const char *src = source ? source : "config";
  const struct {
    int field, value, min, max;
  } v[] = {
      {F_LAYERS, s->n_layer, 1, 1024},        {F_HIDDEN, s->hidden, 1, 65536},
      {F_INTER, s->intermediate, 1, 1 << 20}, {F_HEADS, s->n_head, 1, 1024},
      {F_KV, s->n_kv_head, 1, 1024},          {F_HD, s->head_dim, 2, 1024},
      {F_VOCAB, s->vocab_size, 1, 1 << 24},   {F_SEQ, s->seq_len, 1, 1 << 20},
  };
  for (guint i = 0; i < G_N_ELEMENTS(v); i++)
    if (v[i].value < v[i].min || v[i].value > v[i].max)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "%s: key \"%s\": %d is not allowed; allowed: an integer from %d to %d",
                         src, f[v[i].field], v[i].value, v[i].min, v[i].max);
  if (s->n_head % s->n_kv_head != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"%s\": %d does not divide %s %d; allowed: a divisor of the "
                       "number of attention heads (grouped-query attention)",
                       src, f[F_KV], s->n_kv_head, f[F_HEADS], s->n_head);
  if (s->head_dim % 2 != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"%s\": %d is not allowed (rotary embeddings rotate pairs); "
                       "allowed: an even number",
                       src, f[F_HD], s->head_dim);
  /* q and k together: the activations are sized in ints */
  if ((gint64)s->n_head * s->head_dim > (1 << 20))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"%s\": %d heads of %d is too wide; allowed: at most 1048576 "
                       "query features",
                       src, f[F_HD], s->n_head, s->head_dim);
  if (!(s->rms_eps > 0.0 && s->rms_eps < 1.0))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"%s\": %g is not allowed; allowed: a number in (0, 1)", src,
                       f[F_EPS], s->rms_eps);
  return check_rope(&s->rope, f, src, names, error);
}

int cohort_family_llama_slots(const CohortLlamaShape *s, int slot[LB_COUNT])
{
  int n = 0;
  for (int p = 0; p < LB_COUNT; p++) {
    gboolean have = TRUE;
    if (p == LB_Q_B || p == LB_K_B || p == LB_V_B)
      have = s->qkv_bias;
    else if (p == LB_O_B)
      have = s->o_bias;
    else if (p == LB_Q_NORM || p == LB_K_NORM)
      have = s->qk_norm;
    slot[p] = have ? n++ : -1;
  }
  return n;
}

void cohort_family_llama_tables(const CohortLlamaShape *s, CohortFamilyTables *out)
{
  int C = s->hidden, Q = s->n_head * s->head_dim, KV = s->n_kv_head * s->head_dim;
  int I = s->intermediate, hd = s->head_dim;
  const int L = COHORT_ADAPT_LINEAR, N = COHORT_ADAPT_NONE;
  /* [out, in] (nn.Linear) for the matrices, [width] for biases and norms, and the adapter */
  const int dims[LB_COUNT][3] = {
      {C, 0, N},  {Q, C, L}, {Q, 0, N}, {KV, C, L}, {KV, 0, N}, {KV, C, L}, {KV, 0, N}, {hd, 0, N},
      {hd, 0, N}, {C, Q, L}, {C, 0, N}, {C, 0, N},  {I, C, L},  {I, C, L},  {C, I, L},
  };
  int slot[LB_COUNT];
  cohort_family_llama_slots(s, slot);
  CohortTableBuilder b;
  cohort_table_builder_init(&b);
  size_t *off = &b.param_floats;
  cohort_table_add(b.params, g_strdup("model.embed_tokens.weight"), 2, (int[]){s->vocab_size, C},
                   -1, off);
  for (int l = 0; l < s->n_layer; l++)
    for (int p = 0; p < LB_COUNT; p++) {
      if (slot[p] < 0)
        continue;
      CohortTensorInfo *t =
          cohort_table_add(b.params, g_strdup_printf("model.layers.%d.%s", l, block_names[p]),
                           dims[p][1] > 0 ? 2 : 1, dims[p], l, off);
      t->adapt = dims[p][2];
    }
  /* the final norm and a separate head are one layer after the blocks */
  cohort_table_add(b.params, g_strdup("model.norm.weight"), 1, &C, s->n_layer, off);
  if (!s->tied)
    cohort_table_add(b.params, g_strdup("lm_head.weight"), 2, (int[]){s->vocab_size, C}, s->n_layer,
                     off);
  cohort_table_builder_finish(&b, out);
}

static void take_block(CohortActCarver *k, CohortLlamaBlockActs *a, const CohortLlamaShape *s,
                       size_t N)
{
  size_t Q = (size_t)s->n_head * s->head_dim, KV = (size_t)s->n_kv_head * s->head_dim;
  size_t C = s->hidden, I = s->intermediate;
  COHORT_ACT_TAKE(k, a->ln1, N * C, float);
  COHORT_ACT_TAKE(k, a->rstd1, N, float);
  if (s->qk_norm) {
    COHORT_ACT_TAKE(k, a->q_pre, N * Q, float);
    COHORT_ACT_TAKE(k, a->k_pre, N * KV, float);
    COHORT_ACT_TAKE(k, a->q_rstd, N * s->n_head, float);
    COHORT_ACT_TAKE(k, a->k_rstd, N * s->n_kv_head, float);
  }
  COHORT_ACT_TAKE(k, a->q, N * Q, float);
  COHORT_ACT_TAKE(k, a->k, N * KV, float);
  COHORT_ACT_TAKE(k, a->v, N * KV, float);
  COHORT_ACT_TAKE(k, a->att, N * Q, float);
  COHORT_ACT_TAKE(k, a->lse, N * s->n_head, float);
  COHORT_ACT_TAKE(k, a->res_mid, N * C, float);
  COHORT_ACT_TAKE(k, a->ln2, N * C, float);
  COHORT_ACT_TAKE(k, a->rstd2, N, float);
  COHORT_ACT_TAKE(k, a->gate, N * I, float);
  COHORT_ACT_TAKE(k, a->up, N * I, float);
  COHORT_ACT_TAKE(k, a->res_out, N * C, float);
}

size_t cohort_family_llama_layout(CohortLlamaActs *a, const CohortLlamaShape *s, int max_batch,
                                  CohortActKeep keep, char *base)
{
  gboolean forward_only = keep == COHORT_ACTS_FORWARD;
  size_t N = (size_t)max_batch * s->seq_len, C = s->hidden, V = s->vocab_size;
  size_t Q = (size_t)s->n_head * s->head_dim, KV = (size_t)s->n_kv_head * s->head_dim;
  size_t I = s->intermediate, half = s->head_dim / 2;
  CohortActCarver k = {.base = base};
  COHORT_ACT_TAKE(&k, a->rope_cos, (size_t)s->seq_len * half, float);
  COHORT_ACT_TAKE(&k, a->rope_sin, (size_t)s->seq_len * half, float);
  COHORT_ACT_TAKE(&k, a->tokens, N, int);
  COHORT_ACT_TAKE(&k, a->targets, N, int);
  COHORT_ACT_TAKE(&k, a->embedded, N * C, float);
  CohortLlamaBlockActs counted;
  for (int l = 0; l < s->n_layer; l++) {
    CohortLlamaBlockActs *b = a->blocks ? &a->blocks[l] : &counted;
    if (keep != COHORT_ACTS_ALL && l > 0) {
      *b = a->blocks ? a->blocks[0] : counted;
      if (keep == COHORT_ACTS_CHECKPOINT)
        COHORT_ACT_TAKE(&k, b->res_out, N * C, float);
      continue;
    }
    take_block(&k, b, s, N);
  }
  COHORT_ACT_TAKE(&k, a->h, N * I, float);
  COHORT_ACT_TAKE(&k, a->lnf, N * C, float);
  COHORT_ACT_TAKE(&k, a->rstdf, N, float);
  COHORT_ACT_TAKE(&k, a->logits, N * V, float);
  COHORT_ACT_TAKE(&k, a->lse, N, float);
  COHORT_ACT_TAKE(&k, a->losses, N, float);
  if (forward_only)
    return k.used;
  COHORT_ACT_TAKE(&k, a->dres, N * C, float);
  COHORT_ACT_TAKE(&k, a->dln, N * C, float);
  COHORT_ACT_TAKE(&k, a->dq, N * Q, float);
  COHORT_ACT_TAKE(&k, a->dk, N * KV, float);
  COHORT_ACT_TAKE(&k, a->dv, N * KV, float);
  COHORT_ACT_TAKE(&k, a->datt, N * Q, float);
  if (s->qk_norm)
    COHORT_ACT_TAKE(&k, a->dk_pre, N * KV, float);
  COHORT_ACT_TAKE(&k, a->dgate, N * I, float);
  COHORT_ACT_TAKE(&k, a->dup, N * I, float);
  COHORT_ACT_TAKE(&k, a->dlogits, N * V, float);
  return k.used;
}

/* The rules that need only the config. */
static gboolean llama_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  CohortLlamaShape s = cohort_family_llama_shape(cfg);
  const char *src = source ? source : "config";
  if (cfg->head_dim == 0 && cfg->n_embd % cfg->n_head != 0)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"head_dim\": 0 (n_embd / n_head) is not allowed with n_embd %d "
                       "and n_head %d, which do not divide; allowed: an explicit head_dim",
                       src, cfg->n_embd, cfg->n_head);
  if (cfg->num_key_value_heads > cfg->n_head)
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "%s: key \"num_key_value_heads\": %d is more than n_head %d; allowed: 0 "
                       "(as many as n_head) or a divisor of n_head",
                       src, cfg->num_key_value_heads, cfg->n_head);
  return cohort_family_llama_check_shape(&s, COHORT_LLAMA_NAMES_CONFIG, src, error);
}

static gboolean llama_tables(const CohortConfig *cfg, CohortFamilyTables *out)
{
  *out = (CohortFamilyTables){0};
  CohortLlamaShape s = cohort_family_llama_shape(cfg);
  if (!cohort_family_llama_check_shape(&s, COHORT_LLAMA_NAMES_CONFIG, NULL, NULL))
    return FALSE;
  cohort_family_llama_tables(&s, out);
  return TRUE;
}

static size_t llama_act_bytes(const CohortConfig *cfg, int max_batch, gboolean forward_only)
{
  CohortLlamaShape s = cohort_family_llama_shape(cfg);
  if (!cohort_family_llama_check_shape(&s, COHORT_LLAMA_NAMES_CONFIG, NULL, NULL))
    return 0;
  CohortLlamaActs a = {0};
  return cohort_family_llama_layout(&a, &s, max_batch, cohort_family_act_keep(cfg, forward_only),
                                    NULL);
}

/* engine/models/llama-forward.c: a projection's weight is [out, in]; forward multiplies x
 * [N, in] by its transpose, backward the output's gradient dy [N, out] by it (the input's
 * gradient) and by x (its own); the head is [V, C] (the logits' gradient [N, V] first in
 * backward). LoRA's products are no larger (rank < hidden). */
static void llama_gemm_operands(const CohortConfig *cfg, int max_batch, size_t *a, size_t *b)
{
  CohortLlamaShape s = cohort_family_llama_shape(cfg);
  if (!cohort_family_llama_check_shape(&s, COHORT_LLAMA_NAMES_CONFIG, NULL, NULL))
    return;
  size_t N = (size_t)max_batch * s.seq_len, C = s.hidden, I = s.intermediate;
  size_t Q = (size_t)s.n_head * s.head_dim, V = s.vocab_size;
  size_t in = MAX(MAX(C, Q), I); /* the widest input: o_proj's Q, down_proj's I */
  *a = N * MAX(MAX(V, in), (size_t)s.n_kv_head * s.head_dim);
  *b = MAX(MAX(V * C, MAX(Q * C, I * C)), N * in);
}

const CohortFamilyDesc cohort_family_llama = {
    .name = "llama",
    .lora_targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
    .init_from_folder = TRUE,
    .check_config = llama_check_config,
    .tables = llama_tables,
    .act_bytes = llama_act_bytes,
    .gemm_operands = llama_gemm_operands,
    .activation_checkpointing = TRUE,
};
