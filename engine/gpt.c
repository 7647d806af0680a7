/* The GPT-2-style model over the backend table (kernels/backend.h). Forward and backward are
 * written per layer by hand; activations for max_batch sequences are allocated once, so a
 * training step allocates nothing. */
#include "gpt.h"
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

struct CohortGpt {
  CohortGptShape shape;
  int max_batch;
  const CohortBackend *be;

  CohortTensorInfo *tensors;
  guint n_tensors;
  size_t n_params;
  float *params;
  float *grads;
  size_t block_offset0; /* offset of h.0.* */
  size_t block_numel;   /* floats per block */

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

  CohortGradReadyFunc grad_ready;
  gpointer grad_ready_data;
};

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

static void build_table(CohortGpt *gpt)
{
  const CohortGptShape *s = &gpt->shape;
  int C = s->n_embd;
  GArray *arr = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  size_t off = 0;
  add_tensor(arr, g_strdup("wte.weight"), s->vocab_size, C, -1, &off);
  add_tensor(arr, g_strdup("wpe.weight"), s->seq_len, C, -1, &off);
  gpt->block_offset0 = off;
  for (int l = 0; l < s->n_layer; l++) {
    const int dims[P_BLOCK_COUNT][2] = {
        {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C},     {C, 0},
        {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0},
    };
    for (int p = 0; p < P_BLOCK_COUNT; p++)
      add_tensor(arr, g_strdup_printf("h.%d.%s", l, block_names[p]), dims[p][0], dims[p][1], l,
                 &off);
    if (l == 0)
      gpt->block_numel = off - gpt->block_offset0;
  }
  add_tensor(arr, g_strdup("ln_f.weight"), C, 0, s->n_layer, &off);
  add_tensor(arr, g_strdup("ln_f.bias"), C, 0, s->n_layer, &off);
  gpt->n_tensors = arr->len;
  gpt->tensors = (CohortTensorInfo *)g_array_free(arr, FALSE);
  gpt->n_params = off;
}

