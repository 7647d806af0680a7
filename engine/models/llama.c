/* The Llama family: its tensor table, activations, initialisation and model interface. Forward
 * and backward are in llama-forward.c. */
#include "engine/models/llama-private.h"

#include <math.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/model/distill.h"
#include "engine/model/rng.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-llama-error-quark, cohort_llama_error)
/* clang-format on */
#define LLAMA_ERROR cohort_llama_error_quark()

static const char *const block_names[LB_COUNT] = {
    "input_layernorm.weight",  "self_attn.q_proj.weight", "self_attn.q_proj.bias",
    "self_attn.k_proj.weight", "self_attn.k_proj.bias",   "self_attn.v_proj.weight",
    "self_attn.v_proj.bias",   "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "self_attn.o_proj.weight", "self_attn.o_proj.bias",   "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
};

static const CohortModelOps llama_ops;

gboolean cohort_is_llama(const CohortModel *m)
{
  return m && m->klass == &cohort_llama_class;
}

const CohortLlamaShape *cohort_llama_shape(const CohortModel *m)
{
  g_return_val_if_fail(cohort_is_llama(m), NULL);
  return &llama_of(m)->shape;
}

gboolean cohort_llama_check_shape(const CohortLlamaShape *s, GError **error)
{
  const struct {
    const char *name;
    int value, min, max;
  } f[] = {
      {"num_hidden_layers", s->n_layer, 1, 1024},
      {"hidden_size", s->hidden, 1, 65536},
      {"intermediate_size", s->intermediate, 1, 1 << 20},
      {"num_attention_heads", s->n_head, 1, 1024},
      {"num_key_value_heads", s->n_kv_head, 1, 1024},
      {"head_dim", s->head_dim, 2, 1024},
      {"vocab_size", s->vocab_size, 1, 1 << 24},
      {"seq_len", s->seq_len, 1, 1 << 20},
  };
  for (guint i = 0; i < G_N_ELEMENTS(f); i++)
    if (f[i].value < f[i].min || f[i].value > f[i].max)
      return cohort_fail(error, LLAMA_ERROR, 0,
                         "llama model: %s is %d; allowed: an integer from %d to %d", f[i].name,
                         f[i].value, f[i].min, f[i].max);
  if (s->n_head % s->n_kv_head != 0)
    return cohort_fail(error, LLAMA_ERROR, 0,
                       "llama model: num_attention_heads %d is not a multiple of "
                       "num_key_value_heads %d; allowed: key/value heads dividing the heads",
                       s->n_head, s->n_kv_head);
  if (s->head_dim % 2 != 0)
    return cohort_fail(error, LLAMA_ERROR, 0,
                       "llama model: head_dim is %d; allowed: an even number (rotary embeddings "
                       "rotate pairs)",
                       s->head_dim);
  if (!(s->rms_eps > 0.0 && s->rms_eps < 1.0))
    return cohort_fail(error, LLAMA_ERROR, 0,
                       "llama model: rms_norm_eps is %g; allowed: a number in (0, 1)", s->rms_eps);
  const CohortRope *r = &s->rope;
  if (!(r->theta > 1.0 && isfinite(r->theta)))
    return cohort_fail(error, LLAMA_ERROR, 0,
                       "llama model: rope_theta is %g; allowed: a finite number above 1", r->theta);
  if (r->type != COHORT_ROPE_DEFAULT && !(r->factor >= 1.0 && isfinite(r->factor)))
    return cohort_fail(error, LLAMA_ERROR, 0,
                       "llama model: rope_scaling factor is %g; allowed: a finite number >= 1",
                       r->factor);
  if (r->type == COHORT_ROPE_LLAMA3 &&
      !(r->low_freq_factor > 0.0 && r->high_freq_factor > r->low_freq_factor &&
        isfinite(r->high_freq_factor) && r->original_max_positions > 0))
    return cohort_fail(error, LLAMA_ERROR, 0,
                       "llama model: rope_scaling llama3 has low_freq_factor %g, high_freq_factor "
                       "%g, original_max_position_embeddings %d; allowed: 0 < low < high and a "
                       "positive original length",
                       r->low_freq_factor, r->high_freq_factor, r->original_max_positions);
  return TRUE;
}

