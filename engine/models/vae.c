/* The VAE's parameter table (diffusers' names, in their modules' order), its encoder and decoder
 * as lists of ops, and their memory: forward-only graphs share buffers between activations
 * whose lives do not overlap; training keeps every activation and its gradient. */
#include "engine/models/vae-private.h"

#include <math.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/model/rng.h"

/* ---- the parameter table ---- */

static int add_param(CohortVae *v, char *name, int ndim, int d0, int d1, int d2, int d3)
{
  CohortTensorInfo t = {.name = name, .ndim = ndim, .offset = v->n_params, .numel = 1};
  int dims[4] = {d0, d1, d2, d3};
  for (int d = 0; d < ndim; d++) {
    t.shape[d] = dims[d];
    t.numel *= (size_t)dims[d];
  }
  t.decay = ndim >= 2;
  t.layer = (int)v->table->len;
  v->n_params += t.numel;
  g_array_append_val(v->table, t);
  return (int)v->table->len - 1;
}

/* ---- graph building ---- */

static int new_tensor(VaeGraph *g, int C, int H, int W)
{
  VaeTensor t = {.C = C, .H = H, .W = W, .last_use = -1, .slot = -1};
  g_array_append_val(g->tensors, t);
  return (int)g->tensors->len - 1;
}

static int push(VaeGraph *g, VaeOp op)
{
  g_array_append_val(g->ops, op);
  return op.out;
}

static VaeOp op_of(VaeOpKind kind, int in, int out)
{
  return (VaeOp){
      .kind = kind, .in = in, .in2 = -1, .in3 = -1, .out = out, .w = -1, .b = -1, .probs = -1};
}

/* A Conv2d (or, with linear, a Linear applied per position) named `prefix`. */
static int conv(CohortVae *v, VaeGraph *g, int in, const char *prefix, int cout, int K, int stride,
                int pad, gboolean linear)
{
  VaeTensor x = *vae_tensor(g, in);
  int cin = x.C, Ho = (x.H + 2 * pad - K) / stride + 1, Wo = (x.W + 2 * pad - K) / stride + 1;
  VaeOp op = op_of(VOP_CONV, in, new_tensor(g, cout, Ho, Wo));
  op.K = K, op.stride = stride, op.pad = pad;
  char *wn = g_strconcat(prefix, ".weight", NULL);
  op.w = linear ? add_param(v, wn, 2, cout, cin, 0, 0) : add_param(v, wn, 4, cout, cin, K, K);
  op.b = add_param(v, g_strconcat(prefix, ".bias", NULL), 1, cout, 0, 0, 0);
  return push(g, op);
}

/* (new_tensor may move the tensor array: shapes are copied out before it.) */
static int group_norm(CohortVae *v, VaeGraph *g, int in, const char *prefix)
{
  VaeTensor x = *vae_tensor(g, in);
  VaeOp op = op_of(VOP_GN, in, new_tensor(g, x.C, x.H, x.W));
  op.w = add_param(v, g_strconcat(prefix, ".weight", NULL), 1, x.C, 0, 0, 0);
  op.b = add_param(v, g_strconcat(prefix, ".bias", NULL), 1, x.C, 0, 0, 0);
  op.stat = g->stat_floats;
  g->stat_floats += 2 * (size_t)v->cfg.norm_num_groups;
  return push(g, op);
}

static int unary(VaeGraph *g, VaeOpKind kind, int in, int C, int H, int W)
{
  return push(g, op_of(kind, in, new_tensor(g, C, H, W)));
}

static int add(VaeGraph *g, int a, int b)
{
  VaeTensor x = *vae_tensor(g, a);
  VaeOp op = op_of(VOP_ADD, a, new_tensor(g, x.C, x.H, x.W));
  op.in2 = b;
  return push(g, op);
}