/* Parameter (or gradient) pointer of block `l`, tensor `p`. */
static float *bp(const CohortGpt *gpt, float *base, int l, int p)
{
  return base + gpt->tensors[2 + l * P_BLOCK_COUNT + p].offset;
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
static size_t layout_acts(CohortGpt *gpt, char *base)
{
  const CohortGptShape *s = &gpt->shape;
  size_t N = (size_t)gpt->max_batch * s->seq_len;
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
  TAKE(gpt->dres, N * C, float);
  TAKE(gpt->dln, N * C, float);
  TAKE(gpt->dqkv, N * 3 * C, float);
  TAKE(gpt->datty, N * C, float);
  TAKE(gpt->dfch, N * 4 * C, float);
  TAKE(gpt->dlogits, N * V, float);
#undef TAKE
  return used;
}

CohortGpt *cohort_gpt_new(const CohortGptShape *shape, int max_batch, GError **error)
{
  return cohort_gpt_new_on(cohort_backend_cpu(), shape, max_batch, error);
}

CohortGpt *cohort_gpt_new_on(const CohortBackend *be, const CohortGptShape *shape, int max_batch,
                             GError **error)
{
  g_return_val_if_fail(be != NULL && shape != NULL, NULL);
  if (!check_shape(shape, max_batch, error))
    return NULL;
  CohortGpt *gpt = g_new0(CohortGpt, 1);
  gpt->shape = *shape;
  gpt->max_batch = max_batch;
  gpt->be = be;
  build_table(gpt);
  gpt->blocks = g_new0(BlockActs, shape->n_layer);
  gpt->params = gpt->be->alloc(gpt->n_params * sizeof(float));
  gpt->grads = gpt->be->alloc(gpt->n_params * sizeof(float));
  size_t act_bytes = layout_acts(gpt, NULL);
  gpt->act_mem = gpt->be->alloc(act_bytes);
  gpt->host_losses = g_try_new(float, (size_t)max_batch * shape->seq_len);
  if (!gpt->params || !gpt->grads || !gpt->act_mem || !gpt->host_losses) {
    g_set_error(error, GPT_ERROR, 1,
                "GPT model: out of %s memory for %zu parameters and %.1f MiB of activations "
                "(max_batch %d, seq_len %d); allowed: a smaller model or batch",
                be->name, gpt->n_params, act_bytes / 1048576.0, max_batch, shape->seq_len);
    cohort_gpt_free(gpt);
    return NULL;
  }
  layout_acts(gpt, gpt->act_mem);
  return gpt;
}

void cohort_gpt_free(CohortGpt *gpt)
{
  if (!gpt)
    return;
  if (gpt->be) {
    gpt->be->free(gpt->params);
    gpt->be->free(gpt->grads);
    gpt->be->free(gpt->act_mem);
  }
  for (guint i = 0; i < gpt->n_tensors; i++)
    g_free((char *)gpt->tensors[i].name);
  g_free(gpt->tensors);
  g_free(gpt->blocks);
  g_free(gpt->host_losses);
  g_free(gpt);
}

const CohortGptShape *cohort_gpt_shape(const CohortGpt *gpt)
{
  return &gpt->shape;
}

size_t cohort_gpt_num_params(const CohortGpt *gpt)
{
  return gpt->n_params;
}

float *cohort_gpt_params(CohortGpt *gpt)
{
  return gpt->params;
}

float *cohort_gpt_grads(CohortGpt *gpt)
{
  return gpt->grads;
}

const CohortBackend *cohort_gpt_backend(const CohortGpt *gpt)
{
  return gpt->be;
}

gboolean cohort_gpt_on_host(const CohortGpt *gpt)
{
  return gpt->be == cohort_backend_cpu();
}

void cohort_gpt_download_params(const CohortGpt *gpt, float *host)
{
  gpt->be->download(host, gpt->params, gpt->n_params * sizeof(float));
}

void cohort_gpt_upload_params(CohortGpt *gpt, const float *host)
{
  gpt->be->upload(gpt->params, host, gpt->n_params * sizeof(float));
}

void cohort_gpt_download_grads(const CohortGpt *gpt, float *host)
{
  gpt->be->download(host, gpt->grads, gpt->n_params * sizeof(float));
}

void cohort_gpt_upload_grads(CohortGpt *gpt, const float *host)
{
  gpt->be->upload(gpt->grads, host, gpt->n_params * sizeof(float));
}

const float *cohort_gpt_params_host(const CohortGpt *gpt, float **tmp)
{
  *tmp = NULL;
  if (cohort_gpt_on_host(gpt))
    return gpt->params;
  *tmp = g_new(float, gpt->n_params);
  cohort_gpt_download_params(gpt, *tmp);
  return *tmp;
}

void cohort_gpt_download_logits(const CohortGpt *gpt, size_t offset, size_t count, float *host)
{
  gpt->be->download(host, gpt->logits + offset, count * sizeof(float));
}

const CohortTensorInfo *cohort_gpt_tensors(const CohortGpt *gpt, guint *n_tensors)
{
  if (n_tensors)
    *n_tensors = gpt->n_tensors;
  return gpt->tensors;
}

const CohortTensorInfo *cohort_gpt_find_tensor(const CohortGpt *gpt, const char *name)
{
  for (guint i = 0; i < gpt->n_tensors; i++)
    if (strcmp(gpt->tensors[i].name, name) == 0)
      return &gpt->tensors[i];
  return NULL;
}

/* splitmix64: a small, well-mixed generator; each tensor gets its own stream so the
 * initialisation of one tensor does not depend on the sizes of the others. */
static guint64 splitmix64(guint64 *state)
{
  guint64 z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double uniform01(guint64 *state)
{
  /* 53 random bits in (0, 1]: never 0, so log() below is finite */
  return ((splitmix64(state) >> 11) + 1) * (1.0 / 9007199254740992.0);
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

void cohort_gpt_init_weights(CohortGpt *gpt, guint64 seed)
{
  const double std = 0.02;
  const double proj_std = 0.02 / sqrt(2.0 * gpt->shape.n_layer);
  size_t n = gpt->n_params;
  float *host = g_new0(float, n);
  for (guint i = 0; i < gpt->n_tensors; i++) {
    const CohortTensorInfo *t = &gpt->tensors[i];
    float *dst = host + t->offset;
    if (t->ndim == 2) {
      gboolean proj = g_str_has_suffix(t->name, "c_proj.weight");
      guint64 st = seed ^ (0xD1B54A32D192ED03ull * (i + 1));
      fill_normal(dst, t->numel, proj ? proj_std : std, splitmix64(&st));
    } else if (g_str_has_suffix(t->name, "ln_1.weight") ||
               g_str_has_suffix(t->name, "ln_2.weight") || strcmp(t->name, "ln_f.weight") == 0) {
      for (size_t k = 0; k < t->numel; k++)
        dst[k] = 1.0f;
    }
  }
  gpt->be->upload(gpt->params, host, n * sizeof(float));
  g_free(host);
}

const float *cohort_gpt_logits(const CohortGpt *gpt)
{
  return gpt->logits;
}

void cohort_gpt_zero_grad(CohortGpt *gpt)
{
  gpt->be->zero(gpt->grads, gpt->n_params * sizeof(float));
}

void cohort_gpt_set_grad_ready_func(CohortGpt *gpt, CohortGradReadyFunc func, gpointer user_data)
{
  gpt->grad_ready = func;
  gpt->grad_ready_data = user_data;
}

static gboolean tokens_valid(const int *tok, size_t n, int vocab)
{
  for (size_t i = 0; i < n; i++)
    if (tok[i] < 0 || tok[i] >= vocab)
      return FALSE;
  return TRUE;
}

/* y [N, out] = x [N, in] @ w [in, out] + b, HF Conv1D layout. */
static void linear_forward(const CohortBackend *be, float *y, const float *x, const float *w,
                           const float *b, int N, int in, int out)
{
  be->gemm(0, 0, N, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
  be->add_bias(y, b, N, out);
}

/* dx = dy @ w^T (overwrites), dw += x^T @ dy, db += colsum(dy). */
static void linear_backward(const CohortBackend *be, float *dx, float *dw, float *db,
                            const float *dy, const float *x, const float *w, int N, int in, int out)
{
  be->gemm(0, 1, N, in, out, 1.0f, dy, out, w, out, 0.0f, dx, in);
  be->gemm(1, 0, in, out, N, 1.0f, x, in, dy, out, 1.0f, dw, out);
  be->bias_backward(db, dy, N, out);
}

float cohort_gpt_forward(CohortGpt *gpt, const int *inputs, const int *targets, int B, int T)
{
  const CohortGptShape *s = &gpt->shape;
  g_return_val_if_fail(B >= 1 && B <= gpt->max_batch, NAN);
  g_return_val_if_fail(T >= 1 && T <= s->seq_len, NAN);
  size_t n_tok = (size_t)B * T;
  g_return_val_if_fail(tokens_valid(inputs, n_tok, s->vocab_size), NAN);
  g_return_val_if_fail(!targets || tokens_valid(targets, n_tok, s->vocab_size), NAN);

  const CohortBackend *be = gpt->be;
  int C = s->n_embd, V = s->vocab_size, NH = s->n_head, N = B * T;
  float *p = gpt->params;
  be->upload(gpt->tokens, inputs, n_tok * sizeof(int));
  be->embedding_forward(gpt->encoded, gpt->tokens, p, p + gpt->tensors[1].offset, B, T, C);

  const float *res = gpt->encoded;
  for (int l = 0; l < s->n_layer; l++) {
    BlockActs *a = &gpt->blocks[l];
    be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, res, bp(gpt, p, l, P_LN1_W),
                          bp(gpt, p, l, P_LN1_B), N, C, GPT_LN_EPS);
    linear_forward(be, a->qkv, a->ln1, bp(gpt, p, l, P_ATTN_W), bp(gpt, p, l, P_ATTN_B), N, C,
                   3 * C);
    be->attention_forward(a->atty, a->att_lse, a->qkv, B, T, C, NH, 1);
    /* res2 = res + atty @ Wproj + bproj: the GEMM accumulates onto a copy of the residual */
    be->copy(a->res2, res, (size_t)N * C * sizeof(float));
    be->gemm(0, 0, N, C, C, 1.0f, a->atty, C, bp(gpt, p, l, P_ATTN_PROJ_W), C, 1.0f, a->res2, C);
    be->add_bias(a->res2, bp(gpt, p, l, P_ATTN_PROJ_B), N, C);
    be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, bp(gpt, p, l, P_LN2_W),
                          bp(gpt, p, l, P_LN2_B), N, C, GPT_LN_EPS);
    linear_forward(be, a->fch, a->ln2, bp(gpt, p, l, P_FC_W), bp(gpt, p, l, P_FC_B), N, C, 4 * C);
    be->gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C);
    be->copy(a->res3, a->res2, (size_t)N * C * sizeof(float));
    be->gemm(0, 0, N, C, 4 * C, 1.0f, a->fch_gelu, 4 * C, bp(gpt, p, l, P_FC_PROJ_W), C, 1.0f,
             a->res3, C);
    be->add_bias(a->res3, bp(gpt, p, l, P_FC_PROJ_B), N, C);
    res = a->res3;
  }
  const CohortTensorInfo *lnf_w = &gpt->tensors[gpt->n_tensors - 2];
  be->layernorm_forward(gpt->lnf, gpt->lnf_mean, gpt->lnf_rstd, res, p + lnf_w->offset,
                        p + lnf_w->offset + C, N, C, GPT_LN_EPS);
  /* tied head: logits = lnf @ wte^T */
  be->gemm(0, 1, N, V, C, 1.0f, gpt->lnf, C, p, C, 0.0f, gpt->logits, V);

  gpt->last_B = B;
  gpt->last_T = T;
  gpt->have_targets = targets != NULL;
  if (!targets)
    return 0.0f;
  be->upload(gpt->targets, targets, n_tok * sizeof(int));
  be->crossentropy_forward(gpt->losses, gpt->lse, gpt->logits, gpt->targets, N, V);
  be->download(gpt->host_losses, gpt->losses, n_tok * sizeof(float));
  double sum = 0.0;
  for (size_t i = 0; i < n_tok; i++)
    sum += gpt->host_losses[i];
  return (float)(sum / n_tok);
}

static void grad_ready(CohortGpt *gpt, size_t offset, size_t count)
{
  if (gpt->grad_ready)
    gpt->grad_ready(offset, count, gpt->grad_ready_data);
}

void cohort_gpt_backward(CohortGpt *gpt, float grad_scale)
{
  g_return_if_fail(gpt->have_targets);
  const CohortGptShape *s = &gpt->shape;
  const CohortBackend *be = gpt->be;
  int B = gpt->last_B, T = gpt->last_T;
  int C = s->n_embd, V = s->vocab_size, NH = s->n_head, N = B * T, L = s->n_layer;
  float *p = gpt->params, *g = gpt->grads;

  be->crossentropy_backward(gpt->dlogits, gpt->logits, gpt->lse, gpt->targets, N, V,
                            grad_scale / N);
  /* tied head: dlnf = dlogits @ wte, dwte += dlogits^T @ lnf */
  be->gemm(0, 0, N, C, V, 1.0f, gpt->dlogits, V, p, C, 0.0f, gpt->dln, C);
  be->gemm(1, 0, V, C, N, 1.0f, gpt->dlogits, V, gpt->lnf, C, 1.0f, g, C);

  const CohortTensorInfo *lnf_w = &gpt->tensors[gpt->n_tensors - 2];
  const float *last = L > 0 ? gpt->blocks[L - 1].res3 : gpt->encoded;
  be->zero(gpt->dres, (size_t)N * C * sizeof(float));
  be->layernorm_backward(gpt->dres, g + lnf_w->offset, g + lnf_w->offset + C, gpt->dln, last,
                         p + lnf_w->offset, gpt->lnf_mean, gpt->lnf_rstd, N, C);
  grad_ready(gpt, lnf_w->offset, 2 * (size_t)C);

  for (int l = L - 1; l >= 0; l--) {
    BlockActs *a = &gpt->blocks[l];
    const float *res = l > 0 ? gpt->blocks[l - 1].res3 : gpt->encoded;
    /* MLP: res3 = res2 + gelu(ln2 @ Wfc + bfc) @ Wproj + bproj */
    linear_backward(be, gpt->dfch, bp(gpt, g, l, P_FC_PROJ_W), bp(gpt, g, l, P_FC_PROJ_B),
                    gpt->dres, a->fch_gelu, bp(gpt, p, l, P_FC_PROJ_W), N, 4 * C, C);
    be->gelu_backward(gpt->dfch, a->fch, gpt->dfch, (size_t)N * 4 * C);
    linear_backward(be, gpt->dln, bp(gpt, g, l, P_FC_W), bp(gpt, g, l, P_FC_B), gpt->dfch, a->ln2,
                    bp(gpt, p, l, P_FC_W), N, C, 4 * C);
    be->layernorm_backward(gpt->dres, bp(gpt, g, l, P_LN2_W), bp(gpt, g, l, P_LN2_B), gpt->dln,
                           a->res2, bp(gpt, p, l, P_LN2_W), a->ln2_mean, a->ln2_rstd, N, C);
    /* attention: res2 = res + attn(ln1(res)) @ Wproj + bproj */
    linear_backward(be, gpt->datty, bp(gpt, g, l, P_ATTN_PROJ_W), bp(gpt, g, l, P_ATTN_PROJ_B),
                    gpt->dres, a->atty, bp(gpt, p, l, P_ATTN_PROJ_W), N, C, C);
    be->attention_backward(gpt->dqkv, gpt->datty, a->qkv, a->atty, a->att_lse, B, T, C, NH, 1);
    linear_backward(be, gpt->dln, bp(gpt, g, l, P_ATTN_W), bp(gpt, g, l, P_ATTN_B), gpt->dqkv,
                    a->ln1, bp(gpt, p, l, P_ATTN_W), N, C, 3 * C);
    be->layernorm_backward(gpt->dres, bp(gpt, g, l, P_LN1_W), bp(gpt, g, l, P_LN1_B), gpt->dln, res,
                           bp(gpt, p, l, P_LN1_W), a->ln1_mean, a->ln1_rstd, N, C);
    grad_ready(gpt, gpt->block_offset0 + (size_t)l * gpt->block_numel, gpt->block_numel);
  }
  be->embedding_backward(g, g + gpt->tensors[1].offset, gpt->dres, gpt->tokens, B, T, C);
  grad_ready(gpt, 0, gpt->block_offset0);
}

double cohort_gpt_flops_per_token(const CohortGpt *gpt, int T)
{
  const CohortGptShape *s = &gpt->shape;
  /* 6 per weight multiply-add (forward 2, backward 4) over every matrix the token passes
   * through (the blocks and the tied head; the embedding lookup is no multiply), plus
   * attention's QK^T and AV: 2 products of T/2 keys on average (causal) x C, times 6. */
  double C = s->n_embd;
  double matmul = s->n_layer * 12.0 * C * C + (double)s->vocab_size * C;
  double attn = s->n_layer * 2.0 * C * (T / 2.0);
  return 6.0 * (matmul + attn);
}
