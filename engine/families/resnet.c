/* The "resnet" family's description (see resnet.h). */
#include "engine/families/resnet.h"

static const char *variant_name(int v)
{
  static const char *const names[] = {"cifar", "resnet18", "resnet34", "resnet50", "resnet101"};
  return v >= 0 && v < (int)G_N_ELEMENTS(names) ? names[v] : "?";
}

CohortResnetShape cohort_family_resnet_shape(const CohortConfig *cfg)
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

/* The tables as they are being built: the counters (num_batches_tracked) apart, placed after
 * the statistics once their size is known. */
typedef struct {
  CohortTableBuilder b;
  GArray *counters; /* of CohortTensorInfo */
  int layer;
} Tables;

static void add(GArray *arr, const char *prefix, const char *name, int ndim, const int *shape,
                int layer, size_t *off)
{
  cohort_table_add(arr, g_strconcat(prefix, name, NULL), ndim, shape, layer, off);
}

/* Sets up unit `u` and adds its tensors: the convolution `conv` ("conv1", "downsample.0") and
 * the BatchNorm `bn` ("bn1", "downsample.1") under `prefix`. */
static void add_conv_bn(Tables *t, CohortResnetUnit *u, const char *prefix, const char *conv,
                        const char *bn, int c_in, int c_out, int k, int stride, int h_in)
{
  *u = (CohortResnetUnit){.c_in = c_in, .c_out = c_out, .k = k, .stride = stride, .pad = k / 2};
  u->h_in = h_in;
  u->h_out = (h_in + 2 * u->pad - k) / stride + 1;
  g_autofree char *cw = g_strconcat(conv, ".weight", NULL);
  g_autofree char *bw = g_strconcat(bn, ".weight", NULL), *bb = g_strconcat(bn, ".bias", NULL);
  g_autofree char *rm = g_strconcat(bn, ".running_mean", NULL);
  g_autofree char *rv = g_strconcat(bn, ".running_var", NULL);
  g_autofree char *nbt = g_strconcat(bn, ".num_batches_tracked", NULL);
  const int wshape[4] = {c_out, c_in, k, k};
  GArray *params = t->b.params, *buffers = t->b.buffers;
  u->w_off = t->b.param_floats;
  u->w_index = params->len;
  add(params, prefix, cw, 4, wshape, t->layer, &t->b.param_floats);
  g_array_index(params, CohortTensorInfo, u->w_index).adapt = COHORT_ADAPT_CONV2D;
  u->g_off = t->b.param_floats;
  add(params, prefix, bw, 1, &c_out, t->layer, &t->b.param_floats);
  u->b_off = t->b.param_floats;
  add(params, prefix, bb, 1, &c_out, t->layer, &t->b.param_floats);
  u->mean_off = t->b.buffer_floats;
  add(buffers, prefix, rm, 1, &c_out, t->layer, &t->b.buffer_floats);
  u->var_off = t->b.buffer_floats;
  add(buffers, prefix, rv, 1, &c_out, t->layer, &t->b.buffer_floats);
  /* A 0-dimensional counter; offsets are fixed once the statistics' size is known. */
  size_t index = t->counters->len;
  add(t->counters, prefix, nbt, 0, NULL, t->layer, &index);
  g_array_index(t->counters, CohortTensorInfo, t->counters->len - 1).int64 = TRUE;
}

/* The tables' final form: the counters' offsets after the statistics, and each BatchNorm's
 * buffers together as in torchvision's state dict. */
static void finish_tables(CohortResnetNet *net, Tables *t, CohortFamilyTables *out)
{
  net->n_bn = (int)t->counters->len;
  net->nbt_off = t->b.buffer_floats;
  for (guint i = 0; i < t->counters->len; i++)
    g_array_index(t->counters, CohortTensorInfo, i).offset += net->nbt_off;
  /* The file lists each BatchNorm's buffers together (as torchvision's state dict does);
   * in memory the counters sit at the end, so one op advances them all. */
  GArray *bufs = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo));
  for (guint i = 0; i < t->counters->len; i++) {
    g_array_append_vals(bufs, &g_array_index(t->b.buffers, CohortTensorInfo, 2 * i), 2);
    g_array_append_val(bufs, g_array_index(t->counters, CohortTensorInfo, i));
  }
  g_array_free(t->b.buffers, TRUE);
  g_array_free(t->counters, TRUE);
  t->b.buffers = bufs;
  t->b.buffer_floats += net->n_bn;
  cohort_table_builder_finish(&t->b, out);
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

