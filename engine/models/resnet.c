/* The ResNet family: its plan of layers, tensor and buffer tables, activations,
 * initialisation and registry entry. */
#include "engine/models/resnet-private.h"

#include <math.h>
#include <string.h>

#include "engine/model/distill.h"
#include "engine/model/rng.h"

/* clang-format off */
G_DEFINE_QUARK(cohort-resnet-error-quark, cohort_resnet_error)
/* clang-format on */

static const char *variant_name(int v)
{
  static const char *const names[] = {"cifar", "resnet18", "resnet34", "resnet50", "resnet101"};
  return v >= 0 && v < (int)G_N_ELEMENTS(names) ? names[v] : "?";
}

/* The tables as they are being built. */
typedef struct {
  GArray *params, *buffers, *counters; /* of CohortTensorInfo */
  size_t p_off, b_off;
  int layer;
} Tables;

static void add(GArray *arr, const char *prefix, const char *name, int ndim, const int *shape,
                int layer, size_t *off)
{
  CohortTensorInfo t = {.name = g_strconcat(prefix, name, NULL),
                        .ndim = ndim,
                        .layer = layer,
                        .offset = *off,
                        .numel = 1};
  for (int d = 0; d < ndim; d++) {
    t.shape[d] = shape[d];
    t.numel *= (size_t)shape[d];
  }
  /* Convolution kernels and the classifier's matrix decay; BatchNorm and biases do not. */
  t.decay = ndim >= 2;
  *off += t.numel;
  g_array_append_val(arr, t);
}

/* Sets up unit `u` and adds its tensors: the convolution `conv` ("conv1", "downsample.0") and
 * the BatchNorm `bn` ("bn1", "downsample.1") under `prefix`. */
static void add_conv_bn(Tables *t, ResnetConvBn *u, const char *prefix, const char *conv,
                        const char *bn, int c_in, int c_out, int k, int stride, int h_in)
{
  *u = (ResnetConvBn){.c_in = c_in, .c_out = c_out, .k = k, .stride = stride, .pad = k / 2};
  u->h_in = h_in;
  u->h_out = (h_in + 2 * u->pad - k) / stride + 1;
  g_autofree char *cw = g_strconcat(conv, ".weight", NULL);
  g_autofree char *bw = g_strconcat(bn, ".weight", NULL), *bb = g_strconcat(bn, ".bias", NULL);
  g_autofree char *rm = g_strconcat(bn, ".running_mean", NULL);
  g_autofree char *rv = g_strconcat(bn, ".running_var", NULL);
  g_autofree char *nbt = g_strconcat(bn, ".num_batches_tracked", NULL);
  const int wshape[4] = {c_out, c_in, k, k};
  u->w_off = t->p_off;
  u->w_index = t->params->len;
  add(t->params, prefix, cw, 4, wshape, t->layer, &t->p_off);
  g_array_index(t->params, CohortTensorInfo, u->w_index).adapt = COHORT_ADAPT_CONV2D;
  u->g_off = t->p_off;
  add(t->params, prefix, bw, 1, &c_out, t->layer, &t->p_off);
  u->b_off = t->p_off;
  add(t->params, prefix, bb, 1, &c_out, t->layer, &t->p_off);
  u->mean_off = t->b_off;
  add(t->buffers, prefix, rm, 1, &c_out, t->layer, &t->b_off);
  u->var_off = t->b_off;
  add(t->buffers, prefix, rv, 1, &c_out, t->layer, &t->b_off);
  /* A 0-dimensional counter; offsets are fixed once the statistics' size is known. */
  size_t index = t->counters->len;
  add(t->counters, prefix, nbt, 0, NULL, t->layer, &index);
  g_array_index(t->counters, CohortTensorInfo, t->counters->len - 1).int64 = TRUE;
}

/* The tables' final form: the counters' offsets after the statistics, and each BatchNorm's
 * buffers together as in torchvision's state dict. */