/* diffusers' ResnetBlock2D without a time embedding (output_scale_factor 1). */
static int resnet(CohortVae *v, VaeGraph *g, int x, const char *prefix, int cout)
{
  g_autofree char *n1 = g_strconcat(prefix, ".norm1", NULL);
  g_autofree char *c1 = g_strconcat(prefix, ".conv1", NULL);
  g_autofree char *n2 = g_strconcat(prefix, ".norm2", NULL);
  g_autofree char *c2 = g_strconcat(prefix, ".conv2", NULL);
  g_autofree char *cs = g_strconcat(prefix, ".conv_shortcut", NULL);
  const VaeTensor *t = vae_tensor(g, x);
  int cin = t->C, H = t->H, W = t->W;
  int h = group_norm(v, g, x, n1);
  h = unary(g, VOP_SILU, h, cin, H, W);
  h = conv(v, g, h, c1, cout, 3, 1, 1, FALSE);
  h = group_norm(v, g, h, n2);
  h = unary(g, VOP_SILU, h, cout, H, W);
  h = conv(v, g, h, c2, cout, 3, 1, 1, FALSE);
  int sc = cin != cout ? conv(v, g, x, cs, cout, 1, 1, 0, FALSE) : x;
  return add(g, sc, h);
}

/* diffusers' Attention as the mid-block builds it: GroupNorm, one head of all channels,
 * to_q / to_k / to_v / to_out.0 (Linear with bias), plus the input. */
static int attention(CohortVae *v, VaeGraph *g, int x, const char *prefix, gboolean train)
{
  const VaeTensor *t = vae_tensor(g, x);
  int C = t->C, H = t->H, W = t->W;
  g_autofree char *gn = g_strconcat(prefix, ".group_norm", NULL);
  int h = group_norm(v, g, x, gn);
  const char *names[3] = {".to_q", ".to_k", ".to_v"};
  int qkv[3];
  for (int i = 0; i < 3; i++) {
    g_autofree char *p = g_strconcat(prefix, names[i], NULL);
    qkv[i] = conv(v, g, h, p, C, 1, 1, 0, TRUE);
  }
  VaeOp op = op_of(VOP_SDPA, qkv[0], new_tensor(g, C, H, W));
  op.in2 = qkv[1], op.in3 = qkv[2];
  if (train)
    op.probs = new_tensor(g, H * W, H * W, 1);
  int o = push(g, op);
  g_autofree char *out = g_strconcat(prefix, ".to_out.0", NULL);
  o = conv(v, g, o, out, C, 1, 1, 0, TRUE);
  return add(g, x, o);
}

static int mid_block(CohortVae *v, VaeGraph *g, int h, const char *half, gboolean train)
{
  int C = vae_tensor(g, h)->C;
  g_autofree char *r0 = g_strdup_printf("%s.mid_block.resnets.0", half);
  g_autofree char *a0 = g_strdup_printf("%s.mid_block.attentions.0", half);
  g_autofree char *r1 = g_strdup_printf("%s.mid_block.resnets.1", half);
  h = resnet(v, g, h, r0, C);
  if (v->cfg.mid_block_add_attention)
    h = attention(v, g, h, a0, train);
  return resnet(v, g, h, r1, C);
}

/* GroupNorm, SiLU and conv_out of either half. */
static int head_out(CohortVae *v, VaeGraph *g, int h, const char *half, int cout)
{
  const VaeTensor *t = vae_tensor(g, h);
  int C = t->C, H = t->H, W = t->W;
  g_autofree char *n = g_strdup_printf("%s.conv_norm_out", half);
  g_autofree char *c = g_strdup_printf("%s.conv_out", half);
  h = group_norm(v, g, h, n);
  h = unary(g, VOP_SILU, h, C, H, W);
  return conv(v, g, h, c, cout, 3, 1, 1, FALSE);
}