static void note_unit(CohortResnetNet *net, const CohortResnetUnit *u)
{
  net->max_act = MAX(net->max_act, (size_t)u->c_out * u->h_out * u->h_out);
  net->max_c = MAX(net->max_c, u->c_out);
}

/* One block with `planes` planes at input side `side`: a BasicBlock (two 3×3 units, the stride
 * on the first) or a Bottleneck (1×1, 3×3 with the stride, 1×1 to 4·planes), and the
 * downsampling shortcut where the shape changes. Returns its output channels. */
static int add_block(CohortResnetNet *net, Tables *t, CohortResnetBlock *b, const char *prefix,
                     gboolean bottleneck, int in, int planes, int stride, int side)
{
  int out = bottleneck ? 4 * planes : planes;
  b->p_begin = t->b.param_floats;
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
  b->p_end = t->b.param_floats;
  for (int u = 0; u < b->n_units; u++)
    note_unit(net, &b->unit[u]);
  return out;
}

void cohort_family_resnet_build(const CohortResnetShape *s, CohortResnetNet *net,
                                CohortFamilyTables *out)
{
  *net = (CohortResnetNet){0};
  Tables t = {.counters = g_array_new(FALSE, TRUE, sizeof(CohortTensorInfo))};
  cohort_table_builder_init(&t.b);
  Layout lay = layout_of(s);
  gboolean imagenet = s->variant != COHORT_RESNET_CIFAR;
  int side = s->image_size;
  add_conv_bn(&t, &net->stem, "", "conv1", "bn1", s->channels, s->width, imagenet ? 7 : 3,
              imagenet ? 2 : 1, side);
  net->max_act = (size_t)s->channels * side * side;
  note_unit(net, &net->stem);
  side = net->stem.h_out;
  if (imagenet) {
    net->has_pool = TRUE;
    net->pool_side = (side + 2 * 1 - 3) / 2 + 1;
    side = net->pool_side;
  }
  for (int st = 0; st < lay.stages; st++)
    net->n_blocks += lay.blocks[st];
  net->blocks = g_new0(CohortResnetBlock, MAX(net->n_blocks, 1));
  int in = s->width, k = 0;
  for (int st = 0; st < lay.stages; st++)
    for (int i = 0; i < lay.blocks[st]; i++, k++) {
      CohortResnetBlock *b = &net->blocks[k];
      g_autofree char *prefix = g_strdup_printf("layer%d.%d.", st + 1, i);
      t.layer++;
      in = add_block(net, &t, b, prefix, lay.bottleneck, in, s->width << st,
                     st > 0 && i == 0 ? 2 : 1, side);
      side = b->unit[b->n_units - 1].h_out;
    }
  net->feat = in;
  net->last_side = side;
  t.layer++;
  net->fc_w_off = t.b.param_floats;
  net->fc_index = t.b.params->len;
  add(t.b.params, "", "fc.weight", 2, (int[]){s->num_classes, in}, t.layer, &t.b.param_floats);
  /* the classifier is nn.Linear, [out, in]: a LoRA target */
  g_array_index(t.b.params, CohortTensorInfo, net->fc_index).adapt = COHORT_ADAPT_LINEAR;
  net->fc_b_off = t.b.param_floats;
  add(t.b.params, "", "fc.bias", 1, &s->num_classes, t.layer, &t.b.param_floats);
  finish_tables(net, &t, out);
}

void cohort_family_resnet_net_clear(CohortResnetNet *net)
{
  g_free(net->blocks);
  *net = (CohortResnetNet){0};
}

/* A unit's activations; a forward-only model's units all write `shared`. */
static void take_unit(CohortActCarver *k, CohortResnetUnit *u, size_t B, gboolean fo, float *shared)
{
  if (fo)
    u->conv_out = shared;
  else
    COHORT_ACT_TAKE(k, u->conv_out, B * u->c_out * u->h_out * u->h_out, float);
  COHORT_ACT_TAKE(k, u->stat, 2 * (size_t)u->c_out + 1, float);
  COHORT_ACT_TAKE(k, u->rstd, (size_t)u->c_out, float);
}

