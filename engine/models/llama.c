/* The Llama family: its tensor table, activations, initialisation and model interface. Forward
 * and backward are in llama-forward.c. */
#include "engine/models/llama-private.h"

#include <math.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/model/distill.h"
#include "engine/model/rng.h"
#include "engine/models/llama-generate.h"
#include "engine/models/llama-io.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-llama-error-quark, cohort_llama_error)
/* clang-format on */
#define LLAMA_ERROR cohort_llama_error_quark()

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
  return cohort_family_llama_check_shape(s, COHORT_LLAMA_NAMES_HF, "llama model", error);
}

static void llama_finalize(CohortModel *base)
{
  Llama *m = llama_of(base);
  if (base->be)
    base->be->free(m->act_mem);
  g_free(m->acts.blocks);
  g_free(m->host_losses);
  g_free(m);
}

static const CohortMetric llama_metrics[] = {{COHORT_FIELD_VAL_LOSS, 0, 1}};

/* A model of `shape` whose activations keep what `keep` says (a frozen model keeps
 * COHORT_ACTS_FORWARD whatever is asked). */
static CohortModel *llama_new(const CohortBackend *be, const CohortLlamaShape *shape, int max_batch,
                              CohortActKeep keep, GError **error)
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
  if (m->forward_only)
    keep = COHORT_ACTS_FORWARD;
  m->checkpoint = keep == COHORT_ACTS_CHECKPOINT;
  m->acts_block = -1;
  m->per_block = cohort_family_llama_slots(shape, m->slot);
  CohortFamilyTables t;
  cohort_family_llama_tables(shape, &t);
  cohort_model_take_tables(base, &t);
  base->lora_rows = (size_t)max_batch * shape->seq_len;
  m->acts.blocks = g_new0(CohortLlamaBlockActs, shape->n_layer);
  size_t act_bytes = cohort_family_llama_layout(&m->acts, shape, max_batch, keep, NULL);
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
  cohort_family_llama_layout(&m->acts, shape, max_batch, keep, m->act_mem);
  base->act_bytes = act_bytes;
  size_t table = (size_t)shape->seq_len * (shape->head_dim / 2);
  float *host = g_new(float, 2 * table);
  cohort_rope_tables(&shape->rope, shape->head_dim, shape->seq_len, host, host + table);
  be->upload(m->acts.rope_cos, host, table * sizeof(float));
  be->upload(m->acts.rope_sin, host + table, table * sizeof(float));
  g_free(host);
  return base;
}

CohortModel *cohort_llama_new_on(const CohortBackend *be, const CohortLlamaShape *shape,
                                 int max_batch, GError **error)
{
  return llama_new(be, shape, max_batch, COHORT_ACTS_ALL, error);
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

/* Every id in [lowest, vocab): inputs from 0, targets from -1 (COHORT_TARGET_IGNORED). */
static gboolean tokens_valid(const int *tok, size_t n, int vocab, int lowest)
{
  for (size_t i = 0; i < n; i++)
    if (tok[i] < lowest || tok[i] >= vocab)
      return FALSE;
  return TRUE;
}

float cohort_llama_forward(CohortModel *base, const int *inputs, const int *targets, int B, int T)
{
  return cohort_llama_forward_norm(base, inputs, targets, B, T, 0);
}

float cohort_llama_forward_norm(CohortModel *base, const int *inputs, const int *targets, int B,
                                int T, double loss_norm)
{
  Llama *m = llama_of(base);
  g_return_val_if_fail(cohort_is_llama(base), NAN);
  g_return_val_if_fail(B >= 1 && B <= base->max_batch, NAN);
  g_return_val_if_fail(T >= 1 && T <= m->shape.seq_len, NAN);
  size_t n = (size_t)B * T;
  g_return_val_if_fail(tokens_valid(inputs, n, m->shape.vocab_size, 0), NAN);
  g_return_val_if_fail(!targets || tokens_valid(targets, n, m->shape.vocab_size, -1), NAN);
  const CohortBackend *be = base->be;
  be->upload(m->acts.tokens, inputs, n * sizeof(int));
  cohort_llama_net_forward(m, B, T);
  m->last_B = B;
  m->last_T = T;
  m->have_targets = targets != NULL;
  if (!targets)
    return 0.0f;
  be->upload(m->acts.targets, targets, n * sizeof(int));
  be->crossentropy_forward(m->acts.losses, m->acts.lse, m->acts.logits, m->acts.targets, (int)n,
                           m->shape.vocab_size);
  m->loss_div = cohort_batch_loss_div(targets, n, loss_norm, &m->counted);
  return cohort_model_loss_over(base, m->acts.losses, n, m->loss_div, m->host_losses);
}

const float *cohort_llama_logits(const CohortModel *base)
{
  return llama_of(base)->acts.logits;
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
  return cohort_llama_forward_norm(base, b->inputs, b->targets, b->B, b->T, b->loss_norm);
}

static void llama_backward(CohortModel *base, float grad_scale)
{
  cohort_llama_backward_logits(base, grad_scale, 1.0f, NULL, NULL);
}

static void llama_eval_batch(CohortModel *base, const CohortBatch *b, double *sums)
{
  float loss = cohort_llama_forward(base, b->inputs, b->targets, b->B, b->T);
  /* the mean over the counted targets (every one, but for chat data's) */
  double counted = (double)llama_of(base)->counted;
  sums[0] += (double)loss * counted;
  sums[1] += counted;
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
  return m->acts.logits;
}

static const CohortModelOps llama_ops = {
    .forward = llama_forward_batch,
    .backward = llama_backward,
    .init_weights = llama_init,
    .init_tensor = llama_init_tensor,
    .init_buffers = llama_init_buffers,
    .eval_batch = llama_eval_batch,
    .sample = cohort_llama_sample,
    .flops_per_example = llama_flops_per_example,
    .finalize = llama_finalize,
    .logits = llama_logits,
    .backward_logits = cohort_llama_backward_logits,
};

static CohortModel *llama_create(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                                 GError **error)
{
  CohortLlamaShape shape = cohort_family_llama_shape(cfg);
  return llama_new(be, &shape, max_batch, cohort_family_act_keep(cfg, FALSE), error);
}

static const CohortDataFormat llama_formats[] = {COHORT_DATA_TEXT, COHORT_DATA_TOKENS,
                                                 COHORT_DATA_CHAT};

const CohortModelClass cohort_llama_class = {
    .name = "llama",
    .title = "Llama-family decoder (Llama, Mistral, Qwen2, Qwen3)",
    .formats = llama_formats,
    .n_formats = G_N_ELEMENTS(llama_formats),
    .family = &cohort_family_llama,
    .create = llama_create,
    .import_weights = cohort_llama_import,
    .import_file = cohort_llama_import_file,
    .export_extra = cohort_llama_export_extra,
    .distill_new = cohort_logits_distill_new,
    .copies_blocks = TRUE,
    .lora_task_type = "CAUSAL_LM",
    .frozen_layout = TRUE,
};