static void build_encoder(CohortVae *v, gboolean train)
{
  const CohortVaeConfig *c = &v->cfg;
  VaeGraph *g = &v->enc;
  int S = v->image_size;
  g->input = new_tensor(g, c->in_channels, S, S);
  int h = conv(v, g, g->input, "encoder.conv_in", c->block_out_channels[0], 3, 1, 1, FALSE);
  for (int i = 0; i < c->n_blocks; i++) {
    for (int j = 0; j < c->layers_per_block; j++) {
      g_autofree char *p = g_strdup_printf("encoder.down_blocks.%d.resnets.%d", i, j);
      h = resnet(v, g, h, p, c->block_out_channels[i]);
    }
    if (i == c->n_blocks - 1)
      continue;
    /* Downsample2D: F.pad(x, (0, 1, 0, 1)), then a 3x3 convolution of stride 2 */
    const VaeTensor *t = vae_tensor(g, h);
    h = unary(g, VOP_PAD, h, t->C, t->H + 1, t->W + 1);
    g_autofree char *p = g_strdup_printf("encoder.down_blocks.%d.downsamplers.0.conv", i);
    h = conv(v, g, h, p, c->block_out_channels[i], 3, 2, 0, FALSE);
  }
  h = mid_block(v, g, h, "encoder", train);
  h = head_out(v, g, h, "encoder", 2 * c->latent_channels);
  if (c->use_quant_conv)
    h = conv(v, g, h, "quant_conv", 2 * c->latent_channels, 1, 1, 0, FALSE);
  g->output = h;
}

static void build_decoder(CohortVae *v, gboolean train)
{
  const CohortVaeConfig *c = &v->cfg;
  VaeGraph *g = &v->dec;
  int s = v->latent_size, last = c->n_blocks - 1;
  g->input = new_tensor(g, c->latent_channels, s, s);
  int h = g->input;
  if (c->use_post_quant_conv)
    h = conv(v, g, h, "post_quant_conv", c->latent_channels, 1, 1, 0, FALSE);
  h = conv(v, g, h, "decoder.conv_in", c->block_out_channels[last], 3, 1, 1, FALSE);
  h = mid_block(v, g, h, "decoder", train);
  for (int i = 0; i < c->n_blocks; i++) {
    int cout = c->block_out_channels[last - i];
    for (int j = 0; j <= c->layers_per_block; j++) {
      g_autofree char *p = g_strdup_printf("decoder.up_blocks.%d.resnets.%d", i, j);
      h = resnet(v, g, h, p, cout);
    }
    if (i == last)
      continue;
    const VaeTensor *t = vae_tensor(g, h);
    h = unary(g, VOP_UP, h, t->C, 2 * t->H, 2 * t->W);
    g_autofree char *p = g_strdup_printf("decoder.up_blocks.%d.upsamplers.0.conv", i);
    h = conv(v, g, h, p, cout, 3, 1, 1, FALSE);
  }
  g->output = head_out(v, g, h, "decoder", c->out_channels);
}

static void graph_init(VaeGraph *g)
{
  g->ops = g_array_new(FALSE, TRUE, sizeof(VaeOp));
  g->tensors = g_array_new(FALSE, TRUE, sizeof(VaeTensor));
  g->slots = g_ptr_array_new();
}

void cohort_vae_build(CohortVae *v)
{
  v->table = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  graph_init(&v->enc);
  graph_init(&v->dec);
  gboolean train = (v->use & COHORT_VAE_TRAIN) != 0;
  build_encoder(v, train);
  build_decoder(v, train);
}

/* ---- memory ---- */

static void mark_uses(VaeGraph *g)
{
  for (guint i = 0; i < g->ops->len; i++) {
    const VaeOp *op = vae_op(g, (int)i);
    int ins[3] = {op->in, op->in2, op->in3};
    for (int k = 0; k < 3; k++)
      if (ins[k] >= 0)
        vae_tensor(g, ins[k])->last_use = (int)i;
  }
}

/* Forward only: each op's output takes the smallest free buffer that holds it (or a new one),
 * and an input's buffer is free again after its last reader. The input and the output keep
 * theirs. Returns the buffer sizes in floats. */