static void finish_tables(Resnet *r, Tables *t)
{
  r->n_bn = (int)t->counters->len;
  r->nbt_off = t->b_off;
  for (guint i = 0; i < t->counters->len; i++) {
    CohortTensorInfo *c = &g_array_index(t->counters, CohortTensorInfo, i);
    c->offset += r->nbt_off;
  }
  /* The file lists each BatchNorm's buffers together (as torchvision's state dict does);
   * in memory the counters sit at the end, so one op advances them all. */
  GArray *bufs = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  for (guint i = 0; i < t->counters->len; i++) {
    g_array_append_vals(bufs, &g_array_index(t->buffers, CohortTensorInfo, 2 * i), 2);
    g_array_append_val(bufs, g_array_index(t->counters, CohortTensorInfo, i));
  }
  r->base.n_buffer_floats = t->b_off + t->counters->len;
  r->base.n_buffers = bufs->len;
  r->base.buffers = (CohortTensorInfo *)g_array_free(bufs, FALSE);
  g_array_free(t->buffers, TRUE);
  g_array_free(t->counters, TRUE);
  r->base.n_tensors = t->params->len;
  r->base.tensors = (CohortTensorInfo *)g_array_free(t->params, FALSE);
  r->base.n_params = t->p_off;
}

/* Stages and blocks of a variant. */
typedef struct {
  int stages, blocks[4];
  gboolean bottleneck;
} Layout;

static Layout layout_of(const CohortResnetShape *s)
{
  switch (s->variant) {
  case COHORT_RESNET_18:
    return (Layout){4, {2, 2, 2, 2}, FALSE};
  case COHORT_RESNET_34:
    return (Layout){4, {3, 4, 6, 3}, FALSE};
  case COHORT_RESNET_50:
    return (Layout){4, {3, 4, 6, 3}, TRUE};
  case COHORT_RESNET_101:
    return (Layout){4, {3, 4, 23, 3}, TRUE};
  default:
    return (Layout){3, {s->blocks_per_stage, s->blocks_per_stage, s->blocks_per_stage}, FALSE};
  }
}

static void note_unit(Resnet *r, const ResnetConvBn *u)
{
  r->max_act = MAX(r->max_act, (size_t)u->c_out * u->h_out * u->h_out);
  r->max_c = MAX(r->max_c, u->c_out);
}

/* One block with `planes` planes at input side `side`: a BasicBlock (two 3×3 units, the stride
 * on the first) or a Bottleneck (1×1, 3×3 with the stride, 1×1 to 4·planes), and the
 * downsampling shortcut where the shape changes. Returns its output channels. */
static int add_block(Resnet *r, Tables *t, ResnetBlock *b, const char *prefix, gboolean bottleneck,
                     int in, int planes, int stride, int side)
{
  int out = bottleneck ? 4 * planes : planes;
  b->p_begin = t->p_off;
  if (bottleneck) {
    b->n_units = 3;
    add_conv_bn(t, &b->unit[0], prefix, "conv1", "bn1", in, planes, 1, 1, side);
    add_conv_bn(t, &b->unit[1], prefix, "conv2", "bn2", planes, planes, 3, stride, side);
    add_conv_bn(t, &b->unit[2], prefix, "conv3", "bn3", planes, out, 1, 1, b->unit[1].h_out);
  } else {
    b->n_units = 2;
    add_conv_bn(t, &b->unit[0], prefix, "conv1", "bn1", in, planes, 3, stride, side);
    add_conv_bn(t, &b->unit[1], prefix, "conv2", "bn2", planes, planes, 3, 1, b->unit[0].h_out);
  }
  b->has_down = stride != 1 || in != out;
  if (b->has_down)
    add_conv_bn(t, &b->down, prefix, "downsample.0", "downsample.1", in, out, 1, stride, side);
  b->p_end = t->p_off;
  for (int u = 0; u < b->n_units; u++)
    note_unit(r, &b->unit[u]);
  return out;
}

/* The layers of the shape: the stem (and the ImageNet stem's max-pooling), the stages of
 * blocks (the first of every stage after the first with stride 2), the classifier; tables in
 * torchvision's order. */