static void add(GArray *arr, char *name, int d0, int d1, int layer, int adapt, size_t *off)
{
  CohortTensorInfo t = {.name = name, .ndim = d1 > 0 ? 2 : 1, .layer = layer, .offset = *off};
  t.shape[0] = d0;
  t.shape[1] = d1 > 0 ? d1 : 0;
  t.numel = (size_t)d0 * (d1 > 0 ? d1 : 1);
  /* Weight decay on the matrices and the embedding, not on norms or biases. */
  t.decay = t.ndim == 2;
  t.adapt = adapt;
  *off += t.numel;
  g_array_append_val(arr, t);
}

/* Which block tensors a shape has: slot[] and per_block. */
static void choose_slots(Llama *m)
{
  const CohortLlamaShape *s = &m->shape;
  int n = 0;
  for (int p = 0; p < LB_COUNT; p++) {
    gboolean have = TRUE;
    if (p == LB_Q_B || p == LB_K_B || p == LB_V_B)
      have = s->qkv_bias;
    else if (p == LB_O_B)
      have = s->o_bias;
    else if (p == LB_Q_NORM || p == LB_K_NORM)
      have = s->qk_norm;
    m->slot[p] = have ? n++ : -1;
  }
  m->per_block = n;
}

static void build_table(Llama *m)
{
  const CohortLlamaShape *s = &m->shape;
  int C = s->hidden, Q = s->n_head * s->head_dim, KV = s->n_kv_head * s->head_dim;
  int I = s->intermediate, hd = s->head_dim;
  const int L = COHORT_ADAPT_LINEAR, N = COHORT_ADAPT_NONE;
  const int dims[LB_COUNT][3] = {
      {C, 0, N},  {Q, C, L}, {Q, 0, N}, {KV, C, L}, {KV, 0, N}, {KV, C, L}, {KV, 0, N}, {hd, 0, N},
      {hd, 0, N}, {C, Q, L}, {C, 0, N}, {C, 0, N},  {I, C, L},  {I, C, L},  {C, I, L},
  };
  choose_slots(m);
  GArray *arr = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  size_t off = 0;
  add(arr, g_strdup("model.embed_tokens.weight"), s->vocab_size, C, -1, N, &off);
  for (int l = 0; l < s->n_layer; l++)
    for (int p = 0; p < LB_COUNT; p++)
      if (m->slot[p] >= 0)
        add(arr, g_strdup_printf("model.layers.%d.%s", l, block_names[p]), dims[p][0], dims[p][1],
            l, dims[p][2], &off);
  /* the final norm and a separate head are one layer after the blocks */
  add(arr, g_strdup("model.norm.weight"), C, 0, s->n_layer, N, &off);
  if (!s->tied)
    add(arr, g_strdup("lm_head.weight"), s->vocab_size, C, s->n_layer, N, &off);
  m->base.n_tensors = arr->len;
  m->base.tensors = (CohortTensorInfo *)g_array_free(arr, FALSE);
  m->base.n_params = off;
}