static GArray *plan_slots(VaeGraph *g, int B)
{
  GArray *sizes = g_array_new(FALSE, TRUE, sizeof(size_t));
  GArray *free_slots = g_array_new(FALSE, FALSE, sizeof(int));
  mark_uses(g);
  VaeTensor *in = vae_tensor(g, g->input);
  in->slot = 0;
  size_t n0 = vae_numel(in, B);
  g_array_append_val(sizes, n0);
  for (guint i = 0; i < g->ops->len; i++) {
    const VaeOp *op = vae_op(g, (int)i);
    VaeTensor *out = vae_tensor(g, op->out);
    size_t need = vae_numel(out, B);
    int best = -1;
    for (guint k = 0; k < free_slots->len; k++) {
      int s = g_array_index(free_slots, int, k);
      size_t have = g_array_index(sizes, size_t, s);
      if (have >= need && (best < 0 || have < g_array_index(sizes, size_t, best)))
        best = s;
    }
    if (best < 0) {
      best = (int)sizes->len;
      g_array_append_val(sizes, need);
    } else {
      for (guint k = 0; k < free_slots->len; k++)
        if (g_array_index(free_slots, int, k) == best)
          g_array_remove_index_fast(free_slots, k);
    }
    out->slot = best;
    int ins[3] = {op->in, op->in2, op->in3};
    for (int k = 0; k < 3; k++) {
      if (ins[k] < 0 || ins[k] == g->input || ins[k] == g->output)
        continue;
      VaeTensor *t = vae_tensor(g, ins[k]);
      gboolean already = FALSE;
      for (guint f = 0; f < free_slots->len; f++)
        already = already || g_array_index(free_slots, int, f) == t->slot;
      if (t->last_use == (int)i && !already)
        g_array_append_val(free_slots, t->slot);
    }
  }
  g_array_unref(free_slots);
  return sizes;
}

static gboolean graph_alloc(CohortVae *v, VaeGraph *g, gboolean train)
{
  const CohortBackend *be = v->be;
  int B = v->max_batch;
  if (train) {
    for (guint i = 0; i < g->tensors->len; i++) {
      VaeTensor *t = vae_tensor(g, (int)i);
      size_t bytes = vae_numel(t, B) * sizeof(float);
      t->data = be->alloc(bytes);
      t->grad = be->alloc(bytes);
      g_ptr_array_add(g->slots, t->data);
      g_ptr_array_add(g->slots, t->grad);
      if (!t->data || !t->grad)
        return FALSE;
    }
  } else {
    g_autoptr(GArray) sizes = plan_slots(g, B);
    for (guint s = 0; s < sizes->len; s++) {
      void *p = be->alloc(g_array_index(sizes, size_t, s) * sizeof(float));
      g_ptr_array_add(g->slots, p);
      if (!p)
        return FALSE;
    }
    for (guint i = 0; i < g->tensors->len; i++) {
      VaeTensor *t = vae_tensor(g, (int)i);
      if (t->slot >= 0)
        t->data = g->slots->pdata[t->slot];
    }
  }
  g->stats = be->alloc(MAX(g->stat_floats, 1) * B * sizeof(float));
  g_ptr_array_add(g->slots, g->stats);
  g->allocated = TRUE;
  return g->stats != NULL;
}

/* Scratch for attention: a block of score rows when forward only, the whole [T, T] score
 * matrix of one example (and SiLU's backward temporary) when training. */
static size_t scratch_floats(const CohortVae *v, gboolean train)
{
  size_t most = 1;
  const VaeGraph *gs[2] = {&v->enc, &v->dec};
  for (int k = 0; k < 2; k++)
    for (guint i = 0; i < gs[k]->tensors->len; i++) {
      const VaeTensor *t = vae_tensor(gs[k], (int)i);
      size_t T = (size_t)t->H * t->W;
      if (train)
        most = MAX(most, MAX(T * T, vae_numel(t, v->max_batch)));
      else
        most = MAX(most, MIN(T, (size_t)1 << 24) * MIN(T, ((size_t)1 << 24) / MAX(T, 1)));
    }
  return most;
}