static void build_tables(Resnet *r)
{
  const CohortResnetShape *s = &r->shape;
  Tables t = {.params = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo)),
              .buffers = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo)),
              .counters = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo))};
  Layout lay = layout_of(s);
  gboolean imagenet = s->variant != COHORT_RESNET_CIFAR;
  int side = s->image_size;
  add_conv_bn(&t, &r->stem, "", "conv1", "bn1", s->channels, s->width, imagenet ? 7 : 3,
              imagenet ? 2 : 1, side);
  r->max_act = (size_t)s->channels * side * side;
  note_unit(r, &r->stem);
  side = r->stem.h_out;
  if (imagenet) {
    r->has_pool = TRUE;
    r->pool_side = (side + 2 * 1 - 3) / 2 + 1;
    side = r->pool_side;
  }
  r->n_blocks = 0;
  for (int st = 0; st < lay.stages; st++)
    r->n_blocks += lay.blocks[st];
  r->blocks = g_new0(ResnetBlock, r->n_blocks);
  int in = s->width, k = 0;
  for (int st = 0; st < lay.stages; st++)
    for (int i = 0; i < lay.blocks[st]; i++, k++) {
      ResnetBlock *b = &r->blocks[k];
      g_autofree char *prefix = g_strdup_printf("layer%d.%d.", st + 1, i);
      t.layer++;
      in = add_block(r, &t, b, prefix, lay.bottleneck, in, s->width << st, st > 0 && i == 0 ? 2 : 1,
                     side);
      side = b->unit[b->n_units - 1].h_out;
    }
  r->feat = in;
  r->last_side = side;
  t.layer++;
  r->fc_w_off = t.p_off;
  const int fc_w[2] = {s->num_classes, in};
  add(t.params, "", "fc.weight", 2, fc_w, t.layer, &t.p_off);
  r->fc_b_off = t.p_off;
  r->fc_b_off = t.p_off;
  add(t.params, "", "fc.bias", 1, &s->num_classes, t.layer, &t.p_off);
  finish_tables(r, &t);
  /* the classifier is nn.Linear, [out, in]: a LoRA target (finetune lora) */
  r->fc_index = r->base.n_tensors - 2;
  r->base.tensors[r->fc_index].adapt = COHORT_ADAPT_LINEAR;
}

/* Carves the activations out of one allocation: the first pass (base NULL) only counts. A
 * forward-only model (a distillation teacher) has no backward scratch, and every unit's
 * convolution output, the blocks' hidden activations and the block outputs (two, in turn)
 * share buffers of the largest activation's size, since nothing keeps them for a backward. */
static size_t layout_acts(Resnet *r, char *base)
{
  const CohortResnetShape *s = &r->shape;
  size_t B = (size_t)r->base.max_batch, K = (size_t)s->num_classes, F = (size_t)r->feat;
  size_t used = 0;
  gboolean fo = r->forward_only;
  float *conv_out = NULL, *hidden[2] = {NULL, NULL}, *outs[2] = {NULL, NULL};
#define TAKE(ptr, count, type)                                                                     \
  do {                                                                                             \
    size_t bytes_ = ((count) * sizeof(type) + 63) / 64 * 64;                                       \
    if (base)                                                                                      \
      (ptr) = (type *)(base + used);                                                               \
    used += bytes_;                                                                                \
  } while (0)
#define TAKE_UNIT(u)                                                                               \
  do {                                                                                             \
    if (fo)                                                                                        \
      (u)->conv_out = conv_out;                                                                    \
    else                                                                                           \
      TAKE((u)->conv_out, B *(u)->c_out *(u)->h_out *(u)->h_out, float);                           \
    TAKE((u)->stat, 2 * (size_t)(u)->c_out + 1, float);                                            \
    TAKE((u)->rstd, (size_t)(u)->c_out, float);                                                    \
  } while (0)
  TAKE(r->img, B * s->channels * s->image_size * s->image_size, float);
  TAKE(r->labels, B, int);
  if (fo) {
    TAKE(conv_out, B * r->max_act, float);
    TAKE(hidden[0], B * r->max_act, float);
    TAKE(hidden[1], B * r->max_act, float);
    TAKE(outs[0], B * r->max_act, float);
    TAKE(outs[1], B * r->max_act, float);
  }
  TAKE_UNIT(&r->stem);
  size_t stem_n = B * r->stem.c_out * r->stem.h_out * r->stem.h_out;
  size_t pool_n = B * r->stem.c_out * r->pool_side * r->pool_side;
  if (fo) {
    /* block 0 reads outs[0]: the pooled stem, or the stem itself */
    r->stem_out = r->has_pool ? hidden[0] : outs[0];
    r->pool_out = r->has_pool ? outs[0] : NULL;
  } else {
    TAKE(r->stem_out, stem_n, float);
    if (r->has_pool)
      TAKE(r->pool_out, pool_n, float);
  }
  for (int i = 0; i < r->n_blocks; i++) {
    ResnetBlock *b = &r->blocks[i];
    for (int u = 0; u < b->n_units; u++)
      TAKE_UNIT(&b->unit[u]);
    if (b->has_down)
      TAKE_UNIT(&b->down);
    for (int u = 0; u + 1 < b->n_units; u++) {
      const ResnetConvBn *c = &b->unit[u];
      if (fo)
        b->hidden[u] = hidden[u];
      else
        TAKE(b->hidden[u], B * c->c_out * c->h_out * c->h_out, float);
    }
    const ResnetConvBn *last = &b->unit[b->n_units - 1];
    if (fo)
      b->out = outs[(i + 1) % 2]; /* block i reads outs[i % 2] */
    else
      TAKE(b->out, B * last->c_out * last->h_out * last->h_out, float);
  }
  TAKE(r->pooled, B * F, float);
  TAKE(r->logits, B * K, float);
  TAKE(r->lse, B, float);
  TAKE(r->losses, B, float);
  TAKE(r->dconv, B * r->max_act, float); /* forward: the downsampling shortcut's output */
  TAKE(r->ones, (size_t)r->n_bn, float);
  if (!fo) {
    TAKE(r->dlogits, B * K, float);
    TAKE(r->dpooled, B * F, float);
    TAKE(r->da, B * r->max_act, float);
    TAKE(r->db, B * r->max_act, float);
    TAKE(r->dh[0], B * r->max_act, float);
    TAKE(r->dh[1], B * r->max_act, float);
    TAKE(r->sums, 2 * (size_t)r->max_c, float);
  }
#undef TAKE_UNIT
#undef TAKE
  return used;
}