/* Carves the activations out of one allocation: the first pass (base NULL) only counts. */
static size_t layout_acts(Llama *m, char *base)
{
  const CohortLlamaShape *s = &m->shape;
  size_t B = (size_t)m->base.max_batch, N = B * s->seq_len, C = s->hidden, V = s->vocab_size;
  size_t Q = (size_t)s->n_head * s->head_dim, KV = (size_t)s->n_kv_head * s->head_dim;
  size_t I = s->intermediate, half = s->head_dim / 2;
  size_t used = 0;
#define TAKE(ptr, count, type)                                                                     \
  do {                                                                                             \
    size_t bytes_ = ((count) * sizeof(type) + 63) / 64 * 64;                                       \
    if (base)                                                                                      \
      (ptr) = (type *)(base + used);                                                               \
    used += bytes_;                                                                                \
  } while (0)
  TAKE(m->rope_cos, (size_t)s->seq_len * half, float);
  TAKE(m->rope_sin, (size_t)s->seq_len * half, float);
  TAKE(m->tokens, N, int);
  TAKE(m->targets, N, int);
  TAKE(m->embedded, N * C, float);
  for (int l = 0; l < s->n_layer; l++) {
    LlamaBlockActs *a = &m->blocks[l];
    if (m->forward_only && l > 0) {
      *a = m->blocks[0];
      continue;
    }
    TAKE(a->ln1, N * C, float);
    TAKE(a->rstd1, N, float);
    if (s->qk_norm) {
      TAKE(a->q_pre, N * Q, float);
      TAKE(a->k_pre, N * KV, float);
      TAKE(a->q_rstd, N * s->n_head, float);
      TAKE(a->k_rstd, N * s->n_kv_head, float);
    }
    TAKE(a->q, N * Q, float);
    TAKE(a->k, N * KV, float);
    TAKE(a->v, N * KV, float);
    TAKE(a->att, N * Q, float);
    TAKE(a->lse, N * s->n_head, float);
    TAKE(a->res_mid, N * C, float);
    TAKE(a->ln2, N * C, float);
    TAKE(a->rstd2, N, float);
    TAKE(a->gate, N * I, float);
    TAKE(a->up, N * I, float);
    TAKE(a->res_out, N * C, float);
  }
  TAKE(m->h, N * I, float);
  TAKE(m->lnf, N * C, float);
  TAKE(m->rstdf, N, float);
  TAKE(m->logits, N * V, float);
  TAKE(m->lse, N, float);
  TAKE(m->losses, N, float);
  if (!m->forward_only) {
    TAKE(m->dres, N * C, float);
    TAKE(m->dln, N * C, float);
    TAKE(m->dq, N * Q, float);
    TAKE(m->dk, N * KV, float);
    TAKE(m->dv, N * KV, float);
    TAKE(m->datt, N * Q, float);
    if (s->qk_norm)
      TAKE(m->dk_pre, N * KV, float);
    TAKE(m->dgate, N * I, float);
    TAKE(m->dup, N * I, float);
    TAKE(m->dlogits, N * V, float);
  }
#undef TAKE
  return used;
}

static void llama_finalize(CohortModel *base)
{
  Llama *m = llama_of(base);
  if (base->be)
    base->be->free(m->act_mem);
  g_free(m->blocks);
  g_free(m->host_losses);
  g_free(m);
}

static const CohortMetric llama_metrics[] = {{COHORT_FIELD_VAL_LOSS, 0, 1}};