gboolean cohort_vae_alloc(CohortVae *v, GError **error)
{
  const CohortBackend *be = v->be;
  gboolean train = (v->use & COHORT_VAE_TRAIN) != 0;
  size_t bytes = v->n_params * sizeof(float);
  v->params = be->alloc(bytes);
  gboolean ok = v->params != NULL;
  if (ok && train)
    ok = (v->grads = be->alloc(bytes)) != NULL;
  if (ok && (train || (v->use & COHORT_VAE_ENCODE)))
    ok = graph_alloc(v, &v->enc, train);
  if (ok && (train || (v->use & COHORT_VAE_DECODE)))
    ok = graph_alloc(v, &v->dec, train);
  v->scratch_floats = scratch_floats(v, train);
  if (ok)
    ok = (v->scratch = be->alloc(v->scratch_floats * sizeof(float))) != NULL;
  if (ok && train) {
    size_t img = (size_t)v->max_batch * v->cfg.in_channels * v->image_size * v->image_size;
    size_t mom =
        (size_t)v->max_batch * 2 * v->cfg.latent_channels * v->latent_size * v->latent_size;
    v->target = be->alloc(img * sizeof(float));
    v->losses = be->alloc((size_t)v->max_batch * sizeof(float));
    v->h_moments = g_try_new(float, mom);
    v->h_dmoments = g_try_new(float, mom);
    v->h_eps = g_try_new(float, mom / 2);
    ok = v->target && v->losses && v->h_moments && v->h_dmoments && v->h_eps;
  }
  if (!ok)
    return cohort_fail(error, COHORT_VAE_ERROR, 1,
                       "VAE: out of %s memory for %zu parameters and the activations of %d "
                       "%d×%d images; allowed: a smaller batch or image size",
                       be->name, v->n_params, v->max_batch, v->image_size, v->image_size);
  return TRUE;
}

static void graph_clear(const CohortBackend *be, VaeGraph *g)
{
  if (!g->ops)
    return;
  for (guint i = 0; be && i < g->slots->len; i++)
    be->free(g->slots->pdata[i]);
  g_ptr_array_unref(g->slots);
  g_array_unref(g->ops);
  g_array_unref(g->tensors);
}

void cohort_vae_free(CohortVae *v)
{
  if (!v)
    return;
  const CohortBackend *be = v->be;
  graph_clear(be, &v->enc);
  graph_clear(be, &v->dec);
  if (be) {
    be->free(v->params);
    be->free(v->grads);
    be->free(v->scratch);
    be->free(v->target);
    be->free(v->losses);
  }
  for (guint i = 0; v->table && i < v->table->len; i++)
    g_free((char *)vae_param(v, (int)i)->name);
  if (v->table)
    g_array_unref(v->table);
  g_free(v->h_moments);
  g_free(v->h_dmoments);
  g_free(v->h_eps);
  g_free(v->sha256);
  g_free(v->folder);
  g_free(v);
}

CohortVae *cohort_vae_create(const CohortBackend *be, const CohortVaeConfig *cfg, CohortVaeUse use,
                             int max_batch, int image_size, GError **error)
{
  if (!cohort_vae_config_check(cfg, NULL, error))
    return NULL;
  int f = cohort_vae_downsample_factor(cfg);
  if (image_size < f || image_size % f != 0 || image_size > 16384 || max_batch < 1)
    return cohort_fail(error, COHORT_VAE_ERROR, 0,
                       "VAE: images of %d pixels in batches of %d; allowed: a multiple of %d (the "
                       "VAE halves the image %d times) up to 16384, batches of 1 or more",
                       image_size, max_batch, f, cfg->n_blocks - 1),
           NULL;
  CohortVae *v = g_new0(CohortVae, 1);
  v->be = be;
  v->cfg = *cfg;
  v->use = use;
  v->max_batch = max_batch;
  v->image_size = image_size;
  v->latent_size = image_size / f;
  cohort_vae_build(v);
  if (!cohort_vae_alloc(v, error)) {
    cohort_vae_free(v);
    return NULL;
  }
  return v;
}