static void fill_normal(float *dst, size_t n, double std, guint64 seed)
{
  guint64 st = seed;
  for (size_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - cohort_rng_uniform(&st);
    double u2 = cohort_rng_uniform(&st);
    double rad = sqrt(-2.0 * log(u1)) * std;
    dst[i] = (float)(rad * cos(2 * G_PI * u2));
    if (i + 1 < n)
      dst[i + 1] = (float)(rad * sin(2 * G_PI * u2));
  }
}

/* With zero_init_residual, each block's last BatchNorm scale starts at 0 (torchvision). */
static gboolean starts_at_zero(const Resnet *r, size_t offset)
{
  if (!r->shape.zero_init_residual)
    return FALSE;
  for (int b = 0; b < r->n_blocks; b++)
    if (r->blocks[b].unit[r->blocks[b].n_units - 1].g_off == offset)
      return TRUE;
  return FALSE;
}

static void resnet_init_tensor(CohortModel *m, guint64 seed, guint i, float *dst)
{
  Resnet *r = resnet_of(m);
  const CohortTensorInfo *t = &m->tensors[i];
  guint64 s = cohort_rng_tensor_seed(seed, i);
  memset(dst, 0, t->numel * sizeof(float));
  if (g_str_has_prefix(t->name, "fc.")) {
    cohort_rng_fill_uniform(dst, t->numel, 1.0 / sqrt((double)r->feat), s);
  } else if (t->ndim == 4) {
    double fan_out = (double)t->shape[0] * t->shape[2] * t->shape[3];
    fill_normal(dst, t->numel, sqrt(2.0 / fan_out), s);
  } else if (g_str_has_suffix(t->name, ".weight") && !starts_at_zero(r, t->offset)) {
    for (size_t k = 0; k < t->numel; k++)
      dst[k] = 1.0f; /* BatchNorm's scale */
  }
}

static void resnet_init_buffers(CohortModel *m)
{
  float *bufs = g_new0(float, m->n_buffer_floats);
  for (guint i = 0; i < m->n_buffers; i++)
    if (g_str_has_suffix(m->buffers[i].name, ".running_var"))
      for (size_t k = 0; k < m->buffers[i].numel; k++)
        bufs[m->buffers[i].offset + k] = 1.0f;
  cohort_model_upload_buffers(m, bufs);
  g_free(bufs);
}

