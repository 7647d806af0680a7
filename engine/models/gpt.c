/* The GPT-2-style model over the backend table (kernels/backend.h). Forward and backward are
 * written per layer by hand; activations for max_batch sequences are allocated once, so a
 * training step allocates nothing. */
#include "engine/models/gpt.h"
#include "engine/base/error.h"
#include "engine/model/rng.h"

#include "engine/model/distill.h"
#include "engine/model/lora.h"
#include "engine/models/gpt-generate.h"
#include "engine/models/gpt-io.h"
#include "kernels/backend.h"

#include <math.h>
#include <string.h>

#define GPT_LN_EPS 1e-5f /* GPT-2's LayerNorm epsilon */

/* Offsets of one block's tensors, in the order of HF GPT-2's state dict. */
enum {
  P_LN1_W,
  P_LN1_B,
  P_ATTN_W,
  P_ATTN_B,
  P_ATTN_PROJ_W,
  P_ATTN_PROJ_B,
  P_LN2_W,
  P_LN2_B,
  P_FC_W,
  P_FC_B,
  P_FC_PROJ_W,
  P_FC_PROJ_B,
  P_BLOCK_COUNT
};

static const char *const block_names[P_BLOCK_COUNT] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias",
};

/* What one block keeps from forward for backward, each [B*T, width]. */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd;
  float *qkv;
  float *atty, *att_lse;
  float *res2;
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu;
  float *res3;
} BlockActs;

/* The family's model: the shared base first, so a CohortModel * is a Gpt *. */
typedef struct {
  CohortModel base;
  CohortGptShape shape;

  /* activations */
  void *act_mem;
  int *tokens, *targets;
  float *encoded;
  BlockActs *blocks;
  float *lnf, *lnf_mean, *lnf_rstd;
  float *logits, *lse, *losses;
  float *host_losses;
  /* backward scratch */
  float *dres, *dln, *dqkv, *datty, *dfch, *dlogits;

  int last_B, last_T;
  gboolean have_targets;
  /* A frozen model (a distillation teacher): no backward scratch, and every block writes the
   * same activation buffers (a block reads its input before it overwrites them). */
  gboolean forward_only;
} Gpt;

static const CohortModelOps gpt_ops;

gboolean cohort_is_gpt(const CohortModel *m)
{
  return m && m->klass == &cohort_gpt_class;
}

static Gpt *gpt_of(const CohortModel *m)
{
  g_return_val_if_fail(cohort_is_gpt(m), NULL);
  return (Gpt *)m;
}

/* Errors of cohort_gpt_new: 0 = invalid shape, 1 = out of memory. */
#define GPT_ERROR g_quark_from_static_string("cohort-gpt-error")

static CohortTensorInfo *add_tensor(GArray *arr, char *name, int d0, int d1, int layer,
                                    size_t *offset)
{
  CohortTensorInfo t = {0};
  t.name = name;
  t.ndim = d1 > 0 ? 2 : 1;
  t.shape[0] = d0;
  t.shape[1] = d1 > 0 ? d1 : 0;
  t.numel = (size_t)d0 * (d1 > 0 ? d1 : 1);
  t.offset = *offset;
  t.decay = t.ndim == 2;
  t.layer = layer;
  *offset += t.numel;
  g_array_append_val(arr, t);
  return &g_array_index(arr, CohortTensorInfo, arr->len - 1);
}