CohortModel *cohort_llama_new_on(const CohortBackend *be, const CohortLlamaShape *shape,
                                 int max_batch, GError **error)
{
  g_return_val_if_fail(be != NULL && shape != NULL, NULL);
  if (!cohort_llama_check_shape(shape, error))
    return NULL;
  if (max_batch < 1 || max_batch > (1 << 20)) {
    cohort_fail(error, LLAMA_ERROR, 0,
                "llama model: max_batch is %d; allowed: an integer from 1 "
                "to %d",
                max_batch, 1 << 20);
    return NULL;
  }
  Llama *m = g_new0(Llama, 1);
  CohortModel *base = &m->base;
  base->klass = &cohort_llama_class;
  base->ops = &llama_ops;
  base->be = be;
  base->max_batch = max_batch;
  /* sums: loss × positions, positions */
  base->metrics = llama_metrics;
  base->n_metrics = G_N_ELEMENTS(llama_metrics);
  base->n_sums = 2;
  m->shape = *shape;
  m->forward_only = cohort_model_creating_frozen();
  build_table(m);
  base->lora_rows = (size_t)max_batch * shape->seq_len;
  m->blocks = g_new0(LlamaBlockActs, shape->n_layer);
  size_t act_bytes = layout_acts(m, NULL);
  m->act_mem = be->alloc(act_bytes);
  m->host_losses = g_try_new(float, (size_t)max_batch * shape->seq_len);
  GError *local = NULL;
  if (!cohort_model_alloc_tables(base, &local) && local->domain == COHORT_CONFIG_ERROR) {
    g_propagate_error(error, local); /* the fine-tuning keys do not fit the model */
    cohort_model_free(base);
    return NULL;
  }
  g_clear_error(&local);
  if (!base->params || (!m->forward_only && !base->grads) || !m->act_mem || !m->host_losses) {
    g_set_error(error, LLAMA_ERROR, 1,
                "llama model: out of %s memory for %zu parameters and %.1f MiB of activations "
                "(max_batch %d, seq_len %d); allowed: a smaller model or batch",
                be->name, base->n_params, act_bytes / 1048576.0, max_batch, shape->seq_len);
    cohort_model_free(base);
    return NULL;
  }
  layout_acts(m, m->act_mem);
  base->act_bytes = act_bytes;
  size_t table = (size_t)shape->seq_len * (shape->head_dim / 2);
  float *host = g_new(float, 2 * table);
  cohort_rope_tables(&shape->rope, shape->head_dim, shape->seq_len, host, host + table);
  be->upload(m->rope_cos, host, table * sizeof(float));
  be->upload(m->rope_sin, host + table, table * sizeof(float));
  g_free(host);
  return base;
}