/* torchvision's ResNet initialisation: convolutions kaiming_normal_(mode="fan_out",
 * nonlinearity="relu"), i.e. N(0, 2 / (c_out·k²)); BatchNorm weight 1 (0 for each block's last
 * with zero_init_residual) and bias 0; the
 * classifier as nn.Linear's default, U(±1/√fan_in) for weight and bias. Running mean 0,
 * running variance 1, no batches tracked. */
static void resnet_init(CohortModel *m, guint64 seed)
{
  float *host = g_new0(float, m->n_params);
  for (guint i = 0; i < m->n_tensors; i++)
    resnet_init_tensor(m, seed, i, host + m->tensors[i].offset);
  cohort_model_upload_params(m, host);
  g_free(host);
  resnet_init_buffers(m);
}

static void free_sync_scratch(Resnet *r)
{
  if (r->gather && r->base.be)
    r->base.be->free(r->gather);
  r->gather = NULL;
  g_clear_pointer(&r->gather_host, g_free);
  r->gather_world = 0;
}

static gboolean resnet_set_comm(CohortModel *m, const CohortModelComm *comm, GError **error)
{
  Resnet *r = resnet_of(m);
  if (comm->world_size == r->gather_world)
    return TRUE;
  free_sync_scratch(r);
  size_t n = (size_t)comm->world_size * (2 * (size_t)r->max_c + 1);
  r->gather = m->be->alloc(n * sizeof(float));
  if (!r->gather) {
    g_set_error(error, cohort_resnet_error_quark(), 2,
                "SyncBatchNorm: out of %s memory for the statistics of %d ranks", m->be->name,
                comm->world_size);
    return FALSE;
  }
  r->gather_host = g_new(float, n);
  r->gather_world = comm->world_size;
  return TRUE;
}

static void resnet_finalize(CohortModel *m)
{
  Resnet *r = resnet_of(m);
  free_sync_scratch(r);
  if (m->be)
    m->be->free(r->act_mem);
  g_free(r->blocks);
  g_free(r->host_losses);
  g_free(r->host_img);
  g_free(r);
}

/* Multiply-adds of the convolutions (the bulk) and the classifier, times 6: forward 2 FLOPs
 * per multiply-add, backward 4 (input and weight gradients). */
static double unit_macs(const ResnetConvBn *u)
{
  return (double)u->c_in * u->k * u->k * u->c_out * u->h_out * u->h_out;
}

static double resnet_flops_per_example(const CohortModel *m)
{
  const Resnet *r = resnet_of(m);
  double macs = unit_macs(&r->stem);
  for (int i = 0; i < r->n_blocks; i++) {
    const ResnetBlock *b = &r->blocks[i];
    for (int u = 0; u < b->n_units; u++)
      macs += unit_macs(&b->unit[u]);
    if (b->has_down)
      macs += unit_macs(&b->down);
  }
  macs += (double)r->feat * r->shape.num_classes;
  return 6.0 * macs;
}

const CohortResnetShape *cohort_resnet_shape(const CohortModel *m)
{
  g_return_val_if_fail(m && m->klass == &cohort_resnet_class, NULL);
  return &resnet_of(m)->shape;
}

/* Validation loss and top-1 accuracy over: summed losses, correct rows, rows. */
static const CohortMetric resnet_metrics[] = {{COHORT_FIELD_VAL_LOSS, 0, 2},
                                              {COHORT_FIELD_ACCURACY, 1, 2}};

static const CohortModelOps resnet_ops = {
    .forward = cohort_resnet_forward_batch,
    .backward = cohort_resnet_backward,
    .init_weights = resnet_init,
    .init_tensor = resnet_init_tensor,
    .init_buffers = resnet_init_buffers,
    .eval_batch = cohort_resnet_eval_batch,
    .flops_per_example = resnet_flops_per_example,
    .finalize = resnet_finalize,
    .logits = cohort_resnet_logits_op,
    .backward_logits = cohort_resnet_backward_logits,
    .set_comm = resnet_set_comm,
};