/* PyTorch's default for Conv2d and Linear (kaiming_uniform with a = sqrt(5), i.e.
 * U(±1/sqrt(fan_in)) for weights and biases alike), ones and zeros for GroupNorm. */
CohortVae *cohort_vae_new(const CohortBackend *be, const CohortVaeConfig *cfg, CohortVaeUse use,
                          int max_batch, int image_size, guint64 seed, GError **error)
{
  CohortVae *v = cohort_vae_create(be, cfg, use, max_batch, image_size, error);
  if (!v)
    return NULL;
  g_autofree float *host = g_new0(float, MAX(v->n_params, 1));
  size_t fan_in = 1;
  for (guint i = 0; i < v->table->len; i++) {
    const CohortTensorInfo *t = vae_param(v, (int)i);
    float *dst = host + t->offset;
    gboolean norm = strstr(t->name, "norm") != NULL;
    if (t->ndim >= 2)
      fan_in = t->numel / (size_t)t->shape[0];
    if (norm && t->ndim == 1 && g_str_has_suffix(t->name, ".weight"))
      for (size_t k = 0; k < t->numel; k++)
        dst[k] = 1.0f;
    else if (!norm) /* a bias follows its weight: the same fan_in */
      cohort_rng_fill_uniform(dst, t->numel, 1.0 / sqrt((double)fan_in),
                              cohort_rng_tensor_seed(seed, i));
  }
  cohort_vae_upload_params(v, host);
  return v;
}

const CohortVaeConfig *cohort_vae_get_config(const CohortVae *v)
{
  return &v->cfg;
}

int cohort_vae_image_size(const CohortVae *v)
{
  return v->image_size;
}

int cohort_vae_latent_size(const CohortVae *v)
{
  return v->latent_size;
}

int cohort_vae_max_batch(const CohortVae *v)
{
  return v->max_batch;
}

const char *cohort_vae_folder(const CohortVae *v)
{
  return v->folder;
}

guint cohort_vae_n_tensors(const CohortVae *v)
{
  return v->table->len;
}

const char *cohort_vae_tensor_name(const CohortVae *v, guint i)
{
  g_return_val_if_fail(i < v->table->len, NULL);
  return vae_param(v, (int)i)->name;
}

size_t cohort_vae_n_params(const CohortVae *v)
{
  return v->n_params;
}

float *cohort_vae_params(CohortVae *v)
{
  return v->params;
}

float *cohort_vae_grads(CohortVae *v)
{
  return v->grads;
}

void cohort_vae_download_params(const CohortVae *v, float *host)
{
  v->be->download(host, v->params, v->n_params * sizeof(float));
}

void cohort_vae_upload_params(CohortVae *v, const float *host)
{
  v->be->upload(v->params, host, v->n_params * sizeof(float));
  g_clear_pointer(&v->sha256, g_free); /* other weights: another content */
}

gboolean cohort_vae_find_param(const CohortVae *v, const char *name, size_t *offset, size_t *numel)
{
  const CohortTensorInfo *t =
      cohort_tensor_find((const CohortTensorInfo *)v->table->data, v->table->len, name);
  if (!t)
    return FALSE;
  *offset = t->offset;
  *numel = t->numel;
  return TRUE;
}

void cohort_vae_set_scaling(CohortVae *v, double scaling_factor, double shift_factor)
{
  v->cfg.scaling_factor = scaling_factor;
  v->cfg.shift_factor = shift_factor;
  g_clear_pointer(&v->sha256, g_free);
}