static void build_table(Gpt *gpt)
{
  const CohortGptShape *s = &gpt->shape;
  int C = s->n_embd;
  GArray *arr = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  size_t off = 0;
  add_tensor(arr, g_strdup("wte.weight"), s->vocab_size, C, -1, &off);
  add_tensor(arr, g_strdup("wpe.weight"), s->seq_len, C, -1, &off);
  for (int l = 0; l < s->n_layer; l++) {
    const int dims[P_BLOCK_COUNT][2] = {
        {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
        {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0},
    };
    for (int p = 0; p < P_BLOCK_COUNT; p++) {
      CohortTensorInfo *t = add_tensor(arr, g_strdup_printf("h.%d.%s", l, block_names[p]),
                                       dims[p][0], dims[p][1], l, &off);
      /* the four projections are HF's Conv1D: stored [in, out] */
      if (p == P_ATTN_W || p == P_ATTN_PROJ_W || p == P_FC_W || p == P_FC_PROJ_W)
        t->adapt = COHORT_ADAPT_CONV1D;
    }
  }
  add_tensor(arr, g_strdup("ln_f.weight"), C, 0, s->n_layer, &off);
  add_tensor(arr, g_strdup("ln_f.bias"), C, 0, s->n_layer, &off);
  gpt->base.n_tensors = arr->len;
  gpt->base.tensors = (CohortTensorInfo *)g_array_free(arr, FALSE);
  gpt->base.n_params = off;
}

/* The table index of block `l`'s tensor `p`. */
static guint bi(int l, int p)
{
  return 2 + (guint)l * P_BLOCK_COUNT + (guint)p;
}

/* Parameter pointer of block `l`, tensor `p`. */
static float *bp(const Gpt *gpt, float *base, int l, int p)
{
  return base + gpt->base.tensors[bi(l, p)].offset;
}

/* Its gradient, or NULL when it is frozen (engine/model/finetune.h). */
static float *bg(const Gpt *gpt, int l, int p)
{
  return cohort_model_grad(&gpt->base, bi(l, p));
}

static gboolean check_shape(const CohortGptShape *s, int max_batch, GError **error)
{
  struct {
    const char *name;
    int value, min, max;
  } f[] = {
      {"n_layer", s->n_layer, 1, 1024},          {"n_head", s->n_head, 1, 1024},
      {"n_embd", s->n_embd, 1, 65536},           {"seq_len", s->seq_len, 1, 1 << 20},
      {"vocab_size", s->vocab_size, 1, 1 << 24}, {"max_batch", max_batch, 1, 1 << 20},
  };
  for (guint i = 0; i < G_N_ELEMENTS(f); i++) {
    if (f[i].value < f[i].min || f[i].value > f[i].max) {
      g_set_error(error, GPT_ERROR, 0, "GPT model: %s is %d; allowed: an integer from %d to %d",
                  f[i].name, f[i].value, f[i].min, f[i].max);
      return FALSE;
    }
  }
  if (s->n_embd % s->n_head != 0) {
    g_set_error(error, GPT_ERROR, 0,
                "GPT model: n_embd %d is not a multiple of n_head %d; allowed: n_embd "
                "divisible by n_head",
                s->n_embd, s->n_head);
    return FALSE;
  }
  return TRUE;
}

/* Carves the activation buffers out of one allocation: two passes, the first only counts. */
static size_t layout_acts(Gpt *gpt, char *base)
{
  const CohortGptShape *s = &gpt->shape;
  size_t N = (size_t)gpt->base.max_batch * s->seq_len;
  size_t C = s->n_embd, V = s->vocab_size, NH = s->n_head;
  size_t used = 0;
#define TAKE(ptr, count, type)                                                                     \
  do {                                                                                             \
    size_t bytes_ = ((count) * sizeof(type) + 63) / 64 * 64;                                       \
    if (base)                                                                                      \
      (ptr) = (type *)(base + used);                                                               \
    used += bytes_;                                                                                \
  } while (0)
  TAKE(gpt->tokens, N, int);
  TAKE(gpt->targets, N, int);
  TAKE(gpt->encoded, N * C, float);
  for (int l = 0; l < s->n_layer; l++) {
    BlockActs *a = &gpt->blocks[l];
    if (gpt->forward_only && l > 0) {
      *a = gpt->blocks[0];
      continue;
    }
    TAKE(a->ln1, N * C, float);
    TAKE(a->ln1_mean, N, float);
    TAKE(a->ln1_rstd, N, float);
    TAKE(a->qkv, N * 3 * C, float);
    TAKE(a->atty, N * C, float);
    TAKE(a->att_lse, N * NH, float);
    TAKE(a->res2, N * C, float);
    TAKE(a->ln2, N * C, float);
    TAKE(a->ln2_mean, N, float);
    TAKE(a->ln2_rstd, N, float);
    TAKE(a->fch, N * 4 * C, float);
    TAKE(a->fch_gelu, N * 4 * C, float);
    TAKE(a->res3, N * C, float);
  }
  TAKE(gpt->lnf, N * C, float);
  TAKE(gpt->lnf_mean, N, float);
  TAKE(gpt->lnf_rstd, N, float);
  TAKE(gpt->logits, N * V, float);
  TAKE(gpt->lse, N, float);
  TAKE(gpt->losses, N, float);
  if (!gpt->forward_only) {
    TAKE(gpt->dres, N * C, float);
    TAKE(gpt->dln, N * C, float);
    TAKE(gpt->dqkv, N * 3 * C, float);
    TAKE(gpt->datty, N * C, float);
    TAKE(gpt->dfch, N * 4 * C, float);
    TAKE(gpt->dlogits, N * V, float);
  }
#undef TAKE
  return used;
}

CohortGpt *cohort_gpt_new(const CohortGptShape *shape, int max_batch, GError **error)
{
  return cohort_gpt_new_on(cohort_backend_cpu(), shape, max_batch, error);
}

static void gpt_finalize(CohortModel *m)
{
  Gpt *gpt = (Gpt *)m;
  if (m->be)
    m->be->free(gpt->act_mem);
  g_free(gpt->blocks);
  g_free(gpt->host_losses);
  g_free(gpt);
}

static const CohortMetric gpt_metrics[] = {{COHORT_FIELD_VAL_LOSS, 0, 1}};

CohortGpt *cohort_gpt_new_on(const CohortBackend *be, const CohortGptShape *shape, int max_batch,
                             GError **error)
{
  g_return_val_if_fail(be != NULL && shape != NULL, NULL);
  if (!check_shape(shape, max_batch, error))
    return NULL;
  Gpt *gpt = g_new0(Gpt, 1);
  CohortModel *m = &gpt->base;
  m->klass = &cohort_gpt_class;
  m->ops = &gpt_ops;
  m->be = be;
  m->max_batch = max_batch;
  /* sums: loss × positions, positions */
  m->metrics = gpt_metrics;
  m->n_metrics = G_N_ELEMENTS(gpt_metrics);
  m->n_sums = 2;
  gpt->shape = *shape;
  gpt->forward_only = cohort_model_creating_frozen();
  build_table(gpt);
  m->lora_rows = (size_t)max_batch * shape->seq_len;
  gpt->blocks = g_new0(BlockActs, shape->n_layer);
  size_t act_bytes = layout_acts(gpt, NULL);
  gpt->act_mem = be->alloc(act_bytes);
  gpt->host_losses = g_try_new(float, (size_t)max_batch * shape->seq_len);
  GError *local = NULL;
  if (!cohort_model_alloc_tables(m, &local) && local->domain == COHORT_CONFIG_ERROR) {
    g_propagate_error(error, local); /* the fine-tuning keys do not fit the model */
    cohort_model_free(m);
    return NULL;
  }
  g_clear_error(&local);
  if (!m->params || (!gpt->forward_only && !m->grads) || !gpt->act_mem || !gpt->host_losses) {
    g_set_error(error, GPT_ERROR, 1,
                "GPT model: out of %s memory for %zu parameters and %.1f MiB of activations "
                "(max_batch %d, seq_len %d); allowed: a smaller model or batch",
                be->name, m->n_params, act_bytes / 1048576.0, max_batch, shape->seq_len);
    cohort_model_free(m);
    return NULL;
  }
  layout_acts(gpt, gpt->act_mem);
  m->act_bytes = act_bytes;
  return m;
}

void cohort_gpt_free(CohortGpt *gpt)
{
  cohort_model_free(gpt);
}

const CohortGptShape *cohort_gpt_shape(const CohortGpt *m)
{
  return &gpt_of(m)->shape;
}

size_t cohort_gpt_num_params(const CohortGpt *m)
{
  return m->n_params;
}

float *cohort_gpt_params(CohortGpt *m)
{
  return m->params;
}

float *cohort_gpt_grads(CohortGpt *m)
{
  return m->grads;
}

const CohortBackend *cohort_gpt_backend(const CohortGpt *m)
{
  return m->be;
}

gboolean cohort_gpt_on_host(const CohortGpt *m)
{
  return cohort_model_on_host(m);
}

void cohort_gpt_download_params(const CohortGpt *m, float *host)
{
  cohort_model_download_params(m, host);
}

void cohort_gpt_upload_params(CohortGpt *m, const float *host)
{
  cohort_model_upload_params(m, host);
}

void cohort_gpt_download_grads(const CohortGpt *m, float *host)
{
  m->be->download(host, m->grads, m->n_trainable * sizeof(float));
}

void cohort_gpt_upload_grads(CohortGpt *m, const float *host)
{
  m->be->upload(m->grads, host, m->n_trainable * sizeof(float));
}

const float *cohort_gpt_params_host(const CohortGpt *m, float **tmp)
{
  return cohort_model_params_host(m, tmp);
}

void cohort_gpt_download_logits(const CohortGpt *m, size_t offset, size_t count, float *host)
{
  const Gpt *gpt = gpt_of(m);
  m->be->download(host, gpt->logits + offset, count * sizeof(float));
}

const CohortTensorInfo *cohort_gpt_tensors(const CohortGpt *m, guint *n_tensors)
{
  if (n_tensors)
    *n_tensors = m->n_tensors;
  return m->tensors;
}

const CohortTensorInfo *cohort_gpt_find_tensor(const CohortGpt *m, const char *name)
{
  return cohort_model_find_tensor(m, name);
}

static double uniform01(guint64 *state)
{
  /* 53 random bits in (0, 1]: never 0, so log() below is finite */
  return ((cohort_rng_next(state) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static void fill_normal(float *dst, size_t n, double stddev, guint64 seed)
{
  guint64 st = seed;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = uniform01(&st), u2 = uniform01(&st);
    double r = sqrt(-2.0 * log(u1)) * stddev;
    dst[i] = (float)(r * cos(2.0 * G_PI * u2));
    if (i + 1 < n)
      dst[i + 1] = (float)(r * sin(2.0 * G_PI * u2));
  }
}

/* GPT-2's initialisation of tensor i: N(0, 0.02) matrices (the residual projections scaled by
 * 1/sqrt(2 n_layer)), LayerNorm weights 1, biases 0. */
static void gpt_init_tensor(CohortModel *m, guint64 seed, guint i, float *dst)
{
  Gpt *gpt = gpt_of(m);
  const double std = 0.02;
  const double proj_std = 0.02 / sqrt(2.0 * gpt->shape.n_layer);
  const CohortTensorInfo *t = &m->tensors[i];
  memset(dst, 0, t->numel * sizeof(float));
  if (t->ndim == 2) {
    gboolean proj = g_str_has_suffix(t->name, "c_proj.weight");
    fill_normal(dst, t->numel, proj ? proj_std : std, cohort_rng_tensor_seed(seed, i));
  } else if (g_str_has_suffix(t->name, "ln_1.weight") || g_str_has_suffix(t->name, "ln_2.weight") ||
             strcmp(t->name, "ln_f.weight") == 0) {
    for (size_t k = 0; k < t->numel; k++)
      dst[k] = 1.0f;
  }
}

void cohort_gpt_init_weights(CohortGpt *m, guint64 seed)
{
  size_t n = m->n_params;
  float *host = g_new0(float, n);
  for (guint i = 0; i < m->n_tensors; i++)
    gpt_init_tensor(m, seed, i, host + m->tensors[i].offset);
  m->be->upload(m->params, host, n * sizeof(float));
  g_free(host);
}

const float *cohort_gpt_logits(const CohortGpt *m)
{
  return gpt_of(m)->logits;
}

void cohort_gpt_zero_grad(CohortGpt *m)
{
  cohort_model_zero_grad(m);
}

void cohort_gpt_set_grad_ready_func(CohortGpt *m, CohortGradReadyFunc func, gpointer user_data)
{
  cohort_model_set_grad_ready_func(m, func, user_data);
}

static gboolean tokens_valid(const int *tok, size_t n, int vocab)
{
  for (size_t i = 0; i < n; i++)
    if (tok[i] < 0 || tok[i] >= vocab)
      return FALSE;
  return TRUE;
}

/* y [N, out] (beta 0: overwritten, 1: added to) += x [N, in] @ w [in, out] + b with block l's
 * weight p (HF Conv1D layout) and its bias p + 1, and the weight's LoRA adapter if any. */
static void linear_forward(Gpt *gpt, float *y, float beta, const float *x, int l, int p, int N,
                           int in, int out)
{
  const CohortBackend *be = gpt->base.be;
  float *P = gpt->base.params;
  be->gemm(0, 0, N, out, in, 1.0f, x, in, bp(gpt, P, l, p), out, beta, y, out);
  be->add_bias(y, bp(gpt, P, l, p + 1), N, out);
  cohort_lora_forward(&gpt->base, bi(l, p), y, x, N);
}

/* dx = dy @ w^T (overwrites), dw += x^T @ dy, db += colsum(dy) (frozen ones skipped), and the
 * adapter's gradients and share of dx. */
static void linear_backward(Gpt *gpt, float *dx, const float *dy, const float *x, int l, int p,
                            int N, int in, int out)
{
  const CohortBackend *be = gpt->base.be;
  float *dw = bg(gpt, l, p), *db = bg(gpt, l, p + 1);
  be->gemm(0, 1, N, in, out, 1.0f, dy, out, bp(gpt, gpt->base.params, l, p), out, 0.0f, dx, in);
  if (dw)
    be->gemm(1, 0, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, out);
  if (db)
    be->bias_backward(db, dy, N, out);
  cohort_lora_backward(&gpt->base, bi(l, p), dx, dy, x, N);
}

float cohort_gpt_forward(CohortGpt *m, const int *inputs, const int *targets, int B, int T)
{
  Gpt *gpt = gpt_of(m);
  const CohortGptShape *s = &gpt->shape;
  g_return_val_if_fail(B >= 1 && B <= gpt->base.max_batch, NAN);
  g_return_val_if_fail(T >= 1 && T <= s->seq_len, NAN);
  size_t n_tok = (size_t)B * T;
  g_return_val_if_fail(tokens_valid(inputs, n_tok, s->vocab_size), NAN);
  g_return_val_if_fail(!targets || tokens_valid(targets, n_tok, s->vocab_size), NAN);

  const CohortBackend *be = gpt->base.be;
  int C = s->n_embd, V = s->vocab_size, NH = s->n_head, N = B * T;
  float *p = gpt->base.params;
  be->upload(gpt->tokens, inputs, n_tok * sizeof(int));
  /* Each layer's parameters between layer_begin and layer_end (ZeRO stage 3 gathers them):
   * the embeddings (layer -1), the blocks, ln_f (layer n_layer), the tied head (-1 again). */
  const float *wte = p + gpt->base.tensors[0].offset;
  cohort_model_layer_begin(m, -1, COHORT_LAYER_FORWARD);
  be->embedding_forward(gpt->encoded, gpt->tokens, wte, p + gpt->base.tensors[1].offset, B, T, C);
  cohort_model_layer_end(m, -1, COHORT_LAYER_FORWARD);

  const float *res = gpt->encoded;
  for (int l = 0; l < s->n_layer; l++) {
    BlockActs *a = &gpt->blocks[l];
    cohort_model_layer_begin(m, l, COHORT_LAYER_FORWARD);
    be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, res, bp(gpt, p, l, P_LN1_W),
                          bp(gpt, p, l, P_LN1_B), N, C, GPT_LN_EPS);
    linear_forward(gpt, a->qkv, 0.0f, a->ln1, l, P_ATTN_W, N, C, 3 * C);
    be->attention_forward(a->atty, a->att_lse, a->qkv, B, T, C, NH, 1);
    /* res2 = res + atty @ Wproj + bproj: the GEMM accumulates onto a copy of the residual */
    be->copy(a->res2, res, (size_t)N * C * sizeof(float));
    linear_forward(gpt, a->res2, 1.0f, a->atty, l, P_ATTN_PROJ_W, N, C, C);
    be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, bp(gpt, p, l, P_LN2_W),
                          bp(gpt, p, l, P_LN2_B), N, C, GPT_LN_EPS);
    linear_forward(gpt, a->fch, 0.0f, a->ln2, l, P_FC_W, N, C, 4 * C);
    be->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    be->copy(a->res3, a->res2, (size_t)N * C * sizeof(float));
    linear_forward(gpt, a->res3, 1.0f, a->fch_gelu, l, P_FC_PROJ_W, N, 4 * C, C);
    cohort_model_layer_end(m, l, COHORT_LAYER_FORWARD);
    res = a->res3;
  }
  guint lnf = gpt->base.n_tensors - 2; /* ln_f.weight, then ln_f.bias */
  cohort_model_layer_begin(m, s->n_layer, COHORT_LAYER_FORWARD);
  be->layernorm_forward(gpt->lnf, gpt->lnf_mean, gpt->lnf_rstd, res,
                        p + gpt->base.tensors[lnf].offset, p + gpt->base.tensors[lnf + 1].offset, N,
                        C, GPT_LN_EPS);
  cohort_model_layer_end(m, s->n_layer, COHORT_LAYER_FORWARD);
  /* tied head: logits = lnf @ wte^T */
  cohort_model_layer_begin(m, -1, COHORT_LAYER_FORWARD);
  be->gemm(0, 1, N, V, C, 1.0f, gpt->lnf, C, wte, C, 0.0f, gpt->logits, V);
  cohort_model_layer_end(m, -1, COHORT_LAYER_FORWARD);

  gpt->last_B = B;
  gpt->last_T = T;
  gpt->have_targets = targets != NULL;
  if (!targets)
    return 0.0f;
  be->upload(gpt->targets, targets, n_tok * sizeof(int));
  be->crossentropy_forward(gpt->losses, gpt->lse, gpt->logits, gpt->targets, N, V);
  return cohort_model_mean_loss(&gpt->base, gpt->losses, n_tok, gpt->host_losses);
}

/* The backward of the logits families' interface: the cross-entropy's gradient scaled by
 * task_weight, another loss's added by `add` (distillation's KL term), then the network. Frozen
 * tensors get no gradient, and backward ends where nothing below learns. */
static void gpt_backward_logits(CohortModel *m, float grad_scale, float task_weight,
                                CohortLogitsGradFunc add, gpointer user_data)
{
  Gpt *gpt = gpt_of(m);
  g_return_if_fail(gpt->have_targets && m->grads);
  const CohortGptShape *s = &gpt->shape;
  const CohortBackend *be = gpt->base.be;
  int B = gpt->last_B, T = gpt->last_T;
  int C = s->n_embd, V = s->vocab_size, NH = s->n_head, N = B * T, L = s->n_layer;
  float *p = gpt->base.params;
  const float *wte = p + m->tensors[0].offset;
  float *dwte = cohort_model_grad(m, 0);

  be->crossentropy_backward(gpt->dlogits, gpt->logits, gpt->lse, gpt->targets, N, V,
                            grad_scale * task_weight / N);
  if (add)
    add(gpt->dlogits, gpt->logits, N, V, user_data);
  /* tied head: dlnf = dlogits @ wte, dwte += dlogits^T @ lnf */
  cohort_model_layer_begin(m, -1, COHORT_LAYER_BACKWARD);
  be->gemm(0, 0, N, C, V, 1.0f, gpt->dlogits, V, wte, C, 0.0f, gpt->dln, C);
  if (dwte)
    be->gemm(1, 0, V, C, N, 1.0f, gpt->dlogits, V, gpt->lnf, C, 1.0f, dwte, C);
  cohort_model_layer_end(m, -1, COHORT_LAYER_BACKWARD);

  guint lnf = m->n_tensors - 2; /* ln_f.weight, then ln_f.bias */
  const float *last = L > 0 ? gpt->blocks[L - 1].res3 : gpt->encoded;
  be->zero(gpt->dres, (size_t)N * C * sizeof(float));
  cohort_model_layer_begin(m, L, COHORT_LAYER_BACKWARD);
  be->layernorm_backward(gpt->dres, cohort_model_grad(m, lnf), cohort_model_grad(m, lnf + 1),
                         gpt->dln, last, p + m->tensors[lnf].offset, gpt->lnf_mean, gpt->lnf_rstd,
                         N, C);
  cohort_model_layer_end(m, L, COHORT_LAYER_BACKWARD);
  cohort_model_layer_grads_ready(m, L);

  for (int l = L - 1; l >= 0 && cohort_model_learns_up_to(m, l); l--) {
    BlockActs *a = &gpt->blocks[l];
    const float *res = l > 0 ? gpt->blocks[l - 1].res3 : gpt->encoded;
    cohort_model_layer_begin(m, l, COHORT_LAYER_BACKWARD);
    /* MLP: res3 = res2 + gelu(ln2 @ Wfc + bfc) @ Wproj + bproj */
    linear_backward(gpt, gpt->dfch, gpt->dres, a->fch_gelu, l, P_FC_PROJ_W, N, 4 * C, C);
    be->gelu_backward(gpt->dfch, a->fch, gpt->dfch, (size_t)N * 4 * C);
    linear_backward(gpt, gpt->dln, gpt->dfch, a->ln2, l, P_FC_W, N, C, 4 * C);
    be->layernorm_backward(gpt->dres, bg(gpt, l, P_LN2_W), bg(gpt, l, P_LN2_B), gpt->dln, a->res2,
                           bp(gpt, p, l, P_LN2_W), a->ln2_mean, a->ln2_rstd, N, C);
    /* attention: res2 = res + attn(ln1(res)) @ Wproj + bproj */
    linear_backward(gpt, gpt->datty, gpt->dres, a->atty, l, P_ATTN_PROJ_W, N, C, C);
    be->attention_backward(gpt->dqkv, gpt->datty, a->qkv, a->atty, a->att_lse, B, T, C, NH, 1);
    linear_backward(gpt, gpt->dln, gpt->dqkv, a->ln1, l, P_ATTN_W, N, C, 3 * C);
    be->layernorm_backward(gpt->dres, bg(gpt, l, P_LN1_W), bg(gpt, l, P_LN1_B), gpt->dln, res,
                           bp(gpt, p, l, P_LN1_W), a->ln1_mean, a->ln1_rstd, N, C);
    cohort_model_layer_end(m, l, COHORT_LAYER_BACKWARD);
    cohort_model_layer_grads_ready(m, l);
  }
  if (!cohort_model_learns_up_to(m, -1))
    return;
  cohort_model_layer_begin(m, -1, COHORT_LAYER_GRADS);
  be->embedding_backward(dwte, cohort_model_grad(m, 1), gpt->dres, gpt->tokens, B, T, C);
  cohort_model_layer_end(m, -1, COHORT_LAYER_GRADS);
  cohort_model_layer_grads_ready(m, -1);
}

void cohort_gpt_backward(CohortGpt *m, float grad_scale)
{
  gpt_backward_logits(m, grad_scale, 1.0f, NULL, NULL);
}

static const float *gpt_logits(const CohortModel *m, int *rows, int *classes)
{
  const Gpt *gpt = gpt_of(m);
  *rows = gpt->last_B * gpt->last_T;
  *classes = gpt->shape.vocab_size;
  return gpt->logits;
}

double cohort_gpt_flops_per_token(const CohortGpt *m, int T)
{
  const CohortGptShape *s = &gpt_of(m)->shape;
  /* 6 per weight multiply-add (forward 2, backward 4) over every matrix the token passes
   * through (the blocks and the tied head; the embedding lookup is no multiply), plus
   * attention's QK^T and AV: 2 products of T/2 keys on average (causal) x C, times 6. */
  double C = s->n_embd;
  double matmul = s->n_layer * 12.0 * C * C + (double)s->vocab_size * C;
  double attn = s->n_layer * 2.0 * C * (T / 2.0);
  return 6.0 * (matmul + attn);
}

/* ---- the model interface ---- */

static float gpt_forward_batch(CohortModel *m, const CohortBatch *b, CohortForwardMode mode)
{
  (void)mode; /* the GPT has no layer that behaves differently in evaluation */
  return cohort_gpt_forward(m, b->inputs, b->targets, b->B, b->T);
}

static void gpt_backward(CohortModel *m, float grad_scale)
{
  cohort_gpt_backward(m, grad_scale);
}

static void gpt_init_buffers(CohortModel *m)
{
  (void)m; /* the GPT has none */
}

static void gpt_init(CohortModel *m, guint64 seed)
{
  cohort_gpt_init_weights(m, seed);
}

static void gpt_eval_batch(CohortModel *m, const CohortBatch *b, double *sums)
{
  float loss = cohort_gpt_forward(m, b->inputs, b->targets, b->B, b->T);
  double positions = (double)b->B * b->T;
  sums[0] += (double)loss * positions;
  sums[1] += positions;
}

static double gpt_flops_per_example(const CohortModel *m)
{
  int T = gpt_of(m)->shape.seq_len;
  return cohort_gpt_flops_per_token(m, T) * T;
}

static const CohortModelOps gpt_ops = {
    .forward = gpt_forward_batch,
    .backward = gpt_backward,
    .init_weights = gpt_init,
    .init_tensor = gpt_init_tensor,
    .init_buffers = gpt_init_buffers,
    .eval_batch = gpt_eval_batch,
    .sample = cohort_gpt_sample,
    .flops_per_example = gpt_flops_per_example,
    .finalize = gpt_finalize,
    .logits = gpt_logits,
    .backward_logits = gpt_backward_logits,
};

static gint64 gpt_count_params(const CohortConfig *cfg)
{
  gint64 C = cfg->n_embd, L = cfg->n_layer, V = cfg->vocab_size, T = cfg->seq_len;
  gint64 per_layer =
      2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  return V * C + T * C + L * per_layer + 2 * C;
}

static size_t gpt_act_bytes(const CohortConfig *cfg, int max_batch)
{
  Gpt probe = {.shape = {cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->vocab_size}};
  probe.base.max_batch = max_batch;
  probe.blocks = g_new0(BlockActs, MAX(cfg->n_layer, 1));
  size_t bytes = layout_acts(&probe, NULL);
  g_free(probe.blocks);
  return bytes;
}

static CohortTensorInfo *gpt_param_table(const CohortConfig *cfg, guint *n_tensors,
                                         size_t *n_floats)
{
  Gpt probe = {.shape = {cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->vocab_size}};
  build_table(&probe);
  *n_tensors = probe.base.n_tensors;
  *n_floats = probe.base.n_params;
  return probe.base.tensors;
}

static CohortModel *gpt_create(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                               GError **error)
{
  CohortGptShape shape = {cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len, cfg->vocab_size};
  return cohort_gpt_new_on(be, &shape, max_batch, error);
}

/* A Hugging Face folder's config.json must describe this model: the weights alone cannot
 * tell a wrong n_head, and the other keys get a message that says what to set. */
static gboolean check_folder_config(CohortModel *m, const char *dir, GError **error)
{
  g_autofree char *path = g_build_filename(dir, "config.json", NULL);
  if (!g_file_test(path, G_FILE_TEST_EXISTS))
    return TRUE;
  g_autoptr(CohortConfig) hf = cohort_config_new();
  if (!cohort_gpt_read_hf_config(path, hf, error))
    return FALSE;
  const CohortGptShape *s = cohort_gpt_shape(m);
  const struct {
    const char *key, *hf_key;
    int have, want;
  } keys[] = {{"n_layer", "n_layer", s->n_layer, hf->n_layer},
              {"n_head", "n_head", s->n_head, hf->n_head},
              {"n_embd", "n_embd", s->n_embd, hf->n_embd},
              {"seq_len", "n_positions", s->seq_len, hf->seq_len}, /* at most: below */
              {"vocab_size", "vocab_size", s->vocab_size, hf->vocab_size}};
  for (guint i = 0; i < G_N_ELEMENTS(keys); i++) {
    /* a shorter context than n_positions takes the first seq_len positions */
    gboolean shorter = g_str_equal(keys[i].key, "seq_len") && keys[i].have < keys[i].want;
    if (keys[i].have != keys[i].want && !shorter)
      return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                         "init_from %s: config.json has %s %d but key \"%s\" is %d; set %s to "
                         "%s%d to use this model",
                         dir, keys[i].hf_key, keys[i].want, keys[i].key, keys[i].have, keys[i].key,
                         g_str_equal(keys[i].key, "seq_len") ? "at most " : "", keys[i].want);
  }
  return TRUE;
}