static gboolean resnet_check_config(const CohortConfig *cfg, const char *source, GError **error)
{
  const char *src = source ? source : "config";
  if (cfg->resnet_variant != COHORT_RESNET_CIFAR) {
    if (cfg->image_channels != 3) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"image_channels\": %d is not allowed with resnet_variant \"%s\"; "
                  "allowed: 3 (torchvision's ImageNet ResNets take RGB images)",
                  src, cfg->image_channels, variant_name(cfg->resnet_variant));
      return FALSE;
    }
    if (cfg->image_size < 32) {
      g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                  "%s: key \"image_size\": %d is too small for resnet_variant \"%s\"; "
                  "allowed: 32 to 4096 (the network halves the side five times)",
                  src, cfg->image_size, variant_name(cfg->resnet_variant));
      return FALSE;
    }
    return TRUE;
  }
  if (cfg->n_layer < 8 || (cfg->n_layer - 2) % 6 != 0) {
    g_set_error(error, COHORT_CONFIG_ERROR, COHORT_CONFIG_ERROR_INVALID,
                "%s: key \"n_layer\": %d is not a depth of this ResNet; allowed: 6n+2 for n "
                "BasicBlocks per stage (8, 14, 20, 26, 32, 38, 44, 50, 56 … 92)",
                src, cfg->n_layer);
    return FALSE;
  }
  return TRUE;
}

static CohortResnetShape shape_of(const CohortConfig *cfg)
{
  gboolean cifar = cfg->resnet_variant == COHORT_RESNET_CIFAR;
  return (CohortResnetShape){
      .variant = (CohortResnetVariant)cfg->resnet_variant,
      .blocks_per_stage = cifar ? (cfg->n_layer - 2) / 6 : 0,
      .width = cifar ? cfg->resnet_width : 64,
      .image_size = cfg->image_size,
      .channels = cfg->image_channels,
      .num_classes = cfg->num_classes,
      .zero_init_residual = cfg->zero_init_residual,
  };
}

/* The tables of the model `cfg` describes, without memory, for count_params and act_bytes. */
static void probe_new(Resnet *probe, const CohortConfig *cfg, int max_batch)
{
  *probe = (Resnet){.shape = shape_of(cfg)};
  probe->shape.num_classes = MAX(cfg->num_classes, 1); /* 0 = from the data, unknown here */
  probe->base.max_batch = max_batch;
  build_tables(probe);
}

static void probe_clear(Resnet *probe)
{
  for (guint i = 0; i < probe->base.n_tensors; i++)
    g_free((char *)probe->base.tensors[i].name);
  for (guint i = 0; i < probe->base.n_buffers; i++)
    g_free((char *)probe->base.buffers[i].name);
  g_free(probe->base.tensors);
  g_free(probe->base.buffers);
  g_free(probe->blocks);
}

static gint64 resnet_count_params(const CohortConfig *cfg)
{
  if (!resnet_check_config(cfg, NULL, NULL))
    return 0;
  Resnet probe;
  probe_new(&probe, cfg, 1);
  gint64 n = (gint64)probe.base.n_params;
  probe_clear(&probe);
  return n;
}

static size_t resnet_act_bytes(const CohortConfig *cfg, int max_batch)
{
  if (!resnet_check_config(cfg, NULL, NULL))
    return 0;
  Resnet probe;
  probe_new(&probe, cfg, max_batch);
  size_t bytes = layout_acts(&probe, NULL);
  probe_clear(&probe);
  return bytes;
}

static CohortTensorInfo *resnet_param_table(const CohortConfig *cfg, guint *n_tensors,
                                            size_t *n_floats)
{
  if (!resnet_check_config(cfg, NULL, NULL))
    return NULL;
  Resnet probe;
  probe_new(&probe, cfg, 1);
  CohortTensorInfo *t = g_steal_pointer(&probe.base.tensors);
  *n_tensors = probe.base.n_tensors;
  *n_floats = probe.base.n_params;
  probe.base.n_tensors = 0;
  probe_clear(&probe);
  return t;
}

static void move_unit(const CohortModel *m, ResnetConvBn *u)
{
  u->w_off = cohort_model_moved(m, u->w_off);
  u->g_off = cohort_model_moved(m, u->g_off);
  u->b_off = cohort_model_moved(m, u->b_off);
}