size_t cohort_family_resnet_layout(CohortResnetNet *r, const CohortResnetShape *s, int max_batch,
                                   gboolean forward_only, char *base)
{
  size_t B = (size_t)max_batch, K = (size_t)s->num_classes, F = (size_t)r->feat;
  gboolean fo = forward_only;
  float *conv_out = NULL, *hidden[2] = {NULL, NULL}, *outs[2] = {NULL, NULL};
  CohortActCarver k = {.base = base};
  COHORT_ACT_TAKE(&k, r->img, B * s->channels * s->image_size * s->image_size, float);
  COHORT_ACT_TAKE(&k, r->labels, B, int);
  if (fo) {
    COHORT_ACT_TAKE(&k, conv_out, B * r->max_act, float);
    COHORT_ACT_TAKE(&k, hidden[0], B * r->max_act, float);
    COHORT_ACT_TAKE(&k, hidden[1], B * r->max_act, float);
    COHORT_ACT_TAKE(&k, outs[0], B * r->max_act, float);
    COHORT_ACT_TAKE(&k, outs[1], B * r->max_act, float);
  }
  take_unit(&k, &r->stem, B, fo, conv_out);
  size_t stem_n = B * r->stem.c_out * r->stem.h_out * r->stem.h_out;
  size_t pool_n = B * r->stem.c_out * r->pool_side * r->pool_side;
  if (fo) {
    /* block 0 reads outs[0]: the pooled stem, or the stem itself */
    r->stem_out = r->has_pool ? hidden[0] : outs[0];
    r->pool_out = r->has_pool ? outs[0] : NULL;
  } else {
    COHORT_ACT_TAKE(&k, r->stem_out, stem_n, float);
    if (r->has_pool)
      COHORT_ACT_TAKE(&k, r->pool_out, pool_n, float);
  }
  for (int i = 0; i < r->n_blocks; i++) {
    CohortResnetBlock *b = &r->blocks[i];
    for (int u = 0; u < b->n_units; u++)
      take_unit(&k, &b->unit[u], B, fo, conv_out);
    if (b->has_down)
      take_unit(&k, &b->down, B, fo, conv_out);
    for (int u = 0; u + 1 < b->n_units; u++) {
      const CohortResnetUnit *c = &b->unit[u];
      if (fo)
        b->hidden[u] = hidden[u];
      else
        COHORT_ACT_TAKE(&k, b->hidden[u], B * c->c_out * c->h_out * c->h_out, float);
    }
    const CohortResnetUnit *last = &b->unit[b->n_units - 1];
    if (fo)
      b->out = outs[(i + 1) % 2]; /* block i reads outs[i % 2] */
    else
      COHORT_ACT_TAKE(&k, b->out, B * last->c_out * last->h_out * last->h_out, float);
  }
  COHORT_ACT_TAKE(&k, r->pooled, B * F, float);
  COHORT_ACT_TAKE(&k, r->logits, B * K, float);
  COHORT_ACT_TAKE(&k, r->lse, B, float);
  COHORT_ACT_TAKE(&k, r->losses, B, float);
  COHORT_ACT_TAKE(&k, r->dconv, B * r->max_act, float); /* forward: the shortcut's output */
  COHORT_ACT_TAKE(&k, r->ones, (size_t)r->n_bn, float);
  if (!fo) {
    COHORT_ACT_TAKE(&k, r->dlogits, B * K, float);
    COHORT_ACT_TAKE(&k, r->dpooled, B * F, float);
    COHORT_ACT_TAKE(&k, r->da, B * r->max_act, float);
    COHORT_ACT_TAKE(&k, r->db, B * r->max_act, float);
    COHORT_ACT_TAKE(&k, r->dh[0], B * r->max_act, float);
    COHORT_ACT_TAKE(&k, r->dh[1], B * r->max_act, float);
    COHORT_ACT_TAKE(&k, r->sums, 2 * (size_t)r->max_c, float);
  }
  return k.used;
}

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

static gboolean resnet_tables(const CohortConfig *cfg, CohortFamilyTables *out)
{
  *out = (CohortFamilyTables){0};
  if (!resnet_check_config(cfg, NULL, NULL))
    return FALSE;
  CohortResnetShape s = cohort_family_resnet_shape(cfg);
  CohortResnetNet net;
  cohort_family_resnet_build(&s, &net, out);
  cohort_family_resnet_net_clear(&net);
  return TRUE;
}

static size_t resnet_act_bytes(const CohortConfig *cfg, int max_batch, gboolean forward_only)
{
  if (!resnet_check_config(cfg, NULL, NULL))
    return 0;
  CohortResnetShape s = cohort_family_resnet_shape(cfg);
  CohortResnetNet net;
  CohortFamilyTables t;
  cohort_family_resnet_build(&s, &net, &t);
  size_t bytes = cohort_family_resnet_layout(&net, &s, max_batch, forward_only, NULL);
  cohort_family_resnet_net_clear(&net);
  cohort_family_tables_clear(&t);
  return bytes;
}

const CohortFamilyDesc cohort_family_resnet = {
    .name = "resnet",
    .lora_targets = "fc",
    .check_config = resnet_check_config,
    .tables = resnet_tables,
    .act_bytes = resnet_act_bytes,
};