/* N(0, stddev) by Box-Muller from one stream per tensor. */
static void fill_normal(float *dst, size_t n, double stddev, guint64 seed)
{
  guint64 st = seed;
  for (size_t i = 0; i < n; i += 2) {
    /* 53 random bits in (0, 1]: never 0, so the log is finite */
    double u1 = ((cohort_rng_next(&st) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double u2 = cohort_rng_uniform(&st);
    double r = sqrt(-2.0 * log(u1)) * stddev;
    dst[i] = (float)(r * cos(2.0 * G_PI * u2));
    if (i + 1 < n)
      dst[i + 1] = (float)(r * sin(2.0 * G_PI * u2));
  }
}

/* Hugging Face's _init_weights for these models (initializer_range 0.02): matrices and the
 * embedding N(0, 0.02), biases 0, RMSNorm weights 1. */
static void llama_init_tensor(CohortModel *base, guint64 seed, guint i, float *dst)
{
  const CohortTensorInfo *t = &base->tensors[i];
  memset(dst, 0, t->numel * sizeof(float));
  if (t->ndim == 2)
    fill_normal(dst, t->numel, 0.02, cohort_rng_tensor_seed(seed, i));
  else if (g_str_has_suffix(t->name, "norm.weight"))
    for (size_t k = 0; k < t->numel; k++)
      dst[k] = 1.0f;
}

static void llama_init(CohortModel *base, guint64 seed)
{
  float *host = g_new0(float, base->n_params);
  for (guint i = 0; i < base->n_tensors; i++)
    llama_init_tensor(base, seed, i, host + base->tensors[i].offset);
  base->be->upload(base->params, host, base->n_params * sizeof(float));
  g_free(host);
}

static void llama_init_buffers(CohortModel *base)
{
  (void)base; /* none: the rotary tables are derived from the shape, never saved */
}

static gboolean tokens_valid(const int *tok, size_t n, int vocab)
{
  for (size_t i = 0; i < n; i++)
    if (tok[i] < 0 || tok[i] >= vocab)
      return FALSE;
  return TRUE;
}

float cohort_llama_forward(CohortModel *base, const int *inputs, const int *targets, int B, int T)
{
  Llama *m = llama_of(base);
  g_return_val_if_fail(cohort_is_llama(base), NAN);
  g_return_val_if_fail(B >= 1 && B <= base->max_batch, NAN);
  g_return_val_if_fail(T >= 1 && T <= m->shape.seq_len, NAN);
  size_t n = (size_t)B * T;
  g_return_val_if_fail(tokens_valid(inputs, n, m->shape.vocab_size), NAN);
  g_return_val_if_fail(!targets || tokens_valid(targets, n, m->shape.vocab_size), NAN);
  const CohortBackend *be = base->be;
  be->upload(m->tokens, inputs, n * sizeof(int));
  cohort_llama_net_forward(m, B, T);
  m->last_B = B;
  m->last_T = T;
  m->have_targets = targets != NULL;
  if (!targets)
    return 0.0f;
  be->upload(m->targets, targets, n * sizeof(int));
  be->crossentropy_forward(m->losses, m->lse, m->logits, m->targets, (int)n, m->shape.vocab_size);
  return cohort_model_mean_loss(base, m->losses, n, m->host_losses);
}

const float *cohort_llama_logits(const CohortModel *base)
{
  return llama_of(base)->logits;
}

double cohort_llama_flops_per_token(const CohortLlamaShape *s, int T)
{
  double C = s->hidden, Q = (double)s->n_head * s->head_dim;
  double KV = (double)s->n_kv_head * s->head_dim, I = s->intermediate;
  /* every weight a token passes through (the head once, tied or not), then QK^T and AV over
   * T/2 keys on average (causal) */
  double per_layer = C * Q + 2.0 * C * KV + Q * C + 3.0 * C * I;
  double matmul = s->n_layer * per_layer + (double)s->vocab_size * C;
  double attn = s->n_layer * 2.0 * Q * (T / 2.0);
  return 6.0 * (matmul + attn);
}

/* ---- the model interface ---- */

static float llama_forward_batch(CohortModel *base, const CohortBatch *b, CohortForwardMode mode)
{
  (void)mode; /* no layer behaves differently in evaluation */
  return cohort_llama_forward(base, b->inputs, b->targets, b->B, b->T);
}

static void llama_backward(CohortModel *base, float grad_scale)
{
  cohort_llama_backward_logits(base, grad_scale, 1.0f, NULL, NULL);
}

static void llama_eval_batch(CohortModel *base, const CohortBatch *b, double *sums)
{
  float loss = cohort_llama_forward(base, b->inputs, b->targets, b->B, b->T);
  double positions = (double)b->B * b->T;
  sums[0] += (double)loss * positions;
  sums[1] += positions;
}

static double llama_flops_per_example(const CohortModel *base)
{
  int T = llama_of(base)->shape.seq_len;
  return cohort_llama_flops_per_token(&llama_of(base)->shape, T) * T;
}

static const float *llama_logits(const CohortModel *base, int *rows, int *classes)
{
  const Llama *m = llama_of(base);
  *rows = m->last_B * m->last_T;
  *classes = m->shape.vocab_size;
  return m->logits;
}

static const CohortModelOps llama_ops = {
    .forward = llama_forward_batch,
    .backward = llama_backward,
    .init_weights = llama_init,
    .init_tensor = llama_init_tensor,
    .init_buffers = llama_init_buffers,
    .eval_batch = llama_eval_batch,
    .flops_per_example = llama_flops_per_example,
    .finalize = llama_finalize,
    .logits = llama_logits,
    .backward_logits = cohort_llama_backward_logits,
};

static const CohortDataFormat llama_formats[] = {COHORT_DATA_TEXT, COHORT_DATA_TOKENS};

const CohortModelClass cohort_llama_class = {
    .name = "llama",
    .title = "Llama-family decoder (Llama, Mistral, Qwen2, Qwen3)",
    .formats = llama_formats,
    .n_formats = G_N_ELEMENTS(llama_formats),
    .distill_new = cohort_logits_distill_new,
    .copies_blocks = TRUE,
    .lora_targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
    .lora_task_type = "CAUSAL_LM",
    .frozen_layout = TRUE,
};