/* The file gpt_import reads for `path`. */
static char *gpt_import_file(const char *path)
{
  if (!g_file_test(path, G_FILE_TEST_IS_DIR))
    return g_strdup(path);
  return g_build_filename(path, "model.safetensors", NULL);
}

/* init_from: a .safetensors file, or a Hugging Face folder (config.json, model.safetensors). */
static gboolean gpt_import(CohortModel *m, const char *path, GPtrArray *notes, GError **error)
{
  g_autofree char *weights = gpt_import_file(path);
  if (g_file_test(path, G_FILE_TEST_IS_DIR) && !g_file_test(weights, G_FILE_TEST_IS_REGULAR))
    return cohort_fail(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                       "init_from %s: the folder has no model.safetensors; allowed: a "
                       ".safetensors file or a Hugging Face GPT-2 folder (config.json, "
                       "model.safetensors)",
                       path);
  if ((g_file_test(path, G_FILE_TEST_IS_DIR) && !check_folder_config(m, path, error)) ||
      !cohort_gpt_load_hf(m, weights, error))
    return FALSE;
  int positions = cohort_gpt_file_positions(weights);
  int T = cohort_gpt_shape(m)->seq_len;
  if (notes && positions > T)
    g_ptr_array_add(notes, g_strdup_printf("the base has %d positions (n_positions); this run "
                                           "uses the first %d (seq_len), and its export keeps "
                                           "all %d",
                                           positions, T, positions));
  return TRUE;
}

static const CohortDataFormat gpt_formats[] = {COHORT_DATA_TEXT, COHORT_DATA_TOKENS};

const CohortModelClass cohort_gpt_class = {
    .name = "gpt",
    .title = "GPT-2-style decoder (text)",
    .formats = gpt_formats,
    .n_formats = G_N_ELEMENTS(gpt_formats),
    .count_params = gpt_count_params,
    .act_bytes = gpt_act_bytes,
    .param_table = gpt_param_table,
    .create = gpt_create,
    .import_weights = gpt_import,
    .import_file = gpt_import_file,
    .export_extra = cohort_gpt_write_hf_config,
    .check_teacher = cohort_gpt_check_teacher,
    .distill_new = cohort_logits_distill_new,
    .copies_blocks = TRUE,
    .position_table = "wpe.weight",
    .lora_targets = "attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj",
    .lora_module_prefix = "transformer.",
    .lora_task_type = "CAUSAL_LM",
    .frozen_layout = TRUE,
};