/* The offsets kept above, after cohort_model_alloc_tables laid the tensors out for
 * finetune frozen (engine/model/finetune.h); unchanged otherwise. */
static void move_offsets(Resnet *r)
{
  const CohortModel *m = &r->base;
  move_unit(m, &r->stem);
  for (int i = 0; i < r->n_blocks; i++) {
    for (int u = 0; u < r->blocks[i].n_units; u++)
      move_unit(m, &r->blocks[i].unit[u]);
    if (r->blocks[i].has_down)
      move_unit(m, &r->blocks[i].down);
  }
  r->fc_w_off = cohort_model_moved(m, r->fc_w_off);
  r->fc_b_off = cohort_model_moved(m, r->fc_b_off);
}

static CohortModel *resnet_create(const CohortBackend *be, const CohortConfig *cfg, int max_batch,
                                  GError **error)
{
  if (!resnet_check_config(cfg, NULL, error))
    return NULL;
  if (cfg->num_classes < 1 || max_batch < 1) {
    g_set_error(error, cohort_resnet_error_quark(), 0,
                "ResNet model: %d classes and max_batch %d; a classifier needs labelled images "
                "(train_data with one folder per class, or num_classes >= 1) and a batch of 1 or "
                "more",
                cfg->num_classes, max_batch);
    return NULL;
  }
  Resnet *r = g_new0(Resnet, 1);
  CohortModel *m = &r->base;
  m->klass = &cohort_resnet_class;
  m->ops = &resnet_ops;
  m->be = be;
  m->max_batch = max_batch;
  m->metrics = resnet_metrics;
  m->n_metrics = G_N_ELEMENTS(resnet_metrics);
  m->n_sums = 3;
  r->shape = shape_of(cfg);
  r->bn_momentum = (float)cfg->bn_momentum;
  r->freeze_bn_stats = cfg->freeze_bn_stats;
  r->forward_only = cohort_model_creating_frozen();
  build_tables(r);
  m->lora_rows = (size_t)max_batch; /* the classifier's rows: one per image */
  size_t act_bytes = layout_acts(r, NULL);
  r->act_mem = be->alloc(act_bytes);
  r->host_losses = g_new(float, max_batch);
  r->host_img =
      g_new(float, (size_t)max_batch * cfg->image_channels * cfg->image_size * cfg->image_size);
  GError *local = NULL;
  if (!cohort_model_alloc_tables(m, &local) && local->domain == COHORT_CONFIG_ERROR) {
    g_propagate_error(error, local); /* the fine-tuning keys do not fit the model */
    cohort_model_free(m);
    return NULL;
  }
  g_clear_error(&local);
  if (!m->params || (!r->forward_only && !m->grads) || !r->act_mem) {
    g_set_error(error, cohort_resnet_error_quark(), 1,
                "ResNet model: out of %s memory for %zu parameters and %.1f MiB of activations "
                "(batch %d of %d×%d images); allowed: a smaller model or batch",
                be->name, m->n_params, act_bytes / 1048576.0, max_batch, cfg->image_size,
                cfg->image_size);
    cohort_model_free(m);
    return NULL;
  }
  move_offsets(r);
  layout_acts(r, r->act_mem);
  m->act_bytes = act_bytes;
  g_autofree float *ones = g_new(float, r->n_bn);
  for (int i = 0; i < r->n_bn; i++)
    ones[i] = 1.0f;
  be->upload(r->ones, ones, (size_t)r->n_bn * sizeof(float));
  return m;
}

static const CohortDataFormat resnet_formats[] = {COHORT_DATA_IMAGES};

const CohortModelClass cohort_resnet_class = {
    .name = "resnet",
    .title = "ResNet image classifier (BatchNorm)",
    .formats = resnet_formats,
    .n_formats = G_N_ELEMENTS(resnet_formats),
    .check_config = resnet_check_config,
    .count_params = resnet_count_params,
    .act_bytes = resnet_act_bytes,
    .param_table = resnet_param_table,
    .create = resnet_create,
    .import_weights = cohort_resnet_import,
    .check_teacher = cohort_distill_check_images,
    .distill_new = cohort_logits_distill_new,
    .frozen_layout = TRUE,
    .lora_targets = "fc",
};
